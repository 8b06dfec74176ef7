//! The claim cache: every claim the claim watch sees, as a [`CachedClaim`] keyed by its
//! [`ObjectKey`] of interned names, and the writer that follows the watch the way kube-runtime's
//! reflector store does: a list (the first one, or a re-list after a gap in the watch) replaces
//! the whole cache once it is complete, and every claim of it is reconciled; an added or changed
//! claim is reconciled; a deleted one is forgotten.
//!
//! A claim of a pool kind inpool does not serve (another provider's) is never kept, never
//! reconciled: the watch's news of it only makes sure the cache does not hold it (its `poolRef`
//! may have changed away from one of inpool's pools where Cluster API's webhook does not run).
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::runtime::watcher;

use crate::api::ObjectKey;
use crate::controllers::claims::cached_claim::{CachedClaim, WatchedClaim};
use crate::controllers::runtime::queue::Urgency;

/// Every claim the claim watch sees, by namespace/name; cloning shares it.
#[derive(Clone, Default)]
pub struct ClaimCache {
    claims: Arc<RwLock<HashMap<ObjectKey, Arc<CachedClaim>>>>,
}

impl ClaimCache {
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<CachedClaim>> {
        self.read().get(key).cloned()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// The keys of the cached claims `select` picks.
    pub fn keys_where(&self, select: impl Fn(&CachedClaim) -> bool) -> Vec<ObjectKey> {
        self.read()
            .iter()
            .filter(|(_, claim)| select(claim))
            .map(|(key, _)| key.clone())
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ObjectKey, Arc<CachedClaim>>> {
        self.claims.read().expect("claim cache lock")
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<ObjectKey, Arc<CachedClaim>>> {
        self.claims.write().expect("claim cache lock")
    }
}

/// Applies the claim watch's events to a [`ClaimCache`] and says which claims to reconcile.
pub struct CacheWriter {
    cache: ClaimCache,
    /// A list being received: it replaces the cache once complete.
    listing: Option<HashMap<ObjectKey, Arc<CachedClaim>>>,
    /// Whether a list was ever complete.
    listed: bool,
}

impl CacheWriter {
    pub fn new(cache: ClaimCache) -> CacheWriter {
        CacheWriter {
            cache,
            listing: None,
            listed: false,
        }
    }

    /// Applies one event; returns the claims to reconcile for it, each with its urgency (see
    /// [`urgency`]).
    pub fn apply(&mut self, event: watcher::Event<WatchedClaim>) -> Vec<(ObjectKey, Urgency)> {
        match event {
            watcher::Event::Init => {
                self.listing = Some(HashMap::new());
                Vec::new()
            }
            watcher::Event::InitApply(watched) => {
                if let Some(claim) = watched.claim {
                    let claim = self.cached_copy(&claim).unwrap_or_else(|| Arc::new(claim));
                    self.listing
                        .get_or_insert_with(HashMap::new)
                        .insert(claim.key().clone(), claim);
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let requests = listed
                    .iter()
                    .map(|(key, claim)| (key.clone(), urgency(claim)))
                    .collect();
                *self.cache.write() = listed;
                self.listed = true;
                requests
            }
            watcher::Event::Apply(watched) => match watched.claim {
                Some(claim) => {
                    let request = (claim.key().clone(), urgency(&claim));
                    self.cache
                        .write()
                        .insert(request.0.clone(), Arc::new(claim));
                    vec![request]
                }
                None => {
                    self.forget(&watched);
                    Vec::new()
                }
            },
            watcher::Event::Delete(watched) => {
                self.forget(&watched);
                Vec::new()
            }
        }
    }

    /// The cache's copy of `claim` when a list brings the very version the cache holds. Until a
    /// re-list is complete the old cache serves beside it; sharing each unchanged claim keeps one
    /// copy of it, not two, so a re-list (after a control-plane restart, say) does not double
    /// the claims' memory for its duration.
    fn cached_copy(&self, claim: &CachedClaim) -> Option<Arc<CachedClaim>> {
        self.cache
            .get(claim.key())
            .filter(|cached| cached.is_same_version(claim))
    }

    /// Removes the claim from the cache, if it is there.
    fn forget(&self, watched: &WatchedClaim) {
        if let Some(key) = watched.existing_key() {
            self.cache.write().remove(&key);
        }
    }

    /// Whether the cache holds a complete list.
    pub fn is_listed(&self) -> bool {
        self.listed
    }
}

/// How soon the watch's news of a claim is to be reconciled: a realised claim only needs
/// confirming, and waits behind everything else (see `runtime::controller`, "Order").
fn urgency(claim: &CachedClaim) -> Urgency {
    if claim.is_realised() {
        Urgency::Routine
    } else {
        Urgency::Urgent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("ns", name)
    }

    fn watched(name: &str, version: &str) -> WatchedClaim {
        watched_of(name, version, "ipam.cluster.x-k8s.io", "InClusterIPPool")
    }

    /// A claim of a pool of another provider (metal3's).
    fn foreign(name: &str, version: &str) -> WatchedClaim {
        watched_of(name, version, "ipam.metal3.io", "IPPool")
    }

    fn watched_of(name: &str, version: &str, group: &str, kind: &str) -> WatchedClaim {
        serde_json::from_value(claim_object(name, version, group, kind)).expect("a valid claim")
    }

    fn claim_object(name: &str, version: &str, group: &str, kind: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
            "spec": {"poolRef": {"apiGroup": group, "kind": kind, "name": "p"}}
        })
    }

    fn cached(cache: &ClaimCache) -> Vec<(String, Option<String>)> {
        let mut claims: Vec<_> = cache
            .keys_where(|_| true)
            .into_iter()
            .map(|k| {
                let version = cache.get(&k).and_then(|c| c.resource_version());
                (k.name.to_string(), version)
            })
            .collect();
        claims.sort();
        claims
    }

    #[test]
    fn a_list_replaces_the_cache_once_complete_and_reconciles_every_claim_of_it() {
        let cache = ClaimCache::default();
        let mut writer = CacheWriter::new(cache.clone());
        assert!(writer.apply(watcher::Event::Init).is_empty());
        assert!(
            writer
                .apply(watcher::Event::InitApply(watched("a", "1")))
                .is_empty()
        );
        assert!(
            cache.is_empty() && !writer.is_listed(),
            "not before the list is complete"
        );
        assert_eq!(
            writer.apply(watcher::Event::InitDone),
            [(key("a"), Urgency::Urgent)]
        );
        assert!(writer.is_listed());
        assert_eq!(
            writer.apply(watcher::Event::Apply(watched("b", "2"))),
            [(key("b"), Urgency::Urgent)]
        );
        assert_eq!(
            cached(&cache),
            [
                ("a".into(), Some("1".into())),
                ("b".into(), Some("2".into()))
            ]
        );

        // A re-list after a gap: `a` was deleted and `b` changed meanwhile.
        writer.apply(watcher::Event::Init);
        writer.apply(watcher::Event::InitApply(watched("b", "5")));
        assert_eq!(
            cache.len(),
            2,
            "the old cache serves until the list is complete"
        );
        assert_eq!(
            writer.apply(watcher::Event::InitDone),
            [(key("b"), Urgency::Urgent)]
        );
        assert_eq!(cached(&cache), [("b".into(), Some("5".into()))]);

        assert!(
            writer
                .apply(watcher::Event::Delete(watched("b", "6")))
                .is_empty()
        );
        assert!(cache.is_empty());
    }

    fn with_uid(name: &str, version: &str, uid: &str) -> WatchedClaim {
        let mut object = claim_object(name, version, "ipam.cluster.x-k8s.io", "InClusterIPPool");
        object["metadata"]["uid"] = uid.into();
        serde_json::from_value(object).expect("a valid claim")
    }

    #[test]
    fn a_relist_shares_each_unchanged_claim_with_the_cache_it_replaces() {
        let cache = ClaimCache::default();
        let mut writer = CacheWriter::new(cache.clone());
        let list = |writer: &mut CacheWriter, claims: Vec<WatchedClaim>| {
            writer.apply(watcher::Event::Init);
            for claim in claims {
                writer.apply(watcher::Event::InitApply(claim));
            }
            writer.apply(watcher::Event::InitDone)
        };
        list(
            &mut writer,
            vec![
                watched("same", "1"),
                watched("changed", "2"),
                with_uid("recreated", "3", "uid-a"),
            ],
        );
        let held = |name: &str| cache.get(&key(name)).expect("cached");
        let (same, changed, recreated) = (held("same"), held("changed"), held("recreated"));

        let requests = list(
            &mut writer,
            vec![
                watched("same", "1"),
                watched("changed", "7"),
                with_uid("recreated", "3", "uid-b"),
            ],
        );
        assert_eq!(requests.len(), 3, "a re-list still reconciles every claim");
        assert!(
            Arc::ptr_eq(&same, &held("same")),
            "an unchanged claim is kept once, not copied"
        );
        assert!(!Arc::ptr_eq(&changed, &held("changed")));
        assert_eq!(held("changed").resource_version().as_deref(), Some("7"));
        assert!(
            !Arc::ptr_eq(&recreated, &held("recreated")),
            "another object of the same name is another claim"
        );
        assert_eq!(held("recreated").uid().as_deref(), Some("uid-b"));
    }

    #[test]
    fn claims_of_another_providers_pools_are_neither_kept_nor_reconciled() {
        let cache = ClaimCache::default();
        let mut writer = CacheWriter::new(cache.clone());
        writer.apply(watcher::Event::Init);
        writer.apply(watcher::Event::InitApply(watched("ours", "1")));
        writer.apply(watcher::Event::InitApply(foreign("theirs", "2")));
        assert_eq!(
            writer.apply(watcher::Event::InitDone),
            [(key("ours"), Urgency::Urgent)]
        );
        assert_eq!(cached(&cache), [("ours".into(), Some("1".into()))]);
        assert!(
            writer
                .apply(watcher::Event::Apply(foreign("theirs", "3")))
                .is_empty()
        );
        assert!(
            writer
                .apply(watcher::Event::Delete(foreign("theirs", "4")))
                .is_empty()
        );
        assert_eq!(cache.len(), 1);

        // Where no webhook keeps `spec` immutable, a poolRef can change either way: the cache
        // follows the claim's latest version.
        assert!(
            writer
                .apply(watcher::Event::Apply(foreign("ours", "5")))
                .is_empty()
        );
        assert!(cache.is_empty(), "now another provider's");
        assert_eq!(
            writer.apply(watcher::Event::Apply(watched("theirs", "6"))),
            [(key("theirs"), Urgency::Urgent)]
        );
        assert_eq!(cached(&cache), [("theirs".into(), Some("6".into()))]);
    }
}
