//! The controllers, in rooms that follow what inpool does with a claim:
//!
//! - `sources`: the watches, one per kind, that keep the stores and feed `state` (and the
//!   check of which pool kinds this run serves);
//! - `state`: the pure in-memory picture (the registry of pools, holds and waiting claims, what
//!   an API object tells it, and the planner that decides a claim's next step from it);
//! - `claims`: the `IPAddressClaim` reconciler, which performs the planned steps against the
//!   API server, with the claim cache it reads and the record of its own writes;
//! - `pools`: pool status, conditions and deletion protection, and the end of reuse grace
//!   periods;
//! - `audit`: the periodic check of `state` against the API server, and stray collection;
//! - `runtime`: what every controller uses and no room knows of: the controller loop and its
//!   work queue, errors and backoff, finalizers and Events; it imports no other room.
//!
//! Above the rooms that read it, and below those that act on it:
//! - `context`: the shared [`Context`](context::Context) every reconciler runs with;
//! - `feed`: what the watches saw, applied to the context;
//! - [`run`]: the wiring of all of it, for as long as the process leads.
//!
//! No circle of files spans two rooms (`tests/offline/architecture.rs`).
//!
//! Only [`run`], [`footprint`] (what the memory benchmark measures) and the bound on a silent
//! API connection the binary's client applies ([`API_READ_TIMEOUT`]) are public: everything
//! else is the controller's own.
pub(crate) mod audit;
pub(crate) mod claims;
pub(crate) mod context;
pub(crate) mod feed;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod footprint;
pub(crate) mod pools;
mod run;
pub(crate) mod runtime;
pub(crate) mod sources;
pub(crate) mod state;

pub use run::run;
pub use sources::watch::API_READ_TIMEOUT;
/// How inpool reads a pool (public: the tests' invariant check reads pools as inpool does).
pub use state::facts::{carved_gateway, parse_pool};
