//! The claim cache's entry: what the claim reconciler reads of an `IPAddressClaim`, and nothing
//! else (issue 17: memory per claim). The claim watch lists and watches `IPAddressClaim`s as this
//! type, so each object is cut down as it is read, and the cache (kube-runtime's store, which
//! the claim controller needs) holds one of these per claim instead of the object.
//!
//! Kept: the metadata the reconciler and the Events read (name, namespace, UID,
//! resourceVersion, generation, creation and deletion times, finalizers, and the paused and
//! delete-for-move annotations); the pool as a [`PoolKey`] of interned names (`None` for a pool
//! that is not one of inpool's kinds: such a claim is never touched); the cluster name, interned
//! (`spec.clusterName`, else the deprecated label); `status.addressRef`; the `Ready` condition's
//! status, reason, observed generation, transition time and a digest of its message (enough to
//! tell whether a write would change it); the legacy `Ready` entry's status and reason, and the
//! legacy entries of other types whole (they are rare, and the legacy list is atomic: inpool's
//! apply sends it whole). Every finalizer is kept: they are written back whole, guarded by the
//! resourceVersion. Claims are only ever patched, field by field, never written back whole from
//! the cache, so nothing dropped here can be lost on the server. `cargo bench --bench memory`
//! reports the bytes per claim.
use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::Resource;
use serde::Deserialize;

use crate::api::{
    ConditionStatus, DELETE_FOR_MOVE_ANNOTATION, DesiredCondition, IPAM_GROUP, IPAddressClaim,
    IPAddressClaimStatus, IPPoolReference, LegacyCondition, Name, PAUSED_ANNOTATION, PoolKey,
    READY_CONDITION, status_with_ready,
};

/// A claim as the claim cache keeps it (see the module).
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "IPAddressClaim")]
pub struct CachedClaim {
    metadata: ObjectMeta,
    pool: Option<PoolKey>,
    cluster_name: Option<Name>,
    address_ref: AddressRef,
    ready: Option<ReadyFacts>,
    legacy_ready: Option<LegacyReadyFacts>,
    legacy_others: Option<Box<[LegacyCondition]>>,
}

/// `status.addressRef.name`: inpool names a claim's `IPAddress` after the claim, so the common
/// case costs no string.
#[derive(Clone, Debug, PartialEq)]
enum AddressRef {
    Unset,
    ClaimName,
    Other(Box<str>),
}

/// The `Ready` condition, without its message's text.
#[derive(Clone, Debug)]
struct ReadyFacts {
    /// `None` for a status that is not `True`, `False` or `Unknown`.
    status: Option<ConditionStatus>,
    reason: Name,
    message_digest: u64,
    observed_generation: Option<i64>,
    last_transition_time: Time,
}

/// The legacy list's `Ready` entry: what [`CachedClaim::legacy_mirrors`] compares.
#[derive(Clone, Debug)]
struct LegacyReadyFacts {
    status: Option<ConditionStatus>,
    reason: Option<Name>,
}

fn digest(message: &str) -> u64 {
    // `DefaultHasher::new()` has fixed keys: the same text gives the same digest in this process,
    // the only place the digest is compared.
    let mut hasher = DefaultHasher::new();
    message.hash(&mut hasher);
    hasher.finish()
}

impl From<IPAddressClaim> for CachedClaim {
    fn from(claim: IPAddressClaim) -> CachedClaim {
        let cluster_name = claim.cluster_name().map(Name::new);
        let IPAddressClaim {
            metadata,
            spec,
            status,
        } = claim;
        let namespace = metadata.namespace.clone().unwrap_or_default();
        let name = metadata.name.clone().unwrap_or_default();
        let annotations = metadata
            .annotations
            .map(|annotations| {
                annotations
                    .into_iter()
                    .filter(|(key, _)| {
                        key == PAUSED_ANNOTATION || key == DELETE_FOR_MOVE_ANNOTATION
                    })
                    .collect::<std::collections::BTreeMap<_, _>>()
            })
            .filter(|kept| !kept.is_empty());
        let metadata = ObjectMeta {
            name: metadata.name,
            namespace: metadata.namespace,
            uid: metadata.uid,
            resource_version: metadata.resource_version,
            generation: metadata.generation,
            creation_timestamp: metadata.creation_timestamp,
            deletion_timestamp: metadata.deletion_timestamp,
            finalizers: metadata.finalizers,
            annotations,
            ..ObjectMeta::default()
        };
        let IPAddressClaimStatus {
            address_ref,
            conditions,
            deprecated,
        } = status.unwrap_or_default();
        let address_ref = match address_ref {
            None => AddressRef::Unset,
            Some(r) if r.name == name => AddressRef::ClaimName,
            Some(r) => AddressRef::Other(r.name.into()),
        };
        let ready = conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == READY_CONDITION)
            .map(|c| ReadyFacts {
                status: ConditionStatus::parse(&c.status),
                reason: Name::new(&c.reason),
                message_digest: digest(&c.message),
                observed_generation: c.observed_generation,
                last_transition_time: c.last_transition_time,
            });
        let (legacy_ready, legacy_others): (Vec<_>, Vec<_>) = deprecated
            .and_then(|d| d.v1beta1)
            .and_then(|v| v.conditions)
            .unwrap_or_default()
            .into_iter()
            .partition(|c| c.type_ == READY_CONDITION);
        let legacy_ready = legacy_ready.first().map(|c| LegacyReadyFacts {
            status: ConditionStatus::parse(&c.status),
            reason: c.reason.as_deref().map(Name::new),
        });
        CachedClaim {
            metadata,
            pool: PoolKey::from_ref(&spec.pool_ref, &namespace),
            cluster_name,
            address_ref,
            ready,
            legacy_ready,
            legacy_others: (!legacy_others.is_empty()).then(|| legacy_others.into_boxed_slice()),
        }
    }
}

impl Resource for CachedClaim {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        IPAddressClaim::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        IPAddressClaim::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        IPAddressClaim::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        IPAddressClaim::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl CachedClaim {
    /// The pool `spec.poolRef` names, when it is one of inpool's kinds.
    pub fn pool(&self) -> Option<&PoolKey> {
        self.pool.as_ref()
    }

    /// `spec.poolRef` as the claim has it (only claims of inpool's pools are reconciled, and
    /// for those the reference is exactly this).
    pub fn pool_ref(pool: &PoolKey) -> IPPoolReference {
        IPPoolReference::new(IPAM_GROUP, pool.kind.name(), &*pool.name)
    }

    /// The Cluster the claim belongs to (see [`IPAddressClaim::cluster_name`]).
    pub fn cluster_name(&self) -> Option<&str> {
        self.cluster_name.as_deref()
    }

    pub fn generation(&self) -> Option<i64> {
        self.metadata.generation
    }

    /// `status.addressRef.name`, when set.
    pub fn address_ref(&self) -> Option<&str> {
        match &self.address_ref {
            AddressRef::Unset => None,
            AddressRef::ClaimName => self.metadata.name.as_deref(),
            AddressRef::Other(name) => Some(name),
        }
    }

    /// The `Ready` condition's reason, when the claim has the condition.
    pub fn ready_reason(&self) -> Option<&str> {
        self.ready.as_ref().map(|r| &*r.reason)
    }

    /// Whether `Ready` already says this, for the claim's current generation.
    pub fn ready_says(&self, status: ConditionStatus, reason: &str, message: &str) -> bool {
        self.ready.as_ref().is_some_and(|r| {
            r.status == Some(status)
                && &*r.reason == reason
                && r.message_digest == digest(message)
                && r.observed_generation == self.metadata.generation
        })
    }

    /// Whether the legacy list mirrors a `Ready` of this status and reason (the reason only
    /// matters when not `True`).
    pub fn legacy_mirrors(&self, status: ConditionStatus, reason: &str) -> bool {
        self.legacy_ready.as_ref().is_some_and(|l| {
            l.status == Some(status)
                && (status == ConditionStatus::True || l.reason.as_deref() == Some(reason))
        })
    }

    /// The status inpool applies (see [`crate::api::claim_status_with_ready`]), built from what
    /// the cache keeps: the current `Ready` matters only for its status and transition time,
    /// which `desired` keeps when the status does not flip.
    pub fn status_with_ready(
        &self,
        desired: DesiredCondition,
        address_ref: Option<&str>,
        now: Time,
    ) -> IPAddressClaimStatus {
        let current = self
            .ready
            .iter()
            .map(|r| Condition {
                type_: READY_CONDITION.to_string(),
                status: r
                    .status
                    .map(ConditionStatus::as_str)
                    .unwrap_or_default()
                    .to_string(),
                reason: r.reason.to_string(),
                message: String::new(),
                observed_generation: r.observed_generation,
                last_transition_time: r.last_transition_time.clone(),
            })
            .collect();
        let legacy = self.legacy_others.as_deref().unwrap_or_default().to_vec();
        status_with_ready(current, legacy, desired, address_ref, now)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::{PoolKind, claim_status_with_ready};

    fn claim(value: serde_json::Value) -> IPAddressClaim {
        serde_json::from_value(value).expect("a valid claim")
    }

    fn realised() -> serde_json::Value {
        json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
            "metadata": {
                "name": "m-0", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                "generation": 2, "creationTimestamp": "2026-11-30T10:00:00Z",
                "labels": {"cluster.x-k8s.io/cluster-name": "edge", "other": "x"},
                "annotations": {"cluster.x-k8s.io/paused": "", "note": "dropped"},
                "finalizers": ["ipam.cluster.x-k8s.io/ReleaseAddress", "infra/keep"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "VM", "name": "m", "uid": "o"}],
                "managedFields": [{"manager": "m", "operation": "Update"}]
            },
            "spec": {"poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "p"}},
            "status": {
                "addressRef": {"name": "m-0"},
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "AddressAllocated",
                     "message": "address 10.0.0.2 allocated", "lastTransitionTime": "2026-11-30T10:00:01Z",
                     "observedGeneration": 2},
                    {"type": "Other", "status": "True", "reason": "X", "message": "",
                     "lastTransitionTime": "2026-11-30T10:00:01Z"}
                ],
                "deprecated": {"v1beta1": {"conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:00:01Z"},
                    {"type": "Custom", "status": "False", "reason": "Theirs", "severity": "Info",
                     "lastTransitionTime": "2026-11-30T09:00:00Z"}
                ]}}
            }
        })
    }

    #[test]
    fn keeps_what_the_reconciler_reads_and_drops_the_rest() {
        let cached = CachedClaim::from(claim(realised()));
        let meta = cached.meta();
        assert_eq!(meta.name.as_deref(), Some("m-0"));
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
        assert_eq!(meta.uid.as_deref(), Some("u-1"));
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
        assert_eq!(cached.generation(), Some(2));
        assert!(meta.creation_timestamp.is_some());
        assert_eq!(
            meta.finalizers.as_deref(),
            Some(
                &[
                    "ipam.cluster.x-k8s.io/ReleaseAddress".to_string(),
                    "infra/keep".to_string()
                ][..]
            )
        );
        let annotations = meta.annotations.as_ref().expect("the paused annotation");
        assert_eq!(annotations.keys().collect::<Vec<_>>(), [PAUSED_ANNOTATION]);
        assert!(meta.labels.is_none() && meta.managed_fields.is_none());
        assert!(meta.owner_references.is_none());
        assert_eq!(cached.pool(), Some(&PoolKey::in_cluster("ns", "p")));
        assert_eq!(cached.cluster_name(), Some("edge"));
        assert_eq!(cached.address_ref(), Some("m-0"));
        assert_eq!(cached.ready_reason(), Some("AddressAllocated"));
    }

    #[test]
    fn a_pool_of_another_provider_or_an_address_of_another_name_is_kept_as_such() {
        let mut value = realised();
        value["spec"]["poolRef"]["apiGroup"] = json!("ipam.metal3.io");
        value["spec"]["clusterName"] = json!("from-spec");
        value["status"]["addressRef"]["name"] = json!("elsewhere");
        let cached = CachedClaim::from(claim(value));
        assert_eq!(cached.pool(), None);
        assert_eq!(cached.cluster_name(), Some("from-spec"));
        assert_eq!(cached.address_ref(), Some("elsewhere"));

        let mut value = realised();
        value["status"] = json!(null);
        value["spec"]["poolRef"]["kind"] = json!("GlobalInClusterPrefixPool");
        let cached = CachedClaim::from(claim(value));
        assert_eq!(
            cached.pool(),
            PoolKey::of_kind(PoolKind::GlobalPrefix, Some("ns"), "p").as_ref()
        );
        assert_eq!(cached.address_ref(), None);
        assert_eq!(cached.ready_reason(), None);
        assert!(!cached.ready_says(ConditionStatus::True, "AddressAllocated", ""));
        assert!(!cached.legacy_mirrors(ConditionStatus::True, "AddressAllocated"));
    }

    #[test]
    fn ready_says_exactly_what_the_condition_says_for_the_current_generation() {
        let cached = CachedClaim::from(claim(realised()));
        let (allocated, message) = ("AddressAllocated", "address 10.0.0.2 allocated");
        assert!(cached.ready_says(ConditionStatus::True, allocated, message));
        assert!(!cached.ready_says(
            ConditionStatus::True,
            allocated,
            "address 10.0.0.3 allocated"
        ));
        assert!(!cached.ready_says(ConditionStatus::False, allocated, message));
        assert!(!cached.ready_says(ConditionStatus::True, "PoolExhausted", message));
        let mut value = realised();
        value["metadata"]["generation"] = json!(3);
        let newer = CachedClaim::from(claim(value));
        assert!(!newer.ready_says(ConditionStatus::True, allocated, message));

        assert!(cached.legacy_mirrors(ConditionStatus::True, allocated));
        assert!(!cached.legacy_mirrors(ConditionStatus::False, allocated));
    }

    #[test]
    fn the_status_applied_is_the_one_the_whole_object_gives() {
        let whole = claim(realised());
        let cached = CachedClaim::from(whole.clone());
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap());
        for (status, reason, message, address_ref) in [
            (
                ConditionStatus::True,
                "AddressAllocated",
                "address 10.0.0.2 allocated",
                Some("m-0"),
            ),
            (ConditionStatus::False, "PoolExhausted", "no room", None),
        ] {
            let desired = || {
                DesiredCondition::new(READY_CONDITION, status, reason, message.to_string())
                    .observed_generation(Some(2))
            };
            let mut from_whole =
                claim_status_with_ready(&whole, desired(), address_ref, now.clone());
            let mut from_cache = cached.status_with_ready(desired(), address_ref, now.clone());
            // The legacy list is atomic; its order does not matter to the API server.
            for status in [&mut from_whole, &mut from_cache] {
                if let Some(list) = status
                    .deprecated
                    .as_mut()
                    .and_then(|d| d.v1beta1.as_mut())
                    .and_then(|v| v.conditions.as_mut())
                {
                    list.sort_by(|a, b| a.type_.cmp(&b.type_));
                }
            }
            assert_eq!(from_cache, from_whole, "{reason}");
        }
    }
}
