//! The audit: the registry must agree with the API server, whatever events inpool missed.
//!
//! Every `--audit-interval` (10 minutes by default), and shortly after any watch that feeds the
//! registry listed again, the audit lists pools, reservations and `IPAddress`es and compares
//! them with the registry ([`Registry::diff`](crate::controllers::state::Registry::diff)). The
//! watches are a little behind a fresh list, so a difference counts only when a second list, taken
//! [`SETTLE`] later, shows the very same difference against the very same record of the registry
//! (not another object made since under the same name). It is then corrected (if the registry
//! still keeps that record). It is drift, logged and counted in `inpool_state_drift_total{kind}`,
//! unless a watch of the feed failed within [`WATCH_RECOVERY`] before the first list or since:
//! such a watch misses its kind's changes until it is open again, and the difference is its gap,
//! which the correction closes as the watch's own re-list would (logged, not counted). A watch
//! that stalls without failing is given up by kube-runtime within 35 s (see
//! [`WATCH_TIMEOUT`](crate::controllers::sources::watch::WATCH_TIMEOUT)); an audit in that time
//! counts what it missed as drift. The allocators are checked against the holds
//! they are made from ([`Registry::recount`](crate::controllers::state::Registry::recount)). In a
//! healthy run the audit finds nothing; the test suites assert that.
//!
//! It also collects **stray reservations**, on evidence rather than on age: a reservation no live
//! `IPAddress` holds, whose claim is gone (or is another claim of the same name: the UID differs),
//! or whose claim's `IPAddress` holds a different address, can never become an `IPAddress`; it only
//! keeps an address from every other claim. A process killed between creating a reservation and its
//! `IPAddress`, or two processes racing for one claim, leave such reservations. Each one is
//! confirmed against the API server (never the cache alone) and deleted with its UID and
//! resourceVersion as preconditions, so a reservation that changed meanwhile is left alone. The
//! evidence is looked at as soon as it can appear ([`evidence::StrayChecks`]): when the registry
//! learns an `IPAddress` or reservation of a claim that also has a reservation of another address
//! ([`evidence::look_for_strays`]), and when a claim of a pool is told the pool is exhausted (its
//! free count may be short by a stray's address); and again at every audit, from fresh lists.
//!
//! The one case that needs patience is a reservation whose claim exists and has no `IPAddress`
//! yet: a live writer may be between its two creates. Such a reservation is never deleted; its
//! claim, if this process serves it, is woken to recover it: to create the `IPAddress` of that
//! very address, which is safe beside a live writer doing the same (one create wins, the other
//! adopts it). At once if the claim waits in its pool's queue here (no writer of this process is
//! on it), otherwise once the reservation is older than `--stray-reservation-age`.
//!
//! It never deletes a reservation while a live `IPAddress` holds the same address in the same
//! pool, whatever became of its claim: the reservation is what keeps the address unique between
//! processes.
//!
//! It releases **orphaned addresses that someone deletes**: an `IPAddress` of one of inpool's
//! pools that is being deleted, still carries inpool's finalizer, and whose claim is gone
//! (confirmed live), so that no claim's release will ever let go of it. inpool never deletes an
//! orphan by itself: `clusterctl move` leaves one on the source for each moved claim on a
//! `GlobalInClusterIPPool` (the global pool stays there, so the garbage collector only drops the
//! claim from the address's owners), and the moved machine still uses that address; freeing it
//! on the source could hand it out twice. The operator deletes it once the address is really
//! free; inpool then releases it, and its reservation becomes a stray.
//!
//! And it lets go of memory kept for objects that are gone: pools no longer referred to, claims
//! that no longer wait, the records of own writes and status-write times.
//!
//! One concern per file: [`drift`] (the fresh lists and their differences from the registry),
//! [`pages`] (listing page by page), [`strays`] (settling reservations no `IPAddress` holds, at
//! each audit and on [`evidence`]), [`orphans`] (orphaned addresses someone deletes), [`memory`]
//! (letting go of what is gone). This file runs an audit in order.
mod drift;
pub(crate) mod evidence;
mod memory;
mod orphans;
mod pages;
mod strays;

use std::sync::Arc;
use std::time::Duration;

use crate::controllers::context::Context;
use crate::controllers::runtime::error::Error;
use drift::{Difference, Snapshot};
use memory::forget_what_is_gone;
use orphans::release_deleted_orphans;
use strays::{collect_strays, collect_strays_on_evidence};

/// How long the watches get to catch up with a list before a difference counts as drift.
pub const SETTLE: Duration = Duration::from_secs(5);

/// How long after a watch of the feed failed a difference may still be that watch's gap:
/// kube-runtime asks a failed watch again after its default backoff, at most 30 s doubled by its
/// jitter, and the events it missed arrive as soon as it is open; plus [`SETTLE`].
pub const WATCH_RECOVERY: Duration = Duration::from_secs(65);

/// After a re-list, the audit waits this long (other watches may be re-listing too).
const AFTER_RELIST: Duration = Duration::from_secs(2);

/// Runs audits, and the stray checks that evidence asks for, until the future is dropped.
pub async fn run(ctx: Arc<Context>) {
    futures::join!(run_audits(&ctx), collect_strays_on_evidence(&ctx));
}

async fn run_audits(ctx: &Context) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(ctx.settings.audit_interval) => {}
            () = ctx.stores.relisted.notified() => tokio::time::sleep(AFTER_RELIST).await,
        }
        match audit(ctx).await {
            Ok(found) => {
                ctx.metrics.audit_completed();
                if found.is_clean() {
                    tracing::debug!("audit: the registry agrees with the API server");
                } else {
                    tracing::warn!(
                        drift = found.drift,
                        strays = found.strays,
                        orphans = found.orphans,
                        "audit: corrected drift, collected stray reservations, released orphaned addresses"
                    );
                }
            }
            Err(e) => {
                ctx.metrics.reconcile_error("audit", e.metric_label());
                tracing::warn!(error = %e, "audit failed; trying again at the next interval");
            }
        }
    }
}

/// What one audit found and fixed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub drift: usize,
    pub strays: usize,
    pub orphans: usize,
}

impl Found {
    pub fn is_clean(&self) -> bool {
        *self == Found::default()
    }
}

/// One audit: compare, correct, collect strays, let go of memory.
pub async fn audit(ctx: &Context) -> Result<Found, Error> {
    let mut found = Found::default();
    let started = std::time::Instant::now();
    let first = Snapshot::take(ctx).await?;
    let snapshot = if first.differences.is_empty() {
        first
    } else {
        tokio::time::sleep(SETTLE).await;
        let second = Snapshot::take(ctx).await?;
        // The same difference, with the same record kept: a record the watches replaced between
        // the two lists (an object deleted and made again under the same name) is not drift.
        let (confirmed, passing): (Vec<Difference>, Vec<Difference>) = first
            .differences
            .into_iter()
            .partition(|d| second.differences.contains(d));
        for Difference { change, .. } in passing {
            tracing::debug!(
                kind = change.kind(),
                ?change,
                "audit: a difference the second list did not confirm (the watches were behind)"
            );
        }
        let watches_whole = started
            .checked_sub(WATCH_RECOVERY)
            .is_none_or(|since| ctx.stores.interruptions.none_since(since));
        for Difference { change, kept } in confirmed {
            let kind = change.kind();
            let described = format!("{change:?}");
            // Corrected only while the registry keeps the record both lists were compared with:
            // a watch event applied since has brought it up to date already.
            let corrected = ctx.apply_if(change, |registry, change| {
                registry.record_of(change) == kept.as_ref()
            });
            if corrected && watches_whole {
                tracing::warn!(
                    kind,
                    change = described,
                    ?kept,
                    "state drift: the registry disagreed with the API server; corrected"
                );
                ctx.metrics.state_drift(kind);
                found.drift += 1;
            } else if corrected {
                tracing::info!(
                    kind,
                    change = described,
                    ?kept,
                    "audit: corrected what a failed watch missed (not drift: the watch was catching up)"
                );
            } else {
                tracing::debug!(
                    kind,
                    change = described,
                    "audit: a difference the watches settled before its correction"
                );
            }
        }
        second
    };
    let (before, rebuilt) = ctx.update_registry(|registry| {
        let before: Vec<_> = registry
            .pool_keys()
            .into_iter()
            .map(|pool| {
                let counts = registry.counts(&pool);
                (pool, counts)
            })
            .collect();
        (before, registry.recount())
    });
    for pool in rebuilt {
        let was = before
            .iter()
            .find(|(p, _)| *p == pool)
            .and_then(|(_, c)| *c);
        let now = ctx.registry().counts(&pool);
        tracing::warn!(%pool, ?was, ?now, "state drift: the pool's allocator disagreed with its holds; rebuilt");
        ctx.metrics.state_drift("allocator");
        found.drift += 1;
    }
    found.orphans = release_deleted_orphans(ctx, &snapshot).await;
    found.strays = collect_strays(ctx, &snapshot).await?;
    forget_what_is_gone(ctx);
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::InClusterIPPool;
    use crate::controllers::fixtures::{Expect, Mock, ip_pool, pool_key, reservation, scenario};

    /// The lists of one audit, answered with `pool` and nothing else.
    fn lists(pool: &InClusterIPPool) -> Vec<Expect> {
        let list = |path: &str, items: Vec<serde_json::Value>| {
            Expect::get(format!("{path}?&limit=500")).answer(&serde_json::json!({
                "apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "9"},
                "items": items,
            }))
        };
        let pools = "/apis/ipam.cluster.x-k8s.io/v1alpha2";
        vec![
            list(
                &format!("{pools}/inclusterippools"),
                vec![serde_json::to_value(pool).unwrap()],
            ),
            list(&format!("{pools}/globalinclusterippools"), Vec::new()),
            list(&format!("{pools}/inclusterprefixpools"), Vec::new()),
            list(&format!("{pools}/globalinclusterprefixpools"), Vec::new()),
            list(
                "/apis/ipam.cluster.x-k8s.io/v1beta2/ipaddresses",
                Vec::new(),
            ),
            list(
                "/apis/ipam.inpool.dev/v1alpha1/ipaddressreservations",
                Vec::new(),
            ),
        ]
    }

    /// A reservation the registry holds and the API server lists no more, twice, is drift: the
    /// registry lets go of it. The audit only lists: the correction sends nothing.
    #[tokio::test(start_paused = true)]
    async fn a_reservation_gone_from_both_lists_is_drift_and_corrected() {
        let mut mock = Mock::new();
        let pool = ip_pool(&["10.0.0.10-10.0.0.11"]);
        mock.pool(&pool);
        mock.learn(&reservation("c1", "10.0.0.10"));
        let ctx = mock.ctx.clone();
        let audited = async move { audit(&ctx).await };
        let script = lists(&pool).into_iter().chain(lists(&pool)).collect();
        let found = scenario(&mut mock.server, audited, script).await.unwrap();
        let drift = Found {
            drift: 1,
            ..Found::default()
        };
        assert_eq!(found, drift);
        assert!(mock.ctx.registry().reservations_in(&pool_key()).is_empty());
    }
}
