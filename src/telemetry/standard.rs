//! The metric families every controller-runtime manager exports, under controller-runtime's and
//! client-go's names, labels and buckets, so that the dashboards and alerts written for Cluster
//! API providers read inpool too:
//!
//! | family | labels | measured by |
//! |---|---|---|
//! | `controller_runtime_reconcile_total` | `controller`, `result` | [`ControllerMetrics`] |
//! | `controller_runtime_reconcile_errors_total` | `controller` | same |
//! | `controller_runtime_reconcile_time_seconds` | `controller` | same |
//! | `controller_runtime_active_workers` | `controller` | same |
//! | `controller_runtime_max_concurrent_reconciles` | `controller` | same |
//! | `workqueue_depth` | `name`, `controller`, `priority` | [`QueueMetrics`] |
//! | `workqueue_adds_total` | `name`, `controller` | same |
//! | `workqueue_queue_duration_seconds` | same | same |
//! | `workqueue_work_duration_seconds` | same | same |
//! | `workqueue_retries_total` | same | same |
//! | `workqueue_unfinished_work_seconds` | same | same |
//! | `workqueue_longest_running_processor_seconds` | same | same |
//! | `rest_client_requests_total` | `code`, `method`, `host` | [`RestClientLayer`] |
//! | `rest_client_request_duration_seconds` | `verb`, `host` | same |
//! | `leader_election_master_status` | `name` | [`super::Metrics::set_leader`] |
//! | `process_*` | — | [`ProcessCollector`] (metrics-process) |
//!
//! Controllers are named as controller-runtime names them, by the lowercase kind they reconcile:
//! `ipaddressclaim`, the four pool kinds, `ipaddressreservation`. `result` is `success`,
//! `error`, `requeue` or `requeue_after`. The claims' queue has two priorities, as
//! controller-runtime's priority queue: `0` for requests that change something, `-100` for a
//! realised claim the watch brings, which only needs confirming. The other controllers (each pool
//! kind, released reservations) each have a work queue of their own, of the same kind, where
//! every request is priority `0` (their `-100` series stays at 0).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http::{Request, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// controller-runtime's reconcile-time buckets (seconds).
const RECONCILE_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// client-go's work-queue duration buckets: 10 ns to 10 s, by tens.
const QUEUE_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// client-go's request-latency buckets (seconds).
const REQUEST_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

type F64Gauge = Gauge<f64, AtomicU64>;
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QueueLabels {
    name: String,
    controller: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DepthLabels {
    name: String,
    controller: String,
    priority: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    code: String,
    method: String,
    host: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LatencyLabels {
    verb: String,
    host: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LeaseLabel {
    name: String,
}

/// The standard families, registered once on the root registry.
pub(super) struct Standard {
    reconciles: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabel, Counter>,
    reconcile_time: Histograms<ControllerLabel>,
    active_workers: Family<ControllerLabel, Gauge>,
    max_concurrent: Family<ControllerLabel, Gauge>,
    depth: Family<DepthLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: Histograms<QueueLabels>,
    work_duration: Histograms<QueueLabels>,
    retries: Family<QueueLabels, Counter>,
    unfinished: Family<QueueLabels, F64Gauge>,
    longest: Family<QueueLabels, F64Gauge>,
    requests: Family<RequestLabels, Counter>,
    request_duration: Histograms<LatencyLabels>,
    leader: Family<LeaseLabel, Gauge>,
}

impl Standard {
    pub(super) fn register(registry: &mut Registry) -> Standard {
        let standard = Standard {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(|| Histogram::new(RECONCILE_BUCKETS)),
            active_workers: Family::default(),
            max_concurrent: Family::default(),
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(|| Histogram::new(QUEUE_BUCKETS)),
            work_duration: Family::new_with_constructor(|| Histogram::new(QUEUE_BUCKETS)),
            retries: Family::default(),
            unfinished: Family::default(),
            longest: Family::default(),
            requests: Family::default(),
            request_duration: Family::new_with_constructor(|| Histogram::new(REQUEST_BUCKETS)),
            leader: Family::default(),
        };
        let s = &standard;
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            s.reconciles.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            s.reconcile_errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            s.reconcile_time.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            s.active_workers.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller (0: no limit)",
            s.max_concurrent.clone(),
        );
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            s.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            s.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            s.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            s.work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            s.retries.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
            s.unfinished.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            s.longest.clone(),
        );
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            s.requests.clone(),
        );
        registry.register(
            "rest_client_request_duration_seconds",
            "Request latency in seconds, broken down by verb and host",
            s.request_duration.clone(),
        );
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
            s.leader.clone(),
        );
        registry.register_collector(Box::new(ProcessCollector));
        standard
    }

    pub(super) fn controller(&self, controller: &str, max_concurrent: u16) -> ControllerMetrics {
        let label = ControllerLabel {
            controller: controller.to_string(),
        };
        let result = |result: &str| {
            self.reconciles
                .get_or_create(&ResultLabels {
                    controller: controller.to_string(),
                    result: result.to_string(),
                })
                .clone()
        };
        self.max_concurrent
            .get_or_create(&label)
            .set(i64::from(max_concurrent));
        ControllerMetrics {
            success: result("success"),
            error: result("error"),
            requeue: result("requeue"),
            requeue_after: result("requeue_after"),
            errors: self.reconcile_errors.get_or_create(&label).clone(),
            time: self.reconcile_time.get_or_create(&label).clone(),
            active: self.active_workers.get_or_create(&label).clone(),
        }
    }

    pub(super) fn queue(&self, controller: &str) -> QueueMetrics {
        let labels = QueueLabels {
            name: controller.to_string(),
            controller: controller.to_string(),
        };
        let depth = |priority: &str| {
            self.depth
                .get_or_create(&DepthLabels {
                    name: controller.to_string(),
                    controller: controller.to_string(),
                    priority: priority.to_string(),
                })
                .clone()
        };
        QueueMetrics {
            depth_urgent: depth("0"),
            depth_routine: depth("-100"),
            adds: self.adds.get_or_create(&labels).clone(),
            queue_duration: self.queue_duration.get_or_create(&labels).clone(),
            work_duration: self.work_duration.get_or_create(&labels).clone(),
            retries: self.retries.get_or_create(&labels).clone(),
            unfinished: self.unfinished.get_or_create(&labels).clone(),
            longest: self.longest.get_or_create(&labels).clone(),
        }
    }

    pub(super) fn request(&self, method: &str, code: &str, host: &str, took: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                code: code.to_string(),
                method: method.to_string(),
                host: host.to_string(),
            })
            .inc();
        self.request_duration
            .get_or_create(&LatencyLabels {
                verb: method.to_string(),
                host: host.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    pub(super) fn set_leader(&self, lease: &str, leading: bool) {
        self.leader
            .get_or_create(&LeaseLabel {
                name: lease.to_string(),
            })
            .set(i64::from(leading));
    }
}

/// What one reconcile ended with, as controller-runtime's `result` label says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    Success,
    Error,
    /// Asked to be reconciled again at once.
    Requeue,
    /// Asked to be reconciled again after a delay.
    RequeueAfter,
}

/// One controller's reconcile families (see the module docs).
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    success: Counter,
    error: Counter,
    requeue: Counter,
    requeue_after: Counter,
    errors: Counter,
    time: Histogram,
    active: Gauge,
}

impl ControllerMetrics {
    /// A reconcile started: one more active worker until [`ControllerMetrics::finished`].
    pub fn started(&self) -> Instant {
        self.active.inc();
        Instant::now()
    }

    /// The reconcile started at `started` ended with `result`.
    pub fn finished(&self, started: Instant, result: ReconcileResult) {
        self.active.dec();
        self.time.observe(started.elapsed().as_secs_f64());
        match result {
            ReconcileResult::Success => self.success.inc(),
            ReconcileResult::Error => {
                self.errors.inc();
                self.error.inc()
            }
            ReconcileResult::Requeue => self.requeue.inc(),
            ReconcileResult::RequeueAfter => self.requeue_after.inc(),
        };
    }
}

/// One controller's work queue families (see the module docs).
#[derive(Clone, Debug)]
pub struct QueueMetrics {
    depth_urgent: Gauge,
    depth_routine: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
    unfinished: F64Gauge,
    longest: F64Gauge,
}

impl QueueMetrics {
    /// The requests due now: urgent ones, and routine ones.
    pub fn depth(&self, urgent: usize, routine: usize) {
        self.depth_urgent.set(saturating_i64(urgent));
        self.depth_routine.set(saturating_i64(routine));
    }

    /// `added` new requests were queued.
    pub fn added(&self, added: u64) {
        if added > 0 {
            self.adds.inc_by(added);
        }
    }

    /// A request was taken after waiting `waited`.
    pub fn taken(&self, waited: Duration) {
        self.queue_duration.observe(waited.as_secs_f64());
    }

    /// A reconcile that took `worked` ended.
    pub fn done(&self, worked: Duration) {
        self.work_duration.observe(worked.as_secs_f64());
    }

    /// A failed reconcile was queued again after its backoff.
    pub fn retried(&self) {
        self.retries.inc();
    }

    /// The reconciles still running: their time so far, summed, and the longest.
    pub fn in_progress(&self, total: Duration, longest: Duration) {
        self.unfinished.set(total.as_secs_f64());
        self.longest.set(longest.as_secs_f64());
    }
}

fn saturating_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The `process_*` set at each scrape, read by metrics-process (client_golang's process
/// collector rewritten in Rust; on Linux through procfs).
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = metrics_process::collector::collect();
        if let Some(seconds) = now.cpu_seconds_total {
            let counter = ConstCounter::new(seconds);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                "process_open_fds",
                "Number of open file descriptors",
                now.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                now.max_fds,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                now.virtual_memory_bytes,
            ),
            (
                "process_virtual_memory_max_bytes",
                "Maximum amount of virtual memory available in bytes",
                now.virtual_memory_max_bytes,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                now.resident_memory_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                now.start_time_seconds,
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                now.threads,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        Ok(())
    }
}

/// A tower layer on the kube client's HTTP stack that counts every request it sends and times it
/// until its response's headers (`rest_client_requests_total`,
/// `rest_client_request_duration_seconds`). It sits inside the retry of `429`, `503` and `504`
/// (see `main.rs`), so each attempt counts with its own status, as client-go counts them; a
/// transport failure counts as code `<error>`, as client-go counts it.
#[derive(Clone)]
pub struct RestClientLayer {
    metrics: super::Metrics,
    host: Arc<str>,
}

impl RestClientLayer {
    /// Requests to `host` (the API server's `host:port`).
    pub fn new(metrics: super::Metrics, host: &str) -> RestClientLayer {
        RestClientLayer {
            metrics,
            host: host.into(),
        }
    }
}

impl<S> tower::Layer<S> for RestClientLayer {
    type Service = RestClient<S>;

    fn layer(&self, inner: S) -> RestClient<S> {
        RestClient {
            inner,
            metrics: self.metrics.clone(),
            host: self.host.clone(),
        }
    }
}

/// The service of [`RestClientLayer`].
#[derive(Clone)]
pub struct RestClient<S> {
    inner: S,
    metrics: super::Metrics,
    host: Arc<str>,
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for RestClient<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    ResBody: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let method = request.method().as_str().to_string();
        let started = Instant::now();
        let response = self.inner.call(request);
        let (metrics, host) = (self.metrics.clone(), self.host.clone());
        Box::pin(async move {
            let response = response.await;
            let code = match &response {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            metrics.rest_client_request(&method, &code, &host, started.elapsed());
            response
        })
    }
}
