//! inpool: a Cluster API IPAM provider that hands out addresses from in-cluster pools.
//!
//! Layout, from the bottom up (no module imports one above it):
//! - [`api`]: Kubernetes types (CAPI IPAM kinds we read and write, our pool CRDs, conditions);
//! - [`allocator`]: pure address arithmetic and allocation, no Kubernetes dependency;
//! - [`controllers`]: the registry, the watches that feed it, the claim and pool reconcilers,
//!   the audit;
//! - [`cli`], [`leader`]: the binary's flags and leader election;
//! - [`inspect`]: read-only views of pools and claims from the API (the demo, `kubectl inpool`);
//! - [`telemetry`]: logging, metrics and the health/metrics HTTP server.
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
pub mod telemetry;
