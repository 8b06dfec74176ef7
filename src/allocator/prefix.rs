//! Prefix pools: sub-prefixes of one length handed out from a list of prefixes of one family, as
//! the reference's `InClusterPrefixPool` / `GlobalInClusterPrefixPool` do for IPv6, and as inpool
//! does for IPv4 too (/26s of a /16, say).
//!
//! # Block indices
//!
//! With allocation length `L` and `k = W − L` host bits, where `W` is the family's width (32 or
//! 128), every aligned sub-prefix is one
//! *block*, numbered by its *block index* `address >> k`. In that space:
//!
//! - a `prefixes` entry `P/p` (`p ≤ L`, aligned) is the block interval `[P >> k, last(P/p) >> k]`,
//!   exactly its sub-prefixes;
//! - an exclusion covering addresses `[a, b]` is the block interval `[a >> k, b >> k]`: every
//!   block it touches, which is what "any sub-prefix overlapping it is skipped" means;
//! - allocatable = ⋃ prefixes − ⋃ exclusions is a normalised list of `u128` intervals, and the
//!   lowest free aligned sub-prefix is the lowest free block index.
//!
//! So a prefix pool runs on the same core as IP pools ([`Slots`]): lowest free in O(log F),
//! `mark_used` / `release` / `is_used` in O(log R + log F), exact `u128` counts in O(1),
//! `resize` in O((R + F + O) log), and nothing is ever enumerated (a /32 split into /64s is
//! 2^32 blocks in one interval). Counts are in sub-prefixes. They are exact except in the one
//! pool that has 2^128 of them, `::/0` split into /128s, whose `total` (and `free` while unused)
//! saturates at `u128::MAX`; [`super::Counts::to_status`] further saturates each at `i64::MAX`
//! for the status fields (a /32 split into /128s reads `i64::MAX`).
//!
//! # Spec semantics (as the reference)
//!
//! - `prefixes` is required; each entry is a CIDR whose host bits are zero (`fd00::/48`, not
//!   `fd00::1/48`) and no longer than `allocationPrefixLength`. Overlapping entries are merged.
//!   The first valid entry sets the pool's family; the reference accepts IPv6 only, inpool
//!   either.
//! - `allocationPrefixLength` is 1..=128 for IPv6 and 1..=32 for IPv4, 64 when unset (the CRD
//!   default, so an IPv4 pool must set it).
//! - `excludedPrefixes` entries are addresses, CIDRs (host bits ignored, as for IP pools) or
//!   `first-last` ranges of the pool's family; any sub-prefix overlapping one is never handed
//!   out. They need not lie inside `prefixes`.
//! - `gateway` (optional) is an address of the pool's family carried to every `IPAddress`;
//!   unlike IP pools it blocks nothing.
//!
//! An entry or gateway of the other family is reported as ``mixed address families:
//! prefixes[2] `10.0.0.0/8` is IPv4 but the pool is IPv6``. All problems are reported at once,
//! never by a panic.

use std::net::IpAddr;

use super::addr::{AddrRange, Family, Subnet, host_mask};
use super::counts::Counts;
use super::entry::{parse_entry, parse_network};
use super::error::{Field, PrefixAllocError, SpecError, SpecErrors};
use super::set::{AddressSet, Intervals};
use super::slots::{Refusal, Slots};
use super::spec::{parse_entries, parse_gateway, set_of};

/// `allocationPrefixLength` when the spec leaves it out (the CRD default).
pub const DEFAULT_ALLOCATION_PREFIX_LENGTH: u8 = 64;

/// A prefix pool spec as read from an `InClusterPrefixPool` / `GlobalInClusterPrefixPool`,
/// without any Kubernetes type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefixPoolSpecInput {
    /// Network-aligned CIDRs of one family; may overlap.
    pub prefixes: Vec<String>,
    /// Length of each handed-out sub-prefix; `None` means the default, 64. `i64` so that any
    /// integer read from the CRD converts without loss.
    pub allocation_prefix_length: Option<i64>,
    /// Informational; `None` and `Some("")` both mean unset.
    pub gateway: Option<String>,
    /// Addresses, CIDRs or `first-last` ranges of the prefixes' family.
    pub excluded_prefixes: Vec<String>,
}

/// A validated prefix pool spec.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParsedPrefixPool {
    family: Family,
    length: u8,
    gateway: Option<IpAddr>,
    /// The union of `prefixes`, as addresses.
    prefixes: AddressSet,
    /// The addresses of the allocatable sub-prefixes.
    allocatable: AddressSet,
    /// The allocatable sub-prefixes as block indices: what a [`PrefixAllocator`] hands out.
    blocks: Vec<(u128, u128)>,
    /// The prefixes that another pool holds for this one, whole (carved from a parent): see
    /// [`super::ParsedPool::set_carved`].
    carved: Vec<Subnet>,
}

impl ParsedPrefixPool {
    /// The family of the prefixes, and so of every sub-prefix.
    pub fn family(&self) -> Family {
        self.family
    }

    pub fn allocation_prefix_length(&self) -> u8 {
        self.length
    }

    pub fn gateway(&self) -> Option<IpAddr> {
        self.gateway
    }

    /// The prefixes carved for this pool from a parent.
    pub fn carved(&self) -> &[Subnet] {
        &self.carved
    }

    /// Records which of the pool's prefixes a parent holds for it (as for an IP pool's subnets).
    pub fn set_carved(&mut self, carved: Vec<Subnet>) {
        self.carved = carved;
    }

    /// The union of `prefixes`, before exclusions.
    pub fn prefixes(&self) -> &AddressSet {
        &self.prefixes
    }

    /// Every address of every allocatable sub-prefix (what overlap checks between pools
    /// compare): `prefixes` minus each sub-prefix that an exclusion touches.
    pub fn allocatable(&self) -> &AddressSet {
        &self.allocatable
    }

    /// Number of allocatable sub-prefixes (see the [module docs](super) for its one saturation).
    pub fn total(&self) -> u128 {
        super::set::total_len(&self.blocks)
    }
}

impl Intervals for ParsedPrefixPool {
    fn intervals(&self) -> &[(u128, u128)] {
        &self.blocks
    }
}

impl PrefixPoolSpecInput {
    /// Validates and normalises the spec, reporting every problem found. Never panics.
    ///
    /// Cost: O(E log E) for E entries; no prefix is enumerated.
    pub fn parse(&self) -> Result<ParsedPrefixPool, SpecErrors> {
        let mut errors = Vec::new();
        if self.prefixes.is_empty() {
            errors.push(SpecError::NoPrefixes);
        }
        let prefixes = parse_entries(
            &self.prefixes,
            Field::Prefixes,
            |text| parse_network(text).map(|network| network.range()),
            None,
            &mut errors,
        );
        // The first valid prefix sets the family (IPv6 if none is valid: the reference's only
        // one), which the other fields must share.
        let family = prefixes
            .first()
            .map_or(Family::V6, |(_, range)| range.family());
        let length = self.check_length(family, &prefixes, &mut errors);
        let excluded = parse_entries(
            &self.excluded_prefixes,
            Field::ExcludedPrefixes,
            parse_entry,
            Some(family),
            &mut errors,
        );
        let gateway = parse_gateway(
            self.gateway.as_deref(),
            Some(family),
            Field::Gateway,
            &mut errors,
        );
        if let Some(errors) = SpecErrors::new(errors) {
            return Err(errors);
        }
        let length = length.ok_or_else(|| SpecErrors::one(SpecError::NoPrefixes))?;

        let prefixes = set_of(family, prefixes.into_iter().map(|(_, range)| range));
        // Widen each exclusion to whole blocks: a sub-prefix it merely touches is skipped.
        let mask = host_mask(family, length);
        let touched = excluded.iter().map(|&(_, range)| {
            let (first, last) = range.bounds();
            AddrRange::from_bits(family, first & !mask, last | mask)
        });
        let allocatable = prefixes.difference(&set_of(family, touched));
        // Every interval of `allocatable` is a run of whole blocks, so shifting keeps it
        // normalised: adjacent blocks are adjacent addresses and the reverse.
        let shift = block_shift(family, length);
        let blocks = allocatable
            .ranges()
            .map(|range| {
                let (first, last) = range.bounds();
                (first >> shift, last >> shift)
            })
            .collect();
        Ok(ParsedPrefixPool {
            family,
            length,
            gateway,
            prefixes,
            allocatable,
            blocks,
            carved: Vec::new(),
        })
    }

    /// The allocation length if it is 1..=`family`'s width; each valid prefix must be no longer.
    fn check_length(
        &self,
        family: Family,
        prefixes: &[(usize, AddrRange)],
        errors: &mut Vec<SpecError>,
    ) -> Option<u8> {
        let requested = self
            .allocation_prefix_length
            .unwrap_or(i64::from(DEFAULT_ALLOCATION_PREFIX_LENGTH));
        let Some(length) = u8::try_from(requested)
            .ok()
            .filter(|length| (1..=family.bits()).contains(length))
        else {
            errors.push(SpecError::InvalidAllocationPrefixLength {
                length: requested,
                family,
            });
            return None;
        };
        // An aligned CIDR is longer than `length` exactly when it spans less than one block.
        let block = host_mask(family, length);
        for &(index, range) in prefixes {
            let (first, last) = range.bounds();
            if last - first < block {
                errors.push(SpecError::LongerThanAllocation {
                    field: Field::Prefixes(index),
                    entry: self
                        .prefixes
                        .get(index)
                        .map(|text| super::entry::shorten(text))
                        .unwrap_or_default(),
                    allocation: length,
                });
            }
        }
        Some(length)
    }
}

/// Host bits of a sub-prefix of `length` (1..=`family`'s width): 0..=127, so every shift is
/// defined.
fn block_shift(family: Family, length: u8) -> u32 {
    u32::from(family.bits()) - u32::from(length)
}

/// Allocation state of one prefix pool: which sub-prefixes are in use, lowest first.
///
/// Sub-prefixes are [`Subnet`]s of the pool's allocation length (their first address is what an
/// `IPAddress` carries in `spec.address`). Costs as the IP [`super::Allocator`]'s, with R, F and
/// O counted in runs of sub-prefixes.
#[derive(Clone, Debug)]
pub struct PrefixAllocator {
    slots: Slots<ParsedPrefixPool>,
}

impl PrefixAllocator {
    /// Every sub-prefix of `pool` free. O(R).
    pub fn new(pool: ParsedPrefixPool) -> PrefixAllocator {
        PrefixAllocator {
            slots: Slots::new(pool),
        }
    }

    pub fn pool(&self) -> &ParsedPrefixPool {
        self.slots.pool()
    }

    pub fn allocation_prefix_length(&self) -> u8 {
        self.pool().length
    }

    pub fn family(&self) -> Family {
        self.pool().family
    }

    /// Counts in sub-prefixes. O(1).
    pub fn counts(&self) -> Counts {
        self.slots.counts(0)
    }

    /// The sub-prefix [`PrefixAllocator::allocate_lowest`] would return, without taking it.
    pub fn lowest_free(&self) -> Option<Subnet> {
        self.slots.lowest_free().map(|block| self.sub_prefix(block))
    }

    /// The lowest free sub-prefix above `after` (`None` if `after` is not a sub-prefix of the
    /// pool's length), to skip one that turned out to be taken elsewhere.
    pub fn next_free_after(&self, after: Subnet) -> Option<Subnet> {
        let next = self.block(after).ok()?.checked_add(1)?;
        self.slots
            .free_at_or_after(next)
            .map(|block| self.sub_prefix(block))
    }

    /// Takes the lowest free sub-prefix (first fit, as the reference).
    pub fn allocate_lowest(&mut self) -> Result<Subnet, PrefixAllocError> {
        let block = self
            .slots
            .allocate_lowest()
            .ok_or(PrefixAllocError::Exhausted)?;
        Ok(self.sub_prefix(block))
    }

    /// Takes `sub_prefix`, which must be a free sub-prefix of the pool.
    pub fn allocate(&mut self, sub_prefix: Subnet) -> Result<(), PrefixAllocError> {
        let block = self.block(sub_prefix)?;
        self.slots.allocate(block).map_err(|refusal| match refusal {
            Refusal::NotInPool => PrefixAllocError::NotInPool(sub_prefix),
            Refusal::InUse => PrefixAllocError::InUse(sub_prefix),
        })
    }

    /// Records that `sub_prefix` is in use wherever it is (outside the pool: out of range).
    /// Idempotent; whether it was not known to be in use. A network of another length or family
    /// is refused: it is not one block, so it can be neither counted nor released.
    pub fn mark_used(&mut self, sub_prefix: Subnet) -> Result<bool, PrefixAllocError> {
        Ok(self.slots.mark_used(self.block(sub_prefix)?))
    }

    /// Records every sub-prefix of the pool inside `block`, a network shorter than the allocation
    /// length (held through an overlapping pool of larger units), as in use; sub-prefixes outside
    /// the pool are not recorded. A block of the allocation length or longer is one sub-prefix:
    /// see [`PrefixAllocator::mark_used`].
    pub fn mark_block_used(&mut self, block: Subnet) {
        if block.family() != self.family() || block.prefix() >= self.allocation_prefix_length() {
            return;
        }
        let shift = block_shift(self.family(), self.allocation_prefix_length());
        self.slots
            .mark_interval_used(block.network_bits() >> shift, block.last_bits() >> shift);
    }

    /// Gives `sub_prefix` back (an out-of-range one is forgotten); whether it was in use.
    pub fn release(&mut self, sub_prefix: Subnet) -> bool {
        self.block(sub_prefix)
            .is_ok_and(|block| self.slots.release(block))
    }

    /// Whether `sub_prefix` is in use, in the pool or out of range.
    pub fn is_used(&self, sub_prefix: Subnet) -> bool {
        self.block(sub_prefix)
            .is_ok_and(|block| self.slots.is_used(block))
    }

    /// Whether `sub_prefix` is a free sub-prefix of the pool.
    pub fn is_free(&self, sub_prefix: Subnet) -> bool {
        self.block(sub_prefix)
            .is_ok_and(|block| self.slots.is_free(block))
    }

    /// Whether `sub_prefix` is in use but no longer allocatable.
    pub fn is_out_of_range(&self, sub_prefix: Subnet) -> bool {
        self.block(sub_prefix)
            .is_ok_and(|block| self.slots.is_out_of_range(block))
    }

    /// The free sub-prefixes, as runs of addresses, lowest first.
    pub fn free_ranges(&self) -> impl Iterator<Item = AddrRange> + '_ {
        self.slots
            .free_intervals()
            .map(|(first, last)| self.addresses(first, last))
    }

    /// The used sub-prefixes that are not allocatable (outside `prefixes` or touched by an
    /// exclusion), as runs of addresses, lowest first.
    pub fn out_of_range_ranges(&self) -> impl Iterator<Item = AddrRange> + '_ {
        self.slots
            .out_of_range_intervals()
            .map(|(first, last)| self.addresses(first, last))
    }

    /// Switches to a new spec (grown, shrunk, other exclusions). Every used sub-prefix stays
    /// used; those no longer allocatable become out of range and are never handed out. The
    /// allocation length cannot change (it is immutable in the CRD): that is refused and the
    /// allocator left as it was.
    pub fn resize(&mut self, pool: ParsedPrefixPool) -> Result<(), PrefixAllocError> {
        let (from, to) = (self.allocation_prefix_length(), pool.length);
        if from != to {
            return Err(PrefixAllocError::LengthChanged { from, to });
        }
        self.slots.resize(pool);
        Ok(())
    }

    /// Intervals held (free runs plus out-of-range runs), for memory estimates.
    pub fn stored_ranges(&self) -> usize {
        self.slots.stored_intervals()
    }

    fn block(&self, sub_prefix: Subnet) -> Result<u128, PrefixAllocError> {
        let (family, length) = (self.family(), self.allocation_prefix_length());
        if sub_prefix.family() == family && sub_prefix.prefix() == length {
            Ok(sub_prefix.network_bits() >> block_shift(family, length))
        } else {
            Err(PrefixAllocError::NotASubPrefix {
                prefix: sub_prefix,
                family,
                length,
            })
        }
    }

    fn sub_prefix(&self, block: u128) -> Subnet {
        let (family, length) = (self.family(), self.allocation_prefix_length());
        Subnet::from_bits(family, block << block_shift(family, length), length)
    }

    fn addresses(&self, first: u128, last: u128) -> AddrRange {
        let (family, length) = (self.family(), self.allocation_prefix_length());
        let shift = block_shift(family, length);
        AddrRange::from_bits(
            family,
            first << shift,
            (last << shift) | host_mask(family, length),
        )
    }
}
