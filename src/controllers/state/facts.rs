//! What an API object tells the registry: a pool's state, what an `IPAddress` holds. Pure
//! functions of the objects, shared by the watches, the reconcilers and the audit.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::allocator::{
    Field, ParsedSpec, PoolSpecInput, PreAllocationInput, PrefixPoolSpecInput, SpecErrors, Subnet,
    SubnetInput, parse_network,
};
use crate::api::ObjectKey;
use crate::api::{
    IPAddress, IPPool, InClusterIPPoolSpec, InClusterIPPoolStatus, InClusterPrefixPoolSpec,
    PAUSED_ANNOTATION, ParentPool, PoolKey, PoolSpecRef,
};
use std::net::IpAddr;

use crate::controllers::state::reservation::held_length;
use crate::controllers::state::{HoldRecord, Holder, QueuedClaim, Unready};

/// What the pool can do now: its parsed spec, or why it cannot hand out addresses.
pub fn pool_state<P: IPPool>(pool: &P) -> Result<ParsedSpec, Unready> {
    if pool.meta().deletion_timestamp.is_some() {
        return Err(Unready::Deleting);
    }
    if pool.annotations().contains_key(PAUSED_ANNOTATION) {
        return Err(Unready::Paused);
    }
    parse_pool(
        pool.spec_of(),
        pool.pool_status(),
        pool.meta().namespace.as_deref(),
    )
}

/// A pool's spec with the sub-prefixes it carved from its parent (`status.carvedPrefixes`),
/// validated: what it hands out. A pool that names a parent and has neither addresses (prefixes)
/// of its own nor a carved sub-prefix waits for its parent ([`Unready::Carving`]). `namespace` is
/// the pool's (`None` for a global pool).
///
/// Each carved sub-prefix is one more subnet of an IP pool (after its own addresses, as
/// `additionalSubnets` are) or one more prefix of a prefix pool. Its first address is never
/// handed out, not even with `allocateReservedIPAddresses`, and a prefix pool never hands out
/// the sub-prefix it starts: that address names the parent's hold of the whole sub-prefix (its
/// reservation), and one name can hold one block only.
pub fn parse_pool(
    spec: PoolSpecRef<'_>,
    status: Option<&InClusterIPPoolStatus>,
    namespace: Option<&str>,
) -> Result<ParsedSpec, Unready> {
    let carved = carved_subnets(status)?;
    // The carved sub-prefixes are parsed as entries after the spec's own: an error may name
    // one by the position it takes there, which the message then tells.
    let invalid = |errors: SpecErrors, first_carved: &str| {
        Unready::Invalid(match carved.is_empty() {
            true => errors.to_string(),
            false => format!(
                "{errors} ({first_carved} and on are status.carvedPrefixes, carved from spec.parentPool)"
            ),
        })
    };
    if let Some(parent) = spec.parent_pool()
        && !spec.has_own_range()
        && carved.is_empty()
    {
        return Err(match parent_key(parent, namespace) {
            Some(parent) => Unready::Carving(parent),
            None => Unready::Invalid(format!(
                "spec.parentPool.poolRef names {} {}, not a prefix pool of inpool",
                parent.pool_ref.kind, parent.pool_ref.name
            )),
        });
    }
    match spec {
        PoolSpecRef::Addresses(spec) => {
            let mut input = PoolSpecInput::from(spec);
            input.excluded_addresses.extend(carved_starts(&carved));
            for &subnet in &carved {
                let subnet = carved_subnet_input(subnet);
                if input.addresses.is_empty() {
                    input.addresses = subnet.addresses;
                    input.prefix = subnet.prefix;
                    input.gateway = subnet.gateway;
                } else {
                    input.additional_subnets.push(subnet);
                }
            }
            let first_carved = match spec.addresses.is_empty() {
                true => "spec.addresses".to_string(),
                false => format!("spec.{}", Field::Subnet(spec_subnets(spec))),
            };
            let mut parsed = input.parse().map_err(|e| invalid(e, &first_carved))?;
            parsed.set_carved(carved);
            Ok(ParsedSpec::Addresses(parsed))
        }
        PoolSpecRef::Prefixes(spec) => {
            let length = spec.allocation_length();
            if let Some((index, subnet)) = carved
                .iter()
                .enumerate()
                .find(|(_, subnet)| i32::from(subnet.prefix()) > length)
            {
                return Err(Unready::Invalid(format!(
                    "status.carvedPrefixes[{index}] {subnet}, carved from spec.parentPool, is longer than spec.allocationPrefixLength ({length}): a pool splits its prefixes into sub-prefixes at least as long; make allocationPrefixLength at least {} (in a new pool: it cannot change) or give the parent a shorter allocationPrefixLength",
                    subnet.prefix()
                )));
            }
            let mut input = PrefixPoolSpecInput::from(spec);
            input
                .prefixes
                .extend(carved.iter().map(ToString::to_string));
            input.excluded_prefixes.extend(carved_starts(&carved));
            let first_carved = format!("spec.prefixes[{}]", spec.prefixes.len());
            let mut parsed = input.parse().map_err(|e| invalid(e, &first_carved))?;
            parsed.set_carved(carved);
            Ok(ParsedSpec::Prefixes(parsed))
        }
    }
}

/// The namespace of a pool's claims on its parent: `spec.parentPool.claimNamespace` if set (a
/// global pool's), else the pool's own.
pub fn claim_namespace<'a>(parent: &'a ParentPool, namespace: Option<&'a str>) -> &'a str {
    if parent.claim_namespace.is_empty() {
        namespace.unwrap_or_default()
    } else {
        &parent.claim_namespace
    }
}

/// The parent a pool's `spec.parentPool` names, as its claims on it name it: a prefix pool kind
/// of inpool's group, a namespaced one in the claims' namespace. `None` for anything else.
pub fn parent_key(parent: &ParentPool, namespace: Option<&str>) -> Option<PoolKey> {
    PoolKey::from_ref(&parent.pool_ref, claim_namespace(parent, namespace))
        .filter(|key| key.kind.is_prefix())
}

/// The sub-prefixes a pool carved (`status.carvedPrefixes`). inpool writes the list; an entry
/// that is no CIDR makes the pool invalid, naming it.
fn carved_subnets(status: Option<&InClusterIPPoolStatus>) -> Result<Vec<Subnet>, Unready> {
    let entries = status
        .and_then(|s| s.carved_prefixes.as_deref())
        .unwrap_or_default();
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            parse_network(&entry.prefix).map_err(|reason| {
                Unready::Invalid(format!(
                    "status.carvedPrefixes[{index}] `{}`: {reason}",
                    entry.prefix
                ))
            })
        })
        .collect()
}

/// How many `additionalSubnets` the spec writes.
fn spec_subnets(spec: &InClusterIPPoolSpec) -> usize {
    spec.additional_subnets.as_ref().map_or(0, Vec::len)
}

/// The first address of each carved sub-prefix, as an exclusion (see [`parse_pool`]).
fn carved_starts(carved: &[Subnet]) -> impl Iterator<Item = String> + '_ {
    carved.iter().map(|subnet| subnet.network().to_string())
}

/// A carved sub-prefix as an IP pool's subnet: the whole sub-prefix, its length, and as gateway
/// the first address after the network address (none in a sub-prefix with no room for one: an
/// IPv4 /31 or /32, an IPv6 /127 or /128).
fn carved_subnet_input(subnet: Subnet) -> SubnetInput {
    SubnetInput {
        addresses: vec![subnet.to_string()],
        prefix: i64::from(subnet.prefix()),
        gateway: carved_gateway(subnet).map(|ip| ip.to_string()),
    }
}

/// The gateway of a carved subnet: the first address after its network address, where the
/// subnet has an address for hosts beside it.
pub fn carved_gateway(subnet: Subnet) -> Option<IpAddr> {
    if subnet.family().bits() - subnet.prefix() < 2 {
        return None;
    }
    match subnet.network() {
        IpAddr::V4(v4) => Some(IpAddr::V4((u32::from(v4) + 1).into())),
        IpAddr::V6(v6) => Some(IpAddr::V6((u128::from(v6) + 1).into())),
    }
}

/// What the allocator's parser takes from an IP pool's spec (public: the tests' invariant check
/// reads a pool as inpool does).
impl From<&InClusterIPPoolSpec> for PoolSpecInput {
    fn from(spec: &InClusterIPPoolSpec) -> PoolSpecInput {
        PoolSpecInput {
            addresses: spec.addresses.clone(),
            prefix: i64::from(spec.prefix),
            gateway: spec.gateway.clone(),
            excluded_addresses: spec.excluded_addresses.clone().unwrap_or_default(),
            allocate_reserved_ip_addresses: spec.allocate_reserved_ip_addresses.unwrap_or(false),
            pre_allocations: spec
                .pre_allocations
                .iter()
                .flatten()
                .map(|entry| PreAllocationInput {
                    claim_namespace: entry.claim_namespace.clone(),
                    claim_name: entry.claim_name.clone(),
                    address: entry.address.clone(),
                })
                .collect(),
            additional_subnets: spec
                .additional_subnets
                .iter()
                .flatten()
                .map(|subnet| SubnetInput {
                    addresses: subnet.addresses.clone(),
                    prefix: i64::from(subnet.prefix),
                    gateway: subnet.gateway.clone(),
                })
                .collect(),
        }
    }
}

impl From<&InClusterPrefixPoolSpec> for PrefixPoolSpecInput {
    fn from(spec: &InClusterPrefixPoolSpec) -> Self {
        PrefixPoolSpecInput {
            prefixes: spec.prefixes.clone(),
            allocation_prefix_length: spec.allocation_prefix_length.map(i64::from),
            gateway: spec.gateway.clone(),
            excluded_prefixes: spec.excluded_prefixes.clone().unwrap_or_default(),
        }
    }
}

/// An `IPAddress`'s namespace/name (also its claim's).
pub fn address_key(address: &IPAddress) -> ObjectKey {
    ObjectKey::new(
        &address.namespace().unwrap_or_default(),
        &address.name_any(),
    )
}

/// What an `IPAddress` holds, if it belongs to one of inpool's pool kinds.
pub fn address_hold(address: &IPAddress) -> Option<HoldRecord> {
    let namespace = address.namespace().unwrap_or_default();
    let pool = PoolKey::from_ref(&address.spec.pool_ref, &namespace)?;
    let ip: IpAddr = address.spec.address.parse().ok()?;
    // An IP pool's `IPAddress` carries its subnet's prefix, but holds one address.
    let length = if pool.kind.is_prefix() {
        held_length(ip, Some(address.spec.prefix))
    } else {
        HoldRecord::address_length(ip)
    };
    Some(HoldRecord {
        scope: pool.scope(),
        pool,
        ip,
        length,
        holder: Holder::Claim(ObjectKey::new(&namespace, &address.spec.claim_ref.name)),
    })
}

/// A claim's place in its pool's queue (see [`QueuedClaim`]): what the registry orders waiting
/// claims by, and what `kubectl inpool` shows.
pub fn queued(created: Option<&Time>, key: &ObjectKey) -> QueuedClaim {
    QueuedClaim {
        created: created.map(|t| t.0.to_string()).unwrap_or_default(),
        claim: key.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::{AnyAllocator, parse_network};
    use serde_json::json;

    fn status(prefixes: &[&str]) -> InClusterIPPoolStatus {
        let carved: Vec<_> = prefixes
            .iter()
            .enumerate()
            .map(|(i, p)| json!({"claimName": format!("c-{i}"), "prefix": p}))
            .collect();
        serde_json::from_value(json!({ "carvedPrefixes": carved })).unwrap()
    }

    fn parent() -> serde_json::Value {
        json!({"poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterPrefixPool",
            "name": "p"}})
    }

    /// The lowest block each parsed pool hands out.
    fn first_handed_out(parsed: ParsedSpec) -> IpAddr {
        let mut allocator = AnyAllocator::new(parsed);
        allocator.allocate_next().expect("a free block")
    }

    #[test]
    fn the_start_of_a_carved_sub_prefix_is_never_handed_out() {
        // A prefix pool of /64s carved a /56: its first /64 names the parent's hold.
        let spec: InClusterPrefixPoolSpec =
            serde_json::from_value(json!({"parentPool": parent(), "allocationPrefixLength": 64}))
                .unwrap();
        let parsed = parse_pool(
            PoolSpecRef::Prefixes(&spec),
            Some(&status(&["fd00:10::/56"])),
            Some("ns"),
        )
        .unwrap();
        assert_eq!(parsed.carved(), [parse_network("fd00:10::/56").unwrap()]);
        assert_eq!(
            first_handed_out(parsed),
            "fd00:10:0:1::".parse::<IpAddr>().unwrap()
        );
        // An IP pool that hands out reserved addresses still keeps a carved subnet's first.
        let spec: InClusterIPPoolSpec = serde_json::from_value(
            json!({"parentPool": parent(), "allocateReservedIPAddresses": true}),
        )
        .unwrap();
        let parsed = parse_pool(
            PoolSpecRef::Addresses(&spec),
            Some(&status(&["10.20.0.0/26"])),
            Some("ns"),
        )
        .unwrap();
        // .0 names the parent's hold, .1 is the gateway.
        assert_eq!(
            first_handed_out(parsed),
            "10.20.0.2".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn an_error_about_a_carved_prefix_says_it_is_one() {
        let spec: InClusterPrefixPoolSpec = serde_json::from_value(json!({
            "prefixes": ["fd00:20::/48"], "parentPool": parent(), "allocationPrefixLength": 64,
        }))
        .unwrap();
        let Err(Unready::Invalid(message)) = parse_pool(
            PoolSpecRef::Prefixes(&spec),
            Some(&status(&["10.20.0.0/26"])),
            Some("ns"),
        ) else {
            panic!("an IPv4 prefix carved for an IPv6 pool");
        };
        assert!(
            message.contains("spec.prefixes[1]")
                && message.ends_with(
                    "(spec.prefixes[1] and on are status.carvedPrefixes, carved from spec.parentPool)"
                ),
            "{message}"
        );
    }
}
