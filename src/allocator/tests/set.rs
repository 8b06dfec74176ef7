use super::ip;
use crate::allocator::{AddrRange, AddressSet, Family, parse_entry};

fn set(family: Family, entries: &[&str]) -> AddressSet {
    let ranges = entries.iter().map(|text| parse_entry(text).expect(text));
    AddressSet::from_ranges(family, ranges).expect("one family")
}

fn v4(entries: &[&str]) -> AddressSet {
    set(Family::V4, entries)
}

#[test]
fn normalises_overlaps_adjacency_and_order() {
    let merged = v4(&[
        "10.0.0.20-10.0.0.30",
        "10.0.0.0/28",
        "10.0.0.16-10.0.0.19",
        "10.0.0.25",
    ]);
    assert_eq!(merged.to_string(), "10.0.0.0-10.0.0.30");
    assert_eq!(merged.len(), 31);
    let apart = v4(&["10.0.0.9", "10.0.0.1-10.0.0.3", "10.0.0.5"]);
    assert_eq!(apart.to_string(), "10.0.0.1-10.0.0.3, 10.0.0.5, 10.0.0.9");
    assert_eq!(apart.range_count(), 3);
    assert_eq!(
        apart,
        v4(&["10.0.0.5", "10.0.0.9", "10.0.0.1", "10.0.0.2-10.0.0.3"])
    );
    assert_eq!(AddressSet::empty(Family::V6).to_string(), "(empty)");
}

#[test]
fn rejects_ranges_of_the_other_family() {
    let error = AddressSet::from_ranges(Family::V4, [AddrRange::single(ip("::1"))]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "mixed address families: ::1 is IPv6 but the set is IPv4"
    );
}

#[test]
fn contains() {
    let apart = v4(&["10.0.0.1-10.0.0.3", "10.0.0.9"]);
    for (text, expected) in [
        ("10.0.0.0", false),
        ("10.0.0.1", true),
        ("10.0.0.3", true),
        ("10.0.0.4", false),
        ("10.0.0.9", true),
        ("10.0.0.10", false),
        ("::a", false),
    ] {
        assert_eq!(apart.contains(ip(text)), expected, "{text}");
    }
    assert!(apart.contains_range(parse_entry("10.0.0.2-10.0.0.3").unwrap()));
    assert!(!apart.contains_range(parse_entry("10.0.0.2-10.0.0.4").unwrap()));
    assert!(!apart.contains_range(parse_entry("10.0.0.3-10.0.0.9").unwrap()));
}

#[test]
fn overlap_names_the_first_shared_range() {
    let a = v4(&["10.0.0.0/24", "10.0.2.0/24"]);
    let b = v4(&["10.0.0.200-10.0.1.10", "10.0.2.5"]);
    assert!(a.overlaps(&b));
    assert_eq!(
        a.first_overlap(&b).unwrap().to_string(),
        "10.0.0.200-10.0.0.255"
    );
    assert_eq!(
        a.intersection(&b).to_string(),
        "10.0.0.200-10.0.0.255, 10.0.2.5"
    );
    let c = v4(&["10.0.1.0/24"]);
    assert!(!a.overlaps(&c));
    assert_eq!(a.first_overlap(&c), None);
    let v6 = set(Family::V6, &["::/0"]);
    assert!(!a.overlaps(&v6), "families never overlap");
}

#[test]
fn difference_and_union() {
    let a = v4(&["10.0.0.0/24"]);
    let b = v4(&[
        "10.0.0.0",
        "10.0.0.10-10.0.0.19",
        "10.0.0.255",
        "10.0.1.0/24",
    ]);
    assert_eq!(
        a.difference(&b).to_string(),
        "10.0.0.1-10.0.0.9, 10.0.0.20-10.0.0.254"
    );
    assert_eq!(a.union(&b).unwrap().to_string(), "10.0.0.0-10.0.1.255");
    assert_eq!(a.difference(&set(Family::V6, &["::/0"])), a);
    assert!(a.union(&set(Family::V6, &["::1"])).is_err());
    assert_eq!(a.union(&AddressSet::empty(Family::V6)).unwrap(), a);
    assert!(a.difference(&a).is_empty());
}

#[test]
fn the_whole_ipv6_space_saturates_its_size() {
    let everything = set(Family::V6, &["::/0"]);
    assert!(everything.is_whole_space());
    assert_eq!(everything.len(), u128::MAX);
    assert!(everything.contains(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
    let without_one = everything.difference(&set(Family::V6, &["::1"]));
    assert!(!without_one.is_whole_space());
    assert_eq!(without_one.len(), u128::MAX, "2^128 - 1 is exact");
    assert_eq!(
        without_one.to_string(),
        "::, ::2-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
    );
    let halves = set(Family::V6, &["8000::/1", "::/1"]);
    assert!(halves.is_whole_space());
    let slash64 = set(Family::V6, &["2001:db8::/64"]);
    assert_eq!(everything.intersection(&slash64), slash64);
    assert_eq!(set(Family::V4, &["0.0.0.0/0"]).len(), 1 << 32);
}
