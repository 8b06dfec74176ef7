//! Pools: what inpool writes about each pool.
//!
//! - [`status`]: counts and conditions from the registry, deletion protection, and the per-pool
//!   metrics;
//! - [`reuse_grace`]: frees a released claim's address once its pool's reuse grace period is
//!   over.
pub(crate) mod reuse_grace;
pub(crate) mod status;
