//! [`PoolSpecInput::parse`]: the rules that take a spec as written to a [`ParsedPool`], each
//! field parsed on its own so that every fault of a spec is reported at once, naming its field.
use std::net::IpAddr;

use super::super::addr::{AddrRange, Family, Subnet};
use super::super::entry::{EntryError, parse_entry, parse_ip, shorten};
use super::super::error::{Field, SpecError, SpecErrors};
use super::super::set::AddressSet;
use super::{Network, ParsedPool, PoolSpecInput, PreAllocated, PreAllocationInput, reserved};

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
            carved: Vec::new(),
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

pub(crate) fn set_of(family: Family, ranges: impl IntoIterator<Item = AddrRange>) -> AddressSet {
    // Every range was checked against `family` while parsing, so this never falls back.
    AddressSet::from_ranges(family, ranges).unwrap_or_else(|_| AddressSet::empty(family))
}
