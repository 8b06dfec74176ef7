use super::{counts, ip, texts};
use crate::allocator::{AddressSet, AllocError, Allocator, Family, parse_entry};

fn set(family: Family, entries: &[&str]) -> AddressSet {
    let ranges = entries.iter().map(|text| parse_entry(text).expect(text));
    AddressSet::from_ranges(family, ranges).expect("one family")
}

fn v4(entries: &[&str]) -> Allocator {
    Allocator::new(set(Family::V4, entries))
}

#[test]
fn allocates_lowest_first_across_ranges() {
    let mut allocator = v4(&["10.0.0.8-10.0.0.9", "10.0.0.1"]);
    assert_eq!(allocator.lowest_free(), Some(ip("10.0.0.1")));
    assert_eq!(allocator.allocate_lowest(), Ok(ip("10.0.0.1")));
    assert_eq!(allocator.allocate_lowest(), Ok(ip("10.0.0.8")));
    assert_eq!(allocator.allocate_lowest(), Ok(ip("10.0.0.9")));
    assert_eq!(allocator.allocate_lowest(), Err(AllocError::Exhausted));
    assert_eq!(allocator.lowest_free(), None);
    assert_eq!(allocator.counts(), counts(3, 3, 0, 0));
}

#[test]
fn released_addresses_are_reused_lowest_first() {
    let mut allocator = v4(&["10.0.0.0/29"]);
    for _ in 0..8 {
        allocator.allocate_lowest().unwrap();
    }
    assert!(allocator.release(ip("10.0.0.5")));
    assert!(!allocator.release(ip("10.0.0.5")), "release is idempotent");
    assert!(allocator.release(ip("10.0.0.3")));
    assert_eq!(allocator.allocate_lowest(), Ok(ip("10.0.0.3")));
    assert!(allocator.release(ip("10.0.0.4")));
    assert!(allocator.release(ip("10.0.0.3")));
    assert_eq!(texts(allocator.free_ranges()), ["10.0.0.3-10.0.0.5"]);
    assert_eq!(allocator.counts(), counts(8, 5, 3, 0));
}

#[test]
fn allocates_specific_addresses() {
    let mut allocator = v4(&["10.0.0.0/24"]);
    assert_eq!(allocator.allocate(ip("10.0.0.7")), Ok(()));
    assert_eq!(
        allocator.allocate(ip("10.0.0.7")),
        Err(AllocError::InUse(ip("10.0.0.7")))
    );
    assert_eq!(
        allocator.allocate(ip("10.0.1.7")),
        Err(AllocError::NotInPool(ip("10.0.1.7")))
    );
    assert_eq!(
        allocator.allocate(ip("::7")),
        Err(AllocError::NotInPool(ip("::7")))
    );
    assert_eq!(
        AllocError::InUse(ip("10.0.0.7")).to_string(),
        "10.0.0.7 is already in use"
    );
    assert!(allocator.is_used(ip("10.0.0.7")));
    assert!(!allocator.is_free(ip("10.0.0.7")));
    assert!(allocator.is_free(ip("10.0.0.8")));
    assert_eq!(
        allocator.next_free_after(ip("10.0.0.6")),
        Some(ip("10.0.0.8"))
    );
    assert_eq!(allocator.next_free_after(ip("10.0.0.255")), None);
    assert_eq!(allocator.next_free_after(ip("::1")), None);
    assert_eq!(allocator.counts(), counts(256, 1, 255, 0));
}

#[test]
fn mark_used_is_idempotent_and_tracks_out_of_range() {
    let mut allocator = v4(&["10.0.0.0/24"]);
    assert!(allocator.mark_used(ip("10.0.0.1")));
    assert!(!allocator.mark_used(ip("10.0.0.1")));
    assert!(allocator.mark_used(ip("10.9.9.9")));
    assert!(!allocator.mark_used(ip("10.9.9.9")));
    assert!(
        allocator.mark_used(ip("2001:db8::1")),
        "another family is out of range too"
    );
    assert!(allocator.is_out_of_range(ip("10.9.9.9")));
    assert!(allocator.is_used(ip("2001:db8::1")));
    assert!(!allocator.is_out_of_range(ip("10.0.0.1")));
    assert_eq!(allocator.counts(), counts(256, 3, 255, 2));
    assert_eq!(allocator.counts().used_in_pool(), 1);
    assert_eq!(allocator.lowest_free(), Some(ip("10.0.0.0")));
    assert_eq!(
        texts(allocator.out_of_range_ranges()),
        ["10.9.9.9", "2001:db8::1"]
    );

    assert!(
        allocator.release(ip("10.9.9.9")),
        "out-of-range addresses are just forgotten"
    );
    assert!(!allocator.release(ip("10.9.9.9")));
    assert!(!allocator.release(ip("10.9.9.8")));
    assert_eq!(allocator.counts(), counts(256, 2, 255, 1));
}

#[test]
fn with_used_syncs_at_start_up() {
    let used = ["10.0.0.0", "10.0.0.1", "10.0.0.1", "10.0.0.3", "172.16.0.1"].map(ip);
    let allocator = Allocator::with_used(set(Family::V4, &["10.0.0.0/30"]), used);
    assert_eq!(allocator.lowest_free(), Some(ip("10.0.0.2")));
    assert_eq!(allocator.counts(), counts(4, 4, 1, 1));
}

#[test]
fn shrinking_makes_used_addresses_out_of_range_and_never_hands_them_out() {
    let mut allocator = v4(&["10.0.0.0/28"]);
    for _ in 0..6 {
        allocator.allocate_lowest().unwrap(); // .0 - .5
    }
    allocator.resize(set(Family::V4, &["10.0.0.4-10.0.0.9"]));
    assert_eq!(allocator.counts(), counts(6, 6, 4, 4));
    assert!(allocator.is_out_of_range(ip("10.0.0.2")));
    assert_eq!(allocator.allocate_lowest(), Ok(ip("10.0.0.6")));
    assert!(allocator.release(ip("10.0.0.2")));
    assert_eq!(allocator.counts(), counts(6, 6, 3, 3));

    // Growing back: out-of-range addresses become ordinary used addresses again.
    allocator.resize(set(Family::V4, &["10.0.0.0/28"]));
    assert_eq!(allocator.counts(), counts(16, 6, 10, 0));
    assert_eq!(allocator.allocate_lowest(), Ok(ip("10.0.0.2")));
    assert!(allocator.is_used(ip("10.0.0.0")));
}

#[test]
fn resizing_to_the_other_family_keeps_everything_out_of_range() {
    let mut allocator = v4(&["10.0.0.0/30"]);
    allocator.allocate_lowest().unwrap();
    allocator.mark_used(ip("2001:db8::5"));
    allocator.resize(set(Family::V6, &["2001:db8::/125"]));
    assert_eq!(allocator.family(), Family::V6);
    assert_eq!(allocator.counts(), counts(8, 2, 7, 1));
    assert!(allocator.is_out_of_range(ip("10.0.0.0")));
    assert_eq!(allocator.allocate_lowest(), Ok(ip("2001:db8::")));
    assert_eq!(allocator.allocate_lowest(), Ok(ip("2001:db8::1")));
    allocator.resize(set(Family::V4, &["10.0.0.0/30"]));
    // 10.0.0.0 is back in the pool; the three IPv6 addresses are out of range.
    assert_eq!(allocator.counts(), counts(4, 4, 3, 3));
    assert_eq!(allocator.lowest_free(), Some(ip("10.0.0.1")));
}

#[test]
fn huge_pools_work_without_enumeration() {
    let mut allocator = Allocator::new(set(Family::V6, &["::/0"]));
    assert_eq!(allocator.counts().total, u128::MAX);
    assert_eq!(allocator.allocate_lowest(), Ok(ip("::")));
    allocator
        .allocate(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))
        .unwrap();
    assert_eq!(allocator.counts().used, 2);
    allocator.resize(set(Family::V6, &["2001:db8::/64"]));
    assert_eq!(allocator.counts(), counts(1 << 64, 2, 1 << 64, 2));
    // One free range plus two out-of-range singletons.
    assert_eq!(allocator.stored_ranges(), 3);
}
