//! State: the pure in-memory picture inpool keeps, with no API calls.
//!
//! - [`registry`]: every pool inpool serves, the addresses held in it and the claims waiting for
//!   one, fed one [`Change`] at a time;
//! - [`facts`]: what an API object tells the registry (a pool's state, an `IPAddress`'s hold);
//! - [`reservation`]: the reservation object whose name makes the API server enforce uniqueness,
//!   and what it tells the registry;
//! - [`plan`]: what a claim needs next, decided from the registry alone.
use std::hash::{DefaultHasher, Hash, Hasher};

pub(crate) mod facts;
#[cfg(test)]
pub(crate) mod fixtures;
pub(crate) mod plan;
pub(crate) mod registry;
pub(crate) mod reservation;

/// A 64-bit fingerprint of `value`, for what is kept only to be compared, never read (a pool's
/// spec in the registry, its status's texts in the pool cache): equal values give equal
/// fingerprints within the process, two different ones the same with a chance of 2^-64 per
/// comparison (what that would cost, each caller says). std's `DefaultHasher` (SipHash with
/// fixed keys) is enough: no input is chosen to collide, and nothing leaves the process.
pub(crate) fn fingerprint<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

pub(crate) use registry::{
    Allocation, Change, HoldRecord, Holder, InFlight, ListedHolds, PreAllocationConflict,
    PreAllocationState, QueuedClaim, Registry, Ticket, Unready,
};
