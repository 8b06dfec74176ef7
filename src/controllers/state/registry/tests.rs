//! The registry, told facts and asked questions as the watches and the reconcilers do.
use super::*;
use crate::allocator::PoolSpecInput;
use crate::api::{PoolKind, Scope};
use crate::controllers::state::fixtures::{hold, hold_in, ip, pool, queued};
use std::net::IpAddr;

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

/// The address an allocation reserves, if it reserves one.
fn allocated(allocation: Allocation) -> Option<IpAddr> {
    match allocation {
        Allocation::Reserve { held, .. } => Some(held.ip()),
        _ => None,
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
        Allocation::Exhausted { .. }
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
    assert_eq!(allocated(a), Some(ip("10.0.0.10")));
    let b = r.try_allocate(&pool(), queued("t2", "b"));
    assert_eq!(allocated(b), Some(ip("10.0.0.11")));
    assert!(matches!(
        r.try_allocate(&pool(), queued("t3", "c")),
        Allocation::Exhausted { total: 2, ahead: 0 }
    ));
    // A failed create gives the address back and wakes the waiting claim.
    assert_eq!(
        r.finish(InFlight::of(&pool(), ip("10.0.0.11"))),
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
    let held = r.hold_in_flight(&key, &claim, ip("fd00::5"));
    r.set_pool(&key, spec());
    assert_eq!(r.free(&key), 1, "the sub-prefix is used while in flight");
    r.finish(held);
    assert!(!r.has_own_holds(&key), "nothing left in flight");
    assert_eq!(r.free(&key), 2);
    let held = r.hold_in_flight(&key, &claim, ip("fd00::5"));
    r.set_pool(&key, Err(Unready::Paused));
    r.finish(held);
    r.set_pool(&key, spec());
    assert!(!r.has_own_holds(&key), "nothing left in flight");
    assert_eq!(r.free(&key), 2);
    // Two allocations in flight in one sub-prefix: it stays used until both end.
    let a = r.hold_in_flight(&key, &claim, ip("fd00::"));
    let b = r.hold_in_flight(&key, &ObjectKey::new("ns", "b"), ip("fd00::5"));
    r.finish(a);
    assert_eq!(r.free(&key), 1);
    r.finish(b);
    assert_eq!(r.free(&key), 2);
}

#[test]
fn a_prefix_pool_takes_the_same_path_with_sub_prefixes() {
    let key = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "p6").unwrap();
    let mut r = Registry::default();
    r.set_pool(&key, Ok(prefix_pool(&key, &["fd00::/63"], 64)));
    assert_eq!(r.network(&key), Some((64, Some(ip("fd00::1")))));
    let a = r.try_allocate(&key, queued("t1", "a"));
    assert_eq!(allocated(a), Some(ip("fd00::")));
    let b = r.try_allocate(&key, queued("t2", "b"));
    assert_eq!(allocated(b), Some(ip("fd00:0:0:1::")));
    assert!(matches!(
        r.try_allocate(&key, queued("t3", "c")),
        Allocation::Exhausted { total: 2, ahead: 0 }
    ));
    // b's reservation holds its sub-prefix; the in-flight allocation ends.
    let reserved = |name: &str, address: &str| HoldRecord {
        pool: key.clone(),
        ip: ip(address),
        length: 64,
        holder: Holder::Claim(ObjectKey::new("ns", name)),
        scope: key.scope(),
    };
    r.apply(Change::Reservation(
        "b".into(),
        reserved("b", "fd00:0:0:1::"),
    ));
    assert!(r.finish(InFlight::of(&key, ip("fd00:0:0:1::"))).is_empty());
    // a's create failed: its sub-prefix is free again and c is woken.
    assert_eq!(
        r.finish(InFlight::of(&key, ip("fd00::"))),
        vec![ObjectKey::new("ns", "c")]
    );
    assert_eq!(r.counts(&key).map(|c| (c.used, c.free)), Some((1, 1)));
    assert!(r.recount().is_empty());
}

/// A registry with two global pools over the same IPv6 space: the prefix pool `v6-prefixes` of
/// `prefixes` by /64 and the IP pool `v6-addresses` of `addresses` with prefix `prefix`; returns
/// it with their keys.
fn prefix_and_ip_pools(
    prefixes: &[&str],
    addresses: &[&str],
    prefix: i64,
) -> (Registry, PoolKey, PoolKey) {
    let prefix_key = PoolKey::global("v6-prefixes");
    let address_key = PoolKey::global("v6-addresses");
    let mut r = Registry::default();
    r.set_pool(&prefix_key, Ok(prefix_pool(&prefix_key, prefixes, 64)));
    r.set_pool(&address_key, Ok(parsed(addresses, prefix)));
    (r, prefix_key, address_key)
}

#[test]
fn addresses_inside_one_sub_prefix_hold_it_until_the_last_goes() {
    let (mut r, prefixes, addresses) =
        prefix_and_ip_pools(&["fd00::/63"], &["fd00::5-fd00::6"], 64);
    assert_eq!(r.overlaps(&prefixes).len(), 1, "range-aware overlap");
    let held = |name: &str, address: &str| HoldRecord {
        pool: addresses.clone(),
        ip: ip(address),
        length: 128,
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
        allocated(r.try_allocate(&prefixes, queued("t1", "a"))),
        Some(ip("fd00:0:0:1::")),
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
        Allocation::Reserve { .. }
    ));
    r.apply(Change::Reservation(
        "res-first".into(),
        hold("first", "10.0.0.10"),
    ));
    r.finish(InFlight::of(&pool(), ip("10.0.0.10")));
    r
}

/// [`only_address_held_by_first`], with claim `waiting` queued for the pool.
fn waiting_behind_first() -> Registry {
    let mut r = only_address_held_by_first();
    assert!(matches!(
        r.try_allocate(&pool(), queued("t2", "waiting")),
        Allocation::Exhausted { .. }
    ));
    r
}

#[test]
fn the_same_spec_again_changes_nothing_and_wakes_nobody() {
    let mut r = waiting_behind_first();
    r.take_dirty();

    assert!(
        r.set_pool(&pool(), Ok(parsed(&["10.0.0.10"], 24)))
            .is_empty()
    );
    assert!(r.take_dirty().is_empty(), "nothing to recount");
    assert!(
        matches!(
            r.try_allocate(&pool(), queued("t2", "waiting")),
            Allocation::Exhausted { .. }
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
        Allocation::Exhausted { ahead: 0, .. }
    ));
    assert!(matches!(
        r.try_allocate(&pool(), queued("t3", "newer")),
        Allocation::Exhausted { ahead: 1, .. }
    ));
    // Release: only the oldest waiting claim is woken, and only it may take the address.
    assert_eq!(
        r.apply(Change::ReservationGone("res-first".into())),
        vec![ObjectKey::new("ns", "older"), ObjectKey::new("ns", "first")]
    );
    assert!(matches!(
        r.try_allocate(&pool(), queued("t3", "newer")),
        Allocation::Exhausted { ahead: 1, .. }
    ));
    assert_eq!(
        allocated(r.try_allocate(&pool(), queued("t2", "older"))),
        Some(ip("10.0.0.10"))
    );
}

#[test]
fn the_total_of_waiting_claims_follows_every_queue() {
    let mut r = only_address_held_by_first();
    let other = PoolKey::in_cluster("ns", "other");
    r.set_pool(&other, Ok(parsed(&["10.0.1.10"], 24)));
    r.apply(Change::Reservation(
        "res-other".into(),
        hold_in(&other, "x", "10.0.1.10"),
    ));
    for (created, claim) in [("t2", "older"), ("t3", "newer")] {
        r.try_allocate(&pool(), queued(created, claim));
    }
    r.try_allocate(&pool(), queued("t3", "newer"));
    r.try_allocate(&other, queued("t4", "elsewhere"));
    assert_eq!(r.sizes().waiting, 3, "a claim asking twice waits once");

    r.forget_claim(&pool(), &ObjectKey::new("ns", "newer"));
    assert_eq!(r.sizes().waiting, 2);
    r.apply(Change::ReservationGone("res-first".into()));
    assert!(allocated(r.try_allocate(&pool(), queued("t2", "older"))).is_some());
    assert_eq!(r.sizes().waiting, 1, "served, so no longer waiting");
    r.prune_waiting_everywhere(|_| false);
    assert_eq!(r.sizes().waiting, 0);
}

/// A registry whose pool's one address, 10.0.0.10, claim `a` holds twice: by its reservation
/// `res` and by its `IPAddress`.
fn address_held_by_reservation_and_address() -> Registry {
    let mut r = Registry::default();
    r.set_pool(&pool(), Ok(parsed(&["10.0.0.10"], 24)));
    r.apply(Change::Reservation("res".into(), hold("a", "10.0.0.10")));
    r.apply(Change::Address(
        ObjectKey::new("ns", "a"),
        hold("a", "10.0.0.10"),
    ));
    r
}

#[test]
fn an_address_stays_used_while_any_object_holds_it() {
    let mut r = address_held_by_reservation_and_address();
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
        Allocation::Adopt
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
        Allocation::NotReady(Unready::Missing)
    );
    let woken = r.set_pool(&pool(), Ok(parsed(&["10.0.0.10-10.0.0.11"], 24)));
    assert_eq!(woken, vec![ObjectKey::new("ns", "b")]);
    assert_eq!(
        allocated(r.try_allocate(&pool(), queued("t1", "b"))),
        Some(ip("10.0.0.11"))
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
            Allocation::Exhausted { .. }
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
        Allocation::NotReady(Unready::Invalid("bad".into()))
    );
    assert_eq!(
        r.set_pool(&pool(), Err(Unready::Deleting)),
        vec![ObjectKey::new("ns", "a")]
    );
}

#[test]
fn a_relist_without_a_reservation_frees_its_address_and_wakes_the_waiting_claim() {
    let mut r = waiting_behind_first();
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
    let listed = Change::ReservationsListed(vec![("res-first".into(), hold("first", "10.0.0.10"))]);
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
fn a_relist_of_pools_names_the_pools_whose_spec_changed_or_went() {
    let mut r = Registry::default();
    let (same, grown, gone, gone_before) = (
        PoolKey::in_cluster("ns", "same"),
        PoolKey::in_cluster("ns", "grown"),
        PoolKey::in_cluster("ns", "gone"),
        PoolKey::in_cluster("ns", "gone-before"),
    );
    for key in [&same, &grown, &gone, &gone_before] {
        r.set_pool(key, Ok(parsed(&["10.0.0.10"], 24)));
    }
    r.apply(Change::PoolGone(gone_before.clone()));
    let grown_spec = Ok(parsed(&["10.0.0.10-10.0.0.11"], 24));
    let listed = Change::PoolsListed(
        PoolKind::InCluster,
        vec![
            (same.clone(), Ok(parsed(&["10.0.0.10"], 24))),
            (grown.clone(), grown_spec.clone()),
        ],
    );
    assert_eq!(
        r.diff(listed.clone()),
        [
            Change::PoolGone(gone),
            Change::Pool(grown.clone(), grown_spec)
        ]
    );
    r.apply(listed.clone());
    assert!(r.diff(listed).is_empty(), "applied, the list agrees");
    assert_eq!(r.free(&grown), 2);
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
    let mut r = address_held_by_reservation_and_address();
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
        Allocation::Reserve { .. }
    ));
    r.finish(InFlight::of(&other, ip("10.0.1.10")));
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
        Allocation::NotReady(Unready::Missing)
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
    let Allocation::Reserve { held, .. } = r.try_allocate(&pool(), queued("t1", "a")) else {
        panic!("allocates");
    };
    assert_eq!(r.free(&pool()), 0, "held in flight");
    r.finish(held);
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

/// Holds of a prefix pool's sub-prefix, as its reservation or `IPAddress` records it.
fn sub_prefix_hold(pool: &PoolKey, name: &str, address: &str, length: u8) -> HoldRecord {
    HoldRecord {
        pool: pool.clone(),
        ip: ip(address),
        length,
        holder: Holder::Claim(ObjectKey::new("ns", name)),
        scope: pool.scope(),
    }
}

#[test]
fn a_sub_prefix_held_in_a_prefix_pool_removes_its_addresses_from_an_overlapping_ip_pool() {
    let (mut r, prefixes, addresses) =
        prefix_and_ip_pools(&["fd00::/63"], &["fd00::1-fd00::3", "fd00:0:0:1::1"], 63);

    // The prefix pool's allocation in flight already keeps the IP pool off its /64.
    let a = allocated(r.try_allocate(&prefixes, queued("t1", "a")));
    assert_eq!(a, Some(ip("fd00::")));
    assert_eq!(r.counts(&addresses).map(|c| (c.used, c.free)), Some((3, 1)));
    assert_eq!(
        allocated(r.try_allocate(&addresses, queued("t2", "b"))),
        Some(ip("fd00:0:0:1::1")),
        "the only address outside the sub-prefix in flight"
    );
    // Their reservations hold them; the allocations in flight end.
    r.apply(Change::Reservation(
        "a".into(),
        sub_prefix_hold(&prefixes, "a", "fd00::", 64),
    ));
    r.apply(Change::Reservation(
        "b".into(),
        sub_prefix_hold(&addresses, "b", "fd00:0:0:1::1", 128),
    ));
    r.finish(InFlight::of(&prefixes, ip("fd00::")));
    r.finish(InFlight::of(&addresses, ip("fd00:0:0:1::1")));
    assert_eq!(r.counts(&addresses).map(|c| (c.used, c.free)), Some((4, 0)));
    assert_eq!(r.counts(&prefixes).map(|c| (c.used, c.free)), Some((2, 0)));
    assert!(
        r.recount().is_empty(),
        "the counts agree with the holds: no drift"
    );

    // The sub-prefix goes: its three addresses are free again and the waiting claim is woken.
    assert!(matches!(
        r.try_allocate(&addresses, queued("t3", "c")),
        Allocation::Exhausted { .. }
    ));
    assert_eq!(
        r.apply(Change::ReservationGone("a".into())),
        vec![ObjectKey::new("ns", "c"), ObjectKey::new("ns", "a")],
        "c, which the addresses can serve, and a, which must reserve its sub-prefix again"
    );
    assert_eq!(r.counts(&addresses).map(|c| (c.used, c.free)), Some((1, 3)));
    assert!(r.recount().is_empty());
}

#[test]
fn an_address_held_in_an_ip_pool_removes_its_sub_prefix_from_an_overlapping_prefix_pool() {
    let (mut r, prefixes, addresses) = prefix_and_ip_pools(&["fd00::/63"], &["fd00::5"], 64);
    assert_eq!(
        allocated(r.try_allocate(&addresses, queued("t1", "a"))),
        Some(ip("fd00::5"))
    );
    assert_eq!(
        allocated(r.try_allocate(&prefixes, queued("t2", "b"))),
        Some(ip("fd00:0:0:1::")),
        "the /64 with the address in flight is skipped"
    );
    assert!(matches!(
        r.try_allocate(&prefixes, queued("t3", "c")),
        Allocation::Exhausted { .. }
    ));
    // The address's allocation fails: its sub-prefix is free for the waiting claim.
    assert_eq!(
        r.finish(InFlight::of(&addresses, ip("fd00::5"))),
        vec![ObjectKey::new("ns", "c")]
    );
    assert_eq!(r.counts(&prefixes).map(|c| c.free), Some(1));
}

#[test]
fn prefix_pools_of_different_lengths_never_hand_out_the_same_space() {
    let long = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "sixty-six").unwrap();
    let short = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "sixty-four").unwrap();
    let mut r = Registry::default();
    r.set_pool(&long, Ok(prefix_pool(&long, &["fd00::/63"], 66)));
    r.set_pool(&short, Ok(prefix_pool(&short, &["fd00::/63"], 64)));
    assert_eq!(r.counts(&long).map(|c| c.total), Some(8));

    // A /64 of the short pool covers four /66s of the long one.
    r.apply(Change::Address(
        ObjectKey::new("ns", "a"),
        sub_prefix_hold(&short, "a", "fd00::", 64),
    ));
    assert_eq!(r.counts(&long).map(|c| (c.used, c.free)), Some((4, 4)));
    assert_eq!(
        allocated(r.try_allocate(&long, queued("t1", "b"))),
        Some(ip("fd00:0:0:1::"))
    );
    r.apply(Change::Address(
        ObjectKey::new("ns", "b"),
        sub_prefix_hold(&long, "b", "fd00:0:0:1::", 66),
    ));
    r.finish(InFlight::of(&long, ip("fd00:0:0:1::")));
    // ... and a /66 of the long pool holds the /64 of the short one that contains it.
    assert_eq!(r.counts(&short).map(|c| (c.used, c.free)), Some((2, 0)));
    assert!(r.recount().is_empty());

    // Two holds of one /66 (a duplicate left by a second writer): it stays used until both go.
    r.apply(Change::Reservation(
        "b-twin".into(),
        sub_prefix_hold(&short, "twin", "fd00::", 64),
    ));
    r.apply(Change::AddressGone(ObjectKey::new("ns", "a")));
    assert_eq!(r.counts(&long).map(|c| c.used), Some(5));
    r.apply(Change::ReservationGone("b-twin".into()));
    assert_eq!(r.counts(&long).map(|c| c.used), Some(1));
    assert!(r.recount().is_empty());
}

#[test]
fn an_address_covered_by_a_sub_prefix_stays_used_when_its_own_hold_goes() {
    let (mut r, prefixes, addresses) =
        prefix_and_ip_pools(&["fd00::/64"], &["fd00::5-fd00::6"], 64);
    r.apply(Change::Address(
        ObjectKey::new("ns", "x"),
        HoldRecord {
            pool: addresses.clone(),
            ip: ip("fd00::5"),
            length: 128,
            holder: Holder::Claim(ObjectKey::new("ns", "x")),
            scope: Scope::Cluster,
        },
    ));
    r.apply(Change::Address(
        ObjectKey::new("ns", "y"),
        sub_prefix_hold(&prefixes, "y", "fd00::", 64),
    ));
    assert_eq!(
        r.apply(Change::AddressGone(ObjectKey::new("ns", "x"))),
        vec![ObjectKey::new("ns", "x")],
        "only x itself is woken: fd00::5 is still inside y's sub-prefix"
    );
    assert_eq!(r.counts(&addresses).map(|c| c.used), Some(2));
    assert!(r.recount().is_empty());
}

// The index of pools by range (`by_range`): a hold visits only the pools its block meets, and
// the answers are those of a look at every pool.

/// `10.0.x.y` for an offset `x * 256 + y` in a small IPv4 space where pools overlap often.
fn v4(offset: u32) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + offset))
}

fn set_of(ranges: &[(u32, u32)]) -> crate::allocator::AddressSet {
    crate::allocator::AddressSet::from_ranges(
        crate::allocator::Family::V4,
        ranges
            .iter()
            .map(|&(a, b)| crate::allocator::AddrRange::new(v4(a), v4(b)).expect("a range")),
    )
    .expect("one family")
}

proptest::proptest! {
    #[test]
    fn the_index_answers_as_a_look_at_every_pool(
        steps in proptest::collection::vec(
            (0usize..6, proptest::collection::vec((0u32..64, 0u32..8), 0..3)),
            1..40,
        ),
        queries in proptest::collection::vec((0u32..72, 0u32..10), 8),
    ) {
        let keys: Vec<PoolKey> = (0..6).map(|i| PoolKey::in_cluster("ns", &format!("p{i}"))).collect();
        let mut index = by_range::PoolsByRange::default();
        let mut ranges: HashMap<PoolKey, crate::allocator::AddressSet> = HashMap::new();
        for (pool, intervals) in steps {
            let key = &keys[pool];
            // An empty interval list removes the pool; otherwise it gets this range.
            if let Some(old) = ranges.remove(key) {
                index.remove(key, &old);
            }
            if !intervals.is_empty() {
                let pairs: Vec<(u32, u32)> = intervals.iter().map(|&(a, n)| (a, a + n)).collect();
                let new = set_of(&pairs);
                index.insert(key, &new);
                ranges.insert(key.clone(), new);
            }
            for &(first, length) in &queries {
                let range = crate::allocator::AddrRange::new(v4(first), v4(first + length)).unwrap();
                let mut expected: Vec<PoolKey> = ranges
                    .iter()
                    .filter(|(_, set)| set.meets(range))
                    .map(|(key, _)| key.clone())
                    .collect();
                expected.sort();
                proptest::prop_assert_eq!(index.meeting(range), expected);
                let at = v4(first);
                let mut containing: Vec<PoolKey> = ranges
                    .iter()
                    .filter(|(_, set)| set.contains(at))
                    .map(|(key, _)| key.clone())
                    .collect();
                containing.sort();
                proptest::prop_assert_eq!(index.containing(at), &containing[..]);
            }
        }
        for (key, set) in &ranges {
            index.remove(key, set);
        }
        proptest::prop_assert_eq!(index.segments(), 0, "nothing is left of pools that went");
    }

    #[test]
    fn holds_count_where_a_look_at_every_pool_counts_them(
        pools in proptest::collection::vec((0usize..3, 0u32..48, 1u32..16), 1..8),
        holds in proptest::collection::vec((0usize..8, 0u32..70, 0usize..3), 0..30),
        gone in proptest::collection::vec(0usize..30, 0..10),
    ) {
        // Scopes: namespace a, namespace b, global.
        let key = |i: usize, scope: usize| match scope {
            0 => PoolKey::in_cluster("a", &format!("p{i}")),
            1 => PoolKey::in_cluster("b", &format!("p{i}")),
            _ => PoolKey::global(&format!("p{i}")),
        };
        let keys: Vec<PoolKey> = pools.iter().enumerate().map(|(i, (scope, _, _))| key(i, *scope)).collect();
        let mut r = Registry::default();
        for (k, (_, first, length)) in keys.iter().zip(&pools) {
            let range = format!("{}-{}", v4(*first), v4(first + length));
            r.set_pool(k, Ok(parsed(&[&range], 16)));
        }
        let mut live: Vec<(String, HoldRecord)> = Vec::new();
        for (n, (pool, offset, claim_scope)) in holds.iter().enumerate() {
            let pool = &keys[pool % keys.len()];
            let scope = match claim_scope {
                0 => pool.scope(),
                _ => Scope::Cluster,
            };
            let record = HoldRecord {
                pool: pool.clone(),
                ip: v4(*offset),
                length: 32,
                holder: Holder::Claim(ObjectKey::new("a", &format!("c{n}"))),
                scope,
            };
            r.apply(Change::Reservation(format!("r{n}"), record.clone()));
            live.push((format!("r{n}"), record));
        }
        for n in gone {
            if n < live.len() {
                let (name, _) = live.remove(n);
                r.apply(Change::ReservationGone(name));
            }
        }
        for k in &keys {
            let range = r.pools[k].range().cloned().expect("a ready pool");
            // A look at every record: the addresses held in this pool.
            let used: std::collections::BTreeSet<IpAddr> = live
                .iter()
                .map(|(_, record)| record)
                .filter(|record| {
                    record.pool == *k
                        || (scopes_meet(&k.scope(), &record.scope) && range.contains(record.ip))
                })
                .map(|record| record.ip)
                .collect();
            proptest::prop_assert_eq!(r.counts(k).map(|c| c.used), Some(used.len() as u128), "{}", k);
            proptest::prop_assert_eq!(r.has_own_holds(k), live.iter().any(|(_, rec)| rec.pool == *k));
            let outside = live.iter().filter(|(_, rec)| rec.pool == *k && !range.contains(rec.ip)).count();
            proptest::prop_assert_eq!(r.out_of_range(k).len(), outside, "{}", k);
            // Overlaps: a look at every other pool.
            let expected: Vec<PoolKey> = keys
                .iter()
                .filter(|o| *o != k && scopes_meet(&o.scope(), &k.scope()))
                .filter(|o| r.pools[*o].range().is_some_and(|other| range.overlaps(other)))
                .cloned()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let found: Vec<PoolKey> = r.overlaps(k).into_iter().map(|(o, _)| o).collect();
            proptest::prop_assert_eq!(found, expected);
        }
        proptest::prop_assert!(r.recount().is_empty());
    }
}

#[test]
fn a_pool_change_marks_only_the_pools_its_old_or_new_range_meets() {
    let mut r = Registry::default();
    let keys: Vec<PoolKey> = (0..100)
        .map(|i| PoolKey::in_cluster("ns", &format!("p{i}")))
        .collect();
    for (i, key) in keys.iter().enumerate() {
        r.set_pool(key, Ok(parsed(&[&format!("10.{i}.0.0/24")], 24)));
    }
    r.take_dirty();
    // p1 moves from 10.1.0.0/24 onto p2's range: p1, and p2 which it now overlaps.
    r.set_pool(&keys[1], Ok(parsed(&["10.2.0.0/25"], 24)));
    let mut dirty = r.take_dirty();
    dirty.sort();
    assert_eq!(dirty, vec![keys[1].clone(), keys[2].clone()]);
    // It moves on: p2 (its old range) and p3 (its new one).
    r.set_pool(&keys[1], Ok(parsed(&["10.3.0.0/25"], 24)));
    let mut dirty = r.take_dirty();
    dirty.sort();
    assert_eq!(
        dirty,
        vec![keys[1].clone(), keys[2].clone(), keys[3].clone()]
    );
    assert_eq!(r.overlaps(&keys[2]), vec![]);
    assert_eq!(r.overlaps(&keys[3]).len(), 1);

    // A hold in p3's range counts in p3 and in p1 (same namespace), not in the other 98.
    r.apply(Change::Reservation(
        "r".into(),
        HoldRecord {
            pool: keys[3].clone(),
            ip: ip("10.3.0.5"),
            length: 32,
            holder: Holder::Claim(ObjectKey::new("ns", "c")),
            scope: keys[3].scope(),
        },
    ));
    let mut dirty = r.take_dirty();
    dirty.sort();
    assert_eq!(dirty, vec![keys[1].clone(), keys[3].clone()]);
    assert_eq!(r.counts(&keys[1]).map(|c| c.used), Some(1));

    // Every pool gone: nothing is left in the index, though p3 is remembered while r holds it.
    for key in &keys {
        r.apply(Change::PoolGone(key.clone()));
    }
    assert_eq!(r.by_range.segments(), 0);
    assert!(r.has_own_holds(&keys[3]));
    r.apply(Change::ReservationGone("r".into()));
    r.collect_garbage();
    assert_eq!(r.sizes().pools, 0);
}
