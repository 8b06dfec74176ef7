//! inpool's pools: `ipam.cluster.x-k8s.io/v1alpha2` [`InClusterIPPool`] (namespaced) and
//! [`GlobalInClusterIPPool`] (cluster-scoped), field-compatible with the reference in-cluster
//! provider's v1alpha2 schema. Both kinds share one spec ([`InClusterIPPoolSpec`]) and one status
//! ([`InClusterIPPoolStatus`]), as in the reference.
//!
//! Validation lives in the CRD as CEL rules (`x-kubernetes-validations`), so no webhook (and no
//! cert-manager) is needed. They reproduce the reference webhook's decisions for everything one
//! object can tell; see [`rules`] for the exact rules and docs/pools.md for the messages.
//!
//! - this module: the types of both kinds, their spec and status, the [`IPPool`] trait every
//!   pool kind implements, and the status patch;
//! - [`schema`]: the OpenAPI schemas written by hand for the fields whose bounds and rules the
//!   derive cannot express;
//! - [`rules`]: the CEL rules, built as text.

// kube-derive's `printcolumn(type_ = ...)` repeats keys by design; clippy reads them as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use super::key::Name;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub mod rules;
mod schema;
pub(crate) use schema::parent_pool_schema;

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
#[x_kube(validation = rules::required_unless_parent("addresses"))]
#[x_kube(validation = rules::required_unless_parent("prefix"))]
#[x_kube(validation = rules::gateway_needs_addresses())]
#[x_kube(validation = rules::single_family())]
#[x_kube(validation = rules::ipv4_prefix())]
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
    /// subnet given by the first entry and `prefix`. Required unless `parentPool` is set; a
    /// written list is never empty, so empty here means left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::addresses_schema")]
    pub addresses: Vec<String>,

    /// Prefix is the network prefix to use (1-32 for IPv4, 1-128 for IPv6). Required unless
    /// `parentPool` is set; a written prefix is at least 1, so 0 here means left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(schema_with = "schema::prefix_schema")]
    #[x_kube(validation = rules::prefix_positive())]
    pub prefix: i32,

    /// Gateway is the address of the network's gateway (optional, same family as the
    /// addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::gateway_schema")]
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
    #[schemars(schema_with = "schema::excluded_addresses_schema")]
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
    #[schemars(schema_with = "schema::pre_allocations_schema")]
    pub pre_allocations: Option<Vec<PreAllocation>>,

    /// AdditionalSubnets are more subnets the pool hands addresses out of, each with its own
    /// prefix and gateway, beside the pool's own subnet (`addresses`, `prefix`, `gateway`).
    /// Addresses are handed out from the pool's own subnet first, then from these in the order
    /// written (inpool's addition; the reference has no such field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::additional_subnets_schema")]
    pub additional_subnets: Option<Vec<AdditionalSubnet>>,

    /// ParentPool names a prefix pool this pool carves its subnets from: inpool claims
    /// `subPrefixes` sub-prefixes of it, and each one realised is one more subnet of this pool
    /// (inpool's addition; the reference has no such field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::parent_pool_schema")]
    pub parent_pool: Option<ParentPool>,
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

/// `spec.parentPool`: where a pool's carved subnets come from, and how many it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParentPool {
    /// PoolRef names the parent: a GlobalInClusterPrefixPool, or an InClusterPrefixPool of this
    /// pool's namespace.
    pub pool_ref: super::IPPoolReference,
    /// SubPrefixes is how many sub-prefixes of the parent (each of its allocationPrefixLength)
    /// the pool holds, each one subnet: 1 to 16, 1 when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_prefixes: Option<i32>,
    /// ClaimNamespace is where inpool creates the claims on the parent: required on a
    /// GlobalInClusterIPPool, left out on an InClusterIPPool (its own namespace).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub claim_namespace: String,
}

impl ParentPool {
    /// How many sub-prefixes the pool holds.
    pub fn count(&self) -> usize {
        usize::try_from(self.sub_prefixes.unwrap_or(1)).unwrap_or(0)
    }
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
            parent_pool: None,
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
    /// CarvedPrefixes are the sub-prefixes the pool holds from spec.parentPool, one per claim
    /// on the parent, in the claims' order: the subnets it hands out besides spec.addresses
    /// (inpool's addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carved_prefixes: Option<Vec<CarvedPrefix>>,
}

impl InClusterIPPoolStatus {
    /// True when this status would serialise as `{}`.
    pub fn is_empty(&self) -> bool {
        self.ip_addresses.is_none() && self.conditions.is_none() && self.carved_prefixes.is_none()
    }
}

/// One entry of `status.carvedPrefixes`: a sub-prefix of the parent and the claim that holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CarvedPrefix {
    /// ClaimName is the IPAddressClaim on the parent that holds the sub-prefix.
    pub claim_name: String,
    /// Prefix is the sub-prefix, as a CIDR.
    pub prefix: String,
}

/// Address counts of a pool, as the reference provider reports them (Go `int`; counts that do
/// not fit report as the maximum).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPAddressesStatus {
    /// Total is the total number of IPs configured for the pool.
    #[schemars(schema_with = "schema::integer_schema")]
    pub total: i64,
    /// Used is the count of allocated IPs in the pool.
    #[schemars(schema_with = "schema::integer_schema")]
    pub used: i64,
    /// Free is the count of unallocated IPs in the pool.
    #[schemars(schema_with = "schema::integer_schema")]
    pub free: i64,
    /// OutOfRange is the count of allocated IPs in the pool that is not contained within
    /// spec.addresses.
    #[schemars(schema_with = "schema::integer_schema")]
    pub out_of_range: i64,
}

/// What every pool kind has in common, IP pools and prefix pools alike: an identity, a spec of
/// one of two shapes, and the one status shape.
pub trait IPPool:
    Resource<DynamicType = (), Scope: super::kinds::PoolScope>
    + kube::CustomResourceExt
    + Serialize
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Clone
    + Send
    + Sync
    + 'static
{
    /// The kind, as [`super::PoolKey`] names it.
    const KIND: super::PoolKind;
    /// The spec, by shape.
    fn spec_of(&self) -> PoolSpecRef<'_>;
    /// The status, if any.
    fn pool_status(&self) -> Option<&InClusterIPPoolStatus>;

    /// The kind's objects in `namespace` (`None`: every namespace); a global kind's are
    /// cluster-wide whatever the namespace.
    fn api(client: kube::Client, namespace: Option<&str>) -> kube::Api<Self> {
        <Self::Scope as super::kinds::PoolScope>::api(client, namespace)
    }

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

impl<'a> PoolSpecRef<'a> {
    /// The prefix pool this pool is carved from (`spec.parentPool`), if any.
    pub fn parent_pool(self) -> Option<&'a ParentPool> {
        match self {
            PoolSpecRef::Addresses(spec) => spec.parent_pool.as_ref(),
            PoolSpecRef::Prefixes(spec) => spec.parent_pool.as_ref(),
        }
    }

    /// Whether the spec lists addresses (prefixes) of its own, beside any carved from a parent.
    pub fn has_own_range(self) -> bool {
        match self {
            PoolSpecRef::Addresses(spec) => !spec.addresses.is_empty(),
            PoolSpecRef::Prefixes(spec) => !spec.prefixes.is_empty(),
        }
    }
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
