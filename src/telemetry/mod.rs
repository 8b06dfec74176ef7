//! Observability of the `inpool` process: logging set-up, Prometheus metrics, and the HTTP
//! servers for `/metrics`, `/healthz` and `/readyz`.
//!
//! - [`logging`]: `tracing` subscriber, text or JSON, filtered by an EnvFilter directive;
//! - [`metrics`]: [`Metrics`], the registry the controllers record into (names in
//!   docs/monitoring.md);
//! - [`pool_series`]: the per-pool series, one entry per pool;
//! - [`standard`]: the families every controller-runtime manager exports (reconciles, work
//!   queue, API client, process, leader election);
//! - [`tls`]: the diagnostics server's TLS versions, suites and curves;
//! - [`server`]: [`HealthState`] and the plain HTTP servers (health; insecure `/metrics`);
//! - [`diagnostics`]: `/metrics` over HTTPS for callers the API server authenticates and
//!   authorizes.

pub mod diagnostics;
pub mod logging;
pub mod metrics;
mod pool_series;
pub mod server;
pub mod standard;
pub mod tls;

pub use logging::LogFormat;
pub use metrics::Metrics;
pub use server::{HealthState, Paths};
pub use standard::{ControllerMetrics, QueueMetrics, ReconcileResult, RestClientLayer};
