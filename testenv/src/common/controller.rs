//! An inpool controller inside the test process, for one namespace, audited every second.

use std::time::Duration;

use inpool::cli::Settings;
use inpool::telemetry::{HealthState, Metrics};
use kube::Client;

use super::reads::nonzero_samples;

/// An inpool controller running for one namespace until the test ends, audited every second
/// (see `controllers::audit`). When the test ends it asserts that no audit found drift between
/// the controller's memory and the API server: every controller test checks the audit too.
pub struct RunningController {
    task: tokio::task::JoinHandle<()>,
    metrics: Metrics,
}

/// Runs an inpool controller for one namespace until the test ends.
pub fn start_controller(client: &Client, ns: &str) -> RunningController {
    let settings = Settings {
        namespace: Some(ns.to_string()),
        audit_interval: Duration::from_secs(1),
        stray_reservation_age: Duration::from_secs(5),
        ..Settings::default()
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let client = client.clone();
    let metrics = Metrics::default();
    let task = {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let result =
                inpool::controllers::run(client, settings, metrics, HealthState::default()).await;
            panic!("controller stopped: {result:?}");
        })
    };
    RunningController { task, metrics }
}

impl RunningController {
    /// The controller's metrics, as `/metrics` would show them.
    pub fn metrics(&self) -> String {
        self.metrics.encode()
    }

    /// The `inpool_state_drift_total` samples that are not zero.
    pub fn drift(&self) -> Vec<String> {
        nonzero_samples(&self.metrics.encode(), "inpool_state_drift_total")
    }
}

impl Drop for RunningController {
    fn drop(&mut self) {
        self.task.abort();
        if !std::thread::panicking() {
            let drift = self.drift();
            assert!(drift.is_empty(), "the audit found drift: {drift:?}");
        }
    }
}
