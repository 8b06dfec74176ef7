//! The four pool kinds inpool serves, listed once: `InClusterIPPool`, `GlobalInClusterIPPool`,
//! `InClusterPrefixPool` and `GlobalInClusterPrefixPool`.
//!
//! Everything the run keeps per kind is a [`PoolLane`]: the kind's [`PoolCache`] (its one watch
//! keeps it), and the channels that ask its pool controller for a reconcile: the watch's (a pool
//! added, changed or listed) and the registry's wakes. [`PoolLanes`] holds the four, and is the
//! only place that names them: the watches, the cache look-ups, the wake-ups, the pool
//! controllers and the audit's lists all go through it. A kind this run does not serve (see
//! [`served`](super::served)) has an empty lane: no watch, a cache that counts as listed, and a
//! controller that is not started.
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::channel::mpsc::{self, UnboundedReceiver, UnboundedSender};
use kube::Client;
use kube::api::Api;

use super::pool_cache::{PoolCache, PoolView};
use super::served::ServedKinds;
use super::watch::{FeedSet, pool_watch};
use crate::api::{
    GlobalInClusterIPPool, GlobalInClusterPrefixPool, IPPool, InClusterIPPool, InClusterPrefixPool,
    PoolKey, PoolKind,
};
use crate::controllers::runtime::scoped;
use crate::settings::Settings;

/// What the controllers need of each pool kind besides [`IPPool`]: where its objects are read
/// and written.
pub(crate) trait PoolObject:
    IPPool + serde::Serialize + serde::de::DeserializeOwned + Debug
{
    /// The kind's objects this run watches and lists: every namespace's, or `--namespace`'s.
    fn watched(client: &Client, settings: &Settings) -> Api<Self>;

    /// The API that writes the pool `key` names.
    fn api(client: Client, key: &PoolKey) -> Api<Self>;
}

impl PoolObject for InClusterIPPool {
    fn watched(client: &Client, settings: &Settings) -> Api<Self> {
        scoped(client, settings)
    }

    fn api(client: Client, key: &PoolKey) -> Api<Self> {
        Api::namespaced(client, key.namespace.as_deref().unwrap_or_default())
    }
}

impl PoolObject for GlobalInClusterIPPool {
    fn watched(client: &Client, _settings: &Settings) -> Api<Self> {
        Api::all(client.clone())
    }

    fn api(client: Client, _key: &PoolKey) -> Api<Self> {
        Api::all(client)
    }
}

impl PoolObject for InClusterPrefixPool {
    fn watched(client: &Client, settings: &Settings) -> Api<Self> {
        scoped(client, settings)
    }

    fn api(client: Client, key: &PoolKey) -> Api<Self> {
        Api::namespaced(client, key.namespace.as_deref().unwrap_or_default())
    }
}

impl PoolObject for GlobalInClusterPrefixPool {
    fn watched(client: &Client, _settings: &Settings) -> Api<Self> {
        Api::all(client.clone())
    }

    fn api(client: Client, _key: &PoolKey) -> Api<Self> {
        Api::all(client)
    }
}

/// One pool kind's share of the run.
pub(crate) struct PoolLane {
    cache: PoolCache,
    /// Pools the watch added, changed or listed: reconciled at once.
    changed: UnboundedSender<PoolKey>,
    /// Pools whose status the registry says may have changed: reconciled once debounced.
    wakes: UnboundedSender<PoolKey>,
}

/// What one pool kind's controller takes when it starts: the kind's cache, the pools its watch
/// changed, the wake-ups the registry sends, and whether the kind is served at all.
pub(crate) struct LaneInput<P: PoolObject> {
    pub cache: PoolCache,
    pub changed: UnboundedReceiver<PoolKey>,
    pub wakes: UnboundedReceiver<PoolKey>,
    pub served: bool,
    kind: PhantomData<fn() -> P>,
}

impl PoolLane {
    /// Opens the watch of kind `P` in `feeds`, or an empty lane for a kind not served.
    fn start<P: PoolObject>(
        feeds: &mut FeedSet,
        client: &Client,
        settings: &Settings,
        served: &ServedKinds,
    ) -> (PoolLane, LaneInput<P>) {
        let served = served.serves(P::KIND);
        let cache = if served {
            pool_watch(feeds, P::watched(client, settings));
            PoolCache::default()
        } else {
            PoolCache::unwatched()
        };
        let (changed, changed_rx) = mpsc::unbounded();
        let (wakes, wake_rx) = mpsc::unbounded();
        let lane = PoolLane {
            cache: cache.clone(),
            changed,
            wakes,
        };
        let input = LaneInput {
            cache,
            changed: changed_rx,
            wakes: wake_rx,
            served,
            kind: PhantomData,
        };
        (lane, input)
    }
}

/// The four lanes: the one list of the pool kinds.
#[derive(Clone)]
pub(crate) struct PoolLanes {
    in_cluster: Arc<PoolLane>,
    global: Arc<PoolLane>,
    in_cluster_prefix: Arc<PoolLane>,
    global_prefix: Arc<PoolLane>,
}

/// What the four pool controllers take when they start (`pools::run`).
pub(crate) struct PoolInputs {
    pub(crate) in_cluster: LaneInput<InClusterIPPool>,
    pub(crate) global: LaneInput<GlobalInClusterIPPool>,
    pub(crate) in_cluster_prefix: LaneInput<InClusterPrefixPool>,
    pub(crate) global_prefix: LaneInput<GlobalInClusterPrefixPool>,
}

/// Something done once per served pool kind, with the kind's type ([`PoolLanes::each_served`]).
pub(crate) trait EachKind {
    type Error;
    async fn visit<P: PoolObject>(&mut self, api: Api<P>) -> Result<(), Self::Error>;
}

impl PoolLanes {
    /// Opens a watch per served kind in `feeds`.
    pub fn start(
        feeds: &mut FeedSet,
        client: &Client,
        settings: &Settings,
        served: &ServedKinds,
    ) -> (PoolLanes, PoolInputs) {
        let (in_cluster, in_cluster_input) = PoolLane::start(feeds, client, settings, served);
        let (global, global_input) = PoolLane::start(feeds, client, settings, served);
        let (in_cluster_prefix, in_cluster_prefix_input) =
            PoolLane::start(feeds, client, settings, served);
        let (global_prefix, global_prefix_input) = PoolLane::start(feeds, client, settings, served);
        let lanes = PoolLanes {
            in_cluster: Arc::new(in_cluster),
            global: Arc::new(global),
            in_cluster_prefix: Arc::new(in_cluster_prefix),
            global_prefix: Arc::new(global_prefix),
        };
        let inputs = PoolInputs {
            in_cluster: in_cluster_input,
            global: global_input,
            in_cluster_prefix: in_cluster_prefix_input,
            global_prefix: global_prefix_input,
        };
        (lanes, inputs)
    }

    fn lane(&self, kind: PoolKind) -> &PoolLane {
        match kind {
            PoolKind::InCluster => &self.in_cluster,
            PoolKind::Global => &self.global,
            PoolKind::InClusterPrefix => &self.in_cluster_prefix,
            PoolKind::GlobalPrefix => &self.global_prefix,
        }
    }

    /// The cache of pools of `kind`.
    pub fn cache(&self, kind: PoolKind) -> &PoolCache {
        &self.lane(kind).cache
    }

    /// The cached pool `key` names; `None` when it is not in the cache.
    pub fn pool(&self, key: &PoolKey) -> Option<Arc<PoolView>> {
        self.cache(key.kind).get(key)
    }

    /// Asks the kind's pool controller to reconcile pools the watch added, changed or listed.
    pub fn changed(&self, kind: PoolKind, pools: impl IntoIterator<Item = PoolKey>) {
        let lane = self.lane(kind);
        for pool in pools {
            // A closed channel means the run is ending: nothing is left to update.
            let _ = lane.changed.unbounded_send(pool);
        }
    }

    /// Asks the kind's pool controller to bring the pool's status up to date.
    pub fn wake(&self, key: &PoolKey) {
        // A closed channel means the run is ending: nothing is left to update.
        let _ = self.lane(key.kind).wakes.unbounded_send(key.clone());
    }

    /// Waits until every kind's cache has seen its first list.
    pub async fn wait_until_listed(&self) {
        for lane in [
            &self.in_cluster,
            &self.global,
            &self.in_cluster_prefix,
            &self.global_prefix,
        ] {
            lane.cache.wait_until_listed().await;
        }
    }

    /// Runs `each` for every kind this run serves, with the API its watch reads.
    pub async fn each_served<E: EachKind>(
        client: &Client,
        settings: &Settings,
        served: &ServedKinds,
        each: &mut E,
    ) -> Result<(), E::Error> {
        async fn one<P: PoolObject, E: EachKind>(
            client: &Client,
            settings: &Settings,
            served: &ServedKinds,
            each: &mut E,
        ) -> Result<(), E::Error> {
            if served.serves(P::KIND) {
                each.visit(P::watched(client, settings)).await?;
            }
            Ok(())
        }
        one::<InClusterIPPool, E>(client, settings, served, each).await?;
        one::<GlobalInClusterIPPool, E>(client, settings, served, each).await?;
        one::<InClusterPrefixPool, E>(client, settings, served, each).await?;
        one::<GlobalInClusterPrefixPool, E>(client, settings, served, each).await
    }
}
