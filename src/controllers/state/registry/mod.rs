//! The in-memory picture of every pool inpool serves: an [`AnyAllocator`] built from its parsed
//! spec with the addresses (or, in a prefix pool, the sub-prefixes) held in it, and the claims
//! waiting for one, in order of creation. The spec itself is kept as a fingerprint only (and whole
//! in the pools with pre-allocations, to explain them). IP pools and prefix pools take the same
//! path: a hold is recorded by address (a sub-prefix by its first address), and the allocator maps
//! it to the unit it uses (the address itself, or the sub-prefix that contains it).
//!
//! Pure bookkeeping with no API calls, fed by the watch tasks (pools, reservations, addresses)
//! and by the claim reconciler. The API server stays the arbiter of uniqueness (a reservation
//! object per address); this registry only decides what to *try*, keeps waiting claims in
//! order, and says which claims to wake when capacity appears.
//!
//! Holds are counted per pool and per address: an address is used in a pool while a reservation
//! or an `IPAddress` holds it, or while this process is in the middle of creating them (in
//! flight). A hold counts in its own pool and in every other pool whose range contains the
//! address and that claims of one namespace can reach together with it (namespaced pools of one
//! namespace, and global pools): overlapping pools never hand out the same address twice. Which
//! pools a record's block meets is looked up in an index of the pools by address range
//! ([`by_range`]), so a hold visits only those pools, not every pool.
//!
//! Every change marks the pools whose status may change as dirty; [`Registry::take_dirty`] hands
//! them to the pool status controller.
//!
//! The watches feed it through one function, [`Registry::apply`], with one [`Change`] per event.
//! A re-list (a watch that resumed too late and listed again, e.g. after an API-server restart)
//! arrives as one `*Listed` change holding the whole fresh list: whatever is not in it is gone,
//! as in kube-runtime's reflector store, which swaps its contents at `InitDone`. The audit
//! compares the registry with a list through the same [`Registry::diff`].

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::allocator::{AnyAllocator, ParsedSpec};
use crate::api::{ObjectKey, PoolKey};

// One file per concern: what the registry is told (`change`) and keeps (`holds`, `pool_entry`),
// allocation, the questions it answers, and how a fresh list differs from it.
mod allocation;
mod by_range;
mod change;
mod diff;
mod holds;
mod learning;
mod pool_entry;
mod pre_allocations;
mod queries;
#[cfg(test)]
mod tests;

pub use allocation::{Allocation, InFlight, QueuedClaim};
use by_range::PoolsByRange;
pub use change::{Change, Unready};
pub use diff::ListedHolds;
pub use holds::{HoldRecord, Holder};
use holds::{ReservationNames, scopes_meet};
pub use learning::Ticket;
use pool_entry::{OwnHolds, PoolEntry, SpecFingerprint};
pub use pre_allocations::{PreAllocationConflict, PreAllocationState};

/// The picture itself (see the module).
#[derive(Default)]
pub struct Registry {
    /// Boxed: the table holds a pointer per pool (a hash table has up to twice the slots it
    /// fills, and an entry inline is hundreds of bytes; memory per pool).
    pools: HashMap<PoolKey, Box<PoolEntry>>,
    /// The range of every ready pool, by address.
    by_range: PoolsByRange,
    /// Reservation objects by name.
    reservations: HashMap<Arc<str>, HoldRecord>,
    /// Names of the reservations that record each claim (the names of `reservations`, shared).
    reservations_by_claim: HashMap<ObjectKey, ReservationNames>,
    /// `IPAddress` objects by namespace/name (the name is the claim's).
    addresses: HashMap<ObjectKey, HoldRecord>,
    /// Allocations this process is in the middle of (see [`Registry::try_allocate`] and
    /// [`Registry::finish`]): held like the records above, in every pool they touch, until the
    /// reservation or `IPAddress` they become is known. A handful at a time (the concurrency).
    in_flight: Vec<HoldRecord>,
    /// Pools whose status may have changed since the last [`Registry::take_dirty`].
    dirty: HashSet<PoolKey>,
    /// The claims waiting in every pool's queue, summed: kept as the queues change, because the
    /// pool status controller reads it at every reconcile, and summing the queues there cost a
    /// pass over every pool each time (a tenth of the provider's CPU over 5,000 pools).
    waiting_claims: usize,
    /// Deletions applied while reconciles had requests on the way (see [`learning`]).
    deletions: learning::Deletions,
}

impl Registry {
    /// Applies one fact from the API and returns the claims to wake: those the freed or added
    /// capacity can serve, and the claim of an `IPAddress` that vanished (it must get it back).
    pub fn apply(&mut self, change: Change) -> Vec<ObjectKey> {
        self.deletions.record(&change);
        match change {
            Change::Pool(key, parsed) => self.set_pool(&key, parsed),
            Change::PoolGone(key) => {
                let woken = self.set_pool(&key, Err(Unready::Missing));
                if self
                    .pools
                    .get(&key)
                    .is_some_and(|entry| entry.is_forgettable())
                {
                    self.pools.remove(&key);
                }
                woken
            }
            Change::Reservation(name, record) => self.reservation_added(&name, record),
            Change::ReservationGone(name) => self.reservation_removed(&name),
            Change::Address(key, record) => self.address_added(key, record),
            Change::AddressGone(key) => self.address_removed(&key),
            listed @ (Change::PoolsListed(..)
            | Change::ReservationsListed(_)
            | Change::AddressesListed(_)) => {
                let mut woken = Vec::new();
                for change in self.diff(listed) {
                    woken.extend(self.apply(change));
                }
                woken
            }
        }
    }

    /// Opens a ticket before requests whose answers will be learnt (see [`learning`]); every
    /// ticket opened must be closed with [`Registry::close_ticket`].
    pub fn open_ticket(&mut self) -> Ticket {
        self.deletions.open()
    }

    pub fn close_ticket(&mut self, ticket: Ticket) {
        self.deletions.close(ticket);
    }

    /// Whether `change`, an object read or written since `ticket` was opened, must not be
    /// applied: the registry has applied a deletion of that object since, so the answer may be
    /// older than the deletion, and the object gone.
    pub fn is_stale(&self, change: &Change, ticket: Ticket) -> bool {
        self.deletions.is_stale(change, ticket)
    }

    /// The record the registry keeps of the reservation or `IPAddress` a change is about (`None`
    /// for a pool, or when it keeps none): the audit corrects a difference only while the record
    /// it found is still there.
    pub fn record_of(&self, change: &Change) -> Option<&HoldRecord> {
        match change.subject() {
            change::Subject::Reservation(name) => self.reservations.get(name),
            change::Subject::Address(key) => self.addresses.get(key),
            _ => None,
        }
    }

    /// Records a pool's spec (parsed, or why not) and returns the claims to wake. The pool is
    /// marked dirty, and so is every pool that its old or its new range meets: their overlaps
    /// with this one may have changed. The same spec again (an event for the pool's status) is a
    /// no-op: rebuilding and recounting the pool would cost O(holds).
    pub fn set_pool(
        &mut self,
        key: &PoolKey,
        parsed: Result<ParsedSpec, Unready>,
    ) -> Vec<ObjectKey> {
        let entry = self.pools.entry(key.clone()).or_default();
        let spec = SpecFingerprint::of(&parsed);
        if entry.spec == Some(spec) {
            return Vec::new();
        }
        entry.spec = Some(spec);
        let old_range = entry.range().cloned();
        self.set_pre_allocations(key, &parsed);
        let entry = self.pool_entry(key);
        entry.carved = parsed
            .as_ref()
            .map(|parsed| parsed.carved().to_vec())
            .unwrap_or_default();
        match parsed {
            Ok(parsed) => {
                entry.networks = Some(parsed.networks());
                entry.state = Some(Ok(AnyAllocator::new(parsed)));
            }
            Err(unready) => {
                entry.state = Some(Err(unready));
                entry.networks = None;
            }
        }
        let new_range = self.pools[key].range().cloned();
        if old_range != new_range {
            if let Some(old) = &old_range {
                self.by_range.remove(key, old);
            }
            if let Some(new) = &new_range {
                self.by_range.insert(key, new);
            }
        }
        let kept = self.kept_for(key);
        self.pool_entry(key).kept_for_others = kept;
        self.recompute_holds(key);
        self.dirty.insert(key.clone());
        let mut met = Vec::new();
        for range in [&old_range, &new_range].into_iter().flatten() {
            met.extend(self.by_range.meeting_set(range));
        }
        met.sort();
        met.dedup();
        met.retain(|other| other != key);
        self.dirty.extend(met.iter().cloned());
        let entry = &self.pools[key];
        let mut woken = entry.wakeups();
        woken.extend(entry.unrealised_pre_allocations());
        // The pools this one overlaps keep its entries' addresses (and no longer its old ones).
        woken.extend(self.keep_for_overlapping(met));
        woken
    }

    /// Counts again, from every record, the holds in one pool (its range changed).
    fn recompute_holds(&mut self, key: &PoolKey) {
        let Some(entry) = self.pools.get_mut(key) else {
            return;
        };
        entry.holds.clear();
        entry.covering.clear();
        entry.own = OwnHolds::default();
        entry.rebuild();
        for record in self
            .reservations
            .values()
            .chain(self.addresses.values())
            .chain(self.in_flight.iter())
        {
            if entry.is_held_by(key, record) {
                entry.hold(key, record);
            }
        }
    }

    /// Marks a pool's status as possibly changed by something the registry does not hold (the
    /// `Ready` condition of a claim that carves for it).
    pub fn touch(&mut self, pool: &PoolKey) {
        self.dirty.insert(pool.clone());
    }

    /// Pools whose status may have changed since the last call.
    pub fn take_dirty(&mut self) -> Vec<PoolKey> {
        self.dirty.drain().collect()
    }

    /// Forgets pools that no longer exist and that nothing refers to any more (no hold, no
    /// waiting claim), so that memory does not grow with every pool name ever seen.
    pub fn collect_garbage(&mut self) {
        self.pools.retain(|_, entry| !entry.is_forgettable());
    }

    /// Checks every ready pool's allocator against its holds (allocations in flight among them),
    /// the only things that may mark an address used, and rebuilds those that disagree. Returns the pools
    /// that disagreed (a bug if ever non-empty; the audit counts them as drift).
    pub fn recount(&mut self) -> Vec<PoolKey> {
        let mut rebuilt = Vec::new();
        for (key, entry) in &mut self.pools {
            let (Some(fresh), Some(Ok(allocator))) = (entry.allocator_of_holds(), &entry.state)
            else {
                continue;
            };
            if fresh.counts() != allocator.counts() {
                entry.state = Some(Ok(fresh));
                rebuilt.push(key.clone());
            }
        }
        self.dirty.extend(rebuilt.iter().cloned());
        rebuilt.sort();
        rebuilt
    }

    fn reservation_added(&mut self, name: &str, record: HoldRecord) -> Vec<ObjectKey> {
        // Hold the new record before letting go of the old one: an unchanged address is never
        // free in between.
        let name: Arc<str> = match self.reservations.get_key_value(name) {
            Some((known, _)) => known.clone(),
            None => name.into(),
        };
        let old = self.reservations.insert(name.clone(), record.clone());
        if old.as_ref() == Some(&record) {
            return Vec::new();
        }
        if let Some(claim) = record.holder.claim() {
            match self.reservations_by_claim.entry(claim.clone()) {
                Entry::Vacant(entry) => {
                    entry.insert(ReservationNames::One(name.clone()));
                }
                Entry::Occupied(mut entry) => entry.get_mut().insert(&name),
            }
        }
        self.hold_record(&record);
        match old {
            Some(old) => {
                if old.holder != record.holder {
                    self.unindex_reservation(&name, &old.holder);
                }
                self.release_record(&old)
            }
            None => Vec::new(),
        }
    }

    /// Returns the claims to wake when the address became free, and the reservation's claim: if
    /// it still holds the address through its `IPAddress`, it must reserve it again.
    fn reservation_removed(&mut self, name: &str) -> Vec<ObjectKey> {
        match self.reservations.remove(name) {
            Some(old) => {
                self.unindex_reservation(name, &old.holder);
                let mut woken = self.release_record(&old);
                if let Holder::Claim(claim) = old.holder {
                    woken.push(claim);
                }
                woken
            }
            None => Vec::new(),
        }
    }

    fn unindex_reservation(&mut self, name: &str, holder: &Holder) {
        let Some(claim) = holder.claim() else {
            return;
        };
        if let Some(names) = self.reservations_by_claim.get_mut(claim)
            && names.remove(name)
        {
            self.reservations_by_claim.remove(claim);
        }
    }

    fn address_added(&mut self, key: ObjectKey, record: HoldRecord) -> Vec<ObjectKey> {
        self.mark_carving_pool(&key);
        let old = self.addresses.insert(key, record.clone());
        if old.as_ref() == Some(&record) {
            return Vec::new();
        }
        self.hold_record(&record);
        let entry = self.pool_entry(&record.pool);
        self.waiting_claims -= entry.unqueue_where(|claim| record.holder.claim() == Some(claim));
        match old {
            Some(old) => self.release_record(&old),
            None => Vec::new(),
        }
    }

    /// The claim of a vanished `IPAddress` is woken too: it must get its address back (or be
    /// told it has none), never stay `Ready` without it.
    fn address_removed(&mut self, key: &ObjectKey) -> Vec<ObjectKey> {
        self.mark_carving_pool(key);
        match self.addresses.remove(key) {
            Some(old) => {
                let mut woken = self.release_record(&old);
                woken.extend(old.holder.claim().cloned());
                woken
            }
            None => Vec::new(),
        }
    }

    /// The `IPAddress` of a claim that carves for a pool came or went: that pool's subnets may
    /// change (see [`crate::api::carve`]).
    fn mark_carving_pool(&mut self, address: &ObjectKey) {
        if let Some((pool, _)) = crate::api::carve::carving_pool(address) {
            self.dirty.insert(pool);
        }
    }

    fn hold_record(&mut self, record: &HoldRecord) {
        self.pool_entry(&record.pool);
        for key in self.pools_held_by(record) {
            if let Some(entry) = self.pools.get_mut(&key) {
                entry.hold(&key, record);
                self.dirty.insert(key);
            }
        }
    }

    /// Takes a record's holds back; returns the claims to wake in pools where it freed the
    /// address.
    fn release_record(&mut self, record: &HoldRecord) -> Vec<ObjectKey> {
        let mut woken = Vec::new();
        for key in self.pools_held_by(record) {
            if let Some(entry) = self.pools.get_mut(&key) {
                if entry.unhold(&key, record) {
                    woken.extend(entry.wakeups());
                }
                woken.extend(entry.pre_allocation_freed(record));
                self.dirty.insert(key);
            }
        }
        woken
    }

    /// The pools a record holds an address of (see [`PoolEntry::is_held_by`]): its own, and
    /// those among the pools its block meets that claims of its scope can reach. O(log pools +
    /// pools met), whatever the number of pools.
    fn pools_held_by(&self, record: &HoldRecord) -> Vec<PoolKey> {
        let mut keys = self.by_range.meeting(record.block());
        if let Err(at) = keys.binary_search(&record.pool) {
            keys.insert(at, record.pool.clone());
        }
        keys.retain(|key| {
            self.pools
                .get(key)
                .is_some_and(|entry| entry.is_held_by(key, record))
        });
        keys
    }

    fn pool_entry(&mut self, key: &PoolKey) -> &mut PoolEntry {
        self.pools.entry(key.clone()).or_default()
    }
}
