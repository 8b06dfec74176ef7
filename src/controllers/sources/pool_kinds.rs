//! The pool kinds this run serves, each with its share of the run: a [`PoolLane`] per kind, in
//! the order of [`PoolKind::ALL`]. The kinds' types come from the one table in
//! [`crate::api::kinds`]; nothing here names them.
//!
//! A lane holds the kind's [`PoolCache`] (its one watch keeps it), and the channels that ask its
//! pool controller for a reconcile: the watch's (a pool added, changed or listed) and the
//! registry's wakes. [`PoolLanes`] holds every lane: the watches, the cache look-ups, the
//! wake-ups and the pool controllers all go through it. A kind this run does not serve (see
//! [`served`](super::served)) has an empty lane: no watch, a cache that counts as listed, and a
//! controller that is not started.
use std::sync::Arc;

use futures::channel::mpsc::{self, UnboundedReceiver, UnboundedSender};
use kube::Client;
use kube::api::Api;

use super::pool_cache::{PoolCache, PoolView};
use super::served::ServedKinds;
use super::watch::{FeedSet, pool_watch};
use crate::api::kinds::WithPoolType;
use crate::api::{IPPool, PoolKey, PoolKind};
use crate::settings::Settings;

/// The kind's objects this run watches and lists: every namespace's, or `--namespace`'s (a
/// global kind's are cluster-wide whatever the namespace).
pub(crate) fn watched<P: IPPool>(client: &Client, settings: &Settings) -> Api<P> {
    P::api(client.clone(), settings.namespace.as_deref())
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
pub(crate) struct LaneInput {
    pub kind: PoolKind,
    pub cache: PoolCache,
    pub changed: UnboundedReceiver<PoolKey>,
    pub wakes: UnboundedReceiver<PoolKey>,
    pub served: bool,
}

/// Opens the watch of one kind in `feeds`, or an empty lane for a kind not served.
struct StartLane<'a> {
    feeds: &'a mut FeedSet,
    client: &'a Client,
    settings: &'a Settings,
    served: &'a ServedKinds,
}

impl WithPoolType for StartLane<'_> {
    type Output = (PoolLane, LaneInput);

    fn with<P: IPPool>(self) -> (PoolLane, LaneInput) {
        let served = self.served.serves(P::KIND);
        let cache = if served {
            pool_watch(self.feeds, watched::<P>(self.client, self.settings));
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
            kind: P::KIND,
            cache,
            changed: changed_rx,
            wakes: wake_rx,
            served,
        };
        (lane, input)
    }
}

/// Every kind's lane, in the order of [`PoolKind::ALL`].
#[derive(Clone)]
pub(crate) struct PoolLanes(Arc<[PoolLane]>);

/// What the pool controllers take when they start (`pools::run`): one input per kind.
pub(crate) type PoolInputs = [LaneInput; PoolKind::ALL.len()];

impl PoolLanes {
    /// Opens a watch per served kind in `feeds`.
    pub fn start(
        feeds: &mut FeedSet,
        client: &Client,
        settings: &Settings,
        served: &ServedKinds,
    ) -> (PoolLanes, PoolInputs) {
        let mut lanes = Vec::with_capacity(PoolKind::ALL.len());
        let inputs = PoolKind::ALL.map(|kind| {
            let (lane, input) = kind.with_type(StartLane {
                feeds: &mut *feeds,
                client,
                settings,
                served,
            });
            lanes.push(lane);
            input
        });
        (PoolLanes(lanes.into()), inputs)
    }

    fn lane(&self, kind: PoolKind) -> &PoolLane {
        &self.0[kind.index()]
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
        for lane in self.0.iter() {
            lane.cache.wait_until_listed().await;
        }
    }
}
