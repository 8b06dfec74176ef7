//! What the integration tests share, one helper per job (`use inpool_testenv::common::*` in each
//! test module, beside [`crate::support`], which starts the control plane):
//!
//! - [`objects`]: builders for pools, claims and Clusters, and `create`;
//! - [`wait`]: the one poll loop ([`wait_for`]) and the waits built on it;
//! - [`reads`]: what the API server says about claims, addresses and reservations;
//! - [`controller`]: an in-process controller for one namespace, audited;
//! - [`packaging`]: the rendered components and inpool's ServiceAccount;
//! - [`process`]: the `inpool` binary as a process (logs, `/metrics`, `/healthz`, signals);
//! - [`consumers`]: what the tests with a real infrastructure provider share;
//! - [`invariants`]: every invariant of the claims, addresses, reservations and pools of a
//!   namespace, checked at once.

pub mod consumers;
pub mod controller;
pub mod deployment;
pub mod flow_control;
pub mod invariants;
pub mod objects;
pub mod packaging;
pub mod process;
pub mod reads;
pub mod wait;

// One flat namespace for the test modules (`use common::*`).
pub use consumers::*;
pub use controller::*;
pub use deployment::*;
pub use flow_control::*;
pub use invariants::*;
pub use objects::*;
pub use packaging::*;
pub use process::*;
pub use reads::*;
pub use wait::*;
