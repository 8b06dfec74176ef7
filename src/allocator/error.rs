//! Error types: spec problems (each naming the field, the entry and the reason) and allocation
//! failures.

use std::fmt;
use std::net::IpAddr;

use super::addr::{Family, Subnet};
use super::entry::EntryError;

/// The spec field an error is about, displayed the way the CRD spells it (`addresses[2]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    Addresses(usize),
    ExcludedAddresses(usize),
    Gateway,
    Prefix,
    /// Prefix pools' fields.
    Prefixes(usize),
    ExcludedPrefixes(usize),
    AllocationPrefixLength,
    /// The address of an IP pool's pre-allocation.
    PreAllocations(usize),
    /// An entry of `additionalSubnets` as a whole.
    Subnet(usize),
    /// `additionalSubnets[subnet].addresses[entry]`.
    SubnetAddresses {
        subnet: usize,
        entry: usize,
    },
    SubnetPrefix(usize),
    SubnetGateway(usize),
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Addresses(index) => write!(f, "addresses[{index}]"),
            Field::ExcludedAddresses(index) => write!(f, "excludedAddresses[{index}]"),
            Field::Gateway => f.write_str("gateway"),
            Field::Prefix => f.write_str("prefix"),
            Field::Prefixes(index) => write!(f, "prefixes[{index}]"),
            Field::ExcludedPrefixes(index) => write!(f, "excludedPrefixes[{index}]"),
            Field::AllocationPrefixLength => f.write_str("allocationPrefixLength"),
            Field::PreAllocations(index) => write!(f, "preAllocations[{index}].address"),
            Field::Subnet(index) => write!(f, "additionalSubnets[{index}]"),
            Field::SubnetAddresses { subnet, entry } => {
                write!(f, "additionalSubnets[{subnet}].addresses[{entry}]")
            }
            Field::SubnetPrefix(index) => write!(f, "additionalSubnets[{index}].prefix"),
            Field::SubnetGateway(index) => write!(f, "additionalSubnets[{index}].gateway"),
        }
    }
}

/// One problem in a pool spec.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// e.g. ``addresses[2] `10.0.0.5-10.0.0.1`: range end before start``.
    #[error("{field} `{entry}`: {reason}")]
    InvalidEntry {
        field: Field,
        entry: String,
        reason: EntryError,
    },
    /// e.g. ``mixed address families: addresses[1] `10.0.0.1` is IPv4 but the pool is IPv6``.
    #[error("mixed address families: {field} `{entry}` is {found} but the pool is {pool}")]
    MixedFamilies {
        field: Field,
        entry: String,
        found: Family,
        pool: Family,
    },
    #[error("addresses: at least one address is required")]
    NoAddresses,
    /// e.g. `additionalSubnets[1].addresses: at least one address is required`.
    #[error("{field}.addresses: at least one address is required")]
    NoSubnetAddresses { field: Field },
    /// e.g. `prefix 33: must be between 1 and 32 for IPv4`.
    #[error("{field} {prefix}: must be between 1 and {} for {}", max_prefix(*.family), family_name(*.family))]
    InvalidPrefix {
        /// `prefix`, or the prefix of an entry of `additionalSubnets`.
        field: Field,
        prefix: i64,
        /// The pool family, if any address entry parsed.
        family: Option<Family>,
    },
    /// e.g. ``addresses[0] `10.1.0.0/24` is outside the subnet 10.0.0.0/16 given by the lowest
    /// address and the prefix``.
    #[error(
        "{field} `{entry}` is outside the subnet {subnet} given by the lowest address and the prefix"
    )]
    OutsideSubnet {
        field: Field,
        entry: String,
        subnet: Subnet,
    },
    /// e.g. ``additionalSubnets[0].gateway `10.1.0.1` is outside the subnet 10.2.0.0/24 given by
    /// its lowest address and its prefix``.
    #[error(
        "{field} `{entry}` is outside the subnet {subnet} given by its lowest address and its prefix"
    )]
    GatewayOutsideSubnet {
        field: Field,
        entry: String,
        subnet: Subnet,
    },
    /// e.g. `additionalSubnets[0]: its subnet 10.0.0.0/23 overlaps the subnet 10.0.1.0/24 of
    /// addresses`: an address would have two prefixes.
    #[error(
        "{field}: its subnet {subnet} overlaps the subnet {other} of {other_field}; the subnets of one pool must not overlap"
    )]
    SubnetsOverlap {
        field: Field,
        subnet: Subnet,
        /// `addresses` (the pool's own subnet) or another `additionalSubnets[i]`.
        other_field: String,
        other: Subnet,
    },
    #[error("prefixes: at least one prefix is required")]
    NoPrefixes,
    /// e.g. ``prefixes[1] `fd00::/72` is longer than allocationPrefixLength 64``.
    #[error("{field} `{entry}` is longer than allocationPrefixLength {allocation}")]
    LongerThanAllocation {
        field: Field,
        entry: String,
        allocation: u8,
    },
    /// e.g. `allocationPrefixLength 0: must be between 1 and 128 for IPv6 prefixes`. An IPv4
    /// pool left at the default, 64, reads `allocationPrefixLength 64: must be between 1 and 32
    /// for IPv4 prefixes (64 is the default, for IPv6: set it)`.
    #[error(
        "allocationPrefixLength {length}: must be between 1 and {max} for {name} prefixes{hint}",
        max = family.bits(),
        name = family_name(Some(*family)),
        hint = if *family == Family::V4 && *length == i64::from(crate::allocator::DEFAULT_ALLOCATION_PREFIX_LENGTH) {
            " (64 is the default, for IPv6: set it)"
        } else {
            ""
        }
    )]
    InvalidAllocationPrefixLength { length: i64, family: Family },
}

fn max_prefix(family: Option<Family>) -> u8 {
    family.map_or(128, Family::bits)
}

fn family_name(family: Option<Family>) -> &'static str {
    match family {
        Some(Family::V4) => "IPv4",
        Some(Family::V6) => "IPv6",
        None => "either family",
    }
}

/// Every problem found in a pool spec (never empty), in field order. `Display` joins them with
/// `"; "`, which suits a condition message or an admission denial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecErrors(Vec<SpecError>);

impl SpecErrors {
    pub(crate) fn new(errors: Vec<SpecError>) -> Option<SpecErrors> {
        (!errors.is_empty()).then_some(SpecErrors(errors))
    }

    pub(crate) fn one(error: SpecError) -> SpecErrors {
        SpecErrors(vec![error])
    }

    pub fn errors(&self) -> &[SpecError] {
        &self.0
    }

    pub fn first(&self) -> &SpecError {
        &self.0[0]
    }

    pub fn into_vec(self) -> Vec<SpecError> {
        self.0
    }
}

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, error) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecErrors {}

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("the pool has no free address")]
    Exhausted,
    #[error("{0} is not in the pool")]
    NotInPool(IpAddr),
    #[error("{0} is already in use")]
    InUse(IpAddr),
}

/// Why a sub-prefix allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixAllocError {
    #[error("the pool has no free sub-prefix")]
    Exhausted,
    /// Not a network of the pool's family and allocation length, so no sub-prefix of this pool.
    #[error(
        "{prefix} is not a /{length} {name} sub-prefix, the only kind the pool hands out",
        name = family_name(Some(*family))
    )]
    NotASubPrefix {
        prefix: Subnet,
        family: Family,
        length: u8,
    },
    #[error("{0} is not in the pool")]
    NotInPool(Subnet),
    #[error("{0} is already in use")]
    InUse(Subnet),
    /// `allocationPrefixLength` is immutable: sub-prefixes of two lengths cannot share one index.
    #[error("allocationPrefixLength cannot change from {from} to {to}")]
    LengthChanged { from: u8, to: u8 },
}
