//! [`Allocator`]: the per-pool free-space index of an IP pool.
//!
//! The bookkeeping lives in [`Slots`] (shared with prefix pools), over the addresses of the
//! pool's family as integers. Used addresses of the *other* family (a pool switched family, or
//! an address recorded from elsewhere) are always out of range and kept here, beside the core.

use std::net::IpAddr;

use super::addr::{AddrRange, Family, Subnet, from_bits, to_bits};
use super::counts::Counts;
use super::error::AllocError;
use super::set::AddressSet;
use super::slots::{Refusal, Slots, Tally};

/// Allocation state of one pool. See the [module docs](super) for the cost of each operation.
#[derive(Clone, Debug)]
pub struct Allocator {
    /// The pool's family: addresses, in use or not.
    slots: Slots<AddressSet>,
    /// Used addresses of the other family: all out of range.
    other_family: Tally,
    /// Where [`Allocator::allocate_next`] looks, in turn (a pool's subnets in the order written);
    /// empty: the whole pool, lowest first.
    order: Vec<(u128, u128)>,
}

impl Allocator {
    /// An allocator with every address of `pool` free. O(ranges).
    pub fn new(pool: AddressSet) -> Allocator {
        Allocator {
            slots: Slots::new(pool),
            other_family: Tally::default(),
            order: Vec::new(),
        }
    }

    /// An allocator with every address of `pool` free that hands out addresses of `order`'s
    /// ranges in turn (see [`Allocator::allocate_next`]). Ranges of the other family are ignored.
    pub fn in_order(pool: AddressSet, order: impl IntoIterator<Item = AddrRange>) -> Allocator {
        let family = pool.family();
        let order = order
            .into_iter()
            .filter(|range| range.family() == family)
            .map(|range| range.bounds())
            .collect();
        Allocator {
            order,
            ..Allocator::new(pool)
        }
    }

    /// The same pool and allocation order, with every address free.
    pub fn emptied(&self) -> Allocator {
        Allocator {
            order: self.order.clone(),
            ..Allocator::new(self.pool().clone())
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
        self.slots.pool()
    }

    pub fn family(&self) -> Family {
        self.pool().family()
    }

    /// Current counts. O(1).
    pub fn counts(&self) -> Counts {
        self.slots.counts(self.other_family.count)
    }

    /// The address [`Allocator::allocate_lowest`] would return, without taking it.
    pub fn lowest_free(&self) -> Option<IpAddr> {
        self.slots.lowest_free().map(|value| self.ip(value))
    }

    /// The lowest free address strictly above `ip` (`None` for the other family), to skip an
    /// address that turned out to be taken elsewhere without marking it.
    pub fn next_free_after(&self, ip: IpAddr) -> Option<IpAddr> {
        let next = self.value(ip)?.checked_add(1)?;
        self.slots
            .free_at_or_after(next)
            .map(|value| self.ip(value))
    }

    /// Takes the lowest free address (the reference's deterministic order).
    pub fn allocate_lowest(&mut self) -> Result<IpAddr, AllocError> {
        let value = self.slots.allocate_lowest().ok_or(AllocError::Exhausted)?;
        Ok(self.ip(value))
    }

    /// Takes the next address in the allocation order: the lowest free address of the first
    /// range of the order that has one, or the lowest free address (no order, or none free in
    /// its ranges). O(ranges of the order × log F).
    pub fn allocate_next(&mut self) -> Result<IpAddr, AllocError> {
        let next = self.order.iter().find_map(|&(first, last)| {
            self.slots
                .free_at_or_after(first)
                .filter(|&value| value <= last)
        });
        let Some(value) = next else {
            return self.allocate_lowest();
        };
        self.slots
            .allocate(value)
            .map_err(|_| AllocError::InUse(self.ip(value)))?;
        Ok(self.ip(value))
    }

    /// Takes `ip`, which must be a free address of the pool.
    pub fn allocate(&mut self, ip: IpAddr) -> Result<(), AllocError> {
        let value = self.value(ip).ok_or(AllocError::NotInPool(ip))?;
        self.slots.allocate(value).map_err(|refusal| match refusal {
            Refusal::NotInPool => AllocError::NotInPool(ip),
            Refusal::InUse => AllocError::InUse(ip),
        })
    }

    /// Records that `ip` is in use, wherever it is: a pool address stops being free, any other
    /// address (another family included) counts as out of range. Idempotent; returns whether
    /// `ip` was not known to be in use before.
    pub fn mark_used(&mut self, ip: IpAddr) -> bool {
        match self.value(ip) {
            Some(value) => self.slots.mark_used(value),
            None => self.other_family.insert(to_bits(ip).1),
        }
    }

    /// Records every address of `block` that lies in the pool as in use (a sub-prefix held
    /// through an overlapping prefix pool); addresses outside the pool, and a block of the other
    /// family, are not recorded.
    pub fn mark_block_used(&mut self, block: Subnet) {
        if block.family() == self.family() {
            self.slots
                .mark_interval_used(block.network_bits(), block.last_bits());
        }
    }

    /// Gives `ip` back. A pool address becomes free again (merging with free neighbours); an
    /// out-of-range address is simply forgotten. Returns whether `ip` was in use.
    pub fn release(&mut self, ip: IpAddr) -> bool {
        match self.value(ip) {
            Some(value) => self.slots.release(value),
            None => self.other_family.remove(to_bits(ip).1),
        }
    }

    /// Whether `ip` is in use (in the pool or out of range).
    pub fn is_used(&self, ip: IpAddr) -> bool {
        match self.value(ip) {
            Some(value) => self.slots.is_used(value),
            None => self.other_family.contains(to_bits(ip).1),
        }
    }

    /// Whether `ip` is a free address of the pool.
    pub fn is_free(&self, ip: IpAddr) -> bool {
        self.value(ip)
            .is_some_and(|value| self.slots.is_free(value))
    }

    /// Whether `ip` is in use but not in the pool.
    pub fn is_out_of_range(&self, ip: IpAddr) -> bool {
        match self.value(ip) {
            Some(value) => self.slots.is_out_of_range(value),
            None => self.other_family.contains(to_bits(ip).1),
        }
    }

    /// The free ranges, lowest first.
    pub fn free_ranges(&self) -> impl Iterator<Item = AddrRange> + '_ {
        let family = self.family();
        self.slots
            .free_intervals()
            .map(move |(first, last)| AddrRange::from_bits(family, first, last))
    }

    /// The used addresses outside the pool, as ranges: IPv4 first, then IPv6, each lowest first.
    pub fn out_of_range_ranges(&self) -> impl Iterator<Item = AddrRange> + '_ {
        let family = self.family();
        // The pool family's intervals go before or after the other family's, never both.
        let own = move |before_other: bool| {
            self.slots
                .out_of_range_intervals()
                .filter(move |_| (family == Family::V4) == before_other)
                .map(move |(first, last)| AddrRange::from_bits(family, first, last))
        };
        let other = other(family);
        let others = self
            .other_family
            .iter()
            .map(move |(first, last)| AddrRange::from_bits(other, first, last));
        own(true).chain(others).chain(own(false))
    }

    /// Switches to a new pool set (grown, shrunk, or of the other family). Every used address
    /// stays used: those outside `pool` become out of range and are never handed out; those
    /// inside it (out-of-range ones included) count as used pool addresses.
    ///
    /// O((R + F + O) log(R + F + O)) for R pool ranges, F free ranges and O out-of-range ranges.
    pub fn resize(&mut self, pool: AddressSet) {
        if pool.family() == self.family() {
            self.slots.resize(pool);
            return;
        }
        // The families swap places: the old family's used addresses go beside the core, and the
        // addresses of the new family that were out of range meet the new pool.
        let old_used = self.slots.used();
        let new_used: Vec<_> = self.other_family.iter().collect();
        self.slots = Slots::with_used(pool, &new_used);
        self.other_family = Tally::from_sorted(old_used);
    }

    /// Number of intervals held (free ranges plus out-of-range ranges), for memory estimates.
    pub fn stored_ranges(&self) -> usize {
        self.slots.stored_intervals() + self.other_family.interval_count()
    }

    /// `ip` as an integer if it is of the pool's family.
    fn value(&self, ip: IpAddr) -> Option<u128> {
        let (family, value) = to_bits(ip);
        (family == self.family()).then_some(value)
    }

    fn ip(&self, value: u128) -> IpAddr {
        from_bits(self.family(), value)
    }
}

fn other(family: Family) -> Family {
    match family {
        Family::V4 => Family::V6,
        Family::V6 => Family::V4,
    }
}
