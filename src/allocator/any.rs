//! One pool of either shape, as the controllers hold it: an IP pool hands out addresses, a prefix
//! pool sub-prefixes. Both are kept by the same interval core; this is the one place that tells
//! them apart, so the registry, the planner and the pool status have one path for both.
//!
//! Holds are recorded by address (an `IPAddress`'s `spec.address`, a reservation's address). In a
//! prefix pool an address stands for the whole sub-prefix that contains it, its *unit*: a
//! sub-prefix held by its first address, but also an address or a smaller sub-prefix that another
//! pool handed out inside it, so that overlapping pools never hand out a sub-prefix that covers an
//! address in use.

use std::net::IpAddr;

use super::addr::{Family, Subnet};
use super::counts::Counts;
use super::pool::Allocator;
use super::prefix::{ParsedPrefixPool, PrefixAllocator};
use super::set::AddressSet;
use super::spec::{Network, ParsedPool};

/// What a held block of addresses (an address, or a sub-prefix) uses in a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Footprint {
    /// One unit, named by the address that stands for it (see [`AnyAllocator::unit_of`]): the
    /// block fits in one of the pool's units.
    Unit(IpAddr),
    /// Every unit of the pool inside this block: it is larger than one unit (a sub-prefix held
    /// through a prefix pool seen from an IP pool, or from a prefix pool of longer sub-prefixes).
    Units(Subnet),
}

/// A validated pool spec of either shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ParsedSpec {
    Addresses(ParsedPool),
    Prefixes(ParsedPrefixPool),
}

impl ParsedSpec {
    /// The prefix length and gateway of the pool's own subnet (an IP pool's `prefix` and
    /// `gateway`; a prefix pool's allocation length and gateway).
    pub fn network(&self) -> (u8, Option<IpAddr>) {
        match self {
            ParsedSpec::Addresses(pool) => (pool.prefix(), pool.gateway()),
            ParsedSpec::Prefixes(pool) => (pool.allocation_prefix_length(), pool.gateway()),
        }
    }
}

impl ParsedSpec {
    /// The pre-allocations of an IP pool (prefix pools have none).
    pub fn pre_allocations(&self) -> &[super::PreAllocated] {
        match self {
            ParsedSpec::Addresses(pool) => pool.pre_allocations(),
            ParsedSpec::Prefixes(_) => &[],
        }
    }

    /// The subnets (of an IP pool) or prefixes (of a prefix pool) that a parent pool holds for
    /// this one.
    pub fn carved(&self) -> &[Subnet] {
        match self {
            ParsedSpec::Addresses(pool) => pool.carved(),
            ParsedSpec::Prefixes(pool) => pool.carved(),
        }
    }

    /// The gateway of the pool's own subnet, never handed out.
    pub fn gateway(&self) -> Option<IpAddr> {
        self.network().1
    }

    /// What every `IPAddress` of the pool carries besides its address, by subnet.
    pub fn networks(&self) -> Networks {
        match self {
            ParsedSpec::Addresses(pool) => Networks {
                own: self.network(),
                additional: pool.networks()[1..].to_vec(),
            },
            ParsedSpec::Prefixes(_) => Networks {
                own: self.network(),
                additional: Vec::new(),
            },
        }
    }
}

/// The prefix length and gateway an `IPAddress` of a pool carries, by the subnet its address
/// lies in: an additional subnet's, else the pool's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Networks {
    own: (u8, Option<IpAddr>),
    additional: Vec<Network>,
}

impl Networks {
    /// The pool's own prefix length and gateway.
    pub fn own(&self) -> (u8, Option<IpAddr>) {
        self.own
    }

    /// The prefix length and gateway for `ip`. O(subnets).
    pub fn of(&self, ip: IpAddr) -> (u8, Option<IpAddr>) {
        self.additional
            .iter()
            .find(|network| network.subnet.contains(ip))
            .map_or(self.own, |network| {
                (network.subnet.prefix(), network.gateway)
            })
    }
}

/// The allocation state of a pool of either shape.
#[derive(Clone, Debug)]
pub enum AnyAllocator {
    Addresses(Allocator),
    Prefixes(PrefixAllocator),
}

impl AnyAllocator {
    /// Everything free.
    pub fn new(spec: ParsedSpec) -> AnyAllocator {
        match spec {
            ParsedSpec::Addresses(pool) => {
                let order: Vec<_> = pool.networks().iter().map(|n| n.subnet.range()).collect();
                AnyAllocator::Addresses(Allocator::in_order(pool.into_allocatable(), order))
            }
            ParsedSpec::Prefixes(pool) => AnyAllocator::Prefixes(PrefixAllocator::new(pool)),
        }
    }

    /// The same pool with everything free again (to recount from the holds).
    pub fn emptied(&self) -> AnyAllocator {
        match self {
            AnyAllocator::Addresses(a) => AnyAllocator::Addresses(a.emptied()),
            AnyAllocator::Prefixes(a) => {
                AnyAllocator::Prefixes(PrefixAllocator::new(a.pool().clone()))
            }
        }
    }

    /// Every address that may be handed out, or lies in a sub-prefix that may: what holds and
    /// overlaps between pools are checked against.
    pub fn range(&self) -> &AddressSet {
        match self {
            AnyAllocator::Addresses(a) => a.pool(),
            AnyAllocator::Prefixes(a) => a.pool().allocatable(),
        }
    }

    /// Counts, in addresses or in sub-prefixes.
    pub fn counts(&self) -> Counts {
        match self {
            AnyAllocator::Addresses(a) => a.counts(),
            AnyAllocator::Prefixes(a) => a.counts(),
        }
    }

    /// Takes the next address (the lowest free one of the first subnet that has one, subnets in
    /// the order written), or the first address of the lowest free sub-prefix.
    pub fn allocate_next(&mut self) -> Option<IpAddr> {
        match self {
            AnyAllocator::Addresses(a) => a.allocate_next().ok(),
            AnyAllocator::Prefixes(a) => a.allocate_lowest().ok().map(|s| s.network()),
        }
    }

    /// The address that stands for the unit `ip` uses: `ip` itself in an IP pool; in a prefix
    /// pool the first address of the sub-prefix that contains it (an IPv4 address, which no
    /// prefix pool holds, stands for itself).
    pub fn unit_of(&self, ip: IpAddr) -> IpAddr {
        match self.sub_prefix(ip) {
            Some(sub_prefix) => sub_prefix.network(),
            None => ip,
        }
    }

    /// The prefix length of one unit: the family's width in an IP pool (one address), the
    /// allocation length in a prefix pool.
    pub fn unit_length(&self) -> u8 {
        match self {
            AnyAllocator::Addresses(a) => a.family().bits(),
            AnyAllocator::Prefixes(a) => a.allocation_prefix_length(),
        }
    }

    /// What the block `ip/length` (an address when `length` is the family's width) uses here.
    pub fn footprint(&self, ip: IpAddr, length: u8) -> Footprint {
        let family_bits = Family::of(ip).bits();
        let length = length.min(family_bits);
        let larger_than_a_unit = match self {
            AnyAllocator::Addresses(_) => length < family_bits,
            AnyAllocator::Prefixes(a) => {
                Family::of(ip) == a.family() && length < a.allocation_prefix_length()
            }
        };
        match Subnet::containing(ip, length).filter(|_| larger_than_a_unit) {
            Some(block) => Footprint::Units(block),
            None => Footprint::Unit(self.unit_of(ip)),
        }
    }

    /// Records that every unit inside `block` (a [`Footprint::Units`]) that lies in the pool is
    /// in use. Idempotent.
    pub fn mark_block_used(&mut self, block: Subnet) {
        match self {
            AnyAllocator::Addresses(a) => a.mark_block_used(block),
            AnyAllocator::Prefixes(a) => a.mark_block_used(block),
        }
    }

    /// Records that the unit of `ip` is in use (outside the pool: out of range). Idempotent.
    pub fn mark_used(&mut self, ip: IpAddr) {
        let sub_prefix = self.sub_prefix(ip);
        match (self, sub_prefix) {
            (AnyAllocator::Addresses(a), _) => {
                a.mark_used(ip);
            }
            (AnyAllocator::Prefixes(a), Some(sub_prefix)) => {
                // A sub-prefix of the pool's own length is always accepted.
                let _ = a.mark_used(sub_prefix);
            }
            (AnyAllocator::Prefixes(_), None) => {}
        }
    }

    /// Gives the unit of `ip` back; whether it was in use.
    pub fn release(&mut self, ip: IpAddr) -> bool {
        let sub_prefix = self.sub_prefix(ip);
        match (self, sub_prefix) {
            (AnyAllocator::Addresses(a), _) => a.release(ip),
            (AnyAllocator::Prefixes(a), Some(sub_prefix)) => a.release(sub_prefix),
            (AnyAllocator::Prefixes(_), None) => false,
        }
    }

    /// The sub-prefix of a prefix pool that contains `ip` (`None` in an IP pool, and for an
    /// address of the other family).
    fn sub_prefix(&self, ip: IpAddr) -> Option<Subnet> {
        match self {
            AnyAllocator::Prefixes(a) if Family::of(ip) == a.family() => {
                Subnet::containing(ip, a.allocation_prefix_length())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::{PoolSpecInput, PrefixPoolSpecInput};

    fn prefixes(prefixes: &[&str], length: i64) -> AnyAllocator {
        AnyAllocator::new(ParsedSpec::Prefixes(
            PrefixPoolSpecInput {
                prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
                allocation_prefix_length: Some(length),
                gateway: Some("fd00::1".into()),
                excluded_prefixes: Vec::new(),
            }
            .parse()
            .unwrap(),
        ))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_prefix_pool_hands_out_first_addresses_of_aligned_sub_prefixes() {
        let mut pool = prefixes(&["fd00::/62"], 64);
        assert_eq!(pool.allocate_next(), Some(ip("fd00::")));
        assert_eq!(pool.allocate_next(), Some(ip("fd00:0:0:1::")));
        assert_eq!(pool.counts().total, 4);
        assert_eq!(pool.counts().used, 2);
    }

    #[test]
    fn an_address_inside_a_sub_prefix_holds_the_whole_sub_prefix() {
        let mut pool = prefixes(&["fd00::/62"], 64);
        assert_eq!(pool.unit_of(ip("fd00::5")), ip("fd00::"));
        pool.mark_used(ip("fd00::5"));
        assert_eq!(pool.allocate_next(), Some(ip("fd00:0:0:1::")));
        assert!(pool.release(ip("fd00::7")), "same unit");
        assert_eq!(pool.allocate_next(), Some(ip("fd00::")));
        pool.mark_used(ip("10.0.0.1"));
        assert!(!pool.release(ip("10.0.0.1")), "IPv4 is never held here");
    }

    #[test]
    fn network_is_the_allocation_length_and_gateway_of_a_prefix_pool() {
        let spec = ParsedSpec::Prefixes(
            PrefixPoolSpecInput {
                prefixes: vec!["fd06::/48".into()],
                allocation_prefix_length: Some(56),
                gateway: Some("fd06::1".into()),
                excluded_prefixes: Vec::new(),
            }
            .parse()
            .unwrap(),
        );
        assert_eq!(spec.network(), (56, Some(ip("fd06::1"))));
        let ip_pool = ParsedSpec::Addresses(
            PoolSpecInput {
                addresses: vec!["10.0.0.0/30".into()],
                prefix: 24,
                gateway: None,
                excluded_addresses: Vec::new(),
                allocate_reserved_ip_addresses: true,
                pre_allocations: Vec::new(),
                additional_subnets: Vec::new(),
            }
            .parse()
            .unwrap(),
        );
        assert_eq!(ip_pool.network(), (24, None));
        let mut allocator = AnyAllocator::new(ip_pool);
        assert_eq!(allocator.unit_of(ip("10.0.0.3")), ip("10.0.0.3"));
        assert_eq!(allocator.allocate_next(), Some(ip("10.0.0.0")));
        assert_eq!(allocator.emptied().counts().used, 0);
    }
}
