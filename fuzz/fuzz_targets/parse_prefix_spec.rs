//! Feeds arbitrary text into the prefix-pool spec parser (prefixes of either family) and, when
//! the spec is valid, into the prefix allocator, checking invariants along the way. Any panic is
//! a bug.
//!
//! Input format (one item per line, all optional):
//! - line 1: `allocationPrefixLength` (an integer, any sign or size; empty or not a number
//!   leaves it unset, i.e. 64),
//! - line 2: the gateway (empty for none),
//! - then entries: `!entry` is an excluded prefix, `@subnet` a sub-prefix in use (as an adopted
//!   `IPAddress` records one), anything else a `prefixes` entry.
#![no_main]

use libfuzzer_sys::fuzz_target;

// Compiled in directly, as in parse_spec.rs.
#[allow(dead_code, unused_imports)]
#[forbid(unsafe_code)]
#[path = "../../src/allocator/mod.rs"]
mod allocator;

use allocator::{
    ParsedPrefixPool, PrefixAllocError, PrefixAllocator, PrefixPoolSpecInput, Subnet,
    parse_network,
};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let allocation_prefix_length = lines.next().and_then(|line| line.parse().ok());
    let gateway = lines.next().map(str::to_owned);
    let mut spec = PrefixPoolSpecInput {
        allocation_prefix_length,
        gateway,
        ..Default::default()
    };
    let mut used = Vec::new();
    for line in lines {
        if let Some(excluded) = line.strip_prefix('!') {
            spec.excluded_prefixes.push(excluded.to_owned());
        } else if let Some(subnet) = line.strip_prefix('@') {
            used.extend(parse_network(subnet).ok());
        } else {
            spec.prefixes.push(line.to_owned());
        }
    }
    match spec.parse() {
        Ok(pool) => exercise(pool, &spec, &used),
        Err(errors) => assert!(!errors.to_string().is_empty()),
    }
});

fn exercise(pool: ParsedPrefixPool, spec: &PrefixPoolSpecInput, used: &[Subnet]) {
    let length = pool.allocation_prefix_length();
    assert!((1..=pool.family().bits()).contains(&length));
    assert!(pool.allocatable().difference(pool.prefixes()).is_empty());
    let mut allocator = PrefixAllocator::new(pool.clone());
    for subnet in used {
        // Another length or family is refused, never counted.
        match allocator.mark_used(*subnet) {
            Ok(_) => assert!(allocator.is_used(*subnet)),
            Err(_) => assert!(!allocator.is_used(*subnet)),
        }
    }
    check_counts(&allocator);
    let mut taken = Vec::new();
    for _ in 0..64 {
        let lowest = allocator.lowest_free();
        match allocator.allocate_lowest() {
            Ok(sub_prefix) => {
                assert_eq!(Some(sub_prefix), lowest);
                assert_eq!(sub_prefix.prefix(), length);
                assert!(pool.allocatable().contains(sub_prefix.network()));
                assert!(allocator.is_used(sub_prefix) && !allocator.is_free(sub_prefix));
                if let Some(previous) = taken.last() {
                    // First fit: each allocation is above the previous one.
                    let previous: &Subnet = previous;
                    assert!(previous.network() < sub_prefix.network());
                }
                taken.push(sub_prefix);
            }
            Err(error) => {
                assert_eq!(error, PrefixAllocError::Exhausted);
                assert_eq!(allocator.counts().free, 0);
                break;
            }
        }
    }
    check_counts(&allocator);
    for sub_prefix in taken.iter().step_by(2) {
        assert!(allocator.release(*sub_prefix));
        assert!(allocator.is_free(*sub_prefix));
    }
    check_counts(&allocator);
    // The same spec without its exclusions: everything used stays used.
    let widened = PrefixPoolSpecInput {
        excluded_prefixes: Vec::new(),
        ..spec.clone()
    };
    if let Ok(widened) = widened.parse() {
        let before = allocator.counts().used;
        assert_eq!(allocator.resize(widened), Ok(()));
        check_counts(&allocator);
        assert_eq!(before, allocator.counts().used, "a resize keeps every used sub-prefix");
    }
}

fn check_counts(allocator: &PrefixAllocator) {
    let counts = allocator.counts();
    assert!(counts.out_of_range <= counts.used);
    assert_eq!(counts.free == 0, allocator.lowest_free().is_none());
    // `total` saturates only for ::/0 split into /128s (see the allocator's docs).
    if counts.total < u128::MAX {
        assert_eq!(counts.free + counts.used_in_pool(), counts.total);
    }
}
