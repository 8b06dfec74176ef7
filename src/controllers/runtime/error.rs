//! One error type for every controller, and one place that logs and counts each failure and
//! picks when to try again: exponential backoff per object, from [`FIRST_RETRY`] doubling up to
//! [`MAX_RETRY`], reset by the object's next successful reconcile.
//!
//! The delay doubles only when a retry that was due fails again. A change to the object (or to
//! what it depends on) reconciles it at once, before its retry is due; when that reconcile fails
//! too, the delay stands. Under a flaky API server the writes of a failing reconcile often
//! succeed, and their own watch events bring the next reconcile within milliseconds: counted as
//! retries, a few of those would park a claim for minutes after the server recovered.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::{Resource, ResourceExt};
use tokio::time::Instant;

use super::ControllerContext;
use super::controller::Action;

/// The first retry of a failed reconcile comes after this long.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Retries of an object that keeps failing are never further apart than this.
pub const MAX_RETRY: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
}

impl Error {
    /// The `error` label of `inpool_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(status)) => match status.code {
                403 => "forbidden",
                404 => "not_found",
                409 => "conflict",
                422 => "invalid",
                429 => "throttled",
                500..=599 => "server",
                _ => "api",
            },
            Error::Kube(_) => "connection",
        }
    }
}

/// The backoff of each object whose last reconcile failed, by controller and object.
#[derive(Debug, Default)]
pub struct Retries(Mutex<HashMap<(&'static str, String), Backoff>>);

/// One object's backoff.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    /// The delay its last failure asked for.
    delay: Duration,
    /// When the retry that failure asked for is due.
    due: Instant,
}

impl Retries {
    /// Counts a failure at `now` and returns how long to wait before the next try: the first
    /// delay, the last one doubled when the retry it asked for was due, else the last one again.
    fn failed(&self, controller: &'static str, object: String, now: Instant) -> Duration {
        let mut failures = self.0.lock().expect("retries lock");
        let delay = match failures.get(&(controller, object.clone())) {
            None => FIRST_RETRY,
            Some(last) if now >= last.due => last.delay.saturating_mul(2).min(MAX_RETRY),
            Some(last) => last.delay,
        };
        let due = now + delay;
        failures.insert((controller, object), Backoff { delay, due });
        delay
    }

    /// The object's reconcile succeeded: its next failure starts from the first delay again.
    fn succeeded(&self, controller: &'static str, object: String) {
        let mut failures = self.0.lock().expect("retries lock");
        if !failures.is_empty() {
            failures.remove(&(controller, object));
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.lock().expect("retries lock").len()
    }
}

/// The delay before retry number `failures` (1 for the first failure).
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

fn object_name<K: Resource>(object: &K) -> String {
    match object.namespace() {
        Some(ns) => format!("{ns}/{}", object.name_any()),
        None => object.name_any(),
    }
}

/// Every reconcile ends here: a success resets the object's backoff.
pub fn settle<K: Resource>(
    controller: &'static str,
    object: &K,
    ctx: &(impl ControllerContext + ?Sized),
    result: Result<Action, Error>,
) -> Result<Action, Error> {
    settle_named(controller, object_name(object), ctx, result)
}

/// [`settle`] of the object named `name` (`namespace/name`).
pub fn settle_named<T>(
    controller: &'static str,
    name: String,
    ctx: &(impl ControllerContext + ?Sized),
    result: Result<T, Error>,
) -> Result<T, Error> {
    if result.is_ok() {
        ctx.retries().succeeded(controller, name);
    }
    result
}

/// The error policy of every controller: logs and counts the failure, then retries the object
/// after its backoff.
pub fn error_policy<K: Resource>(
    controller: &'static str,
    object: &K,
    error: &Error,
    ctx: &(impl ControllerContext + ?Sized),
) -> Action {
    Action::requeue(retry_delay(controller, object_name(object), error, ctx))
}

/// [`error_policy`] of the object named `name` (`namespace/name`): the delay before its retry.
pub fn retry_delay(
    controller: &'static str,
    name: String,
    error: &Error,
    ctx: &(impl ControllerContext + ?Sized),
) -> Duration {
    let delay = ctx
        .retries()
        .failed(controller, name.clone(), Instant::now());
    ctx.metrics()
        .reconcile_error(controller, error.metric_label());
    tracing::warn!(controller, object = %name, %error, retry_in = ?delay, "reconcile failed");
    delay
}

/// A watch failed (it is retried with kube's default backoff): logged and counted.
pub fn watch_failed(
    ctx: &(impl ControllerContext + ?Sized),
    controller: &'static str,
    error: &dyn std::error::Error,
) {
    ctx.metrics().reconcile_error(controller, "watch");
    tracing::warn!(controller, %error, "watch failed; retrying");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_from_one_second_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=11).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(backoff(u32::MAX), MAX_RETRY);
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_retry_that_was_due_and_failed_doubles_the_delay_up_to_five_minutes() {
        let retries = Retries::default();
        let mut now = Instant::now();
        let mut delays = Vec::new();
        for _ in 0..11 {
            let delay = retries.failed("claim", "ns/a".into(), now);
            delays.push(delay.as_secs());
            now += delay;
        }
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
    }

    #[test]
    fn failures_before_the_retry_was_due_keep_the_delay() {
        let retries = Retries::default();
        let start = Instant::now();
        assert_eq!(retries.failed("claim", "ns/a".into(), start), SECOND);
        // The watch events of the failed reconcile's own writes bring three more at once.
        for millis in [10, 30, 60] {
            let early = start + Duration::from_millis(millis);
            assert_eq!(retries.failed("claim", "ns/a".into(), early), SECOND);
        }
        // The retry the last of them asked for was due (1.06 s) and failed again.
        let due = start + Duration::from_millis(1060);
        assert_eq!(retries.failed("claim", "ns/a".into(), due), 2 * SECOND);
        let early = due + Duration::from_millis(500);
        assert_eq!(retries.failed("claim", "ns/a".into(), early), 2 * SECOND);
    }

    #[test]
    fn a_success_starts_the_backoff_again() {
        let retries = Retries::default();
        let now = Instant::now();
        assert_eq!(retries.failed("claim", "ns/a".into(), now), SECOND);
        let due = now + SECOND;
        assert_eq!(retries.failed("claim", "ns/a".into(), due), 2 * SECOND);
        let other = retries.failed("pool", "ns/a".into(), due);
        assert_eq!(other, SECOND, "per controller");
        retries.succeeded("claim", "ns/a".into());
        let later = due + 2 * SECOND;
        assert_eq!(retries.failed("claim", "ns/a".into(), later), SECOND);
        assert_eq!(retries.len(), 2);
    }
}
