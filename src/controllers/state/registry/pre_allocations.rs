//! Pre-allocations (`spec.preAllocations` of an IP pool): the claim an entry names gets exactly
//! that address, and no other claim gets it while the entry exists.
//!
//! Rules, all decided here from the registry alone:
//! - The pool's allocator counts every pre-allocated address of its range as used, held or not
//!   (see [`PoolEntry::allocator_of_holds`]): first-fit never hands it out, and `free` says what
//!   a claim without an entry can still get.
//! - The named claim takes its address through [`Registry::try_pre_allocated`], out of the
//!   queue (the address is its own, no other claim waits for it), or learns why not
//!   ([`PreAllocationConflict`]); it is woken when the conflict may have gone: a hold on the
//!   address let go, or the pool's spec changed.
//! - Every other pool whose range contains the address, and that claims of one namespace can
//!   reach together with the entry's pool (as holds count across pools), keeps it too
//!   ([`PoolEntry::kept_for_others`]): an overlapping pool never hands it to one of its claims,
//!   and counts it used, while the entry exists and its pool is ready.
//! - A realised claim is never moved: a changed or removed entry leaves it where it is. The pool
//!   reports it ([`Registry::pre_allocation_report`], rebuilt from the holds) and, when the spec
//!   changes under the claim, a note for an Event ([`Registry::take_pre_allocation_notes`]).
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use super::pool_entry::PoolEntry;
use super::{Allocation, HoldRecord, Holder, Registry, Unready, scopes_meet};
use crate::allocator::{NotHandedOut, ParsedPool, ParsedSpec, canonical};
use crate::api::{ObjectKey, PoolKey};

/// One pool's pre-allocations, by claim and by address; nothing but a null pointer for a pool
/// without any (most pools).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct PreAllocations(Option<Box<Entries>>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entries {
    by_claim: BTreeMap<ObjectKey, IpAddr>,
    /// The claim each address is pre-allocated to: that of the first entry naming it. The CRD
    /// cannot afford to refuse an address named twice; a later entry is a conflict of its claim.
    by_ip: HashMap<IpAddr, ObjectKey>,
    /// The pool's parsed spec (only IP pools have entries): it says why an entry's address is
    /// not handed out.
    spec: ParsedPool,
}

impl PreAllocations {
    /// The entries of a parsed spec. A namespaced pool's claims are in its namespace; a global
    /// pool's entries name theirs.
    pub(super) fn of_spec(pool: &PoolKey, spec: &ParsedSpec) -> PreAllocations {
        let ParsedSpec::Addresses(parsed) = spec else {
            return PreAllocations::default();
        };
        if parsed.pre_allocations().is_empty() {
            return PreAllocations::default();
        }
        let mut entries = Entries {
            by_claim: BTreeMap::new(),
            by_ip: HashMap::new(),
            spec: parsed.clone(),
        };
        for entry in parsed.pre_allocations() {
            let namespace = match &pool.namespace {
                Some(namespace) => namespace.to_string(),
                None => entry.claim_namespace.clone(),
            };
            let claim = ObjectKey::new(&namespace, &entry.claim_name);
            entries
                .by_ip
                .entry(entry.ip)
                .or_insert_with(|| claim.clone());
            entries.by_claim.insert(claim, entry.ip);
        }
        PreAllocations(Some(Box::new(entries)))
    }

    /// The address pre-allocated to `claim`.
    pub(super) fn of(&self, claim: &ObjectKey) -> Option<IpAddr> {
        self.0.as_ref()?.by_claim.get(claim).copied()
    }

    /// Why the pool does not hand out `ip`, named by its spec; `None` if it does, or has no
    /// entries. The caller still checks the pool's range.
    pub(super) fn not_handed_out(&self, ip: IpAddr) -> Option<NotHandedOut> {
        self.0.as_ref()?.spec.not_handed_out(ip)
    }

    /// The claim `ip` is pre-allocated to.
    pub(super) fn claim_of(&self, ip: IpAddr) -> Option<&ObjectKey> {
        self.0.as_ref()?.by_ip.get(&ip)
    }

    /// Every entry, by claim, in the claims' order.
    pub(super) fn by_claim(&self) -> impl Iterator<Item = (&ObjectKey, IpAddr)> + '_ {
        self.0
            .iter()
            .flat_map(|entries| entries.by_claim.iter().map(|(claim, &ip)| (claim, ip)))
    }

    /// Every pre-allocated address with the claim it is pre-allocated to.
    pub(super) fn by_ip(&self) -> impl Iterator<Item = (IpAddr, &ObjectKey)> + '_ {
        self.0
            .iter()
            .flat_map(|entries| entries.by_ip.iter().map(|(&ip, claim)| (ip, claim)))
    }

    /// Every pre-allocated address.
    pub(super) fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.by_ip().map(|(ip, _)| ip)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

/// Why a claim's pre-allocated address cannot be its now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreAllocationConflict {
    /// An earlier entry pre-allocates the address to another claim.
    NamedTwice(ObjectKey),
    /// The pool does not hand the address out: the gateway of one of its subnets, outside every
    /// subnet's addresses, excluded, or a subnet's network or broadcast address.
    NotHandedOut(NotHandedOut),
    /// A reservation, an `IPAddress` or an allocation in flight holds it (this pool's or an
    /// overlapping one's).
    HeldBy(Holder),
}

impl std::fmt::Display for PreAllocationConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PreAllocationConflict::NamedTwice(first) => {
                write!(f, "an earlier entry pre-allocates it to claim {first}")
            }
            PreAllocationConflict::NotHandedOut(why) => why.fmt(f),
            PreAllocationConflict::HeldBy(holder) => write!(f, "it is held by {holder}"),
        }
    }
}

/// What became of one entry, for the pool's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreAllocationState {
    /// The claim holds its address.
    Realised,
    /// Nothing holds the address; the claim has not come yet.
    Unclaimed,
    /// The claim holds another address of the pool (the entry was changed or added after it was
    /// realised); it keeps it until released.
    Drift { holds: IpAddr },
    /// The address cannot be the claim's now.
    Conflict(PreAllocationConflict),
}

impl PoolEntry {
    /// Whether the allocator counts `unit` used for a pre-allocation: one of the pool's own
    /// entries (inside the range only: outside it, a pre-allocated address is no unit of the
    /// pool), or an overlapping pool's.
    pub(super) fn is_pre_allocated(&self, unit: IpAddr) -> bool {
        (self.pre_allocations.claim_of(unit).is_some()
            && self.range().is_some_and(|range| range.contains(unit)))
            || self.kept_for_others.binary_search(&unit).is_ok()
    }

    /// Whether any record holds `unit`.
    fn is_held(&self, unit: IpAddr) -> bool {
        self.holds.contains_key(&unit) || self.covering.keys().any(|b| b.contains(unit))
    }

    /// The claims whose pre-allocated address no record holds: what a spec change or a let-go
    /// hold may have made theirs.
    pub(super) fn unrealised_pre_allocations(&self) -> Vec<ObjectKey> {
        self.pre_allocations
            .by_claim()
            .filter(|(_, ip)| !self.is_held(*ip))
            .map(|(claim, _)| claim.clone())
            .collect()
    }

    /// The claim to wake once `record` no longer holds its address: the one it is pre-allocated
    /// to, if nothing else holds it now.
    pub(super) fn pre_allocation_freed(&self, record: &HoldRecord) -> Vec<ObjectKey> {
        if self.pre_allocations.is_empty() {
            return Vec::new();
        }
        let block = record.block();
        if block.first() == block.last() {
            // One address (nearly every record): one look-up, not a walk over the entries.
            return self
                .pre_allocations
                .claim_of(record.ip)
                .filter(|claim| record.holder.claim() != Some(*claim) && !self.is_held(record.ip))
                .cloned()
                .into_iter()
                .collect();
        }
        self.pre_allocations
            .by_ip()
            .filter(|(ip, claim)| {
                block.contains(*ip) && record.holder.claim() != Some(*claim) && !self.is_held(*ip)
            })
            .map(|(_, claim)| claim.clone())
            .collect()
    }
}

impl Registry {
    /// Allocation for a claim that has an entry in `pool`: its address, held in flight, or why
    /// not. Never queued: no other claim waits for this address.
    pub(super) fn try_pre_allocated(
        &mut self,
        pool: &PoolKey,
        claim: &ObjectKey,
        ip: IpAddr,
    ) -> Allocation {
        self.dirty.insert(pool.clone());
        if let Some(conflict) = self.pre_allocation_conflict(pool, claim, ip) {
            return Allocation::PreAllocationConflict { ip, conflict };
        }
        let scope = self.reservation_scope(pool, ip);
        let held = self.hold_for(pool, claim, ip, scope.clone());
        Allocation::Reserve { held, scope }
    }

    /// Why `ip` cannot be `claim`'s in `pool` now, if it cannot.
    fn pre_allocation_conflict(
        &self,
        pool: &PoolKey,
        claim: &ObjectKey,
        ip: IpAddr,
    ) -> Option<PreAllocationConflict> {
        let entry = self.pools.get(pool)?;
        if let Some(first) = entry.pre_allocations.claim_of(ip)
            && first != claim
        {
            return Some(PreAllocationConflict::NamedTwice(first.clone()));
        }
        if let Some(why) = entry.pre_allocations.not_handed_out(ip) {
            return Some(PreAllocationConflict::NotHandedOut(why));
        }
        if !entry.range().is_some_and(|range| range.contains(ip)) {
            return Some(PreAllocationConflict::NotHandedOut(
                NotHandedOut::OutsideEverySubnet {
                    subnets: Vec::new(),
                },
            ));
        }
        if !entry.is_held(ip) {
            return None;
        }
        let holder = self
            .in_flight
            .iter()
            .chain(self.reservations.values())
            .chain(self.addresses.values())
            .find(|r| r.block().contains(ip) && entry.is_held_by(pool, r))
            .map_or(Holder::Released, |r| r.holder.clone());
        Some(PreAllocationConflict::HeldBy(holder))
    }

    /// Each entry of `pool` with what became of it, by claim. Empty for a pool without entries
    /// or not ready.
    pub fn pre_allocation_report(
        &self,
        pool: &PoolKey,
    ) -> Vec<(ObjectKey, IpAddr, PreAllocationState)> {
        let Some(entry) = self.pools.get(pool) else {
            return Vec::new();
        };
        entry
            .pre_allocations
            .by_claim()
            .map(|(claim, ip)| {
                let held = self
                    .addresses
                    .get(claim)
                    .filter(|address| &address.pool == pool)
                    .map(|address| address.ip);
                let state = match held {
                    Some(held) if held == ip => PreAllocationState::Realised,
                    Some(held) => PreAllocationState::Drift { holds: held },
                    None => match self.pre_allocation_conflict(pool, claim, ip) {
                        Some(PreAllocationConflict::HeldBy(Holder::Claim(holder)))
                            if &holder == claim =>
                        {
                            PreAllocationState::Realised
                        }
                        Some(conflict) => PreAllocationState::Conflict(conflict),
                        None => PreAllocationState::Unclaimed,
                    },
                };
                (claim.clone(), ip, state)
            })
            .collect()
    }

    /// Records a pool's new entries (before its allocator is rebuilt, which counts them). A
    /// realised claim whose entry changed or went keeps its address: a note says so (for an
    /// Event).
    pub(super) fn set_pre_allocations(
        &mut self,
        pool: &PoolKey,
        parsed: &Result<ParsedSpec, Unready>,
    ) {
        let new = match parsed {
            Ok(spec) => PreAllocations::of_spec(pool, spec),
            Err(_) => PreAllocations::default(),
        };
        let Some(entry) = self.pools.get(pool) else {
            return;
        };
        let mut notes = Vec::new();
        if parsed.is_ok() {
            for (claim, old_ip) in entry.pre_allocations.by_claim() {
                let new_ip = new.of(claim);
                let keeps = self
                    .addresses
                    .get(claim)
                    .is_some_and(|a| &a.pool == pool && a.ip == old_ip);
                if new_ip == Some(old_ip) || !keeps {
                    continue;
                }
                notes.push(match new_ip {
                    Some(new_ip) => format!(
                        "the spec.preAllocations entry of claim {claim} changed from {} to {}; the claim keeps {} until it is released",
                        canonical(old_ip),
                        canonical(new_ip),
                        canonical(old_ip)
                    ),
                    None => format!(
                        "the spec.preAllocations entry of claim {claim} ({}) was removed; the claim keeps the address until it is released, then it returns to the pool",
                        canonical(old_ip)
                    ),
                });
            }
        }
        let entry = self.pool_entry(pool);
        entry.pre_allocations = new;
        entry.pre_allocation_notes.extend(notes);
    }

    /// The notes for Events gathered for `pool` since the last call.
    pub fn take_pre_allocation_notes(&mut self, pool: &PoolKey) -> Vec<String> {
        self.pools
            .get_mut(pool)
            .map(|entry| std::mem::take(&mut entry.pre_allocation_notes))
            .unwrap_or_default()
    }

    /// The units of `pool`'s range that other ready pools pre-allocate to their claims, where
    /// claims of one namespace can reach both (what [`PoolEntry::kept_for_others`] holds), sorted.
    /// O(pools met + their entries): nothing for a pool no other pool overlaps.
    pub(super) fn kept_for(&self, pool: &PoolKey) -> Vec<IpAddr> {
        let Some(entry) = self.pools.get(pool) else {
            return Vec::new();
        };
        let Some(range) = entry.range() else {
            return Vec::new();
        };
        let mut kept: Vec<IpAddr> = self
            .by_range
            .meeting_set(range)
            .iter()
            .filter(|other| *other != pool && scopes_meet(&pool.scope(), &other.scope()))
            .filter_map(|other| self.pools.get(other))
            .flat_map(|other| {
                other
                    .pre_allocations
                    .addresses()
                    .filter(|ip| other.range().is_some_and(|r| r.contains(*ip)))
            })
            .filter(|ip| range.contains(*ip))
            .map(|ip| entry.unit(ip))
            .collect();
        kept.sort_unstable();
        kept.dedup();
        kept
    }

    /// Brings [`PoolEntry::kept_for_others`] of `pools` up to date (another pool's entries or
    /// range changed); returns the claims to wake where addresses became free.
    pub(super) fn keep_for_overlapping(&mut self, pools: Vec<PoolKey>) -> Vec<ObjectKey> {
        let mut woken = Vec::new();
        for key in pools {
            let kept = self.kept_for(&key);
            let Some(entry) = self.pools.get_mut(&key) else {
                continue;
            };
            if entry.kept_for_others == kept {
                continue;
            }
            entry.kept_for_others = kept;
            let free = entry.free();
            entry.rebuild();
            if entry.free() > free {
                woken.extend(entry.wakeups());
            }
            self.dirty.insert(key);
        }
        woken
    }

    /// The address pre-allocated to `claim` in `pool`, if any.
    pub fn pre_allocated(&self, pool: &PoolKey, claim: &ObjectKey) -> Option<IpAddr> {
        self.pools.get(pool)?.pre_allocations.of(claim)
    }
}

#[cfg(test)]
mod tests {
    use super::super::InFlight;
    use super::*;
    use crate::allocator::{PoolSpecInput, PreAllocationInput};
    use crate::controllers::state::Change;
    use crate::controllers::state::fixtures::{claim, hold, ip, pool, queued};

    /// Pool `ns/p` of `addresses` (/24, gateway .1) with `(claim, address)` entries.
    fn spec(addresses: &[&str], entries: &[(&str, &str)]) -> Result<ParsedSpec, Unready> {
        let parsed = PoolSpecInput {
            addresses: addresses.iter().map(|s| s.to_string()).collect(),
            prefix: 24,
            gateway: Some("10.0.0.1".into()),
            pre_allocations: inputs(entries),
            ..Default::default()
        }
        .parse()
        .expect("valid spec");
        Ok(ParsedSpec::Addresses(parsed))
    }

    /// `(claim, address)` entries as the parser takes them.
    fn inputs(entries: &[(&str, &str)]) -> Vec<PreAllocationInput> {
        entries
            .iter()
            .map(|(name, address)| PreAllocationInput {
                claim_name: name.to_string(),
                address: address.to_string(),
                ..Default::default()
            })
            .collect()
    }

    fn reserved(allocation: Allocation) -> Option<IpAddr> {
        match allocation {
            Allocation::Reserve { held, .. } => Some(held.ip()),
            _ => None,
        }
    }

    #[test]
    fn a_pre_allocated_address_is_used_and_only_its_claim_gets_it() {
        let mut r = Registry::default();
        r.set_pool(
            &pool(),
            spec(&["10.0.0.10-10.0.0.12"], &[("vm", "10.0.0.10")]),
        );
        let counts = r.counts(&pool()).unwrap();
        assert_eq!((counts.total, counts.used, counts.free), (3, 1, 2));
        // Older claims without an entry take the other two, then wait.
        for (t, name) in [("t1", "a"), ("t2", "b")] {
            let got = reserved(r.try_allocate(&pool(), queued(t, name))).unwrap();
            assert_ne!(got, ip("10.0.0.10"));
            r.apply(Change::Reservation(
                name.into(),
                hold(name, &got.to_string()),
            ));
            r.finish(InFlight::of(&pool(), got));
        }
        assert!(matches!(
            r.try_allocate(&pool(), queued("t3", "c")),
            Allocation::Exhausted { .. }
        ));
        // The named claim, newest of all, is not queued behind c.
        assert_eq!(
            reserved(r.try_allocate(&pool(), queued("t4", "vm"))),
            Some(ip("10.0.0.10"))
        );
        r.apply(Change::Reservation("vm".into(), hold("vm", "10.0.0.10")));
        r.finish(InFlight::of(&pool(), ip("10.0.0.10")));
        let counts = r.counts(&pool()).unwrap();
        assert_eq!((counts.used, counts.free), (3, 0), "counted once");
        // Its release does not make the address free while the entry exists.
        r.apply(Change::ReservationGone("vm".into()));
        assert_eq!(r.counts(&pool()).unwrap().free, 0);
        assert!(
            r.recount().is_empty(),
            "the allocator agrees with the holds"
        );
    }

    #[test]
    fn a_conflict_names_the_holder_and_its_end_wakes_the_claim() {
        let mut r = Registry::default();
        r.set_pool(&pool(), spec(&["10.0.0.10-10.0.0.12"], &[]));
        r.apply(Change::Reservation("x".into(), hold("x", "10.0.0.11")));
        r.set_pool(
            &pool(),
            spec(&["10.0.0.10-10.0.0.12"], &[("vm", "10.0.0.11")]),
        );
        assert_eq!(
            r.try_allocate(&pool(), queued("t1", "vm")),
            Allocation::PreAllocationConflict {
                ip: ip("10.0.0.11"),
                conflict: PreAllocationConflict::HeldBy(Holder::Claim(claim("x")))
            }
        );
        assert_eq!(r.waiting(&pool()), 0, "not queued");
        let woken = r.apply(Change::ReservationGone("x".into()));
        assert!(woken.contains(&claim("vm")), "{woken:?}");
        assert_eq!(r.counts(&pool()).unwrap().free, 2, "still kept from others");
        assert_eq!(
            reserved(r.try_allocate(&pool(), queued("t1", "vm"))),
            Some(ip("10.0.0.11"))
        );
    }

    #[test]
    fn an_entry_in_another_subnet_is_served_and_every_subnets_gateway_is_a_conflict() {
        let mut r = Registry::default();
        r.set_pool(&pool(), Ok(ParsedSpec::Addresses(parsed_with_subnet())));
        assert_eq!(
            reserved(r.try_allocate(&pool(), queued("t", "second"))),
            Some(ip("10.9.0.20"))
        );
        assert_eq!(
            r.network_of(&pool(), ip("10.9.0.20")),
            Some((16, Some(ip("10.9.0.1"))))
        );
        assert_eq!(
            r.network_of(&pool(), ip("10.0.0.10")),
            Some((24, Some(ip("10.0.0.1"))))
        );
        match r.try_allocate(&pool(), queued("t", "gw")) {
            Allocation::PreAllocationConflict { conflict, .. } => assert_eq!(
                conflict.to_string(),
                "it is the pool's gateway of subnet 10.9.0.0/16 (spec.additionalSubnets[0].gateway)"
            ),
            other => panic!("{other:?}"),
        }
    }

    /// Pool `ns/p`: 10.0.0.10-12/24 (gateway .1) and 10.9.0.10-30/16 (gateway 10.9.0.1), with
    /// entries for `second` (10.9.0.20) and `gw` (the second subnet's gateway).
    fn parsed_with_subnet() -> crate::allocator::ParsedPool {
        PoolSpecInput {
            addresses: vec!["10.0.0.10-10.0.0.12".into()],
            prefix: 24,
            gateway: Some("10.0.0.1".into()),
            additional_subnets: vec![crate::allocator::SubnetInput {
                addresses: vec!["10.9.0.10-10.9.0.30".into()],
                prefix: 16,
                gateway: Some("10.9.0.1".into()),
            }],
            pre_allocations: inputs(&[("second", "10.9.0.20"), ("gw", "10.9.0.1")]),
            ..Default::default()
        }
        .parse()
        .expect("valid spec")
    }

    #[test]
    fn the_gateway_or_an_address_outside_the_pool_waits_for_the_spec_to_change() {
        let mut r = Registry::default();
        r.set_pool(
            &pool(),
            spec(
                &["10.0.0.10-10.0.0.12"],
                &[
                    ("gw", "10.0.0.1"),
                    ("out", "10.0.0.50"),
                    ("twice", "10.0.0.50"),
                ],
            ),
        );
        let conflict =
            |r: &mut Registry, name: &str| match r.try_allocate(&pool(), queued("t", name)) {
                Allocation::PreAllocationConflict { conflict, .. } => conflict,
                other => panic!("{name}: {other:?}"),
            };
        assert_eq!(
            conflict(&mut r, "gw").to_string(),
            "it is the pool's gateway (spec.gateway)"
        );
        assert_eq!(
            conflict(&mut r, "out").to_string(),
            "the pool does not hand it out: it is outside spec.addresses (subnet 10.0.0.0/24)"
        );
        assert_eq!(
            conflict(&mut r, "twice"),
            PreAllocationConflict::NamedTwice(claim("out"))
        );
        assert_eq!(r.counts(&pool()).unwrap().free, 3, "nothing inside is kept");
        let woken = r.set_pool(
            &pool(),
            spec(&["10.0.0.10-10.0.0.60"], &[("out", "10.0.0.50")]),
        );
        assert!(woken.contains(&claim("out")), "{woken:?}");
        assert_eq!(
            reserved(r.try_allocate(&pool(), queued("t", "out"))),
            Some(ip("10.0.0.50"))
        );
    }

    #[test]
    fn a_changed_or_removed_entry_leaves_the_realised_claim_and_is_reported() {
        let mut r = Registry::default();
        r.set_pool(
            &pool(),
            spec(
                &["10.0.0.10-10.0.0.20"],
                &[("a", "10.0.0.15"), ("b", "10.0.0.16")],
            ),
        );
        for (name, address) in [("a", "10.0.0.15"), ("b", "10.0.0.16")] {
            r.apply(Change::Reservation(name.into(), hold(name, address)));
            r.apply(Change::Address(claim(name), hold(name, address)));
        }
        assert!(r.take_pre_allocation_notes(&pool()).is_empty());
        r.set_pool(
            &pool(),
            spec(&["10.0.0.10-10.0.0.20"], &[("a", "10.0.0.17")]),
        );
        let notes = r.take_pre_allocation_notes(&pool());
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].contains("ns/a changed from 10.0.0.15 to 10.0.0.17"),
            "{notes:?}"
        );
        assert!(
            notes[1].contains("ns/b (10.0.0.16) was removed"),
            "{notes:?}"
        );
        assert_eq!(
            r.pre_allocation_report(&pool()),
            vec![(
                claim("a"),
                ip("10.0.0.17"),
                PreAllocationState::Drift {
                    holds: ip("10.0.0.15")
                }
            )]
        );
        let counts = r.counts(&pool()).unwrap();
        assert_eq!(counts.used, 3, "both held, and .17 kept for a");
        // Released, the old address returns to the pool; .17 stays a's.
        r.apply(Change::AddressGone(claim("b")));
        r.apply(Change::ReservationGone("b".into()));
        assert_eq!(r.counts(&pool()).unwrap().used, 2);
    }

    #[test]
    fn an_overlapping_pool_keeps_an_entry_of_another_pool_from_its_claims() {
        let mut r = Registry::default();
        let q = PoolKey::in_cluster("ns", "q");
        let elsewhere = PoolKey::in_cluster("other", "q");
        r.set_pool(&q, spec(&["10.0.0.10-10.0.0.12"], &[]));
        r.set_pool(&elsewhere, spec(&["10.0.0.10-10.0.0.12"], &[]));
        // p pre-allocates .11, inside q's range: q counts it used and never hands it out.
        r.set_pool(
            &pool(),
            spec(&["10.0.0.5-10.0.0.20"], &[("vm", "10.0.0.11")]),
        );
        let counts = r.counts(&q).unwrap();
        assert_eq!((counts.total, counts.used, counts.free), (3, 1, 2));
        let mut given = Vec::new();
        for (t, name) in [("t1", "a"), ("t2", "b"), ("t3", "c")] {
            if let Some(got) = reserved(r.try_allocate(&q, queued(t, name))) {
                given.push(got);
                r.apply(Change::Reservation(
                    name.into(),
                    HoldRecord {
                        pool: q.clone(),
                        ..hold(name, &got.to_string())
                    },
                ));
                r.finish(InFlight::of(&q, got));
            }
        }
        assert_eq!(given, [ip("10.0.0.10"), ip("10.0.0.12")]);
        // A pool of another namespace is out of the entry's reach: it keeps nothing.
        assert_eq!(r.counts(&elsewhere).unwrap().used, 0);
        // The named claim still gets it through p.
        assert_eq!(
            reserved(r.try_allocate(&pool(), queued("t4", "vm"))),
            Some(ip("10.0.0.11"))
        );
        r.apply(Change::Reservation("vm".into(), hold("vm", "10.0.0.11")));
        r.finish(InFlight::of(&pool(), ip("10.0.0.11")));
        // Released, it stays kept in q while the entry exists.
        r.apply(Change::ReservationGone("vm".into()));
        assert_eq!(r.counts(&q).unwrap().used, 3);
        // The entry goes: the address is q's to hand out, and q's waiting claim is woken.
        let woken = r.set_pool(&pool(), spec(&["10.0.0.5-10.0.0.20"], &[]));
        assert!(woken.contains(&claim("c")), "{woken:?}");
        assert_eq!(r.counts(&q).unwrap().used, 2);
        assert_eq!(
            reserved(r.try_allocate(&q, queued("t3", "c"))),
            Some(ip("10.0.0.11"))
        );
        // The audit's recount agrees with what the changes built.
        assert!(r.recount().is_empty());
    }
}
