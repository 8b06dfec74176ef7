//! One pool as the registry keeps it: its spec's fingerprint, its allocator, the holds counted in
//! it (the allocations in flight among them) and the claims waiting, in order.
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use super::pre_allocations::PreAllocations;
use super::{HoldRecord, QueuedClaim, Unready, scopes_meet};
use crate::allocator::{AddrRange, AnyAllocator, Footprint, Networks, ParsedSpec, Subnet};
use crate::api::{ObjectKey, PoolKey};

#[derive(Default)]
pub(super) struct PoolEntry {
    /// What [`super::Registry::set_pool`] was last given: a pool event that does not change it (its
    /// status, most often) changes nothing here.
    pub(super) spec: Option<SpecFingerprint>,
    pub(super) state: Option<Result<AnyAllocator, Unready>>,
    /// Prefix (an IP pool's subnet's, a prefix pool's allocation length) and gateway of a ready
    /// pool, by subnet, copied onto every `IPAddress`.
    pub(super) networks: Option<Networks>,
    /// Records (reservations, `IPAddress`es and allocations in flight) holding each unit (see
    /// [`Footprint::Unit`]).
    pub(super) holds: HashMap<IpAddr, u32>,
    /// Records holding a block larger than one unit of this pool (see [`Footprint::Units`]): only
    /// overlapping pools of another unit size make them, so there are few, and letting go of one
    /// rebuilds the allocator.
    pub(super) covering: HashMap<Subnet, u32>,
    /// The claims waiting for an address of this pool, in the order they are served. Changed
    /// only through [`PoolEntry::enqueue`] and the `unqueue` methods, whose counts keep the
    /// registry's total of waiting claims.
    pub(super) waiting: BTreeSet<QueuedClaim>,
    /// The pool's own records among its holds, so that the status controller's questions about
    /// them cost nothing while their answer is "none".
    pub(super) own: OwnHolds,
    /// The spec's pre-allocations (see [`super::pre_allocations`]), and the notes about realised
    /// claims whose entry changed, for the pool's Events.
    pub(super) pre_allocations: PreAllocations,
    pub(super) pre_allocation_notes: Vec<String>,
    /// The units of this pool's range that entries of other ready pools pre-allocate, where
    /// claims of one namespace can reach both pools; sorted. Kept from first-fit and counted used
    /// as the pool's own entries are (see [`super::pre_allocations`]).
    pub(super) kept_for_others: Vec<IpAddr>,
    /// The subnets a parent holds for this pool, whole (see [`ParsedSpec::carved`]): the
    /// parent's hold of one is not a use of this pool's addresses.
    pub(super) carved: Vec<Subnet>,
}

/// A fingerprint of a pool's parsed spec, or of why it has none. The registry keeps what it builds
/// from a spec (the allocator, the networks, the pre-allocations) and only compares the spec
/// itself, to skip a pool event that changes nothing: keeping the spec for that cost more memory
/// than the allocator built from it. Equal specs give equal fingerprints, two different ones the
/// same with a chance of 2^-64 per comparison; the registry would then serve the old spec until
/// the pool changes again or inpool restarts, and the API server would still refuse an address
/// twice (reservations are the arbiter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SpecFingerprint(u64);

impl SpecFingerprint {
    pub(super) fn of(parsed: &Result<ParsedSpec, Unready>) -> SpecFingerprint {
        SpecFingerprint(crate::controllers::state::fingerprint(parsed))
    }
}

/// How many of the records held in a pool are the pool's own (reservations, `IPAddress`es and
/// allocations in flight for it), and how many of those lie outside its range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct OwnHolds {
    pub(super) records: u32,
    pub(super) outside: u32,
}

impl PoolEntry {
    /// What a record's block uses in this pool. Without an allocator (the pool is not ready) a
    /// record counts as its address: the holds are counted again when the pool's state changes.
    pub(super) fn footprint(&self, record: &HoldRecord) -> Footprint {
        match &self.state {
            Some(Ok(allocator)) => allocator.footprint(record.ip, record.length),
            _ => Footprint::Unit(record.ip),
        }
    }

    /// The address that stands for the unit `ip` uses in this pool: `ip`, or in a prefix pool the
    /// first address of its sub-prefix (`ip` while the pool is not ready).
    pub(super) fn unit(&self, ip: IpAddr) -> IpAddr {
        match &self.state {
            Some(Ok(allocator)) => allocator.unit_of(ip),
            _ => ip,
        }
    }

    /// The prefix length of one unit of a ready pool.
    pub(super) fn unit_length(&self) -> Option<u8> {
        match &self.state {
            Some(Ok(allocator)) => Some(allocator.unit_length()),
            _ => None,
        }
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

    /// Whether `record` uses an address of this pool (see the module docs): it is the pool's own,
    /// or its block shares an address with the pool's range and claims of one namespace can
    /// reach both pools.
    pub(super) fn is_held_by(&self, key: &PoolKey, record: &HoldRecord) -> bool {
        record.pool == *key
            || (scopes_meet(&key.scope(), &record.scope)
                && self.range().is_some_and(|r| r.meets(record.block()))
                && !self.is_carved_for_it(record))
    }

    /// Whether `record` is a claim on a parent covering a whole subnet carved for this pool: the
    /// parent's hold of it, or, down a chain of carved pools (a /48 → its /56 → a /64), an
    /// ancestor's hold of the sub-prefix the parent itself carved. Only claims that carve (see
    /// [`crate::api::carve`]) are such holds; any other hold that meets the pool uses it.
    pub(super) fn is_carved_for_it(&self, record: &HoldRecord) -> bool {
        let carves = record
            .holder
            .claim()
            .is_some_and(|claim| crate::api::carve::carving_pool(claim).is_some());
        let held = record.block();
        carves
            && self
                .carved
                .iter()
                .any(|subnet| held.contains_range(subnet.range()))
    }

    /// Whether `range` lies inside a subnet carved for this pool from a parent.
    pub(super) fn is_carved_range(&self, range: AddrRange) -> bool {
        self.carved
            .iter()
            .any(|subnet| subnet.range().contains_range(range))
    }

    /// Whether `record` of this pool (`key`) lies outside its range. A pool that is not ready
    /// has no range: its records are counted again when it gets one.
    fn is_own_outside(&self, record: &HoldRecord) -> bool {
        self.range().is_some_and(|range| !range.contains(record.ip))
    }

    pub(super) fn hold(&mut self, key: &PoolKey, record: &HoldRecord) {
        if record.pool == *key {
            self.own.records += 1;
            self.own.outside += u32::from(self.is_own_outside(record));
        }
        match self.footprint(record) {
            Footprint::Unit(unit) => {
                *self.holds.entry(unit).or_default() += 1;
                if let Some(allocator) = self.allocator() {
                    allocator.mark_used(unit);
                }
            }
            Footprint::Units(block) => {
                *self.covering.entry(block).or_default() += 1;
                if let Some(allocator) = self.allocator() {
                    allocator.mark_block_used(block);
                }
            }
        }
    }

    /// Takes one record's hold back; returns true when addresses became free.
    pub(super) fn unhold(&mut self, key: &PoolKey, record: &HoldRecord) -> bool {
        if record.pool == *key {
            self.own.records = self.own.records.saturating_sub(1);
            if self.is_own_outside(record) {
                self.own.outside = self.own.outside.saturating_sub(1);
            }
        }
        match self.footprint(record) {
            Footprint::Unit(unit) => {
                if !release_one(&mut self.holds, unit)
                    || self.is_covered(unit)
                    || self.is_pre_allocated(unit)
                {
                    return false;
                }
                self.allocator().is_some_and(|a| a.release(unit))
            }
            Footprint::Units(block) => {
                if !release_one(&mut self.covering, block) {
                    return false;
                }
                let free = self.free();
                self.rebuild();
                self.free() > free
            }
        }
    }

    /// Whether a block larger than one unit still holds `unit`.
    fn is_covered(&self, unit: IpAddr) -> bool {
        self.covering.keys().any(|block| block.contains(unit))
    }

    /// Queues `claim`; returns how many claims joined the queue (0 if it was in it already).
    pub(super) fn enqueue(&mut self, claim: QueuedClaim) -> usize {
        usize::from(self.waiting.insert(claim))
    }

    /// Takes `claim` out of the queue; returns how many claims left it (0 or 1). See
    /// [`PoolEntry::unqueue_where`].
    pub(super) fn unqueue(&mut self, claim: &QueuedClaim) -> usize {
        let left = usize::from(self.waiting.remove(claim));
        self.give_back_empty_queue();
        left
    }

    /// Takes out of the queue the claims `leaves` picks; returns how many left.
    pub(super) fn unqueue_where(&mut self, mut leaves: impl FnMut(&ObjectKey) -> bool) -> usize {
        let before = self.waiting.len();
        self.waiting.retain(|q| !leaves(&q.claim));
        self.give_back_empty_queue();
        before - self.waiting.len()
    }

    /// A `BTreeSet` keeps its root node (456 bytes for a queue of claims) once it has held
    /// anything, even when emptied: over a fleet of small pools whose claims have all been served
    /// that is more than a tenth of each pool's memory. An empty queue holds nothing.
    fn give_back_empty_queue(&mut self) {
        if self.waiting.is_empty() {
            self.waiting = BTreeSet::new();
        }
    }

    /// Whether the pool exists, as far as the registry was told.
    pub(super) fn exists(&self) -> bool {
        !matches!(self.state, None | Some(Err(Unready::Missing)))
    }

    /// Whether the entry only remembers a pool that no longer exists (or never did) and nothing
    /// refers to it: then it can go.
    pub(super) fn is_forgettable(&self) -> bool {
        !self.exists()
            && self.holds.is_empty()
            && self.covering.is_empty()
            && self.waiting.is_empty()
    }

    /// A fresh allocator of the pool with every hold and every pre-allocated address of its range
    /// (its own entries' and those of [`PoolEntry::kept_for_others`]) marked, or `None` if the
    /// pool is not ready.
    pub(super) fn allocator_of_holds(&self) -> Option<AnyAllocator> {
        let Some(Ok(allocator)) = &self.state else {
            return None;
        };
        let mut fresh = allocator.emptied();
        for unit in self.holds.keys() {
            fresh.mark_used(*unit);
        }
        for block in self.covering.keys() {
            fresh.mark_block_used(*block);
        }
        for ip in self.pre_allocations.addresses() {
            if fresh.range().contains(ip) {
                fresh.mark_used(ip);
            }
        }
        for unit in &self.kept_for_others {
            fresh.mark_used(*unit);
        }
        Some(fresh)
    }

    /// Replaces the allocator with one rebuilt from the holds.
    pub(super) fn rebuild(&mut self) {
        if let Some(fresh) = self.allocator_of_holds() {
            self.state = Some(Ok(fresh));
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

/// Takes one count of `key` back; whether none is left.
fn release_one<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, u32>, key: K) -> bool {
    let Some(count) = counts.get_mut(&key) else {
        return false;
    };
    *count -= 1;
    if *count > 0 {
        return false;
    }
    counts.remove(&key);
    true
}
