//! From a pool spec with plain fields ([`PoolSpecInput`]) to the normalised set of allocatable
//! addresses ([`ParsedPool`]), with the reference provider's rules:
//!
//! allocatable = ⋃ addresses − ⋃ excludedAddresses − reserved (unless
//! `allocateReservedIPAddresses`) − gateway,
//!
//! where the subnet is the network of the *lowest* configured address with length `prefix`, and
//! reserved is its first address (IPv4 network address / IPv6 subnet-router anycast address)
//! plus, for IPv4, its last address (broadcast).
//!
//! A pool may span more subnets (`additionalSubnets`, inpool's addition): each has its own
//! addresses, prefix and gateway, with the same rules, and the pool hands out the union:
//!
//! allocatable = ⋃ᵢ (addressesᵢ − reservedᵢ) − ⋃ excludedAddresses − every gateway.
//!
//! The subnets must not overlap, so that every address has one prefix and one gateway
//! ([`ParsedPool::network_of`]), and an additional subnet's gateway must lie inside it.

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
    /// More subnets, each with its own prefix and gateway, in the order written.
    pub additional_subnets: Vec<SubnetInput>,
}

/// One more subnet of a pool as written: the fields of the spec's own `addresses`, `prefix` and
/// `gateway`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubnetInput {
    pub addresses: Vec<String>,
    pub prefix: i64,
    pub gateway: Option<String>,
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
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PreAllocated {
    pub claim_namespace: String,
    pub claim_name: String,
    pub ip: IpAddr,
}

/// One subnet of a validated pool: its network (whose length every `IPAddress` from it carries)
/// and its gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Network {
    pub subnet: Subnet,
    pub gateway: Option<IpAddr>,
}

/// A validated pool spec.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParsedPool {
    /// The pool's own subnet first, then `additionalSubnets` in the order written; disjoint.
    networks: Vec<Network>,
    configured: AddressSet,
    allocatable: AddressSet,
    pre_allocations: Vec<PreAllocated>,
}

impl ParsedPool {
    pub fn family(&self) -> Family {
        self.subnet().family()
    }

    /// The pool's own subnet: the one given by the lowest address of `addresses` and `prefix`.
    pub fn subnet(&self) -> Subnet {
        self.networks[0].subnet
    }

    pub fn prefix(&self) -> u8 {
        self.subnet().prefix()
    }

    /// The gateway of the pool's own subnet (`gateway`).
    pub fn gateway(&self) -> Option<IpAddr> {
        self.networks[0].gateway
    }

    /// Every subnet: the pool's own, then `additionalSubnets` in the order written. Addresses are
    /// handed out in this order: the lowest free address of the first subnet that has one.
    pub fn networks(&self) -> &[Network] {
        &self.networks
    }

    /// The subnet `ip` lies in, whose prefix and gateway its `IPAddress` carries; the pool's own
    /// for an address outside every subnet. O(subnets).
    pub fn network_of(&self, ip: IpAddr) -> Network {
        self.networks
            .iter()
            .find(|network| network.subnet.contains(ip))
            .copied()
            .unwrap_or(self.networks[0])
    }

    /// The union of `addresses` (of every subnet), before exclusions.
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

    /// The index in [`ParsedPool::networks`] of the subnet whose network holds `ip`, if any.
    pub fn subnet_index_of(&self, ip: IpAddr) -> Option<usize> {
        self.networks
            .iter()
            .position(|network| network.subnet.contains(ip))
    }

    /// Why the pool does not hand out `ip`, naming the subnet; `None` if it does.
    pub fn not_handed_out(&self, ip: IpAddr) -> Option<NotHandedOut> {
        if let Some(index) = self
            .networks
            .iter()
            .position(|network| network.gateway == Some(ip))
        {
            return Some(NotHandedOut::Gateway {
                index,
                subnet: self.networks[index].subnet,
            });
        }
        if self.allocatable.contains(ip) {
            return None;
        }
        if !self.configured.contains(ip) {
            return Some(NotHandedOut::OutsideEverySubnet {
                subnets: self.networks.iter().map(|n| n.subnet).collect(),
            });
        }
        let reserved_in = self.networks.iter().position(|network| {
            reserved(network.subnet)
                .iter()
                .any(|range| range.contains(ip))
        });
        Some(match reserved_in {
            Some(index) => NotHandedOut::Reserved {
                index,
                subnet: self.networks[index].subnet,
            },
            None => NotHandedOut::Excluded,
        })
    }
}

/// How messages name subnet `index` of [`ParsedPool::networks`]: the pool's own by its
/// `spec.addresses`, an additional one by its entry of `spec.additionalSubnets`.
pub fn subnet_field(index: usize) -> String {
    match index.checked_sub(1) {
        None => "spec.addresses".into(),
        Some(additional) => format!("spec.{}", Field::Subnet(additional)),
    }
}

/// Why an IP pool does not hand out an address, naming the subnet concerned, for the messages
/// of a pre-allocation that names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotHandedOut {
    /// The gateway of subnet `index` (see [`subnet_field`]).
    Gateway { index: usize, subnet: Subnet },
    /// In none of the subnets' `addresses`.
    OutsideEverySubnet { subnets: Vec<Subnet> },
    /// The network address (or IPv4 broadcast address) of subnet `index`, without
    /// `allocateReservedIPAddresses`.
    Reserved { index: usize, subnet: Subnet },
    /// In `excludedAddresses`.
    Excluded,
}

impl std::fmt::Display for NotHandedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotHandedOut::Gateway { index: 0, .. } => {
                f.write_str("it is the pool's gateway (spec.gateway)")
            }
            NotHandedOut::Gateway { index, subnet } => write!(
                f,
                "it is the pool's gateway of subnet {subnet} ({}.gateway)",
                subnet_field(*index)
            ),
            NotHandedOut::OutsideEverySubnet { subnets } => {
                let named: Vec<String> = subnets
                    .iter()
                    .enumerate()
                    .map(|(index, subnet)| format!("{} (subnet {subnet})", addresses_field(index)))
                    .collect();
                match named.as_slice() {
                    [one] => write!(f, "the pool does not hand it out: it is outside {one}"),
                    _ => write!(
                        f,
                        "the pool does not hand it out: it is outside the addresses of every subnet: {}",
                        named.join(", ")
                    ),
                }
            }
            NotHandedOut::Reserved { index, subnet } => write!(
                f,
                "the pool does not hand it out: it is the network or broadcast address of subnet {subnet} ({}); spec.allocateReservedIPAddresses hands it out",
                subnet_field(*index)
            ),
            NotHandedOut::Excluded => {
                f.write_str("the pool does not hand it out: it is in spec.excludedAddresses")
            }
        }
    }
}

/// `spec.addresses`, or `spec.additionalSubnets[i].addresses`.
fn addresses_field(index: usize) -> String {
    match index {
        0 => subnet_field(0),
        _ => format!("{}.addresses", subnet_field(index)),
    }
}

/// How the fields of one subnet are named in errors: the spec's own, or an additional subnet's.
#[derive(Clone, Copy)]
enum SubnetFields {
    Own,
    Additional(usize),
}

impl SubnetFields {
    fn address(self, entry: usize) -> Field {
        match self {
            SubnetFields::Own => Field::Addresses(entry),
            SubnetFields::Additional(subnet) => Field::SubnetAddresses { subnet, entry },
        }
    }

    fn prefix(self) -> Field {
        match self {
            SubnetFields::Own => Field::Prefix,
            SubnetFields::Additional(index) => Field::SubnetPrefix(index),
        }
    }

    fn gateway(self) -> Field {
        match self {
            SubnetFields::Own => Field::Gateway,
            SubnetFields::Additional(index) => Field::SubnetGateway(index),
        }
    }

    /// How an overlap message names the subnet.
    fn name(self) -> String {
        match self {
            SubnetFields::Own => "addresses".into(),
            SubnetFields::Additional(index) => Field::Subnet(index).to_string(),
        }
    }
}

/// One subnet's fields, each parsed on its own.
struct SubnetParts<'a> {
    fields: SubnetFields,
    texts: &'a [String],
    addresses: Vec<(usize, AddrRange)>,
    prefix: Option<u8>,
    gateway: Option<IpAddr>,
}

impl<'a> SubnetParts<'a> {
    /// Parses one subnet's addresses; the pool family is `pool`, or else that of the first valid
    /// address.
    fn parse_addresses(
        fields: SubnetFields,
        texts: &'a [String],
        pool: Option<Family>,
        errors: &mut Vec<SpecError>,
    ) -> Self {
        let addresses = parse_entries(
            texts,
            |entry| fields.address(entry),
            parse_entry,
            pool,
            errors,
        );
        SubnetParts {
            fields,
            texts,
            addresses,
            prefix: None,
            gateway: None,
        }
    }

    /// Parses the subnet's gateway and prefix, once its family is known (if it can be).
    fn parse_network(
        mut self,
        prefix: i64,
        gateway: Option<&str>,
        pool: Option<Family>,
        errors: &mut Vec<SpecError>,
    ) -> Self {
        let family = pool.or_else(|| self.family());
        self.gateway = parse_gateway(gateway, family, self.fields.gateway(), errors);
        self.prefix = check_prefix(prefix, family, self.fields.prefix(), errors);
        self
    }

    fn family(&self) -> Option<Family> {
        self.addresses.first().map(|(_, range)| range.family())
    }

    /// The subnet's network, from its lowest address and prefix, and its addresses; every address
    /// (and for an additional subnet, the gateway) must lie inside. `None` if the parts are not
    /// all valid (already reported).
    fn build(&self, family: Family, errors: &mut Vec<SpecError>) -> Option<(Network, AddressSet)> {
        let prefix = self.prefix?;
        let configured = set_of(family, self.addresses.iter().map(|&(_, range)| range));
        let subnet = Subnet::containing(configured.first()?, prefix)?;
        check_inside_subnet(self.texts, &self.addresses, subnet, self.fields, errors);
        if let (SubnetFields::Additional(_), Some(gateway)) = (self.fields, self.gateway)
            && !subnet.contains(gateway)
        {
            errors.push(SpecError::GatewayOutsideSubnet {
                field: self.fields.gateway(),
                entry: gateway.to_string(),
                subnet,
            });
        }
        let network = Network {
            subnet,
            gateway: self.gateway,
        };
        Some((network, configured))
    }
}

impl PoolSpecInput {
    /// Validates and normalises the spec, reporting every problem found. Never panics.
    ///
    /// Cost: O(E log E) for E entries (of every subnet), plus O(S log S) for S subnets; no range
    /// is enumerated.
    pub fn parse(&self) -> Result<ParsedPool, SpecErrors> {
        let mut errors = Vec::new();
        if self.addresses.is_empty() {
            errors.push(SpecError::NoAddresses);
        }
        let own =
            SubnetParts::parse_addresses(SubnetFields::Own, &self.addresses, None, &mut errors);
        let family = own.family();
        let excluded = parse_entries(
            &self.excluded_addresses,
            Field::ExcludedAddresses,
            parse_entry,
            family,
            &mut errors,
        );
        let own = own.parse_network(self.prefix, self.gateway.as_deref(), family, &mut errors);
        let pre_allocations = parse_pre_allocations(&self.pre_allocations, family, &mut errors);
        let mut subnets = vec![own];
        for (index, subnet) in self.additional_subnets.iter().enumerate() {
            if subnet.addresses.is_empty() {
                errors.push(SpecError::NoSubnetAddresses {
                    field: Field::Subnet(index),
                });
            }
            let fields = SubnetFields::Additional(index);
            let parts =
                SubnetParts::parse_addresses(fields, &subnet.addresses, family, &mut errors)
                    .parse_network(
                        subnet.prefix,
                        subnet.gateway.as_deref(),
                        family,
                        &mut errors,
                    );
            subnets.push(parts);
        }

        let Some(family) = family.filter(|_| errors.is_empty()) else {
            return Err(
                SpecErrors::new(errors).unwrap_or_else(|| SpecErrors::one(SpecError::NoAddresses))
            );
        };
        let built: Vec<(Network, AddressSet)> = subnets
            .iter()
            .filter_map(|parts| parts.build(family, &mut errors))
            .collect();
        if built.len() != subnets.len() {
            errors.push(SpecError::NoAddresses);
        }
        check_disjoint(&subnets, &built, &mut errors);
        if let Some(errors) = SpecErrors::new(errors) {
            return Err(errors);
        }

        let mut configured = AddressSet::empty(family);
        let mut handed_out = AddressSet::empty(family);
        let mut removed: Vec<AddrRange> = excluded.iter().map(|&(_, range)| range).collect();
        for (network, addresses) in &built {
            configured = set_of(family, configured.ranges().chain(addresses.ranges()));
            let subnet_reserved = if self.allocate_reserved_ip_addresses {
                Vec::new()
            } else {
                reserved(network.subnet)
            };
            let usable = addresses.difference(&set_of(family, subnet_reserved));
            handed_out = set_of(family, handed_out.ranges().chain(usable.ranges()));
            removed.extend(network.gateway.map(AddrRange::single));
        }
        let allocatable = handed_out.difference(&set_of(family, removed));
        Ok(ParsedPool {
            networks: built.into_iter().map(|(network, _)| network).collect(),
            configured,
            allocatable,
            pre_allocations,
        })
    }
}

/// The subnets of one pool must not overlap: an address in two would have two prefixes. Two
/// networks either nest or are disjoint, so sorted by first address, an overlap shows between
/// neighbours. O(S log S).
fn check_disjoint(
    parts: &[SubnetParts<'_>],
    built: &[(Network, AddressSet)],
    errors: &mut Vec<SpecError>,
) {
    let mut order: Vec<(Subnet, SubnetFields)> = built
        .iter()
        .zip(parts)
        .map(|((network, _), parts)| (network.subnet, parts.fields))
        .collect();
    order.sort_by_key(|(subnet, _)| (subnet.network_bits(), subnet.prefix()));
    for pair in order.windows(2) {
        let ((outer, outer_fields), (inner, inner_fields)) = (pair[0], pair[1]);
        if outer.contains(inner.network()) {
            // Name the additional subnet (the later one written when both are).
            let ((subnet, fields), (other, other_fields)) = match (outer_fields, inner_fields) {
                (SubnetFields::Additional(a), SubnetFields::Additional(b)) if a > b => {
                    ((outer, outer_fields), (inner, inner_fields))
                }
                (SubnetFields::Additional(_), SubnetFields::Own) => {
                    ((outer, outer_fields), (inner, inner_fields))
                }
                _ => ((inner, inner_fields), (outer, outer_fields)),
            };
            let field = match fields {
                SubnetFields::Additional(index) => Field::Subnet(index),
                SubnetFields::Own => Field::Prefix,
            };
            errors.push(SpecError::SubnetsOverlap {
                field,
                subnet,
                other_field: other_fields.name(),
                other,
            });
        }
    }
}

/// Parses the `gateway`, unset if `None` or empty; it must be of the `pool` family if known.
pub(crate) fn parse_gateway(
    text: Option<&str>,
    pool: Option<Family>,
    field: Field,
    errors: &mut Vec<SpecError>,
) -> Option<IpAddr> {
    let text = text.filter(|text| !text.is_empty())?;
    let entry = || shorten(text);
    match parse_ip(text) {
        Err(reason) => {
            errors.push(SpecError::InvalidEntry {
                field,
                entry: entry(),
                reason,
            });
            None
        }
        Ok(ip) => match pool {
            Some(pool) if pool != Family::of(ip) => {
                errors.push(SpecError::MixedFamilies {
                    field,
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
    field: impl Fn(usize) -> Field,
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
fn check_prefix(
    prefix: i64,
    family: Option<Family>,
    field: Field,
    errors: &mut Vec<SpecError>,
) -> Option<u8> {
    let max = family.map_or(128, Family::bits);
    match u8::try_from(prefix) {
        Ok(valid) if (1..=max).contains(&valid) => Some(valid),
        _ => {
            errors.push(SpecError::InvalidPrefix {
                field,
                prefix,
                family,
            });
            None
        }
    }
}

fn check_inside_subnet(
    texts: &[String],
    addresses: &[(usize, AddrRange)],
    subnet: Subnet,
    fields: SubnetFields,
    errors: &mut Vec<SpecError>,
) {
    let outer = subnet.range();
    for &(index, range) in addresses {
        if !outer.contains_range(range) {
            errors.push(SpecError::OutsideSubnet {
                field: fields.address(index),
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
