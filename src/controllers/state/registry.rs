//! The in-memory picture of every pool inpool serves: its parsed spec, an [`AnyAllocator`] with
//! the addresses (or, in a prefix pool, the sub-prefixes) held in it, and the claims waiting for
//! one, in order of creation. IP pools and prefix pools take the same path: a hold is recorded by
//! address (a sub-prefix by its first address), and the allocator maps it to the unit it uses
//! (the address itself, or the sub-prefix that contains it).
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
//! namespace, and global pools): overlapping pools never hand out the same address twice.
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
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::allocator::{AnyAllocator, ParsedSpec};
use crate::api::{ObjectKey, PoolKey, PoolKind, Scope};

/// A claim's place in a pool's queue: creation time (RFC 3339 text sorts chronologically as the
/// API server writes it, to the second), then namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueuedClaim {
    pub created: String,
    pub claim: ObjectKey,
}

/// Why a pool cannot hand out addresses now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unready {
    Missing,
    Invalid(String),
    Deleting,
    Paused,
}

/// What the reconciler learns from [`Registry::try_allocate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Create the reservation and the `IPAddress` for this address; it is held in flight until
    /// [`Registry::finish`] is called.
    Allocate(IpAddr),
    /// An `IPAddress` for this claim is already known (another process realised it): adopt it
    /// instead; the claim is not queued.
    AlreadyHeld,
    /// No address for this claim now; `total` is the pool's size, `ahead` the claims before it.
    Exhausted {
        total: u128,
        ahead: usize,
    },
    NotReady(Unready),
}

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
enum Subject<'a> {
    Pool(&'a PoolKey),
    Pools(PoolKind),
    Reservation(&'a str),
    Reservations,
    Address(&'a ObjectKey),
    Addresses,
}

impl Change {
    fn subject(&self) -> Subject<'_> {
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

    fn is_removal(&self) -> bool {
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

#[derive(Default)]
struct PoolEntry {
    /// What [`Registry::set_pool`] was last given: a pool event that does not change it (its
    /// status, most often) changes nothing here.
    source: Option<Result<ParsedSpec, Unready>>,
    state: Option<Result<AnyAllocator, Unready>>,
    /// Prefix (an IP pool's subnet's, a prefix pool's allocation length) and gateway of a ready
    /// pool, copied onto every `IPAddress`.
    network: Option<(u8, Option<IpAddr>)>,
    /// Records holding each unit (see [`PoolEntry::unit`]).
    holds: HashMap<IpAddr, u32>,
    /// Addresses being allocated by this process, as the caller gave them (not mapped to their
    /// unit): [`Registry::finish`] then removes exactly what [`Registry::hold_in_flight`] added,
    /// whatever the pool's state in between (a pool paused meanwhile has no allocator to map
    /// with). Compare with [`PoolEntry::unit`] through [`PoolEntry::unit_in_flight`].
    in_flight: HashSet<IpAddr>,
    waiting: BTreeSet<QueuedClaim>,
}

impl PoolEntry {
    /// The address that stands for what `ip` uses in this pool: `ip`, or in a prefix pool the
    /// first address of its sub-prefix. Holds and allocations in flight are keyed by it, so that
    /// two records inside one sub-prefix count as two holds of it.
    fn unit(&self, ip: IpAddr) -> IpAddr {
        match &self.state {
            Some(Ok(allocator)) => allocator.unit_of(ip),
            _ => ip,
        }
    }

    /// Whether an allocation in flight uses the unit `unit` (an address from [`PoolEntry::unit`]).
    fn unit_in_flight(&self, unit: IpAddr) -> bool {
        self.in_flight.iter().any(|ip| self.unit(*ip) == unit)
    }

    fn allocator(&mut self) -> Option<&mut AnyAllocator> {
        match &mut self.state {
            Some(Ok(allocator)) => Some(allocator),
            _ => None,
        }
    }

    fn free(&self) -> u128 {
        match &self.state {
            Some(Ok(allocator)) => allocator.counts().free,
            _ => 0,
        }
    }

    fn range(&self) -> Option<&crate::allocator::AddressSet> {
        match &self.state {
            Some(Ok(allocator)) => Some(allocator.range()),
            _ => None,
        }
    }

    /// Whether `record` uses an address of this pool (see the module docs).
    fn is_held_by(&self, key: &PoolKey, record: &HoldRecord) -> bool {
        record.pool == *key
            || (scopes_meet(&key.scope(), &record.scope)
                && self.range().is_some_and(|r| r.contains(record.ip)))
    }

    fn hold(&mut self, ip: IpAddr) {
        let ip = self.unit(ip);
        *self.holds.entry(ip).or_default() += 1;
        if let Some(allocator) = self.allocator() {
            allocator.mark_used(ip);
        }
    }

    /// Returns true when the address became free.
    fn unhold(&mut self, ip: IpAddr) -> bool {
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
    fn is_forgettable(&self) -> bool {
        matches!(self.state, None | Some(Err(Unready::Missing)))
            && self.holds.is_empty()
            && self.in_flight.is_empty()
            && self.waiting.is_empty()
    }

    /// Re-marks every hold and in-flight address in a fresh allocator.
    fn remark(&mut self) {
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
    fn wakeups(&self) -> Vec<ObjectKey> {
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

/// What holds an address: a reservation object or an `IPAddress`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldRecord {
    pub pool: PoolKey,
    pub ip: IpAddr,
    pub holder: Holder,
    /// Where the hold is unique: the reservation's scope, or the pool's for an `IPAddress`.
    pub scope: Scope,
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
enum ReservationNames {
    One(Arc<str>),
    Many(Vec<Arc<str>>),
}

impl ReservationNames {
    fn iter(&self) -> impl Iterator<Item = &Arc<str>> {
        match self {
            ReservationNames::One(name) => std::slice::from_ref(name).iter(),
            ReservationNames::Many(names) => names.iter(),
        }
    }

    fn insert(&mut self, name: &Arc<str>) {
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
    fn remove(&mut self, name: &str) -> bool {
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
fn scopes_meet(a: &Scope, b: &Scope) -> bool {
    a == b || *a == Scope::Cluster || *b == Scope::Cluster
}

#[derive(Default)]
pub struct Registry {
    pools: HashMap<PoolKey, PoolEntry>,
    /// Reservation objects by name.
    reservations: HashMap<Arc<str>, HoldRecord>,
    /// Names of the reservations that record each claim (the names of `reservations`, shared).
    reservations_by_claim: HashMap<ObjectKey, ReservationNames>,
    /// `IPAddress` objects by namespace/name (the name is the claim's).
    addresses: HashMap<ObjectKey, HoldRecord>,
    /// Pools whose status may have changed since the last [`Registry::take_dirty`].
    dirty: HashSet<PoolKey>,
}

impl Registry {
    /// Applies one fact from the API and returns the claims to wake: those the freed or added
    /// capacity can serve, and the claim of an `IPAddress` that vanished (it must get it back).
    pub fn apply(&mut self, change: Change) -> Vec<ObjectKey> {
        match change {
            Change::Pool(key, parsed) => self.set_pool(&key, parsed),
            Change::PoolGone(key) => {
                let woken = self.set_pool(&key, Err(Unready::Missing));
                if self.pools.get(&key).is_some_and(PoolEntry::is_forgettable) {
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

    /// The changes that would make the registry agree with a fresh list (a `*Listed` change);
    /// empty for any other change, and when they already agree.
    pub fn diff(&self, listed: Change) -> Vec<Change> {
        match listed {
            Change::PoolsListed(kind, pools) => {
                let listed: HashMap<&PoolKey, &Result<ParsedSpec, Unready>> =
                    pools.iter().map(|(k, v)| (k, v)).collect();
                let gone = self
                    .pools
                    .iter()
                    .filter(|(key, entry)| {
                        key.kind == kind
                            && !listed.contains_key(key)
                            && entry
                                .source
                                .as_ref()
                                .is_some_and(|s| *s != Err(Unready::Missing))
                    })
                    .map(|(key, _)| Change::PoolGone(key.clone()));
                let changed = pools
                    .iter()
                    .filter(|(key, parsed)| {
                        self.pools.get(key).and_then(|e| e.source.as_ref()) != Some(parsed)
                    })
                    .map(|(key, parsed)| Change::Pool(key.clone(), parsed.clone()));
                sorted(gone.chain(changed))
            }
            Change::ReservationsListed(list) => {
                let mut compared = ListedHolds::default();
                self.compare_reservations(list, &mut compared);
                self.reservation_differences(compared)
            }
            Change::AddressesListed(list) => {
                let mut compared = ListedHolds::default();
                self.compare_addresses(list, &mut compared);
                self.address_differences(compared)
            }
            _ => Vec::new(),
        }
    }

    /// Compares one page of a fresh list of reservations; see [`ListedHolds`].
    pub fn compare_reservations(
        &self,
        page: Vec<(String, HoldRecord)>,
        compared: &mut ListedHolds<Arc<str>>,
    ) {
        let page = page.into_iter().map(|(name, record)| (name.into(), record));
        compared.compare(&self.reservations, page, |name, record| {
            Change::Reservation(name.to_string(), record)
        });
    }

    /// Compares one page of a fresh list of `IPAddress`es; see [`ListedHolds`].
    pub fn compare_addresses(
        &self,
        page: Vec<(ObjectKey, HoldRecord)>,
        compared: &mut ListedHolds<ObjectKey>,
    ) {
        compared.compare(&self.addresses, page, Change::Address);
    }

    /// What a whole list of reservations, compared page by page, differs by: as
    /// [`Registry::diff`] of the `ReservationsListed` change.
    pub fn reservation_differences(&self, compared: ListedHolds<Arc<str>>) -> Vec<Change> {
        compared.differences(&self.reservations, |name| {
            Change::ReservationGone(name.to_string())
        })
    }

    /// What a whole list of `IPAddress`es, compared page by page, differs by: as
    /// [`Registry::diff`] of the `AddressesListed` change.
    pub fn address_differences(&self, compared: ListedHolds<ObjectKey>) -> Vec<Change> {
        compared.differences(&self.addresses, |key| Change::AddressGone(key.clone()))
    }

    /// Forgets pools that no longer exist and that nothing refers to any more (no hold, no
    /// waiting claim), so that memory does not grow with every pool name ever seen.
    pub fn collect_garbage(&mut self) {
        self.pools.retain(|_, entry| !entry.is_forgettable());
    }

    /// Checks every ready pool's allocator against its holds and allocations in flight, the only
    /// things that may mark an address used, and rebuilds those that disagree. Returns the pools
    /// that disagreed (a bug if ever non-empty; the audit counts them as drift).
    pub fn recount(&mut self) -> Vec<PoolKey> {
        let mut rebuilt = Vec::new();
        for (key, entry) in &mut self.pools {
            let Some(Ok(allocator)) = &entry.state else {
                continue;
            };
            let mut fresh = allocator.emptied();
            for ip in entry.holds.keys().chain(entry.in_flight.iter()) {
                fresh.mark_used(*ip);
            }
            if fresh.counts() != allocator.counts() {
                entry.state = Some(Ok(fresh));
                rebuilt.push(key.clone());
            }
        }
        self.dirty.extend(rebuilt.iter().cloned());
        rebuilt.sort();
        rebuilt
    }

    /// Records a pool's spec (parsed, or why not) and returns the claims to wake. Every pool is
    /// marked dirty: overlaps with this one may have changed. The same spec again (an event for
    /// the pool's status) is a no-op: rebuilding and recounting the pool would cost O(holds).
    pub fn set_pool(
        &mut self,
        key: &PoolKey,
        parsed: Result<ParsedSpec, Unready>,
    ) -> Vec<ObjectKey> {
        let entry = self.pools.entry(key.clone()).or_default();
        if entry.source.as_ref() == Some(&parsed) {
            return Vec::new();
        }
        entry.source = Some(parsed.clone());
        match parsed {
            Ok(parsed) => {
                entry.network = Some(parsed.network());
                entry.state = Some(Ok(AnyAllocator::new(parsed)));
            }
            Err(unready) => {
                entry.state = Some(Err(unready));
                entry.network = None;
            }
        }
        self.recompute_holds(key);
        self.dirty.extend(self.pools.keys().cloned());
        self.pools[key].wakeups()
    }

    /// Whether the pool is known and paused (its claims are then not queued).
    pub fn is_paused(&self, key: &PoolKey) -> bool {
        self.pools
            .get(key)
            .is_some_and(|entry| matches!(entry.state, Some(Err(Unready::Paused))))
    }

    /// Counts again, from every record, the holds in one pool (its range changed).
    fn recompute_holds(&mut self, key: &PoolKey) {
        let Some(entry) = self.pools.get(key) else {
            return;
        };
        let mut holds: HashMap<IpAddr, u32> = HashMap::new();
        for record in self.reservations.values().chain(self.addresses.values()) {
            if entry.is_held_by(key, record) {
                *holds.entry(entry.unit(record.ip)).or_default() += 1;
            }
        }
        let entry = self.pools.get_mut(key).expect("checked above");
        entry.holds = holds;
        entry.remark();
    }

    /// Pools whose status may have changed since the last call.
    pub fn take_dirty(&mut self) -> Vec<PoolKey> {
        self.dirty.drain().collect()
    }

    /// Prefix and gateway of a ready pool.
    pub fn network(&self, key: &PoolKey) -> Option<(u8, Option<IpAddr>)> {
        self.pools.get(key).and_then(|e| e.network)
    }

    #[cfg(test)]
    pub fn free(&self, key: &PoolKey) -> u128 {
        self.pools.get(key).map_or(0, PoolEntry::free)
    }

    pub fn counts(&self, key: &PoolKey) -> Option<crate::allocator::Counts> {
        match &self.pools.get(key)?.state {
            Some(Ok(allocator)) => Some(allocator.counts()),
            _ => None,
        }
    }

    pub fn waiting(&self, key: &PoolKey) -> usize {
        self.pools.get(key).map_or(0, |e| e.waiting.len())
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
        let old = self.addresses.insert(key, record.clone());
        if old.as_ref() == Some(&record) {
            return Vec::new();
        }
        self.hold_record(&record);
        let entry = self.pool_entry(&record.pool);
        entry
            .waiting
            .retain(|q| record.holder.claim() != Some(&q.claim));
        match old {
            Some(old) => self.release_record(&old),
            None => Vec::new(),
        }
    }

    /// The claim of a vanished `IPAddress` is woken too: it must get its address back (or be
    /// told it has none), never stay `Ready` without it.
    fn address_removed(&mut self, key: &ObjectKey) -> Vec<ObjectKey> {
        match self.addresses.remove(key) {
            Some(old) => {
                let mut woken = self.release_record(&old);
                woken.extend(old.holder.claim().cloned());
                woken
            }
            None => Vec::new(),
        }
    }

    fn hold_record(&mut self, record: &HoldRecord) {
        self.pool_entry(&record.pool);
        for (key, entry) in &mut self.pools {
            if entry.is_held_by(key, record) {
                entry.hold(record.ip);
                self.dirty.insert(key.clone());
            }
        }
    }

    /// Takes a record's holds back; returns the claims to wake in pools where it freed the
    /// address.
    fn release_record(&mut self, record: &HoldRecord) -> Vec<ObjectKey> {
        let mut woken = Vec::new();
        for (key, entry) in &mut self.pools {
            if entry.is_held_by(key, record) {
                self.dirty.insert(key.clone());
                if entry.unhold(record.ip) {
                    woken.extend(entry.wakeups());
                }
            }
        }
        woken
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

    /// Decides whether `claim` gets an address now. A claim never overtakes an older waiting
    /// claim of the same pool: it is served only if the free addresses suffice for every claim
    /// queued before it. On `Allocate` the address is held in flight until [`Registry::finish`].
    pub fn try_allocate(&mut self, pool: &PoolKey, claim: QueuedClaim) -> Decision {
        if self.addresses.contains_key(&claim.claim) {
            return Decision::AlreadyHeld;
        }
        self.dirty.insert(pool.clone());
        let entry = self.pool_entry(pool);
        entry.waiting.insert(claim.clone());
        let Some(Ok(allocator)) = &mut entry.state else {
            let unready = match &entry.state {
                Some(Err(unready)) => unready.clone(),
                _ => Unready::Missing,
            };
            return Decision::NotReady(unready);
        };
        let counts = allocator.counts();
        let free = usize::try_from(counts.free).unwrap_or(usize::MAX);
        let ahead = entry.waiting.range(..&claim).take(free).count();
        if ahead >= free {
            return Decision::Exhausted {
                total: counts.total,
                ahead: entry.waiting.range(..&claim).count(),
            };
        }
        match allocator.allocate_lowest() {
            Some(ip) => {
                entry.in_flight.insert(ip);
                entry.waiting.remove(&claim);
                Decision::Allocate(ip)
            }
            None => Decision::Exhausted {
                total: counts.total,
                ahead,
            },
        }
    }

    /// Drops queued claims that no longer exist (deleted without a final reconcile, e.g. when
    /// someone else removed the finalizer), so that they cannot hold up the queue.
    pub fn prune_waiting(&mut self, pool: &PoolKey, is_live: impl Fn(&ObjectKey) -> bool) {
        if let Some(entry) = self.pools.get_mut(pool) {
            entry.waiting.retain(|q| is_live(&q.claim));
        }
    }

    /// [`Registry::prune_waiting`] in every pool.
    pub fn prune_waiting_everywhere(&mut self, is_live: impl Fn(&ObjectKey) -> bool) {
        for entry in self.pools.values_mut() {
            entry.waiting.retain(|q| is_live(&q.claim));
        }
    }

    /// Holds a specific address in flight for a claim (adoption, crash recovery).
    pub fn hold_in_flight(&mut self, pool: &PoolKey, claim: &ObjectKey, ip: IpAddr) {
        self.dirty.insert(pool.clone());
        let entry = self.pool_entry(pool);
        entry.waiting.retain(|q| &q.claim != claim);
        if let Some(allocator) = entry.allocator() {
            allocator.mark_used(ip);
        }
        entry.in_flight.insert(ip);
    }

    /// Ends an in-flight allocation: the address stays used only while a record (a reservation
    /// or an `IPAddress`, applied as a [`Change`] by whoever learnt of it) holds it, so nothing
    /// can keep an address used that no object holds. Returns the claims to wake when it became
    /// free.
    pub fn finish(&mut self, pool: &PoolKey, ip: IpAddr) -> Vec<ObjectKey> {
        self.dirty.insert(pool.clone());
        let entry = self.pool_entry(pool);
        entry.in_flight.remove(&ip);
        let unit = entry.unit(ip);
        if entry.holds.contains_key(&unit) || entry.unit_in_flight(unit) {
            return Vec::new();
        }
        if entry.allocator().is_some_and(|a| a.release(unit)) {
            entry.wakeups()
        } else {
            Vec::new()
        }
    }

    /// The claim no longer waits in this pool (deleted, paused, adopted elsewhere).
    pub fn forget_claim(&mut self, pool: &PoolKey, claim: &ObjectKey) {
        if let Some(entry) = self.pools.get_mut(pool) {
            let before = entry.waiting.len();
            entry.waiting.retain(|q| &q.claim != claim);
            if entry.waiting.len() != before {
                self.dirty.insert(pool.clone());
            }
        }
    }

    /// The scope a new reservation for `ip` from `pool` is named in: the cluster scope when the
    /// address of a namespaced pool also lies in a global pool, so that the API server keeps it
    /// unique across both; otherwise the pool's own scope.
    pub fn reservation_scope(&self, pool: &PoolKey, ip: IpAddr) -> Scope {
        let in_global_pool = self.pools.iter().any(|(key, entry)| {
            !key.kind.is_namespaced() && entry.range().is_some_and(|r| r.contains(ip))
        });
        if in_global_pool {
            Scope::Cluster
        } else {
            pool.scope()
        }
    }

    /// Addresses held for this pool that lie outside its range (after a shrink), with their
    /// claims, lowest first.
    pub fn out_of_range(&self, pool: &PoolKey) -> Vec<(IpAddr, Holder)> {
        let Some(range) = self.pools.get(pool).and_then(PoolEntry::range) else {
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
        let Some(range) = self.pools.get(pool).and_then(PoolEntry::range) else {
            return Vec::new();
        };
        let mut found: Vec<_> = self
            .pools
            .iter()
            .filter(|(key, _)| *key != pool && scopes_meet(&key.scope(), &pool.scope()))
            .filter_map(|(key, entry)| Some((key.clone(), range.first_overlap(entry.range()?)?)))
            .collect();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found
    }

    /// Whether anything still holds an address *for* this pool (its own reservations and
    /// addresses, or an allocation in flight): a pool is not let go while it does.
    pub fn has_own_holds(&self, pool: &PoolKey) -> bool {
        self.pools
            .get(pool)
            .is_some_and(|e| !e.in_flight.is_empty())
            || self
                .reservations
                .values()
                .chain(self.addresses.values())
                .any(|r| &r.pool == pool)
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

    fn pool_entry(&mut self, key: &PoolKey) -> &mut PoolEntry {
        self.pools.entry(key.clone()).or_default()
    }
}

/// A fresh list of reservations or `IPAddress`es being compared with the registry a page at a
/// time, so that only one page of the list is in memory (the audit's lists): the
/// records a page has anew or otherwise are kept as changes, and only the keys of the rest.
/// Once every page is compared, the registry's records the list lacked are removals. The
/// registry may change between pages (the watches go on); so it may between a list and its
/// comparison, and the audit counts only a difference a second list confirms.
pub struct ListedHolds<K> {
    listed: HashSet<K>,
    changed: Vec<Change>,
}

impl<K> Default for ListedHolds<K> {
    fn default() -> Self {
        ListedHolds {
            listed: HashSet::new(),
            changed: Vec::new(),
        }
    }
}

impl<K: Clone + Eq + std::hash::Hash> ListedHolds<K> {
    fn compare(
        &mut self,
        current: &HashMap<K, HoldRecord>,
        page: impl IntoIterator<Item = (K, HoldRecord)>,
        changed: impl Fn(K, HoldRecord) -> Change,
    ) {
        for (key, record) in page {
            if current.get(&key) != Some(&record) {
                self.changed.push(changed(key.clone(), record));
            }
            self.listed.insert(key);
        }
    }

    /// Removals for records the list lacked, then additions and changes for records it had anew.
    fn differences(
        self,
        current: &HashMap<K, HoldRecord>,
        gone: impl Fn(&K) -> Change,
    ) -> Vec<Change> {
        let listed = self.listed;
        sorted(
            current
                .keys()
                .filter(|k| !listed.contains(*k))
                .map(gone)
                .chain(self.changed),
        )
    }
}

/// A deterministic order, so that two diffs of the same lists compare equal: removals first,
/// then by the object each change is about.
fn sorted(changes: impl IntoIterator<Item = Change>) -> Vec<Change> {
    let mut changes: Vec<Change> = changes.into_iter().collect();
    changes.sort_by(|a, b| (!a.is_removal(), a.subject()).cmp(&(!b.is_removal(), b.subject())));
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::PoolSpecInput;

    fn parsed(addresses: &[&str], prefix: i64) -> ParsedSpec {
        ParsedSpec::Addresses(
            PoolSpecInput {
                addresses: addresses.iter().map(|s| s.to_string()).collect(),
                prefix,
                ..Default::default()
            }
            .parse()
            .expect("valid spec"),
        )
    }

    fn queued(created: &str, name: &str) -> QueuedClaim {
        QueuedClaim {
            created: created.into(),
            claim: ObjectKey::new("ns", name),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn pool() -> PoolKey {
        PoolKey::in_cluster("ns", "p")
    }

    fn hold(name: &str, address: &str) -> HoldRecord {
        HoldRecord {
            pool: pool(),
            ip: ip(address),
            holder: Holder::Claim(ObjectKey::new("ns", name)),
            scope: pool().scope(),
        }
    }

    #[test]
    fn a_released_reservation_holds_its_address_for_no_claim() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10"], 24)));
        r.apply(Change::Reservation("mine".into(), hold("a", "10.0.0.10")));
        assert_eq!(r.reservations_of(&ObjectKey::new("ns", "a")).len(), 1);

        // The claim is released: its reservation now keeps the address for nobody.
        let released = HoldRecord {
            holder: Holder::Released,
            ..hold("a", "10.0.0.10")
        };
        r.apply(Change::Reservation("mine".into(), released));
        assert!(r.reservations_of(&ObjectKey::new("ns", "a")).is_empty());
        assert!(matches!(
            r.try_allocate(&pool(), queued("t1", "b")),
            Decision::Exhausted { .. }
        ));

        // Its expiry frees the address and wakes the waiting claim, and no claim of its own.
        assert_eq!(
            r.apply(Change::ReservationGone("mine".into())),
            vec![ObjectKey::new("ns", "b")]
        );
    }

    #[test]
    fn a_diff_lists_removals_first_then_by_object() {
        let mut r = Registry::default();
        for (name, address) in [("a", "10.0.0.1"), ("b", "10.0.0.2")] {
            r.apply(Change::Address(
                ObjectKey::new("ns", name),
                hold(name, address),
            ));
        }
        let listed = vec![
            (ObjectKey::new("ns", "d"), hold("d", "10.0.0.4")),
            (ObjectKey::new("ns", "c"), hold("c", "10.0.0.3")),
        ];
        assert_eq!(
            r.diff(Change::AddressesListed(listed.clone())),
            [
                Change::AddressGone(ObjectKey::new("ns", "a")),
                Change::AddressGone(ObjectKey::new("ns", "b")),
                Change::Address(ObjectKey::new("ns", "c"), hold("c", "10.0.0.3")),
                Change::Address(ObjectKey::new("ns", "d"), hold("d", "10.0.0.4")),
            ]
        );
    }

    #[test]
    fn allocates_lowest_free_and_holds_in_flight() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10-10.0.0.11"], 24)));
        let a = r.try_allocate(&pool(), queued("t1", "a"));
        assert_eq!(a, Decision::Allocate(ip("10.0.0.10")));
        let b = r.try_allocate(&pool(), queued("t2", "b"));
        assert_eq!(b, Decision::Allocate(ip("10.0.0.11")));
        assert!(matches!(
            r.try_allocate(&pool(), queued("t3", "c")),
            Decision::Exhausted { total: 2, ahead: 0 }
        ));
        // A failed create gives the address back and wakes the waiting claim.
        assert_eq!(
            r.finish(&pool(), ip("10.0.0.11")),
            vec![ObjectKey::new("ns", "c")]
        );
    }

    fn prefix_pool(key: &PoolKey, prefixes: &[&str], length: i64) -> ParsedSpec {
        ParsedSpec::Prefixes(
            crate::allocator::PrefixPoolSpecInput {
                prefixes: prefixes.iter().map(|s| s.to_string()).collect(),
                allocation_prefix_length: Some(length),
                gateway: Some("fd00::1".into()),
                excluded_prefixes: Vec::new(),
            }
            .parse()
            .unwrap_or_else(|e| panic!("{key}: {e}")),
        )
    }

    #[test]
    fn an_allocation_in_flight_ends_whatever_the_pool_did_meanwhile() {
        let key = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "p6").unwrap();
        let claim = ObjectKey::new("ns", "a");
        let spec = || Ok(prefix_pool(&key, &["fd00::/63"], 64));
        // Held while paused (no allocator to map the address to its sub-prefix), finished once
        // ready; then held while ready, finished once paused and ready again.
        let mut r = Registry::default();
        r.set_pool(&key, Err(Unready::Paused));
        r.hold_in_flight(&key, &claim, ip("fd00::5"));
        r.set_pool(&key, spec());
        assert_eq!(r.free(&key), 1, "the sub-prefix is used while in flight");
        r.finish(&key, ip("fd00::5"));
        assert!(!r.has_own_holds(&key), "nothing left in flight");
        assert_eq!(r.free(&key), 2);
        r.hold_in_flight(&key, &claim, ip("fd00::5"));
        r.set_pool(&key, Err(Unready::Paused));
        r.finish(&key, ip("fd00::5"));
        r.set_pool(&key, spec());
        assert!(!r.has_own_holds(&key), "nothing left in flight");
        assert_eq!(r.free(&key), 2);
        // Two allocations in flight in one sub-prefix: it stays used until both end.
        r.hold_in_flight(&key, &claim, ip("fd00::"));
        r.hold_in_flight(&key, &ObjectKey::new("ns", "b"), ip("fd00::5"));
        r.finish(&key, ip("fd00::"));
        assert_eq!(r.free(&key), 1);
        r.finish(&key, ip("fd00::5"));
        assert_eq!(r.free(&key), 2);
    }

    #[test]
    fn a_prefix_pool_takes_the_same_path_with_sub_prefixes() {
        let key = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "p6").unwrap();
        let mut r = Registry::default();
        r.set_pool(&key, Ok(prefix_pool(&key, &["fd00::/63"], 64)));
        assert_eq!(r.network(&key), Some((64, Some(ip("fd00::1")))));
        let a = r.try_allocate(&key, queued("t1", "a"));
        assert_eq!(a, Decision::Allocate(ip("fd00::")));
        let b = r.try_allocate(&key, queued("t2", "b"));
        assert_eq!(b, Decision::Allocate(ip("fd00:0:0:1::")));
        assert!(matches!(
            r.try_allocate(&key, queued("t3", "c")),
            Decision::Exhausted { total: 2, ahead: 0 }
        ));
        // b's reservation holds its sub-prefix; the in-flight allocation ends.
        let reserved = |name: &str, address: &str| HoldRecord {
            pool: key.clone(),
            ip: ip(address),
            holder: Holder::Claim(ObjectKey::new("ns", name)),
            scope: key.scope(),
        };
        r.apply(Change::Reservation(
            "b".into(),
            reserved("b", "fd00:0:0:1::"),
        ));
        assert!(r.finish(&key, ip("fd00:0:0:1::")).is_empty());
        // a's create failed: its sub-prefix is free again and c is woken.
        assert_eq!(
            r.finish(&key, ip("fd00::")),
            vec![ObjectKey::new("ns", "c")]
        );
        assert_eq!(r.counts(&key).map(|c| (c.used, c.free)), Some((1, 1)));
        assert!(r.recount().is_empty());
    }

    #[test]
    fn addresses_inside_one_sub_prefix_hold_it_until_the_last_goes() {
        let prefixes = PoolKey::global("v6");
        let addresses = PoolKey::global("ips");
        let mut r = Registry::default();
        r.set_pool(&prefixes, Ok(prefix_pool(&prefixes, &["fd00::/63"], 64)));
        r.set_pool(&addresses, Ok(parsed(&["fd00::5-fd00::6"], 64)));
        assert_eq!(r.overlaps(&prefixes).len(), 1, "range-aware overlap");
        let held = |name: &str, address: &str| HoldRecord {
            pool: addresses.clone(),
            ip: ip(address),
            holder: Holder::Claim(ObjectKey::new("ns", name)),
            scope: Scope::Cluster,
        };
        r.apply(Change::Address(
            ObjectKey::new("ns", "x"),
            held("x", "fd00::5"),
        ));
        r.apply(Change::Address(
            ObjectKey::new("ns", "y"),
            held("y", "fd00::6"),
        ));
        assert_eq!(
            r.counts(&prefixes).map(|c| c.used),
            Some(1),
            "one sub-prefix"
        );
        assert_eq!(
            r.try_allocate(&prefixes, queued("t1", "a")),
            Decision::Allocate(ip("fd00:0:0:1::")),
            "the sub-prefix with addresses in use is skipped"
        );
        r.apply(Change::AddressGone(ObjectKey::new("ns", "x")));
        assert_eq!(
            r.counts(&prefixes).map(|c| c.used),
            Some(2),
            "y still holds it"
        );
        r.apply(Change::AddressGone(ObjectKey::new("ns", "y")));
        assert_eq!(
            r.counts(&prefixes).map(|c| c.used),
            Some(1),
            "only a's, in flight"
        );
        assert!(r.recount().is_empty());
    }

    #[test]
    fn a_sub_prefix_inside_a_global_prefix_pool_is_reserved_in_the_cluster_scope() {
        let namespaced = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "p6").unwrap();
        let global = PoolKey::of_kind(PoolKind::GlobalPrefix, None, "g6").unwrap();
        let mut r = Registry::default();
        r.set_pool(
            &namespaced,
            Ok(prefix_pool(&namespaced, &["fd00::/63"], 64)),
        );
        assert_eq!(
            r.reservation_scope(&namespaced, ip("fd00::")),
            namespaced.scope()
        );
        r.set_pool(&global, Ok(prefix_pool(&global, &["fd00::/48"], 64)));
        assert_eq!(
            r.reservation_scope(&namespaced, ip("fd00::")),
            Scope::Cluster
        );
    }

    /// A pool of one address (10.0.0.10), allocated to claim `first` and reserved.
    fn only_address_held_by_first() -> Registry {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10"], 24)));
        assert!(matches!(
            r.try_allocate(&pool(), queued("t1", "first")),
            Decision::Allocate(_)
        ));
        r.apply(Change::Reservation(
            "res-first".into(),
            hold("first", "10.0.0.10"),
        ));
        r.finish(&pool(), ip("10.0.0.10"));
        r
    }

    #[test]
    fn the_same_spec_again_changes_nothing_and_wakes_nobody() {
        let mut r = only_address_held_by_first();
        assert!(matches!(
            r.try_allocate(&pool(), queued("t2", "waiting")),
            Decision::Exhausted { .. }
        ));
        r.take_dirty();

        assert!(
            r.set_pool(&pool(), Ok(parsed(&["10.0.0.10"], 24)))
                .is_empty()
        );
        assert!(r.take_dirty().is_empty(), "nothing to recount");
        assert!(
            matches!(
                r.try_allocate(&pool(), queued("t2", "waiting")),
                Decision::Exhausted { .. }
            ),
            "the held address stays held"
        );
        assert_eq!(
            r.set_pool(&pool(), Ok(parsed(&["10.0.0.10-10.0.0.11"], 24))),
            vec![ObjectKey::new("ns", "waiting")],
            "a grown pool wakes the waiting claim"
        );
    }

    #[test]
    fn a_later_claim_never_overtakes_an_earlier_waiting_one() {
        let mut r = only_address_held_by_first();
        assert!(matches!(
            r.try_allocate(&pool(), queued("t2", "older")),
            Decision::Exhausted { ahead: 0, .. }
        ));
        assert!(matches!(
            r.try_allocate(&pool(), queued("t3", "newer")),
            Decision::Exhausted { ahead: 1, .. }
        ));
        // Release: only the oldest waiting claim is woken, and only it may take the address.
        assert_eq!(
            r.apply(Change::ReservationGone("res-first".into())),
            vec![ObjectKey::new("ns", "older"), ObjectKey::new("ns", "first")]
        );
        assert!(matches!(
            r.try_allocate(&pool(), queued("t3", "newer")),
            Decision::Exhausted { ahead: 1, .. }
        ));
        assert_eq!(
            r.try_allocate(&pool(), queued("t2", "older")),
            Decision::Allocate(ip("10.0.0.10"))
        );
    }

    #[test]
    fn an_address_stays_used_while_any_object_holds_it() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10"], 24)));
        r.apply(Change::Reservation("res".into(), hold("a", "10.0.0.10")));
        r.apply(Change::Address(
            ObjectKey::new("ns", "a"),
            hold("a", "10.0.0.10"),
        ));
        assert_eq!(r.free(&pool()), 0);
        assert_eq!(
            r.apply(Change::ReservationGone("res".into())),
            vec![ObjectKey::new("ns", "a")],
            "only its claim, to reserve the address again"
        );
        assert_eq!(r.free(&pool()), 0);
        r.apply(Change::AddressGone(ObjectKey::new("ns", "a")));
        assert_eq!(r.free(&pool()), 1);
    }

    #[test]
    fn a_claim_realised_elsewhere_is_not_queued() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10"], 24)));
        r.apply(Change::Address(
            ObjectKey::new("ns", "a"),
            hold("a", "10.0.0.10"),
        ));
        assert_eq!(
            r.try_allocate(&pool(), queued("t1", "a")),
            Decision::AlreadyHeld
        );
        assert_eq!(r.waiting(&pool()), 0);
    }

    #[test]
    fn reservations_are_found_by_claim() {
        let mut r = Registry::default();
        r.apply(Change::Reservation("one".into(), hold("a", "10.0.0.10")));
        r.apply(Change::Reservation("two".into(), hold("b", "10.0.0.11")));
        let of_a = r.reservations_of(&ObjectKey::new("ns", "a"));
        assert_eq!(of_a, vec![("one".to_string(), hold("a", "10.0.0.10"))]);
        r.apply(Change::ReservationGone("one".into()));
        assert!(r.reservations_of(&ObjectKey::new("ns", "a")).is_empty());
        assert_eq!(r.reservations_of(&ObjectKey::new("ns", "b")).len(), 1);
    }

    #[test]
    fn holds_seen_before_the_pool_count_once_it_appears() {
        let mut r = Registry::default();
        r.apply(Change::Reservation("res".into(), hold("a", "10.0.0.10")));
        assert_eq!(
            r.try_allocate(&pool(), queued("t1", "b")),
            Decision::NotReady(Unready::Missing)
        );
        let woken = r.set_pool(&pool(), Ok(parsed(&["10.0.0.10-10.0.0.11"], 24)));
        assert_eq!(woken, vec![ObjectKey::new("ns", "b")]);
        assert_eq!(
            r.try_allocate(&pool(), queued("t1", "b")),
            Decision::Allocate(ip("10.0.0.11"))
        );
    }

    #[test]
    fn growing_the_pool_wakes_as_many_claims_as_it_can_serve() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10"], 24)));
        r.apply(Change::Reservation("res".into(), hold("a", "10.0.0.10")));
        for (t, name) in [("t1", "b"), ("t2", "c"), ("t3", "d")] {
            assert!(matches!(
                r.try_allocate(&pool(), queued(t, name)),
                Decision::Exhausted { .. }
            ));
        }
        let woken = r.set_pool(&pool(), Ok(parsed(&["10.0.0.10-10.0.0.12"], 24)));
        assert_eq!(
            woken,
            vec![ObjectKey::new("ns", "b"), ObjectKey::new("ns", "c")]
        );
    }

    #[test]
    fn an_unready_pool_wakes_every_waiting_claim_when_it_changes() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Err(Unready::Invalid("bad".into())));
        assert_eq!(
            r.try_allocate(&pool(), queued("t1", "a")),
            Decision::NotReady(Unready::Invalid("bad".into()))
        );
        assert_eq!(
            r.set_pool(&pool(), Err(Unready::Deleting)),
            vec![ObjectKey::new("ns", "a")]
        );
    }

    #[test]
    fn a_relist_without_a_reservation_frees_its_address_and_wakes_the_waiting_claim() {
        let mut r = only_address_held_by_first();
        assert!(matches!(
            r.try_allocate(&pool(), queued("t2", "waiting")),
            Decision::Exhausted { .. }
        ));
        // The watch was down while `res-first` was deleted; the re-list does not have it.
        let woken = r.apply(Change::ReservationsListed(vec![(
            "res-other".into(),
            hold("other", "10.0.0.99"),
        )]));
        assert_eq!(
            woken,
            vec![
                ObjectKey::new("ns", "waiting"),
                ObjectKey::new("ns", "first")
            ]
        );
        assert_eq!(r.free(&pool()), 1);
        assert_eq!(r.reservations_of(&ObjectKey::new("ns", "other")).len(), 1);
        assert!(r.reservations_of(&ObjectKey::new("ns", "first")).is_empty());
    }

    #[test]
    fn a_relist_that_agrees_changes_nothing() {
        let mut r = only_address_held_by_first();
        let listed =
            Change::ReservationsListed(vec![("res-first".into(), hold("first", "10.0.0.10"))]);
        assert!(r.diff(listed.clone()).is_empty());
        assert!(r.apply(listed).is_empty());
        assert_eq!(r.free(&pool()), 0);
        let pools = Change::PoolsListed(
            PoolKind::InCluster,
            vec![(pool(), Ok(parsed(&["10.0.0.10"], 24)))],
        );
        assert!(r.diff(pools).is_empty());
        assert!(r.diff(Change::AddressesListed(Vec::new())).is_empty());
    }

    #[test]
    fn a_claim_with_two_reservations_keeps_both_until_each_is_gone() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10-10.0.0.20"], 24)));
        let claim = ObjectKey::new("ns", "a");
        r.apply(Change::Reservation("r1".into(), hold("a", "10.0.0.10")));
        r.apply(Change::Reservation("r2".into(), hold("a", "10.0.0.11")));
        r.apply(Change::Reservation("r2".into(), hold("a", "10.0.0.11")));
        let names = |r: &Registry| -> Vec<String> {
            r.reservations_of(&claim)
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        assert_eq!(names(&r), ["r1", "r2"]);
        r.apply(Change::ReservationGone("r1".into()));
        assert_eq!(names(&r), ["r2"]);
        r.apply(Change::Reservation("r2".into(), hold("b", "10.0.0.11")));
        assert!(names(&r).is_empty(), "r2 now records another claim");
        assert_eq!(r.reservations_of(&ObjectKey::new("ns", "b")).len(), 1);
        r.apply(Change::ReservationGone("r2".into()));
        assert!(r.reservations_of(&ObjectKey::new("ns", "b")).is_empty());
        assert!(r.reservations_by_claim.is_empty());
    }

    #[test]
    fn a_list_compared_page_by_page_differs_as_the_whole_list() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10-10.0.0.20"], 24)));
        r.apply(Change::Reservation("kept".into(), hold("a", "10.0.0.10")));
        r.apply(Change::Reservation("gone".into(), hold("b", "10.0.0.11")));
        r.apply(Change::Reservation("moved".into(), hold("c", "10.0.0.12")));
        let list: Vec<(String, HoldRecord)> = vec![
            ("kept".into(), hold("a", "10.0.0.10")),
            ("moved".into(), hold("c", "10.0.0.13")),
            ("new".into(), hold("d", "10.0.0.14")),
        ];
        let whole = r.diff(Change::ReservationsListed(list.clone()));
        assert_eq!(
            whole,
            vec![
                Change::ReservationGone("gone".into()),
                Change::Reservation("moved".into(), hold("c", "10.0.0.13")),
                Change::Reservation("new".into(), hold("d", "10.0.0.14")),
            ]
        );
        for page_size in 1..=3 {
            let mut compared = ListedHolds::default();
            for page in list.chunks(page_size) {
                r.compare_reservations(page.to_vec(), &mut compared);
            }
            assert_eq!(
                r.reservation_differences(compared),
                whole,
                "pages of {page_size}"
            );
        }
    }

    #[test]
    fn a_relist_without_an_address_wakes_its_claim_to_heal_it() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10"], 24)));
        r.apply(Change::Reservation("res".into(), hold("a", "10.0.0.10")));
        r.apply(Change::Address(
            ObjectKey::new("ns", "a"),
            hold("a", "10.0.0.10"),
        ));
        let woken = r.apply(Change::AddressesListed(Vec::new()));
        assert_eq!(woken, vec![ObjectKey::new("ns", "a")]);
        assert!(r.address_of(&ObjectKey::new("ns", "a")).is_none());
        assert_eq!(
            r.free(&pool()),
            0,
            "the reservation still holds the address"
        );
    }

    #[test]
    fn a_relist_without_a_pool_forgets_it_and_its_claims_learn_it_is_missing() {
        let mut r = Registry::default();
        let other = PoolKey::in_cluster("ns", "other");
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10"], 24)));
        r.set_pool(&other, Ok(parsed(&["10.0.1.10"], 24)));
        r.set_pool(&PoolKey::global("g"), Ok(parsed(&["10.0.2.10"], 24)));
        assert!(matches!(
            r.try_allocate(&other, queued("t1", "a")),
            Decision::Allocate(_)
        ));
        r.finish(&other, ip("10.0.1.10"));
        r.apply(Change::PoolsListed(
            PoolKind::InCluster,
            vec![(pool(), Ok(parsed(&["10.0.0.10"], 24)))],
        ));
        assert_eq!(r.counts(&other), None, "gone");
        assert!(
            r.counts(&PoolKey::global("g")).is_some(),
            "other kinds untouched"
        );
        assert_eq!(
            r.try_allocate(&other, queued("t2", "b")),
            Decision::NotReady(Unready::Missing)
        );
        r.forget_claim(&other, &ObjectKey::new("ns", "b"));
        r.collect_garbage();
        let mut keys = r.pool_keys();
        keys.sort();
        assert_eq!(
            keys,
            vec![pool(), PoolKey::global("g")],
            "nothing refers to it any more"
        );
    }

    #[test]
    fn an_allocation_that_ends_without_a_record_frees_its_address() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10"], 24)));
        let Decision::Allocate(address) = r.try_allocate(&pool(), queued("t1", "a")) else {
            panic!("allocates");
        };
        assert_eq!(r.free(&pool()), 0, "held in flight");
        r.finish(&pool(), address);
        assert_eq!(r.free(&pool()), 1, "no object holds it");
        assert!(r.recount().is_empty());
    }

    #[test]
    fn recount_finds_nothing_after_any_sequence_of_changes() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10-10.0.0.20"], 24)));
        r.apply(Change::Reservation("r1".into(), hold("a", "10.0.0.10")));
        r.apply(Change::Reservation("r1".into(), hold("a", "10.0.0.11")));
        r.apply(Change::Address(
            ObjectKey::new("ns", "a"),
            hold("a", "10.0.0.11"),
        ));
        r.apply(Change::Reservation("r2".into(), hold("b", "10.0.0.30")));
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10-10.0.0.12"], 24)));
        r.apply(Change::ReservationGone("r1".into()));
        assert!(r.recount().is_empty());
        assert_eq!(
            r.counts(&pool()).unwrap().used,
            2,
            "10.0.0.11 and out-of-range .30"
        );
    }
}
