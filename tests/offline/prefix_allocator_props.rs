//! Property tests: the prefix allocator against a naive model that enumerates every sub-prefix.
//!
//! Pools live in a 256-address window (a /120 at the bottom, in the middle and at the top of the
//! IPv6 space, so that shift and overflow edges are exercised) with allocation lengths 121 to
//! 128, at most 128 sub-prefixes: a `BTreeSet` of sub-prefix networks is cheap there. The model
//! implements the reference's rules directly: a sub-prefix is allocatable if it lies in a
//! `prefixes` entry and no excluded address falls inside it; first fit; out-of-range tracking.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};

use inpool::allocator::{
    Field, PrefixAllocError, PrefixAllocator, PrefixPoolSpecInput, SpecError, Subnet,
};
use proptest::prelude::*;

use crate::props::{self, OffsetEntry};

const WINDOW: u32 = 256;
const WINDOW_LENGTH: u8 = 120;

fn window() -> impl Strategy<Value = u128> {
    prop_oneof![
        Just(0),
        Just(0x2001_0db8_0000_0000_0000_0000_0000_0000),
        Just(u128::MAX - u128::from(WINDOW - 1)),
    ]
}

/// Offsets past the top of the space wrap around to its bottom.
fn address(base: u128, offset: u32) -> u128 {
    base.wrapping_add(u128::from(offset))
}

fn text(value: u128) -> String {
    Ipv6Addr::from(value).to_string()
}

fn host_mask(length: u8) -> u128 {
    (1u128 << (128 - u32::from(length))) - 1
}

#[derive(Clone, Debug)]
struct SpecGen {
    base: u128,
    length: u8,
    /// Each an offset (aligned down to its length) and a prefix length of 120..=128: some are
    /// longer than `length` and must be refused.
    prefixes: Vec<(u32, u8)>,
    /// `excludedPrefixes` entries.
    excluded: Vec<OffsetEntry>,
}

fn spec_in(base: u128, length: impl Strategy<Value = u8>) -> impl Strategy<Value = SpecGen> {
    (
        length,
        prop::collection::vec((0..WINDOW, WINDOW_LENGTH..=128u8), 1..4),
        prop::collection::vec(props::offset_entry(WINDOW, 5), 0..4),
    )
        .prop_map(move |(length, prefixes, excluded)| SpecGen {
            base,
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
                    let mask = (1u32 << (128 - u32::from(p))) - 1;
                    (offset & !mask, p)
                })
                .collect(),
            excluded,
        })
}

impl SpecGen {
    fn input(&self) -> PrefixPoolSpecInput {
        PrefixPoolSpecInput {
            prefixes: self
                .prefixes
                .iter()
                .map(|&(offset, p)| format!("{}/{p}", text(address(self.base, offset))))
                .collect(),
            allocation_prefix_length: Some(i64::from(self.length)),
            gateway: Some(text(address(self.base, 1))),
            excluded_prefixes: self
                .excluded
                .iter()
                .map(|e| e.text(128, |offset| text(address(self.base, offset))))
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
        let block = host_mask(self.length) as u32 + 1;
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
            let size = 1u32 << (128 - u32::from(p));
            for start in (offset..offset + size).step_by(block as usize) {
                if !(start..start + block).any(|a| excluded.contains(&a)) {
                    pool.insert(address(self.base, start));
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
                let covered: u128 = parsed.allocatable().len();
                prop_assert_eq!(covered, model.len() as u128 * (host_mask(self.length) + 1));
                for &network in &model {
                    prop_assert!(parsed.allocatable().contains(IpAddr::V6(network.into())));
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

fn ops(base: u128, length: u8) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => Just(Op::AllocateLowest),
        3 => offset().prop_map(Op::Allocate),
        2 => offset().prop_map(Op::Release),
        4 => any::<usize>().prop_map(Op::ReleaseUsed),
        3 => offset().prop_map(Op::MarkUsed),
        1 => offset().prop_map(Op::WrongLength),
        1 => offset().prop_map(Op::NextFreeAfter),
        // Mostly the same length; sometimes another, which must be refused.
        1 => spec_in(base, prop_oneof![6 => Just(length), 1 => 121..=128u8]).prop_map(Op::Resize),
    ];
    prop::collection::vec(op, 1..80)
}

fn scenario() -> impl Strategy<Value = (SpecGen, Vec<Op>)> {
    (window(), 121..=128u8)
        .prop_flat_map(|(base, length)| (spec_in(base, Just(length)), ops(base, length)))
}

struct Model {
    base: u128,
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
        address(self.base, offset) & !host_mask(self.length)
    }

    fn subnet(&self, network: u128) -> Subnet {
        Subnet::new(IpAddr::V6(network.into()), self.length).expect("aligned")
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
        let step = host_mask(self.length) + 1;
        let mut networks = BTreeSet::new();
        for range in ranges {
            let (IpAddr::V6(first), IpAddr::V6(last)) = (range.first(), range.last()) else {
                panic!("an IPv4 range in a prefix pool");
            };
            let (first, last) = (u128::from(first), u128::from(last));
            assert_eq!(
                first & host_mask(self.length),
                0,
                "ranges start on a sub-prefix"
            );
            assert_eq!(
                !last & host_mask(self.length),
                0,
                "ranges end on a sub-prefix"
            );
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
        base: spec.base,
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
                let shorter = model.length - 1;
                let network = address(model.base, offset) & !host_mask(shorter);
                let wrong = Subnet::new(IpAddr::V6(network.into()), shorter).unwrap();
                let error = PrefixAllocError::NotASubPrefix {
                    prefix: wrong,
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
