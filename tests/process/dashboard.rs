//! Cluster API's controller-runtime dashboard (`hack/observability/grafana/dashboards/
//! controller-runtime.json` of the Cluster API v1.14.2 Go module, read from the module, never
//! copied) over a running `inpool`, scraped by a real Prometheus (Debian's 2.42): every query of
//! the dashboard over a family inpool exports returns data for inpool's controllers, with the
//! template variables filled in as Grafana fills them.
//!
//! The dashboard's other queries read families no controller-runtime manager exports itself:
//! kube-state-metrics (`kube_*`) and the kubelet's cAdvisor (`container_*`), which a cluster's
//! monitoring adds beside any pod; Go's runtime (`go_*`), which a Rust process has not; the
//! webhook server's (`controller_runtime_webhook_*`), as inpool serves no webhooks; and CAPI's own
//! `capi_*`, each beside a controller-runtime alternative. The test lists them by family, so a
//! query over a family nobody named fails it.
//!
//! The six histogram and heatmap panels select a histogram by its bare name
//! (`rate(controller_runtime_reconcile_time_seconds{..}[..])`): that is a native histogram, which
//! needs Prometheus's `native-histograms` feature and the protobuf exposition, and which
//! inpool's metrics library (prometheus-client) does not write. Their families are exported as
//! classic histograms (`_bucket`, `_sum`, `_count`), which the dashboard's quantile and average
//! panels read and this test checks; the six are listed as native-only, by name.

use std::time::{Duration, Instant};

use inpool::api::{IPAddressClaim, InClusterIPPool};
use inpool_testenv::{capi, common, support};
use kube::api::Api;
use serde_json::{Value, json};

use super::diagnostics::{encode, free_port, prometheus_api, start_prometheus};
use common::{Inpool, claim, create, one_inpool_test_at_a_time, pool, unique};

/// The families inpool exports that the dashboard reads: each query over one must return data.
const EXPORTED: &[&str] = &[
    "controller_runtime_reconcile_total",
    "controller_runtime_reconcile_errors_total",
    "controller_runtime_reconcile_time_seconds",
    "controller_runtime_active_workers",
    "controller_runtime_max_concurrent_reconciles",
    "workqueue_",
    "rest_client_",
    "process_",
];

/// Families the dashboard reads that come from elsewhere (see the module docs).
const NOT_INPOOLS: &[&str] = &[
    "kube_",
    "container_",
    "go_",
    "controller_runtime_webhook_",
    "capi_",
];

/// The histogram families that the dashboard also reads as native histograms (by bare name).
const HISTOGRAMS: &[&str] = &[
    "controller_runtime_reconcile_time_seconds",
    "workqueue_queue_duration_seconds",
    "workqueue_work_duration_seconds",
];

/// The label the Kubernetes service discovery gives a pod's series, which the dashboard filters
/// on; the test's static scrape sets it.
const POD: &str = "inpool-controller-manager-test";

/// Every `(panel title, expression)` of the dashboard, rows and nested panels included.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for panel in panels.as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str().filter(|e| !e.trim().is_empty()) {
                    let title = panel["title"].as_str().unwrap_or_default().to_string();
                    out.push((title, expr.to_string()));
                }
            }
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The metric names an expression reads: identifiers followed by `{`, `[` or a space-free end.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_alphabetic() || bytes[i] == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &expr[start..i];
            let next = expr[i..].trim_start().chars().next();
            let is_metric = word.contains('_')
                && !word.starts_with("__")
                && matches!(next, Some('{') | Some('['))
                && !expr[..start].ends_with('$');
            if is_metric {
                names.push(word.to_string());
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Grafana's rendering of a multi-value variable set to All for Prometheus: a regex alternation.
fn all_of(values: &[String]) -> String {
    format!("({})", values.join("|"))
}

#[tokio::test]
async fn capi_controller_runtime_dashboard_queries_return_data_for_inpool() {
    let test = "capi_controller_runtime_dashboard_queries_return_data_for_inpool";
    if !support::tool_or_not_run("prometheus", "Debian's prometheus package", test) {
        return;
    }
    let dashboard_file = capi::module_dir()
        .unwrap()
        .join("hack/observability/grafana/dashboards/controller-runtime.json");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(&dashboard_file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dashboard_file.display())),
    )
    .unwrap();
    let queries = queries(&dashboard);
    assert!(queries.len() > 40, "{} queries", queries.len());

    let _turn = one_inpool_test_at_a_time().await;
    let (client, ns) = support::env().namespace().await;
    create(
        &Api::<InClusterIPPool>::namespaced(client.clone(), &ns),
        &pool("dashboard", &["10.89.0.10-10.89.0.12"], 24, None),
    )
    .await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    // Three realised, one waiting for space.
    for name in ["a", "b", "c", "d"] {
        create(&claims, &claim(name, "dashboard")).await;
    }
    let lease = unique("dashboard");
    let inpool = Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        "dashboard",
        support::env().kubeconfig(),
        &[
            &format!("--namespace={ns}"),
            "--leader-elect",
            &format!("--leader-election-namespace={ns}"),
            &format!("--leader-election-lease-name={lease}"),
        ],
    );

    let dir = std::env::temp_dir().join(unique("inpool-dashboard"));
    std::fs::create_dir_all(&dir).unwrap();
    let web: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = json!({
        "global": { "scrape_interval": "1s", "evaluation_interval": "1s" },
        "scrape_configs": [{
            "job_name": "inpool",
            "static_configs": [{
                "targets": [inpool.diagnostics_addr().to_string()],
                "labels": { "pod": POD, "container": "manager" },
            }],
        }],
    });
    let _prometheus = start_prometheus(&dir, web, &config);
    let query = |expr: String| async move {
        prometheus_api(web, &format!("query?query={}", encode(&expr))).await
    };

    // The controllers, as Grafana's `Controller` variable lists them (label values of
    // controller_runtime_active_workers), once two scrapes have landed.
    let deadline = Instant::now() + Duration::from_secs(60);
    let controllers: Vec<String> = loop {
        let answer = query(format!(
            "controller_runtime_active_workers{{pod=\"{POD}\"}}"
        ))
        .await;
        let found: Vec<String> = answer
            .as_ref()
            .and_then(|a| a["data"]["result"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|r| r["metric"]["controller"].as_str().map(str::to_string))
            .collect();
        let rate = query(format!(
            "rate(controller_runtime_reconcile_total{{pod=\"{POD}\",controller=\"ipaddressclaim\"}}[5m])"
        ))
        .await;
        let rated = rate
            .as_ref()
            .and_then(|a| a["data"]["result"].as_array())
            .is_some_and(|r| !r.is_empty());
        if found.contains(&"ipaddressclaim".to_string()) && rated {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus has no controller_runtime series of inpool after 60 s: {answer:?}; \
             Prometheus log:\n{}\ninpool logs:\n{}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default(),
            inpool.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Work while Prometheus watches, so that the rates have something to show: a claim more,
    // one released, then a few scrapes.
    create(&claims, &claim("e", "dashboard")).await;
    claims
        .delete("a", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;

    for expected in [
        "ipaddressclaim",
        "inclusterippool",
        "globalinclusterippool",
        "inclusterprefixpool",
        "globalinclusterprefixpool",
        "ipaddressreservation",
    ] {
        assert!(
            controllers.iter().any(|c| c == expected),
            "{expected} not in {controllers:?}"
        );
    }

    let mut checked = 0;
    let mut empty = Vec::new();
    let mut native = Vec::new();
    for (title, expr) in &queries {
        let names = metric_names(expr);
        let ours = names
            .iter()
            .any(|n| EXPORTED.iter().any(|family| n.starts_with(family)));
        if ours
            && names
                .iter()
                .filter(|n| !n.starts_with("capi_"))
                .all(|n| HISTOGRAMS.contains(&n.as_str()))
        {
            native.push(title.clone());
            continue;
        }
        if !ours {
            for name in &names {
                assert!(
                    NOT_INPOOLS.iter().any(|family| name.starts_with(family)),
                    "panel {title:?} reads {name}, which is neither inpool's nor listed as \
                     another exporter's: {expr}"
                );
            }
            continue;
        }
        let filled = expr
            .replace("$Pod", POD)
            .replace("$Controller", &all_of(&controllers))
            .replace("$Container", "manager")
            .replace("$__rate_interval", "20s");
        let answer = query(filled.clone()).await;
        let results = answer
            .as_ref()
            .and_then(|a| a["data"]["result"].as_array())
            .map_or(0, Vec::len);
        checked += 1;
        if results == 0 {
            empty.push(format!("{title}: {filled} -> {answer:?}"));
        }
    }
    assert!(
        empty.is_empty(),
        "{} of {checked} queries over inpool's families returned no data:\n{}\ninpool's \
         /metrics:\n{}",
        empty.len(),
        empty.join("\n"),
        inpool
            .get("/metrics")
            .await
            .map(|r| r.body)
            .unwrap_or_default()
    );
    assert!(checked >= 30, "only {checked} queries were inpool's");
    assert!(
        native
            .iter()
            .all(|t| t.ends_with("(histogram)") || t.ends_with("(heatmap)")),
        "{native:?}"
    );
    assert_eq!(native.len(), 6, "{native:?}");
    inpool_testenv::say(&format!(
        "{checked} of the dashboard's {} queries read inpool's families; all returned data",
        queries.len()
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
