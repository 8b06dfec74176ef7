//! Property tests: the allocator against a naive model that enumerates every address.
//!
//! Pools live in 1024-address windows (at the bottom, in the middle and at the top of each
//! family's space, so that wrap-around and overflow edges are exercised), where a `BTreeSet`
//! of addresses is cheap. The model implements the reference provider's rules directly:
//! union of entries, subnet of the lowest address, removal of exclusions, reserved addresses and
//! gateway; lowest-free allocation; out-of-range tracking.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use inpool::allocator::{
    AddrRange, AddressSet, AllocError, Allocator, Family, PoolSpecInput, SpecError, parse_entry,
};
use proptest::prelude::*;

use crate::props::{self, OffsetEntry};

/// Offsets inside a window are below this.
const WINDOW: u32 = 1024;
const WINDOW_BITS: u32 = 10;

type Addr = (Family, u128);

#[derive(Clone, Copy, Debug)]
struct Window {
    family: Family,
    base: u128,
}

impl Window {
    /// Offsets past the top of the family's space wrap around to its bottom.
    fn addr(&self, offset: u32) -> Addr {
        let value = self.base.wrapping_add(u128::from(offset)) & self.family.max_value();
        (self.family, value)
    }
}

fn windows(family: Family) -> [Window; 3] {
    match family {
        Family::V4 => [0, 0x0a00_0000, 0xffff_fc00].map(|base| Window { family, base }),
        Family::V6 => [
            0,
            0x2001_0db8_0000_0000_0000_0000_0000_0000,
            u128::MAX - u128::from(WINDOW - 1),
        ]
        .map(|base| Window { family, base }),
    }
}

fn window() -> impl Strategy<Value = Window> {
    (prop_oneof![Just(Family::V4), Just(Family::V6)], 0..3usize)
        .prop_map(|(family, index)| windows(family)[index])
}

fn ip((family, value): Addr) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::from(u32::try_from(value).expect("IPv4 value"))),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

fn addr(ip: IpAddr) -> Addr {
    match ip {
        IpAddr::V4(v4) => (Family::V4, u128::from(u32::from(v4))),
        IpAddr::V6(v6) => (Family::V6, u128::from(v6)),
    }
}

fn enumerate(range: AddrRange) -> impl Iterator<Item = Addr> {
    let (family, first) = addr(range.first());
    let (_, last) = addr(range.last());
    (first..=last).map(move |value| (family, value))
}

fn entry() -> impl Strategy<Value = OffsetEntry> {
    props::offset_entry(WINDOW, 6)
}

impl Window {
    /// `entry` as a spec writes it, in this window.
    fn text(&self, entry: OffsetEntry) -> String {
        entry.text(u32::from(self.family.bits()), |offset| {
            ip(self.addr(offset)).to_string()
        })
    }

    /// The addresses `entry` covers in this window.
    fn addresses(&self, entry: OffsetEntry) -> BTreeSet<Addr> {
        let (first, last) = entry.offsets();
        (first..=last).map(|offset| self.addr(offset)).collect()
    }
}

#[derive(Clone, Debug)]
struct SpecGen {
    window: Window,
    addresses: Vec<OffsetEntry>,
    excluded: Vec<OffsetEntry>,
    /// Host bits of the subnet: up to 12, so the subnet is sometimes larger than the window
    /// and sometimes cuts entries off.
    subnet_host_bits: u32,
    gateway: Option<u32>,
    allocate_reserved: bool,
}

fn spec_in(window: Window) -> impl Strategy<Value = SpecGen> {
    (
        prop::collection::vec(entry(), 1..5),
        prop::collection::vec(entry(), 0..3),
        prop_oneof![3 => Just(WINDOW_BITS), 1 => 6..=12u32],
        prop::option::of(0..WINDOW),
        any::<bool>(),
    )
        .prop_map(
            move |(addresses, excluded, subnet_host_bits, gateway, allocate_reserved)| SpecGen {
                window,
                addresses,
                excluded,
                subnet_host_bits,
                gateway,
                allocate_reserved,
            },
        )
}

impl SpecGen {
    fn input(&self) -> PoolSpecInput {
        let texts =
            |entries: &[OffsetEntry]| entries.iter().map(|e| self.window.text(*e)).collect();
        PoolSpecInput {
            addresses: texts(&self.addresses),
            prefix: i64::from(u32::from(self.window.family.bits()) - self.subnet_host_bits),
            gateway: self.gateway.map(|g| ip(self.window.addr(g)).to_string()),
            excluded_addresses: texts(&self.excluded),
            allocate_reserved_ip_addresses: self.allocate_reserved,
            pre_allocations: Vec::new(),
            additional_subnets: Vec::new(),
        }
    }

    /// The allocatable addresses, or the indexes of the entries outside the subnet.
    fn model(&self) -> Result<BTreeSet<Addr>, Vec<usize>> {
        let family = self.window.family;
        let entries: Vec<BTreeSet<Addr>> = self
            .addresses
            .iter()
            .map(|e| self.window.addresses(*e))
            .collect();
        let configured: BTreeSet<Addr> = entries.iter().flatten().copied().collect();
        let lowest = configured.first().expect("at least one entry").1;
        let host_mask = (1u128 << self.subnet_host_bits) - 1;
        let (network, last) = (lowest & !host_mask, lowest | host_mask);
        let outside: Vec<usize> = (0..entries.len())
            .filter(|&i| entries[i].iter().any(|&(_, v)| v < network || v > last))
            .collect();
        if !outside.is_empty() {
            return Err(outside);
        }
        let mut pool = configured;
        for excluded in &self.excluded {
            for a in self.window.addresses(*excluded) {
                pool.remove(&a);
            }
        }
        if !self.allocate_reserved {
            pool.remove(&(family, network));
            if family == Family::V4 {
                pool.remove(&(family, last));
            }
        }
        if let Some(gateway) = self.gateway {
            pool.remove(&self.window.addr(gateway));
        }
        Ok(pool)
    }

    /// Parses the spec, checks it against the model, and returns the allocatable set if valid.
    fn parse_checked(&self) -> Result<Option<(AddressSet, BTreeSet<Addr>)>, TestCaseError> {
        match (self.input().parse(), self.model()) {
            (Ok(parsed), Ok(model)) => {
                let got: BTreeSet<Addr> =
                    parsed.allocatable().ranges().flat_map(enumerate).collect();
                prop_assert_eq!(&got, &model);
                prop_assert_eq!(parsed.allocatable().len(), model.len() as u128);
                Ok(Some((parsed.into_allocatable(), model)))
            }
            (Err(errors), Err(outside)) => {
                let reported: Vec<usize> = errors
                    .errors()
                    .iter()
                    .map(|error| match error {
                        SpecError::OutsideSubnet { field, .. } => {
                            let text = field.to_string();
                            text["addresses[".len()..text.len() - 1].parse().unwrap()
                        }
                        other => panic!("unexpected error {other}"),
                    })
                    .collect();
                prop_assert_eq!(reported, outside);
                Ok(None)
            }
            (parsed, model) => Err(TestCaseError::fail(format!(
                "parser and model disagree: {parsed:?} vs {model:?}"
            ))),
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    AllocateLowest,
    /// `true` picks the other window (of the other family).
    Allocate(bool, u32),
    Release(bool, u32),
    /// Releases the n-th used address (modulo their number), to punch and merge holes.
    ReleaseUsed(usize),
    MarkUsed(bool, u32),
    NextFreeAfter(u32),
    Resize(SpecGen),
}

/// Offsets a bit past the window too, to hit addresses outside every pool.
fn offset() -> impl Strategy<Value = u32> {
    0..WINDOW + 64
}

fn ops(main: Window, other: Window) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => Just(Op::AllocateLowest),
        3 => (prop::bool::weighted(0.1), offset()).prop_map(|(o, a)| Op::Allocate(o, a)),
        2 => (prop::bool::weighted(0.1), offset()).prop_map(|(o, a)| Op::Release(o, a)),
        4 => any::<usize>().prop_map(Op::ReleaseUsed),
        3 => (prop::bool::weighted(0.2), offset()).prop_map(|(o, a)| Op::MarkUsed(o, a)),
        1 => offset().prop_map(Op::NextFreeAfter),
        1 => prop_oneof![4 => spec_in(main), 1 => spec_in(other)].prop_map(Op::Resize),
    ];
    prop::collection::vec(op, 1..80)
}

fn other_family(window: Window) -> Window {
    let family = match window.family {
        Family::V4 => Family::V6,
        Family::V6 => Family::V4,
    };
    windows(family)[1]
}

/// A pool spec, its window, a window of the other family, and an operation sequence.
fn scenario() -> impl Strategy<Value = (SpecGen, Vec<Op>)> {
    window().prop_flat_map(|main| {
        let other = other_family(main);
        (spec_in(main), ops(main, other))
    })
}

struct Model {
    pool: BTreeSet<Addr>,
    used: BTreeSet<Addr>,
}

impl Model {
    fn free(&self) -> impl Iterator<Item = &Addr> {
        self.pool.iter().filter(|a| !self.used.contains(a))
    }

    fn check(&self, allocator: &Allocator) -> Result<(), TestCaseError> {
        props::check_counts(allocator.counts(), &self.pool, &self.used)?;
        prop_assert_eq!(allocator.lowest_free(), self.free().next().copied().map(ip));
        Ok(())
    }

    fn check_everything(&self, allocator: &Allocator) -> Result<(), TestCaseError> {
        self.check(allocator)?;
        let free_ranges: Vec<AddrRange> = allocator.free_ranges().collect();
        for pair in free_ranges.windows(2) {
            prop_assert!(
                addr(pair[1].first()).1 > addr(pair[0].last()).1 + 1,
                "free ranges are merged"
            );
        }
        let free: BTreeSet<Addr> = free_ranges.into_iter().flat_map(enumerate).collect();
        prop_assert_eq!(free, self.free().copied().collect::<BTreeSet<_>>());
        let out: BTreeSet<Addr> = allocator
            .out_of_range_ranges()
            .flat_map(enumerate)
            .collect();
        prop_assert_eq!(out, props::out_of_range(&self.pool, &self.used));
        Ok(())
    }
}

fn run(spec: SpecGen, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let Some((set, pool)) = spec.parse_checked()? else {
        return Ok(());
    };
    let main = spec.window;
    let other = other_family(main);
    let target = |other_window: bool, offset: u32| {
        if other_window {
            other.addr(offset)
        } else {
            main.addr(offset)
        }
    };
    let mut allocator = Allocator::new(set);
    let mut model = Model {
        pool,
        used: BTreeSet::new(),
    };
    for op in ops {
        match op {
            Op::AllocateLowest => {
                let expected = model.free().next().copied();
                let got = allocator.allocate_lowest();
                prop_assert_eq!(got, expected.map(ip).ok_or(AllocError::Exhausted));
                if let Some(a) = expected {
                    model.used.insert(a);
                }
            }
            Op::Allocate(o, offset) => {
                let a = target(o, offset);
                let expected = if !model.pool.contains(&a) {
                    Err(AllocError::NotInPool(ip(a)))
                } else if model.used.contains(&a) {
                    Err(AllocError::InUse(ip(a)))
                } else {
                    model.used.insert(a);
                    Ok(())
                };
                prop_assert_eq!(allocator.allocate(ip(a)), expected);
                prop_assert!(allocator.is_used(ip(a)) == model.used.contains(&a));
            }
            Op::Release(o, offset) => {
                let a = target(o, offset);
                prop_assert_eq!(allocator.release(ip(a)), model.used.remove(&a));
                prop_assert!(!allocator.is_used(ip(a)));
            }
            Op::ReleaseUsed(n) => {
                if let Some(&a) = model.used.iter().nth(n % model.used.len().max(1)) {
                    prop_assert!(allocator.release(ip(a)));
                    model.used.remove(&a);
                    prop_assert_eq!(allocator.is_free(ip(a)), model.pool.contains(&a));
                }
            }
            Op::MarkUsed(o, offset) => {
                let a = target(o, offset);
                prop_assert_eq!(allocator.mark_used(ip(a)), model.used.insert(a));
                prop_assert!(allocator.is_used(ip(a)));
                prop_assert_eq!(allocator.is_out_of_range(ip(a)), !model.pool.contains(&a));
                prop_assert_eq!(allocator.is_free(ip(a)), false);
            }
            Op::NextFreeAfter(offset) => {
                let a = main.addr(offset);
                let expected = if allocator.family() == a.0 {
                    model.free().find(|b| b.1 > a.1).copied().map(ip)
                } else {
                    None
                };
                prop_assert_eq!(allocator.next_free_after(ip(a)), expected);
            }
            Op::Resize(spec) => {
                if let Some((set, pool)) = spec.parse_checked()? {
                    allocator.resize(set);
                    model.pool = pool;
                    model.check_everything(&allocator)?;
                }
            }
        }
        model.check(&allocator)?;
    }
    model.check_everything(&allocator)
}

/// An arbitrary set in a window, with its model.
fn set_in(window: Window) -> impl Strategy<Value = (AddressSet, BTreeSet<Addr>)> {
    prop::collection::vec(entry(), 0..6).prop_map(move |entries| {
        let ranges = entries
            .iter()
            .map(|e| parse_entry(&window.text(*e)).unwrap());
        let set = AddressSet::from_ranges(window.family, ranges).unwrap();
        let model = entries.iter().flat_map(|e| window.addresses(*e)).collect();
        (set, model)
    })
}

fn two_sets() -> impl Strategy<Value = ((AddressSet, BTreeSet<Addr>), (AddressSet, BTreeSet<Addr>))>
{
    window().prop_flat_map(|w| (set_in(w), set_in(w)))
}

fn contents(set: &AddressSet) -> BTreeSet<Addr> {
    set.ranges().flat_map(enumerate).collect()
}

/// Strings made of the characters that matter to the parser.
fn spec_like_string() -> impl Strategy<Value = String> {
    props::spec_like_string([
        "(10\\.0\\.[0-9]{1,3}\\.[0-9]{1,3})(/[0-9]{1,3}|-10\\.0\\.0\\.[0-9]{1,3})?",
        "(2001:db8::[0-9a-f]{0,4})(/[0-9]{1,3}|-2001:db8::[0-9a-f]{1,4})?",
    ])
}

proptest! {
    // PROPTEST_CASES=10000 runs a deeper search.
    #![proptest_config(props::config())]

    #[test]
    fn allocator_matches_the_model((spec, ops) in scenario()) {
        run(spec, ops)?;
    }

    #[test]
    fn set_operations_match_the_model(((a, ma), (b, mb)) in two_sets()) {
        prop_assert_eq!(contents(&a), ma.clone());
        prop_assert_eq!(a.len(), ma.len() as u128);
        let intersection: BTreeSet<Addr> = ma.intersection(&mb).copied().collect();
        prop_assert_eq!(contents(&a.intersection(&b)), intersection.clone());
        prop_assert_eq!(contents(&a.difference(&b)), ma.difference(&mb).copied().collect::<BTreeSet<_>>());
        prop_assert_eq!(contents(&a.union(&b).unwrap()), ma.union(&mb).copied().collect::<BTreeSet<_>>());
        prop_assert_eq!(a.overlaps(&b), !intersection.is_empty());
        prop_assert_eq!(a.first_overlap(&b).map(|r| addr(r.first())), intersection.first().copied());
        // Normal form: equal contents means equal sets.
        prop_assert_eq!(a.union(&b).unwrap(), b.union(&a).unwrap());
        for range in a.ranges() {
            prop_assert!(a.contains_range(range));
            prop_assert!(a.contains(range.first()) && a.contains(range.last()));
        }
        for w in a.ranges().collect::<Vec<_>>().windows(2) {
            prop_assert!(addr(w[1].first()).1 > addr(w[0].last()).1 + 1, "ranges are merged");
        }
    }

    #[test]
    fn entries_round_trip_through_canonical_text(v4 in any::<u32>(), v6 in any::<u128>(), other in any::<u128>()) {
        for (a, b) in [((Family::V4, u128::from(v4)), (Family::V4, u128::from(v4 / 2))), ((Family::V6, v6), (Family::V6, other))] {
            let (low, high) = if a.1 <= b.1 { (a, b) } else { (b, a) };
            let single = parse_entry(&ip(a).to_string()).unwrap();
            prop_assert_eq!(single, AddrRange::single(ip(a)));
            let range = parse_entry(&format!("{}-{}", ip(low), ip(high))).unwrap();
            prop_assert_eq!(parse_entry(&range.to_string()).unwrap(), range);
            prop_assert_eq!(range.len(), (high.1 - low.1).saturating_add(1));
            if low != high {
                let reversed = format!("{}-{}", ip(high), ip(low));
                prop_assert_eq!(
                    parse_entry(&reversed).unwrap_err().to_string(),
                    "range end before start"
                );
            }
        }
    }

    #[test]
    fn parsing_never_panics(
        addresses in prop::collection::vec(spec_like_string(), 0..4),
        excluded in prop::collection::vec(spec_like_string(), 0..3),
        gateway in prop::option::of(spec_like_string()),
        prefix in prop_oneof![any::<i64>(), 0..=130i64],
        allocate_reserved in any::<bool>(),
    ) {
        let input = PoolSpecInput {
            addresses,
            prefix,
            gateway,
            excluded_addresses: excluded,
            allocate_reserved_ip_addresses: allocate_reserved,
            pre_allocations: Vec::new(),
            additional_subnets: Vec::new(),
        };
        match input.parse() {
            Ok(parsed) => {
                let allocatable = parsed.allocatable();
                prop_assert!(allocatable.difference(parsed.configured()).is_empty());
                prop_assert!(parsed.subnet().range().contains_range(
                    AddrRange::new(parsed.configured().first().unwrap(),
                        parsed.configured().ranges().last().unwrap().last()).unwrap()));
                if let Some(gateway) = parsed.gateway() {
                    prop_assert!(!allocatable.contains(gateway));
                }
                let mut allocator = Allocator::new(allocatable.clone());
                let lowest = allocator.allocate_lowest().ok();
                prop_assert_eq!(lowest, allocatable.first());
            }
            Err(errors) => prop_assert!(!errors.to_string().is_empty()),
        }
        for text in &input.addresses {
            if let Ok(range) = parse_entry(text) {
                prop_assert_eq!(parse_entry(&range.to_string()).unwrap(), range);
            }
        }
    }
}
