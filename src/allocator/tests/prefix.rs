use super::{counts, ip, texts};
use crate::allocator::{
    EntryError, Family, ParsedPrefixPool, PrefixAllocError, PrefixAllocator, PrefixPoolSpecInput,
    StatusCounts, Subnet, parse_network,
};

fn spec(prefixes: &[&str], length: i64) -> PrefixPoolSpecInput {
    PrefixPoolSpecInput {
        prefixes: prefixes.iter().map(|text| text.to_string()).collect(),
        allocation_prefix_length: Some(length),
        ..Default::default()
    }
}

fn excluding(mut spec: PrefixPoolSpecInput, excluded: &[&str]) -> PrefixPoolSpecInput {
    spec.excluded_prefixes = excluded.iter().map(|text| text.to_string()).collect();
    spec
}

fn parsed(spec: &PrefixPoolSpecInput) -> ParsedPrefixPool {
    spec.parse()
        .unwrap_or_else(|errors| panic!("{spec:?}: {errors}"))
}

fn allocator(spec: &PrefixPoolSpecInput) -> PrefixAllocator {
    PrefixAllocator::new(parsed(spec))
}

fn errors(spec: &PrefixPoolSpecInput) -> Vec<String> {
    spec.parse()
        .expect_err("spec should be rejected")
        .errors()
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn net(text: &str) -> Subnet {
    parse_network(text).expect(text)
}

/// The next `n` sub-prefixes handed out, as text.
fn take(allocator: &mut PrefixAllocator, n: usize) -> Vec<String> {
    texts((0..n).map(|_| allocator.allocate_lowest().unwrap()))
}

#[test]
fn a_slash62_gives_four_slash64s_lowest_first() {
    let mut allocator = allocator(&spec(&["fd00::/62"], 64));
    assert_eq!(allocator.counts(), counts(4, 0, 4, 0));
    assert_eq!(take(&mut allocator, 2), ["fd00::/64", "fd00:0:0:1::/64"]);
    assert_eq!(allocator.counts(), counts(4, 2, 2, 0));
}

#[test]
fn a_slash48_in_slash56s_has_256() {
    let mut allocator = allocator(&spec(&["fd06::/48"], 56));
    assert_eq!(allocator.counts().total, 256);
    assert_eq!(take(&mut allocator, 2), ["fd06::/56", "fd06:0:0:100::/56"]);
}

#[test]
fn prefixes_are_allocated_in_address_order_whatever_the_listing_order() {
    let mut allocator = allocator(&spec(&["fd10::/48", "fd00:0:0:1::/64"], 64));
    assert_eq!(allocator.counts().total, 65_537);
    assert_eq!(
        take(&mut allocator, 3),
        ["fd00:0:0:1::/64", "fd10::/64", "fd10:0:0:1::/64"]
    );
}

#[test]
fn a_single_slash64_is_exhausted_after_one() {
    let mut allocator = allocator(&spec(&["fd00:0:0:7::/64"], 64));
    assert_eq!(take(&mut allocator, 1), ["fd00:0:0:7::/64"]);
    assert_eq!(
        allocator.allocate_lowest(),
        Err(PrefixAllocError::Exhausted)
    );
    assert_eq!(allocator.lowest_free(), None);
    assert_eq!(allocator.counts(), counts(1, 1, 0, 0));
    assert_eq!(
        PrefixAllocError::Exhausted.to_string(),
        "the pool has no free sub-prefix"
    );
}

#[test]
fn the_allocation_length_defaults_to_64() {
    let spec = PrefixPoolSpecInput {
        prefixes: vec!["fd00::/63".into()],
        ..Default::default()
    };
    let pool = parsed(&spec);
    assert_eq!(pool.allocation_prefix_length(), 64);
    assert_eq!(pool.total(), 2);
}

#[test]
fn overlapping_prefixes_are_merged_not_double_counted() {
    let pool = parsed(&spec(&["fd00::/48", "fd00::/56", "fd00:0:1::/48"], 64));
    assert_eq!(pool.total(), 2 * 65_536);
    assert_eq!(
        pool.prefixes().to_string(),
        "fd00::-fd00:0:1:ffff:ffff:ffff:ffff:ffff"
    );
}

#[test]
fn exclusions_skip_every_sub_prefix_they_touch() {
    let spec = excluding(
        spec(&["fd00::/61"], 64),
        &[
            // One address of block 0.
            "fd00::5",
            // The end of block 2 and the start of block 3.
            "fd00:0:0:2:ffff::-fd00:0:0:3::1",
            // A CIDR inside block 6.
            "fd00:0:0:6::/127",
        ],
    );
    let mut allocator = allocator(&spec);
    assert_eq!(allocator.counts().total, 4);
    assert_eq!(
        take(&mut allocator, 4),
        [
            "fd00:0:0:1::/64",
            "fd00:0:0:4::/64",
            "fd00:0:0:5::/64",
            "fd00:0:0:7::/64"
        ]
    );
    assert_eq!(
        allocator.pool().allocatable().to_string(),
        "fd00:0:0:1::-fd00::1:ffff:ffff:ffff:ffff, \
         fd00:0:0:4::-fd00::5:ffff:ffff:ffff:ffff, \
         fd00:0:0:7::-fd00::7:ffff:ffff:ffff:ffff"
    );
}

#[test]
fn exclusions_outside_the_prefixes_and_cidrs_with_host_bits_are_fine() {
    let spec = excluding(spec(&["fd00::/62"], 64), &["fd00:0:0:1::1/48", "fe80::/10"]);
    assert_eq!(parsed(&spec).total(), 0);
    let spec = excluding(self::spec(&["fd00::/62"], 64), &["fe80::/10", "::1"]);
    assert_eq!(parsed(&spec).total(), 4);
}

#[test]
fn the_gateway_is_informational_and_blocks_nothing() {
    let mut spec = spec(&["fd00::/64"], 64);
    spec.gateway = Some("fd00::1".into());
    let pool = parsed(&spec);
    assert_eq!(pool.gateway(), Some("fd00::1".parse().unwrap()));
    assert_eq!(PrefixAllocator::new(pool).counts().total, 1);
    spec.gateway = Some(String::new());
    assert_eq!(parsed(&spec).gateway(), None);
}

#[test]
fn counts_are_exact_without_enumeration() {
    // A /32 split into /64s: 2^32 sub-prefixes.
    let mut allocator = allocator(&spec(&["2001:db8::/32"], 64));
    assert_eq!(allocator.counts(), counts(1 << 32, 0, 1 << 32, 0));
    assert_eq!(
        take(&mut allocator, 2),
        ["2001:db8::/64", "2001:db8:0:1::/64"]
    );
    assert_eq!(allocator.counts(), counts(1 << 32, 2, (1 << 32) - 2, 0));

    // A /8 split into /128s: 2^120, still exact.
    let allocator = self::allocator(&spec(&["fd00::/8"], 128));
    assert_eq!(allocator.counts().total, 1 << 120);
    assert_eq!(
        allocator.counts().to_status(),
        StatusCounts {
            total: i64::MAX,
            used: 0,
            free: i64::MAX,
            out_of_range: 0
        }
    );

    // The largest pools: ::/0 into /127s is 2^127; into /128s, 2^128 saturates.
    assert_eq!(parsed(&spec(&["::/0"], 127)).total(), 1 << 127);
    let mut whole = self::allocator(&spec(&["::/0"], 128));
    assert_eq!(whole.counts().total, u128::MAX);
    assert_eq!(whole.allocate_lowest().unwrap().to_string(), "::/128");
    assert_eq!(whole.counts().used, 1);
}

#[test]
fn allocates_marks_and_releases_specific_sub_prefixes() {
    let mut allocator = allocator(&spec(&["fd00::/62"], 64));
    let second = net("fd00:0:0:1::/64");
    assert_eq!(allocator.allocate(second), Ok(()));
    assert_eq!(
        allocator.allocate(second),
        Err(PrefixAllocError::InUse(second))
    );
    assert_eq!(
        PrefixAllocError::InUse(second).to_string(),
        "fd00:0:0:1::/64 is already in use"
    );
    let outside = net("fd00:0:0:4::/64");
    assert_eq!(
        allocator.allocate(outside),
        Err(PrefixAllocError::NotInPool(outside))
    );
    for wrong in [net("fd00::/63"), net("10.0.0.0/24")] {
        let error = PrefixAllocError::NotASubPrefix {
            prefix: wrong,
            family: Family::V6,
            length: 64,
        };
        assert_eq!(allocator.allocate(wrong), Err(error));
        assert_eq!(allocator.mark_used(wrong), Err(error));
        assert!(!allocator.release(wrong) && !allocator.is_used(wrong));
    }
    assert_eq!(
        PrefixAllocError::NotASubPrefix {
            prefix: net("fd00::/63"),
            family: Family::V6,
            length: 64
        }
        .to_string(),
        "fd00::/63 is not a /64 IPv6 sub-prefix, the only kind the pool hands out"
    );

    assert!(allocator.is_used(second) && !allocator.is_free(second));
    assert_eq!(allocator.lowest_free(), Some(net("fd00::/64")));
    assert_eq!(
        allocator.next_free_after(net("fd00::/64")),
        Some(net("fd00:0:0:2::/64"))
    );
    assert_eq!(allocator.mark_used(net("fd00::/64")), Ok(true));
    assert_eq!(allocator.mark_used(net("fd00::/64")), Ok(false));
    // Outside the pool: out of range, counted, forgotten on release.
    assert_eq!(allocator.mark_used(outside), Ok(true));
    assert!(allocator.is_out_of_range(outside) && allocator.is_used(outside));
    assert_eq!(allocator.counts(), counts(4, 3, 2, 1));
    assert!(allocator.release(outside));
    assert!(allocator.release(second));
    assert!(!allocator.release(second));
    assert_eq!(allocator.counts(), counts(4, 1, 3, 0));
    assert_eq!(take(&mut allocator, 1), ["fd00:0:0:1::/64"]);
    assert_eq!(
        texts(allocator.free_ranges()),
        ["fd00:0:0:2::-fd00::3:ffff:ffff:ffff:ffff"]
    );
}

#[test]
fn shrinking_or_excluding_below_use_makes_sub_prefixes_out_of_range() {
    let mut allocator = allocator(&spec(&["fd00::/62"], 64));
    take(&mut allocator, 3);
    let shrunk = excluding(spec(&["fd00::/63", "fd00:0:0:3::/64"], 64), &["fd00::1"]);
    assert_eq!(allocator.resize(parsed(&shrunk)), Ok(()));
    assert_eq!(allocator.counts(), counts(2, 3, 1, 2));
    assert!(allocator.is_out_of_range(net("fd00::/64")));
    assert!(allocator.is_out_of_range(net("fd00:0:0:2::/64")));
    assert_eq!(
        texts(allocator.out_of_range_ranges()),
        [
            "fd00::-fd00::ffff:ffff:ffff:ffff",
            "fd00:0:0:2::-fd00::2:ffff:ffff:ffff:ffff"
        ]
    );
    assert_eq!(take(&mut allocator, 1), ["fd00:0:0:3::/64"]);
    // Growing back: the out-of-range ones are used pool sub-prefixes again.
    assert_eq!(allocator.resize(parsed(&spec(&["fd00::/62"], 64))), Ok(()));
    assert_eq!(allocator.counts(), counts(4, 4, 0, 0));
    assert_eq!(allocator.stored_ranges(), 0);
}

#[test]
fn the_allocation_length_cannot_change() {
    let mut allocator = allocator(&spec(&["fd00::/62"], 64));
    take(&mut allocator, 1);
    let error = allocator.resize(parsed(&spec(&["fd00::/62"], 63)));
    assert_eq!(
        error,
        Err(PrefixAllocError::LengthChanged { from: 64, to: 63 })
    );
    assert_eq!(
        error.unwrap_err().to_string(),
        "allocationPrefixLength cannot change from 64 to 63"
    );
    assert_eq!(allocator.counts(), counts(4, 1, 3, 0));
}

#[test]
fn every_problem_is_reported_with_field_entry_and_reason() {
    let spec = PrefixPoolSpecInput {
        prefixes: [
            "fd00::/48",
            "fd00::1",
            "fd00::1-fd00::5",
            "10.0.0.0/8",
            "fd00::1/48",
            "fd00::/72",
            "fd00::/129",
        ]
        .map(String::from)
        .to_vec(),
        allocation_prefix_length: Some(64),
        gateway: Some("10.0.0.1".into()),
        excluded_prefixes: vec!["192.168.0.0/16".into(), "zz".into(), "fd00::/64".into()],
    };
    assert_eq!(
        errors(&spec),
        [
            "prefixes[1] `fd00::1`: not a CIDR (`address/length`)",
            "prefixes[2] `fd00::1-fd00::5`: not a CIDR (`address/length`)",
            "mixed address families: prefixes[3] `10.0.0.0/8` is IPv4 but the pool is IPv6",
            "prefixes[4] `fd00::1/48`: not network-aligned: host bits are set (the network is fd00::/48)",
            "prefixes[6] `fd00::/129`: prefix length `129` is not a number between 0 and 128",
            "prefixes[5] `fd00::/72` is longer than allocationPrefixLength 64",
            "mixed address families: excludedPrefixes[0] `192.168.0.0/16` is IPv4 but the pool is IPv6",
            "excludedPrefixes[1] `zz`: not an IP address",
            "mixed address families: gateway `10.0.0.1` is IPv4 but the pool is IPv6",
        ]
    );
    let mut bad_gateway = self::spec(&["fd00::/48"], 64);
    bad_gateway.gateway = Some("fd00::/64".into());
    assert_eq!(
        errors(&bad_gateway),
        ["gateway `fd00::/64`: not an IP address"]
    );
}

#[test]
fn prefixes_are_required_and_the_length_is_1_to_128() {
    assert_eq!(
        errors(&spec(&[], 64)),
        ["prefixes: at least one prefix is required"]
    );
    for length in [0, 129, -1, i64::MAX] {
        assert_eq!(
            errors(&spec(&["fd00::/48"], length)),
            [format!(
                "allocationPrefixLength {length}: must be between 1 and 128 for IPv6 prefixes"
            )]
        );
    }
    assert_eq!(parsed(&spec(&["fd00::/48"], 48)).total(), 1);
    assert_eq!(parsed(&spec(&["fd00::1/128"], 128)).total(), 1);
    assert_eq!(parsed(&spec(&["::/0"], 1)).total(), 2);
}

#[test]
fn networks_parse_only_when_aligned() {
    assert_eq!(net("fd00::/48").to_string(), "fd00::/48");
    assert_eq!(net("fd00::/48").family(), Family::V6);
    assert_eq!(
        parse_network("fd00::1/48"),
        Err(EntryError::NotAligned {
            network: net("fd00::/48")
        })
    );
    assert_eq!(parse_network("fd00::1"), Err(EntryError::NotACidr));
    assert_eq!(
        parse_network("fd00::-fd00::1/64"),
        Err(EntryError::NotACidr)
    );
    assert_eq!(parse_network(" fd00::/48"), Err(EntryError::Whitespace));
    assert_eq!(Subnet::new(ip("fd00::"), 48), Some(net("fd00::/48")));
    assert_eq!(Subnet::new(ip("fd00::1"), 48), None);
    assert_eq!(Subnet::new(ip("10.0.0.0"), 33), None);
}

#[test]
fn an_ipv4_slash24_gives_four_slash26s_lowest_first() {
    let mut with_gateway = excluding(spec(&["10.0.0.0/24"], 26), &["10.0.0.70"]);
    with_gateway.gateway = Some("10.0.0.1".into());
    let pool = parsed(&with_gateway);
    assert_eq!(pool.family(), Family::V4);
    assert_eq!(pool.gateway(), Some(ip("10.0.0.1")));
    let mut allocator = PrefixAllocator::new(pool);
    assert_eq!(allocator.counts(), counts(3, 0, 3, 0));
    assert_eq!(
        take(&mut allocator, 3),
        ["10.0.0.0/26", "10.0.0.128/26", "10.0.0.192/26"]
    );
    assert_eq!(
        allocator.allocate_lowest(),
        Err(PrefixAllocError::Exhausted)
    );
    assert!(allocator.release(net("10.0.0.128/26")));
    assert_eq!(allocator.lowest_free(), Some(net("10.0.0.128/26")));
    // A network of the right length but the other family is no sub-prefix of this pool.
    let wrong = PrefixAllocError::NotASubPrefix {
        prefix: net("fd00::/26"),
        family: Family::V4,
        length: 26,
    };
    assert_eq!(allocator.mark_used(net("fd00::/26")), Err(wrong));
    assert_eq!(
        wrong.to_string(),
        "fd00::/26 is not a /26 IPv4 sub-prefix, the only kind the pool hands out"
    );
}

#[test]
fn ipv4_lengths_go_to_32_and_the_ipv6_default_must_be_overridden() {
    assert_eq!(parsed(&spec(&["10.0.0.0/30"], 32)).total(), 4);
    assert_eq!(parsed(&spec(&["0.0.0.0/0"], 1)).total(), 2);
    assert_eq!(parsed(&spec(&["0.0.0.0/0"], 32)).total(), 1 << 32);
    let defaulted = PrefixPoolSpecInput {
        prefixes: vec!["10.0.0.0/16".into()],
        ..Default::default()
    };
    assert_eq!(
        errors(&defaulted),
        [
            "allocationPrefixLength 64: must be between 1 and 32 for IPv4 prefixes (64 is the default, for IPv6: set it)"
        ]
    );
    assert_eq!(
        errors(&spec(&["10.0.0.0/16"], 33)),
        ["allocationPrefixLength 33: must be between 1 and 32 for IPv4 prefixes"]
    );
    let mut mixed = excluding(spec(&["10.0.0.0/16", "fd00::/48"], 24), &["fd00::1"]);
    mixed.gateway = Some("fd00::1".into());
    assert_eq!(
        errors(&mixed),
        [
            "mixed address families: prefixes[1] `fd00::/48` is IPv6 but the pool is IPv4",
            "mixed address families: excludedPrefixes[0] `fd00::1` is IPv6 but the pool is IPv4",
            "mixed address families: gateway `fd00::1` is IPv6 but the pool is IPv4",
        ]
    );
    assert_eq!(
        errors(&spec(&["10.0.0.0/28"], 26)),
        ["prefixes[0] `10.0.0.0/28` is longer than allocationPrefixLength 26"]
    );
}
