//! The controllers' runtime: the loop that runs a reconciler over the objects its sources ask
//! for, in the shapes of kube-runtime's `Controller`: a builder ([`Controller`]: `new`,
//! `reconcile_on`, `debounce_wakes`, `concurrency`, then `run(reconcile, error_policy, ctx)`), a
//! reconcile that returns an [`Action`], and an error policy that picks the retry
//! ([`super::error`]). The claims ([`claim_controller`], reading the claim cache), each pool kind
//! (reading its pool cache) and the released reservations (reading the reflector store their
//! watch keeps) each run one.
//! Finalizers and Events are the runtime's too ([`super::finalizers`], [`super::events`]), used by
//! every reconciler.
//!
//! Why not kube-runtime's `Controller` (kube-runtime 5.0.0), for three reasons, all measured:
//!
//! - **Memory per claim.** `Controller` reads its objects from a reflector `Store`
//!   (`reflector/store.rs`), which keys each object by an `ObjectRef` (a copy of its name and
//!   namespace, plus its UID and resourceVersion) and holds the whole object with its
//!   `ObjectMeta`. For claims that cost 980 bytes and 11 allocations per claim at 10,000 claims;
//!   the claim cache ([`CachedClaim`] keyed by an [`ObjectKey`] of interned names) costs 503
//!   bytes and 2 (`cargo bench --bench memory`).
//! - **Order.** `Controller`'s scheduler (`scheduler.rs`) serves due requests in one order, with
//!   no priority. After a restart every claim is reconciled once, and a claim that still needs
//!   its address waited behind all of them, once for each of its steps: at 30,000 claims a new
//!   claim created during a restart was Ready after 29.6 s. Here a realised claim the watch
//!   brings only needs confirming and waits behind every other request
//!   ([`Urgency`](super::queue::Urgency)).
//! - **Memory per pool.** The scheduler keys its hash tables and its delay queue's slab by
//!   `ObjectRef`, grows them when a start schedules every pool at once, and never shrinks them:
//!   about 700 bytes per pool for the life of the process (heaptrack, 1,000 pools). The
//!   [`WorkQueue`] keys by the controller's own key (a [`PoolKey`](crate::api::PoolKey) of
//!   interned names) and gives its tables back once they are empty.
//!
//! Its own [`Action`] mirrors kube-runtime's: kube's keeps its delay private (no accessor in
//! `controller/mod.rs`), so a loop outside kube-runtime cannot read it.
//!
//! What the loop guarantees, as kube's does:
//!
//! - an object is reconciled by one reconcile at a time ([`WorkQueue`]);
//! - requests for one object merge into one (the earliest wins); at most `--concurrency` objects
//!   are reconciled at once; wakes may wait a while to merge first
//!   ([`Controller::debounce_wakes`], as kube-runtime's `Config::debounce`);
//! - an object deleted between its request and its reconcile is dropped (kube's
//!   `ObjectNotFound`);
//! - a reconcile's [`Action`] asks for the object again after a delay, or not until something
//!   changes.
//!
//! And for claims: none is reconciled before the first list of claims is complete (allocating
//! before every claim is known could hand a waiting claim's place to a newer one), nor before the
//! other caches have listed (allocating before every held address is known could pick one that is
//! taken). The claim watch opens only once the other caches have listed: listing them all at
//! once saves about 2 s of 14 at a start with 30,000 claims, but raises the start's peak memory
//! by 8 MiB. The other controllers start once those caches have listed too.
use std::future::Future;
use std::hash::Hash;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc;
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use super::ControllerContext;
use super::queue::{Started, Urgency, WorkQueue};
use crate::telemetry::ReconcileResult;

/// How often the reconciles in progress are measured while any runs (client-go: 500 ms).
const IN_PROGRESS_EVERY: Duration = Duration::from_secs(1);

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

/// What a controller's sources ask of its queue at one update: the objects to reconcile, and
/// whether reconciles may start yet (claims wait for their first list: see the module).
pub(crate) struct Requests<Key> {
    pub keys: Vec<(Key, Urgency)>,
    pub listed: bool,
}

impl<Key> Requests<Key> {
    /// One object to reconcile now, of a controller that needs no first list of its own.
    pub fn now(key: Key) -> Requests<Key> {
        Requests {
            keys: vec![(key, Urgency::Urgent)],
            listed: true,
        }
    }
}

/// A controller on the [`WorkQueue`], built as kube-runtime's `Controller` is: the requests its
/// sources make and where it reads each object ([`Controller::new`]), what else asks for
/// reconciles ([`Controller::reconcile_on`]), how many run at once
/// ([`Controller::concurrency`]), then [`Controller::run`] with the reconcile and the error
/// policy. The claims, the pools of each kind and the released reservations each run one.
pub(crate) struct Controller<Key, Req, Look> {
    name: String,
    requests: Req,
    lookup: Look,
    wakes: Option<mpsc::UnboundedReceiver<Key>>,
    /// How long a wake waits for others of the same object (see [`Controller::debounce_wakes`]).
    wake_debounce: Duration,
    concurrency: usize,
    /// Whether reconciles may start before the sources have said so ([`Requests::listed`]).
    listed: bool,
}

impl<Key, Obj, Req, Look> Controller<Key, Req, Look>
where
    Key: Clone + Eq + Hash + Ord,
    Req: Stream<Item = Requests<Key>>,
    Look: Fn(&Key) -> Option<Arc<Obj>>,
{
    /// The controller `name` (the lowercase kind it reconciles, as controller-runtime names a
    /// controller, in the metric families), fed by `requests`, reading each object with
    /// `lookup` when its reconcile starts (`None`: deleted since it was asked for).
    pub fn new(name: &str, requests: Req, lookup: Look) -> Controller<Key, Req, Look> {
        Controller {
            name: name.to_string(),
            requests,
            lookup,
            wakes: None,
            wake_debounce: Duration::ZERO,
            concurrency: usize::MAX,
            listed: true,
        }
    }

    /// No reconcile starts until the requests say the first list is complete
    /// ([`Requests::listed`]), wakes included.
    pub(crate) fn waits_for_its_first_list(mut self) -> Self {
        self.listed = false;
        self
    }

    /// Objects others ask to be reconciled (capacity appeared, a Cluster changed, ...).
    pub fn reconcile_on(mut self, wakes: mpsc::UnboundedReceiver<Key>) -> Self {
        self.wakes = Some(wakes);
        self
    }

    /// A wake asks for its reconcile `delay` from now, not at once, and wakes of the same object
    /// meanwhile merge into it (kube-runtime's `Config::debounce`, for wakes only: a change of
    /// the object itself is reconciled at once). For a pool, each step of one claim (allocation,
    /// reservation, `IPAddress`, the end of the allocation) wakes its pool: over a pool with a
    /// steady stream of claims they merge while its reconcile runs, but over thousands of pools
    /// with a claim now and then each step would cost a reconcile of its own.
    pub fn debounce_wakes(mut self, delay: Duration) -> Self {
        self.wake_debounce = delay;
        self
    }

    /// At most `limit` reconciles at once; 0 means no limit (as kube-runtime's).
    pub fn concurrency(mut self, limit: u16) -> Self {
        self.concurrency = match limit {
            0 => usize::MAX,
            n => usize::from(n),
        };
        self
    }

    /// Runs until the requests end. A reconcile's error is turned into the next [`Action`] by
    /// `error_policy`, as kube-runtime's `Controller::run` does.
    pub async fn run<C, R, Fut, E>(
        self,
        reconcile: R,
        error_policy: impl Fn(Arc<Obj>, &E, Arc<C>) -> Action,
        ctx: Arc<C>,
    ) where
        C: ControllerContext,
        R: Fn(Arc<Obj>, Arc<C>) -> Fut,
        Fut: Future<Output = Result<Action, E>>,
    {
        let Controller {
            name,
            requests,
            lookup,
            wakes,
            wake_debounce,
            concurrency,
            mut listed,
        } = self;
        let limit = if concurrency == usize::MAX {
            0
        } else {
            u16::try_from(concurrency).unwrap_or(u16::MAX)
        };
        let reconciles = ctx.metrics().controller(&name, limit);
        let measured = ctx.metrics().queue(&name);
        let mut in_progress = tokio::time::interval(IN_PROGRESS_EVERY);
        let mut requests = pin!(requests);
        // Without `reconcile_on`, a channel nobody sends on.
        let mut wakes = pin!(wakes.unwrap_or_else(|| mpsc::unbounded().1));
        let mut queue = WorkQueue::default();
        let mut reconciling = FuturesUnordered::new();
        loop {
            let next_due = queue.next_due();
            tokio::select! {
                asked = requests.next() => match asked {
                    Some(Requests { keys, listed: now_listed }) => {
                        for (key, urgency) in keys {
                            queue.now_as(key, urgency);
                        }
                        listed = now_listed;
                    }
                    None => return,
                },
                Some(key) = wakes.next() => {
                    if wake_debounce.is_zero() {
                        queue.now(key);
                    } else {
                        queue.at(key, Instant::now() + wake_debounce);
                    }
                }
                () = sleep_until(next_due), if next_due.is_some() => queue.promote(Instant::now()),
                Some((key, action)) = reconciling.next(), if !reconciling.is_empty() => {
                    let action: Action = action;
                    measured.done(queue.finish(key, action.requeue_after, Instant::now()));
                }
                _ = in_progress.tick(), if queue.running() > 0 => {}
            }
            let now = Instant::now();
            measured.added(queue.stamp(now));
            let (total, longest) = queue.in_progress(now);
            measured.in_progress(total, longest);
            while listed && queue.running() < concurrency {
                let Some(Started { key, waited }) = queue.start(now) else {
                    break;
                };
                measured.taken(waited);
                match lookup(&key) {
                    Some(object) => {
                        let done = reconcile(object.clone(), ctx.clone());
                        let (ctx, error_policy) = (ctx.clone(), &error_policy);
                        let (reconciles, measured) = (&reconciles, &measured);
                        reconciling.push(async move {
                            let began = reconciles.started();
                            let action = match done.await {
                                Ok(action) => {
                                    let result = match action.requeue_after {
                                        Some(_) => ReconcileResult::RequeueAfter,
                                        None => ReconcileResult::Success,
                                    };
                                    reconciles.finished(began, result);
                                    action
                                }
                                Err(e) => {
                                    reconciles.finished(began, ReconcileResult::Error);
                                    measured.retried();
                                    error_policy(object, &e, ctx)
                                }
                            };
                            (key, action)
                        });
                    }
                    // Deleted since it was asked for: nothing left to do.
                    None => measured.done(queue.finish(key, None, now)),
                }
            }
            let (urgent, routine) = queue.depth();
            measured.depth(urgent, routine);
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
