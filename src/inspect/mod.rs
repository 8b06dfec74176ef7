//! Read-only views of inpool's pools and claims, built from the API alone (no access to a running
//! inpool): the demo's live picture and the `kubectl inpool` plugin (`src/bin/kubectl-inpool.rs`)
//! share them.
//!
//! - [`Snapshot`]: every pool (counts, waiting claims, conditions) and every claim (Ready, reason,
//!   message, address, place in its pool's queue), cluster-wide or in one namespace.
//! - [`who_has`]: which claim, `IPAddress` and reservation hold an address.
//! - [`why`]: what a claim is waiting for: its condition, its pool, its Cluster's pause.
//!
//! A waiting claim's place in the queue is computed as inpool's registry orders it: by creation
//! time, then namespace and name (first come, first served).
//!
//! One concern a file:
//! - [`snapshot`]: the [`Snapshot`], read from the API (every pool kind, the claims and the
//!   `IPAddress`es), and what it says about them as a whole (settled, all Ready);
//! - [`rows`]: one pool's row (its counts, waiting and realised claims, conditions) and one
//!   claim's (its condition, address and place in its pool's queue);
//! - [`render`]: the rows as plain-text tables, and the demo's picture;
//! - [`subnets`]: naming and counting the subnets of a pool that spans several;
//! - [`holders`]: [`who_has`], and the demo's account of pre-allocations and subnets;
//! - [`explain`]: [`why`] a claim waits.

mod explain;
mod holders;
mod render;
mod rows;
mod snapshot;
mod subnets;

pub use explain::{Why, why};
pub use holders::{Holder, pre_allocations_and_subnets, who_has};
pub use render::table;
pub use rows::{ClaimRow, PoolRow};
pub use snapshot::Snapshot;
pub use subnets::{subnet_counts, subnet_named};
