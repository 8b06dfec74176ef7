//! One pool as the registry keeps it: its spec, its allocator, the holds counted in it, the
//! allocations in flight and the claims waiting, in order.
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use super::{HoldRecord, QueuedClaim, Unready, scopes_meet};
use crate::allocator::{AnyAllocator, ParsedSpec};
use crate::api::{ObjectKey, PoolKey};

#[derive(Default)]
pub(super) struct PoolEntry {
    /// What [`super::Registry::set_pool`] was last given: a pool event that does not change it (its
    /// status, most often) changes nothing here.
    pub(super) source: Option<Result<ParsedSpec, Unready>>,
    pub(super) state: Option<Result<AnyAllocator, Unready>>,
    /// Prefix (an IP pool's subnet's, a prefix pool's allocation length) and gateway of a ready
    /// pool, copied onto every `IPAddress`.
    pub(super) network: Option<(u8, Option<IpAddr>)>,
    /// Records holding each unit (see [`Self::unit`]).
    pub(super) holds: HashMap<IpAddr, u32>,
    /// Addresses being allocated by this process, as the caller gave them (not mapped to their
    /// unit): [`super::Registry::finish`] then removes exactly what
    /// [`super::Registry::hold_in_flight`] added, whatever the pool's state in between (a pool
    /// paused meanwhile has no allocator to map with). Compare with [`Self::unit`] through
    /// [`Self::unit_in_flight`].
    pub(super) in_flight: HashSet<IpAddr>,
    pub(super) waiting: BTreeSet<QueuedClaim>,
}

impl PoolEntry {
    /// The address that stands for what `ip` uses in this pool: `ip`, or in a prefix pool the
    /// first address of its sub-prefix. Holds and allocations in flight are keyed by it, so that
    /// two records inside one sub-prefix count as two holds of it.
    pub(super) fn unit(&self, ip: IpAddr) -> IpAddr {
        match &self.state {
            Some(Ok(allocator)) => allocator.unit_of(ip),
            _ => ip,
        }
    }

    /// Whether an allocation in flight uses the unit `unit` (an address from [`Self::unit`]).
    pub(super) fn unit_in_flight(&self, unit: IpAddr) -> bool {
        self.in_flight.iter().any(|ip| self.unit(*ip) == unit)
    }

    pub(super) fn allocator(&mut self) -> Option<&mut AnyAllocator> {
        match &mut self.state {
            Some(Ok(allocator)) => Some(allocator),
            _ => None,
        }
    }

    pub(super) fn free(&self) -> u128 {
        match &self.state {
            Some(Ok(allocator)) => allocator.counts().free,
            _ => 0,
        }
    }

    pub(super) fn range(&self) -> Option<&crate::allocator::AddressSet> {
        match &self.state {
            Some(Ok(allocator)) => Some(allocator.range()),
            _ => None,
        }
    }

    /// Whether `record` uses an address of this pool (see the module docs).
    pub(super) fn is_held_by(&self, key: &PoolKey, record: &HoldRecord) -> bool {
        record.pool == *key
            || (scopes_meet(&key.scope(), &record.scope)
                && self.range().is_some_and(|r| r.contains(record.ip)))
    }

    pub(super) fn hold(&mut self, ip: IpAddr) {
        let ip = self.unit(ip);
        *self.holds.entry(ip).or_default() += 1;
        if let Some(allocator) = self.allocator() {
            allocator.mark_used(ip);
        }
    }

    /// Returns true when the address became free.
    pub(super) fn unhold(&mut self, ip: IpAddr) -> bool {
        let ip = self.unit(ip);
        let Some(count) = self.holds.get_mut(&ip) else {
            return false;
        };
        *count -= 1;
        if *count > 0 {
            return false;
        }
        self.holds.remove(&ip);
        if self.unit_in_flight(ip) {
            return false;
        }
        self.allocator().is_some_and(|a| a.release(ip))
    }

    /// Whether the entry only remembers a pool that no longer exists (or never did) and nothing
    /// refers to it: then it can go.
    pub(super) fn is_forgettable(&self) -> bool {
        matches!(self.state, None | Some(Err(Unready::Missing)))
            && self.holds.is_empty()
            && self.in_flight.is_empty()
            && self.waiting.is_empty()
    }

    /// Re-marks every hold and in-flight address in a fresh allocator.
    pub(super) fn remark(&mut self) {
        let used: Vec<IpAddr> = self
            .holds
            .keys()
            .chain(self.in_flight.iter())
            .copied()
            .collect();
        if let Some(allocator) = self.allocator() {
            for ip in used {
                allocator.mark_used(ip);
            }
        }
    }

    /// The first claims of the queue that the free addresses can serve, or the whole queue when
    /// the pool is not ready (their condition may need to change).
    pub(super) fn wakeups(&self) -> Vec<ObjectKey> {
        let free = usize::try_from(self.free()).unwrap_or(usize::MAX);
        let take = match &self.state {
            Some(Ok(_)) => free,
            _ => usize::MAX,
        };
        self.waiting
            .iter()
            .take(take)
            .map(|q| q.claim.clone())
            .collect()
    }
}
