use super::ip;
use crate::allocator::{AddrRange, EntryError, parse_entry, parse_ip};

fn range(text: &str) -> AddrRange {
    parse_entry(text).unwrap_or_else(|error| panic!("{text}: {error}"))
}

fn error(text: &str) -> String {
    parse_entry(text).expect_err(text).to_string()
}

#[test]
fn single_addresses() {
    assert_eq!(range("10.0.0.5"), AddrRange::single(ip("10.0.0.5")));
    assert_eq!(range("2001:db8::5"), AddrRange::single(ip("2001:db8::5")));
}

#[test]
fn ipv4_mapped_ipv6_addresses_are_refused_in_every_form_as_the_crds_refuse_them() {
    let refused = |text: &str| {
        format!(
            "`{text}` is an IPv4-mapped IPv6 address, which is not allowed: write the IPv4 address"
        )
    };
    assert_eq!(error("::ffff:10.0.0.5"), refused("::ffff:10.0.0.5"));
    assert_eq!(error("::ffff:10.0.0.5/24"), refused("::ffff:10.0.0.5"));
    assert_eq!(
        error("::ffff:10.0.0.5-10.0.0.9"),
        refused("::ffff:10.0.0.5")
    );
    assert_eq!(error("fd00::1-::ffff:10.0.0.5"), refused("::ffff:10.0.0.5"));
    assert_eq!(
        parse_ip("::ffff:10.0.0.5").unwrap_err().to_string(),
        refused("::ffff:10.0.0.5")
    );
    assert_eq!(
        crate::allocator::parse_network("::ffff:10.0.0.0/120")
            .unwrap_err()
            .to_string(),
        refused("::ffff:10.0.0.0")
    );
    // `::` and an IPv4-compatible address are plain IPv6.
    assert_eq!(range("::1").family(), crate::allocator::Family::V6);
}

#[test]
fn cidrs_cover_their_whole_network() {
    assert_eq!(range("10.0.0.0/24").to_string(), "10.0.0.0-10.0.0.255");
    assert_eq!(range("10.0.0.77/24").to_string(), "10.0.0.0-10.0.0.255");
    assert_eq!(range("10.0.0.7/32").to_string(), "10.0.0.7");
    assert_eq!(range("0.0.0.0/0").len(), 1 << 32);
    assert_eq!(range("2001:db8::/64").len(), 1 << 64);
    assert_eq!(range("2001:db8::1/128").to_string(), "2001:db8::1");
    assert_eq!(range("::/0").len(), u128::MAX);
    assert_eq!(range("::/1").len(), 1 << 127);
}

#[test]
fn ranges() {
    assert_eq!(range("10.0.0.1-10.0.0.5").len(), 5);
    assert_eq!(range("10.0.0.1-10.0.0.1").len(), 1);
    assert_eq!(range("2001:db8::1-2001:db8::ffff").len(), 0xffff);
    assert_eq!(
        "10.0.0.1-10.0.0.5".parse::<AddrRange>(),
        parse_entry("10.0.0.1-10.0.0.5")
    );
}

#[test]
fn errors_name_the_reason() {
    assert_eq!(error("10.0.0.5-10.0.0.1"), "range end before start");
    assert_eq!(
        error("10.0.0.1-::1"),
        "range start and end are of different address families"
    );
    assert_eq!(error("10.0.0.1-x"), "range end `x` is not an IP address");
    assert_eq!(error("-10.0.0.1"), "range start `` is not an IP address");
    assert_eq!(
        error("10.0.0.1-10.0.0.2-10.0.0.3"),
        "range end `10.0.0.2-10.0.0.3` is not an IP address"
    );
    assert_eq!(
        error("10.0.0.0/24-10.0.1.0"),
        "range start `10.0.0.0/24` is not an IP address"
    );
    assert_eq!(error("10.0.0.1 - 10.0.0.5"), "contains whitespace");
    assert_eq!(error(" 10.0.0.1"), "contains whitespace");
    assert_eq!(error("10.0.0.1\n"), "contains whitespace");
    assert_eq!(error(""), "empty");
    assert_eq!(error("fe80::1%eth0"), "IPv6 zones (`%...`) are not allowed");
    assert_eq!(error("10.0.0.256"), "not an IP address");
    assert_eq!(error("010.0.0.1"), "not an IP address");
    assert_eq!(error("hello"), "not an IP address");
    assert_eq!(
        error("10.0.0.0/33"),
        "prefix length `33` is not a number between 0 and 32"
    );
    assert_eq!(
        error("::/129"),
        "prefix length `129` is not a number between 0 and 128"
    );
    assert_eq!(
        error("10.0.0.0/024"),
        "prefix length `024` is not a number between 0 and 32"
    );
    assert_eq!(
        error("10.0.0.0/+24"),
        "prefix length `+24` is not a number between 0 and 32"
    );
    assert_eq!(
        error("10.0.0.0/"),
        "prefix length `` is not a number between 0 and 32"
    );
    assert_eq!(
        error("10.0.0.0/99999999999999999999"),
        "prefix length `99999999999999999999` is not a number between 0 and 32"
    );
    assert_eq!(
        error("10.0.0/24"),
        "`10.0.0` before the `/` is not an IP address"
    );
    assert_eq!(
        error("10.0.0.0/24/8"),
        "prefix length `24/8` is not a number between 0 and 32"
    );
}

#[test]
fn long_input_is_shortened_in_messages() {
    let long = format!("10.0.0.1-{}", "9".repeat(10_000));
    let message = error(&long);
    assert!(message.len() < 200, "{message}");
    assert!(message.ends_with("…` is not an IP address"), "{message}");
    // Cutting must respect character boundaries.
    let message = error(&format!("x-{}", "é".repeat(500)));
    assert!(message.starts_with("range start `x`"), "{message}");
    let message = error(&format!("10.0.0.1-{}", "é".repeat(500)));
    assert!(message.contains('…'), "{message}");
}

#[test]
fn plain_ip_parsing() {
    assert_eq!(parse_ip("10.0.0.1"), Ok(ip("10.0.0.1")));
    assert_eq!(parse_ip("10.0.0.0/24"), Err(EntryError::NotAnAddress));
    assert_eq!(parse_ip("10.0.0.1-10.0.0.2"), Err(EntryError::NotAnAddress));
    assert_eq!(parse_ip(""), Err(EntryError::Empty));
}
