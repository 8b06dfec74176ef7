//! kube-runtime's controllers (pools, released reservations) measured under controller-runtime's
//! families, as the claim runtime measures itself ([`super::controller`]).
//!
//! kube-runtime's scheduler keeps its queue to itself, so the queue is measured at its edges:
//! a request is added when a trigger or a wake for an object goes in ([`Metered::requested`]),
//! taken when the reconcile of that object starts, and done when it ends. As in client-go, a
//! request for an object already waiting adds nothing and keeps its first time, and one made
//! while the object is being reconciled waits for the next reconcile. Two things the edges do
//! not show: the delayed requests kube-runtime schedules itself (`Action::requeue`, the retry of
//! an error) are not adds, and their reconciles record no queue time; and a request for an
//! object deleted before its reconcile ends with kube-runtime's `ObjectNotFound`, which
//! [`Metered::forget`] takes out of the depth. Depth has the one priority `0`.
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::controller::Action;
use tokio::time::Instant;

use super::error::Error;
use crate::telemetry::{ControllerMetrics, Metrics, QueueMetrics, ReconcileResult};

/// One kube-runtime controller's reconcile and queue families.
pub(crate) struct Metered {
    reconciles: ControllerMetrics,
    queue: QueueMetrics,
    edges: Mutex<Edges>,
}

/// What is waiting and what runs, by `namespace/name`.
#[derive(Default)]
struct Edges {
    waiting: HashMap<String, Instant>,
    running: HashMap<String, Instant>,
}

impl Edges {
    fn in_progress(&self, now: Instant) -> (Duration, Duration) {
        super::queue::unfinished(self.running.values(), now)
    }
}

/// The key of an object in [`Metered`]: `namespace/name` (`/name` when cluster-scoped).
pub(crate) fn key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

impl Metered {
    /// The families of `controller`, which runs at most `concurrency` reconciles at once (0: no
    /// limit, kube-runtime's default).
    pub fn new(metrics: &Metrics, controller: &str, concurrency: u16) -> Arc<Metered> {
        Arc::new(Metered {
            reconciles: metrics.controller(controller, concurrency),
            queue: metrics.queue(controller),
            edges: Mutex::new(Edges::default()),
        })
    }

    fn edges(&self) -> std::sync::MutexGuard<'_, Edges> {
        self.edges
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn show_depth(&self, edges: &Edges) {
        self.queue.depth(edges.waiting.len(), 0);
    }

    /// A trigger or a wake asks for a reconcile of `key`.
    pub fn requested(&self, key: String) {
        let mut edges = self.edges();
        if let std::collections::hash_map::Entry::Vacant(waiting) = edges.waiting.entry(key) {
            waiting.insert(Instant::now());
            self.queue.added(1);
            self.show_depth(&edges);
        }
    }

    /// The object of `key` was gone when its reconcile was due: nothing waits for it any more.
    pub fn forget(&self, key: &str) {
        let mut edges = self.edges();
        if edges.waiting.remove(key).is_some() {
            self.show_depth(&edges);
        }
    }

    /// Runs the reconcile of `key`, measured.
    pub async fn reconcile<F>(&self, key: String, reconcile: F) -> Result<Action, Error>
    where
        F: Future<Output = Result<Action, Error>>,
    {
        let began = self.reconciles.started();
        {
            let mut edges = self.edges();
            let now = Instant::now();
            if let Some(since) = edges.waiting.remove(&key) {
                self.queue.taken(now.saturating_duration_since(since));
            }
            edges.running.insert(key.clone(), now);
            self.show_depth(&edges);
            let (total, longest) = edges.in_progress(now);
            self.queue.in_progress(total, longest);
        }
        let result = reconcile.await;
        {
            let mut edges = self.edges();
            let now = Instant::now();
            if let Some(since) = edges.running.remove(&key) {
                self.queue.done(now.saturating_duration_since(since));
            }
            let (total, longest) = edges.in_progress(now);
            self.queue.in_progress(total, longest);
        }
        let outcome = match &result {
            Ok(action) if *action == Action::await_change() => ReconcileResult::Success,
            Ok(_) => ReconcileResult::RequeueAfter,
            Err(_) => {
                self.queue.retried();
                ReconcileResult::Error
            }
        };
        self.reconciles.finished(began, outcome);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_are_measured_at_the_edges_of_kube_runtimes_queue() {
        let metrics = Metrics::new();
        let metered = Metered::new(&metrics, "inclusterippool", 0);
        metered.requested(key(Some("ns"), "a"));
        metered.requested(key(Some("ns"), "a"));
        metered.requested(key(Some("ns"), "b"));
        metered.forget("ns/b");
        let result = metered
            .reconcile(key(Some("ns"), "a"), async { Ok(Action::await_change()) })
            .await;
        assert!(result.is_ok());
        let text = metrics.encode();
        let labels = "name=\"inclusterippool\",controller=\"inclusterippool\"";
        for line in [
            format!("workqueue_adds_total{{{labels}}} 2"),
            format!("workqueue_depth{{{labels},priority=\"0\"}} 0"),
            format!("workqueue_queue_duration_seconds_count{{{labels}}} 1"),
            format!("workqueue_work_duration_seconds_count{{{labels}}} 1"),
            format!("workqueue_longest_running_processor_seconds{{{labels}}} 0.0"),
            "controller_runtime_reconcile_total{controller=\"inclusterippool\",result=\"success\"} 1"
                .to_string(),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
