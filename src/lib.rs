//! inpool: a Cluster API IPAM provider that hands out addresses from in-cluster pools.
//!
//! Layout, from the bottom up: a module imports only modules of its own layer or below
//! (`tests/offline/architecture.rs` reads the `use crate::` lines and holds the code to this):
//! - [`allocator`]: pure address arithmetic and allocation, no Kubernetes dependency;
//! - [`api`]: Kubernetes types (CAPI IPAM kinds we read and write, our pool CRDs, conditions);
//! - [`settings`]: the plain settings the parts below take from the command line;
//! - [`telemetry`]: logging, metrics and the health/metrics HTTP server;
//! - [`controllers`]: the registry, the watches that feed it, the claim and pool reconcilers,
//!   the audit, and the runtime they share;
//! - [`leader`]: leader election;
//! - [`inspect`]: read-only views of pools and claims from the API (the demo, `kubectl inpool`);
//! - [`cli`]: the binary's flags, parsed into the settings.
//!
//! The test bench (the local control plane, the CAPI and CAPV harnesses, the demo) is the
//! `inpool-testenv` crate in `testenv/`, which this crate does not depend on.
#![forbid(unsafe_code)]

pub mod allocator;
pub mod api;
pub mod cli;
pub mod controllers;
pub mod inspect;
pub mod leader;
pub mod settings;
pub mod telemetry;
