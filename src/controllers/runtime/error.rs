//! One error type for every controller, and one place that logs and counts each failure and
//! picks when to try again: exponential backoff per object, from [`FIRST_RETRY`] doubling up to
//! [`MAX_RETRY`], reset by the object's next successful reconcile.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::{Resource, ResourceExt};

use super::controller::Action;
use crate::controllers::runtime::Context;

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

/// How many times in a row each object's reconcile has failed, by controller and object.
#[derive(Debug, Default)]
pub struct Retries(Mutex<HashMap<(&'static str, String), u32>>);

impl Retries {
    /// Counts one more failure and returns how long to wait before the next try.
    fn failed(&self, controller: &'static str, object: String) -> Duration {
        let mut failures = self.0.lock().expect("retries lock");
        let count = failures.entry((controller, object)).or_default();
        *count = count.saturating_add(1);
        backoff(*count)
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
    ctx: &Context,
    result: Result<Action, Error>,
) -> Result<Action, Error> {
    settle_named(controller, object_name(object), ctx, result)
}

/// [`settle`] of the object named `name` (`namespace/name`).
pub fn settle_named<T>(
    controller: &'static str,
    name: String,
    ctx: &Context,
    result: Result<T, Error>,
) -> Result<T, Error> {
    if result.is_ok() {
        ctx.retries.succeeded(controller, name);
    }
    result
}

/// The error policy of every controller: logs and counts the failure, then retries the object
/// after its backoff.
pub fn error_policy<K: Resource>(
    controller: &'static str,
    object: &K,
    error: &Error,
    ctx: &Context,
) -> Action {
    Action::requeue(retry_delay(controller, object_name(object), error, ctx))
}

/// [`error_policy`] of the object named `name` (`namespace/name`): the delay before its retry.
pub fn retry_delay(
    controller: &'static str,
    name: String,
    error: &Error,
    ctx: &Context,
) -> Duration {
    let delay = ctx.retries.failed(controller, name.clone());
    ctx.metrics
        .reconcile_error(controller, error.metric_label());
    tracing::warn!(controller, object = %name, %error, retry_in = ?delay, "reconcile failed");
    delay
}

/// A watch failed (it is retried with kube's default backoff): logged and counted.
pub fn watch_failed(ctx: &Context, controller: &'static str, error: &dyn std::error::Error) {
    ctx.metrics.reconcile_error(controller, "watch");
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

    #[test]
    fn a_success_starts_the_backoff_again() {
        let retries = Retries::default();
        assert_eq!(
            retries.failed("claim", "ns/a".into()),
            Duration::from_secs(1)
        );
        assert_eq!(
            retries.failed("claim", "ns/a".into()),
            Duration::from_secs(2)
        );
        assert_eq!(
            retries.failed("pool", "ns/a".into()),
            Duration::from_secs(1),
            "per controller"
        );
        retries.succeeded("claim", "ns/a".into());
        assert_eq!(
            retries.failed("claim", "ns/a".into()),
            Duration::from_secs(1)
        );
        assert_eq!(retries.len(), 2);
    }
}
