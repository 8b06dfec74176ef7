//! inpool's prefix pools: `ipam.cluster.x-k8s.io/v1alpha2` [`InClusterPrefixPool`] (namespaced)
//! and [`GlobalInClusterPrefixPool`] (cluster-scoped), field-compatible with the reference
//! in-cluster provider's prefix pools. A prefix pool hands out sub-prefixes of
//! `allocationPrefixLength` (one /64 per machine out of a /48, say); the claim's `IPAddress` gets
//! the sub-prefix's first address and the allocation length.
//!
//! The reference's prefix pools are IPv6 only; inpool's take the prefixes of either family, one
//! family per pool (/26s out of an IPv4 /16, say). This only widens validation: every manifest
//! the reference accepts is accepted and means the same. An IPv4 pool must set
//! `allocationPrefixLength`, since its default, 64, is an IPv6 length. Both kinds share one spec
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
use super::pool::rules as pool_rules;
use super::pool::{
    IPPool, InClusterIPPoolStatus, MAX_ADDRESS_ENTRIES, MAX_ADDRESS_TEXT, ParentPool, PoolSpecRef,
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
    doc = "InClusterPrefixPool is a namespaced pool of IPv6 or IPv4 prefixes whose sub-prefixes inpool hands out to IPAddressClaims of the same namespace.",
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
#[x_kube(validation = pool_rules::required_unless_parent("prefixes"))]
#[x_kube(validation = rules::prefixes_fit_the_allocation_length())]
#[x_kube(validation = rules::single_family())]
#[x_kube(validation = rules::ipv4_allocation_length())]
#[x_kube(validation = rules::gateway_family())]
#[x_kube(validation = rules::excluded_family())]
pub struct InClusterPrefixPoolSpec {
    /// Prefixes is a list of CIDRs of one family from which sub-prefixes are allocated. Each
    /// entry must be a network-aligned CIDR (e.g. `fd00::/48`, or `10.0.0.0/16`). Required unless
    /// `parentPool` is set; a written list is never empty, so empty here means left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "prefixes_schema")]
    pub prefixes: Vec<String>,

    /// AllocationPrefixLength is the prefix length of each allocated sub-prefix (e.g. 64 means
    /// /64 allocations). Defaults to 64, an IPv6 length: IPv4 pools must set it. Must be >= the
    /// prefix length of each entry in Prefixes and <= 128 (<= 32 for IPv4); it cannot change once
    /// the pool exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "allocation_prefix_length_schema")]
    pub allocation_prefix_length: Option<i32>,

    /// Gateway is the next-hop address (of the prefixes' family) carried unchanged to every
    /// allocated
    /// IPAddress.Spec.Gateway. Unlike IP pools, the gateway does not block any prefix from being
    /// allocated: it is informational only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "gateway_schema")]
    pub gateway: Option<String>,

    /// ExcludedPrefixes lists addresses, CIDRs or `first-last` ranges (of the prefixes' family)
    /// to exclude from allocation. Any candidate sub-prefix overlapping an excluded entry is skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "excluded_prefixes_schema")]
    pub excluded_prefixes: Option<Vec<String>>,

    /// ParentPool names a prefix pool this pool carves its prefixes from: inpool claims
    /// `subPrefixes` sub-prefixes of it, and each one realised is one more prefix this pool
    /// splits (an IPv6 /56 of a /48, handed out as /64s, say; inpool's addition, the reference
    /// has no such field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::api::pool::parent_pool_schema")]
    pub parent_pool: Option<ParentPool>,
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
            parent_pool: None,
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
    doc = "GlobalInClusterPrefixPool is a cluster-scoped pool of IPv6 or IPv4 prefixes whose sub-prefixes inpool hands out to IPAddressClaims of any namespace.",
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
        "description": "Prefixes is a list of CIDRs of one family from which sub-prefixes are allocated. Each entry must be a network-aligned CIDR (e.g. \"fd00::/48\", or \"10.0.0.0/16\"). The reference provider accepts IPv6 only; inpool either.",
        "maxItems": MAX_ADDRESS_ENTRIES,
        "items": {
            "type": "string",
            "maxLength": MAX_ADDRESS_TEXT,
            "x-kubernetes-validations": [rules::prefix_is_cidr(), rules::prefix_is_aligned()]
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
        "description": "AllocationPrefixLength is the prefix length of each allocated sub-prefix (e.g. 64 means /64 allocations). Defaults to 64, an IPv6 length: IPv4 pools must set it. Must be >= the prefix length of each entry in Prefixes and <= 128 (<= 32 for IPv4); it cannot change once the pool exists.",
        "x-kubernetes-validations": [rules::allocation_length_immutable()]
    })
}

fn gateway_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": MAX_ADDRESS_TEXT,
        "description": "Gateway is the next-hop address (of the prefixes' family) carried unchanged to every allocated IPAddress.Spec.Gateway; informational only (it blocks nothing).",
        "x-kubernetes-validations": [pool_rules::gateway_parses()]
    })
}

fn excluded_prefixes_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "ExcludedPrefixes lists addresses, CIDRs or first-last ranges (of the prefixes' family) to exclude from allocation. Any candidate sub-prefix overlapping an excluded entry is skipped.",
        "maxItems": MAX_ADDRESS_ENTRIES,
        "items": {
            "type": "string",
            "maxLength": MAX_ADDRESS_TEXT,
            "x-kubernetes-validations": [pool_rules::entry_parses()]
        }
    })
}

/// The CEL rules of the prefix pool CRDs: the reference webhook's single-object decisions, with
/// IPv4 allowed beside IPv6 (one family per pool, set by the first entry of `prefixes`).
///
/// | where | rule |
/// |---|---|
/// | `prefixes` | at least one entry |
/// | each `prefixes` entry | a CIDR; network-aligned (its address is its prefix's first) |
/// | `allocationPrefixLength` | `1..=128` (schema), default 64; never changes (transition rule) |
/// | `gateway` | empty (unset) or an IP address |
/// | each `excludedPrefixes` entry | an address, CIDR, or `first-last` range (first <= last) |
/// | spec | every `prefixes` entry no longer than `allocationPrefixLength` |
/// | spec | every `prefixes` entry of the first's family |
/// | spec | `allocationPrefixLength <= 32` when the first entry is IPv4 |
/// | spec | `gateway` and every `excludedPrefixes` entry of the first entry's family |
///
/// Cross-field rules are written `!precondition || check`, as the IP pools' are (see
/// [`crate::api::pool::rules`]): a value another rule reports never makes them fail.
pub mod rules {
    use kube::core::Rule;
    use serde_json::Value;

    use crate::api::pool::rules::{entry_family, entry_shaped, numbers, rule, to_json};

    /// The first entry of `prefixes` (only used behind [`first_is_cidr`]).
    const FIRST: &str = "self.prefixes[0]";

    /// The first entry of `prefixes` exists and is a CIDR: its family is the pool's.
    fn first_is_cidr() -> String {
        format!("(has(self.prefixes) && size(self.prefixes) > 0 && isCIDR({FIRST}))")
    }

    /// The pool's family, 4 or 6 (only behind [`first_is_cidr`]).
    fn family() -> String {
        format!("cidr({FIRST}).ip().family()")
    }

    /// `'4'` or `'6'`: the text of the pool's family.
    fn family_text() -> String {
        format!("({} == 4 ? '4' : '6')", family())
    }

    /// The allocation length, whether written or defaulted.
    const LENGTH: &str = "(has(self.allocationPrefixLength) ? self.allocationPrefixLength : 64)";

    /// Text of the allocation length (any value the schema allows).
    fn length_text() -> String {
        format!(
            "({LENGTH} >= 0 && {LENGTH} <= 128 ? {n}[{LENGTH}] : 'out of range')",
            n = numbers()
        )
    }

    /// Rule on each `spec.prefixes` entry: a CIDR.
    pub fn prefix_is_cidr() -> Value {
        to_json(rule(
            "isCIDR(self)".into(),
            "'must be a CIDR (such as fd00::/48 or 10.0.0.0/16)'".into(),
            None,
        ))
    }

    /// Rule on each `spec.prefixes` entry: network-aligned (reported only for a CIDR; the rule
    /// above reports the rest).
    pub fn prefix_is_aligned() -> Value {
        to_json(rule(
            "!isCIDR(self) || cidr(self).masked() == cidr(self)".into(),
            "'must be network-aligned: bits of its address after the prefix length are set (write the prefix\\'s first address)'".into(),
            None,
        ))
    }

    /// Rule on `spec.prefixes` itself: not empty.
    pub fn prefixes_not_empty() -> Value {
        to_json(rule(
            "size(self) > 0".into(),
            "'at least one CIDR is required'".into(),
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

    /// Spec rule: no `prefixes` entry is longer than the allocation length (each must hold at
    /// least one sub-prefix). Entries that are not CIDRs are reported by their own rule.
    pub fn prefixes_fit_the_allocation_length() -> Rule {
        let too_long = format!("isCIDR(p) && cidr(p).prefixLength() > {LENGTH}");
        rule(
            format!("!has(self.prefixes) || self.prefixes.all(p, !({too_long}))"),
            format!(
                "self.prefixes.filter(p, {too_long})[0] + ' is longer than spec.allocationPrefixLength (' + {length} + '): each prefix must hold at least one sub-prefix'",
                length = length_text()
            ),
            Some(".prefixes"),
        )
    }

    /// Spec rule: every `prefixes` entry has the family of the first.
    pub fn single_family() -> Rule {
        let other = format!("isCIDR(p) && cidr(p).ip().family() != {}", family());
        rule(
            format!("!{} || !self.prefixes.exists(p, {other})", first_is_cidr()),
            format!(
                "self.prefixes.filter(p, {other})[0] + ' is IPv' + ({f} == 4 ? '6' : '4') + ' but the first entry ' + {FIRST} + ' is IPv' + {ft} + ': a pool holds prefixes of one family'",
                f = family(),
                ft = family_text(),
            ),
            Some(".prefixes"),
        )
    }

    /// Spec rule: an IPv4 pool's sub-prefixes are at most /32. The default, 64, is an IPv6
    /// length, so an IPv4 pool that leaves the field out is told to set it.
    pub fn ipv4_allocation_length() -> Rule {
        rule(
            format!(
                "!{} || {} == 6 || {LENGTH} <= 32",
                first_is_cidr(),
                family()
            ),
            format!(
                "{length} + ' is longer than 32, the longest IPv4 sub-prefix' + ({LENGTH} == 64 ? ' (64 is the default, for IPv6 prefixes: set it for IPv4 ones, such as 26)' : '')",
                length = length_text()
            ),
            Some(".allocationPrefixLength"),
        )
    }

    /// Spec rule: the gateway has the prefixes' family.
    pub fn gateway_family() -> Rule {
        rule(
            format!(
                "!has(self.gateway) || !isIP(self.gateway) || !{} || ip(self.gateway).family() == {}",
                first_is_cidr(),
                family()
            ),
            format!(
                "self.gateway + ' is IPv' + (ip(self.gateway).family() == 4 ? '4' : '6') + ' but spec.prefixes is IPv' + {}",
                family_text()
            ),
            Some(".gateway"),
        )
    }

    /// Spec rule: every excluded entry has the prefixes' family.
    pub fn excluded_family() -> Rule {
        let other = format!(
            "{} && {} != {}",
            entry_shaped("x"),
            entry_family("x"),
            family()
        );
        rule(
            format!(
                "!has(self.excludedPrefixes) || !{} || !self.excludedPrefixes.exists(x, {other})",
                first_is_cidr()
            ),
            format!(
                "self.excludedPrefixes.filter(x, {other})[0] + ' is IPv' + ({f} == 4 ? '6' : '4') + ' but spec.prefixes is IPv' + {ft}",
                f = family(),
                ft = family_text(),
            ),
            Some(".excludedPrefixes"),
        )
    }
}
