//! [`IntervalMap`]: a mutable set of `u128` values stored as disjoint inclusive intervals in a
//! B-tree. Point insert and remove are O(log n) in the number of intervals, whatever the interval
//! sizes: nothing is ever enumerated.
//!
//! The tree is keyed by each interval's *last* value and stores its first value. Taking the
//! lowest value (the hot path: lowest-first allocation) then only bumps the first value of the
//! leftmost entry in place, instead of removing and reinserting it, and every point operation
//! needs at most three tree descents.

use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct IntervalMap {
    /// last -> first; disjoint and never adjacent.
    by_last: BTreeMap<u128, u128>,
}

impl IntervalMap {
    /// From intervals `(first, last)` that are sorted, disjoint and non-adjacent. O(n).
    pub(crate) fn from_sorted(intervals: impl IntoIterator<Item = (u128, u128)>) -> IntervalMap {
        IntervalMap {
            by_last: intervals
                .into_iter()
                .map(|(first, last)| (last, first))
                .collect(),
        }
    }

    /// Number of intervals.
    pub(crate) fn interval_count(&self) -> usize {
        self.by_last.len()
    }

    /// The intervals `(first, last)`, lowest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u128, u128)> + '_ {
        self.by_last.iter().map(|(&last, &first)| (first, last))
    }

    /// The first interval that ends at or after `value`.
    fn at_or_after(&self, value: u128) -> Option<(u128, u128)> {
        let (&last, &first) = self.by_last.range(value..).next()?;
        Some((first, last))
    }

    pub(crate) fn contains(&self, value: u128) -> bool {
        self.at_or_after(value)
            .is_some_and(|(first, _)| first <= value)
    }

    /// The lowest value.
    pub(crate) fn first(&self) -> Option<u128> {
        self.by_last.first_key_value().map(|(_, &first)| first)
    }

    /// The lowest value that is `>= value`.
    pub(crate) fn first_at_or_after(&self, value: u128) -> Option<u128> {
        self.at_or_after(value).map(|(first, _)| first.max(value))
    }

    /// Removes and returns the lowest value.
    pub(crate) fn pop_first(&mut self) -> Option<u128> {
        let mut entry = self.by_last.first_entry()?;
        let first = *entry.get();
        if first == *entry.key() {
            entry.remove();
        } else {
            *entry.get_mut() = first + 1;
        }
        Some(first)
    }

    /// Removes `value`, splitting its interval; false if it was absent.
    pub(crate) fn remove(&mut self, value: u128) -> bool {
        let Some((&last, first)) = self.by_last.range_mut(value..).next() else {
            return false;
        };
        let old_first = *first;
        if old_first > value {
            return false;
        }
        if value == last {
            self.by_last.remove(&last);
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
            .and_then(|below| self.by_last.remove(&below));
        let first = below_first.unwrap_or(value);
        if let Some((_, above_first)) = self.by_last.range_mut(value..).next() {
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
