use super::ip;
use crate::allocator::{AddrRange, Family, Subnet, canonical};

#[test]
fn ipv6_text_is_rfc_5952() {
    assert_eq!(canonical(ip("2001:DB8:0:0:0:0:0:1")), "2001:db8::1");
    assert_eq!(canonical(ip("2001:db8:0:0:1:0:0:1")), "2001:db8::1:0:0:1");
    assert_eq!(
        canonical(ip("2001:0db8:0000:0001:0000:0000:0000:0000")),
        "2001:db8:0:1::"
    );
    // A single zero group is not compressed.
    assert_eq!(
        canonical(ip("2001:db8:0:1:1:1:1:1")),
        "2001:db8:0:1:1:1:1:1"
    );
    assert_eq!(canonical(ip("::ffff:10.0.0.1")), "::ffff:10.0.0.1");
    assert_eq!(canonical(ip("0:0:0:0:0:0:0:0")), "::");
    assert_eq!(canonical(ip("10.0.0.1")), "10.0.0.1");
}

#[test]
fn families() {
    assert_eq!(Family::of(ip("10.0.0.1")), Family::V4);
    assert_eq!(Family::of(ip("::ffff:10.0.0.1")), Family::V6);
    assert_eq!(Family::V4.to_string(), "IPv4");
    assert_eq!(Family::V6.bits(), 128);
    assert_eq!(Family::V4.max_value(), 0xffff_ffff);
}

#[test]
fn ranges() {
    let range = AddrRange::new(ip("10.0.0.1"), ip("10.0.0.9")).unwrap();
    assert_eq!(range.len(), 9);
    assert_eq!(range.to_string(), "10.0.0.1-10.0.0.9");
    assert!(range.contains(ip("10.0.0.9")));
    assert!(!range.contains(ip("10.0.0.10")));
    assert!(!range.contains(ip("::a")));
    assert_eq!(AddrRange::single(ip("::1")).to_string(), "::1");
    assert_eq!(AddrRange::new(ip("10.0.0.9"), ip("10.0.0.1")), None);
    assert_eq!(AddrRange::new(ip("10.0.0.1"), ip("::1")), None);
    let everything =
        AddrRange::new(ip("::"), ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")).unwrap();
    assert_eq!(everything.len(), u128::MAX, "2^128 saturates");
}

#[test]
fn subnets() {
    let subnet = Subnet::containing(ip("10.0.3.7"), 16).unwrap();
    assert_eq!(subnet.to_string(), "10.0.0.0/16");
    assert_eq!(subnet.last(), ip("10.0.255.255"));
    assert!(Subnet::containing(ip("10.0.0.1"), 33).is_none());
    let v6 = Subnet::containing(ip("2001:db8::77"), 64).unwrap();
    assert_eq!(v6.to_string(), "2001:db8::/64");
    assert_eq!(v6.last(), ip("2001:db8::ffff:ffff:ffff:ffff"));
    let everything = Subnet::containing(ip("2001:db8::1"), 0).unwrap();
    assert_eq!(everything.to_string(), "::/0");
    assert_eq!(
        Subnet::containing(ip("10.0.0.1"), 32).unwrap().last(),
        ip("10.0.0.1")
    );
}
