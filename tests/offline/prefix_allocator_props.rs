//! Property tests: the prefix allocator against a naive model that enumerates every sub-prefix.
//!
//! Pools live in a 256-address window (a /120 or a /24 at the bottom, in the middle and at the
//! top of the IPv6 or the IPv4 space, so that shift and overflow edges are exercised in both)
//! with allocation lengths of the window's length plus 1 to 8, at most 128 sub-prefixes: a
//! `BTreeSet` of sub-prefix networks is cheap there. The model
//! implements the reference's rules directly: a sub-prefix is allocatable if it lies in a
//! `prefixes` entry and no excluded address falls inside it; first fit; out-of-range tracking.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use inpool::allocator::{
    Family, Field, PrefixAllocError, PrefixAllocator, PrefixPoolSpecInput, SpecError, Subnet,
};
use proptest::prelude::*;

use crate::props::{self, OffsetEntry};

const WINDOW: u32 = 256;
/// Host bits of the window.
const WINDOW_HOST_BITS: u8 = 8;

/// Where the pools of one case live: 256 addresses of one family from `base`.
#[derive(Clone, Copy, Debug)]
struct Window {
    family: Family,
    base: u128,
}

fn window() -> impl Strategy<Value = Window> {
    let at = |family, base| Just(Window { family, base });
    prop_oneof![
        at(Family::V6, 0),
        at(Family::V6, 0x2001_0db8_0000_0000_0000_0000_0000_0000),
        at(Family::V6, u128::MAX - u128::from(WINDOW - 1)),
        at(Family::V4, 0),
        at(Family::V4, 0x0a00_0000),
        at(Family::V4, u128::from(u32::MAX - (WINDOW - 1))),
    ]
}

impl Window {
    fn bits(self) -> u8 {
        self.family.bits()
    }

    /// The shortest prefix inside the window.
    fn length(self) -> u8 {
        self.bits() - WINDOW_HOST_BITS
    }

    /// Offsets past the top of the space wrap around to its bottom.
    fn address(self, offset: u32) -> u128 {
        self.base.wrapping_add(u128::from(offset)) & self.family.max_value()
    }

    fn ip(self, value: u128) -> IpAddr {
        match self.family {
            Family::V4 => IpAddr::V4(Ipv4Addr::from(value as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(value)),
        }
    }

    fn text(self, value: u128) -> String {
        self.ip(value).to_string()
    }

    fn value(self, ip: IpAddr) -> u128 {
        match ip {
            IpAddr::V4(v4) if self.family == Family::V4 => u128::from(u32::from(v4)),
            IpAddr::V6(v6) if self.family == Family::V6 => u128::from(v6),
            other => panic!("{other} in a window of {:?}", self.family),
        }
    }

    fn host_mask(self, length: u8) -> u128 {
        (1u128 << (self.bits() - length)) - 1
    }
}

#[derive(Clone, Debug)]
struct SpecGen {
    window: Window,
    length: u8,
    /// Each an offset (aligned down to its length) and a prefix length from the window's to the
    /// family's width: some are longer than `length` and must be refused.
    prefixes: Vec<(u32, u8)>,
    /// `excludedPrefixes` entries.
    excluded: Vec<OffsetEntry>,
}

fn spec_in(window: Window, length: impl Strategy<Value = u8>) -> impl Strategy<Value = SpecGen> {
    (
        length,
        prop::collection::vec((0..WINDOW, window.length()..=window.bits()), 1..4),
        prop::collection::vec(props::offset_entry(WINDOW, 5), 0..4),
    )
        .prop_map(move |(length, prefixes, excluded)| SpecGen {
            window,
            length,
            prefixes: prefixes
                .into_iter()
                // Mostly no longer than the allocation length, so most specs are valid.
                .map(|(offset, p)| {
                    let p = if p > length && offset % 4 != 0 {
                        length
                    } else {
                        p
                    };
                    let mask = (1u32 << (window.bits() - p)) - 1;
                    (offset & !mask, p)
                })
                .collect(),
            excluded,
        })
}

impl SpecGen {
    fn input(&self) -> PrefixPoolSpecInput {
        let w = self.window;
        PrefixPoolSpecInput {
            prefixes: self
                .prefixes
                .iter()
                .map(|&(offset, p)| format!("{}/{p}", w.text(w.address(offset))))
                .collect(),
            allocation_prefix_length: Some(i64::from(self.length)),
            gateway: Some(w.text(w.address(1))),
            excluded_prefixes: self
                .excluded
                .iter()
                .map(|e| e.text(w.bits().into(), |offset| w.text(w.address(offset))))
                .collect(),
        }
    }

    /// The allocatable sub-prefix networks, or the indexes of the prefixes that are too long.
    fn model(&self) -> Result<BTreeSet<u128>, Vec<usize>> {
        let too_long: Vec<usize> = (0..self.prefixes.len())
            .filter(|&i| self.prefixes[i].1 > self.length)
            .collect();
        if !too_long.is_empty() {
            return Err(too_long);
        }
        let w = self.window;
        let block = w.host_mask(self.length) as u32 + 1;
        let excluded: BTreeSet<u32> = self
            .excluded
            .iter()
            .flat_map(|e| {
                let (first, last) = e.offsets();
                first..=last
            })
            .collect();
        let mut pool = BTreeSet::new();
        for &(offset, p) in &self.prefixes {
            let size = 1u32 << (w.bits() - p);
            for start in (offset..offset + size).step_by(block as usize) {
                if !(start..start + block).any(|a| excluded.contains(&a)) {
                    pool.insert(w.address(start));
                }
            }
        }
        Ok(pool)
    }

    /// Parses the spec, checks it against the model, and returns the allocator's input if valid.
    fn parse_checked(
        &self,
    ) -> Result<Option<(inpool::allocator::ParsedPrefixPool, BTreeSet<u128>)>, TestCaseError> {
        match (self.input().parse(), self.model()) {
            (Ok(parsed), Ok(model)) => {
                prop_assert_eq!(parsed.total(), model.len() as u128);
                prop_assert_eq!(parsed.allocation_prefix_length(), self.length);
                prop_assert_eq!(parsed.family(), self.window.family);
                let covered: u128 = parsed.allocatable().len();
                let block = self.window.host_mask(self.length) + 1;
                prop_assert_eq!(covered, model.len() as u128 * block);
                for &network in &model {
                    prop_assert!(parsed.allocatable().contains(self.window.ip(network)));
                }
                Ok(Some((parsed, model)))
            }
            (Err(errors), Err(too_long)) => {
                let reported: Vec<usize> = errors
                    .errors()
                    .iter()
                    .map(|error| match error {
                        SpecError::LongerThanAllocation {
                            field: Field::Prefixes(index),
                            ..
                        } => *index,
                        other => panic!("unexpected error {other}"),
                    })
                    .collect();
                prop_assert_eq!(reported, too_long);
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
    Allocate(u32),
    Release(u32),
    /// Releases the n-th used sub-prefix (modulo their number), to punch and merge holes.
    ReleaseUsed(usize),
    MarkUsed(u32),
    /// A network one bit shorter than the allocation length: never a sub-prefix.
    WrongLength(u32),
    NextFreeAfter(u32),
    Resize(SpecGen),
}

/// Offsets a bit past the window too, to hit sub-prefixes outside every pool.
fn offset() -> impl Strategy<Value = u32> {
    0..WINDOW + 32
}

fn ops(window: Window, length: u8) -> impl Strategy<Value = Vec<Op>> {
    let lengths = window.length() + 1..=window.bits();
    let op = prop_oneof![
        6 => Just(Op::AllocateLowest),
        3 => offset().prop_map(Op::Allocate),
        2 => offset().prop_map(Op::Release),
        4 => any::<usize>().prop_map(Op::ReleaseUsed),
        3 => offset().prop_map(Op::MarkUsed),
        1 => offset().prop_map(Op::WrongLength),
        1 => offset().prop_map(Op::NextFreeAfter),
        // Mostly the same length; sometimes another, which must be refused.
        1 => spec_in(window, prop_oneof![6 => Just(length), 1 => lengths]).prop_map(Op::Resize),
    ];
    prop::collection::vec(op, 1..80)
}

fn scenario() -> impl Strategy<Value = (SpecGen, Vec<Op>)> {
    window()
        .prop_flat_map(|window| (Just(window), window.length() + 1..=window.bits()))
        .prop_flat_map(|(window, length)| (spec_in(window, Just(length)), ops(window, length)))
}

struct Model {
    window: Window,
    length: u8,
    pool: BTreeSet<u128>,
    used: BTreeSet<u128>,
}

impl Model {
    fn free(&self) -> impl Iterator<Item = &u128> {
        self.pool.iter().filter(|a| !self.used.contains(a))
    }

    /// The sub-prefix holding `offset` of the window.
    fn network(&self, offset: u32) -> u128 {
        self.window.address(offset) & !self.window.host_mask(self.length)
    }

    fn subnet(&self, network: u128) -> Subnet {
        Subnet::new(self.window.ip(network), self.length).expect("aligned")
    }

    fn check(&self, allocator: &PrefixAllocator) -> Result<(), TestCaseError> {
        props::check_counts(allocator.counts(), &self.pool, &self.used)?;
        prop_assert_eq!(
            allocator.lowest_free(),
            self.free().next().map(|&n| self.subnet(n))
        );
        Ok(())
    }

    /// The sub-prefix networks of address ranges.
    fn networks(
        &self,
        ranges: impl Iterator<Item = inpool::allocator::AddrRange>,
    ) -> BTreeSet<u128> {
        let mask = self.window.host_mask(self.length);
        let step = mask + 1;
        let mut networks = BTreeSet::new();
        for range in ranges {
            let first = self.window.value(range.first());
            let last = self.window.value(range.last());
            assert_eq!(first & mask, 0, "ranges start on a sub-prefix");
            assert_eq!(!last & mask, 0, "ranges end on a sub-prefix");
            let mut network = first;
            loop {
                networks.insert(network);
                if network >= last - (step - 1) {
                    break;
                }
                network += step;
            }
        }
        networks
    }

    fn check_everything(&self, allocator: &PrefixAllocator) -> Result<(), TestCaseError> {
        self.check(allocator)?;
        let free = self.networks(allocator.free_ranges());
        prop_assert_eq!(free, self.free().copied().collect::<BTreeSet<_>>());
        let out = self.networks(allocator.out_of_range_ranges());
        prop_assert_eq!(out, props::out_of_range(&self.pool, &self.used));
        Ok(())
    }
}

fn run(spec: SpecGen, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let Some((parsed, pool)) = spec.parse_checked()? else {
        return Ok(());
    };
    let mut allocator = PrefixAllocator::new(parsed);
    let mut model = Model {
        window: spec.window,
        length: spec.length,
        pool,
        used: BTreeSet::new(),
    };
    for op in ops {
        match op {
            Op::AllocateLowest => {
                let expected = model.free().next().copied();
                let got = allocator.allocate_lowest();
                prop_assert_eq!(
                    got,
                    expected
                        .map(|n| model.subnet(n))
                        .ok_or(PrefixAllocError::Exhausted)
                );
                if let Some(n) = expected {
                    model.used.insert(n);
                }
            }
            Op::Allocate(offset) => {
                let n = model.network(offset);
                let subnet = model.subnet(n);
                let expected = if !model.pool.contains(&n) {
                    Err(PrefixAllocError::NotInPool(subnet))
                } else if model.used.contains(&n) {
                    Err(PrefixAllocError::InUse(subnet))
                } else {
                    model.used.insert(n);
                    Ok(())
                };
                prop_assert_eq!(allocator.allocate(subnet), expected);
                prop_assert_eq!(allocator.is_used(subnet), model.used.contains(&n));
            }
            Op::Release(offset) => {
                let n = model.network(offset);
                prop_assert_eq!(allocator.release(model.subnet(n)), model.used.remove(&n));
                prop_assert!(!allocator.is_used(model.subnet(n)));
            }
            Op::ReleaseUsed(i) => {
                if let Some(&n) = model.used.iter().nth(i % model.used.len().max(1)) {
                    prop_assert!(allocator.release(model.subnet(n)));
                    model.used.remove(&n);
                    prop_assert_eq!(allocator.is_free(model.subnet(n)), model.pool.contains(&n));
                }
            }
            Op::MarkUsed(offset) => {
                let n = model.network(offset);
                let subnet = model.subnet(n);
                prop_assert_eq!(allocator.mark_used(subnet), Ok(model.used.insert(n)));
                prop_assert!(allocator.is_used(subnet));
                prop_assert_eq!(allocator.is_out_of_range(subnet), !model.pool.contains(&n));
                prop_assert!(!allocator.is_free(subnet));
            }
            Op::WrongLength(offset) => {
                let (w, shorter) = (model.window, model.length - 1);
                let network = w.address(offset) & !w.host_mask(shorter);
                let wrong = Subnet::new(w.ip(network), shorter).unwrap();
                let error = PrefixAllocError::NotASubPrefix {
                    prefix: wrong,
                    family: w.family,
                    length: model.length,
                };
                prop_assert_eq!(allocator.allocate(wrong), Err(error));
                prop_assert_eq!(allocator.mark_used(wrong), Err(error));
                prop_assert!(!allocator.release(wrong));
                prop_assert!(!allocator.is_used(wrong));
            }
            Op::NextFreeAfter(offset) => {
                let n = model.network(offset);
                let expected = model.free().find(|&&m| m > n).map(|&m| model.subnet(m));
                prop_assert_eq!(allocator.next_free_after(model.subnet(n)), expected);
            }
            Op::Resize(spec) => {
                if let Some((parsed, pool)) = spec.parse_checked()? {
                    if spec.length == model.length {
                        prop_assert_eq!(allocator.resize(parsed), Ok(()));
                        model.pool = pool;
                    } else {
                        prop_assert_eq!(
                            allocator.resize(parsed),
                            Err(PrefixAllocError::LengthChanged {
                                from: model.length,
                                to: spec.length
                            })
                        );
                    }
                    model.check_everything(&allocator)?;
                }
            }
        }
        model.check(&allocator)?;
    }
    model.check_everything(&allocator)
}

/// Strings made of the characters that matter to the parser.
fn spec_like_string() -> impl Strategy<Value = String> {
    props::spec_like_string([
        "(fd00:[0-9a-f]{0,4}::[0-9a-f]{0,4})(/[0-9]{1,3}|-fd00::[0-9a-f]{1,4})?",
        "(10\\.0\\.[0-9]{1,3}\\.[0-9]{1,3})(/[0-9]{1,3})?",
    ])
}

proptest! {
    // PROPTEST_CASES=10000 runs a deeper search.
    #![proptest_config(props::config())]

    #[test]
    fn prefix_allocator_matches_the_model((spec, ops) in scenario()) {
        run(spec, ops)?;
    }

    #[test]
    fn parsing_never_panics(
        prefixes in prop::collection::vec(spec_like_string(), 0..4),
        excluded in prop::collection::vec(spec_like_string(), 0..3),
        gateway in prop::option::of(spec_like_string()),
        length in prop::option::of(prop_oneof![any::<i64>(), 0..=130i64]),
    ) {
        let input = PrefixPoolSpecInput {
            prefixes,
            allocation_prefix_length: length,
            gateway,
            excluded_prefixes: excluded,
        };
        match input.parse() {
            Ok(parsed) => {
                prop_assert!(parsed.allocatable().difference(parsed.prefixes()).is_empty());
                let mut allocator = PrefixAllocator::new(parsed.clone());
                let total = allocator.counts().total;
                prop_assert_eq!(total, parsed.total());
                match allocator.allocate_lowest() {
                    Ok(first) => {
                        prop_assert!(parsed.allocatable().contains(first.network()));
                        prop_assert_eq!(Some(first.network()), parsed.allocatable().first());
                    }
                    Err(error) => {
                        prop_assert_eq!(error, PrefixAllocError::Exhausted);
                        prop_assert_eq!(total, 0);
                    }
                }
            }
            Err(errors) => prop_assert!(!errors.to_string().is_empty()),
        }
    }
}
