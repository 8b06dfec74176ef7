//! From a pool spec with plain fields ([`PoolSpecInput`]) to the normalised set of allocatable
//! addresses ([`ParsedPool`]), with the reference provider's rules:
//!
//! allocatable = ⋃ addresses − ⋃ excludedAddresses − reserved (unless
//! `allocateReservedIPAddresses`) − gateway,
//!
//! where the subnet is the network of the *lowest* configured address with length `prefix`, and
//! reserved is its first address (IPv4 network address / IPv6 subnet-router anycast address)
//! plus, for IPv4, its last address (broadcast).

use std::net::IpAddr;

use super::addr::{AddrRange, Family, Subnet};
use super::entry::{EntryError, parse_entry, parse_ip, shorten};
use super::error::{Field, SpecError, SpecErrors};
use super::set::AddressSet;

/// A pool spec as read from an `InClusterIPPool` / `GlobalInClusterIPPool`, without any
/// Kubernetes type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolSpecInput {
    /// Single addresses, CIDRs and `first-last` ranges; may overlap.
    pub addresses: Vec<String>,
    /// Length of the subnet's network prefix; 1..=32 for IPv4, 1..=128 for IPv6. `i64` so that
    /// any integer type read from the CRD converts without loss.
    pub prefix: i64,
    /// Never allocated, even with `allocate_reserved_ip_addresses`. `None` and `Some("")` both
    /// mean unset.
    pub gateway: Option<String>,
    /// Same syntax as `addresses`; need not lie inside the subnet.
    pub excluded_addresses: Vec<String>,
    pub allocate_reserved_ip_addresses: bool,
    /// Claims that get a given address, in the order written.
    pub pre_allocations: Vec<PreAllocationInput>,
}

/// One pre-allocation as written: the claim (its namespace empty on a namespaced pool) and the
/// address text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PreAllocationInput {
    pub claim_namespace: String,
    pub claim_name: String,
    pub address: String,
}

/// A validated pre-allocation: one address of the pool's family for one claim. Whether the
/// address is one the pool hands out is not checked here: that is a conflict of the claim, which
/// resolves when the pool's addresses change, not a fault of the spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreAllocated {
    pub claim_namespace: String,
    pub claim_name: String,
    pub ip: IpAddr,
}

/// A validated pool spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedPool {
    subnet: Subnet,
    gateway: Option<IpAddr>,
    configured: AddressSet,
    allocatable: AddressSet,
    pre_allocations: Vec<PreAllocated>,
}

impl ParsedPool {
    pub fn family(&self) -> Family {
        self.subnet.family()
    }

    /// The subnet given by the lowest configured address and the prefix.
    pub fn subnet(&self) -> Subnet {
        self.subnet
    }

    pub fn prefix(&self) -> u8 {
        self.subnet.prefix()
    }

    pub fn gateway(&self) -> Option<IpAddr> {
        self.gateway
    }

    /// The union of `addresses`, before exclusions.
    pub fn configured(&self) -> &AddressSet {
        &self.configured
    }

    /// The addresses that may be handed out: what an [`super::Allocator`] is built on, and what
    /// overlap checks between pools compare.
    pub fn allocatable(&self) -> &AddressSet {
        &self.allocatable
    }

    /// The pre-allocations, in the order written.
    pub fn pre_allocations(&self) -> &[PreAllocated] {
        &self.pre_allocations
    }

    pub fn into_allocatable(self) -> AddressSet {
        self.allocatable
    }
}

impl PoolSpecInput {
    /// Validates and normalises the spec, reporting every problem found. Never panics.
    ///
    /// Cost: O(E log E) for E entries; no range is enumerated.
    pub fn parse(&self) -> Result<ParsedPool, SpecErrors> {
        let mut errors = Vec::new();
        if self.addresses.is_empty() {
            errors.push(SpecError::NoAddresses);
        }
        let addresses = parse_entries(
            &self.addresses,
            Field::Addresses,
            parse_entry,
            None,
            &mut errors,
        );
        let family = addresses.first().map(|(_, range)| range.family());
        let excluded = parse_entries(
            &self.excluded_addresses,
            Field::ExcludedAddresses,
            parse_entry,
            family,
            &mut errors,
        );
        let gateway = parse_gateway(self.gateway.as_deref(), family, &mut errors);
        let prefix = check_prefix(self.prefix, family, &mut errors);
        let pre_allocations = parse_pre_allocations(&self.pre_allocations, family, &mut errors);

        let (Some(family), Some(prefix), true) = (family, prefix, errors.is_empty()) else {
            return Err(
                SpecErrors::new(errors).unwrap_or_else(|| SpecErrors::one(SpecError::NoAddresses))
            );
        };
        let configured = set_of(family, addresses.iter().map(|&(_, range)| range));
        let subnet = configured
            .first()
            .and_then(|lowest| Subnet::containing(lowest, prefix))
            .ok_or_else(|| SpecErrors::one(SpecError::NoAddresses))?;
        check_inside_subnet(&self.addresses, &addresses, subnet, &mut errors);
        if let Some(errors) = SpecErrors::new(errors) {
            return Err(errors);
        }

        let mut removed: Vec<AddrRange> = excluded.iter().map(|&(_, range)| range).collect();
        if !self.allocate_reserved_ip_addresses {
            removed.extend(reserved(subnet));
        }
        removed.extend(gateway.map(AddrRange::single));
        let allocatable = configured.difference(&set_of(family, removed));
        Ok(ParsedPool {
            subnet,
            gateway,
            configured,
            allocatable,
            pre_allocations,
        })
    }
}

/// Parses the `gateway`, unset if `None` or empty; it must be of the `pool` family if known.
pub(crate) fn parse_gateway(
    text: Option<&str>,
    pool: Option<Family>,
    errors: &mut Vec<SpecError>,
) -> Option<IpAddr> {
    let text = text.filter(|text| !text.is_empty())?;
    let entry = || shorten(text);
    match parse_ip(text) {
        Err(reason) => {
            errors.push(SpecError::InvalidEntry {
                field: Field::Gateway,
                entry: entry(),
                reason,
            });
            None
        }
        Ok(ip) => match pool {
            Some(pool) if pool != Family::of(ip) => {
                errors.push(SpecError::MixedFamilies {
                    field: Field::Gateway,
                    entry: entry(),
                    found: Family::of(ip),
                    pool,
                });
                None
            }
            _ => Some(ip),
        },
    }
}

/// Parses each pre-allocated address: one IP of the `pool` family, if known.
fn parse_pre_allocations(
    entries: &[PreAllocationInput],
    pool: Option<Family>,
    errors: &mut Vec<SpecError>,
) -> Vec<PreAllocated> {
    let mut parsed = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let field = Field::PreAllocations(index);
        match parse_ip(&entry.address) {
            Err(reason) => errors.push(SpecError::InvalidEntry {
                field,
                entry: shorten(&entry.address),
                reason,
            }),
            Ok(ip) if pool.is_some_and(|pool| pool != Family::of(ip)) => {
                errors.push(SpecError::MixedFamilies {
                    field,
                    entry: shorten(&entry.address),
                    found: Family::of(ip),
                    pool: pool.unwrap_or(Family::of(ip)),
                })
            }
            Ok(ip) => parsed.push(PreAllocated {
                claim_namespace: entry.claim_namespace.clone(),
                claim_name: entry.claim_name.clone(),
                ip,
            }),
        }
    }
    parsed
}

/// Parses each entry with `parse`; the pool family is `pool`, or else that of the first valid entry.
/// Returns the valid entries of the pool family with their index.
pub(crate) fn parse_entries(
    entries: &[String],
    field: fn(usize) -> Field,
    parse: fn(&str) -> Result<AddrRange, EntryError>,
    mut pool: Option<Family>,
    errors: &mut Vec<SpecError>,
) -> Vec<(usize, AddrRange)> {
    let mut parsed = Vec::with_capacity(entries.len());
    for (index, text) in entries.iter().enumerate() {
        match parse(text) {
            Err(reason) => errors.push(SpecError::InvalidEntry {
                field: field(index),
                entry: shorten(text),
                reason,
            }),
            Ok(range) => match *pool.get_or_insert(range.family()) {
                family if family == range.family() => parsed.push((index, range)),
                family => errors.push(SpecError::MixedFamilies {
                    field: field(index),
                    entry: shorten(text),
                    found: range.family(),
                    pool: family,
                }),
            },
        }
    }
    parsed
}

/// The prefix as `u8` if it is valid for `family` (1..=128 while the family is unknown). The
/// reference webhook rejects 0 ("a valid prefix is required"), so do we.
fn check_prefix(prefix: i64, family: Option<Family>, errors: &mut Vec<SpecError>) -> Option<u8> {
    let max = family.map_or(128, Family::bits);
    match u8::try_from(prefix) {
        Ok(valid) if (1..=max).contains(&valid) => Some(valid),
        _ => {
            errors.push(SpecError::InvalidPrefix { prefix, family });
            None
        }
    }
}

fn check_inside_subnet(
    texts: &[String],
    addresses: &[(usize, AddrRange)],
    subnet: Subnet,
    errors: &mut Vec<SpecError>,
) {
    let outer = subnet.range();
    for &(index, range) in addresses {
        if !outer.contains_range(range) {
            errors.push(SpecError::OutsideSubnet {
                field: Field::Addresses(index),
                entry: texts
                    .get(index)
                    .map(|text| shorten(text))
                    .unwrap_or_default(),
                subnet,
            });
        }
    }
}

fn reserved(subnet: Subnet) -> Vec<AddrRange> {
    let mut reserved = vec![AddrRange::single(subnet.network())];
    if subnet.family() == Family::V4 {
        reserved.push(AddrRange::single(subnet.last()));
    }
    reserved
}

pub(crate) fn set_of(family: Family, ranges: impl IntoIterator<Item = AddrRange>) -> AddressSet {
    // Every range was checked against `family` while parsing, so this never falls back.
    AddressSet::from_ranges(family, ranges).unwrap_or_else(|_| AddressSet::empty(family))
}
