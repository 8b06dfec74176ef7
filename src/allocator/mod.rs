//! Pure IPv4/IPv6 address allocation (no Kubernetes dependency).
//!
//! Two steps:
//!
//! 1. [`PoolSpecInput::parse`] turns a pool spec (plain strings and numbers, as read from an
//!    `InClusterIPPool`) into a [`ParsedPool`], whose [`ParsedPool::allocatable`] is an
//!    [`AddressSet`]: sorted, merged, inclusive `u128` intervals of one [`Family`].
//! 2. An [`Allocator`] built on that set answers "which address next" and keeps exact
//!    [`Counts`], without ever enumerating a range.
//!
//! ```
//! use inpool::allocator::{Allocator, PoolSpecInput};
//!
//! let spec = PoolSpecInput {
//!     addresses: vec!["10.0.0.0/24".into()],
//!     prefix: 24,
//!     gateway: Some("10.0.0.1".into()),
//!     ..Default::default()
//! };
//! let pool = spec.parse().unwrap();
//! let mut allocator = Allocator::new(pool.into_allocatable());
//! assert_eq!(allocator.allocate_lowest().unwrap().to_string(), "10.0.0.2");
//! assert_eq!(allocator.counts().free, 252); // 256 - network - broadcast - gateway - 1 used
//! ```
//!
//! # Spec semantics (as the reference in-cluster provider)
//!
//! - An entry is a single address (`10.0.0.5`), a CIDR (`10.0.0.0/24`; host bits may be set and
//!   are ignored) or a range of two addresses (`10.0.0.5-10.0.0.9`). An entry containing `-` is
//!   a range, else one containing `/` a CIDR. Whitespace is rejected anywhere, as Go's `netip`
//!   does.
//! - Entries may overlap or repeat; they are merged, never double-counted.
//! - All `addresses`, `excludedAddresses` and the `gateway` must be of one family.
//! - `prefix` is required: 1..=32 (IPv4) or 1..=128 (IPv6); 0 is rejected as by the reference
//!   webhook.
//! - The *subnet* is the network of the **lowest** configured address (after merging, before
//!   exclusions; not necessarily the first entry) with length `prefix`. Every `addresses` entry
//!   must lie inside it. The reference enforces this in its webhook only; we enforce it here too,
//!   so an object that bypassed admission cannot make the allocator hand out foreign addresses.
//!   `excludedAddresses` and `gateway` need not be inside the subnet.
//! - Unless `allocateReservedIPAddresses`: the subnet's first address (IPv4 network address,
//!   IPv6 subnet-router anycast address) is removed, and for IPv4 also its last (broadcast)
//!   address, even for /31 and /32 subnets (as the reference).
//! - The `gateway` is always removed, `allocateReservedIPAddresses` or not.
//! - `excludedAddresses` are removed.
//! - `additionalSubnets` (inpool's addition) adds subnets with the same rules, each with its own
//!   prefix and gateway (which must lie inside it); the subnets must not overlap, every subnet's
//!   reserved addresses and every gateway are removed, `excludedAddresses` applies to all, and
//!   the pool is the union ([`ParsedPool::network_of`] tells an address's subnet).
//!
//! Errors name the field, the entry and the reason, e.g.
//! ``addresses[2] `10.0.0.5-10.0.0.1`: range end before start`` or
//! ``mixed address families: gateway `10.0.0.1` is IPv4 but the pool is IPv6``; parsing reports
//! every problem ([`SpecErrors`]). No input string makes it panic.
//!
//! Deliberate differences from the reference parser: IPv6 zones (`fe80::1%eth0`) are rejected
//! (Go accepts and drops them); IPv4-mapped IPv6 addresses (`::ffff:1.2.3.4`) are rejected in
//! every form, as the CRDs' CEL rules reject them (Go's `netip` keeps them IPv6); prefix lengths with leading zeros (`/024`) are rejected, as
//! recent Go versions do.
//!
//! # Allocation semantics
//!
//! - [`Allocator::allocate_lowest`] hands out the lowest free address, deterministic like the
//!   reference's bottom-up scan. [`Allocator::allocate_next`] hands out the lowest free address of
//!   the first range of an allocation order ([`Allocator::in_order`]: a pool's subnets in the
//!   order written) that has one. [`Allocator::allocate`] takes a specific free address.
//! - [`Allocator::mark_used`] records an address seen in use (start-up sync, or an address taken
//!   by someone else); an address outside the pool, of either family, is recorded as *out of
//!   range*. [`Allocator::release`] frees a pool address or forgets an out-of-range one.
//! - [`Allocator::resize`] switches to a new pool set; used addresses that fall outside become
//!   out of range and are never handed out; out-of-range addresses that the new set contains
//!   become ordinary used addresses.
//!
//! # Counts
//!
//! [`Counts`] are exact `u128`: `total` = allocatable addresses; `used` = every address in use
//! (in the pool or out of range, like the reference's count of IPAddresses); `out_of_range` =
//! used addresses outside the pool; `free` = `total` − used addresses *inside* the pool.
//! The reference computes `free = total − used`, counting out-of-range addresses against the
//! pool, so it under-reports `free` (and can go negative); we do not. [`Counts::to_status`]
//! saturates each count to `i64::MAX` for the status fields (`type: integer`, a Go `int`).
//!
//! The one count that does not fit in `u128` is the size of the whole IPv6 space (2^128), which
//! [`AddressSet::len`] reports as `u128::MAX`. A valid spec can never produce it (the prefix is at
//! least 1), so pool counts are always exact.
//!
//! # Prefix pools
//!
//! [`PrefixPoolSpecInput::parse`] and [`PrefixAllocator`] do the same for IPv6 prefix pools, which
//! hand out aligned sub-prefixes of one length (`allocationPrefixLength`, default 64) from
//! `prefixes`, skipping every sub-prefix that an `excludedPrefixes` entry touches; the `gateway`
//! blocks nothing. A sub-prefix of length `L` is handled as one *block index*,
//! `address >> (128 − L)`, so prefixes and exclusions become `u128` intervals of blocks and the
//! same core as IP pools gives first-fit allocation in O(log F) and exact counts *in
//! sub-prefixes* without enumeration (a /32 split into /64s is one interval of 2^32 blocks).
//! Counts saturate only for `::/0` split into /128s (2^128 sub-prefixes reads `u128::MAX`), and
//! in [`Counts::to_status`] at `i64::MAX`.
//!
//! ```
//! use inpool::allocator::{PrefixAllocator, PrefixPoolSpecInput};
//!
//! let spec = PrefixPoolSpecInput {
//!     prefixes: vec!["fd06::/48".into()],
//!     allocation_prefix_length: Some(56),
//!     ..Default::default()
//! };
//! let mut allocator = PrefixAllocator::new(spec.parse().unwrap());
//! assert_eq!(allocator.allocate_lowest().unwrap().to_string(), "fd06::/56");
//! assert_eq!(allocator.allocate_lowest().unwrap().to_string(), "fd06:0:0:100::/56");
//! assert_eq!(allocator.counts().total, 256);
//! ```
//!
//! # Complexity
//!
//! R = ranges of the pool set, F = free intervals (at most R + used addresses in the pool),
//! O = out-of-range intervals, E = spec entries. Nothing is ever proportional to the number of
//! addresses in a range. For a [`PrefixAllocator`] the same costs hold with R, F and O counted in
//! runs of sub-prefixes.
//!
//! | operation | cost |
//! |---|---|
//! | `PoolSpecInput::parse`, `PrefixPoolSpecInput::parse` | O(E log E) |
//! | `Allocator::new` | O(R) |
//! | `allocate_lowest`, `lowest_free` | O(log F) |
//! | `allocate_next` (S subnets in the allocation order) | O(S log F) |
//! | `allocate`, `mark_used`, `release`, `is_used`, `is_free` | O(log R + log F) (+ O(log O) outside the pool) |
//! | `next_free_after` | O(log F) |
//! | `counts` | O(1) |
//! | `resize` | O((R + F + O) log(R + F + O)) |
//! | `AddressSet` `contains` | O(log R) |
//! | `AddressSet` `intersection`, `overlaps`, `first_overlap`, `difference`, `union` | O(R₁ + R₂) |
//!
//! Memory: two `u128` per free interval and per out-of-range interval (in a vector while there
//! are few, in a B-tree beyond). Used addresses inside the pool are not stored individually, so
//! filling a pool from the bottom costs no memory per address; scattered use costs about one
//! entry per hole.

mod addr;
mod any;
mod counts;
mod entry;
mod error;
mod intervals;
mod pool;
mod prefix;
mod set;
mod slots;
mod spec;

pub use addr::{AddrRange, Family, Subnet, canonical};
pub use any::{AnyAllocator, Footprint, Networks, ParsedSpec};
pub use counts::{Counts, StatusCounts, saturating_i32, saturating_i64};
pub use entry::{EntryError, parse_entry, parse_ip, parse_network};
pub use error::{AllocError, Field, PrefixAllocError, SpecError, SpecErrors};
pub use pool::Allocator;
pub use prefix::{
    DEFAULT_ALLOCATION_PREFIX_LENGTH, ParsedPrefixPool, PrefixAllocator, PrefixPoolSpecInput,
};
pub use set::{AddressSet, FamilyMismatch};
pub use spec::{
    Network, NotHandedOut, ParsedPool, PoolSpecInput, PreAllocated, PreAllocationInput,
    SubnetInput, subnet_field,
};

#[cfg(test)]
mod tests;
