//! What the property tests of the two allocators share.

use std::collections::BTreeSet;

use inpool::allocator::Counts;
use proptest::prelude::*;

/// 256 cases, or `PROPTEST_CASES` for a deeper search; no regression files next to the
/// sources: a failure prints its minimal input instead.
pub fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Strings made of the characters that matter to the parser, strings shaped like the entries
/// (`entries`, regular expressions), and any string at all.
pub fn spec_like_string(entries: [&'static str; 2]) -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9a-fA-F:./%-]{0,45}",
        entries[0],
        entries[1],
        any::<String>(),
    ]
}

/// One address entry of a spec (an `addresses` or excluded entry), as offsets in a test window:
/// one address, a range, or an address (host bits possibly set) and the number of host bits of
/// its CIDR.
#[derive(Clone, Copy, Debug)]
pub enum OffsetEntry {
    Single(u32),
    Range(u32, u32),
    Cidr(u32, u32),
}

/// Entries of offsets below `window`, CIDRs of up to `max_host_bits` host bits.
pub fn offset_entry(window: u32, max_host_bits: u32) -> impl Strategy<Value = OffsetEntry> {
    prop_oneof![
        (0..window).prop_map(OffsetEntry::Single),
        (0..window, 0..window).prop_map(|(a, b)| OffsetEntry::Range(a.min(b), a.max(b))),
        (0..window, 0..=max_host_bits).prop_map(|(a, host_bits)| OffsetEntry::Cidr(a, host_bits)),
    ]
}

impl OffsetEntry {
    /// The entry as a spec writes it, each offset as `address` renders it, in a family of
    /// `bits`-bit addresses.
    pub fn text(self, bits: u32, address: impl Fn(u32) -> String) -> String {
        match self {
            OffsetEntry::Single(a) => address(a),
            OffsetEntry::Range(a, b) => format!("{}-{}", address(a), address(b)),
            OffsetEntry::Cidr(a, host_bits) => format!("{}/{}", address(a), bits - host_bits),
        }
    }

    /// The first and the last offset the entry covers: a CIDR's whole block.
    pub fn offsets(self) -> (u32, u32) {
        match self {
            OffsetEntry::Single(a) => (a, a),
            OffsetEntry::Range(a, b) => (a, b),
            OffsetEntry::Cidr(a, host_bits) => {
                let mask = (1u32 << host_bits) - 1;
                (a & !mask, a | mask)
            }
        }
    }
}

/// Checks an allocator's `counts` against its model: the members of its pool (addresses or
/// sub-prefixes) and those in use, some of them perhaps outside the pool.
pub fn check_counts<T: Ord>(
    counts: Counts,
    pool: &BTreeSet<T>,
    used: &BTreeSet<T>,
) -> Result<(), TestCaseError> {
    let used_in_pool = used.iter().filter(|a| pool.contains(a)).count() as u128;
    prop_assert_eq!(counts.total, pool.len() as u128);
    prop_assert_eq!(counts.used, used.len() as u128);
    prop_assert_eq!(counts.out_of_range, used.len() as u128 - used_in_pool);
    prop_assert_eq!(counts.free, pool.len() as u128 - used_in_pool);
    Ok(())
}

/// The members of `used` outside `pool`: what an allocator must report out of range.
pub fn out_of_range<T: Ord + Copy>(pool: &BTreeSet<T>, used: &BTreeSet<T>) -> BTreeSet<T> {
    used.iter().filter(|a| !pool.contains(a)).copied().collect()
}
