//! The claim controller: its cache of claims, its work queue, and the loop that runs
//! [`claim::reconcile`](super::claim::reconcile) on them.
//!
//! kube-runtime's `Controller` needs a kube `Resource` in a reflector store, which keys every
//! object by a copy of its name, namespace, UID and resourceVersion and holds an `ObjectMeta` in
//! each, mostly empty: at 10,000 claims and more, that was over half of inpool's memory per
//! claim (issue 17). The claim controller keeps a [`CachedClaim`] per claim instead, keyed by its
//! [`ObjectKey`] of interned names, and does what kube's controller did for it, no more:
//!
//! - the cache follows the claim watch as kube's reflector store does: a list (the first one, or
//!   a re-list after a gap in the watch) replaces the whole cache once it is complete, and every
//!   claim of it is reconciled; an added or changed claim is reconciled; a deleted one is
//!   forgotten;
//! - a claim is reconciled by one reconcile at a time: a request for a claim being reconciled
//!   waits for that reconcile to end, then runs with the claim as the cache has it by then;
//! - requests for one claim merge into one (the earliest wins); at most `--concurrency` claims
//!   are reconciled at once; none is reconciled before the first list is complete (allocating
//!   before every claim is known could hand a waiting claim's place to a newer one), nor before
//!   the other caches have listed (allocating before every held address is known could pick one
//!   that is taken). The claim watch opens only once the other caches have listed: listing all
//!   at once was measured at 30,000 claims (issue 17) and saved about 2 s of 14 at a start, but
//!   raised the start's peak memory by 8 MiB;
//! - a realised claim that the watch brings (a list, or a change to it) waits behind every
//!   other request: after a start or a re-list, every claim is reconciled once, and a claim that
//!   still needs its address must not wait behind tens of thousands that only confirm theirs,
//!   once for each of its steps (issue 17: a new claim during a restart at 30,000 claims);
//! - a reconcile's [`Action`] asks for the claim again after a delay, or not until something
//!   changes; a failed reconcile is retried after its backoff ([`super::error`]).
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::channel::mpsc;
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio::time::Instant;

use super::Context;
use super::cached_claim::{CachedClaim, WatchedClaim};
use super::registry::ObjectKey;

/// What a reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Reconcile the claim again after `delay`, unless something changes first.
    pub const fn requeue(delay: Duration) -> Action {
        Action {
            requeue_after: Some(delay),
        }
    }

    /// Reconcile the claim again only when something changes (it, its pool, its Cluster, ...).
    pub const fn await_change() -> Action {
        Action {
            requeue_after: None,
        }
    }
}

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
                let claim = watched.claim;
                self.listing
                    .get_or_insert_with(HashMap::new)
                    .insert(claim.key().clone(), Arc::new(claim));
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
            watcher::Event::Apply(watched) => {
                let claim = watched.claim;
                let request = (claim.key().clone(), urgency(&claim));
                self.cache
                    .write()
                    .insert(request.0.clone(), Arc::new(claim));
                vec![request]
            }
            watcher::Event::Delete(watched) => {
                self.cache.write().remove(watched.claim.key());
                Vec::new()
            }
        }
    }

    /// Whether the cache holds a complete list.
    pub fn is_listed(&self) -> bool {
        self.listed
    }
}

/// How soon the watch's news of a claim is to be reconciled: a realised claim only needs
/// confirming, and waits behind everything else (see the module).
fn urgency(claim: &CachedClaim) -> Urgency {
    if claim.is_realised() {
        Urgency::Routine
    } else {
        Urgency::Urgent
    }
}

/// How soon a claim is to be reconciled, of the requests due now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// Before any routine request.
    Urgent,
    /// A realised claim the watch brings: it only needs confirming.
    Routine,
}

/// The claims waiting for a reconcile, and the ones being reconciled.
#[derive(Default)]
pub struct WorkQueue {
    /// Due now and urgent, in the order they were asked for.
    urgent: VecDeque<ObjectKey>,
    /// Due now and routine, in the order they were asked for.
    routine: VecDeque<ObjectKey>,
    /// The claims due now, with the queue each one is to be taken from (a routine request made
    /// urgent stays in the routine queue too, and is passed over there).
    is_due: HashMap<ObjectKey, Urgency>,
    /// Due later, by time.
    later: BTreeSet<(Instant, ObjectKey)>,
    /// When each member of `later` is due.
    due_at: HashMap<ObjectKey, Instant>,
    /// Being reconciled.
    running: HashSet<ObjectKey>,
    /// Asked for while being reconciled: due again (urgent) once that reconcile ends.
    again: HashSet<ObjectKey>,
}

impl WorkQueue {
    /// Asks for a reconcile of `key` as soon as possible.
    pub fn now(&mut self, key: ObjectKey) {
        self.now_as(key, Urgency::Urgent);
    }

    /// Asks for a reconcile of `key` as soon as possible, after every urgent one if `urgency` is
    /// routine.
    pub fn now_as(&mut self, key: ObjectKey, urgency: Urgency) {
        if self.running.contains(&key) {
            self.again.insert(key);
            return;
        }
        if let Some(at) = self.due_at.remove(&key) {
            self.later.remove(&(at, key.clone()));
        }
        match self.is_due.get(&key) {
            Some(Urgency::Urgent) => {}
            Some(Urgency::Routine) if urgency == Urgency::Routine => {}
            _ => {
                self.is_due.insert(key.clone(), urgency);
                match urgency {
                    Urgency::Urgent => self.urgent.push_back(key),
                    Urgency::Routine => self.routine.push_back(key),
                }
            }
        }
    }

    /// Asks for a reconcile of `key` at `at`, unless one is asked for earlier.
    pub fn at(&mut self, key: ObjectKey, at: Instant) {
        if self.is_due.contains_key(&key) {
            return;
        }
        if let Some(&earlier) = self.due_at.get(&key) {
            if earlier <= at {
                return;
            }
            self.later.remove(&(earlier, key.clone()));
        }
        self.due_at.insert(key.clone(), at);
        self.later.insert((at, key));
    }

    /// When the next claim due later is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.later.first().map(|(at, _)| *at)
    }

    /// Makes the claims due by `now` due now.
    pub fn promote(&mut self, now: Instant) {
        while self.later.first().is_some_and(|(at, _)| *at <= now) {
            let (_, key) = self.later.pop_first().expect("a first entry");
            self.due_at.remove(&key);
            self.now(key);
        }
    }

    /// The next claim to reconcile, urgent ones first, marked as running; claims being
    /// reconciled wait.
    pub fn start(&mut self) -> Option<ObjectKey> {
        loop {
            let (key, taken_from) = match self.urgent.pop_front() {
                Some(key) => (key, Urgency::Urgent),
                None => (self.routine.pop_front()?, Urgency::Routine),
            };
            // Passed over: made urgent since, and taken from the urgent queue (or to be).
            if self.is_due.get(&key) != Some(&taken_from) {
                continue;
            }
            self.is_due.remove(&key);
            if self.running.contains(&key) {
                self.again.insert(key);
                continue;
            }
            self.running.insert(key.clone());
            return Some(key);
        }
    }

    /// Ends the reconcile of `key`; `requeue_after` is what it asked for.
    pub fn finish(&mut self, key: ObjectKey, requeue_after: Option<Duration>, now: Instant) {
        self.running.remove(&key);
        if self.again.remove(&key) {
            self.now(key);
        } else if let Some(delay) = requeue_after {
            // A delay too long for the clock means not in this process's life: a year will do.
            let at = now
                .checked_add(delay)
                .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600));
            self.at(key, at);
        }
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }
}

/// Runs the claim controller until the watch ends: `claims` is the claim watch, applied to the
/// cache through `writer`; `wakes` are claims others ask to be reconciled. Started once the
/// other caches have listed (see the module).
pub async fn run<R, Fut>(
    ctx: Arc<Context>,
    claims: impl Stream<Item = Result<watcher::Event<WatchedClaim>, watcher::Error>>,
    mut writer: CacheWriter,
    wakes: mpsc::UnboundedReceiver<ObjectKey>,
    reconcile: R,
) where
    R: Fn(Arc<CachedClaim>, Arc<Context>) -> Fut,
    Fut: Future<Output = Action>,
{
    let concurrency = match ctx.settings.concurrency {
        0 => usize::MAX,
        n => usize::from(n),
    };
    let started = Instant::now();
    let mut claims = pin!(claims);
    let mut wakes = pin!(wakes);
    let mut queue = WorkQueue::default();
    let mut reconciling = FuturesUnordered::new();
    loop {
        let next_due = queue.next_due();
        tokio::select! {
            event = claims.next() => match event {
                Some(Ok(event)) => {
                    let list_ends = matches!(event, watcher::Event::InitDone);
                    for (key, urgency) in writer.apply(event) {
                        queue.now_as(key, urgency);
                    }
                    let watched = ctx.stores.claims.len();
                    ctx.metrics.claims_watched(watched);
                    if list_ends {
                        tracing::info!(
                            claims = watched,
                            seconds = started.elapsed().as_secs_f64(),
                            "claims listed"
                        );
                    }
                }
                Some(Err(e)) => super::error::watch_failed(&ctx, "claim", &e),
                None => return,
            },
            Some(key) = wakes.next() => queue.now(key),
            () = sleep_until(next_due), if next_due.is_some() => queue.promote(Instant::now()),
            Some((key, action)) = reconciling.next(), if !reconciling.is_empty() => {
                let action: Action = action;
                queue.finish(key, action.requeue_after, Instant::now());
            }
        }
        // The first list must be complete: see the module.
        while writer.is_listed() && queue.running() < concurrency {
            let Some(key) = queue.start() else {
                break;
            };
            match ctx.stores.claims.get(&key) {
                Some(claim) => {
                    let done = reconcile(claim, ctx.clone());
                    reconciling.push(async move { (key, done.await) });
                }
                // Deleted since it was asked for: nothing left to do.
                None => queue.finish(key, None, Instant::now()),
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("ns", name)
    }

    fn watched(name: &str, version: &str) -> WatchedClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
            "spec": {"poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "p"}}
        }))
        .expect("a valid claim")
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

    fn started(queue: &mut WorkQueue) -> Vec<String> {
        std::iter::from_fn(|| queue.start())
            .map(|k| k.name.to_string())
            .collect()
    }

    #[test]
    fn requests_for_one_claim_merge_and_keep_their_order() {
        let mut queue = WorkQueue::default();
        for name in ["a", "b", "a", "c", "b"] {
            queue.now(key(name));
        }
        assert_eq!(started(&mut queue), ["a", "b", "c"]);
        assert_eq!(queue.running(), 3);
    }

    #[test]
    fn a_claim_asked_for_while_reconciled_runs_once_more_after() {
        let mut queue = WorkQueue::default();
        let t0 = Instant::now();
        queue.now(key("a"));
        assert_eq!(started(&mut queue), ["a"]);
        queue.now(key("a"));
        queue.now(key("a"));
        assert!(started(&mut queue).is_empty(), "never twice at once");
        queue.finish(key("a"), Some(Duration::from_secs(60)), t0);
        assert_eq!(started(&mut queue), ["a"], "once, at once, not in a minute");
        queue.finish(key("a"), None, t0);
        assert!(started(&mut queue).is_empty());
        assert_eq!(queue.next_due(), None);
    }

    #[test]
    fn the_earliest_request_wins_and_a_request_now_replaces_a_later_one() {
        let mut queue = WorkQueue::default();
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        queue.at(key("a"), t0 + 10 * second);
        queue.at(key("a"), t0 + 2 * second);
        queue.at(key("a"), t0 + 5 * second);
        assert_eq!(queue.next_due(), Some(t0 + 2 * second));
        queue.promote(t0 + second);
        assert!(started(&mut queue).is_empty());
        queue.promote(t0 + 2 * second);
        assert_eq!(started(&mut queue), ["a"]);
        assert_eq!(queue.next_due(), None);

        queue.finish(key("a"), Some(10 * second), t0);
        queue.now(key("a"));
        assert_eq!(queue.next_due(), None, "the later request is replaced");
        assert_eq!(started(&mut queue), ["a"]);
    }

    #[test]
    fn a_requeue_too_long_for_the_clock_is_kept_for_later() {
        let mut queue = WorkQueue::default();
        let t0 = Instant::now();
        queue.now(key("a"));
        started(&mut queue);
        queue.finish(key("a"), Some(Duration::MAX), t0);
        assert!(queue.next_due().is_some_and(|at| at > t0));
    }

    #[test]
    fn routine_requests_wait_behind_urgent_ones_unless_made_urgent() {
        let mut queue = WorkQueue::default();
        for name in ["r1", "r2", "r3"] {
            queue.now_as(key(name), Urgency::Routine);
        }
        queue.now_as(key("u1"), Urgency::Urgent);
        queue.now_as(key("r2"), Urgency::Urgent);
        queue.now_as(key("r2"), Urgency::Routine);
        queue.now_as(key("u1"), Urgency::Routine);
        assert_eq!(started(&mut queue), ["u1", "r2", "r1", "r3"]);
        assert!(queue.is_due.is_empty() && queue.urgent.is_empty() && queue.routine.is_empty());
    }

    #[test]
    fn a_requeue_runs_when_due() {
        let mut queue = WorkQueue::default();
        let t0 = Instant::now();
        queue.now(key("a"));
        started(&mut queue);
        queue.finish(key("a"), Some(Duration::from_millis(200)), t0);
        assert!(started(&mut queue).is_empty());
        queue.promote(t0 + Duration::from_millis(200));
        assert_eq!(started(&mut queue), ["a"]);
    }
}
