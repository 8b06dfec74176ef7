//! CAPI kinds inpool reads and writes: `ipam.cluster.x-k8s.io/v1beta2` [`IPAddressClaim`] and
//! [`IPAddress`], and the part of `cluster.x-k8s.io/v1beta2` [`Cluster`] inpool reads.
//!
//! Field names, optionality and constraints (lengths, patterns, bounds, list types) follow
//! CAPI's CRDs (v1.14, `api/ipam/v1beta2`, `api/core/v1beta2`): every optional field is an
//! `Option` that is omitted when `None`, never sent as `""`, and the claim's `status` is never
//! sent as `{}` (its schema has `minProperties: 1`; see [`IPAddressClaimStatus::is_empty`] and
//! [`IPAddressClaim::set_status`]).
//!
//! The schemas derived from these types are only used for the local-use CRDs that `crdgen`
//! writes to `config/local-capi/` (for a demo without CAPI); CAPI core installs the real ones.
//!
//! Writing status: use server-side apply of only inpool's fields ([`claim_status_with_ready`] +
//! [`claim_status_patch`]) through the `status` subresource, so that labels, annotations,
//! owner references, finalizers and conditions of other types set by other managers survive.

// kube-derive's `printcolumn(type_ = ...)` repeats keys by design; clippy reads them as
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::conditions::{
    DesiredCondition, LegacyCondition, set_condition_at, to_legacy, upsert_legacy,
};

/// Pattern of a DNS subdomain (object names, API groups), as in CAPI's schema.
pub const DNS1123_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Pattern of a kind, as in CAPI's schema.
pub const KIND_PATTERN: &str = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$";

/// Reference to the pool an address is (to be) allocated from. All three fields are required.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPPoolReference {
    /// apiGroup of the IPPool (group only, no version), e.g. `ipam.cluster.x-k8s.io`.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS1123_SUBDOMAIN_PATTERN))]
    pub api_group: String,
    /// kind of the IPPool, e.g. `InClusterIPPool`.
    #[schemars(length(min = 1, max = 63), regex(pattern = KIND_PATTERN))]
    pub kind: String,
    /// name of the IPPool.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS1123_SUBDOMAIN_PATTERN))]
    pub name: String,
}

impl IPPoolReference {
    pub fn new(
        api_group: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            api_group: api_group.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }
}

/// Spec of an `IPAddressClaim` (`ipam.cluster.x-k8s.io/v1beta2`). CAPI makes it immutable.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ipam.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "IPAddressClaim",
    plural = "ipaddressclaims",
    singular = "ipaddressclaim",
    namespaced,
    status = "IPAddressClaimStatus",
    category = "cluster-api",
    doc = "IPAddressClaim is the Schema for the ipaddressclaim API.",
    printcolumn(
        name = "Pool Name",
        type_ = "string",
        json_path = ".spec.poolRef.name",
        description = "Name of the pool to allocate an address from"
    ),
    printcolumn(
        name = "Pool Kind",
        type_ = "string",
        json_path = ".spec.poolRef.kind",
        description = "Kind of the pool to allocate an address from"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time duration since creation of IPAddressClaim"
    ),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct IPAddressClaimSpec {
    /// clusterName is the name of the Cluster this object belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: Option<String>,
    /// poolRef is a reference to the pool from which an IP address should be created.
    pub pool_ref: IPPoolReference,
}

/// Reference to the `IPAddress` created for a claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IPAddressReference {
    /// name of the IPAddress.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS1123_SUBDOMAIN_PATTERN))]
    pub name: String,
}

/// Status of an `IPAddressClaim`. Every part is optional and omitted when empty; the whole
/// status must not be sent when [`is_empty`](Self::is_empty) (the schema requires at least one
/// property).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct IPAddressClaimStatus {
    /// addressRef is a reference to the address that was created for this claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_ref: Option<IPAddressReference>,
    /// conditions represents the observations of a IPAddressClaim's current state.
    /// Known condition types are Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::api::conditions::conditions_schema")]
    pub conditions: Option<Vec<Condition>>,
    /// deprecated groups all the status fields that are deprecated and will be removed when all
    /// the nested field are removed.
    #[serde(default, skip_serializing_if = "deprecated_is_empty")]
    pub deprecated: Option<IPAddressClaimDeprecatedStatus>,
}

fn deprecated_is_empty(d: &Option<IPAddressClaimDeprecatedStatus>) -> bool {
    d.as_ref()
        .is_none_or(IPAddressClaimDeprecatedStatus::is_empty)
}

fn v1beta1_is_empty(d: &Option<IPAddressClaimV1Beta1DeprecatedStatus>) -> bool {
    d.as_ref().is_none_or(|v| v.conditions.is_none())
}

/// `status.deprecated` of a claim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IPAddressClaimDeprecatedStatus {
    /// v1beta1 groups all the status fields that are deprecated and will be removed when
    /// support for v1beta1 will be dropped.
    #[serde(default, skip_serializing_if = "v1beta1_is_empty")]
    pub v1beta1: Option<IPAddressClaimV1Beta1DeprecatedStatus>,
}

impl IPAddressClaimDeprecatedStatus {
    /// True when nothing below would be serialised.
    pub fn is_empty(&self) -> bool {
        v1beta1_is_empty(&self.v1beta1)
    }
}

/// `status.deprecated.v1beta1` of a claim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IPAddressClaimV1Beta1DeprecatedStatus {
    /// conditions summarises the current state of the IPAddressClaim (legacy CAPI shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<LegacyCondition>>,
}

impl IPAddressClaimStatus {
    /// True when this status would serialise as `{}`.
    pub fn is_empty(&self) -> bool {
        self.address_ref.is_none()
            && self.conditions.is_none()
            && deprecated_is_empty(&self.deprecated)
    }

    /// The legacy condition list (`status.deprecated.v1beta1.conditions`), if any.
    pub fn legacy_conditions(&self) -> Option<&Vec<LegacyCondition>> {
        self.deprecated
            .as_ref()?
            .v1beta1
            .as_ref()?
            .conditions
            .as_ref()
    }

    /// Sets the legacy condition list (`None` removes it).
    pub fn set_legacy_conditions(&mut self, list: Option<Vec<LegacyCondition>>) {
        match list {
            None => {
                if let Some(v1) = self.deprecated.as_mut().and_then(|d| d.v1beta1.as_mut()) {
                    v1.conditions = None;
                }
            }
            Some(list) => {
                self.deprecated
                    .get_or_insert_with(Default::default)
                    .v1beta1
                    .get_or_insert_with(Default::default)
                    .conditions = Some(list);
            }
        }
    }
}

impl IPAddressClaim {
    /// Sets `status`, storing `None` when the given status is empty, so that the object never
    /// serialises `status: {}`.
    pub fn set_status(&mut self, status: IPAddressClaimStatus) {
        self.status = (!status.is_empty()).then_some(status);
    }

    /// The cluster this claim belongs to: `spec.clusterName`, else the deprecated
    /// `cluster.x-k8s.io/cluster-name` label. Empty values count as unset.
    pub fn cluster_name(&self) -> Option<&str> {
        self.spec
            .cluster_name
            .as_deref()
            .filter(|s| !s.is_empty())
            .or_else(|| {
                self.metadata
                    .labels
                    .as_ref()?
                    .get(super::CLUSTER_NAME_LABEL)
                    .map(String::as_str)
                    .filter(|s| !s.is_empty())
            })
    }

    /// The conditions in `status.conditions` (empty when unset).
    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
    }

    /// `status.addressRef.name`, the claim's `IPAddress`, when set.
    pub fn address_ref(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.address_ref.as_ref())
            .map(|r| r.name.as_str())
    }
}

/// Builds the status inpool applies to a claim: `addressRef` (when an address is held), the
/// given condition (normally `Ready`) upserted against the claim's current conditions (so
/// `lastTransitionTime` is kept unless the status flips), and the same condition mirrored
/// into the legacy list.
///
/// Only inpool's fields are included, ready for server-side apply with [`claim_status_patch`]:
/// - `status.conditions` is a list-map keyed by `type`, so the apply only owns the entries it
///   sends; conditions of other types stay with their managers.
/// - `status.deprecated.v1beta1.conditions` is an atomic list in CAPI's schema, so applying
///   it replaces the whole list: the returned list therefore starts from the claim's current
///   legacy list and only upserts the mirrored entry, keeping the others.
pub fn claim_status_with_ready(
    claim: &IPAddressClaim,
    desired: DesiredCondition,
    address_ref: Option<&str>,
    now: Time,
) -> IPAddressClaimStatus {
    let legacy = claim
        .status
        .as_ref()
        .and_then(|s| s.legacy_conditions())
        .cloned()
        .unwrap_or_default();
    status_with_ready(
        claim.conditions().to_vec(),
        legacy,
        desired,
        address_ref,
        now,
    )
}

/// [`claim_status_with_ready`] from the parts of a claim it reads: its current conditions (only
/// the entry of the desired type matters) and its whole legacy list.
pub fn status_with_ready(
    mut current: Vec<Condition>,
    mut legacy: Vec<LegacyCondition>,
    desired: DesiredCondition,
    address_ref: Option<&str>,
    now: Time,
) -> IPAddressClaimStatus {
    let type_ = desired.type_.clone();
    set_condition_at(&mut current, desired, now);
    let ours: Vec<Condition> = current.into_iter().filter(|c| c.type_ == type_).collect();
    for c in &ours {
        upsert_legacy(&mut legacy, to_legacy(c));
    }

    let mut status = IPAddressClaimStatus {
        address_ref: address_ref.map(|n| IPAddressReference { name: n.to_owned() }),
        conditions: Some(ours),
        deprecated: None,
    };
    status.set_legacy_conditions(Some(legacy));
    status
}

/// Server-side-apply body for the claim's `status` subresource: `apiVersion`, `kind` and the
/// given status (left out entirely when empty, never `status: {}`).
///
/// Send with `Api::<IPAddressClaim>::patch_status(name, &PatchParams::apply(MANAGER).force(),
/// &Patch::Apply(body))`. `force` is needed because the legacy list is atomic (see
/// [`claim_status_with_ready`]).
pub fn claim_status_patch(status: &IPAddressClaimStatus) -> Value {
    let mut body = Map::new();
    body.insert("apiVersion".into(), IPAddressClaim::api_version(&()).into());
    body.insert("kind".into(), IPAddressClaim::kind(&()).into());
    if !status.is_empty() {
        body.insert(
            "status".into(),
            serde_json::to_value(status).expect("claim status serialises"),
        );
    }
    Value::Object(body)
}

/// Reference to the claim an `IPAddress` was created for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IPAddressClaimReference {
    /// name of the IPAddressClaim.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS1123_SUBDOMAIN_PATTERN))]
    pub name: String,
}

/// Spec of an `IPAddress` (`ipam.cluster.x-k8s.io/v1beta2`). CAPI makes it immutable; the kind
/// has no status.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ipam.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "IPAddress",
    plural = "ipaddresses",
    singular = "ipaddress",
    namespaced,
    category = "cluster-api",
    doc = "IPAddress is the Schema for the ipaddress API.",
    printcolumn(
        name = "Address",
        type_ = "string",
        json_path = ".spec.address",
        description = "Address"
    ),
    printcolumn(
        name = "Pool Name",
        type_ = "string",
        json_path = ".spec.poolRef.name",
        description = "Name of the pool the address is from"
    ),
    printcolumn(
        name = "Pool Kind",
        type_ = "string",
        json_path = ".spec.poolRef.kind",
        description = "Kind of the pool the address is from"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time duration since creation of IPAddress"
    ),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct IPAddressSpec {
    /// address is the IP address (no prefix length).
    #[schemars(length(min = 1, max = 39))]
    pub address: String,
    /// claimRef is a reference to the claim this IPAddress was created for.
    pub claim_ref: IPAddressClaimReference,
    /// gateway is the network gateway of the network the address is from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 39))]
    pub gateway: Option<String>,
    /// poolRef is a reference to the pool that this IPAddress was created from.
    pub pool_ref: IPPoolReference,
    /// prefix is the prefix of the address.
    #[schemars(range(min = 0, max = 128))]
    pub prefix: i32,
}

/// Spec of CAPI's `Cluster` (`cluster.x-k8s.io/v1beta2`), the root [`Cluster`] being the part
/// inpool reads (use it only to read; CAPI core owns the kind). inpool reads only `spec.paused`; every other field is kept as is
/// (`other`), so a Cluster read and written back through this type loses nothing.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Cluster",
    plural = "clusters",
    singular = "cluster",
    namespaced,
    status = "ClusterStatus",
    shortname = "cl",
    category = "cluster-api",
    doc = "Cluster is the Schema for the clusters API (the part inpool reads).",
    printcolumn(
        name = "Paused",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Paused\")].status",
        description = "Reconciliation paused",
        priority = 10
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Cluster status such as Pending/Provisioning/Provisioned/Deleting/Failed"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time duration since creation of Cluster"
    ),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// paused can be used to prevent controllers from processing the Cluster and all its
    /// associated objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Every other field of the spec, untouched.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl JsonSchema for ClusterSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ClusterSpec".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "spec is the desired state of Cluster. Only the fields inpool reads are described; the others are preserved.",
            "minProperties": 1,
            "properties": {
                "paused": {
                    "type": "boolean",
                    "description": "paused can be used to prevent controllers from processing the Cluster and all its associated objects."
                }
            },
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

/// Status of a CAPI `Cluster`: the conditions, phase and observedGeneration are typed, every
/// other field is kept as is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// conditions represents the observations of a Cluster's current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// observedGeneration is the latest generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// phase represents the current phase of cluster actuation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Every other field of the status, untouched.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl JsonSchema for ClusterStatus {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ClusterStatus".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let conditions = crate::api::conditions::conditions_schema(generator);
        schemars::json_schema!({
            "type": "object",
            "description": "status is the observed state of Cluster. Only the fields inpool may read are described; the others are preserved.",
            "minProperties": 1,
            "properties": {
                "conditions": conditions,
                "observedGeneration": {
                    "type": "integer",
                    "format": "int64",
                    "minimum": 1,
                    "description": "observedGeneration is the latest generation observed by the controller."
                },
                "phase": {
                    "type": "string",
                    "enum": ["Pending", "Provisioning", "Provisioned", "Deleting", "Failed", "Unknown"],
                    "description": "phase represents the current phase of cluster actuation."
                }
            },
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

impl Cluster {
    /// `spec.paused`, false when unset.
    pub fn is_paused(&self) -> bool {
        self.spec.paused.unwrap_or(false)
    }
}
