//! inpool's pools: `ipam.cluster.x-k8s.io/v1alpha2` [`InClusterIPPool`] (namespaced) and
//! [`GlobalInClusterIPPool`] (cluster-scoped), field-compatible with the reference in-cluster
//! provider's v1alpha2 schema. Both kinds share one spec ([`InClusterIPPoolSpec`]) and one status
//! ([`InClusterIPPoolStatus`]), as in the reference.
//!
//! Validation lives in the CRD as CEL rules (`x-kubernetes-validations`), so no webhook (and no
//! cert-manager) is needed. They reproduce the reference webhook's decisions for everything one
//! object can tell; see [`rules`] for the exact rules and docs/pools.md for the messages.

// kube-derive's `printcolumn(type_ = ...)` repeats keys by design; clippy reads them as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use super::key::Name;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema, Resource, core::Message, core::Rule};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Longest accepted text of one entry of `addresses` / `excludedAddresses` and of `gateway`.
/// The longest valid entry is an IPv6 range written with every digit and an embedded IPv4 part:
/// 2 × 45 + 1 = 91 characters.
pub const MAX_ADDRESS_TEXT: usize = 100;
/// Most entries in `spec.addresses` and in `spec.excludedAddresses`. The API server refuses a
/// CRD whose rules' *estimated* cost (per-entry cost x maxItems) exceeds its per-rule budget;
/// the per-entry rule (range order for IPv6 is the costly part) fits up to 850 entries on
/// Kubernetes 1.36 (860 is refused). 800 leaves room for estimator changes in other versions.
pub const MAX_ADDRESS_ENTRIES: usize = 800;
/// Most entries in `spec.preAllocations`. The per-entry rules are cheap; a rule comparing every
/// pair of entries (to refuse one address named twice) is not: at 1,000 entries its estimated
/// cost is 6.3 times the API server's per-rule budget (Kubernetes 1.36), so the controller
/// reports a twice-named address instead (the first entry is served).
pub const MAX_PRE_ALLOCATIONS: usize = 1000;
/// Longest text of an IP address: an IPv6 address with every digit and an embedded IPv4 part.
pub const MAX_IP_TEXT: usize = 45;
/// Most entries in `spec.additionalSubnets`. The rules comparing every pair of subnets (they
/// must not overlap) cost the square of it; pools that span subnets span a handful.
pub const MAX_ADDITIONAL_SUBNETS: usize = 16;
/// Most entries in one `additionalSubnets[].addresses`. The per-entry rule runs for every entry of
/// every subnet, so subnets × entries stays within the [`MAX_ADDRESS_ENTRIES`] the API server's
/// per-rule budget allows.
pub const MAX_SUBNET_ADDRESS_ENTRIES: usize = MAX_ADDRESS_ENTRIES / MAX_ADDITIONAL_SUBNETS;

/// Spec of a pool, shared by [`InClusterIPPool`] and [`GlobalInClusterIPPool`] (JSON names and
/// types as in the reference provider's `InClusterIPPoolSpec`).
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "ipam.cluster.x-k8s.io",
    version = "v1alpha2",
    kind = "InClusterIPPool",
    plural = "inclusterippools",
    singular = "inclusterippool",
    shortname = "icipp",
    namespaced,
    status = "InClusterIPPoolStatus",
    category = "cluster-api",
    category = "ipam",
    label("clusterctl.cluster.x-k8s.io/move-hierarchy", ""),
    doc = "InClusterIPPool is a namespaced pool of IP addresses that inpool hands out to IPAddressClaims of the same namespace.",
    printcolumn(
        name = "Addresses",
        type_ = "string",
        json_path = ".spec.addresses",
        description = "List of addresses, to allocate from"
    ),
    printcolumn(
        name = "Total",
        type_ = "integer",
        json_path = ".status.ipAddresses.total",
        description = "Count of IPs configured for the pool"
    ),
    printcolumn(
        name = "Free",
        type_ = "integer",
        json_path = ".status.ipAddresses.free",
        description = "Count of unallocated IPs in the pool"
    ),
    printcolumn(
        name = "Used",
        type_ = "integer",
        json_path = ".status.ipAddresses.used",
        description = "Count of allocated IPs in the pool"
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
    description = "InClusterIPPoolSpec defines the desired state of a pool: the addresses it hands out, their prefix and gateway."
)]
#[x_kube(validation = rules::single_family(rules::SPEC))]
#[x_kube(validation = rules::ipv4_prefix(rules::SPEC))]
#[x_kube(validation = rules::within_subnet(rules::SPEC))]
#[x_kube(validation = rules::gateway_family(rules::SPEC))]
#[x_kube(validation = rules::excluded_family())]
#[x_kube(validation = rules::pre_allocation_family())]
#[x_kube(validation = rules::additional_subnets_family())]
#[x_kube(validation = rules::additional_subnets_disjoint())]
pub struct InClusterIPPoolSpec {
    /// Addresses is a list of IP addresses that can be assigned. This set of addresses can be
    /// non-contiguous. Each entry is a single IP (`10.0.0.10`), a CIDR (`10.0.0.128/28`) or a
    /// `first-last` range (`10.0.0.20-10.0.0.30`); all entries are of one family and inside the
    /// subnet given by the first entry and `prefix`.
    #[schemars(schema_with = "addresses_schema")]
    pub addresses: Vec<String>,

    /// Prefix is the network prefix to use (1-32 for IPv4, 1-128 for IPv6).
    #[schemars(schema_with = "prefix_schema")]
    #[x_kube(validation = rules::prefix_positive())]
    pub prefix: i32,

    /// Gateway is the address of the network's gateway (optional, same family as the
    /// addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "gateway_schema")]
    pub gateway: Option<String>,

    /// AllocateReservedIPAddresses causes the provider to allocate the network address (the
    /// first address in the inferred subnet) and broadcast address (the last address in the
    /// inferred subnet) when IPv4. The provider will allocate the anycast address (the first
    /// address in the inferred subnet) when IPv6.
    #[serde(
        default,
        rename = "allocateReservedIPAddresses",
        skip_serializing_if = "Option::is_none"
    )]
    pub allocate_reserved_ip_addresses: Option<bool>,

    /// ExcludedAddresses is a list of IP addresses, CIDRs or `first-last` ranges which will be
    /// excluded from the set of assignable IP addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "excluded_addresses_schema")]
    pub excluded_addresses: Option<Vec<String>>,

    /// AddressReuseGracePeriodSeconds is the duration in seconds for which an IP address
    /// should be kept reserved after being released, preventing immediate reuse. If not set or
    /// set to 0, addresses are available for reuse immediately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub address_reuse_grace_period_seconds: Option<i32>,

    /// PreAllocations names claims that get a given address: the claim named by an entry gets
    /// exactly that address, and no other claim gets it while the entry exists. A list-map keyed
    /// by claimNamespace and claimName (inpool's addition; the reference has no such field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "pre_allocations_schema")]
    pub pre_allocations: Option<Vec<PreAllocation>>,

    /// AdditionalSubnets are more subnets the pool hands addresses out of, each with its own
    /// prefix and gateway, beside the pool's own subnet (`addresses`, `prefix`, `gateway`).
    /// Addresses are handed out from the pool's own subnet first, then from these in the order
    /// written (inpool's addition; the reference has no such field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "additional_subnets_schema")]
    pub additional_subnets: Option<Vec<AdditionalSubnet>>,
}

/// One entry of `spec.additionalSubnets`: a subnet with the meaning of the spec's own
/// `addresses`, `prefix` and `gateway`, except that the gateway must lie inside the subnet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalSubnet {
    /// Addresses of the subnet that can be assigned: IPs, CIDRs or `first-last` ranges, of the
    /// pool's family, inside the subnet given by the first entry and `prefix`.
    pub addresses: Vec<String>,
    /// Prefix is the subnet's network prefix (1-32 for IPv4, 1-128 for IPv6), carried by every
    /// IPAddress handed out of it.
    pub prefix: i32,
    /// Gateway of the subnet (optional): an address inside it, carried by every IPAddress handed
    /// out of it and never handed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

impl AdditionalSubnet {
    /// A subnet of these addresses, prefix and gateway.
    pub fn new<S: Into<String>>(
        addresses: impl IntoIterator<Item = S>,
        prefix: i32,
        gateway: Option<&str>,
    ) -> Self {
        Self {
            addresses: addresses.into_iter().map(Into::into).collect(),
            prefix,
            gateway: gateway.map(Into::into),
        }
    }
}

/// One entry of `spec.preAllocations`: the claim, and the address it gets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreAllocation {
    /// Namespace of the claim: required on a GlobalInClusterIPPool, left out (empty) on an
    /// InClusterIPPool, whose claims are in its own namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub claim_namespace: String,
    /// Name of the IPAddressClaim.
    pub claim_name: String,
    /// The address the claim gets: one IP of the pool's family, among the addresses the pool
    /// hands out.
    pub address: String,
}

impl PreAllocation {
    /// An entry for a claim of a namespaced pool (no namespace).
    pub fn new(claim_name: impl Into<String>, address: impl Into<String>) -> Self {
        Self {
            claim_namespace: String::new(),
            claim_name: claim_name.into(),
            address: address.into(),
        }
    }

    /// An entry for a claim of a global pool.
    pub fn in_namespace(
        claim_namespace: impl Into<String>,
        claim_name: impl Into<String>,
        address: impl Into<String>,
    ) -> Self {
        Self {
            claim_namespace: claim_namespace.into(),
            ..Self::new(claim_name, address)
        }
    }
}

impl InClusterIPPoolSpec {
    /// A spec with the given addresses and prefix, everything else unset.
    pub fn new<S: Into<String>>(addresses: impl IntoIterator<Item = S>, prefix: i32) -> Self {
        Self {
            addresses: addresses.into_iter().map(Into::into).collect(),
            prefix,
            gateway: None,
            allocate_reserved_ip_addresses: None,
            excluded_addresses: None,
            address_reuse_grace_period_seconds: None,
            pre_allocations: None,
            additional_subnets: None,
        }
    }
}

/// Spec of a [`GlobalInClusterIPPool`]: the same [`InClusterIPPoolSpec`] (same JSON, same
/// schema and rules), wrapped only because each kind needs its own derive.
/// Dereferences to the inner spec, so `pool.spec.addresses` works on both kinds.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ipam.cluster.x-k8s.io",
    version = "v1alpha2",
    kind = "GlobalInClusterIPPool",
    plural = "globalinclusterippools",
    singular = "globalinclusterippool",
    shortname = "gicipp",
    status = "InClusterIPPoolStatus",
    category = "cluster-api",
    category = "ipam",
    label("clusterctl.cluster.x-k8s.io/move-hierarchy", ""),
    doc = "GlobalInClusterIPPool is a cluster-scoped pool of IP addresses that inpool hands out to IPAddressClaims of any namespace.",
    printcolumn(
        name = "Addresses",
        type_ = "string",
        json_path = ".spec.addresses",
        description = "List of addresses, to allocate from"
    ),
    printcolumn(
        name = "Total",
        type_ = "integer",
        json_path = ".status.ipAddresses.total",
        description = "Count of IPs configured for the pool"
    ),
    printcolumn(
        name = "Free",
        type_ = "integer",
        json_path = ".status.ipAddresses.free",
        description = "Count of unallocated IPs in the pool"
    ),
    printcolumn(
        name = "Used",
        type_ = "integer",
        json_path = ".status.ipAddresses.used",
        description = "Count of allocated IPs in the pool"
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
    description = "InClusterIPPoolSpec defines the desired state of a pool: the addresses it hands out, their prefix and gateway."
)]
pub struct GlobalInClusterIPPoolSpec(pub InClusterIPPoolSpec);

wraps_spec!(GlobalInClusterIPPoolSpec, InClusterIPPoolSpec);

/// Observed state of a pool (both kinds).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InClusterIPPoolStatus {
    /// Addresses reports the count of total, free, and used IPs in the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_addresses: Option<IPAddressesStatus>,
    /// Conditions of the pool (type `Ready`, ...), a list-map keyed by type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::api::conditions::conditions_schema")]
    pub conditions: Option<Vec<Condition>>,
}

impl InClusterIPPoolStatus {
    /// True when this status would serialise as `{}`.
    pub fn is_empty(&self) -> bool {
        self.ip_addresses.is_none() && self.conditions.is_none()
    }
}

/// Address counts of a pool, as the reference provider reports them (Go `int`; counts that do
/// not fit report as the maximum).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPAddressesStatus {
    /// Total is the total number of IPs configured for the pool.
    #[schemars(schema_with = "integer_schema")]
    pub total: i64,
    /// Used is the count of allocated IPs in the pool.
    #[schemars(schema_with = "integer_schema")]
    pub used: i64,
    /// Free is the count of unallocated IPs in the pool.
    #[schemars(schema_with = "integer_schema")]
    pub free: i64,
    /// OutOfRange is the count of allocated IPs in the pool that is not contained within
    /// spec.addresses.
    #[schemars(schema_with = "integer_schema")]
    pub out_of_range: i64,
}

/// What every pool kind has in common, IP pools and prefix pools alike: an identity, a spec of
/// one of two shapes, and the one status shape.
pub trait IPPool: Resource<DynamicType = ()> + Clone + Send + Sync + 'static {
    /// The kind, as [`super::PoolKey`] names it.
    const KIND: super::PoolKind;
    /// The spec, by shape.
    fn spec_of(&self) -> PoolSpecRef<'_>;
    /// The status, if any.
    fn pool_status(&self) -> Option<&InClusterIPPoolStatus>;

    /// The pool's identity.
    fn key(&self) -> super::PoolKey {
        let meta = self.meta();
        super::PoolKey {
            kind: Self::KIND,
            namespace: Self::KIND
                .is_namespaced()
                .then(|| Name::new(meta.namespace.as_deref().unwrap_or_default())),
            name: Name::new(meta.name.as_deref().unwrap_or_default()),
        }
    }
}

/// A pool's spec: the addresses of an IP pool or the prefixes of a prefix pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PoolSpecRef<'a> {
    Addresses(&'a InClusterIPPoolSpec),
    Prefixes(&'a super::InClusterPrefixPoolSpec),
}

impl IPPool for InClusterIPPool {
    const KIND: super::PoolKind = super::PoolKind::InCluster;
    fn spec_of(&self) -> PoolSpecRef<'_> {
        PoolSpecRef::Addresses(&self.spec)
    }
    fn pool_status(&self) -> Option<&InClusterIPPoolStatus> {
        self.status.as_ref()
    }
}

impl IPPool for GlobalInClusterIPPool {
    const KIND: super::PoolKind = super::PoolKind::Global;
    fn spec_of(&self) -> PoolSpecRef<'_> {
        PoolSpecRef::Addresses(&self.spec.0)
    }
    fn pool_status(&self) -> Option<&InClusterIPPoolStatus> {
        self.status.as_ref()
    }
}

/// Server-side-apply body for a pool's `status` subresource (`apiVersion`, `kind`, `status`);
/// `status` is left out when empty. Conditions are a list-map, so only the types sent are
/// owned by the applier.
pub fn pool_status_patch<K: Resource<DynamicType = ()>>(status: &InClusterIPPoolStatus) -> Value {
    let mut body = Map::new();
    body.insert("apiVersion".into(), K::api_version(&()).into());
    body.insert("kind".into(), K::kind(&()).into());
    if !status.is_empty() {
        body.insert(
            "status".into(),
            serde_json::to_value(status).expect("pool status serialises"),
        );
    }
    Value::Object(body)
}

fn integer_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "integer" })
}

fn prefix_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "minimum": 0,
        "maximum": 128,
        "description": "Prefix is the network prefix to use (1-32 for IPv4, 1-128 for IPv6)."
    })
}

fn gateway_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": MAX_ADDRESS_TEXT,
        "description": "Gateway is the address of the network's gateway (optional, same family as the addresses).",
        "x-kubernetes-validations": [rules::gateway_parses(rules::SPEC)]
    })
}

fn addresses_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "Addresses is a list of IP addresses that can be assigned. This set of addresses can be non-contiguous. Each entry is a single IP, a CIDR or a first-last range; all entries are of one family and inside the subnet given by the first entry and prefix.",
        "maxItems": MAX_ADDRESS_ENTRIES,
        "items": {
            "type": "string",
            "maxLength": MAX_ADDRESS_TEXT,
            "x-kubernetes-validations": [rules::entry_parses("spec.addresses")]
        },
        "x-kubernetes-validations": [rules::addresses_not_empty(rules::SPEC)]
    })
}

fn additional_subnets_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names = rules::ADDITIONAL_SUBNET;
    schemars::json_schema!({
        "type": "array",
        "description": "AdditionalSubnets are more subnets the pool hands addresses out of, each with its own prefix and gateway, beside the pool's own subnet (addresses, prefix, gateway). Addresses are handed out from the pool's own subnet first, then from these in the order written. The subnets of a pool must not overlap.",
        "maxItems": MAX_ADDITIONAL_SUBNETS,
        "x-kubernetes-list-type": "atomic",
        "items": {
            "type": "object",
            "required": ["addresses", "prefix"],
            "properties": {
                "addresses": {
                    "type": "array",
                    "description": "Addresses of the subnet that can be assigned: IPs, CIDRs or first-last ranges, of the pool's family, inside the subnet given by the first entry and prefix.",
                    "maxItems": MAX_SUBNET_ADDRESS_ENTRIES,
                    "items": {
                        "type": "string",
                        "maxLength": MAX_ADDRESS_TEXT,
                        "x-kubernetes-validations": [rules::entry_parses(names.addresses)]
                    },
                    "x-kubernetes-validations": [rules::addresses_not_empty(names)]
                },
                "prefix": {
                    "type": "integer",
                    "format": "int32",
                    "minimum": 1,
                    "maximum": 128,
                    "description": "Prefix is the subnet's network prefix (1-32 for IPv4, 1-128 for IPv6), carried by every IPAddress handed out of it."
                },
                "gateway": {
                    "type": "string",
                    "maxLength": MAX_ADDRESS_TEXT,
                    "description": "Gateway of the subnet (optional): an address inside it, carried by every IPAddress handed out of it and never handed out.",
                    "x-kubernetes-validations": [rules::gateway_parses(names)]
                }
            },
            "x-kubernetes-validations": [
                rules::to_json(rules::single_family(names)),
                rules::to_json(rules::ipv4_prefix(names)),
                rules::to_json(rules::within_subnet(names)),
                rules::to_json(rules::gateway_family(names)),
                rules::to_json(rules::gateway_inside(names))
            ]
        }
    })
}

fn excluded_addresses_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "ExcludedAddresses is a list of IP addresses, CIDRs or first-last ranges which will be excluded from the set of assignable IP addresses.",
        "maxItems": MAX_ADDRESS_ENTRIES,
        "items": {
            "type": "string",
            "maxLength": MAX_ADDRESS_TEXT,
            "x-kubernetes-validations": [rules::entry_parses("spec.excludedAddresses")]
        }
    })
}

fn pre_allocations_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "PreAllocations names claims that get a given address: the claim named by an entry gets exactly that address, and no other claim gets it while the entry exists. Keyed by claimNamespace and claimName.",
        "maxItems": MAX_PRE_ALLOCATIONS,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["claimNamespace", "claimName"],
        "items": {
            "type": "object",
            "required": ["claimName", "address"],
            "properties": {
                "claimNamespace": {
                    "type": "string",
                    "default": "",
                    "maxLength": 63,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
                    "description": "Namespace of the claim: required on a GlobalInClusterIPPool, left out on an InClusterIPPool, whose claims are in its own namespace."
                },
                "claimName": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 253,
                    "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                    "description": "Name of the IPAddressClaim."
                },
                "address": {
                    "type": "string",
                    "maxLength": MAX_IP_TEXT,
                    "description": "The address the claim gets: one IP of the pool's family, among the addresses the pool hands out.",
                    "x-kubernetes-validations": [rules::pre_allocation_address_parses()]
                }
            }
        },
    })
}

/// The CEL rules of the pool CRDs, built as text so that each sub-expression is written once.
///
/// Notation in the comments: an *entry* is one string of `addresses` / `excludedAddresses`;
/// `first` is `spec.addresses[0]`.
///
/// | where | rule |
/// |---|---|
/// | `addresses` | at least one entry |
/// | each entry | an IP, a CIDR, or `first-last` with two IPs of one family and `first <= last` |
/// | `prefix` | `>= 1` (schema: `0..=128`, as the reference's) |
/// | `gateway` | empty (unset) or an IP |
/// | spec | all `addresses` entries of `first`'s family |
/// | spec | `prefix <= 32` when `first` is IPv4 |
/// | spec | every `addresses` entry inside the subnet of `first`'s address and `prefix` |
/// | spec | `gateway` of `first`'s family |
/// | spec | all `excludedAddresses` entries of `first`'s family |
/// | each `preAllocations[].address` | one IP (no CIDR, no range) |
/// | spec | every `preAllocations[].address` of `first`'s family |
/// | each `preAllocations` entry (per kind, added in [`crate::api::crds`]) | `claimNamespace` empty on an `InClusterIPPool`, set on a `GlobalInClusterIPPool` |
/// | each `additionalSubnets` entry | the rules of the spec's own `addresses`, `prefix` and `gateway` above, on the entry's (messages name `spec.additionalSubnets.…`; `prefix` is bounded `1..=128` by the schema) |
/// | each `additionalSubnets` entry | `gateway` inside the subnet of the entry's first address and `prefix` |
/// | spec | the first address of every `additionalSubnets` entry of `first`'s family |
/// | spec | no two subnets overlap (the spec's own, every `additionalSubnets` entry's) |
///
/// Cross-field rules are written `!precondition || check`, so that a value another rule already
/// reports (an unparsable entry, a missing first entry) never makes them fail or error: each
/// mistake is reported once, by the rule about it.
///
/// The API server refuses a CRD whose rules' *estimated* cost is too high, and it cannot bound
/// the length of some values: `string(int)`, `string(ip)` and `join()` results count as
/// unbounded. The rules therefore never use them: numbers are shown through a literal list of
/// their texts, values are bound to names with `[value].all(name, ...)` /
/// `[value].map(name, ...)[0]` (CEL here has no `cel.bind`), and addresses are compared through
/// fixed-width keys built from bounded substrings.
pub mod rules {
    use super::*;

    pub(crate) fn rule(rule: String, message_expression: String, field_path: Option<&str>) -> Rule {
        let mut r = Rule::new(rule).message(Message::Expression(message_expression));
        if let Some(p) = field_path {
            r = r.field_path(p);
        }
        r
    }

    pub(crate) fn to_json(r: Rule) -> Value {
        serde_json::to_value(r).expect("rule serialises")
    }

    /// The first entry of `addresses` (only used behind `size(self.addresses) > 0`).
    const FIRST: &str = "self.addresses[0]";

    /// How the messages of the rules about one subnet (`self` is an object with `addresses`,
    /// `prefix` and `gateway`) name its fields: the spec's own, or an entry of
    /// `additionalSubnets` (the API server's error adds the entry's index to the path).
    #[derive(Clone, Copy, Debug)]
    pub struct SubnetNames {
        pub addresses: &'static str,
        pub prefix: &'static str,
        pub gateway: &'static str,
    }

    /// The spec's own subnet.
    pub const SPEC: SubnetNames = SubnetNames {
        addresses: "spec.addresses",
        prefix: "spec.prefix",
        gateway: "spec.gateway",
    };

    /// An entry of `spec.additionalSubnets`.
    pub const ADDITIONAL_SUBNET: SubnetNames = SubnetNames {
        addresses: "spec.additionalSubnets.addresses",
        prefix: "spec.additionalSubnets.prefix",
        gateway: "spec.additionalSubnets.gateway",
    };

    /// `['0', '1', ..., '128']`: the text of a prefix length, by index.
    pub(crate) fn numbers() -> String {
        let items: Vec<String> = (0..=128).map(|i| format!("'{i}'")).collect();
        format!("[{}]", items.join(", "))
    }

    /// Text of `self.prefix` (any value the schema allows).
    fn prefix_text() -> String {
        format!(
            "(self.prefix >= 0 && self.prefix <= 128 ? {}[self.prefix] : 'out of range')",
            numbers()
        )
    }

    /// Cheap "this entry has a shape we can take apart" test: an IP, a CIDR, or two IPs around
    /// one `-`. Used to guard cross-field rules.
    pub fn entry_shaped(e: &str) -> String {
        format!(
            "(isIP({e}) || isCIDR({e}) || (size({e}.split('-')) == 2 && isIP({e}.split('-')[0]) && isIP({e}.split('-')[1])))"
        )
    }

    /// Family (4 or 6) of an [`entry_shaped`] entry: of the CIDR's address, else of the (first)
    /// IP.
    pub fn entry_family(e: &str) -> String {
        format!("(isCIDR({e}) ? cidr({e}).ip().family() : ip({e}.split('-')[0]).family())")
    }

    /// `'4'` or `'6'` for a family expression.
    fn family_text(f: &str) -> String {
        format!("({f} == 4 ? '4' : '6')")
    }

    /// Text of the first address of an [`entry_shaped`] entry (the IP, the CIDR's address, or
    /// the range's first address).
    fn entry_address(e: &str) -> String {
        format!("{e}.split('/')[0].split('-')[0]")
    }

    /// Integer value of a valid IPv4 address text `a` (a CEL name).
    fn ipv4_value(a: &str) -> String {
        format!(
            "(int({a}.split('.')[0]) * 16777216 + int({a}.split('.')[1]) * 65536 + int({a}.split('.')[2]) * 256 + int({a}.split('.')[3]))"
        )
    }

    /// The 32 lower-case hex digits of a valid IPv6 address text `a` (a CEL name), so that
    /// string order is numeric order:
    /// 1. an embedded IPv4 tail (`64:ff9b::192.0.2.1`) becomes two hex groups, and the text is
    ///    lower-cased (`n`);
    /// 2. `::` is replaced by the missing zero groups (`x`);
    /// 3. each of the 8 groups (`g0`..`g7`) is zero-padded to 4 digits and the groups are
    ///    concatenated.
    fn ipv6_key(a: &str) -> String {
        let hex = |n: String| format!("'0123456789abcdef'.substring({n}, {n} + 1)");
        let mut tail = format!("{a}.substring(0, {a}.lastIndexOf(':') + 1)");
        for i in 0..4 {
            if i == 2 {
                tail.push_str(" + ':'");
            }
            tail.push_str(&format!(
                " + {} + {}",
                hex(format!("o{i} / 16")),
                hex(format!("o{i} % 16"))
            ));
        }
        for i in (0..4).rev() {
            tail = format!("[int(q.split('.')[{i}])].map(o{i}, {tail})[0]");
        }
        let normalized = format!(
            "({a}.contains('.') ? [{a}.substring({a}.lastIndexOf(':') + 1)].map(q, {tail})[0] : {a}).lowerAscii()"
        );
        // Groups written in `n` when it contains `::`: the empty fields of split(':') are the
        // `::` itself plus one more at either end.
        let written =
            "(size(n.split(':')) - 1 - (n.startsWith('::') ? 1 : 0) - (n.endsWith('::') ? 1 : 0))";
        let expanded = format!(
            "(n.contains('::') ? n.substring(0, n.indexOf('::')) + (n.startsWith('::') ? '' : ':') + '0:0:0:0:0:0:0:0'.substring(0, 2 * (8 - {written}) - 1) + (n.endsWith('::') ? '' : ':') + n.substring(n.indexOf('::') + 2) : n)"
        );
        let mut key = (0..8)
            .map(|i| format!("'000'.substring(size(g{i}) - 1) + g{i}"))
            .collect::<Vec<_>>()
            .join(" + ");
        for i in (0..8).rev() {
            key = format!("[x.split(':')[{i}]].map(g{i}, {key})[0]");
        }
        format!("[{normalized}].map(n, [{expanded}].map(x, {key})[0])[0]")
    }

    /// `a <= b` for two valid IPs `a`, `b` (CEL names) of one family.
    fn ip_le(a: &str, b: &str) -> String {
        format!(
            "(ip({a}).family() == 4 ? {va} <= {vb} : {ka} <= {kb})",
            va = ipv4_value(a),
            vb = ipv4_value(b),
            ka = ipv6_key(a),
            kb = ipv6_key(b),
        )
    }

    /// The full per-entry rule (self is the entry): what the reference parses with
    /// `netip.ParseAddr`, `netip.ParsePrefix` or `netipx.ParseIPRange` (split at the dash, no
    /// spaces, both ends of one family, first <= last).
    pub fn entry_rule() -> String {
        format!(
            "isIP(self) || isCIDR(self) || (size(self.split('-')) == 2 && [self.split('-')[0]].all(a, [self.split('-')[1]].all(b, isIP(a) && isIP(b) && ip(a).family() == ip(b).family() && {le})))",
            le = ip_le("a", "b")
        )
    }

    /// Rule on each entry of `field` (`spec.addresses` or `spec.excludedAddresses`).
    pub fn entry_parses(field: &str) -> Value {
        to_json(rule(
            entry_rule(),
            format!(
                "'{field}: \"' + self + '\" is not an IP address, a CIDR or a first-last range (two addresses of one family, first <= last, no spaces)'"
            ),
            None,
        ))
    }

    /// Rule on `addresses` itself: not empty.
    pub fn addresses_not_empty(names: SubnetNames) -> Value {
        to_json(rule(
            "size(self) > 0".into(),
            format!(
                "'{}: at least one address, CIDR or first-last range is required'",
                names.addresses
            ),
            None,
        ))
    }

    /// Rule on `gateway`: empty (unset, as in the reference) or an IP.
    pub fn gateway_parses(names: SubnetNames) -> Value {
        to_json(rule(
            "self == '' || isIP(self)".into(),
            format!("'{}: \"' + self + '\" is not an IP address'", names.gateway),
            None,
        ))
    }

    /// Rule on `spec.prefix`: at least 1 (the schema bounds it to 0..=128 as the reference's).
    pub fn prefix_positive() -> Rule {
        rule(
            "self >= 1".into(),
            "'spec.prefix: ' + (self == 0 ? '0' : 'a negative value') + ' is not a valid prefix length: use 1-32 for IPv4, 1-128 for IPv6'".into(),
            None,
        )
    }

    /// Subnet rule: every entry of `addresses` has the family of the first.
    pub fn single_family(names: SubnetNames) -> Rule {
        let f = entry_family(FIRST);
        rule(
            format!(
                "size(self.addresses) == 0 || !{g} || self.addresses.all(e, !{ge} || {fe} == {f})",
                g = entry_shaped(FIRST),
                ge = entry_shaped("e"),
                fe = entry_family("e"),
            ),
            format!(
                "'{a}: ' + self.addresses.filter(e, {ge} && {fe} != {f})[0] + ' is IPv' + ({f} == 4 ? '6' : '4') + ' but the first entry ' + {FIRST} + ' is IPv' + {ft} + ': a pool holds addresses of one family'",
                a = names.addresses,
                ge = entry_shaped("e"),
                fe = entry_family("e"),
                ft = family_text(&f),
            ),
            Some(".addresses"),
        )
    }

    /// Subnet rule: `prefix <= 32` for an IPv4 pool.
    pub fn ipv4_prefix(names: SubnetNames) -> Rule {
        rule(
            format!(
                "size(self.addresses) == 0 || !{g} || {f} == 6 || self.prefix <= 32",
                g = entry_shaped(FIRST),
                f = entry_family(FIRST)
            ),
            format!(
                "'{n}: ' + {p} + ' is longer than 32, the longest prefix of an IPv4 pool'",
                n = names.prefix,
                p = prefix_text()
            ),
            Some(".prefix"),
        )
    }

    /// The subnet of the first entry's (first) address and `prefix` (only where the prefix fits
    /// the family).
    fn subnet_cidr() -> String {
        format!(
            "cidr({a} + '/' + {n}[self.prefix])",
            a = entry_address(FIRST),
            n = numbers()
        )
    }

    /// Whether entry `e` lies inside the subnet `s` (CEL names).
    fn inside(e: &str, s: &str) -> String {
        format!(
            "(isCIDR({e}) ? {s}.containsCIDR(cidr({e})) : {s}.containsIP({e}.split('-')[0]) && {s}.containsIP({e}.split('-')[size({e}.split('-')) - 1]))"
        )
    }

    /// True when the subnet of the first entry's address and `prefix` is not defined yet: some
    /// entry has no shape or another family, or the prefix does not fit (other rules report
    /// those).
    fn subnet_undefined() -> String {
        let f = entry_family(FIRST);
        format!(
            "size(self.addresses) == 0 || !self.addresses.all(e, {ge}) || !self.addresses.all(e, {fe} == {f}) || self.prefix < 1 || self.prefix > ({f} == 4 ? 32 : 128)",
            ge = entry_shaped("e"),
            fe = entry_family("e"),
        )
    }

    /// Subnet rule: every entry of `addresses` lies inside the subnet of the first entry's
    /// address and `prefix`.
    pub fn within_subnet(names: SubnetNames) -> Rule {
        rule(
            format!(
                "{u} || [{s}].all(s, self.addresses.all(e, {ie}))",
                u = subnet_undefined(),
                s = subnet_cidr(),
                ie = inside("e", "s"),
            ),
            format!(
                "[{s}].map(s, '{n}: ' + self.addresses.filter(e, !{ie})[0] + ' is not inside the /' + {p} + ' subnet ({prefix}) of ' + {a} + ', the first address of {n}')[0]",
                n = names.addresses,
                prefix = names.prefix,
                s = subnet_cidr(),
                ie = inside("e", "s"),
                p = prefix_text(),
                a = entry_address(FIRST),
            ),
            Some(".addresses"),
        )
    }

    /// Subnet rule for `additionalSubnets` entries: the gateway lies inside the subnet of the
    /// first entry's address and `prefix` (the spec's own gateway need not, as in the reference).
    pub fn gateway_inside(names: SubnetNames) -> Rule {
        let f = entry_family(FIRST);
        rule(
            format!(
                "!has(self.gateway) || !isIP(self.gateway) || {u} || ip(self.gateway).family() != {f} || [{s}].all(s, s.containsIP(self.gateway))",
                u = subnet_undefined(),
                s = subnet_cidr(),
            ),
            format!(
                "'{g}: ' + self.gateway + ' is not inside the /' + {p} + ' subnet ({prefix}) of ' + {a} + ', the first address of {n}'",
                g = names.gateway,
                n = names.addresses,
                prefix = names.prefix,
                p = prefix_text(),
                a = entry_address(FIRST),
            ),
            Some(".gateway"),
        )
    }

    /// Subnet rule: the gateway has the family of the addresses.
    pub fn gateway_family(names: SubnetNames) -> Rule {
        let f = entry_family(FIRST);
        rule(
            format!(
                "!has(self.gateway) || !isIP(self.gateway) || size(self.addresses) == 0 || !{g} || ip(self.gateway).family() == {f}",
                g = entry_shaped(FIRST)
            ),
            format!(
                "'{g}: ' + self.gateway + ' is IPv' + {gt} + ' but {a} is IPv' + {ft}",
                g = names.gateway,
                a = names.addresses,
                gt = family_text("ip(self.gateway).family()"),
                ft = family_text(&f),
            ),
            Some(".gateway"),
        )
    }

    /// Spec rule: every excluded entry has the family of the addresses.
    pub fn excluded_family() -> Rule {
        let f = entry_family(FIRST);
        rule(
            format!(
                "!has(self.excludedAddresses) || size(self.addresses) == 0 || !{g} || self.excludedAddresses.all(x, !{gx} || {fx} == {f})",
                g = entry_shaped(FIRST),
                gx = entry_shaped("x"),
                fx = entry_family("x"),
            ),
            format!(
                "'spec.excludedAddresses: ' + self.excludedAddresses.filter(x, {gx} && {fx} != {f})[0] + ' is IPv' + ({f} == 4 ? '6' : '4') + ' but spec.addresses is IPv' + {ft}",
                gx = entry_shaped("x"),
                fx = entry_family("x"),
                ft = family_text(&f),
            ),
            Some(".excludedAddresses"),
        )
    }

    /// Rule on each `preAllocations[].address`: one IP.
    pub fn pre_allocation_address_parses() -> Value {
        to_json(rule(
            "isIP(self)".into(),
            "'spec.preAllocations: address \"' + self + '\" is not an IP address (one address, no CIDR or range)'".into(),
            None,
        ))
    }

    /// Spec rule: every pre-allocated address has the family of the addresses.
    pub fn pre_allocation_family() -> Rule {
        let f = entry_family(FIRST);
        rule(
            format!(
                "!has(self.preAllocations) || size(self.addresses) == 0 || !{g} || self.preAllocations.all(p, !isIP(p.address) || ip(p.address).family() == {f})",
                g = entry_shaped(FIRST),
            ),
            format!(
                "'spec.preAllocations: every address must be IPv' + {ft} + ', the family of spec.addresses'",
                ft = family_text(&f),
            ),
            Some(".preAllocations"),
        )
    }

    /// Per-kind rule on each entry of `preAllocations`: the claims of an `InClusterIPPool` are in its own
    /// namespace (`claimNamespace` left out), a `GlobalInClusterIPPool` serves every namespace
    /// (`claimNamespace` required). The two kinds share one spec type, so [`crate::api::crds`]
    /// adds this rule to each CRD.
    pub fn pre_allocation_namespace(namespaced: bool) -> Value {
        if namespaced {
            to_json(rule(
                "self.claimNamespace == ''".into(),
                "'spec.preAllocations: claimNamespace ' + self.claimNamespace + ' is set for claim ' + self.claimName + ': an InClusterIPPool serves the claims of its own namespace only; leave claimNamespace out'".into(),
                None,
            ))
        } else {
            to_json(rule(
                "self.claimNamespace != ''".into(),
                "'spec.preAllocations: claimNamespace is required on a GlobalInClusterIPPool (claim ' + self.claimName + ')'".into(),
                None,
            ))
        }
    }

    /// The first address of subnet `o`'s first entry, and whether the subnet of it and `o`'s
    /// prefix is defined and of the family `f` of the spec's addresses (the entries themselves
    /// are checked by each subnet's own rules).
    fn subnet_defined(o: &str, f: &str) -> String {
        let first = format!("{o}.addresses[0]");
        format!(
            "(size({o}.addresses) > 0 && {g} && {fam} == {f} && {o}.prefix >= 1 && {o}.prefix <= ({f} == 4 ? 32 : 128))",
            g = entry_shaped(&first),
            fam = entry_family(&first),
        )
    }

    /// The subnet of `o`'s first entry and prefix, as a CIDR (behind [`subnet_defined`]).
    fn subnet_of(o: &str) -> String {
        format!(
            "cidr({a} + '/' + {n}[{o}.prefix])",
            a = entry_address(&format!("{o}.addresses[0]")),
            n = numbers(),
        )
    }

    /// Spec rule: the first entry of every `additionalSubnets` entry has the family of
    /// `spec.addresses` (each subnet's own rule checks its other entries against its first).
    pub fn additional_subnets_family() -> Rule {
        let f = entry_family(FIRST);
        let other_family = |s: &str| {
            let first = format!("{s}.addresses[0]");
            format!(
                "(size({s}.addresses) > 0 && {g} && {fam} != {f})",
                g = entry_shaped(&first),
                fam = entry_family(&first),
            )
        };
        rule(
            format!(
                "!has(self.additionalSubnets) || size(self.addresses) == 0 || !{g} || !self.additionalSubnets.exists(s, {o})",
                g = entry_shaped(FIRST),
                o = other_family("s"),
            ),
            format!(
                "'spec.additionalSubnets: ' + self.additionalSubnets.filter(s, {o})[0].addresses[0] + ' is IPv' + ({f} == 4 ? '6' : '4') + ' but spec.addresses is IPv' + {ft} + ': a pool holds addresses of one family'",
                o = other_family("s"),
                ft = family_text(&f),
            ),
            Some(".additionalSubnets"),
        )
    }

    /// Spec rule: the subnets of a pool (the spec's own, and every `additionalSubnets` entry's)
    /// do not overlap, so that every address has one prefix and one gateway. Two CIDRs overlap
    /// exactly when one contains the other; each subnet overlaps itself, so "no other" is
    /// "exactly one" among the entries.
    pub fn additional_subnets_disjoint() -> Rule {
        let f = entry_family(FIRST);
        let overlap =
            |a: &str, b: &str| format!("({a}.containsCIDR({b}) || {b}.containsCIDR({a}))");
        let clear = format!(
            "(!{ds} || [{cs}].all(c, (!{dself} || [{cself}].all(o, !{oo})) && self.additionalSubnets.exists_one(t, {dt} && [{ct}].all(d, {od}))))",
            ds = subnet_defined("s", &f),
            cs = subnet_of("s"),
            dself = subnet_defined("self", &f),
            cself = subnet_of("self"),
            oo = overlap("c", "o"),
            dt = subnet_defined("t", &f),
            ct = subnet_of("t"),
            od = overlap("c", "d"),
        );
        rule(
            format!(
                "!has(self.additionalSubnets) || size(self.addresses) == 0 || !{g} || self.additionalSubnets.all(s, {clear})",
                g = entry_shaped(FIRST),
            ),
            format!(
                "[self.additionalSubnets.filter(s, !{clear})[0]].map(s, 'spec.additionalSubnets: the /' + {n}[s.prefix] + ' subnet of ' + {a} + ' overlaps the subnet of spec.addresses or of another entry: the subnets of one pool must not overlap, so that each address has one prefix and one gateway')[0]",
                n = numbers(),
                a = entry_address("s.addresses[0]"),
            ),
            Some(".additionalSubnets"),
        )
    }
}
