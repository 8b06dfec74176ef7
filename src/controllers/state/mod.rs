//! State: the pure in-memory picture inpool keeps, with no API calls.
//!
//! - [`registry`]: every pool inpool serves, the addresses held in it and the claims waiting for
//!   one, fed one [`Change`] at a time;
//! - [`facts`]: what an API object tells the registry (a pool's state, an `IPAddress`'s hold);
//! - [`reservation`]: the reservation object whose name makes the API server enforce uniqueness,
//!   and what it tells the registry;
//! - [`plan`]: what a claim needs next, decided from the registry alone.
pub(crate) mod facts;
#[cfg(test)]
pub(crate) mod fixtures;
pub(crate) mod plan;
pub(crate) mod registry;
pub(crate) mod reservation;

pub(crate) use registry::{
    Allocation, Change, HoldRecord, Holder, ListedHolds, PreAllocationConflict, PreAllocationState,
    QueuedClaim, Registry, Ticket, Unready,
};
