//! What an API object tells the registry: a pool's state, what an `IPAddress` holds. Pure
//! functions of the objects, shared by the watches, the reconcilers and the audit.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::allocator::{
    ParsedSpec, PoolSpecInput, PreAllocationInput, PrefixPoolSpecInput, SpecErrors, SubnetInput,
};
use crate::api::ObjectKey;
use crate::api::{
    IPAddress, IPPool, InClusterIPPoolSpec, InClusterPrefixPoolSpec, PAUSED_ANNOTATION, PoolKey,
    PoolSpecRef,
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
    parse_spec(pool.spec_of()).map_err(|errors| Unready::Invalid(errors.to_string()))
}

/// A pool's spec, validated, whatever its shape.
pub fn parse_spec(spec: PoolSpecRef<'_>) -> Result<ParsedSpec, SpecErrors> {
    match spec {
        PoolSpecRef::Addresses(spec) => {
            PoolSpecInput::from(spec).parse().map(ParsedSpec::Addresses)
        }
        PoolSpecRef::Prefixes(spec) => PrefixPoolSpecInput::from(spec)
            .parse()
            .map(ParsedSpec::Prefixes),
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
