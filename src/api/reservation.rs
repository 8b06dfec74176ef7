//! `IPAddressReservation` (`ipam.inpool.dev/v1alpha1`, cluster-scoped): inpool's own record
//! that an address is held. Its *name* encodes the address and its uniqueness scope, so the API
//! server refuses a second holder (see `controllers::state::reservation` for the naming and use).
#![allow(clippy::duplicated_attributes)] // kube-derive repeats `type_` in printcolumns

use k8s_openapi::jiff::Timestamp;
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A held address, named after the address and its scope (see the module docs).
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "ipam.inpool.dev",
    version = "v1alpha1",
    kind = "IPAddressReservation",
    plural = "ipaddressreservations",
    singular = "ipaddressreservation",
    shortname = "ipres",
    category = "inpool",
    doc = "IPAddressReservation records that an address is held, so that the API server refuses to hand it out twice. Managed by inpool; do not edit.",
    printcolumn(name = "Address", type_ = "string", json_path = ".spec.address"),
    printcolumn(name = "Pool", type_ = "string", json_path = ".spec.poolName"),
    printcolumn(
        name = "Claim Namespace",
        type_ = "string",
        json_path = ".spec.claimNamespace"
    ),
    printcolumn(name = "Claim", type_ = "string", json_path = ".spec.claimName"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct IPAddressReservationSpec {
    /// The address, in canonical text (for a prefix pool, the first address of the sub-prefix).
    pub address: String,
    /// `InClusterIPPool`, `GlobalInClusterIPPool`, `InClusterPrefixPool` or
    /// `GlobalInClusterPrefixPool`.
    pub pool_kind: String,
    /// Namespace of an `InClusterIPPool` or `InClusterPrefixPool`; absent for global pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_namespace: Option<String>,
    pub pool_name: String,
    pub claim_namespace: String,
    pub claim_name: String,
    /// UID of the claim: a claim deleted and created again under the same name is another
    /// claim, and this reservation is not its. Absent on reservations made by builds before the
    /// first release, v0.1.0.
    #[serde(default, rename = "claimUID", skip_serializing_if = "Option::is_none")]
    pub claim_uid: Option<String>,
    /// For a prefix pool: the length of the sub-prefix held from `address` on (the pool's
    /// `allocationPrefixLength` when it was reserved), so that an overlapping pool of another
    /// unit size counts the whole sub-prefix as used. Absent for an address, and on reservations
    /// made by builds before the first release, v0.1.0 (the sub-prefix's `IPAddress` records its
    /// length).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 128))]
    pub prefix_length: Option<i32>,
}

/// Label on a reservation whose claim has been released while its pool's
/// `addressReuseGracePeriodSeconds` keeps the address from being handed out again.
pub const RELEASED_LABEL: &str = "ipam.inpool.dev/released";
/// Annotation on a released reservation: when (RFC 3339) it is deleted and its address freed.
pub const REUSABLE_AFTER_ANNOTATION: &str = "ipam.inpool.dev/reusable-after";

impl IPAddressReservation {
    /// Whether the reservation outlives its released claim until its reuse grace period is over
    /// (see [`RELEASED_LABEL`]).
    pub fn is_released(&self) -> bool {
        self.labels().contains_key(RELEASED_LABEL)
    }

    /// When a released reservation's address may be handed out again; `None` if the annotation
    /// is missing or unreadable (then it is due now: an address is never held forever by
    /// mistake).
    pub fn reusable_after(&self) -> Option<Timestamp> {
        self.annotations()
            .get(REUSABLE_AFTER_ANNOTATION)?
            .parse()
            .ok()
    }
}
