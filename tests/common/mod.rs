//! What the integration tests share, one helper per job (`mod common;` in each test file, beside
//! `mod support;`, which starts the control plane):
//!
//! - [`objects`]: builders for pools, claims and Clusters, and `create`;
//! - [`wait`]: the one poll loop ([`wait_for`]) and the waits built on it;
//! - [`reads`]: what the API server says about claims, addresses and reservations;
//! - [`controller`]: an in-process controller for one namespace, audited;
//! - [`packaging`]: the rendered components and inpool's ServiceAccount;
//! - [`process`]: the `inpool` binary as a process (logs, `/metrics`, `/healthz`, signals);
//! - [`invariants`]: every invariant of the claims, addresses, reservations and pools of a
//!   namespace, checked at once.
//!
//! `props.rs` is not part of it: the property tests include it alone (`#[path]`), without the
//! Kubernetes helpers.
#![allow(dead_code)] // each test file uses a different part

pub mod controller;
pub mod invariants;
pub mod objects;
pub mod packaging;
pub mod process;
pub mod reads;
pub mod wait;

// One flat namespace for the test files (`use common::*`); each uses a different part.
#[allow(unused_imports)]
pub use controller::*;
#[allow(unused_imports)]
pub use invariants::*;
#[allow(unused_imports)]
pub use objects::*;
#[allow(unused_imports)]
pub use packaging::*;
#[allow(unused_imports)]
pub use process::*;
#[allow(unused_imports)]
pub use reads::*;
#[allow(unused_imports)]
pub use wait::*;
