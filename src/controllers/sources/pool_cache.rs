//! The pool cache: what the controllers read of each pool, one [`PoolView`] per pool of a kind,
//! keyed by its [`PoolKey`] of interned names. The kind's watch projects each object it brings
//! into a view (the registry takes the parsed spec from the same object), and [`PoolCache`]
//! follows the watch the way kube-runtime's reflector store does: a list (the first one, or a
//! re-list after a gap in the watch) replaces the kind's views once it is complete; an added or
//! changed pool replaces its view; a deleted one is forgotten.
//!
//! Why not kube-runtime's reflector `Store` of whole pools: a pool's object, with its metadata's
//! strings and its five status conditions, kept 2,626 bytes in 30 or so allocations per pool
//! (heaptrack, 1,000 pools; docs/performance.md, "What a pool keeps in the process"), more than
//! half of what a pool cost the process. Its readers need little of it: the pool's identity
//! and resourceVersion (Events, the finalizer patch), its generation, deletion, pause and
//! finalizers, whether its spec is valid, two spec fields the claims read, and the status inpool
//! itself writes, as far as the pool controller compares it with the status it would write. The
//! status's messages are kept as fingerprints ([`fingerprint`]): they are only ever compared
//! with the messages inpool would write, never read.
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use tokio::sync::SetOnce;

use crate::allocator::ParsedSpec;
use crate::api::POOL_CONDITIONS;
use crate::api::{
    CarvedPrefix, ConditionStatus, DesiredCondition, IPAM_GROUP, IPAddressesStatus, IPPool,
    InClusterIPPoolStatus, PAUSED_ANNOTATION, POOL_FINALIZER, POOL_VERSION, PoolKey, PoolSpecRef,
};
use crate::controllers::state::Unready;
use crate::controllers::state::facts;
use crate::controllers::state::fingerprint;

/// What the controllers read of one pool: taken from the object its watch brought, which is not
/// kept.
#[derive(Debug)]
pub struct PoolView {
    key: PoolKey,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    /// `Ok` while the pool hands out addresses; why not otherwise (deleting, paused, an invalid
    /// spec), as the registry was told.
    readiness: Result<(), Unready>,
    /// The paused annotation, deleting or not.
    paused: bool,
    /// Whether `metadata.finalizers` holds `ProtectPool`: a flag, not a copy of the string every
    /// pool carries.
    protected: bool,
    /// `metadata.finalizers` but `ProtectPool`, in their order (other writers' finalizers: rare,
    /// and an empty list allocates nothing).
    other_finalizers: Vec<String>,
    reuse_grace_period_seconds: Option<i32>,
    allocation_length: Option<i32>,
    /// What the pool asks of its parent, if it names one (`spec.parentPool`).
    carving: Option<Box<Carving>>,
    /// The status as the pool controller compares it; `None` while the pool has none.
    status: Option<StatusSeen>,
}

/// What a pool carved from a parent asks (`spec.parentPool`): its claims on `parent`, in
/// `claim_namespace`, are `count`.
#[derive(Clone, Debug, PartialEq)]
pub struct Carving {
    pub parent: PoolKey,
    pub count: usize,
    pub claim_namespace: String,
}

/// A pool's status as the pool controller compares it with the status it would write: its
/// counts, and inpool's conditions ([`POOL_CONDITIONS`]; another writer's are never compared).
#[derive(Debug, PartialEq)]
pub struct StatusSeen {
    pub counts: Option<IPAddressesStatus>,
    conditions: Box<[ConditionSeen]>,
    /// `carvedPrefixes`, kept whole: only pools carved from a parent have it, and its entries are
    /// what the pool hands out.
    pub carved: Option<Vec<CarvedPrefix>>,
}

/// One of inpool's conditions on a pool, its reason and message as [`fingerprint`]s: two
/// different texts that shared one would at worst skip one status write, until the next change
/// of the pool's counts.
#[derive(Debug, PartialEq)]
struct ConditionSeen {
    type_: &'static str,
    /// `None` for a status that is none of `True`, `False`, `Unknown`.
    status: Option<ConditionStatus>,
    reason: u64,
    message: u64,
    observed_generation: Option<i64>,
    last_transition_time: Time,
}

impl PoolView {
    /// The view of `pool`, whose `state` (what the registry is told of the same object) says
    /// whether it hands out addresses.
    pub fn of<P: IPPool>(pool: &P, state: &Result<ParsedSpec, Unready>) -> PoolView {
        let meta = pool.meta();
        let namespace = meta.namespace.as_deref();
        let (reuse_grace_period_seconds, allocation_length) = match pool.spec_of() {
            PoolSpecRef::Addresses(spec) => (spec.address_reuse_grace_period_seconds, None),
            PoolSpecRef::Prefixes(spec) => (None, Some(spec.allocation_length())),
        };
        let carving = pool.spec_of().parent_pool().and_then(|parent| {
            Some(Box::new(Carving {
                parent: facts::parent_key(parent, namespace)?,
                count: parent.count(),
                claim_namespace: facts::claim_namespace(parent, namespace).to_string(),
            }))
        });
        let finalizers = pool.finalizers();
        PoolView {
            key: pool.key(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            generation: meta.generation,
            readiness: state.as_ref().map(|_| ()).map_err(Unready::clone),
            paused: pool.annotations().contains_key(PAUSED_ANNOTATION),
            protected: finalizers.iter().any(|f| f == POOL_FINALIZER),
            other_finalizers: finalizers
                .iter()
                .filter(|f| *f != POOL_FINALIZER)
                .cloned()
                .collect(),
            reuse_grace_period_seconds,
            allocation_length,
            carving,
            status: pool.pool_status().map(StatusSeen::of),
        }
    }

    pub fn key(&self) -> &PoolKey {
        &self.key
    }

    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    /// `Ok` while the pool hands out addresses; why not otherwise.
    pub fn readiness(&self) -> Result<(), &Unready> {
        self.readiness.as_ref().map(|_| ())
    }

    pub fn is_deleting(&self) -> bool {
        self.readiness == Err(Unready::Deleting)
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// `metadata.finalizers` as the object has them (`ProtectPool` last).
    pub fn finalizers(&self) -> Vec<String> {
        let mut finalizers = self.other_finalizers.clone();
        if self.protected {
            finalizers.push(POOL_FINALIZER.to_string());
        }
        finalizers
    }

    /// `spec.addressReuseGracePeriodSeconds`; prefix pools have none (as the reference's).
    pub fn reuse_grace_period_seconds(&self) -> Option<i32> {
        self.reuse_grace_period_seconds
    }

    /// `spec.allocationPrefixLength` (or its default) of a prefix pool; `None` for IP pools.
    pub fn allocation_length(&self) -> Option<i32> {
        self.allocation_length
    }

    pub fn status(&self) -> Option<&StatusSeen> {
        self.status.as_ref()
    }

    /// What the pool asks of its parent, if it names one.
    pub fn carving(&self) -> Option<&Carving> {
        self.carving.as_deref()
    }

    /// The pool as the object an Event is about.
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(format!("{IPAM_GROUP}/{POOL_VERSION}")),
            kind: Some(self.key.kind.name().to_string()),
            name: Some(self.key.name.to_string()),
            namespace: self.key.namespace.as_deref().map(str::to_string),
            uid: self.uid.clone(),
            resource_version: self.resource_version.clone(),
            ..ObjectReference::default()
        }
    }
}

impl StatusSeen {
    pub fn of(status: &InClusterIPPoolStatus) -> StatusSeen {
        let conditions = status
            .conditions
            .iter()
            .flatten()
            .filter_map(|c| {
                let type_ = POOL_CONDITIONS.iter().find(|t| **t == c.type_)?;
                Some(ConditionSeen {
                    type_,
                    status: ConditionStatus::parse(&c.status),
                    reason: fingerprint(&c.reason),
                    message: fingerprint(&c.message),
                    observed_generation: c.observed_generation,
                    last_transition_time: c.last_transition_time.clone(),
                })
            })
            .collect();
        StatusSeen {
            counts: status.ip_addresses,
            conditions,
            carved: status.carved_prefixes.clone(),
        }
    }

    fn condition(&self, type_: &str) -> Option<&ConditionSeen> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the status carries `want` as it is: status, reason, message and observed
    /// generation (the transition time aside).
    pub fn carries(&self, want: &Condition) -> bool {
        self.carries_turn(want)
            && self.condition(&want.type_).is_some_and(|c| {
                c.message == fingerprint(&want.message)
                    && c.observed_generation == want.observed_generation
            })
    }

    /// Whether the status carries a condition of `want`'s type with its status and reason
    /// (whatever its message).
    pub fn carries_turn(&self, want: &Condition) -> bool {
        self.condition(&want.type_).is_some_and(|c| {
            c.status.is_some()
                && c.status == ConditionStatus::parse(&want.status)
                && c.reason == fingerprint(&want.reason)
        })
    }

    /// `want` as a condition to write: its `lastTransitionTime` is the one the status carries
    /// when its status stays, `now` when it turns or is new (the rule of
    /// [`set_condition_at`](crate::api::conditions::set_condition_at), applied to what the view
    /// keeps instead of a list of whole conditions).
    pub fn to_write(status: Option<&StatusSeen>, want: DesiredCondition, now: &Time) -> Condition {
        let last_transition_time = status
            .and_then(|s| s.condition(&want.type_))
            .filter(|c| c.status == Some(want.status))
            .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
        Condition {
            type_: want.type_,
            status: want.status.as_str().to_string(),
            reason: want.reason,
            message: want.message,
            observed_generation: want.observed_generation,
            last_transition_time,
        }
    }
}

/// The views of one pool kind's pools, as its watch last told; cloning shares them.
#[derive(Clone, Default)]
pub struct PoolCache {
    views: Arc<RwLock<HashMap<PoolKey, Arc<PoolView>>>>,
    /// Set once the watch's first list is in.
    listed: Arc<SetOnce<()>>,
}

impl PoolCache {
    /// The cache of a kind that is not watched: empty, and listed from the start.
    pub fn unwatched() -> PoolCache {
        let cache = PoolCache::default();
        cache.mark_listed();
        cache
    }

    pub fn get(&self, key: &PoolKey) -> Option<Arc<PoolView>> {
        self.views
            .read()
            .expect("pool cache lock")
            .get(key)
            .cloned()
    }

    /// How many pools the cache holds.
    pub fn len(&self) -> usize {
        self.views.read().expect("pool cache lock").len()
    }

    /// Waits until the watch's first list is in.
    pub async fn wait_until_listed(&self) {
        self.listed.wait().await;
    }

    /// The watch's first list is in: the controllers may read the cache.
    pub fn mark_listed(&self) {
        // Set already: a re-list.
        let _ = self.listed.set(());
    }

    /// A pool added or changed.
    pub fn applied(&self, view: Arc<PoolView>) {
        self.write().insert(view.key.clone(), view);
    }

    /// A pool deleted.
    pub fn deleted(&self, key: &PoolKey) {
        self.write().remove(key);
    }

    /// A whole list: it replaces every view of the kind.
    pub fn replace(&self, views: impl IntoIterator<Item = Arc<PoolView>>) {
        let listed: HashMap<PoolKey, Arc<PoolView>> = views
            .into_iter()
            .map(|view| (view.key.clone(), view))
            .collect();
        *self.write() = listed;
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<PoolKey, Arc<PoolView>>> {
        self.views.write().expect("pool cache lock")
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;
    use crate::api::ADDRESSES_AVAILABLE_CONDITION;
    use crate::api::{InClusterIPPool, READY_CONDITION};
    use crate::controllers::state::facts::pool_state;

    fn pool(value: serde_json::Value) -> InClusterIPPool {
        serde_json::from_value(value).expect("a valid pool")
    }

    fn condition(type_: &str, status: &str, reason: &str, message: &str, at: i64) -> Condition {
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            observed_generation: Some(2),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::from_second(at).unwrap()),
        }
    }

    fn desired(
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> DesiredCondition {
        DesiredCondition::new(type_, status, reason, message).observed_generation(Some(2))
    }

    /// The condition `desired` would write.
    fn written(desired: DesiredCondition) -> Condition {
        StatusSeen::to_write(
            None,
            desired,
            &Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        )
    }

    #[test]
    fn a_view_keeps_what_the_controllers_read_of_the_object() {
        let object = pool(serde_json::json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "InClusterIPPool",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                "generation": 2,
                "finalizers": [POOL_FINALIZER, "example.com/keep"],
                "annotations": {PAUSED_ANNOTATION: ""}
            },
            "spec": {"addresses": ["10.0.0.0/24"], "prefix": 24,
                     "addressReuseGracePeriodSeconds": 30},
            "status": {
                "ipAddresses": {"total": 254, "used": 1, "free": 253, "outOfRange": 0},
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Ready", "message": "m",
                     "lastTransitionTime": "2026-12-04T10:00:00Z", "observedGeneration": 2},
                    {"type": "SomeoneElses", "status": "True", "reason": "R", "message": "x",
                     "lastTransitionTime": "2026-12-04T10:00:00Z"}
                ]
            }
        }));
        let view = PoolView::of(&object, &Err(Unready::Paused));
        assert_eq!(view.key(), &PoolKey::in_cluster("ns", "p"));
        assert_eq!(
            (view.uid(), view.resource_version(), view.generation()),
            (Some("u-1"), Some("7"), Some(2))
        );
        assert!(view.is_paused() && !view.is_deleting());
        assert_eq!(view.readiness(), Err(&Unready::Paused));
        assert_eq!(
            view.finalizers(),
            vec!["example.com/keep".to_string(), POOL_FINALIZER.to_string()]
        );
        assert_eq!(view.reuse_grace_period_seconds(), Some(30));
        assert_eq!(view.allocation_length(), None);
        let status = view.status().expect("a status");
        assert_eq!(status.counts.as_ref().map(|c| c.used), Some(1));
        assert_eq!(status.conditions.len(), 1, "only inpool's conditions");
        assert!(status.carries(&written(desired(
            READY_CONDITION,
            ConditionStatus::True,
            "Ready",
            "m"
        ))));
        let reference = view.reference();
        assert_eq!(
            (reference.kind.as_deref(), reference.uid.as_deref()),
            (Some("InClusterIPPool"), Some("u-1"))
        );
    }

    #[test]
    fn a_status_carries_a_condition_only_as_written_and_keeps_its_time_while_its_status_stays() {
        let seen = StatusSeen::of(&InClusterIPPoolStatus {
            ip_addresses: None,
            conditions: Some(vec![condition(
                ADDRESSES_AVAILABLE_CONDITION,
                "True",
                "AddressesAvailable",
                "3 of 10 addresses are free",
                1_000,
            )]),
            carved_prefixes: None,
        });
        let free = |message: &str| {
            desired(
                ADDRESSES_AVAILABLE_CONDITION,
                ConditionStatus::True,
                "AddressesAvailable",
                message,
            )
        };
        let none = desired(
            ADDRESSES_AVAILABLE_CONDITION,
            ConditionStatus::False,
            "PoolExhausted",
            "all 10 addresses are in use",
        );
        assert!(seen.carries(&written(free("3 of 10 addresses are free"))));
        assert!(!seen.carries(&written(free("2 of 10 addresses are free"))));
        assert!(!seen.carries(&written(
            free("3 of 10 addresses are free").observed_generation(Some(3))
        )));
        assert!(seen.carries_turn(&written(free("2 of 10 addresses are free"))));
        assert!(!seen.carries_turn(&written(none.clone())));
        assert!(!seen.carries_turn(&written(desired(
            READY_CONDITION,
            ConditionStatus::True,
            "Ready",
            ""
        ))));

        let now = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap());
        let stays = StatusSeen::to_write(Some(&seen), free("2 of 10 addresses are free"), &now);
        assert_eq!(stays.last_transition_time.0.as_second(), 1_000);
        assert_eq!(stays.message, "2 of 10 addresses are free");
        let turns = StatusSeen::to_write(Some(&seen), none, &now);
        assert_eq!(turns.last_transition_time, now);
        assert_eq!(
            (turns.status.as_str(), turns.reason.as_str()),
            ("False", "PoolExhausted")
        );
    }

    #[test]
    fn a_list_replaces_the_views_and_opens_the_cache() {
        let view = |name: &str| {
            let object = pool(serde_json::json!({
                "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "InClusterIPPool",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"addresses": ["10.0.0.0/24"], "prefix": 24}
            }));
            Arc::new(PoolView::of(&object, &pool_state(&object)))
        };
        let cache = PoolCache::default();
        assert!(cache.wait_until_listed().now_or_never().is_none());
        cache.applied(view("a"));
        cache.replace([view("b"), view("c")]);
        assert!(
            cache.wait_until_listed().now_or_never().is_none(),
            "listed only once its feed says so"
        );
        cache.mark_listed();
        assert!(cache.wait_until_listed().now_or_never().is_some());
        assert!(
            cache.get(&PoolKey::in_cluster("ns", "a")).is_none(),
            "not in the list"
        );
        cache.deleted(&PoolKey::in_cluster("ns", "b"));
        assert!(cache.get(&PoolKey::in_cluster("ns", "b")).is_none());
        assert!(cache.get(&PoolKey::in_cluster("ns", "c")).is_some());
        assert!(
            PoolCache::unwatched()
                .wait_until_listed()
                .now_or_never()
                .is_some()
        );
    }
}
