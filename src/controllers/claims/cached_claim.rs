//! The claim cache's entry: what the claim reconciler reads of an `IPAddressClaim`, and nothing
//! else: memory per claim is what the claim cache costs. The claim watch reads each
//! `IPAddressClaim` as a
//! [`WatchedClaim`], cut down as it is deserialised, and the claim cache
//! ([`super::cache`]) keeps one [`CachedClaim`] per claim instead of the object.
//!
//! Kept: the claim's namespace and name as an [`ObjectKey`] of interned names (shared with the
//! registry's records of the claim); its UID (16 bytes when it is a UUID, as the API server makes
//! them), resourceVersion (a number when it is one), generation, creation time, whether it is
//! being deleted, its finalizers (nothing when they are just inpool's), and whether it carries
//! the paused or delete-for-move annotation; the pool as a [`PoolKey`] of interned names; the
//! cluster name, interned (`spec.clusterName`, else the deprecated label); `status.addressRef`;
//! the `Ready` condition's status, reason, observed generation, transition time and a digest of
//! its message (enough to tell whether a write would change it); the legacy `Ready` entry's
//! status and reason, and the legacy entries of other types whole (they are rare, and the legacy
//! list is atomic: inpool's apply sends it whole). Every finalizer is kept: they are written
//! back whole, guarded by the resourceVersion. Claims are only ever patched, field by field,
//! never written back whole from the cache, so nothing dropped here can be lost on the server.
//! `cargo bench --bench memory` reports the bytes per claim.
//!
//! A claim whose `spec.poolRef` names a kind inpool does not serve (another provider's: metal3's
//! `IPPool`, Infoblox's) is not kept at all: the watch reads it as a [`WatchedClaim`] without a
//! [`CachedClaim`], and no name of it is interned. It costs no memory, no reconcile and no write.
//! Should its `poolRef` change (Cluster API's webhook forbids it: the spec of an
//! `IPAddressClaim` is immutable), the watch brings the whole claim again and the cache follows
//! it either way (see [`super::cache`]).
//!
//! A `CachedClaim` is not a kube `Resource` (it has no `ObjectMeta`, most of whose fields a claim
//! leaves empty): what the reconciler reads of the claim's metadata comes from the methods here,
//! so nothing can read a metadata field the cache did not keep.
use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::Resource;
use serde::Deserialize;

use crate::api::ObjectKey;
use crate::api::{
    CLAIM_FINALIZER, ConditionStatus, DELETE_FOR_MOVE_ANNOTATION, DesiredCondition, IPAM_GROUP,
    IPAddressClaim, IPAddressClaimStatus, IPPoolReference, LegacyCondition, Name,
    PAUSED_ANNOTATION, PoolKey, READY_CONDITION, status_with_ready,
};

/// An `IPAddressClaim` as the claim watch reads it: the metadata kube's watcher reads of each
/// object (its name, namespace and resourceVersion, from which a watch resumes), and the
/// [`CachedClaim`] the cache keeps, `None` for a claim of a pool kind inpool does not serve.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "IPAddressClaim")]
pub struct WatchedClaim {
    metadata: ObjectMeta,
    pub claim: Option<CachedClaim>,
}

impl WatchedClaim {
    /// The claim's key, when some map may hold it: a claim inpool never kept interned no name,
    /// and looking it up adds none (see [`ObjectKey::existing`]).
    pub fn existing_key(&self) -> Option<ObjectKey> {
        ObjectKey::existing(
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default(),
        )
    }
}

impl From<IPAddressClaim> for WatchedClaim {
    fn from(claim: IPAddressClaim) -> WatchedClaim {
        let metadata = ObjectMeta {
            name: claim.metadata.name.clone(),
            namespace: claim.metadata.namespace.clone(),
            resource_version: claim.metadata.resource_version.clone(),
            ..ObjectMeta::default()
        };
        WatchedClaim {
            metadata,
            claim: CachedClaim::of_served_pool(claim),
        }
    }
}

impl Resource for WatchedClaim {
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

/// A claim as the claim cache keeps it (see the module).
#[derive(Clone, Debug)]
pub struct CachedClaim {
    key: ObjectKey,
    uid: Option<Uid>,
    resource_version: Option<ResourceVersion>,
    generation: Option<i64>,
    created: Option<Time>,
    deleting: bool,
    finalizers: Finalizers,
    paused: bool,
    moving: bool,
    pool: PoolKey,
    cluster_name: Option<Name>,
    address_ref: AddressRef,
    ready: Option<ReadyFacts>,
    legacy_ready: Option<LegacyReadyFacts>,
    legacy_others: Option<Box<[LegacyCondition]>>,
}

/// `metadata.uid`: the API server's are UUIDs in their canonical (lower-case) text, kept as
/// their 16 bytes; anything else is kept as text.
#[derive(Clone, Debug, PartialEq)]
enum Uid {
    Uuid([u8; 16]),
    Text(Box<str>),
}

impl Uid {
    fn new(text: String) -> Uid {
        match parse_uuid(&text) {
            Some(bytes) => Uid::Uuid(bytes),
            None => Uid::Text(text.into()),
        }
    }

    fn text(&self) -> String {
        match self {
            Uid::Uuid(bytes) => {
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                format!(
                    "{}-{}-{}-{}-{}",
                    &hex[..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..]
                )
            }
            Uid::Text(text) => text.to_string(),
        }
    }
}

/// The 16 bytes of a UUID in canonical text (`8-4-4-4-12` lower-case hex digits); `None` for any
/// other text, which would not come back the same from [`Uid::text`].
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let dashes = [8, 13, 18, 23];
    if text.len() != 36
        || !text.char_indices().all(|(i, c)| {
            if dashes.contains(&i) {
                c == '-'
            } else {
                c.is_ascii_digit() || ('a'..='f').contains(&c)
            }
        })
    {
        return None;
    }
    let digits: Vec<u8> = text
        .bytes()
        .filter(|b| *b != b'-')
        .map(|b| match b {
            b'0'..=b'9' => b - b'0',
            _ => b - b'a' + 10,
        })
        .collect();
    let mut bytes = [0; 16];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks(2)) {
        *byte = pair[0] << 4 | pair[1];
    }
    Some(bytes)
}

/// `metadata.resourceVersion`: opaque to clients, but the API server's (etcd's) are decimal
/// numbers, kept as such when they come back as the same text; anything else as text.
#[derive(Clone, Debug, PartialEq)]
enum ResourceVersion {
    Number(u64),
    Text(Box<str>),
}

impl ResourceVersion {
    fn new(text: String) -> ResourceVersion {
        match text.parse::<u64>() {
            Ok(n) if n.to_string() == text => ResourceVersion::Number(n),
            _ => ResourceVersion::Text(text.into()),
        }
    }

    fn text(&self) -> String {
        match self {
            ResourceVersion::Number(n) => n.to_string(),
            ResourceVersion::Text(text) => text.to_string(),
        }
    }
}

/// `metadata.finalizers`, in order: nearly always none or inpool's alone, which cost nothing.
#[derive(Clone, Debug, PartialEq)]
enum Finalizers {
    None,
    OnlyInpools,
    Listed(Box<[String]>),
}

impl Finalizers {
    fn new(list: Vec<String>) -> Finalizers {
        match list.as_slice() {
            [] => Finalizers::None,
            [only] if only == CLAIM_FINALIZER => Finalizers::OnlyInpools,
            _ => Finalizers::Listed(list.into()),
        }
    }
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

impl CachedClaim {
    /// What the cache keeps of `claim`; `None` when its `spec.poolRef` names a kind inpool does
    /// not serve, decided before any name of the claim is interned.
    pub fn of_served_pool(claim: IPAddressClaim) -> Option<CachedClaim> {
        let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
        let pool = PoolKey::from_ref(&claim.spec.pool_ref, namespace)?;
        let cluster_name = claim.cluster_name().map(Name::new);
        let IPAddressClaim {
            metadata, status, ..
        } = claim;
        let key = ObjectKey::new(
            metadata.namespace.as_deref().unwrap_or_default(),
            metadata.name.as_deref().unwrap_or_default(),
        );
        let annotated = |annotation: &str| {
            metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(annotation))
        };
        let (paused, moving) = (
            annotated(PAUSED_ANNOTATION),
            annotated(DELETE_FOR_MOVE_ANNOTATION),
        );
        let IPAddressClaimStatus {
            address_ref,
            conditions,
            deprecated,
        } = status.unwrap_or_default();
        let address_ref = match address_ref {
            None => AddressRef::Unset,
            Some(r) if *r.name == *key.name => AddressRef::ClaimName,
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
        Some(CachedClaim {
            pool,
            key,
            uid: metadata.uid.map(Uid::new),
            resource_version: metadata.resource_version.map(ResourceVersion::new),
            generation: metadata.generation,
            created: metadata.creation_timestamp,
            deleting: metadata.deletion_timestamp.is_some(),
            finalizers: Finalizers::new(metadata.finalizers.unwrap_or_default()),
            paused,
            moving,
            cluster_name,
            address_ref,
            ready,
            legacy_ready,
            legacy_others: (!legacy_others.is_empty()).then(|| legacy_others.into_boxed_slice()),
        })
    }

    /// The claim's namespace and name.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    pub fn name(&self) -> &str {
        &self.key.name
    }

    pub fn namespace(&self) -> &str {
        &self.key.namespace
    }

    pub fn uid(&self) -> Option<String> {
        self.uid.as_ref().map(Uid::text)
    }

    pub fn resource_version(&self) -> Option<String> {
        self.resource_version.as_ref().map(ResourceVersion::text)
    }

    /// Whether `other` is this very version of the same claim: the same uid and the same
    /// `resourceVersion`, which the API server gives to one version of one object only.
    pub fn is_same_version(&self, other: &CachedClaim) -> bool {
        self.resource_version.is_some()
            && self.resource_version == other.resource_version
            && self.uid == other.uid
            && self.key == other.key
    }

    pub fn creation_timestamp(&self) -> Option<&Time> {
        self.created.as_ref()
    }

    /// Whether the claim has a deletion timestamp.
    pub fn is_deleting(&self) -> bool {
        self.deleting
    }

    /// `metadata.finalizers`, in order.
    pub fn finalizers(&self) -> Vec<String> {
        match &self.finalizers {
            Finalizers::None => Vec::new(),
            Finalizers::OnlyInpools => vec![CLAIM_FINALIZER.to_string()],
            Finalizers::Listed(list) => list.to_vec(),
        }
    }

    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        match &self.finalizers {
            Finalizers::None => false,
            Finalizers::OnlyInpools => finalizer == CLAIM_FINALIZER,
            Finalizers::Listed(list) => list.iter().any(|f| f == finalizer),
        }
    }

    /// Whether the claim carries the paused annotation.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether the claim carries clusterctl's delete-for-move annotation.
    pub fn is_moving(&self) -> bool {
        self.moving
    }

    /// The claim as an Event's `regarding` object.
    pub fn object_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(IPAddressClaim::api_version(&()).into_owned()),
            kind: Some(IPAddressClaim::kind(&()).into_owned()),
            name: Some(self.name().to_string()),
            namespace: Some(self.namespace().to_string()),
            uid: self.uid(),
            resource_version: self.resource_version(),
            ..ObjectReference::default()
        }
    }

    /// The pool `spec.poolRef` names.
    pub fn pool(&self) -> &PoolKey {
        &self.pool
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
        self.generation
    }

    /// `status.addressRef.name`, when set.
    pub fn address_ref(&self) -> Option<&str> {
        match &self.address_ref {
            AddressRef::Unset => None,
            AddressRef::ClaimName => Some(self.name()),
            AddressRef::Other(name) => Some(name),
        }
    }

    /// The `Ready` condition's reason, when the claim has the condition.
    pub fn ready_reason(&self) -> Option<&str> {
        self.ready.as_ref().map(|r| &*r.reason)
    }

    /// Whether the claim is realised and nothing asks more of it: not being deleted, `Ready`
    /// `True` for its current generation, and `addressRef` set. Its reconcile only confirms it.
    pub fn is_realised(&self) -> bool {
        !self.deleting
            && self.address_ref != AddressRef::Unset
            && self.ready.as_ref().is_some_and(|r| {
                r.status == Some(ConditionStatus::True) && r.observed_generation == self.generation
            })
    }

    /// Whether `Ready` already says this, for the claim's current generation.
    pub fn ready_says(&self, status: ConditionStatus, reason: &str, message: &str) -> bool {
        self.ready.as_ref().is_some_and(|r| {
            r.status == Some(status)
                && &*r.reason == reason
                && r.message_digest == digest(message)
                && r.observed_generation == self.generation
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

    fn kept(value: serde_json::Value) -> CachedClaim {
        CachedClaim::of_served_pool(claim(value)).expect("a claim of one of inpool's pools")
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
        let cached = kept(realised());
        assert_eq!(cached.key(), &ObjectKey::new("ns", "m-0"));
        assert_eq!(cached.uid().as_deref(), Some("u-1"));
        assert_eq!(cached.resource_version().as_deref(), Some("7"));
        assert_eq!(cached.generation(), Some(2));
        assert!(cached.creation_timestamp().is_some() && !cached.is_deleting());
        assert_eq!(
            cached.finalizers(),
            ["ipam.cluster.x-k8s.io/ReleaseAddress", "infra/keep"]
        );
        assert!(cached.has_finalizer("infra/keep") && !cached.has_finalizer("infra/other"));
        assert!(cached.is_paused() && !cached.is_moving());
        let reference = cached.object_reference();
        assert_eq!(
            (reference.kind.as_deref(), reference.uid.as_deref()),
            (Some("IPAddressClaim"), Some("u-1"))
        );
        assert_eq!(cached.pool(), &PoolKey::in_cluster("ns", "p"));
        assert_eq!(cached.cluster_name(), Some("edge"));
        assert_eq!(cached.address_ref(), Some("m-0"));
        assert_eq!(cached.ready_reason(), Some("AddressAllocated"));
    }

    #[test]
    fn uids_versions_and_finalizers_come_back_as_the_api_server_sent_them() {
        let uuid = "6f1c2b9e-0d4a-4b8e-9c3f-00000000002a";
        assert!(matches!(Uid::new(uuid.into()), Uid::Uuid(_)));
        for uid in [uuid, "u-1", "6F1C2B9E-0D4A-4B8E-9C3F-00000000002A", ""] {
            assert_eq!(Uid::new(uid.into()).text(), uid);
        }
        assert_eq!(
            ResourceVersion::new("123456".into()),
            ResourceVersion::Number(123456)
        );
        for version in ["123456", "0", "007", "abc", "18446744073709551616"] {
            assert_eq!(ResourceVersion::new(version.into()).text(), version);
        }
        let mut value = realised();
        value["metadata"]["finalizers"] = json!([CLAIM_FINALIZER]);
        value["metadata"]["deletionTimestamp"] = json!("2026-11-30T11:00:00Z");
        let only_inpools = kept(value.clone());
        assert_eq!(only_inpools.finalizers, Finalizers::OnlyInpools);
        assert_eq!(only_inpools.finalizers(), [CLAIM_FINALIZER]);
        assert!(only_inpools.has_finalizer(CLAIM_FINALIZER) && only_inpools.is_deleting());
        value["metadata"]["finalizers"] = json!(null);
        let none = kept(value);
        assert!(none.finalizers().is_empty() && !none.has_finalizer(CLAIM_FINALIZER));
    }

    #[test]
    fn a_claim_of_another_providers_pool_is_not_kept_and_interns_no_name() {
        for (group, kind) in [
            ("ipam.metal3.io", "IPPool"),
            ("ipam.cluster.x-k8s.io", "InfobloxIPPool"),
        ] {
            let mut value = realised();
            value["metadata"]["name"] = json!(format!("foreign-claim-{kind}"));
            value["metadata"]["namespace"] = json!("foreign-claim-ns");
            value["spec"]["poolRef"]["apiGroup"] = json!(group);
            value["spec"]["poolRef"]["kind"] = json!(kind);
            let watched: WatchedClaim = serde_json::from_value(value).expect("a valid claim");
            assert!(watched.claim.is_none(), "{group} {kind}");
            assert_eq!(watched.existing_key(), None, "{group} {kind}");
        }
    }

    #[test]
    fn a_cluster_from_the_spec_or_an_address_of_another_name_is_kept_as_such() {
        let mut value = realised();
        value["spec"]["clusterName"] = json!("from-spec");
        value["status"]["addressRef"]["name"] = json!("elsewhere");
        let cached = kept(value);
        assert_eq!(cached.cluster_name(), Some("from-spec"));
        assert_eq!(cached.address_ref(), Some("elsewhere"));

        let mut value = realised();
        value["status"] = json!(null);
        value["spec"]["poolRef"]["kind"] = json!("GlobalInClusterPrefixPool");
        let cached = kept(value);
        assert_eq!(
            Some(cached.pool()),
            PoolKey::of_kind(PoolKind::GlobalPrefix, Some("ns"), "p").as_ref()
        );
        assert_eq!(cached.address_ref(), None);
        assert_eq!(cached.ready_reason(), None);
        assert!(!cached.ready_says(ConditionStatus::True, "AddressAllocated", ""));
        assert!(!cached.legacy_mirrors(ConditionStatus::True, "AddressAllocated"));
    }

    #[test]
    fn realised_means_ready_for_this_generation_with_its_address_and_not_deleting() {
        assert!(kept(realised()).is_realised());
        let mut newer = realised();
        newer["metadata"]["generation"] = json!(3);
        let mut deleting = realised();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-30T11:00:00Z");
        let mut unset = realised();
        unset["status"]["addressRef"] = json!(null);
        let mut waiting = realised();
        waiting["status"]["conditions"][0]["status"] = json!("False");
        for (value, why) in [
            (newer, "a newer generation"),
            (deleting, "being deleted"),
            (unset, "no addressRef"),
            (waiting, "Ready is False"),
        ] {
            assert!(!kept(value).is_realised(), "{why}");
        }
    }

    #[test]
    fn ready_says_exactly_what_the_condition_says_for_the_current_generation() {
        let cached = kept(realised());
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
        let newer = kept(value);
        assert!(!newer.ready_says(ConditionStatus::True, allocated, message));

        assert!(cached.legacy_mirrors(ConditionStatus::True, allocated));
        assert!(!cached.legacy_mirrors(ConditionStatus::False, allocated));
    }

    #[test]
    fn the_status_applied_is_the_one_the_whole_object_gives() {
        let whole = claim(realised());
        let cached = CachedClaim::of_served_pool(whole.clone()).expect("a claim of inpool's pool");
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
