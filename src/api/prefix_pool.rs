//! inpool's prefix pools: `ipam.cluster.x-k8s.io/v1alpha2` [`InClusterPrefixPool`] (namespaced)
//! and [`GlobalInClusterPrefixPool`] (cluster-scoped), field-compatible with the reference
//! in-cluster provider's prefix pools. A prefix pool hands out IPv6 sub-prefixes of
//! `allocationPrefixLength` (one /64 per machine out of a /48, say); the claim's `IPAddress` gets
//! the sub-prefix's first address and the allocation length. Both kinds share one spec
//! ([`InClusterPrefixPoolSpec`]) and the IP pools' status shape ([`InClusterIPPoolStatus`]:
//! `ipAddresses` counts sub-prefixes), as in the reference.
//!
//! The reference validates prefix pools in a webhook; here every single-object rule of it is a CEL
//! rule in the CRD (see [`rules`]), and the immutability of `allocationPrefixLength` a transition
//! rule.

// kube-derive's `printcolumn(type_ = ...)` repeats keys by design; clippy reads them as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::PoolKind;
use super::pool::{
    IPPool, InClusterIPPoolStatus, MAX_ADDRESS_ENTRIES, MAX_ADDRESS_TEXT, PoolSpecRef,
};

/// The allocation length the reference defaults to.
pub const DEFAULT_ALLOCATION_PREFIX_LENGTH: i32 = 64;

/// Spec of a prefix pool, shared by [`InClusterPrefixPool`] and [`GlobalInClusterPrefixPool`]
/// (JSON names and types as in the reference provider's `InClusterPrefixPoolSpec`).
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "ipam.cluster.x-k8s.io",
    version = "v1alpha2",
    kind = "InClusterPrefixPool",
    plural = "inclusterprefixpools",
    singular = "inclusterprefixpool",
    shortname = "icpp",
    namespaced,
    status = "InClusterIPPoolStatus",
    category = "cluster-api",
    category = "ipam",
    label("clusterctl.cluster.x-k8s.io/move-hierarchy", ""),
    doc = "InClusterPrefixPool is a namespaced pool of IPv6 prefixes whose sub-prefixes inpool hands out to IPAddressClaims of the same namespace.",
    printcolumn(
        name = "Prefixes",
        type_ = "string",
        json_path = ".spec.prefixes",
        description = "List of prefixes to allocate sub-prefixes from"
    ),
    printcolumn(
        name = "Total",
        type_ = "integer",
        json_path = ".status.ipAddresses.total",
        description = "Count of allocatable sub-prefixes in the pool"
    ),
    printcolumn(
        name = "Free",
        type_ = "integer",
        json_path = ".status.ipAddresses.free",
        description = "Count of unallocated sub-prefixes in the pool"
    ),
    printcolumn(
        name = "Used",
        type_ = "integer",
        json_path = ".status.ipAddresses.used",
        description = "Count of allocated sub-prefixes in the pool"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Status of the pool's Ready condition"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the pool was created"
    ),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "InClusterPrefixPoolSpec defines the desired state of a prefix pool: the IPv6 prefixes it splits, the length of the sub-prefixes it hands out, and their gateway."
)]
#[x_kube(validation = rules::prefixes_fit_the_allocation_length())]
pub struct InClusterPrefixPoolSpec {
    /// Prefixes is a list of IPv6 CIDRs from which sub-prefixes are allocated. Each entry must
    /// be a network-aligned CIDR (e.g. `fd00::/48`).
    #[schemars(schema_with = "prefixes_schema")]
    pub prefixes: Vec<String>,

    /// AllocationPrefixLength is the prefix length of each allocated sub-prefix (e.g. 64 means
    /// /64 allocations). Defaults to 64. Must be >= the prefix length of each entry in Prefixes
    /// and <= 128; it cannot change once the pool exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "allocation_prefix_length_schema")]
    pub allocation_prefix_length: Option<i32>,

    /// Gateway is the next-hop IPv6 address carried unchanged to every allocated
    /// IPAddress.Spec.Gateway. Unlike IP pools, the gateway does not block any prefix from being
    /// allocated: it is informational only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "gateway_schema")]
    pub gateway: Option<String>,

    /// ExcludedPrefixes lists IPv6 addresses, CIDRs or `first-last` ranges to exclude from
    /// allocation. Any candidate sub-prefix overlapping an excluded entry is skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "excluded_prefixes_schema")]
    pub excluded_prefixes: Option<Vec<String>>,
}

impl InClusterPrefixPoolSpec {
    /// A spec with the given prefixes, everything else unset (the allocation length defaults to
    /// [`DEFAULT_ALLOCATION_PREFIX_LENGTH`] on the API server).
    pub fn new<S: Into<String>>(prefixes: impl IntoIterator<Item = S>) -> Self {
        Self {
            prefixes: prefixes.into_iter().map(Into::into).collect(),
            allocation_prefix_length: None,
            gateway: None,
            excluded_prefixes: None,
        }
    }

    /// The length of the sub-prefixes handed out.
    pub fn allocation_length(&self) -> i32 {
        self.allocation_prefix_length
            .unwrap_or(DEFAULT_ALLOCATION_PREFIX_LENGTH)
    }
}

/// Spec of a [`GlobalInClusterPrefixPool`]: the same [`InClusterPrefixPoolSpec`] (same JSON, same
/// schema and rules), wrapped only because each kind needs its own derive. Dereferences to the
/// inner spec.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ipam.cluster.x-k8s.io",
    version = "v1alpha2",
    kind = "GlobalInClusterPrefixPool",
    plural = "globalinclusterprefixpools",
    singular = "globalinclusterprefixpool",
    shortname = "gicpp",
    status = "InClusterIPPoolStatus",
    category = "cluster-api",
    category = "ipam",
    label("clusterctl.cluster.x-k8s.io/move-hierarchy", ""),
    doc = "GlobalInClusterPrefixPool is a cluster-scoped pool of IPv6 prefixes whose sub-prefixes inpool hands out to IPAddressClaims of any namespace.",
    printcolumn(
        name = "Prefixes",
        type_ = "string",
        json_path = ".spec.prefixes",
        description = "List of prefixes to allocate sub-prefixes from"
    ),
    printcolumn(
        name = "Total",
        type_ = "integer",
        json_path = ".status.ipAddresses.total",
        description = "Count of allocatable sub-prefixes in the pool"
    ),
    printcolumn(
        name = "Free",
        type_ = "integer",
        json_path = ".status.ipAddresses.free",
        description = "Count of unallocated sub-prefixes in the pool"
    ),
    printcolumn(
        name = "Used",
        type_ = "integer",
        json_path = ".status.ipAddresses.used",
        description = "Count of allocated sub-prefixes in the pool"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Status of the pool's Ready condition"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the pool was created"
    ),
    derive = "PartialEq"
)]
#[serde(transparent)]
#[schemars(
    description = "InClusterPrefixPoolSpec defines the desired state of a prefix pool: the IPv6 prefixes it splits, the length of the sub-prefixes it hands out, and their gateway."
)]
pub struct GlobalInClusterPrefixPoolSpec(pub InClusterPrefixPoolSpec);

wraps_spec!(GlobalInClusterPrefixPoolSpec, InClusterPrefixPoolSpec);

impl IPPool for InClusterPrefixPool {
    const KIND: PoolKind = PoolKind::InClusterPrefix;
    fn spec_of(&self) -> PoolSpecRef<'_> {
        PoolSpecRef::Prefixes(&self.spec)
    }
    fn pool_status(&self) -> Option<&InClusterIPPoolStatus> {
        self.status.as_ref()
    }
}

impl IPPool for GlobalInClusterPrefixPool {
    const KIND: PoolKind = PoolKind::GlobalPrefix;
    fn spec_of(&self) -> PoolSpecRef<'_> {
        PoolSpecRef::Prefixes(&self.spec.0)
    }
    fn pool_status(&self) -> Option<&InClusterIPPoolStatus> {
        self.status.as_ref()
    }
}

fn prefixes_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "Prefixes is a list of IPv6 CIDRs from which sub-prefixes are allocated. Each entry must be a network-aligned CIDR (e.g. \"fd00::/48\").",
        "maxItems": MAX_ADDRESS_ENTRIES,
        "items": {
            "type": "string",
            "maxLength": MAX_ADDRESS_TEXT,
            "x-kubernetes-validations": [rules::prefix_is_ipv6_cidr(), rules::prefix_is_aligned()]
        },
        "x-kubernetes-validations": [rules::prefixes_not_empty()]
    })
}

fn allocation_prefix_length_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "default": DEFAULT_ALLOCATION_PREFIX_LENGTH,
        "minimum": 1,
        "maximum": 128,
        "description": "AllocationPrefixLength is the prefix length of each allocated sub-prefix (e.g. 64 means /64 allocations). Defaults to 64. Must be >= the prefix length of each entry in Prefixes and <= 128; it cannot change once the pool exists.",
        "x-kubernetes-validations": [rules::allocation_length_immutable()]
    })
}

fn gateway_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": MAX_ADDRESS_TEXT,
        "description": "Gateway is the next-hop IPv6 address carried unchanged to every allocated IPAddress.Spec.Gateway; informational only (it blocks nothing).",
        "x-kubernetes-validations": [rules::gateway_is_ipv6()]
    })
}

fn excluded_prefixes_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "ExcludedPrefixes lists IPv6 addresses, CIDRs or first-last ranges to exclude from allocation. Any candidate sub-prefix overlapping an excluded entry is skipped.",
        "maxItems": MAX_ADDRESS_ENTRIES,
        "items": {
            "type": "string",
            "maxLength": MAX_ADDRESS_TEXT,
            "x-kubernetes-validations": [rules::excluded_entry_is_ipv6()]
        }
    })
}

/// The CEL rules of the prefix pool CRDs: the reference webhook's single-object decisions.
///
/// | where | rule |
/// |---|---|
/// | `prefixes` | at least one entry |
/// | each `prefixes` entry | an IPv6 CIDR; network-aligned (its address is its prefix's first) |
/// | `allocationPrefixLength` | `1..=128` (schema), default 64; never changes (transition rule) |
/// | `gateway` | empty (unset) or an IPv6 address |
/// | each `excludedPrefixes` entry | an IPv6 address, CIDR, or `first-last` range (first <= last) |
/// | spec | every `prefixes` entry no longer than `allocationPrefixLength` |
pub mod rules {
    use kube::core::Rule;
    use serde_json::Value;

    use crate::api::pool::rules::{entry_family, entry_rule, numbers, rule, to_json};

    /// Rule on each `spec.prefixes` entry: an IPv6 CIDR.
    pub fn prefix_is_ipv6_cidr() -> Value {
        to_json(rule(
            "isCIDR(self) && cidr(self).ip().family() == 6".into(),
            "'must be an IPv6 CIDR (such as fd00::/48)'".into(),
            None,
        ))
    }

    /// Rule on each `spec.prefixes` entry: network-aligned (reported only for an IPv6 CIDR; the
    /// rule above reports the rest).
    pub fn prefix_is_aligned() -> Value {
        to_json(rule(
            "!isCIDR(self) || cidr(self).ip().family() != 6 || cidr(self).masked() == cidr(self)"
                .into(),
            "'must be network-aligned: bits of its address after the prefix length are set (write the prefix\\'s first address)'".into(),
            None,
        ))
    }

    /// Rule on `spec.prefixes` itself: not empty.
    pub fn prefixes_not_empty() -> Value {
        to_json(rule(
            "size(self) > 0".into(),
            "'at least one IPv6 CIDR is required'".into(),
            None,
        ))
    }

    /// Transition rule on `spec.allocationPrefixLength`: it never changes (the sub-prefixes
    /// already handed out have that length).
    pub fn allocation_length_immutable() -> Value {
        to_json(rule(
            "self == oldSelf".into(),
            format!(
                "'must stay ' + {n}[oldSelf] + ' (it is immutable): create a new pool for another length'",
                n = numbers()
            ),
            None,
        ))
    }

    /// Rule on `spec.gateway`: empty (unset) or an IPv6 address.
    pub fn gateway_is_ipv6() -> Value {
        to_json(rule(
            "self == '' || (isIP(self) && ip(self).family() == 6)".into(),
            "'must be an IPv6 address'".into(),
            None,
        ))
    }

    /// Rule on each `spec.excludedPrefixes` entry: what the IP pools accept in
    /// `excludedAddresses`, of the IPv6 family.
    pub fn excluded_entry_is_ipv6() -> Value {
        to_json(rule(
            format!(
                "({entry}) && {family} == 6",
                entry = entry_rule(),
                family = entry_family("self")
            ),
            "'must be an IPv6 address, CIDR or first-last range (first <= last, no spaces)'".into(),
            None,
        ))
    }

    /// Spec rule: no `prefixes` entry is longer than the allocation length (each must hold at
    /// least one sub-prefix). Entries that are not CIDRs are reported by their own rule.
    pub fn prefixes_fit_the_allocation_length() -> Rule {
        let length = "(has(self.allocationPrefixLength) ? self.allocationPrefixLength : 64)";
        let too_long = format!("isCIDR(p) && cidr(p).prefixLength() > {length}");
        rule(
            format!("self.prefixes.all(p, !({too_long}))"),
            format!(
                "self.prefixes.filter(p, {too_long})[0] + ' is longer than spec.allocationPrefixLength (' + ({length} >= 0 && {length} <= 128 ? {n}[{length}] : 'out of range') + '): each prefix must hold at least one sub-prefix'",
                n = numbers()
            ),
            Some(".prefixes"),
        )
    }
}
