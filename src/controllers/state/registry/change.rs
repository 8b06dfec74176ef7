//! The facts the registry is told: one [`Change`] per watch event, fresh list or own write, and
//! why a pool cannot hand out addresses ([`Unready`]).
use crate::allocator::ParsedSpec;
use crate::api::{ObjectKey, PoolKey, PoolKind};

use super::HoldRecord;

/// One fact learnt from the API: an event of a watch, a fresh list, or an object inpool itself
/// has just written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Pool(PoolKey, Result<ParsedSpec, Unready>),
    PoolGone(PoolKey),
    /// Every pool of this kind that exists now (a re-list or the audit's list).
    PoolsListed(PoolKind, Vec<(PoolKey, Result<ParsedSpec, Unready>)>),
    /// A reservation object by name, with what it holds.
    Reservation(String, HoldRecord),
    ReservationGone(String),
    /// Every reservation that exists now.
    ReservationsListed(Vec<(String, HoldRecord)>),
    /// An `IPAddress` of one of inpool's pools, by namespace/name.
    Address(ObjectKey, HoldRecord),
    AddressGone(ObjectKey),
    /// Every `IPAddress` of inpool's pools that exists now.
    AddressesListed(Vec<(ObjectKey, HoldRecord)>),
}

/// The object a [`Change`] is about, in the order diffs list them.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Subject<'a> {
    Pool(&'a PoolKey),
    Pools(PoolKind),
    Reservation(&'a str),
    Reservations,
    Address(&'a ObjectKey),
    Addresses,
}

impl Change {
    pub(super) fn subject(&self) -> Subject<'_> {
        match self {
            Change::Pool(key, _) | Change::PoolGone(key) => Subject::Pool(key),
            Change::PoolsListed(kind, _) => Subject::Pools(*kind),
            Change::Reservation(name, _) | Change::ReservationGone(name) => {
                Subject::Reservation(name)
            }
            Change::ReservationsListed(_) => Subject::Reservations,
            Change::Address(key, _) | Change::AddressGone(key) => Subject::Address(key),
            Change::AddressesListed(_) => Subject::Addresses,
        }
    }

    pub(super) fn is_removal(&self) -> bool {
        matches!(
            self,
            Change::PoolGone(_) | Change::ReservationGone(_) | Change::AddressGone(_)
        )
    }

    /// What the change is about, for logs and the drift metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Change::Pool(..) | Change::PoolGone(_) | Change::PoolsListed(..) => "pool",
            Change::Reservation(..)
            | Change::ReservationGone(_)
            | Change::ReservationsListed(_) => "reservation",
            Change::Address(..) | Change::AddressGone(_) | Change::AddressesListed(_) => "address",
        }
    }
}

/// Why a pool cannot hand out addresses now.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Unready {
    Missing,
    Invalid(String),
    Deleting,
    Paused,
    /// A pool with no addresses of its own waits for its first sub-prefix of this parent
    /// (`spec.parentPool`).
    Carving(PoolKey),
}
