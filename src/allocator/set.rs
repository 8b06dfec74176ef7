//! [`AddressSet`]: an immutable, normalised set of addresses of one family.
//!
//! Stored as a sorted vector of disjoint, non-adjacent inclusive `u128` intervals, so a set costs
//! memory per range and never per address, and every operation below is a binary search or a
//! linear merge of two such vectors.

use std::fmt;
use std::net::IpAddr;

use super::addr::{AddrRange, Family, interval_len, to_bits};

/// A set of addresses of one family, kept as sorted, merged, inclusive intervals.
///
/// Two sets are equal exactly when they hold the same addresses (and family).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AddressSet {
    family: Family,
    /// Sorted; disjoint; never adjacent (`next.0 > prev.1 + 1`).
    intervals: Vec<(u128, u128)>,
}

/// A range that does not belong to the family of the set it was added to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("mixed address families: {range} is {found} but the set is {expected}")]
pub struct FamilyMismatch {
    pub range: AddrRange,
    pub found: Family,
    pub expected: Family,
}

impl AddressSet {
    /// The empty set of `family`.
    pub fn empty(family: Family) -> AddressSet {
        AddressSet {
            family,
            intervals: Vec::new(),
        }
    }

    /// The set holding every address of `ranges`, which may overlap and come in any order.
    /// O(n log n).
    pub fn from_ranges(
        family: Family,
        ranges: impl IntoIterator<Item = AddrRange>,
    ) -> Result<AddressSet, FamilyMismatch> {
        let mut intervals = Vec::new();
        for range in ranges {
            if range.family() != family {
                return Err(FamilyMismatch {
                    range,
                    found: range.family(),
                    expected: family,
                });
            }
            intervals.push(range.bounds());
        }
        Ok(AddressSet::normalise(family, intervals))
    }

    /// Sorts and merges arbitrary intervals (each with `first <= last`).
    pub(crate) fn normalise(family: Family, intervals: Vec<(u128, u128)>) -> AddressSet {
        AddressSet {
            family,
            intervals: normalise(intervals),
        }
    }

    /// Wraps intervals that are already sorted, disjoint and non-adjacent.
    pub(crate) fn from_normalised(family: Family, intervals: Vec<(u128, u128)>) -> AddressSet {
        debug_assert!(
            intervals
                .windows(2)
                .all(|w| w[0].1 < w[1].0 && w[1].0 - w[0].1 > 1)
        );
        AddressSet { family, intervals }
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// Number of addresses. Exact for every set except the whole IPv6 space, which has 2^128
    /// addresses and reports `u128::MAX` (2^128 - 1); see [`AddressSet::is_whole_space`].
    /// O(ranges).
    pub fn len(&self) -> u128 {
        total_len(&self.intervals)
    }

    pub fn is_empty(&self) -> bool {
        self.intervals.is_empty()
    }

    /// True for the set of every address of its family (`0.0.0.0/0`, `::/0`).
    pub fn is_whole_space(&self) -> bool {
        self.intervals == [(0, self.family.max_value())]
    }

    /// Number of maximal ranges.
    pub fn range_count(&self) -> usize {
        self.intervals.len()
    }

    /// The maximal ranges, lowest first.
    pub fn ranges(&self) -> impl ExactSizeIterator<Item = AddrRange> + '_ {
        self.intervals
            .iter()
            .map(|&(first, last)| AddrRange::from_bits(self.family, first, last))
    }

    /// The lowest address.
    pub fn first(&self) -> Option<IpAddr> {
        self.ranges().next().map(|range| range.first())
    }

    /// Whether `ip` is in the set (false for the other family). O(log ranges).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (family, value) = to_bits(ip);
        family == self.family && self.contains_bits(value)
    }

    pub(crate) fn contains_bits(&self, value: u128) -> bool {
        contains(&self.intervals, value)
    }

    /// Whether every address of `range` is in the set. O(log ranges).
    pub fn contains_range(&self, range: AddrRange) -> bool {
        let (first, last) = range.bounds();
        self.first_interval_reaching(range)
            .is_some_and(|(start, end)| start <= first && last <= end)
    }

    /// Whether the set shares an address with `range`. O(log ranges).
    pub fn meets(&self, range: AddrRange) -> bool {
        let (_, last) = range.bounds();
        self.first_interval_reaching(range)
            .is_some_and(|(start, _)| start <= last)
    }

    /// The lowest interval that ends at or after the start of `range` (of its family).
    fn first_interval_reaching(&self, range: AddrRange) -> Option<(u128, u128)> {
        let (first, _) = range.bounds();
        let index = self.intervals.partition_point(|&(_, end)| end < first);
        (range.family() == self.family)
            .then(|| self.intervals.get(index).copied())
            .flatten()
    }

    /// Addresses in both sets (empty if the families differ). O(n + m).
    pub fn intersection(&self, other: &AddressSet) -> AddressSet {
        if self.family != other.family {
            return AddressSet::empty(self.family);
        }
        AddressSet::from_normalised(self.family, intersect(&self.intervals, &other.intervals))
    }

    /// Whether the sets share an address. O(n + m).
    pub fn overlaps(&self, other: &AddressSet) -> bool {
        self.first_overlap(other).is_some()
    }

    /// The lowest maximal range both sets share, to name in a conflict message. O(n + m).
    pub fn first_overlap(&self, other: &AddressSet) -> Option<AddrRange> {
        self.intersection(other).ranges().next()
    }

    /// Addresses in `self` but not in `other`. O(n + m).
    pub fn difference(&self, other: &AddressSet) -> AddressSet {
        if self.family != other.family {
            return self.clone();
        }
        AddressSet::from_normalised(self.family, subtract(&self.intervals, &other.intervals))
    }

    /// Addresses in either set. O(n + m).
    pub fn union(&self, other: &AddressSet) -> Result<AddressSet, FamilyMismatch> {
        if self.family != other.family {
            let range = other.ranges().next();
            return match range {
                None => Ok(self.clone()),
                Some(range) => Err(FamilyMismatch {
                    range,
                    found: other.family,
                    expected: self.family,
                }),
            };
        }
        let mut all = Vec::with_capacity(self.intervals.len() + other.intervals.len());
        all.extend_from_slice(&self.intervals);
        all.extend_from_slice(&other.intervals);
        Ok(AddressSet::normalise(self.family, all))
    }
}

/// Anything that is a normalised list of inclusive `u128` intervals (sorted, disjoint, never
/// adjacent): an [`AddressSet`], or the block indices of a prefix pool. The allocator core works on
/// either through this.
pub(crate) trait Intervals {
    fn intervals(&self) -> &[(u128, u128)];
}

impl Intervals for AddressSet {
    fn intervals(&self) -> &[(u128, u128)] {
        &self.intervals
    }
}

impl Intervals for Vec<(u128, u128)> {
    fn intervals(&self) -> &[(u128, u128)] {
        self
    }
}

/// Sorts and merges arbitrary intervals (each with `first <= last`) into normal form.
pub(crate) fn normalise(mut intervals: Vec<(u128, u128)>) -> Vec<(u128, u128)> {
    intervals.sort_unstable();
    let mut merged: Vec<(u128, u128)> = Vec::with_capacity(intervals.len());
    for (first, last) in intervals {
        match merged.last_mut() {
            Some(prev) if first <= prev.1.saturating_add(1) => prev.1 = prev.1.max(last),
            _ => merged.push((first, last)),
        }
    }
    merged
}

/// Number of values in normalised intervals, saturating at `u128::MAX` (only the whole `u128`
/// space, 2^128 values, does not fit).
pub(crate) fn total_len(intervals: &[(u128, u128)]) -> u128 {
    intervals
        .iter()
        .map(|&(first, last)| interval_len(first, last))
        .fold(0, u128::saturating_add)
}

/// Whether normalised `intervals` hold `value`. O(log n).
pub(crate) fn contains(intervals: &[(u128, u128)], value: u128) -> bool {
    let index = intervals.partition_point(|&(_, last)| last < value);
    intervals
        .get(index)
        .is_some_and(|&(first, _)| first <= value)
}

/// `a ∩ b` for normalised interval lists; the result is normalised. O(n + m).
pub(crate) fn intersect(a: &[(u128, u128)], b: &[(u128, u128)]) -> Vec<(u128, u128)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
        let first = x.0.max(y.0);
        let last = x.1.min(y.1);
        if first <= last {
            out.push((first, last));
        }
        if x.1 < y.1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// `a - b` for sorted, disjoint interval lists; the result is sorted, disjoint, non-adjacent
/// whenever `a` is.
pub(crate) fn subtract(a: &[(u128, u128)], b: &[(u128, u128)]) -> Vec<(u128, u128)> {
    let mut out = Vec::with_capacity(a.len());
    let mut j = 0;
    for &(first, last) in a {
        let mut start = first;
        while j < b.len() && b[j].1 < start {
            j += 1;
        }
        let mut k = j;
        let mut remains = true;
        while let Some(&(cut_first, cut_last)) = b.get(k) {
            if cut_first > last {
                break;
            }
            if cut_first > start {
                out.push((start, cut_first - 1));
            }
            if cut_last >= last {
                remains = false;
                break;
            }
            start = cut_last + 1;
            k += 1;
        }
        if remains {
            out.push((start, last));
        }
    }
    out
}

impl fmt::Display for AddressSet {
    /// Comma-separated canonical ranges, e.g. `10.0.0.1-10.0.0.5, 10.0.0.7`; `(empty)` if empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(empty)");
        }
        for (index, range) in self.ranges().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}
