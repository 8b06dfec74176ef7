//! The watches: one per kind, each shared by everything that reads that kind. They keep the
//! stores the reconcilers read (pools, Clusters, claims) and hand each [`Update`] of their kind
//! to the feed (`controllers::feed`), which tells the
//! [`Registry`](crate::controllers::state::Registry), wakes the claims that a change can serve,
//! and triggers the pool and reuse-grace controllers.
//! Event-driven: nothing here polls.
//!
//! Who reads each watch:
//! - `InClusterIPPool`, `GlobalInClusterIPPool`, `InClusterPrefixPool`,
//!   `GlobalInClusterPrefixPool`: the kind's pool cache ([`super::pool_cache`]), the registry,
//!   the pool controller of the kind;
//! - `Cluster`: the store, and the pause record (claims are woken only when a pause changes);
//! - `IPAddressReservation`: the registry, and the reuse-grace controller (the released ones,
//!   kept in a store of their own);
//! - `IPAddress`: the registry, and who wrote each one ([`super::writers`]);
//! - `IPAddressClaim`: the store and the claim controller, its only reader (opened by
//!   [`super::claim_watch`], driven by the claim controller).
//!
//! Each watch of [`start`] is one [`watch`] pipeline: watcher, backoff, store, then [`Lists`] (a
//! re-list handed on whole); then the feed (`controllers::feed`) applies it to the registry, and
//! only after that sends the controller triggers. A pool controller reads its kind's pool cache,
//! which the feed keeps just before the registry, and is sent the pools the watch changed; the
//! reuse-grace controller gets a [`Subscription`]: a store of the objects it reconciles and an
//! unbounded channel of triggers, which become the requests of its
//! [`Controller`](crate::controllers::runtime::controller::Controller). Neither opens a watch of
//! its own.
//!
//! Why not kube-runtime's `reflect_shared` + `Writer::subscribe` (kube-runtime 5.0.0,
//! `reflector/dispatcher.rs`): its subscribers get object references from a bounded broadcast
//! channel and look each one up in the store; a reference whose object is gone by then makes
//! `ReflectHandle::poll_next` return `Pending` without registering a waker, so that subscriber
//! stalls; and a subscriber that does not read (a controller starts only once the stores are
//! ready, after the initial lists) fills the channel, which then blocks the writer, hence the
//! registry feed and every store. Here the fan-out never waits: the triggers are objects, not
//! references, their channels are unbounded (a pool controller gets one per pool update; the
//! reuse-grace controller one per released reservation update), and a trigger whose object is gone
//! by the time it is reconciled is found missing when its reconcile is due, and dropped.
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::channel::mpsc;
use futures::stream::{BoxStream, SelectAll};
use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::Notify;

use super::pool_cache::PoolView;
use super::pool_kinds::{PoolInputs, PoolLanes};
use super::served::ServedKinds;
use super::subscription::Subscriber;
pub use super::subscription::Subscription;
use super::writers::{Creator, creator};
use crate::allocator::ParsedSpec;
use crate::api::{Cluster, IPAddress, IPPool, ObjectKey, PAUSED_ANNOTATION, PoolKey, PoolKind};
use crate::controllers::claims::cache::ClaimCache;
use crate::controllers::claims::cached_claim::CachedClaim;
use crate::controllers::runtime::scoped;
use crate::controllers::state::facts::{address_hold, address_key, pool_state};
use crate::controllers::state::reservation::{IPAddressReservation, hold_of};
use crate::controllers::state::{HoldRecord, Unready};
use crate::settings::Settings;

/// How long the API server keeps one watch open (its `timeoutSeconds`) before the watcher
/// resumes it from the last resource version it saw, without a list. It also bounds a silent
/// watch: kube-runtime gives a watch stream up when nothing arrived for this plus 5 s, so a watch
/// whose connection is blackholed (open, but nothing comes) is restarted within 35 s; at the
/// default (290 s) it went unnoticed for 5 minutes while its kind's changes were missed.
pub const WATCH_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection to the API server may deliver nothing while a response is awaited
/// before the request fails (kube's client has no limit by default: a blackholed request waited
/// forever, and the claim with it). Longer than a quiet watch's [`WATCH_TIMEOUT`] and
/// kube-runtime's 5 s margin, so that a healthy watch never reaches it; a failed request is
/// retried with the reconcile's backoff.
pub const API_READ_TIMEOUT: Duration = Duration::from_secs(WATCH_TIMEOUT.as_secs() + 15);

/// Every watch's configuration: any resource version for the lists (the watch cache), and
/// [`WATCH_TIMEOUT`].
pub(crate) fn watch_config() -> watcher::Config {
    watcher::Config::default()
        .any_semantic()
        .timeout(WATCH_TIMEOUT.as_secs() as u32)
}

/// How many pools a page of a pool kind's list brings (kube-runtime's default is 500). A page is
/// decoded whole, every object of it at once, before its pools are cut down to their views, and
/// the allocator keeps the memory of the largest page: at 1,000 pools, pages of 50 instead of
/// 500 took 2.5 MiB off the resident memory of the image's musl build, before the claims and at
/// peak (docs/performance.md). A list of 1,000 pools costs 20 requests instead of 2, once per
/// start or re-list.
pub const POOL_LIST_PAGE: u32 = 50;

/// Stores the reconciler reads, and a readiness latch for the feeds that have no store.
#[derive(Clone)]
pub struct Stores {
    pub claims: ClaimCache,
    pub pools: PoolLanes,
    pub clusters: Store<Cluster>,
    pub(crate) holds_listed: Arc<Latch>,
    pub(crate) cluster_pauses: Arc<ClusterPauses>,
    /// Notified when a watch that feeds the registry listed again after its first list: the
    /// audit then checks soon that the registry agrees with the API.
    pub relisted: Arc<Notify>,
    /// When a watch of the feed last failed: the audit does not call a difference drift while
    /// a watch may still be catching up.
    pub interruptions: Arc<Interruptions>,
    /// Where the feed hands the reuse-grace controller the released reservations, once the
    /// registry has them.
    pub(crate) released: mpsc::UnboundedSender<Arc<IPAddressReservation>>,
}

impl Stores {
    /// The cached claim of that namespace/name.
    pub fn claim(&self, key: &ObjectKey) -> Option<Arc<CachedClaim>> {
        self.claims.get(key)
    }

    /// The cached claims of a pool.
    pub fn claims_of_pool(&self, pool: &PoolKey) -> Vec<ObjectKey> {
        self.claims.keys_where(|c| c.pool() == pool)
    }

    /// The cached pool `key` names, of any kind; `None` when it is not in the cache.
    pub fn pool(&self, key: &PoolKey) -> Option<Arc<PoolView>> {
        self.pools.pool(key)
    }

    /// Waits until every store and feed has seen its initial list (the claim store excepted:
    /// the claim controller itself fills it once it runs).
    pub async fn wait_until_ready(&self) -> anyhow::Result<()> {
        self.pools.wait_until_listed().await;
        self.clusters.wait_until_ready().await?;
        self.holds_listed.wait().await;
        Ok(())
    }
}

/// When a watch of the feed last failed (refused, reset, timed out, its resource version
/// expired). Until the watcher is open again, after kube-runtime's backoff, the registry misses
/// that kind's changes: a difference from the API server is then the watch's gap, not drift.
#[derive(Default)]
pub struct Interruptions(std::sync::Mutex<Option<Instant>>);

impl Interruptions {
    pub(crate) fn record(&self) {
        *self.0.lock().expect("interruptions lock") = Some(Instant::now());
    }

    /// Whether no watch of the feed failed at or after `since`.
    pub fn none_since(&self, since: Instant) -> bool {
        self.0
            .lock()
            .expect("interruptions lock")
            .is_none_or(|last| last < since)
    }
}

/// Opens once both the reservation and the address lists have been applied.
#[derive(Default)]
pub(crate) struct Latch {
    pub(crate) reservations: AtomicBool,
    pub(crate) addresses: AtomicBool,
    notify: Notify,
}

impl Latch {
    pub(crate) fn open(&self, which: &AtomicBool) {
        which.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    fn is_open(&self) -> bool {
        self.reservations.load(Ordering::SeqCst) && self.addresses.load(Ordering::SeqCst)
    }

    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_open() {
                return;
            }
            notified.await;
        }
    }
}

/// What a watch says once re-lists are folded in: an object applied or deleted, or the whole
/// fresh list (`Init`, every `InitApply`, `InitDone`), so that what was deleted while the watch
/// was down is seen as gone. `K` is what the watch keeps of each object: the few facts its
/// readers need (see [`watch`]), never the whole object.
pub enum Update<K> {
    Applied(K),
    Deleted(K),
    /// A whole list; `first` for the watch's first one since the process started (every later
    /// one is a re-list after a gap: the watch missed events).
    Listed {
        items: Vec<K>,
        first: bool,
    },
}

/// Folds a watcher's events into [`Update`]s: a (re-)list is buffered and handed on whole at
/// `InitDone`, as kube-runtime's reflector store does; a list that fails half-way starts again
/// with a new `Init`.
struct Lists<K> {
    buffer: Option<Vec<K>>,
    lists_done: usize,
}

impl<K> Default for Lists<K> {
    fn default() -> Self {
        Lists {
            buffer: None,
            lists_done: 0,
        }
    }
}

impl<K> Lists<K> {
    fn fold(&mut self, event: Event<K>) -> Option<Update<K>> {
        match event {
            Event::Init => {
                self.buffer = Some(Vec::new());
                None
            }
            Event::InitApply(object) => {
                self.buffer.get_or_insert_with(Vec::new).push(object);
                None
            }
            Event::InitDone => {
                self.lists_done += 1;
                Some(Update::Listed {
                    items: self.buffer.take().unwrap_or_default(),
                    first: self.lists_done == 1,
                })
            }
            Event::Apply(object) => Some(Update::Applied(object)),
            Event::Delete(object) => Some(Update::Deleted(object)),
        }
    }
}

/// The same event, carrying `project(object)` instead of the object.
fn project_event<K, T>(event: Event<K>, project: impl Fn(&K) -> T) -> Event<T> {
    match event {
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(project(&o)),
        Event::InitDone => Event::InitDone,
        Event::Apply(o) => Event::Apply(project(&o)),
        Event::Delete(o) => Event::Delete(project(&o)),
    }
}

/// What one watch saw, re-lists folded in: its kind's [`Update`] of the facts it keeps, and for
/// the reservations, the released ones the reuse-grace controller is to be handed. The feed
/// (`controllers::feed`) turns it into what the registry, the pool caches and the controllers
/// are told.
pub(crate) enum Seen {
    Pools {
        kind: PoolKind,
        update: Update<PoolFacts>,
    },
    Clusters(Update<(ObjectKey, bool)>),
    Reservations {
        update: Update<(String, Option<HoldRecord>)>,
        released: Vec<Arc<IPAddressReservation>>,
    },
    Addresses(Update<AddressFacts>),
}

/// The pause state of every Cluster as last seen, so that claims are woken only when it changes:
/// Clusters change status often (CAPI's own controllers write it), and a claim cares only for
/// whether its Cluster exists and is paused.
#[derive(Default)]
pub struct ClusterPauses(std::sync::Mutex<std::collections::HashMap<ObjectKey, bool>>);

impl ClusterPauses {
    /// Records what was seen; returns the Clusters whose existence or pause state changed.
    pub(crate) fn update(
        &self,
        seen: Vec<(ObjectKey, Option<bool>)>,
        complete: bool,
    ) -> Vec<ObjectKey> {
        let mut known = self.0.lock().expect("cluster pauses lock");
        let mut changed = Vec::new();
        if complete {
            let listed: std::collections::HashSet<&ObjectKey> =
                seen.iter().map(|(k, _)| k).collect();
            let gone: Vec<ObjectKey> = known
                .keys()
                .filter(|k| !listed.contains(k))
                .cloned()
                .collect();
            for key in gone {
                known.remove(&key);
                changed.push(key);
            }
        }
        for (key, paused) in seen {
            let before = match paused {
                Some(paused) => known.insert(key.clone(), paused),
                None => known.remove(&key),
            };
            if before != paused {
                changed.push(key);
            }
        }
        changed
    }
}

/// Whether the Cluster holds its claims: `spec.paused` or the paused annotation.
fn cluster_paused(cluster: &Cluster) -> bool {
    cluster.is_paused() || cluster.annotations().contains_key(PAUSED_ANNOTATION)
}

/// The watches, one per kind, merged; the feed (`controllers::feed`) drives them.
pub struct Feeds(pub(crate) FeedSet);

/// The watches being opened (see [`start`]).
pub(crate) type FeedSet = SelectAll<BoxStream<'static, Result<Seen, watcher::Error>>>;

/// The one watch of kind `K`: kept in `store` (if any) and in the `subscriber`'s store; then
/// each object is cut down to what `project` keeps of it, before any list is buffered (at 10,000
/// `IPAddress`es, whole objects buffered until a list is done were tens of MiB), and `seen` tags
/// the [`Update`]s of those facts, with the subscriber's objects to trigger, for the feed.
fn watch<K, T>(
    api: Api<K>,
    config: watcher::Config,
    store: Option<Writer<K>>,
    mut subscriber: Option<Subscriber<K>>,
    project: fn(&K) -> T,
    seen: fn(Update<T>, Vec<Arc<K>>) -> Seen,
) -> BoxStream<'static, Result<Seen, watcher::Error>>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync,
    K: serde::de::DeserializeOwned + 'static,
    T: Send + 'static,
{
    // Kept objects lose the fields no reader reads; a watch that keeps only the facts `project`
    // takes hands it the whole object (who wrote an `IPAddress` is read from them).
    let keeps_objects = store.is_some() || subscriber.is_some();
    let events = watcher::watcher(api, config)
        .default_backoff()
        .modify(move |object| {
            if keeps_objects {
                drop_unread_fields(object);
            }
        });
    let events = match store {
        Some(writer) => events.reflect(writer).left_stream(),
        None => events.right_stream(),
    };
    let mut lists = Lists::default();
    events
        .try_filter_map(move |event| {
            // Objects are picked only by events that fold into an update (`InitDone`, `Apply`).
            let triggered = subscriber
                .as_mut()
                .map(|s| s.take(&event))
                .unwrap_or_default();
            let update = lists.fold(project_event(event, project));
            futures::future::ready(Ok(update.map(|update| seen(update, triggered))))
        })
        .boxed()
}

/// What is kept of a pool: its key and state for the registry, and its view for the pool cache
/// (which says whether the spec is valid from the same parse).
pub(crate) type PoolFacts = (PoolKey, Result<ParsedSpec, Unready>, Arc<PoolView>);

fn pool_facts<P: IPPool>(pool: &P) -> PoolFacts {
    let state = pool_state(pool);
    let view = PoolView::of(pool, &state);
    (pool.key(), state, Arc::new(view))
}

/// What the Clusters' watch keeps of a Cluster: its key and whether it is paused.
fn cluster_facts(cluster: &Cluster) -> (ObjectKey, bool) {
    let key = ObjectKey::new(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
    );
    (key, cluster_paused(cluster))
}

/// What the registry keeps of a reservation: its name and what it holds, if anything.
fn reservation_facts(reservation: &IPAddressReservation) -> (String, Option<HoldRecord>) {
    (reservation.name_any(), hold_of(reservation))
}

/// What is kept of an `IPAddress`: its key, what it holds, if anything, and who wrote it when
/// that was not inpool.
pub(crate) type AddressFacts = (ObjectKey, Option<HoldRecord>, Option<Creator>);

fn address_facts(address: &IPAddress) -> AddressFacts {
    (
        address_key(address),
        address_hold(address),
        creator(address),
    )
}

/// The controllers that share the watches instead of opening their own.
pub struct Subscriptions {
    /// The pool controllers, one per kind.
    pub pools: PoolInputs,
    /// Reservations labelled released (the reuse-grace controller).
    pub released: Subscription<IPAddressReservation>,
}

/// Opens one watch per kind the registry and the controllers read (the claims excepted: the claim
/// controller drives their watch). Nothing runs until the feed drives the returned streams.
pub fn start(
    client: &Client,
    settings: &Settings,
    claims: ClaimCache,
    served: &ServedKinds,
) -> (Stores, Feeds, Subscriptions) {
    let mut feeds = SelectAll::new();

    let (pools, pool_inputs) = PoolLanes::start(&mut feeds, client, settings, served);

    let (clusters, writer) = reflector::store();
    feeds.push(watch(
        scoped::<Cluster>(client, settings),
        watch_config(),
        Some(writer),
        None,
        cluster_facts,
        |update, _| Seen::Clusters(update),
    ));

    let (subscriber, released, released_triggers) =
        Subscriber::only(IPAddressReservation::is_released);
    feeds.push(watch(
        Api::<IPAddressReservation>::all(client.clone()),
        watch_config(),
        None,
        Some(subscriber),
        reservation_facts,
        |update, released| Seen::Reservations { update, released },
    ));

    feeds.push(watch(
        scoped::<IPAddress>(client, settings),
        watch_config(),
        None,
        None,
        address_facts,
        |update, _| Seen::Addresses(update),
    ));

    let stores = Stores {
        claims,
        pools,
        clusters,
        holds_listed: Arc::new(Latch::default()),
        cluster_pauses: Arc::new(ClusterPauses::default()),
        relisted: Arc::new(Notify::new()),
        interruptions: Arc::new(Interruptions::default()),
        released: released_triggers,
    };
    let subscriptions = Subscriptions {
        pools: pool_inputs,
        released,
    };
    (stores, Feeds(feeds), subscriptions)
}

/// The one watch of a pool kind: it keeps the kind's pool cache and the registry, and triggers
/// the kind's pool controller (see `controllers::feed`).
pub(crate) fn pool_watch<P>(feeds: &mut FeedSet, api: Api<P>)
where
    P: IPPool + Debug + serde::de::DeserializeOwned,
{
    feeds.push(watch(
        api,
        watch_config().page_size(POOL_LIST_PAGE),
        None,
        None,
        pool_facts::<P>,
        |update, _| Seen::Pools {
            kind: P::KIND,
            update,
        },
    ));
}

/// The annotation in which client-side `kubectl apply` keeps the manifest it last applied.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Cached objects keep everything but what no reader of a cached object reads:
/// `metadata.managedFields` (who wrote an `IPAddress` is taken before, from the watch event; a
/// claim carries one entry per writer) and [`LAST_APPLIED_ANNOTATION`] (a copy of the whole
/// manifest on every object applied with kubectl, pools most of all). Dropping the managed
/// fields took the scale harness's 2,000-claim run from 51 to 33 MiB peak memory
/// (docs/performance.md). Nothing writes a cached object's fields back, so nothing dropped here
/// is ever lost on the API server.
pub fn drop_unread_fields<K: ResourceExt>(object: &mut K) {
    object.managed_fields_mut().clear();
    if object.annotations().contains_key(LAST_APPLIED_ANNOTATION) {
        let annotations = object.annotations_mut();
        annotations.remove(LAST_APPLIED_ANNOTATION);
        if annotations.is_empty() {
            // An emptied map keeps its node; a new one has none.
            *annotations = Default::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("ns", name)
    }

    #[test]
    fn only_the_first_list_of_a_watch_is_first_and_a_list_is_handed_on_whole() {
        let mut lists = Lists::default();
        assert!(lists.fold(Event::Init).is_none());
        assert!(lists.fold(Event::InitApply(1)).is_none());
        assert!(lists.fold(Event::InitApply(2)).is_none());
        assert!(matches!(
            lists.fold(Event::InitDone),
            Some(Update::Listed { items, first: true }) if items == vec![1, 2]
        ));
        assert!(matches!(
            lists.fold(Event::Apply(3)),
            Some(Update::Applied(3))
        ));
        // A list that failed half-way starts again with a new Init: only the second one counts.
        assert!(lists.fold(Event::Init).is_none());
        assert!(lists.fold(Event::InitApply(4)).is_none());
        assert!(lists.fold(Event::Init).is_none());
        assert!(lists.fold(Event::InitApply(5)).is_none());
        assert!(matches!(
            lists.fold(Event::InitDone),
            Some(Update::Listed { items, first: false }) if items == vec![5]
        ));
    }

    #[test]
    fn claims_are_woken_only_when_a_cluster_appears_goes_or_changes_its_pause() {
        let pauses = ClusterPauses::default();
        let first = pauses.update(vec![(key("a"), Some(false)), (key("b"), Some(true))], true);
        assert_eq!(first, vec![key("a"), key("b")], "new clusters");
        assert!(
            pauses
                .update(vec![(key("a"), Some(false))], false)
                .is_empty(),
            "a status update: nothing changed for the claims"
        );
        assert_eq!(
            pauses.update(vec![(key("a"), Some(true))], false),
            vec![key("a")]
        );
        assert_eq!(pauses.update(vec![(key("b"), None)], false), vec![key("b")]);
        assert_eq!(
            pauses.update(vec![(key("c"), Some(false))], true),
            vec![key("a"), key("c")],
            "a re-list without a: gone"
        );
    }
}
