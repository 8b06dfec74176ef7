//! Feeds arbitrary text into the pool-spec parser and, when the spec is valid, into the
//! allocator, checking invariants along the way. Any panic is a bug.
//!
//! Input format (one item per line, all optional):
//! - line 1: the prefix (an integer; anything else counts as 0),
//! - line 2: the gateway (empty for none),
//! - line 3: flags; `r` sets `allocateReservedIPAddresses`,
//! - then entries: `!entry` is an excluded address, `@ip` an address in use, `+prefix gateway`
//!   starts an entry of `additionalSubnets` (the entries after it are its addresses), anything
//!   else an `addresses` entry.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The allocator is pure Rust with no dependency on the rest of the crate, so it is compiled in
// directly: instrumenting kube and k8s-openapi would make every fuzz build take many minutes.
#[allow(dead_code, unused_imports)]
#[forbid(unsafe_code)]
#[path = "../../src/allocator/mod.rs"]
mod allocator;

use allocator::{
    AllocError, Allocator, EntryError, PoolSpecInput, SubnetInput, parse_entry, parse_ip,
};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let prefix = lines.next().and_then(|line| line.parse().ok()).unwrap_or(0);
    let gateway = lines.next().map(str::to_owned);
    let allocate_reserved = lines.next().is_some_and(|line| line.contains('r'));
    let mut spec = PoolSpecInput {
        prefix,
        gateway,
        allocate_reserved_ip_addresses: allocate_reserved,
        ..Default::default()
    };
    let mut used = Vec::new();
    for line in lines {
        check_entry(line);
        if let Some(excluded) = line.strip_prefix('!') {
            spec.excluded_addresses.push(excluded.to_owned());
        } else if let Some(ip) = line.strip_prefix('@') {
            used.extend(parse_ip(ip).ok());
        } else if let Some(subnet) = line.strip_prefix('+') {
            let (prefix, gateway) = subnet.split_once(' ').unwrap_or((subnet, ""));
            spec.additional_subnets.push(SubnetInput {
                addresses: Vec::new(),
                prefix: prefix.parse().unwrap_or(0),
                gateway: Some(gateway.to_owned()),
            });
        } else if let Some(subnet) = spec.additional_subnets.last_mut() {
            subnet.addresses.push(line.to_owned());
        } else {
            spec.addresses.push(line.to_owned());
        }
    }
    match spec.parse() {
        Ok(pool) => exercise(pool, &used),
        Err(errors) => assert!(!errors.to_string().is_empty()),
    }
});

/// A parsed entry prints as canonical text that parses back to itself, unless an end of the
/// range it covers is an IPv4-mapped IPv6 address (`::/80` ends at `::ffff:255.255.255.255`),
/// which an entry may cover but not name.
fn check_entry(line: &str) {
    if let Ok(range) = parse_entry(line) {
        let mapped = |ip: std::net::IpAddr| {
            matches!(ip, std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
        };
        match parse_entry(&range.to_string()) {
            Err(EntryError::Mapped(_)) => {
                assert!(mapped(range.first()) || mapped(range.last()), "{range}")
            }
            reparsed => assert_eq!(reparsed, Ok(range)),
        }
    }
    if let Ok(ip) = parse_ip(line) {
        assert_eq!(parse_ip(&ip.to_string()), Ok(ip));
    }
}

fn exercise(pool: allocator::ParsedPool, used: &[std::net::IpAddr]) {
    let set = pool.allocatable().clone();
    assert!(set.difference(pool.configured()).is_empty());
    for network in pool.networks() {
        if let Some(gateway) = network.gateway {
            assert!(!set.contains(gateway));
        }
    }
    check_order(&pool, used);
    let mut allocator = Allocator::with_used(set.clone(), used.iter().copied());
    check_counts(&allocator);
    let mut taken = Vec::new();
    for _ in 0..64 {
        let lowest = allocator.lowest_free();
        match allocator.allocate_lowest() {
            Ok(ip) => {
                assert_eq!(Some(ip), lowest);
                assert!(set.contains(ip) && allocator.is_used(ip));
                taken.push(ip);
            }
            Err(error) => {
                assert_eq!(error, AllocError::Exhausted);
                assert_eq!(allocator.counts().free, 0);
                break;
            }
        }
    }
    check_counts(&allocator);
    for ip in taken.iter().step_by(2) {
        assert!(allocator.release(*ip));
        assert!(allocator.is_free(*ip));
    }
    allocator.resize(pool.configured().clone());
    check_counts(&allocator);
    allocator.resize(set);
    check_counts(&allocator);
    for ip in used {
        allocator.release(*ip);
    }
    check_counts(&allocator);
}

/// Addresses are handed out subnet by subnet, in the order written, each lowest first, and each
/// lies in the subnet whose prefix and gateway it is given.
fn check_order(pool: &allocator::ParsedPool, used: &[std::net::IpAddr]) {
    let order = pool.networks().iter().map(|network| network.subnet.range());
    let mut allocator = Allocator::in_order(pool.allocatable().clone(), order);
    for ip in used {
        allocator.mark_used(*ip);
    }
    let index_of = |ip| {
        pool.networks()
            .iter()
            .position(|network| network.subnet.contains(ip))
            .expect("every handed-out address lies in a subnet")
    };
    let mut last: Option<(usize, std::net::IpAddr)> = None;
    for _ in 0..64 {
        let Ok(ip) = allocator.allocate_next() else {
            assert_eq!(allocator.counts().free, 0);
            break;
        };
        assert!(pool.allocatable().contains(ip));
        assert_eq!(pool.network_of(ip), pool.networks()[index_of(ip)]);
        let here = (index_of(ip), ip);
        assert!(last.is_none_or(|last| last < here), "{last:?} then {here:?}");
        last = Some(here);
    }
}

fn check_counts(allocator: &Allocator) {
    let counts = allocator.counts();
    assert!(counts.out_of_range <= counts.used);
    assert_eq!(counts.free + counts.used_in_pool(), counts.total);
    assert_eq!(counts.free == 0, allocator.lowest_free().is_none());
}
