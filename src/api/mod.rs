//! Kubernetes API types: the CAPI IPAM kinds inpool reads and writes, inpool's pool CRDs, and
//! the condition helpers.
//!
//! - [`capi`]: `ipam.cluster.x-k8s.io/v1beta2` [`IPAddressClaim`] and [`IPAddress`], and the part
//!   of `cluster.x-k8s.io/v1beta2` [`Cluster`] inpool reads. Field names, optionality and
//!   constraints follow CAPI's CRDs; optional fields are omitted rather than sent empty.
//! - [`pool`]: `ipam.cluster.x-k8s.io/v1alpha2` [`InClusterIPPool`] (namespaced) and
//!   [`GlobalInClusterIPPool`] (cluster-scoped), field-compatible with the reference in-cluster
//!   provider, with their validation as CEL rules inside the CRD.
//! - [`prefix_pool`]: `ipam.cluster.x-k8s.io/v1alpha2` [`InClusterPrefixPool`] and
//!   [`GlobalInClusterPrefixPool`], the reference's prefix pools (IPv6 sub-prefixes), likewise.
//! - [`conditions`]: upsert of `metav1.Condition` by type, and the mirror into CAPI's legacy
//!   (v1beta1) condition shape.
//! - [`key`]: [`PoolKey`], the one identity of a pool every layer uses.
//!
//! The constants below are the exact identifiers of the IPAM contract (see docs/contract.md).

/// `Deref`, `DerefMut` and `From` between a global pool kind's spec and the spec it wraps (each
/// kind needs a derive of its own, the JSON and the schema are the same).
macro_rules! wraps_spec {
    ($global:ident, $inner:ident) => {
        impl std::ops::Deref for $global {
            type Target = $inner;
            fn deref(&self) -> &$inner {
                &self.0
            }
        }

        impl std::ops::DerefMut for $global {
            fn deref_mut(&mut self) -> &mut $inner {
                &mut self.0
            }
        }

        impl From<$inner> for $global {
            fn from(spec: $inner) -> Self {
                Self(spec)
            }
        }
    };
}

pub mod capi;
pub mod carve;
pub mod conditions;
pub mod crds;
pub mod key;
pub mod kinds;
pub mod pool;
pub mod prefix_pool;
pub mod reservation;

pub use capi::{
    Cluster, ClusterSpec, ClusterStatus, IPAddress, IPAddressClaim, IPAddressClaimDeprecatedStatus,
    IPAddressClaimReference, IPAddressClaimSpec, IPAddressClaimStatus,
    IPAddressClaimV1Beta1DeprecatedStatus, IPAddressReference, IPAddressSpec, IPPoolReference,
    claim_status_patch, claim_status_with_ready, status_with_ready,
};
pub use conditions::{
    ConditionStatus, DesiredCondition, LegacyCondition, LegacySeverity, find_condition,
    legacy_severity, mirror_to_legacy, set_condition, set_condition_at, to_legacy, upsert_legacy,
};
pub use key::{Name, ObjectKey, PoolKey, PoolKind, Scope};
pub use pool::{
    AdditionalSubnet, CarvedPrefix, GlobalInClusterIPPool, GlobalInClusterIPPoolSpec,
    IPAddressesStatus, IPPool, InClusterIPPool, InClusterIPPoolSpec, InClusterIPPoolStatus,
    MAX_ADDITIONAL_SUBNETS, MAX_PRE_ALLOCATIONS, MAX_SUBNET_ADDRESS_ENTRIES, ParentPool,
    PoolSpecRef, PreAllocation, pool_status_patch,
};
pub use prefix_pool::{
    GlobalInClusterPrefixPool, GlobalInClusterPrefixPoolSpec, InClusterPrefixPool,
    InClusterPrefixPoolSpec,
};

/// API group of the CAPI IPAM kinds and of inpool's pools.
pub const IPAM_GROUP: &str = "ipam.cluster.x-k8s.io";
/// Version of `IPAddressClaim` / `IPAddress` inpool reads and writes.
pub const IPAM_CAPI_VERSION: &str = "v1beta2";
/// Version of the pool kinds.
pub const POOL_VERSION: &str = "v1alpha2";
/// API group of CAPI core (`Cluster`).
pub const CLUSTER_GROUP: &str = "cluster.x-k8s.io";
/// Version of `Cluster` inpool reads.
pub const CLUSTER_VERSION: &str = "v1beta2";

/// Kind of the claim.
pub const IP_ADDRESS_CLAIM_KIND: &str = "IPAddressClaim";
/// Kind of the address.
pub const IP_ADDRESS_KIND: &str = "IPAddress";
/// Kind of the CAPI cluster.
pub const CLUSTER_KIND: &str = "Cluster";

/// Finalizer on claims inpool owns: the address is released before the claim goes.
pub const CLAIM_FINALIZER: &str = "ipam.cluster.x-k8s.io/ReleaseAddress";
/// Finalizer on addresses inpool creates.
pub const ADDRESS_FINALIZER: &str = "ipam.cluster.x-k8s.io/ProtectAddress";
/// Finalizer on pools that still hand out addresses.
pub const POOL_FINALIZER: &str = "ipam.cluster.x-k8s.io/ProtectPool";

/// Label naming the cluster an object belongs to (deprecated on claims in favour of
/// `spec.clusterName`, still read as a fallback).
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Label on the pool CRDs so that `clusterctl move` moves every pool with its dependents.
pub const MOVE_HIERARCHY_LABEL: &str = "clusterctl.cluster.x-k8s.io/move-hierarchy";
/// Optional label filter: a provider started with a watch-filter value only handles objects
/// carrying this label with that value.
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";

/// Annotation that pauses reconciliation of the object that carries it.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// Annotation clusterctl sets on source objects it is about to delete after a move.
pub const DELETE_FOR_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";

/// The claim's summary condition type.
pub const READY_CONDITION: &str = "Ready";

// The conditions inpool writes on a pool, beside `Ready`.

/// `True` while the pool has a free address; `False`/`PoolExhausted` when it has none.
pub const ADDRESSES_AVAILABLE_CONDITION: &str = "AddressesAvailable";
/// `True` when the pool shares addresses with another pool that claims of one namespace can
/// reach; the message names the pools and the first shared range.
pub const OVERLAP_CONDITION: &str = "Overlap";
/// `False` when allocated addresses lie outside `spec.addresses` (after a shrink); the message
/// names them and their claims.
pub const ADDRESSES_IN_RANGE_CONDITION: &str = "AddressesInRange";

/// `True` while `IPAddress`es of the pool were created by another writer since inpool started
/// (another IPAM provider allocates from it); the message names them and their field managers.
pub const FOREIGN_ADDRESSES_CONDITION: &str = "ForeignAddresses";
/// What became of the pool's `spec.preAllocations` (present only on a pool with entries).
pub const PRE_ALLOCATIONS_CONDITION: &str = "PreAllocations";

/// Every condition inpool writes on a pool: the pool cache keeps only these of a pool's status
/// (`StatusSeen`), and a status written carries only these (another writer's stay theirs).
pub const POOL_CONDITIONS: [&str; 6] = [
    READY_CONDITION,
    ADDRESSES_AVAILABLE_CONDITION,
    OVERLAP_CONDITION,
    ADDRESSES_IN_RANGE_CONDITION,
    PRE_ALLOCATIONS_CONDITION,
    FOREIGN_ADDRESSES_CONDITION,
];
/// CAPI's `Paused` condition type.
pub const PAUSED_CONDITION: &str = "Paused";
/// Ready=True: the address exists and `status.addressRef` points at it.
pub const REASON_ADDRESS_ALLOCATED: &str = "AddressAllocated";
/// Ready=False: the pool has no free address.
pub const REASON_POOL_EXHAUSTED: &str = "PoolExhausted";
/// Ready=False: the pool is missing, invalid, being deleted or paused.
pub const REASON_POOL_NOT_READY: &str = "PoolNotReady";
/// Ready=False: anything else, detail in the message.
pub const REASON_ALLOCATION_FAILED: &str = "AllocationFailed";
