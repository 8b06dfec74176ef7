//! [`IntervalMap`]: a mutable set of `u128` values stored as disjoint inclusive intervals. Point
//! insert and remove are O(log n) in the number of intervals, whatever the interval sizes:
//! nothing is ever enumerated.
//!
//! The intervals are keyed by their *last* value and store their first value. Taking the lowest
//! value (the hot path: lowest-first allocation) then only bumps the first value of the lowest
//! entry in place, instead of removing and reinserting it, and every point operation needs at
//! most three lookups.
//!
//! Up to [`FEW`] intervals are kept in a sorted vector, more in a B-tree. A `BTreeMap` of
//! `u128` pairs allocates a whole leaf (11 entries, 368 bytes) for its first interval, and most
//! maps hold one or two: a pool's free values filled from the bottom are one interval, and a
//! pool's used values out of range are none. Over a fleet of small pools that leaf was a fifth of
//! each pool's memory. A vector of a few intervals costs 32 bytes each, and its binary search
//! and short moves are as fast as the tree's descent. Hand-written rather than a crate's: the
//! interval crates (`rangemap`, `range-set-blaze`) keep a B-tree whatever the count, and a small-
//! vector crate would still need the promotion to a tree written here.

use std::collections::BTreeMap;

/// The most intervals kept in the sorted vector; one more moves them into the B-tree.
const FEW: usize = 8;

/// The fewest intervals the B-tree keeps; fewer move back into a vector. Below [`FEW`], so that
/// a map that hovers at the threshold does not move at every change.
const FEW_AGAIN: usize = FEW / 2;

/// No `PartialEq`: two maps of the same intervals may hold them in different forms (between
/// [`FEW_AGAIN`] and [`FEW`] intervals, either); compare [`IntervalMap::iter`] instead.
#[derive(Clone, Debug)]
pub(crate) struct IntervalMap {
    by_last: ByLast,
}

/// `last -> first` for disjoint, never adjacent intervals.
#[derive(Clone, Debug)]
enum ByLast {
    /// Sorted by `last`; at most [`FEW`] entries.
    Few(Vec<(u128, u128)>),
    /// At least [`FEW_AGAIN`] entries.
    Many(BTreeMap<u128, u128>),
}

impl Default for IntervalMap {
    fn default() -> IntervalMap {
        IntervalMap {
            by_last: ByLast::Few(Vec::new()),
        }
    }
}

impl ByLast {
    fn len(&self) -> usize {
        match self {
            ByLast::Few(entries) => entries.len(),
            ByLast::Many(tree) => tree.len(),
        }
    }

    /// The entry `(last, first)` of the lowest interval that ends at or after `value`.
    fn at_or_after(&self, value: u128) -> Option<(u128, u128)> {
        match self {
            ByLast::Few(entries) => {
                let index = entries.partition_point(|&(last, _)| last < value);
                entries.get(index).copied()
            }
            ByLast::Many(tree) => tree.range(value..).next().map(|(&l, &f)| (l, f)),
        }
    }

    fn first(&self) -> Option<(u128, u128)> {
        match self {
            ByLast::Few(entries) => entries.first().copied(),
            ByLast::Many(tree) => tree.first_key_value().map(|(&l, &f)| (l, f)),
        }
    }

    /// [`ByLast::first`], with the interval's first value to change in place. (A tree's
    /// `first_entry` is one descent to the leftmost leaf; a range from 0 would be two.)
    fn first_mut(&mut self) -> Option<(u128, &mut u128)> {
        match self {
            ByLast::Few(entries) => entries.first_mut().map(|(last, first)| (*last, first)),
            ByLast::Many(tree) => {
                let entry = tree.first_entry()?;
                Some((*entry.key(), entry.into_mut()))
            }
        }
    }

    /// [`ByLast::at_or_after`], with the interval's first value to change in place.
    fn at_or_after_mut(&mut self, value: u128) -> Option<(u128, &mut u128)> {
        match self {
            ByLast::Few(entries) => {
                let index = entries.partition_point(|&(last, _)| last < value);
                entries.get_mut(index).map(|(last, first)| (*last, first))
            }
            ByLast::Many(tree) => tree.range_mut(value..).next().map(|(&l, f)| (l, f)),
        }
    }

    /// Removes the interval that ends at `last`; its first value, if there was one.
    fn remove(&mut self, last: u128) -> Option<u128> {
        let first = match self {
            ByLast::Few(entries) => {
                let index = entries.binary_search_by_key(&last, |&(l, _)| l).ok()?;
                Some(entries.remove(index).1)
            }
            ByLast::Many(tree) => tree.remove(&last),
        };
        if let ByLast::Many(tree) = self
            && tree.len() < FEW_AGAIN
        {
            *self = ByLast::Few(tree.iter().map(|(&l, &f)| (l, f)).collect());
        }
        first
    }

    /// Adds the interval `first..=last`, disjoint from and not adjacent to every other.
    fn insert(&mut self, last: u128, first: u128) {
        match self {
            ByLast::Few(entries) if entries.len() < FEW => {
                let index = entries.partition_point(|&(l, _)| l < last);
                entries.insert(index, (last, first));
            }
            ByLast::Few(entries) => {
                let mut tree: BTreeMap<u128, u128> = entries.drain(..).collect();
                tree.insert(last, first);
                *self = ByLast::Many(tree);
            }
            ByLast::Many(tree) => {
                tree.insert(last, first);
            }
        }
    }
}

impl IntervalMap {
    /// From intervals `(first, last)` that are sorted, disjoint and non-adjacent. O(n).
    pub(crate) fn from_sorted(intervals: impl IntoIterator<Item = (u128, u128)>) -> IntervalMap {
        let mut entries: Vec<(u128, u128)> = intervals
            .into_iter()
            .map(|(first, last)| (last, first))
            .collect();
        let by_last = if entries.len() <= FEW {
            entries.shrink_to_fit();
            ByLast::Few(entries)
        } else {
            ByLast::Many(entries.into_iter().collect())
        };
        IntervalMap { by_last }
    }

    /// Number of intervals.
    pub(crate) fn interval_count(&self) -> usize {
        self.by_last.len()
    }

    /// The intervals `(first, last)`, lowest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u128, u128)> + '_ {
        let (few, many) = match &self.by_last {
            ByLast::Few(entries) => (Some(entries.iter().map(|&(l, f)| (f, l))), None),
            ByLast::Many(tree) => (None, Some(tree.iter().map(|(&l, &f)| (f, l)))),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    /// The first interval that ends at or after `value`, as `(first, last)`.
    fn at_or_after(&self, value: u128) -> Option<(u128, u128)> {
        let (last, first) = self.by_last.at_or_after(value)?;
        Some((first, last))
    }

    pub(crate) fn contains(&self, value: u128) -> bool {
        self.at_or_after(value)
            .is_some_and(|(first, _)| first <= value)
    }

    /// The lowest value.
    pub(crate) fn first(&self) -> Option<u128> {
        self.by_last.first().map(|(_, first)| first)
    }

    /// The lowest value that is `>= value`.
    pub(crate) fn first_at_or_after(&self, value: u128) -> Option<u128> {
        self.at_or_after(value).map(|(first, _)| first.max(value))
    }

    /// Removes and returns the lowest value.
    pub(crate) fn pop_first(&mut self) -> Option<u128> {
        let (last, first) = self.by_last.first_mut()?;
        let lowest = *first;
        if lowest == last {
            self.by_last.remove(last);
        } else {
            *first = lowest + 1;
        }
        Some(lowest)
    }

    /// Removes `value`, splitting its interval; false if it was absent.
    pub(crate) fn remove(&mut self, value: u128) -> bool {
        let Some((last, first)) = self.by_last.at_or_after_mut(value) else {
            return false;
        };
        let old_first = *first;
        if old_first > value {
            return false;
        }
        if value == last {
            self.by_last.remove(last);
        } else {
            *first = value + 1;
        }
        if old_first < value {
            self.by_last.insert(value - 1, old_first);
        }
        true
    }

    /// Inserts `value`, merging with the intervals just below and above; false if present.
    pub(crate) fn insert(&mut self, value: u128) -> bool {
        // An interval ending at `value - 1` proves `value` absent: intervals are never adjacent.
        let below_first = value
            .checked_sub(1)
            .and_then(|below| self.by_last.remove(below));
        let first = below_first.unwrap_or(value);
        if let Some((_, above_first)) = self.by_last.at_or_after_mut(value) {
            if *above_first <= value {
                return false;
            }
            if value.checked_add(1) == Some(*above_first) {
                *above_first = first;
                return true;
            }
        }
        self.by_last.insert(value, first);
        true
    }
}
