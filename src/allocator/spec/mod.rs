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
//!
//! This file holds the types, from what is written to what is validated; [`parse`] holds the
//! rules that take one to the other, with the error each field gets.

use std::net::IpAddr;

use super::addr::{AddrRange, Family, Subnet};
use super::error::Field;
use super::set::AddressSet;

mod parse;

pub(crate) use parse::{parse_entries, parse_gateway, set_of};

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
    /// The subnets that another pool holds for this one, whole (carved from a parent): a hold
    /// covering one of them (the parent's, or an ancestor's hold of the parent's own carved
    /// prefix) is what makes it this pool's, never a use of its addresses.
    carved: Vec<Subnet>,
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

    /// The subnets carved for this pool from a parent (see [`ParsedPool::set_carved`]).
    pub fn carved(&self) -> &[Subnet] {
        &self.carved
    }

    /// Records which of the pool's subnets a parent pool holds for it, whole: the parent's hold
    /// of one of them does not use the addresses it gives this pool.
    pub fn set_carved(&mut self, carved: Vec<Subnet>) {
        self.carved = carved;
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

fn reserved(subnet: Subnet) -> Vec<AddrRange> {
    let mut reserved = vec![AddrRange::single(subnet.network())];
    if subnet.family() == Family::V4 {
        reserved.push(AddrRange::single(subnet.last()));
    }
    reserved
}
