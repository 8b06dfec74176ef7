//! What holds an address, and for whom: the records the registry keeps of reservations and
//! `IPAddress`es.
use std::net::IpAddr;
use std::sync::Arc;

use crate::allocator::{AddrRange, Subnet};
use crate::api::{ObjectKey, PoolKey, Scope};

/// What holds an address: a reservation object or an `IPAddress`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldRecord {
    pub pool: PoolKey,
    pub ip: IpAddr,
    /// The prefix length of the block held from `ip` on: the family's width for an address, the
    /// allocation length for a prefix pool's sub-prefix. Overlapping pools of other unit sizes
    /// count the whole block (see [`HoldRecord::block`]).
    pub length: u8,
    pub holder: Holder,
    /// Where the hold is unique: the reservation's scope, or the pool's for an `IPAddress`.
    pub scope: Scope,
}

impl HoldRecord {
    /// The prefix length that makes a record hold one address.
    pub fn address_length(ip: IpAddr) -> u8 {
        crate::allocator::Family::of(ip).bits()
    }

    /// Every address the record holds.
    pub fn block(&self) -> AddrRange {
        match Subnet::containing(self.ip, self.length) {
            Some(block) => block.range(),
            None => AddrRange::single(self.ip),
        }
    }
}

/// For whom an address is held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// A claim, by namespace and name.
    Claim(ObjectKey),
    /// Nobody any more: a released claim's reservation that keeps the address until its pool's
    /// reuse grace period is over. No claim recovers or releases it; only its expiry frees it.
    Released,
}

impl Holder {
    /// The claim that holds the address, if one does.
    pub fn claim(&self) -> Option<&ObjectKey> {
        match self {
            Holder::Claim(claim) => Some(claim),
            Holder::Released => None,
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Claim(claim) => write!(f, "claim {claim}"),
            Holder::Released => f.write_str("released, in the reuse grace period"),
        }
    }
}

/// The names of the reservations that record one claim: nearly always one, which costs no
/// allocation of its own (memory per claim).
#[derive(Clone, Debug)]
pub(super) enum ReservationNames {
    One(Arc<str>),
    Many(Vec<Arc<str>>),
}

impl ReservationNames {
    pub(super) fn iter(&self) -> impl Iterator<Item = &Arc<str>> {
        match self {
            ReservationNames::One(name) => std::slice::from_ref(name).iter(),
            ReservationNames::Many(names) => names.iter(),
        }
    }

    pub(super) fn insert(&mut self, name: &Arc<str>) {
        if self.iter().any(|n| n == name) {
            return;
        }
        match self {
            ReservationNames::One(one) => {
                *self = ReservationNames::Many(vec![one.clone(), name.clone()])
            }
            ReservationNames::Many(names) => names.push(name.clone()),
        }
    }

    /// Removes `name`; returns whether none is left.
    pub(super) fn remove(&mut self, name: &str) -> bool {
        match self {
            ReservationNames::One(one) => &**one == name,
            ReservationNames::Many(names) => {
                names.retain(|n| &**n != name);
                names.is_empty()
            }
        }
    }
}

/// Whether claims of one namespace can reach pools of both scopes.
pub(super) fn scopes_meet(a: &Scope, b: &Scope) -> bool {
    a == b || *a == Scope::Cluster || *b == Scope::Cluster
}
