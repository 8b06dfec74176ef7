//! Address families, the `IpAddr` ⇄ `u128` mapping, and the public range and subnet types.
//!
//! Both families live in `u128` so that one set of interval algorithms serves IPv4 and IPv6;
//! an IPv4 address is its 32-bit value, zero-extended. The family travels alongside.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IP address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// The family of `ip`. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is IPv6, as in Go's
    /// `netip` and therefore in the reference provider.
    pub fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// Address width in bits: 32 or 128.
    pub const fn bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }

    /// The highest address of the family as an integer.
    pub const fn max_value(self) -> u128 {
        match self {
            Family::V4 => u32::MAX as u128,
            Family::V6 => u128::MAX,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

/// `ip` as (family, integer value).
pub(crate) fn to_bits(ip: IpAddr) -> (Family, u128) {
    match ip {
        IpAddr::V4(v4) => (Family::V4, u128::from(u32::from(v4))),
        IpAddr::V6(v6) => (Family::V6, u128::from(v6)),
    }
}

/// The address with integer value `value` in `family`. IPv4 keeps the low 32 bits; callers only
/// pass values they got from [`to_bits`] or derived within the family's range.
pub(crate) fn from_bits(family: Family, value: u128) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::from((value & 0xffff_ffff) as u32)),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

/// Canonical text of an address: dotted quad for IPv4, RFC 5952 for IPv6 (lower case, longest
/// run of zero groups compressed, `::ffff:a.b.c.d` for IPv4-mapped). This is what `Display` of
/// `std::net` produces; the function exists to make the guarantee explicit and tested.
pub fn canonical(ip: IpAddr) -> String {
    ip.to_string()
}

/// A non-empty inclusive range of addresses of one family.
///
/// Displayed as `a` for a single address and `a-b` otherwise, which the entry parser accepts
/// back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AddrRange {
    family: Family,
    first: u128,
    last: u128,
}

impl AddrRange {
    /// The range `first..=last`; `None` if the families differ or `last < first`.
    pub fn new(first: IpAddr, last: IpAddr) -> Option<AddrRange> {
        let (family, first) = to_bits(first);
        let (last_family, last) = to_bits(last);
        (family == last_family && first <= last).then_some(AddrRange {
            family,
            first,
            last,
        })
    }

    /// The range holding only `ip`.
    pub fn single(ip: IpAddr) -> AddrRange {
        let (family, value) = to_bits(ip);
        AddrRange {
            family,
            first: value,
            last: value,
        }
    }

    pub(crate) fn from_bits(family: Family, first: u128, last: u128) -> AddrRange {
        debug_assert!(first <= last && last <= family.max_value());
        AddrRange {
            family,
            first,
            last,
        }
    }

    pub fn family(&self) -> Family {
        self.family
    }

    pub fn first(&self) -> IpAddr {
        from_bits(self.family, self.first)
    }

    pub fn last(&self) -> IpAddr {
        from_bits(self.family, self.last)
    }

    /// Number of addresses, saturating at `u128::MAX` for the whole IPv6 space (2^128).
    pub fn len(&self) -> u128 {
        interval_len(self.first, self.last)
    }

    /// Always false: a range holds at least one address. Present for API symmetry.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let (family, value) = to_bits(ip);
        family == self.family && self.first <= value && value <= self.last
    }

    /// Whether every address of `other` is in this range.
    pub fn contains_range(&self, other: AddrRange) -> bool {
        self.family == other.family && self.first <= other.first && other.last <= self.last
    }

    pub(crate) fn bounds(&self) -> (u128, u128) {
        (self.first, self.last)
    }
}

impl fmt::Display for AddrRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first())
        } else {
            write!(f, "{}-{}", self.first(), self.last())
        }
    }
}

/// A network: an address with its host bits zero, and a prefix length. For an IP pool, the
/// subnet its addresses must lie in (the network of the lowest configured address with the
/// pool's `prefix` length); for a prefix pool, one sub-prefix it hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Subnet {
    family: Family,
    network: u128,
    prefix: u8,
}

impl Subnet {
    /// The subnet of length `prefix` that holds `ip`; `None` if `prefix` exceeds the family width.
    pub fn containing(ip: IpAddr, prefix: u8) -> Option<Subnet> {
        let (family, value) = to_bits(ip);
        if prefix > family.bits() {
            return None;
        }
        Some(Subnet {
            family,
            network: value & !host_mask(family, prefix),
            prefix,
        })
    }

    /// The network `ip/prefix`; `None` if `prefix` exceeds the family width or `ip` has host
    /// bits set (is not network-aligned).
    pub fn new(ip: IpAddr, prefix: u8) -> Option<Subnet> {
        Subnet::containing(ip, prefix).filter(|subnet| subnet.network() == ip)
    }

    /// From a network value whose host bits are zero.
    pub(crate) fn from_bits(family: Family, network: u128, prefix: u8) -> Subnet {
        debug_assert!(prefix <= family.bits() && network & host_mask(family, prefix) == 0);
        Subnet {
            family,
            network,
            prefix,
        }
    }

    pub fn family(&self) -> Family {
        self.family
    }

    pub(crate) fn network_bits(&self) -> u128 {
        self.network
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// The first address (IPv4 network address, IPv6 subnet-router anycast address).
    pub fn network(&self) -> IpAddr {
        from_bits(self.family, self.network)
    }

    /// The last address (the IPv4 broadcast address).
    pub fn last(&self) -> IpAddr {
        from_bits(self.family, self.last_bits())
    }

    pub fn range(&self) -> AddrRange {
        AddrRange::from_bits(self.family, self.network, self.last_bits())
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.range().contains(ip)
    }

    pub(crate) fn last_bits(&self) -> u128 {
        self.network | host_mask(self.family, self.prefix)
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network(), self.prefix)
    }
}

/// The host bits of a `prefix`-long network in `family`, as a mask over the family's width.
pub(crate) fn host_mask(family: Family, prefix: u8) -> u128 {
    let host_bits = u32::from(family.bits().saturating_sub(prefix));
    if host_bits >= 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    }
}

/// `last - first + 1`, saturating at `u128::MAX` for the one interval that holds 2^128 addresses.
pub(crate) fn interval_len(first: u128, last: u128) -> u128 {
    last.saturating_sub(first).saturating_add(1)
}
