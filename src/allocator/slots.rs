//! [`Slots`]: the allocation core shared by IP pools and prefix pools.
//!
//! It knows nothing of addresses: it hands out `u128` *values* of a pool given as normalised
//! intervals. For an IP pool a value is an address; for a prefix pool it is a block index, the
//! number of an aligned sub-prefix (`address >> (128 - allocationPrefixLength)`). Both therefore
//! get the same lowest-first allocation, out-of-range bookkeeping and exact counts.
//!
//! Used values inside the pool are never stored one by one: the core keeps the *free* values as
//! disjoint intervals ([`IntervalMap`]), and "used in the pool" is "in the pool and not free". A
//! pool that fills from the bottom costs O(1) memory however many values are used; scattered use
//! costs one interval per hole. Used values outside the pool (out of range) are kept as intervals.

use super::counts::Counts;
use super::intervals::IntervalMap;
use super::set::{Intervals, contains, intersect, subtract, total_len};

/// Why a specific value cannot be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    NotInPool,
    InUse,
}

/// Allocation state over the values of `pool`. Each caller maps its own key (address, sub-prefix)
/// to a value before calling in.
#[derive(Clone, Debug)]
pub(crate) struct Slots<P> {
    pool: P,
    /// `|pool|`, cached (saturating only for the whole `u128` space).
    total: u128,
    /// Subset of `pool`.
    free: IntervalMap,
    /// Exact, maintained incrementally: `|pool| - |free|` without the saturation of `total`.
    used_in_pool: u128,
    /// Used values outside `pool`.
    out_of_range: Tally,
}

impl<P: Intervals> Slots<P> {
    /// Every value of `pool` free. O(intervals).
    pub(crate) fn new(pool: P) -> Slots<P> {
        Slots::with_used(pool, &[])
    }

    /// `pool` with the normalised intervals `used` in use: those outside `pool` are out of range.
    /// O(R + U) for R pool intervals and U used intervals.
    pub(crate) fn with_used(pool: P, used: &[(u128, u128)]) -> Slots<P> {
        let intervals = pool.intervals();
        Slots {
            total: total_len(intervals),
            free: IntervalMap::from_sorted(subtract(intervals, used)),
            used_in_pool: total_len(&intersect(used, intervals)),
            out_of_range: Tally::from_sorted(subtract(used, intervals)),
            pool,
        }
    }

    pub(crate) fn pool(&self) -> &P {
        &self.pool
    }

    /// Counts with `extra_out_of_range` more used values that the caller keeps outside the core
    /// (the IP allocator's addresses of the other family). O(1).
    pub(crate) fn counts(&self, extra_out_of_range: u128) -> Counts {
        let out_of_range = self.out_of_range.count.saturating_add(extra_out_of_range);
        Counts {
            total: self.total,
            used: self.used_in_pool.saturating_add(out_of_range),
            free: self.total.saturating_sub(self.used_in_pool),
            out_of_range,
        }
    }

    pub(crate) fn in_pool(&self, value: u128) -> bool {
        contains(self.pool.intervals(), value)
    }

    pub(crate) fn lowest_free(&self) -> Option<u128> {
        self.free.first()
    }

    /// The lowest free value that is `>= value`.
    pub(crate) fn free_at_or_after(&self, value: u128) -> Option<u128> {
        self.free.first_at_or_after(value)
    }

    pub(crate) fn allocate_lowest(&mut self) -> Option<u128> {
        let value = self.free.pop_first()?;
        self.used_in_pool += 1;
        Some(value)
    }

    pub(crate) fn allocate(&mut self, value: u128) -> Result<(), Refusal> {
        if !self.in_pool(value) {
            return Err(Refusal::NotInPool);
        }
        if !self.free.remove(value) {
            return Err(Refusal::InUse);
        }
        self.used_in_pool += 1;
        Ok(())
    }

    /// Records `value` as used: a pool value stops being free, any other counts as out of range.
    /// Idempotent; whether it was not known to be used before.
    pub(crate) fn mark_used(&mut self, value: u128) -> bool {
        if self.in_pool(value) {
            let newly = self.free.remove(value);
            self.used_in_pool += u128::from(newly);
            newly
        } else {
            self.out_of_range.insert(value)
        }
    }

    /// Records every pool value in `[first, last]` as used; values outside the pool are not
    /// recorded (the caller marks a block that other pools hold, of which only the part inside
    /// this pool matters). O(R + F + O): it is rebuilt, which is fine for what calls it (a block
    /// larger than this pool's unit, held through an overlapping pool of another unit size).
    pub(crate) fn mark_interval_used(&mut self, first: u128, last: u128)
    where
        P: Clone,
    {
        let inside = intersect(&[(first, last)], self.pool.intervals());
        if inside.is_empty() {
            return;
        }
        let mut used = self.used();
        used.extend(inside);
        *self = Slots::with_used(self.pool.clone(), &super::set::normalise(used));
    }

    /// Frees a pool value (merging with free neighbours) or forgets an out-of-range one; whether
    /// it was used.
    pub(crate) fn release(&mut self, value: u128) -> bool {
        if self.in_pool(value) {
            let released = self.free.insert(value);
            self.used_in_pool -= u128::from(released);
            released
        } else {
            self.out_of_range.remove(value)
        }
    }

    pub(crate) fn is_used(&self, value: u128) -> bool {
        if self.in_pool(value) {
            !self.free.contains(value)
        } else {
            self.out_of_range.contains(value)
        }
    }

    pub(crate) fn is_free(&self, value: u128) -> bool {
        self.free.contains(value)
    }

    pub(crate) fn is_out_of_range(&self, value: u128) -> bool {
        self.out_of_range.contains(value)
    }

    /// Free intervals, lowest first.
    pub(crate) fn free_intervals(&self) -> impl Iterator<Item = (u128, u128)> + '_ {
        self.free.iter()
    }

    /// Out-of-range intervals, lowest first.
    pub(crate) fn out_of_range_intervals(&self) -> impl Iterator<Item = (u128, u128)> + '_ {
        self.out_of_range.iter()
    }

    /// Every used value, in the pool or out of range, normalised. O(R + F + O).
    pub(crate) fn used(&self) -> Vec<(u128, u128)> {
        let free: Vec<_> = self.free.iter().collect();
        let mut used = subtract(self.pool.intervals(), &free);
        used.extend(self.out_of_range.iter());
        super::set::normalise(used)
    }

    /// Switches to `pool`, keeping every used value used (out of range if outside `pool`).
    /// O((R + F + O) log(R + F + O)).
    pub(crate) fn resize(&mut self, pool: P) {
        let used = self.used();
        *self = Slots::with_used(pool, &used);
    }

    /// Intervals held, for memory estimates.
    pub(crate) fn stored_intervals(&self) -> usize {
        self.free.interval_count() + self.out_of_range.interval_count()
    }
}

/// A set of values with its exact size (saturating at `u128::MAX`), kept up to date on each
/// insert and remove.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tally {
    map: IntervalMap,
    pub(crate) count: u128,
}

impl Tally {
    /// From normalised intervals. O(n).
    pub(crate) fn from_sorted(intervals: Vec<(u128, u128)>) -> Tally {
        Tally {
            count: total_len(&intervals),
            map: IntervalMap::from_sorted(intervals),
        }
    }

    pub(crate) fn insert(&mut self, value: u128) -> bool {
        let inserted = self.map.insert(value);
        self.count = self.count.saturating_add(u128::from(inserted));
        inserted
    }

    pub(crate) fn remove(&mut self, value: u128) -> bool {
        let removed = self.map.remove(value);
        self.count -= u128::from(removed);
        removed
    }

    pub(crate) fn contains(&self, value: u128) -> bool {
        self.map.contains(value)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u128, u128)> + '_ {
        self.map.iter()
    }

    pub(crate) fn interval_count(&self) -> usize {
        self.map.interval_count()
    }
}
