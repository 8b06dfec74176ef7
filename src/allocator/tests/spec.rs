use super::{ip, texts};
use crate::allocator::{
    Allocator, AnyAllocator, EntryError, Family, Field, ParsedPool, ParsedSpec, PoolSpecInput,
    PreAllocationInput, SpecError, SpecErrors, SubnetInput,
};

fn input(addresses: &[&str], prefix: i64) -> PoolSpecInput {
    PoolSpecInput {
        addresses: addresses.iter().map(|text| text.to_string()).collect(),
        prefix,
        ..Default::default()
    }
}

fn with_gateway(mut spec: PoolSpecInput, gateway: &str) -> PoolSpecInput {
    spec.gateway = Some(gateway.into());
    spec
}

fn excluding(mut spec: PoolSpecInput, excluded: &[&str]) -> PoolSpecInput {
    spec.excluded_addresses = excluded.iter().map(|text| text.to_string()).collect();
    spec
}

fn reserved_allowed(mut spec: PoolSpecInput) -> PoolSpecInput {
    spec.allocate_reserved_ip_addresses = true;
    spec
}

fn parsed(spec: &PoolSpecInput) -> ParsedPool {
    spec.parse()
        .unwrap_or_else(|errors| panic!("{spec:?}: {errors}"))
}

fn allocatable(spec: &PoolSpecInput) -> String {
    parsed(spec).allocatable().to_string()
}

fn errors(spec: &PoolSpecInput) -> String {
    spec.parse()
        .expect_err("spec should be rejected")
        .to_string()
}

#[test]
fn ipv4_subnet_loses_network_broadcast_and_gateway() {
    let pool = parsed(&with_gateway(input(&["10.0.0.0/24"], 24), "10.0.0.1"));
    assert_eq!(pool.allocatable().to_string(), "10.0.0.2-10.0.0.254");
    assert_eq!(pool.allocatable().len(), 253);
    assert_eq!(pool.configured().len(), 256);
    assert_eq!(pool.subnet().to_string(), "10.0.0.0/24");
    assert_eq!(pool.gateway(), Some(ip("10.0.0.1")));
    assert_eq!(pool.family(), Family::V4);
    assert_eq!(pool.prefix(), 24);
}

#[test]
fn allocate_reserved_keeps_network_and_broadcast_but_not_the_gateway() {
    let spec = reserved_allowed(with_gateway(input(&["10.0.0.0/24"], 24), "10.0.0.1"));
    assert_eq!(allocatable(&spec), "10.0.0.0, 10.0.0.2-10.0.0.255");
}

#[test]
fn reference_fixture_counts() {
    // The reference's PoolSpecToIPSet test: the gateway is removed, 4 addresses remain.
    let addresses = ["192.168.0.1", "192.168.0.3-192.168.0.4", "192.168.0.6/31"];
    let pool = parsed(&with_gateway(input(&addresses, 24), "192.168.0.1"));
    assert_eq!(pool.allocatable().len(), 4);
    assert!(!pool.allocatable().contains(ip("192.168.0.1")));

    let addresses = [
        "192.168.0.0",
        "192.168.0.1",
        "192.168.0.3-192.168.0.4",
        "192.168.0.6/31",
        "192.168.0.255",
    ];
    let spec = reserved_allowed(with_gateway(input(&addresses, 24), "192.168.0.1"));
    assert_eq!(
        allocatable(&spec),
        "192.168.0.0, 192.168.0.3-192.168.0.4, 192.168.0.6-192.168.0.7, 192.168.0.255"
    );
}

#[test]
fn reserved_only_matter_when_configured() {
    // Network and broadcast of 10.0.0.0/16 are not among the addresses: nothing to remove.
    assert_eq!(
        allocatable(&input(&["10.0.1.0-10.0.1.9"], 16)),
        "10.0.1.0-10.0.1.9"
    );
}

#[test]
fn ipv6_loses_only_the_subnet_router_anycast_address() {
    let spec6 = input(&["2001:db8::/120"], 120);
    assert_eq!(allocatable(&spec6), "2001:db8::1-2001:db8::ff");
    assert_eq!(
        allocatable(&reserved_allowed(spec6)),
        "2001:db8::-2001:db8::ff"
    );
    let spec6 = with_gateway(input(&["2001:db8::/120"], 120), "2001:db8::1");
    assert_eq!(allocatable(&spec6), "2001:db8::2-2001:db8::ff");
}

#[test]
fn tiny_subnets_follow_the_reference() {
    // /31 and /32: first and last are still reserved unless allowed (no RFC 3021 special case).
    assert!(
        parsed(&input(&["10.0.0.0/31"], 31))
            .allocatable()
            .is_empty()
    );
    assert!(parsed(&input(&["10.0.0.7"], 32)).allocatable().is_empty());
    assert_eq!(
        allocatable(&reserved_allowed(input(&["10.0.0.0/31"], 31))),
        "10.0.0.0-10.0.0.1"
    );
    assert!(
        parsed(&input(&["2001:db8::7"], 128))
            .allocatable()
            .is_empty()
    );
    assert_eq!(
        allocatable(&reserved_allowed(input(&["2001:db8::7"], 128))),
        "2001:db8::7"
    );
}

#[test]
fn overlapping_and_duplicate_entries_are_merged() {
    let addresses = [
        "10.0.0.10-10.0.0.20",
        "10.0.0.0/24",
        "10.0.0.5",
        "10.0.0.5",
        "10.0.0.250-10.0.0.255",
    ];
    let pool = parsed(&reserved_allowed(input(&addresses, 24)));
    assert_eq!(pool.allocatable().len(), 256);
    assert_eq!(pool.allocatable().range_count(), 1);
    // Adjacent entries merge too.
    let pool = parsed(&reserved_allowed(input(
        &["10.0.0.3", "10.0.0.1-10.0.0.2", "10.0.0.4/30"],
        24,
    )));
    assert_eq!(pool.allocatable().to_string(), "10.0.0.1-10.0.0.7");
}

#[test]
fn exclusions_are_removed_and_may_lie_anywhere() {
    let spec = excluding(
        input(&["10.0.0.0/24"], 24),
        &[
            "10.0.0.10-10.0.0.19",
            "10.0.0.0/30",
            "192.168.0.1",
            "10.0.0.15",
        ],
    );
    assert_eq!(
        allocatable(&spec),
        "10.0.0.4-10.0.0.9, 10.0.0.20-10.0.0.254"
    );
    let everything = excluding(input(&["2001:db8::/64"], 64), &["::/0"]);
    assert!(parsed(&everything).allocatable().is_empty());
}

#[test]
fn the_subnet_comes_from_the_lowest_address_not_the_first_entry() {
    let pool = parsed(&input(&["10.0.0.200", "10.0.0.5"], 24));
    assert_eq!(pool.subnet().to_string(), "10.0.0.0/24");
    // Exclusions do not move the subnet.
    let pool = parsed(&excluding(input(&["10.0.0.0/24"], 24), &["10.0.0.0/25"]));
    assert_eq!(pool.subnet().to_string(), "10.0.0.0/24");
    assert_eq!(pool.allocatable().to_string(), "10.0.0.128-10.0.0.254");
}

#[test]
fn entries_outside_the_subnet_are_rejected() {
    assert_eq!(
        errors(&input(&["10.1.0.0/24", "10.0.0.0/24"], 16)),
        "addresses[0] `10.1.0.0/24` is outside the subnet 10.0.0.0/16 given by the lowest address and the prefix"
    );
    assert_eq!(
        errors(&input(&["10.0.0.200-10.0.1.5"], 24)),
        "addresses[0] `10.0.0.200-10.0.1.5` is outside the subnet 10.0.0.0/24 given by the lowest address and the prefix"
    );
    assert_eq!(
        errors(&input(&["10.0.0.0/23"], 24)),
        "addresses[0] `10.0.0.0/23` is outside the subnet 10.0.0.0/24 given by the lowest address and the prefix"
    );
    assert!(errors(&input(&["::/0"], 1)).contains("is outside the subnet ::/1"));
    // The gateway need not be inside.
    assert!(
        with_gateway(input(&["10.0.0.0/24"], 24), "10.9.9.9")
            .parse()
            .is_ok()
    );
}

#[test]
fn entry_errors_name_field_entry_and_reason() {
    let spec = input(&["10.0.0.1", "10.0.0.2", "10.0.0.5-10.0.0.1"], 24);
    assert_eq!(
        errors(&spec),
        "addresses[2] `10.0.0.5-10.0.0.1`: range end before start"
    );
    let parsed = excluding(spec_ok(), &["10.0.0.1", "nope"])
        .parse()
        .unwrap_err();
    assert_eq!(
        parsed.errors(),
        [SpecError::InvalidEntry {
            field: Field::ExcludedAddresses(1),
            entry: "nope".into(),
            reason: EntryError::NotAnAddress,
        }]
    );
}

fn spec_ok() -> PoolSpecInput {
    input(&["10.0.0.0/24"], 24)
}

#[test]
fn families_must_not_mix() {
    assert_eq!(
        errors(&input(&["10.0.0.0/24", "2001:db8::1"], 24)),
        "mixed address families: addresses[1] `2001:db8::1` is IPv6 but the pool is IPv4"
    );
    assert_eq!(
        errors(&with_gateway(input(&["2001:db8::/64"], 64), "10.0.0.1")),
        "mixed address families: gateway `10.0.0.1` is IPv4 but the pool is IPv6"
    );
    assert_eq!(
        errors(&excluding(input(&["2001:db8::/64"], 64), &["10.0.0.1"])),
        "mixed address families: excludedAddresses[0] `10.0.0.1` is IPv4 but the pool is IPv6"
    );
    assert_eq!(
        errors(&input(&["10.0.0.1-::1"], 24)),
        "addresses[0] `10.0.0.1-::1`: range start and end are of different address families"
    );
}

#[test]
fn gateway_must_be_an_address() {
    assert_eq!(
        errors(&with_gateway(spec_ok(), "x")),
        "gateway `x`: not an IP address"
    );
    assert_eq!(
        errors(&with_gateway(spec_ok(), "10.0.0.1/24")),
        "gateway `10.0.0.1/24`: not an IP address"
    );
    // An empty gateway means "no gateway", like Go's zero value.
    assert_eq!(parsed(&with_gateway(spec_ok(), "")).gateway(), None);
}

#[test]
fn prefix_must_fit_the_family() {
    assert_eq!(
        errors(&input(&["10.0.0.1"], 0)),
        "prefix 0: must be between 1 and 32 for IPv4"
    );
    assert_eq!(
        errors(&input(&["10.0.0.1"], 33)),
        "prefix 33: must be between 1 and 32 for IPv4"
    );
    assert_eq!(
        errors(&input(&["10.0.0.1"], -1)),
        "prefix -1: must be between 1 and 32 for IPv4"
    );
    assert_eq!(
        errors(&input(&["::1"], 129)),
        "prefix 129: must be between 1 and 128 for IPv6"
    );
    assert_eq!(
        errors(&input(&["::1"], i64::MAX)),
        format!("prefix {}: must be between 1 and 128 for IPv6", i64::MAX)
    );
    assert_eq!(
        errors(&input(&["bad"], 200)),
        "addresses[0] `bad`: not an IP address; prefix 200: must be between 1 and 128 for either family"
    );
    assert!(input(&["::1"], 128).parse().is_ok());
}

#[test]
fn addresses_are_required() {
    assert_eq!(
        errors(&input(&[], 24)),
        "addresses: at least one address is required"
    );
}

#[test]
fn every_problem_is_reported() {
    let spec = PoolSpecInput {
        addresses: vec!["10.0.0.0/24".into(), "".into(), "2001:db8::1".into()],
        prefix: 40,
        gateway: Some("gw".into()),
        excluded_addresses: vec!["10.0.0.1 ".into()],
        allocate_reserved_ip_addresses: false,
        pre_allocations: ["10.0.0.9", "10.0.0.0/28", "2001:db8::9"]
            .iter()
            .map(|address| PreAllocationInput {
                claim_name: "c".into(),
                address: address.to_string(),
                ..Default::default()
            })
            .collect(),
        additional_subnets: vec![SubnetInput {
            addresses: vec!["10.1.0.5".into()],
            prefix: 40,
            gateway: None,
        }],
    };
    let errors: SpecErrors = spec.parse().unwrap_err();
    assert_eq!(errors.errors().len(), 8, "{errors}");
    assert_eq!(errors.first().to_string(), "addresses[1] ``: empty");
    assert_eq!(
        errors.to_string(),
        "addresses[1] ``: empty; \
         mixed address families: addresses[2] `2001:db8::1` is IPv6 but the pool is IPv4; \
         excludedAddresses[0] `10.0.0.1 `: contains whitespace; \
         gateway `gw`: not an IP address; \
         prefix 40: must be between 1 and 32 for IPv4; \
         preAllocations[1].address `10.0.0.0/28`: not an IP address; \
         mixed address families: preAllocations[2].address `2001:db8::9` is IPv6 but the pool is IPv4; \
         additionalSubnets[0].prefix 40: must be between 1 and 32 for IPv4"
    );
}

#[test]
fn a_pre_allocation_outside_the_pool_is_no_fault_of_the_spec() {
    let mut spec = input(&["10.0.0.10-10.0.0.20"], 24);
    spec.gateway = Some("10.0.0.1".into());
    spec.pre_allocations = ["10.0.0.15", "10.0.0.1", "10.0.5.5"]
        .iter()
        .enumerate()
        .map(|(i, address)| PreAllocationInput {
            claim_name: format!("c{i}"),
            address: address.to_string(),
            ..Default::default()
        })
        .collect();
    let pool = parsed(&spec);
    let ips: Vec<_> = pool.pre_allocations().iter().map(|p| p.ip).collect();
    assert_eq!(ips, [ip("10.0.0.15"), ip("10.0.0.1"), ip("10.0.5.5")]);
}

#[test]
fn huge_ipv6_pools_are_never_enumerated() {
    let spec = with_gateway(input(&["2001:db8::/64"], 64), "2001:db8::1");
    let pool = parsed(&spec);
    assert_eq!(pool.allocatable().len(), (1u128 << 64) - 2);
    let mut allocator = Allocator::new(pool.into_allocatable());
    assert_eq!(allocator.allocate_lowest(), Ok(ip("2001:db8::2")));
    allocator
        .allocate(ip("2001:db8::ffff:ffff:ffff:ffff"))
        .unwrap();
    assert_eq!(allocator.counts().free, (1u128 << 64) - 4);

    let half = parsed(&reserved_allowed(input(&["::/1"], 1)));
    assert_eq!(half.allocatable().len(), 1u128 << 127);
    let top = parsed(&input(&["8000::/1"], 1));
    assert_eq!(top.allocatable().len(), (1u128 << 127) - 1);
    assert_eq!(top.allocatable().first(), Some(ip("8000::1")));
}

#[test]
fn status_counts_saturate_for_huge_pools() {
    let pool = parsed(&input(&["2001:db8::/64"], 64)).into_allocatable();
    let status = Allocator::new(pool).counts().to_status();
    assert_eq!(status.total, i64::MAX);
    assert_eq!(status.free, i64::MAX);
    assert_eq!(status.used, 0);
}

// ---------------------------------------------------------------------------------------------
// Pools that span subnets (`additionalSubnets`)

/// The example: two subnets of different prefixes, each with its gateway.
fn two_subnets() -> PoolSpecInput {
    let mut spec = with_gateway(input(&["100.96.32.1-100.96.32.100"], 22), "100.96.32.254");
    spec.additional_subnets = vec![SubnetInput {
        addresses: vec!["100.98.254.1-100.98.254.100".into()],
        prefix: 23,
        gateway: Some("100.98.254.254".into()),
    }];
    spec
}

#[test]
fn a_pool_hands_out_the_union_of_its_subnets() {
    let pool = parsed(&two_subnets());
    assert_eq!(
        pool.allocatable().to_string(),
        "100.96.32.1-100.96.32.100, 100.98.254.1-100.98.254.100"
    );
    // Counts add up across subnets: 100 + 100.
    assert_eq!(
        Allocator::new(pool.allocatable().clone()).counts().total,
        200
    );
    assert_eq!(pool.configured().len(), 200);
    assert_eq!(
        texts(pool.networks().iter().map(|n| n.subnet)),
        ["100.96.32.0/22", "100.98.254.0/23"]
    );
}

#[test]
fn each_address_has_the_prefix_and_gateway_of_its_subnet() {
    let pool = parsed(&two_subnets());
    let own = pool.network_of(ip("100.96.32.5"));
    assert_eq!(
        (own.subnet.prefix(), own.gateway),
        (22, Some(ip("100.96.32.254")))
    );
    let second = pool.network_of(ip("100.98.254.5"));
    assert_eq!(
        (second.subnet.prefix(), second.gateway),
        (23, Some(ip("100.98.254.254")))
    );
    let networks = ParsedSpec::Addresses(pool).networks();
    assert_eq!(
        networks.of(ip("100.98.254.5")),
        (23, Some(ip("100.98.254.254")))
    );
    assert_eq!(
        networks.of(ip("100.96.32.5")),
        (22, Some(ip("100.96.32.254")))
    );
}

#[test]
fn why_an_address_is_not_handed_out_names_its_subnet() {
    let mut spec = two_subnets();
    spec.excluded_addresses = vec!["100.98.254.50".into()];
    spec.additional_subnets[0]
        .addresses
        .push("100.98.254.0".into());
    let pool = parsed(&spec);
    let why = |text: &str| pool.not_handed_out(ip(text)).map(|why| why.to_string());
    assert_eq!(why("100.98.254.10"), None);
    assert_eq!(why("100.96.32.1"), None);
    assert_eq!(pool.subnet_index_of(ip("100.98.254.10")), Some(1));
    assert_eq!(pool.subnet_index_of(ip("100.96.32.1")), Some(0));
    assert_eq!(pool.subnet_index_of(ip("10.0.0.1")), None);
    assert_eq!(
        why("100.96.32.254").as_deref(),
        Some("it is the pool's gateway (spec.gateway)")
    );
    assert_eq!(
        why("100.98.254.254").as_deref(),
        Some(
            "it is the pool's gateway of subnet 100.98.254.0/23 (spec.additionalSubnets[0].gateway)"
        )
    );
    assert_eq!(
        why("100.98.254.50").as_deref(),
        Some("the pool does not hand it out: it is in spec.excludedAddresses")
    );
    assert_eq!(
        why("100.98.254.0").as_deref(),
        Some(
            "the pool does not hand it out: it is the network or broadcast address of subnet \
             100.98.254.0/23 (spec.additionalSubnets[0]); spec.allocateReservedIPAddresses hands it out"
        )
    );
    // Inside the second subnet's network, outside its addresses: outside the pool.
    assert_eq!(
        why("100.98.254.200").as_deref(),
        Some(
            "the pool does not hand it out: it is outside the addresses of every subnet: \
             spec.addresses (subnet 100.96.32.0/22), spec.additionalSubnets[0].addresses \
             (subnet 100.98.254.0/23)"
        )
    );
    assert_eq!(
        parsed(&input(&["10.0.0.10"], 24))
            .not_handed_out(ip("10.0.0.11"))
            .map(|why| why.to_string())
            .as_deref(),
        Some("the pool does not hand it out: it is outside spec.addresses (subnet 10.0.0.0/24)")
    );
}

#[test]
fn addresses_are_handed_out_subnet_by_subnet_in_the_order_written() {
    // The additional subnet is numerically lower, and still comes second.
    let mut spec = input(&["10.9.0.1-10.9.0.2"], 24);
    spec.additional_subnets = vec![
        SubnetInput {
            addresses: vec!["10.1.0.5-10.1.0.6".into()],
            prefix: 24,
            gateway: None,
        },
        SubnetInput {
            addresses: vec!["10.5.0.7".into()],
            prefix: 24,
            gateway: None,
        },
    ];
    let mut allocator = AnyAllocator::new(ParsedSpec::Addresses(parsed(&spec)));
    let order: Vec<_> = std::iter::from_fn(|| allocator.allocate_next()).collect();
    assert_eq!(
        texts(order),
        ["10.9.0.1", "10.9.0.2", "10.1.0.5", "10.1.0.6", "10.5.0.7"]
    );
    // A released address of an earlier subnet is the next one handed out.
    assert!(allocator.release(ip("10.9.0.2")));
    assert_eq!(allocator.allocate_next(), Some(ip("10.9.0.2")));
    // The order survives a rebuild.
    let mut fresh = allocator.emptied();
    fresh.mark_used(ip("10.9.0.1"));
    assert_eq!(fresh.allocate_next(), Some(ip("10.9.0.2")));
    assert_eq!(fresh.allocate_next(), Some(ip("10.1.0.5")));
}

#[test]
fn each_subnet_loses_its_reserved_addresses_and_every_gateway_is_kept_out() {
    let mut spec = with_gateway(input(&["10.0.0.0/30"], 30), "10.0.1.2");
    spec.additional_subnets = vec![SubnetInput {
        addresses: vec!["10.0.1.0/30".into()],
        prefix: 30,
        gateway: Some("10.0.1.1".into()),
    }];
    // Own subnet: .1 .2 (network .0, broadcast .3 reserved). Second: .1 is its gateway, .2 the
    // spec's own gateway (outside its own subnet, as the reference allows): nothing left there.
    assert_eq!(allocatable(&spec), "10.0.0.1-10.0.0.2");
    spec.allocate_reserved_ip_addresses = true;
    assert_eq!(allocatable(&spec), "10.0.0.0-10.0.0.3, 10.0.1.0, 10.0.1.3");
    spec.excluded_addresses = vec!["10.0.1.3".into()];
    assert_eq!(allocatable(&spec), "10.0.0.0-10.0.0.3, 10.0.1.0");
}

#[test]
fn a_bad_subnet_is_reported_by_its_field() {
    let subnet = |addresses: &[&str], prefix: i64, gateway: Option<&str>| SubnetInput {
        addresses: addresses.iter().map(|a| a.to_string()).collect(),
        prefix,
        gateway: gateway.map(Into::into),
    };
    let with = |subnets: Vec<SubnetInput>| {
        let mut spec = input(&["10.0.0.10-10.0.0.20"], 24);
        spec.additional_subnets = subnets;
        errors(&spec)
    };
    assert_eq!(
        with(vec![subnet(&["10.1.0.5"], 24, Some("10.2.0.1"))]),
        "additionalSubnets[0].gateway `10.2.0.1` is outside the subnet 10.1.0.0/24 given by its lowest address and its prefix"
    );
    assert_eq!(
        with(vec![subnet(&["10.1.0.5", "10.1.1.5"], 24, None)]),
        "additionalSubnets[0].addresses[1] `10.1.1.5` is outside the subnet 10.1.0.0/24 given by the lowest address and the prefix"
    );
    assert_eq!(
        with(vec![subnet(&["10.1.0.5"], 33, None)]),
        "additionalSubnets[0].prefix 33: must be between 1 and 32 for IPv4"
    );
    assert_eq!(
        with(vec![subnet(&["2001:db8::1"], 24, None)]),
        "mixed address families: additionalSubnets[0].addresses[0] `2001:db8::1` is IPv6 but the pool is IPv4"
    );
    assert_eq!(
        with(vec![subnet(&[], 24, None)]),
        "additionalSubnets[0].addresses: at least one address is required"
    );
    assert_eq!(
        with(vec![subnet(&["10.0.1.5"], 23, None)]),
        "additionalSubnets[0]: its subnet 10.0.0.0/23 overlaps the subnet 10.0.0.0/24 of addresses; the subnets of one pool must not overlap"
    );
    assert_eq!(
        with(vec![
            subnet(&["10.4.0.5"], 16, None),
            subnet(&["10.3.0.5"], 24, None),
            subnet(&["10.4.9.5"], 24, None),
        ]),
        "additionalSubnets[2]: its subnet 10.4.9.0/24 overlaps the subnet 10.4.0.0/16 of additionalSubnets[0]; the subnets of one pool must not overlap"
    );
}

#[test]
fn a_pre_allocation_may_name_an_address_of_any_subnet() {
    let mut spec = two_subnets();
    spec.pre_allocations = vec![PreAllocationInput {
        claim_namespace: String::new(),
        claim_name: "vm".into(),
        address: "100.98.254.50".into(),
    }];
    let pool = parsed(&spec);
    assert_eq!(pool.pre_allocations()[0].ip, ip("100.98.254.50"));
    assert!(pool.allocatable().contains(ip("100.98.254.50")));
}
