//! Sources: what inpool learns from the API server.
//!
//! - [`watch`]: one watch per kind, shared by the stores, the registry feed and the controllers;
//!   it feeds the registry from pools, reservations and `IPAddress`es (re-lists included), wakes
//!   claims when capacity appears or their `IPAddress` vanished, and triggers the pool and
//!   reuse-grace controllers;
//! - [`claim_watch`]: the claim watch, read as the claim cache keeps claims;
//! - [`pool_kinds`]: the four pool kinds, listed once: each kind's pool cache, pool controller
//!   wake-ups and API;
//! - [`pool_cache`]: what the controllers read of each pool, kept from its watch;
//! - [`served`]: which pool kinds this run serves (a prefix kind without its CRD or RBAC is
//!   skipped, with a warning);
//! - [`subscription`]: a controller's share of a kind's one watch (the reuse-grace
//!   controller's released reservations);
//! - [`writers`]: other writers on inpool's pools (a second IPAM provider): foreign
//!   `IPAddress`es, and the reference provider's leader election Lease.
pub(crate) mod claim_watch;
pub(crate) mod pool_cache;
pub(crate) mod pool_kinds;
pub(crate) mod served;
pub(crate) mod subscription;
pub(crate) mod watch;
pub(crate) mod writers;
