//! What the registry answers: pool status (counts, queue, overlaps, out-of-range holds), a
//! claim's holds, and where a new reservation is named.
use std::collections::HashSet;
use std::net::IpAddr;

use super::pool_entry::PoolEntry;
use super::{HoldRecord, Holder, QueuedClaim, Registry, ReservationNames, Unready, scopes_meet};
use crate::api::{ObjectKey, PoolKey};

impl Registry {
    /// Whether the pool hands out addresses now, or why not (`Missing` for a pool never seen).
    pub fn readiness(&self, key: &PoolKey) -> Result<(), Unready> {
        match self.pools.get(key).and_then(|entry| entry.state.as_ref()) {
            Some(Ok(_)) => Ok(()),
            Some(Err(unready)) => Err(unready.clone()),
            None => Err(Unready::Missing),
        }
    }

    /// Whether the pool is known and paused (its claims are then not queued).
    pub fn is_paused(&self, key: &PoolKey) -> bool {
        self.pools
            .get(key)
            .is_some_and(|entry| matches!(entry.state, Some(Err(Unready::Paused))))
    }

    /// Prefix and gateway of a ready pool's own subnet (a prefix pool's allocation length).
    pub fn network(&self, key: &PoolKey) -> Option<(u8, Option<IpAddr>)> {
        self.pools
            .get(key)
            .and_then(|e| e.networks.as_ref())
            .map(|n| n.own())
    }

    /// The address family of a ready pool.
    pub fn family(&self, key: &PoolKey) -> Option<crate::allocator::Family> {
        self.pools.get(key)?.range().map(|range| range.family())
    }

    /// Prefix and gateway that the `IPAddress` of `ip` from a ready pool carries: those of the
    /// subnet `ip` lies in.
    pub fn network_of(&self, key: &PoolKey, ip: IpAddr) -> Option<(u8, Option<IpAddr>)> {
        self.pools
            .get(key)
            .and_then(|e| e.networks.as_ref())
            .map(|n| n.of(ip))
    }

    #[cfg(test)]
    pub fn free(&self, key: &PoolKey) -> u128 {
        self.pools.get(key).map_or(0, |entry| entry.free())
    }

    pub fn counts(&self, key: &PoolKey) -> Option<crate::allocator::Counts> {
        match &self.pools.get(key)?.state {
            Some(Ok(allocator)) => Some(allocator.counts()),
            _ => None,
        }
    }

    /// How many entries each of the registry's maps holds: what its memory grows with.
    pub fn sizes(&self) -> crate::telemetry::metrics::RegistrySizes {
        debug_assert_eq!(
            self.waiting_claims,
            self.pools.values().map(|e| e.waiting.len()).sum::<usize>(),
            "the total of waiting claims follows the queues"
        );
        crate::telemetry::metrics::RegistrySizes {
            pools: self.pools.len(),
            reservations: self.reservations.len(),
            claims_reserved: self.reservations_by_claim.len(),
            addresses: self.addresses.len(),
            in_flight: self.in_flight.len(),
            waiting: self.waiting_claims,
            deletions: self.deletions.len(),
        }
    }

    pub fn waiting(&self, key: &PoolKey) -> usize {
        self.pools.get(key).map_or(0, |e| e.waiting.len())
    }

    /// The `IPAddress` this process has seen for a claim (same name, same namespace).
    pub fn address_of(&self, claim: &ObjectKey) -> Option<&HoldRecord> {
        self.addresses.get(claim)
    }

    /// Reservations that name this claim (normally at most one; more after a race between two
    /// processes, until the loser cleans up).
    pub fn reservations_of(&self, claim: &ObjectKey) -> Vec<(String, HoldRecord)> {
        self.reservations_by_claim
            .get(claim)
            .into_iter()
            .flat_map(ReservationNames::iter)
            .filter_map(|name| Some((name.to_string(), self.reservations.get(name)?.clone())))
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_iter()
            .collect()
    }

    /// Addresses held for this pool that lie outside its range (after a shrink), with their
    /// claims, lowest first.
    pub fn out_of_range(&self, pool: &PoolKey) -> Vec<(IpAddr, Holder)> {
        let Some(entry) = self.pools.get(pool) else {
            return Vec::new();
        };
        // Nearly always none: then no record need be looked at.
        let Some(range) = entry.range().filter(|_| entry.own.outside > 0) else {
            return Vec::new();
        };
        let mut held: Vec<(IpAddr, Holder)> = self
            .reservations
            .values()
            .chain(self.addresses.values())
            .filter(|r| &r.pool == pool && !range.contains(r.ip))
            .map(|r| (r.ip, r.holder.clone()))
            .collect();
        held.sort_by(|a, b| (a.0, a.1.claim()).cmp(&(b.0, b.1.claim())));
        held.dedup();
        held
    }

    /// Other pools that share addresses with this one and that claims of one namespace can
    /// reach together with it, with the first shared range.
    pub fn overlaps(&self, pool: &PoolKey) -> Vec<(PoolKey, crate::allocator::AddrRange)> {
        let Some(entry) = self.pools.get(pool) else {
            return Vec::new();
        };
        let Some(range) = entry.range() else {
            return Vec::new();
        };
        // Sorted by key, as the index answers.
        self.by_range
            .meeting_set(range)
            .into_iter()
            .filter(|key| key != pool && scopes_meet(&key.scope(), &pool.scope()))
            .filter_map(|key| {
                let other = self.pools.get(&key)?;
                let shared = range.first_overlap(other.range()?)?;
                // A parent and a pool carved from it share the carved subnets by design.
                let by_design = entry.is_carved_range(shared) || other.is_carved_range(shared);
                (!by_design).then_some((key, shared))
            })
            .collect()
    }

    /// Whether a pool still holds anything inside `block`: a record of its own (a reservation,
    /// an `IPAddress`, an allocation in flight) or a subnet of its spec. A claim that carved
    /// `block` for it is released only when neither is left.
    pub fn holds_within(&self, pool: &PoolKey, block: crate::allocator::Subnet) -> bool {
        let range = block.range();
        let own = self
            .reservations
            .values()
            .chain(self.addresses.values())
            .chain(self.in_flight.iter())
            .any(|r| &r.pool == pool && range.contains(r.ip));
        own || self
            .pools
            .get(pool)
            .and_then(|entry| entry.range())
            .is_some_and(|r| r.meets(range))
    }

    /// Whether anything still holds an address *for* this pool (its own reservations and
    /// addresses, or an allocation in flight): a pool is not let go while it does.
    pub fn has_own_holds(&self, pool: &PoolKey) -> bool {
        self.pools
            .get(pool)
            .is_some_and(|entry| entry.own.records > 0)
    }

    /// Every reservation that holds an address of `pool`, by name.
    pub fn reservations_in(&self, pool: &PoolKey) -> Vec<(String, HoldRecord)> {
        self.reservations
            .iter()
            .filter(|(_, r)| &r.pool == pool)
            .map(|(name, r)| (name.to_string(), r.clone()))
            .collect()
    }

    /// Pools whose spec is known, for status reporting.
    pub fn pool_keys(&self) -> Vec<PoolKey> {
        self.pools.keys().cloned().collect()
    }

    /// Whether `claim` waits in the pool's queue.
    pub fn is_waiting(&self, pool: &PoolKey, claim: &QueuedClaim) -> bool {
        self.pools
            .get(pool)
            .is_some_and(|entry| entry.waiting.contains(claim))
    }

    /// Whether this process is allocating `ip` in `pool` now (between its reservation and its
    /// `IPAddress`).
    pub fn is_in_flight(&self, pool: &PoolKey, ip: IpAddr) -> bool {
        self.pools
            .get(pool)
            .is_some_and(|entry| self.unit_in_flight(pool, entry, entry.unit(ip)))
    }

    /// Whether an allocation of this process in `pool` uses the unit `unit` of `entry`.
    fn unit_in_flight(&self, pool: &PoolKey, entry: &PoolEntry, unit: IpAddr) -> bool {
        self.in_flight
            .iter()
            .any(|r| &r.pool == pool && entry.unit(r.ip) == unit)
    }

    /// The reservations of `pool` that record a claim, that no `IPAddress` known here holds (the
    /// same unit of the same pool) and that no allocation of this process is completing, by
    /// name: where a stray reservation may be (see `controllers::audit`).
    pub fn unheld_reservations(&self, pool: &PoolKey) -> Vec<(String, HoldRecord)> {
        let Some(entry) = self.pools.get(pool) else {
            return Vec::new();
        };
        let held: HashSet<IpAddr> = self
            .addresses
            .values()
            .filter(|a| &a.pool == pool)
            .map(|a| entry.unit(a.ip))
            .collect();
        let mut unheld: Vec<(String, HoldRecord)> = self
            .reservations
            .iter()
            .filter(|(_, r)| &r.pool == pool && r.holder.claim().is_some())
            .filter(|(_, r)| {
                let unit = entry.unit(r.ip);
                !held.contains(&unit) && !self.unit_in_flight(pool, entry, unit)
            })
            .map(|(name, r)| (name.to_string(), r.clone()))
            .collect();
        unheld.sort_by(|a, b| a.0.cmp(&b.0));
        unheld
    }
}
