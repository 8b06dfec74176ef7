//! Leader election on a `coordination.k8s.io/v1` Lease, so that several replicas can run and
//! only one writes.
//!
//! [`run_as_leader`] waits until this process holds the Lease (through kube-lease-manager, which
//! creates the Lease if needed, takes it when it is free or expired, and renews it a third of
//! the lease duration before it expires), then runs the work future — the controllers — only
//! while it holds the Lease:
//!
//! - **Losing the Lease stops the work at once**: the work future is dropped (not asked to stop)
//!   as soon as loss is detected, so no further request of the controllers is sent. Loss is
//!   detected three ways: kube-lease-manager reports another holder; a lease request fails (the
//!   state is then unknown, treated as lost); or a watchdog, on the local clock alone, sees that
//!   the Lease was not confirmed renewed by `renewTime + leaseDurationSeconds - grace/2`, i.e.
//!   half the grace period *before* another replica may take it over. The watchdog is what
//!   bounds a partition: kube-lease-manager alone only notices a lost Lease once the API server
//!   answers again.
//! - The work must therefore not spawn detached tasks that write: everything it starts must be
//!   owned by the work future (dropped with it) or aborted when dropped.
//! - After a loss, the process waits for the Lease again and runs a fresh work future when it
//!   regains it.
//! - On shutdown the work is dropped and the Lease released; a standby reads the Lease every
//!   `min(2 s, g)` and takes a released Lease at once.
//!
//! Timing, for a lease duration `d` (whole seconds, at least 3), a renew deadline `D` and a retry
//! period `r` (client-go's three, as Cluster API's `--leader-elect-*` flags name them):
//! - the holder renews `r` after its last renewal (kube-lease-manager's grace is `d - r`);
//! - the work stops `D` after the last confirmed renewal unless a newer one shows;
//! - a standby reads the Lease every `r`, and takes a released Lease at once.
//!
//! They must satisfy `r + 0.5 s <= D < d`. Unset, they derive from `d`, with `g = max(1 s, d/3)`
//! (whole seconds): `D = d - g/2`, `r = d - g` for the holder (half of `D` if `D` alone is
//! given) and `min(2 s, g)` for a standby; 12.5 s, 10 s and 2 s for 15 s. A standby takes a
//! released Lease within about `r`, and the Lease of a holder that died without releasing it
//! `d` after its last renewal (plus up to 1 s of random back-off, kube-lease-manager's, against
//! collisions).

use std::future::Future;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseParams};
use tokio::time::{Instant, sleep, sleep_until};

pub use crate::settings::LeaseSettings;
use crate::telemetry::HealthState;

/// How often the lease is read while waiting for a renewal to show.
const POLL: Duration = Duration::from_millis(250);
/// Longest wait between attempts to rebuild the lease manager after an error.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How long shutdown waits for the release of the Lease.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// The holder's and the standby's timing (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Lease validity after a renewal.
    pub duration: Duration,
    /// The holder renews this long before expiry.
    pub grace: Duration,
    /// The work stops this long before expiry if no renewal was confirmed.
    pub margin: Duration,
    /// How often a standby reads the Lease to notice a release.
    pub standby_poll: Duration,
}

/// How much shorter than the renew deadline the retry period must be: time for the renewal to
/// be written and read back.
const RENEWAL_ROOM: Duration = Duration::from_millis(500);

impl Timing {
    /// The timing of `lease`, or why its renew deadline and retry period do not fit its
    /// duration (naming the flags).
    pub fn new(lease: &LeaseSettings) -> Result<Timing, String> {
        let seconds = lease.duration.as_secs().max(3);
        let duration = Duration::from_secs(seconds);
        let derived_grace = (seconds / 3).max(1);
        let deadline = lease
            .renew_deadline
            .unwrap_or(duration - Duration::from_millis(derived_grace * 500));
        if deadline >= duration {
            return Err(format!(
                "--leader-elect-renew-deadline ({deadline:?}) must be shorter than the lease \
                 duration ({duration:?}, --leader-elect-lease-duration)"
            ));
        }
        let renew_after = match (lease.retry_period, lease.renew_deadline) {
            (Some(retry), _) => retry.as_secs(),
            (None, Some(deadline)) => (deadline.as_secs() / 2).clamp(1, seconds - derived_grace),
            (None, None) => seconds - derived_grace,
        };
        if Duration::from_secs(renew_after) + RENEWAL_ROOM > deadline {
            return Err(format!(
                "--leader-elect-retry-period ({renew_after}s) must be at least {RENEWAL_ROOM:?} \
                 shorter than the renew deadline ({deadline:?}, --leader-elect-renew-deadline)"
            ));
        }
        Ok(Timing {
            duration,
            grace: Duration::from_secs(seconds - renew_after),
            margin: duration - deadline,
            standby_poll: lease
                .retry_period
                .unwrap_or(Duration::from_secs(derived_grace.min(2))),
        })
    }
}

/// What a read of the Lease says about this process.
#[derive(Debug)]
enum Hold {
    /// We hold it: last renewal and the end of its validity (by our clock).
    Mine {
        renewed: SystemTime,
        valid_until: SystemTime,
    },
    /// Someone else holds it (or nobody: `None`).
    NotMine(Option<String>),
    /// The read failed, or the Lease has no usable times.
    Unknown,
}

async fn read_hold(api: &Api<Lease>, lease: &LeaseSettings) -> Hold {
    let Ok(object) = api.get(&lease.name).await else {
        return Hold::Unknown;
    };
    let Some(spec) = object.spec else {
        return Hold::NotMine(None);
    };
    if spec.holder_identity.as_deref() != Some(lease.identity.as_str()) {
        return Hold::NotMine(spec.holder_identity);
    }
    match (spec.renew_time, spec.lease_duration_seconds) {
        (Some(renew), Some(seconds)) if seconds > 0 => {
            let renewed = SystemTime::from(renew.0);
            Hold::Mine {
                renewed,
                valid_until: renewed + Duration::from_secs(seconds.unsigned_abs().into()),
            }
        }
        _ => Hold::Unknown,
    }
}

/// The instant at which work must stop for a hold valid until `valid_until`, if still ahead.
fn stop_instant(valid_until: SystemTime, margin: Duration) -> Option<Instant> {
    let left = valid_until.duration_since(SystemTime::now()).ok()?;
    left.checked_sub(margin).map(|d| Instant::now() + d)
}

/// After kube-lease-manager reports the Lease acquired, confirms it by reading the Lease: the
/// instant by which work must stop unless a renewal shows, and the renewal seen.
async fn confirm(
    api: &Api<Lease>,
    lease: &LeaseSettings,
    timing: Timing,
) -> Result<(Instant, SystemTime), String> {
    let deadline = Instant::now() + timing.duration;
    loop {
        match read_hold(api, lease).await {
            Hold::Mine {
                renewed,
                valid_until,
            } => {
                if let Some(stop) = stop_instant(valid_until, timing.margin) {
                    return Ok((stop, renewed));
                }
            }
            Hold::NotMine(holder) => {
                return Err(format!(
                    "the lease is held by {}",
                    holder.as_deref().unwrap_or("nobody")
                ));
            }
            Hold::Unknown => {}
        }
        if Instant::now() >= deadline {
            return Err("could not confirm the lease hold".into());
        }
        sleep(POLL).await;
    }
}

/// Returns (with the reason) when the hold can no longer be trusted: not confirmed renewed by
/// `stop_at`, or held by someone else.
async fn watchdog(
    api: &Api<Lease>,
    lease: &LeaseSettings,
    timing: Timing,
    mut stop_at: Instant,
    mut renewed: SystemTime,
) -> String {
    loop {
        // kube-lease-manager renews `grace` before expiry, i.e. `grace - margin` before stop_at.
        let first_look = (stop_at + timing.margin)
            .checked_sub(timing.grace)
            .unwrap_or(stop_at)
            + POLL;
        let renewal = async {
            sleep_until(first_look).await;
            loop {
                match read_hold(api, lease).await {
                    Hold::Mine {
                        renewed: r,
                        valid_until,
                    } if r > renewed => {
                        if let Some(stop) = stop_instant(valid_until, timing.margin) {
                            return Ok((stop, r));
                        }
                    }
                    Hold::NotMine(holder) => {
                        return Err(format!(
                            "the lease is now held by {}",
                            holder.as_deref().unwrap_or("nobody")
                        ));
                    }
                    _ => {}
                }
                sleep(POLL).await;
            }
        };
        tokio::select! {
            () = sleep_until(stop_at) => {
                return "the lease renewal was not confirmed before it could expire".into();
            }
            result = renewal => match result {
                Ok((stop, r)) => {
                    stop_at = stop;
                    renewed = r;
                }
                Err(reason) => return reason,
            },
        }
    }
}

/// Releases the Lease if held, waiting at most [`RELEASE_TIMEOUT`].
async fn release(manager: &LeaseManager, lease: &LeaseSettings) {
    match tokio::time::timeout(RELEASE_TIMEOUT, manager.release()).await {
        Ok(Ok(())) => tracing::info!(lease = %lease.name, "leader election lease released"),
        Ok(Err(e)) => {
            tracing::warn!(lease = %lease.name, error = %e, "could not release the lease")
        }
        Err(_) => tracing::warn!(lease = %lease.name, "timed out releasing the lease"),
    }
}

/// While this process waits for the Lease: reads it every [`Timing::standby_poll`], marks the
/// leader state known after the first successful read (this process is a standby), logs holder
/// changes, and returns as soon as a later read finds the Lease released (no holder), so that
/// the caller takes it at once instead of waiting for the old hold to expire.
async fn observe_as_standby(
    api: &Api<Lease>,
    lease: &LeaseSettings,
    health: &HealthState,
    timing: Timing,
) {
    let mut last: Option<Option<String>> = None;
    loop {
        match api.get(&lease.name).await {
            Ok(object) => {
                let holder = object
                    .spec
                    .and_then(|s| s.holder_identity)
                    .filter(|h| !h.is_empty());
                // The first read only establishes the state: at start-up the lease manager is
                // taking a free Lease at this very moment.
                if last.is_some() && holder.is_none() {
                    tracing::info!(lease = %lease.name, "the leader election lease was released");
                    return;
                }
                if last.as_ref() != Some(&holder) {
                    tracing::info!(
                        lease = %lease.name,
                        holder = holder.as_deref().unwrap_or(""),
                        "waiting for the leader election lease"
                    );
                    last = Some(holder);
                }
                health.set_leader_state_known(true);
            }
            Err(e) => tracing::debug!(error = %e, "reading the lease failed"),
        }
        sleep(timing.standby_poll).await;
    }
}

enum Outcome {
    Shutdown,
    Lost(String),
    WorkEnded(anyhow::Result<()>),
}

/// Runs `work()` only while this process holds the Lease described by `lease` (see the module
/// docs). Returns `Ok(())` after `shutdown` completes (work dropped, Lease released), or with
/// the work's own result if the work ends by itself (Lease released too).
pub async fn run_as_leader<F, Fut>(
    client: Client,
    lease: LeaseSettings,
    health: HealthState,
    mut work: F,
    shutdown: impl Future,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let timing = Timing::new(&lease).map_err(anyhow::Error::msg)?;
    let api: Api<Lease> = Api::namespaced(client.clone(), &lease.namespace);
    tokio::pin!(shutdown);
    health.set_leading(false);
    let mut backoff = Duration::from_millis(500);

    loop {
        // A fresh manager after every loss: kube-lease-manager keeps its own idea of whether
        // it leads, which an error or the watchdog may have made stale.
        let params = LeaseParams::new(
            lease.identity.clone(),
            timing.duration.as_secs(),
            timing.grace.as_secs(),
        );
        let built = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            built = LeaseManager::new(
                client.clone(),
                &lease.name,
                &lease.namespace,
                params,
                LeaseCreateMode::AutoCreate,
            ) => built,
        };
        let manager = match built {
            Ok(manager) => manager,
            Err(e) => {
                tracing::warn!(lease = %lease.name, namespace = %lease.namespace, error = %e, "cannot use the leader election lease; retrying");
                tokio::select! {
                    _ = &mut shutdown => return Ok(()),
                    () = sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };

        // Wait until we hold the Lease.
        let acquired = tokio::select! {
            _ = &mut shutdown => {
                release(&manager, &lease).await;
                return Ok(());
            }
            // Released by its holder: a fresh manager takes it now (kube-lease-manager itself
            // would only look again when the old hold expires).
            () = observe_as_standby(&api, &lease, &health, timing) => continue,
            acquired = manager.changed() => acquired,
        };
        match acquired {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(lease = %lease.name, error = %e, "leader election failed; retrying");
                tokio::select! {
                    _ = &mut shutdown => return Ok(()),
                    () = sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        }
        let confirmed = tokio::select! {
            _ = &mut shutdown => {
                release(&manager, &lease).await;
                return Ok(());
            }
            confirmed = confirm(&api, &lease, timing) => confirmed,
        };
        let (stop_at, renewed) = match confirmed {
            Ok(hold) => hold,
            Err(reason) => {
                tracing::warn!(lease = %lease.name, %reason, "lease acquisition not confirmed; waiting again");
                continue;
            }
        };
        backoff = Duration::from_millis(500);
        health.set_leader_state_known(true);
        health.set_leading(true);
        tracing::info!(lease = %lease.name, identity = %lease.identity, "became leader; starting the controllers");

        let outcome = {
            let running = work();
            tokio::pin!(running);
            tokio::select! {
                biased;
                _ = &mut shutdown => Outcome::Shutdown,
                reason = watchdog(&api, &lease, timing, stop_at, renewed) => Outcome::Lost(reason),
                changed = manager.changed() => Outcome::Lost(match changed {
                    Ok(false) => "another instance holds the lease".to_string(),
                    Ok(true) => "the lease was re-acquired unexpectedly".to_string(),
                    Err(e) => format!("the lease could not be renewed: {e}"),
                }),
                result = &mut running => Outcome::WorkEnded(result),
            }
            // `running` (the controllers) is dropped here, before anything else happens.
        };
        health.set_leading(false);
        health.set_caches_synced(false);

        match outcome {
            Outcome::Shutdown => {
                tracing::info!("shutting down: controllers stopped");
                release(&manager, &lease).await;
                return Ok(());
            }
            Outcome::Lost(reason) => {
                tracing::warn!(lease = %lease.name, %reason, "lost leadership: controllers stopped");
            }
            Outcome::WorkEnded(result) => {
                match &result {
                    Ok(()) => tracing::info!("controllers finished"),
                    Err(e) => tracing::error!(error = %format!("{e:#}"), "controllers failed"),
                }
                release(&manager, &lease).await;
                return result;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(duration: u64, deadline_ms: Option<u64>, retry: Option<u64>) -> LeaseSettings {
        LeaseSettings {
            renew_deadline: deadline_ms.map(Duration::from_millis),
            retry_period: retry.map(Duration::from_secs),
            ..LeaseSettings::new("ns", "lease", "me", Duration::from_secs(duration))
        }
    }

    #[test]
    fn timing_derived_from_the_duration() {
        let t = Timing::new(&lease(15, None, None)).unwrap();
        assert_eq!(t.grace, Duration::from_secs(5));
        assert_eq!(t.margin, Duration::from_millis(2500));
        assert_eq!(t.standby_poll, Duration::from_secs(2));
        let t = Timing::new(&lease(4, None, None)).unwrap();
        assert_eq!(t.grace, Duration::from_secs(1));
        assert_eq!(t.margin, Duration::from_millis(500));
        assert_eq!(t.standby_poll, Duration::from_secs(1));
        // Below the minimum, the minimum applies (grace must stay below duration).
        let t = Timing::new(&lease(1, None, None)).unwrap();
        assert_eq!(t.duration, Duration::from_secs(3));
        assert!(t.grace < t.duration);
    }

    #[test]
    fn timing_of_cluster_apis_defaults() {
        // controller-runtime's 15 s, 10 s and 2 s: renew every 2 s, stop 10 s after a renewal.
        let t = Timing::new(&lease(15, Some(10_000), Some(2))).unwrap();
        assert_eq!(t.grace, Duration::from_secs(13));
        assert_eq!(t.margin, Duration::from_secs(5));
        assert_eq!(t.standby_poll, Duration::from_secs(2));
        // The deadline alone: renew at half of it.
        let t = Timing::new(&lease(15, Some(10_000), None)).unwrap();
        assert_eq!(t.grace, Duration::from_secs(10));
        assert_eq!(t.margin, Duration::from_secs(5));
    }

    #[test]
    fn timing_that_cannot_work_is_refused() {
        let error = Timing::new(&lease(15, Some(15_000), None)).unwrap_err();
        assert!(error.contains("--leader-elect-renew-deadline"), "{error}");
        let error = Timing::new(&lease(15, Some(10_000), Some(10))).unwrap_err();
        assert!(error.contains("--leader-elect-retry-period"), "{error}");
        let error = Timing::new(&lease(15, None, Some(13))).unwrap_err();
        assert!(error.contains("--leader-elect-retry-period"), "{error}");
    }

    #[test]
    fn stop_instant_is_margin_before_expiry() {
        let margin = Duration::from_secs(1);
        assert!(stop_instant(SystemTime::now() - Duration::from_secs(1), margin).is_none());
        assert!(stop_instant(SystemTime::now() + Duration::from_millis(500), margin).is_none());
        let stop = stop_instant(SystemTime::now() + Duration::from_secs(10), margin).unwrap();
        let left = stop - Instant::now();
        assert!(
            left <= Duration::from_secs(9) && left > Duration::from_secs(8),
            "{left:?}"
        );
    }
}
