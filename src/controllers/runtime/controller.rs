//! The claim runtime: the loop that runs
//! [`claims::reconcile::reconcile`](crate::controllers::claims::reconcile::reconcile) on the
//! claims of the claim cache, in the shapes of kube-runtime's `Controller`: a builder
//! ([`ClaimController`]: `new`, `reconcile_on`, `concurrency`, then `run(reconcile, error_policy,
//! ctx)`), a reconcile that returns an [`Action`], and an error policy that picks the retry
//! ([`super::error`]). Finalizers and Events are the runtime's too ([`super::finalizers`],
//! [`super::events`]), used by every reconciler.
//!
//! Why claims do not run on kube-runtime's `Controller` (kube-runtime 5.0.0), as pools and
//! released reservations do, for two reasons, both measured:
//!
//! - **Memory.** `Controller` reads its objects from a reflector `Store` (`reflector/store.rs`),
//!   which keys each object by an `ObjectRef` (a copy of its name and namespace, plus its UID and
//!   resourceVersion) and holds the whole object with its `ObjectMeta`. For claims that cost
//!   980 bytes and 11 allocations per claim at 10,000 claims; the claim cache
//!   ([`CachedClaim`] keyed by an [`ObjectKey`] of interned names) costs 503 bytes and 2
//!   (`cargo bench --bench memory`).
//! - **Order.** `Controller`'s scheduler (`scheduler.rs`) serves due requests in one order, with
//!   no priority. After a restart every claim is reconciled once, and a claim that still needs
//!   its address waited behind all of them, once for each of its steps: at 30,000 claims a new
//!   claim created during a restart was Ready after 29.6 s. Here a realised claim the watch
//!   brings only needs confirming and waits behind every other request
//!   ([`Urgency`](super::queue::Urgency)).
//!
//! Its own [`Action`] mirrors kube-runtime's: kube's keeps its delay private (no accessor in
//! `controller/mod.rs`), so a loop outside kube-runtime cannot read it.
//!
//! What the loop guarantees, as kube's does:
//!
//! - a claim is reconciled by one reconcile at a time ([`WorkQueue`]);
//! - requests for one claim merge into one (the earliest wins); at most `--concurrency` claims
//!   are reconciled at once;
//! - none is reconciled before the first list of claims is complete (allocating before every
//!   claim is known could hand a waiting claim's place to a newer one), nor before the other
//!   caches have listed (allocating before every held address is known could pick one that is
//!   taken). The claim watch opens only once the other caches have listed: listing them all at
//!   once saves about 2 s of 14 at a start with 30,000 claims, but raises the start's peak memory
//!   by 8 MiB;
//! - a reconcile's [`Action`] asks for the claim again after a delay, or not until something
//!   changes.
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc;
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio::time::Instant;

use super::queue::{Started, WorkQueue};
use crate::api::ObjectKey;
use crate::controllers::claims::cache::CacheWriter;
use crate::controllers::claims::cached_claim::{CachedClaim, WatchedClaim};
use crate::controllers::runtime::Context;
use crate::telemetry::ReconcileResult;

/// The claim runtime's name in the controller-runtime metric families: the lowercase kind it
/// reconciles, as controller-runtime names a controller.
pub const NAME: &str = "ipaddressclaim";

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

/// The claim runtime, built as kube-runtime's `Controller` is: the watch it follows and the
/// cache it fills ([`ClaimController::new`]), what else asks for reconciles
/// ([`ClaimController::reconcile_on`]), how many run at once
/// ([`ClaimController::concurrency`]), then [`ClaimController::run`] with the reconcile and the
/// error policy.
pub(crate) struct ClaimController<S> {
    claims: S,
    writer: CacheWriter,
    wakes: Option<mpsc::UnboundedReceiver<ObjectKey>>,
    concurrency: usize,
}

impl<S> ClaimController<S>
where
    S: Stream<Item = Result<watcher::Event<WatchedClaim>, watcher::Error>>,
{
    /// A runtime over the claim watch `claims`, applied to the claim cache through `writer`.
    pub fn new(claims: S, writer: CacheWriter) -> ClaimController<S> {
        ClaimController {
            claims,
            writer,
            wakes: None,
            concurrency: usize::MAX,
        }
    }

    /// Claims others ask to be reconciled (capacity appeared, a Cluster changed, ...).
    pub fn reconcile_on(mut self, wakes: mpsc::UnboundedReceiver<ObjectKey>) -> Self {
        self.wakes = Some(wakes);
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

    /// Runs until the watch ends. A reconcile's error is turned into the next [`Action`] by
    /// `error_policy`, as kube-runtime's `Controller::run` does. Started once the other caches
    /// have listed (see the module).
    pub async fn run<R, Fut, E>(
        self,
        reconcile: R,
        error_policy: impl Fn(Arc<CachedClaim>, &E, Arc<Context>) -> Action,
        ctx: Arc<Context>,
    ) where
        R: Fn(Arc<CachedClaim>, Arc<Context>) -> Fut,
        Fut: Future<Output = Result<Action, E>>,
    {
        let ClaimController {
            claims,
            mut writer,
            wakes,
            concurrency,
        } = self;
        let started = Instant::now();
        let limit = if concurrency == usize::MAX {
            0
        } else {
            u16::try_from(concurrency).unwrap_or(u16::MAX)
        };
        let reconciles = ctx.metrics.controller(NAME, limit);
        let measured = ctx.metrics.queue(NAME);
        let mut in_progress = tokio::time::interval(IN_PROGRESS_EVERY);
        let mut claims = pin!(claims);
        // Without `reconcile_on`, a channel nobody sends on.
        let mut wakes = pin!(wakes.unwrap_or_else(|| mpsc::unbounded().1));
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
                    measured.done(queue.finish(key, action.requeue_after, Instant::now()));
                }
                _ = in_progress.tick(), if queue.running() > 0 => {}
            }
            let now = Instant::now();
            measured.added(queue.stamp(now));
            let (total, longest) = queue.in_progress(now);
            measured.in_progress(total, longest);
            // The first list must be complete: see the module.
            while writer.is_listed() && queue.running() < concurrency {
                let Some(Started { key, waited }) = queue.start(now) else {
                    break;
                };
                measured.taken(waited);
                match ctx.stores.claims.get(&key) {
                    Some(claim) => {
                        let done = reconcile(claim.clone(), ctx.clone());
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
                                    error_policy(claim, &e, ctx)
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
