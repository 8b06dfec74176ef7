//! inpool: a Cluster API IPAM provider that hands out addresses from in-cluster pools.
//!
//! Layout:
//! - [`api`]: Kubernetes types (CAPI IPAM kinds we read and write, our pool CRDs, conditions);
//! - [`allocator`]: pure address arithmetic and allocation, no Kubernetes dependency;
//! - [`testenv`]: the local control plane built from `testenv/`, for the tests and the demo.
#![forbid(unsafe_code)]

pub mod allocator;
pub mod api;
pub mod cli;
pub mod controllers;
pub mod leader;
pub mod telemetry;
pub mod testenv;
