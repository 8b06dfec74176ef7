//! [`Allocator`]: the per-pool free-space index.
//!
//! Used addresses are never stored one by one inside the pool: the allocator keeps the *free*
//! space as disjoint intervals in a B-tree, and "used in the pool" is "in the pool set and not
//! free". A pool that fills from the bottom therefore costs O(1) memory however many addresses
//! are used; scattered use costs one B-tree entry per hole. Used addresses outside the pool
//! (out of range) are kept as intervals per family.

use std::net::IpAddr;

use super::addr::{AddrRange, Family, from_bits, interval_len, to_bits};
use super::counts::Counts;
use super::error::AllocError;
use super::intervals::IntervalMap;
use super::set::{AddressSet, subtract};

/// Allocation state of one pool. See the [module docs](super) for the cost of each operation.
#[derive(Clone, Debug)]
pub struct Allocator {
    pool: AddressSet,
    /// `pool.len()`, cached.
    total: u128,
    /// Subset of `pool`.
    free: IntervalMap,
    /// Exact, maintained incrementally: `|pool| - |free|` without the saturation of `total`.
    used_in_pool: u128,
    out_of_range: OutOfRange,
}

impl Allocator {
    /// An allocator with every address of `pool` free. O(ranges).
    pub fn new(pool: AddressSet) -> Allocator {
        Allocator {
            total: pool.len(),
            free: IntervalMap::from_sorted(pool.intervals().iter().copied()),
            used_in_pool: 0,
            out_of_range: OutOfRange::default(),
            pool,
        }
    }

    /// An allocator with `used` marked as in use (see [`Allocator::mark_used`]), for start-up.
    pub fn with_used(pool: AddressSet, used: impl IntoIterator<Item = IpAddr>) -> Allocator {
        let mut allocator = Allocator::new(pool);
        for ip in used {
            allocator.mark_used(ip);
        }
        allocator
    }

    pub fn pool(&self) -> &AddressSet {
        &self.pool
    }

    pub fn family(&self) -> Family {
        self.pool.family()
    }

    /// Current counts. O(1).
    pub fn counts(&self) -> Counts {
        Counts {
            total: self.total,
            used: self.used_in_pool.saturating_add(self.out_of_range.count),
            free: self.total.saturating_sub(self.used_in_pool),
            out_of_range: self.out_of_range.count,
        }
    }

    /// The address [`Allocator::allocate_lowest`] would return, without taking it.
    pub fn lowest_free(&self) -> Option<IpAddr> {
        self.free.first().map(|value| self.ip(value))
    }

    /// The lowest free address strictly above `ip` (`None` for the other family), to skip an
    /// address that turned out to be taken elsewhere without marking it.
    pub fn next_free_after(&self, ip: IpAddr) -> Option<IpAddr> {
        let (family, value) = to_bits(ip);
        if family != self.family() {
            return None;
        }
        let next = value.checked_add(1)?;
        self.free
            .first_at_or_after(next)
            .map(|value| self.ip(value))
    }

    /// Takes the lowest free address (the reference's deterministic order).
    pub fn allocate_lowest(&mut self) -> Result<IpAddr, AllocError> {
        let value = self.free.pop_first().ok_or(AllocError::Exhausted)?;
        self.used_in_pool += 1;
        Ok(self.ip(value))
    }

    /// Takes `ip`, which must be a free address of the pool.
    pub fn allocate(&mut self, ip: IpAddr) -> Result<(), AllocError> {
        let value = self.pool_value(ip).ok_or(AllocError::NotInPool(ip))?;
        if !self.free.remove(value) {
            return Err(AllocError::InUse(ip));
        }
        self.used_in_pool += 1;
        Ok(())
    }

    /// Records that `ip` is in use, wherever it is: a pool address stops being free, any other
    /// address (another family included) counts as out of range. Idempotent; returns whether
    /// `ip` was not known to be in use before.
    pub fn mark_used(&mut self, ip: IpAddr) -> bool {
        match self.pool_value(ip) {
            Some(value) => {
                let newly = self.free.remove(value);
                self.used_in_pool += u128::from(newly);
                newly
            }
            None => self.out_of_range.insert(ip),
        }
    }

    /// Gives `ip` back. A pool address becomes free again (merging with free neighbours); an
    /// out-of-range address is simply forgotten. Returns whether `ip` was in use.
    pub fn release(&mut self, ip: IpAddr) -> bool {
        match self.pool_value(ip) {
            Some(value) => {
                let released = self.free.insert(value);
                self.used_in_pool -= u128::from(released);
                released
            }
            None => self.out_of_range.remove(ip),
        }
    }

    /// Whether `ip` is in use (in the pool or out of range).
    pub fn is_used(&self, ip: IpAddr) -> bool {
        match self.pool_value(ip) {
            Some(value) => !self.free.contains(value),
            None => self.out_of_range.contains(ip),
        }
    }

    /// Whether `ip` is a free address of the pool.
    pub fn is_free(&self, ip: IpAddr) -> bool {
        self.pool_value(ip)
            .is_some_and(|value| self.free.contains(value))
    }

    /// Whether `ip` is in use but not in the pool.
    pub fn is_out_of_range(&self, ip: IpAddr) -> bool {
        self.out_of_range.contains(ip)
    }

    /// The free ranges, lowest first.
    pub fn free_ranges(&self) -> impl Iterator<Item = AddrRange> + '_ {
        let family = self.family();
        self.free
            .iter()
            .map(move |(first, last)| AddrRange::from_bits(family, first, last))
    }

    /// The used addresses outside the pool, as ranges: IPv4 first, then IPv6, each lowest first.
    pub fn out_of_range_ranges(&self) -> impl Iterator<Item = AddrRange> + '_ {
        self.out_of_range.ranges()
    }

    /// Switches to a new pool set (grown, shrunk, or of the other family). Every used address
    /// stays used: those outside `pool` become out of range and are never handed out; those
    /// inside it (out-of-range ones included) count as used pool addresses.
    ///
    /// O((R + F + O) log) for R pool ranges, F free ranges and O out-of-range ranges.
    pub fn resize(&mut self, pool: AddressSet) {
        let old_family = self.family();
        let used = if pool.family() == old_family {
            self.used_of_old_family()
        } else {
            let old_used = self.used_of_old_family();
            self.out_of_range.replace(old_family, old_used.intervals());
            self.out_of_range.set(pool.family())
        };
        self.free = IntervalMap::from_sorted(pool.difference(&used).intervals().iter().copied());
        self.used_in_pool = sum_lengths(used.intersection(&pool).intervals());
        self.out_of_range
            .replace(pool.family(), used.difference(&pool).intervals());
        self.total = pool.len();
        self.pool = pool;
    }

    /// Every used address of the pool's family: the pool minus its free space, plus the
    /// out-of-range addresses of that family.
    fn used_of_old_family(&self) -> AddressSet {
        let free: Vec<_> = self.free.iter().collect();
        let mut used = subtract(self.pool.intervals(), &free);
        used.extend(self.out_of_range.map(self.family()).iter());
        AddressSet::normalise(self.family(), used)
    }

    /// Number of B-tree entries held (free ranges plus out-of-range ranges), for memory estimates.
    pub fn stored_ranges(&self) -> usize {
        self.free.interval_count() + self.out_of_range.interval_count()
    }

    /// `ip` as an integer if it is in the pool.
    fn pool_value(&self, ip: IpAddr) -> Option<u128> {
        let (family, value) = to_bits(ip);
        (family == self.family() && self.pool.contains_bits(value)).then_some(value)
    }

    fn ip(&self, value: u128) -> IpAddr {
        from_bits(self.family(), value)
    }
}

/// Used addresses outside the pool, one interval map per family.
#[derive(Clone, Debug, Default)]
struct OutOfRange {
    v4: IntervalMap,
    v6: IntervalMap,
    count: u128,
}

impl OutOfRange {
    fn map(&self, family: Family) -> &IntervalMap {
        match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        }
    }

    fn map_mut(&mut self, family: Family) -> &mut IntervalMap {
        match family {
            Family::V4 => &mut self.v4,
            Family::V6 => &mut self.v6,
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let (family, value) = to_bits(ip);
        self.map(family).contains(value)
    }

    fn set(&self, family: Family) -> AddressSet {
        AddressSet::from_normalised(family, self.map(family).iter().collect())
    }

    fn insert(&mut self, ip: IpAddr) -> bool {
        let (family, value) = to_bits(ip);
        let inserted = self.map_mut(family).insert(value);
        self.count += u128::from(inserted);
        inserted
    }

    fn remove(&mut self, ip: IpAddr) -> bool {
        let (family, value) = to_bits(ip);
        let removed = self.map_mut(family).remove(value);
        self.count -= u128::from(removed);
        removed
    }

    /// Replaces the intervals of `family` (sorted, disjoint, non-adjacent) and recounts.
    fn replace(&mut self, family: Family, intervals: &[(u128, u128)]) {
        *self.map_mut(family) = IntervalMap::from_sorted(intervals.iter().copied());
        self.count = [Family::V4, Family::V6]
            .into_iter()
            .map(|family| sum_lengths(&self.map(family).iter().collect::<Vec<_>>()))
            .fold(0, u128::saturating_add);
    }

    fn interval_count(&self) -> usize {
        self.v4.interval_count() + self.v6.interval_count()
    }

    fn ranges(&self) -> impl Iterator<Item = AddrRange> + '_ {
        let v4 = self
            .v4
            .iter()
            .map(|(first, last)| AddrRange::from_bits(Family::V4, first, last));
        let v6 = self
            .v6
            .iter()
            .map(|(first, last)| AddrRange::from_bits(Family::V6, first, last));
        v4.chain(v6)
    }
}

fn sum_lengths(intervals: &[(u128, u128)]) -> u128 {
    intervals
        .iter()
        .map(|&(first, last)| interval_len(first, last))
        .fold(0, u128::saturating_add)
}
