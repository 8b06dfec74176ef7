//! The four pool kinds inpool serves, listed once: `InClusterIPPool`, `GlobalInClusterIPPool`,
//! `InClusterPrefixPool` and `GlobalInClusterPrefixPool`.
//!
//! Everything the run keeps per kind is a [`PoolLane`]: the kind's store (its one watch keeps
//! it) and the channel that wakes its pool controller. [`PoolLanes`] holds the four, and is the
//! only place that names them: the watches, the store look-ups, the wake-ups, the pool
//! controllers and the audit's lists all go through it. A kind this run does not serve (see
//! [`served`](super::served)) has an empty lane: no watch, a store that counts as listed, and a
//! controller that is not started.
use std::fmt::Debug;
use std::sync::Arc;

use futures::channel::mpsc::{self, UnboundedReceiver, UnboundedSender};
use kube::api::{Api, ObjectMeta};
use kube::runtime::reflector::Store;
use kube::{Client, Resource};

use super::served::ServedKinds;
use super::watch::{FeedSet, Subscription, pool_watch, unserved_pools};
use crate::api::{
    GlobalInClusterIPPool, GlobalInClusterPrefixPool, IPPool, InClusterIPPool, InClusterPrefixPool,
    PAUSED_ANNOTATION, PoolKey, PoolKind, PoolSpecRef,
};
use crate::cli::Settings;
use crate::controllers::pools::status;
use crate::controllers::runtime::{Context, object_ref, scoped};

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
pub(crate) struct PoolLane<P: PoolObject> {
    store: Store<P>,
    wakes: UnboundedSender<PoolKey>,
}

/// What one pool kind's controller takes when it starts: the kind's share of its watch, the
/// wake-ups the registry sends, and whether the kind is served at all.
pub(crate) struct LaneInput<P: PoolObject> {
    pub subscription: Subscription<P>,
    pub wakes: UnboundedReceiver<PoolKey>,
    pub served: bool,
}

impl<P: PoolObject> PoolLane<P> {
    /// Opens the kind's watch in `feeds`, or an empty lane for a kind not served.
    fn start(
        feeds: &mut FeedSet,
        client: &Client,
        settings: &Settings,
        served: &ServedKinds,
    ) -> (PoolLane<P>, LaneInput<P>) {
        let served = served.serves(P::KIND);
        let (store, subscription) = if served {
            pool_watch(feeds, P::watched(client, settings))
        } else {
            unserved_pools()
        };
        let (wakes, wake_rx) = mpsc::unbounded();
        let lane = PoolLane { store, wakes };
        let input = LaneInput {
            subscription,
            wakes: wake_rx,
            served,
        };
        (lane, input)
    }

    fn get(&self, key: &PoolKey) -> Option<CachedPool> {
        let pool: Arc<P> = self.store.get(&object_ref(key))?;
        Some(CachedPool(pool))
    }

    fn wake(&self, key: &PoolKey) {
        // A closed channel means the run is ending: nothing is left to update.
        let _ = self.wakes.unbounded_send(key.clone());
    }
}

/// The four lanes: the one list of the pool kinds.
#[derive(Clone)]
pub(crate) struct PoolLanes {
    in_cluster: Arc<PoolLane<InClusterIPPool>>,
    global: Arc<PoolLane<GlobalInClusterIPPool>>,
    in_cluster_prefix: Arc<PoolLane<InClusterPrefixPool>>,
    global_prefix: Arc<PoolLane<GlobalInClusterPrefixPool>>,
}

/// What the four pool controllers take when they start ([`PoolInputs::run`]).
pub(crate) struct PoolInputs {
    in_cluster: LaneInput<InClusterIPPool>,
    global: LaneInput<GlobalInClusterIPPool>,
    in_cluster_prefix: LaneInput<InClusterPrefixPool>,
    global_prefix: LaneInput<GlobalInClusterPrefixPool>,
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

    /// The cached pool `key` names; `None` when it is not in the cache.
    pub fn pool(&self, key: &PoolKey) -> Option<CachedPool> {
        match key.kind {
            PoolKind::InCluster => self.in_cluster.get(key),
            PoolKind::Global => self.global.get(key),
            PoolKind::InClusterPrefix => self.in_cluster_prefix.get(key),
            PoolKind::GlobalPrefix => self.global_prefix.get(key),
        }
    }

    /// Asks the kind's pool controller to bring the pool's status up to date.
    pub fn wake(&self, key: &PoolKey) {
        match key.kind {
            PoolKind::InCluster => self.in_cluster.wake(key),
            PoolKind::Global => self.global.wake(key),
            PoolKind::InClusterPrefix => self.in_cluster_prefix.wake(key),
            PoolKind::GlobalPrefix => self.global_prefix.wake(key),
        }
    }

    /// Waits until every kind's store has seen its first list.
    pub async fn wait_until_ready(&self) -> anyhow::Result<()> {
        self.in_cluster.store.wait_until_ready().await?;
        self.global.store.wait_until_ready().await?;
        self.in_cluster_prefix.store.wait_until_ready().await?;
        self.global_prefix.store.wait_until_ready().await?;
        Ok(())
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

impl PoolInputs {
    /// Runs the pool controller of every served kind until the run ends.
    pub async fn run(self, ctx: &Arc<Context>) {
        async fn one<P: PoolObject>(ctx: &Arc<Context>, input: LaneInput<P>) {
            if input.served {
                status::run(ctx, input.subscription, input.wakes).await;
            }
        }
        futures::join!(
            one(ctx, self.in_cluster),
            one(ctx, self.global),
            one(ctx, self.in_cluster_prefix),
            one(ctx, self.global_prefix),
        );
    }
}

/// A cached pool of any kind.
#[derive(Clone)]
pub(crate) struct CachedPool(Arc<dyn AnyPool>);

/// What is read of a cached pool whatever its kind.
trait AnyPool: Send + Sync {
    fn meta(&self) -> &ObjectMeta;
    fn spec(&self) -> PoolSpecRef<'_>;
}

impl<P: IPPool> AnyPool for P {
    fn meta(&self) -> &ObjectMeta {
        Resource::meta(self)
    }

    fn spec(&self) -> PoolSpecRef<'_> {
        self.spec_of()
    }
}

impl CachedPool {
    pub fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    /// `spec.addressReuseGracePeriodSeconds`; prefix pools have none (as the reference's).
    pub fn reuse_grace_period_seconds(&self) -> Option<i32> {
        match self.0.spec() {
            PoolSpecRef::Addresses(spec) => spec.address_reuse_grace_period_seconds,
            PoolSpecRef::Prefixes(_) => None,
        }
    }

    /// `spec.allocationPrefixLength` (or its default) of a prefix pool; `None` for IP pools.
    pub fn allocation_length(&self) -> Option<i32> {
        match self.0.spec() {
            PoolSpecRef::Addresses(_) => None,
            PoolSpecRef::Prefixes(spec) => Some(spec.allocation_length()),
        }
    }

    pub fn is_paused(&self) -> bool {
        self.meta()
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
    }
}
