//! inpool's own Grafana dashboard (`config/grafana/inpool.json`) over a running `inpool`, scraped
//! by a real Prometheus (Debian's 2.42): its selectors list what Grafana would list (the job, the
//! pool namespace, the pools, the controllers), every panel query returns data with the
//! selectors at "All", except those over counters that only failures create, and a pool picked
//! in the pool selector narrows every pool panel to that pool.

use std::time::{Duration, Instant};

use inpool::api::InClusterIPPool;
use inpool_testenv::{common, support};
use kube::api::Api;
use serde_json::Value;

use super::dashboard::{Scraped, all_of, queries};
use super::diagnostics::{encode, prometheus_api};
use common::{claim, create, one_inpool_test_at_a_time, pool};

/// Metrics whose series appear only once something failed (drift, a failed reconcile, an API
/// request answered with an error): their queries may return nothing in a healthy run.
const ONLY_ON_FAILURE: &[&str] = &[
    "inpool_state_drift_total",
    "inpool_reconcile_errors_total",
    "rest_client_requests_total",
];

/// Grafana's rendering of a variable into a query: each `$name` replaced by its value.
fn fill(expr: &str, values: &[(String, String)]) -> String {
    let mut filled = expr.to_string();
    for (name, value) in values {
        filled = filled
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    filled
}

/// The series Prometheus answers `expr` with, or why not (no answer, or an error).
async fn answer(web: std::net::SocketAddr, expr: &str) -> Result<Vec<Value>, String> {
    match prometheus_api(web, &format!("query?query={}", encode(expr))).await {
        Some(answer) if answer["status"] == "success" => Ok(answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()),
        other => Err(format!("{other:?}")),
    }
}

/// The series Prometheus answers `expr` with; panics if it refuses the query.
async fn series(web: std::net::SocketAddr, expr: &str) -> Vec<Value> {
    answer(web, expr)
        .await
        .unwrap_or_else(|e| panic!("Prometheus refused `{expr}`: {e}"))
}

#[tokio::test]
async fn inpools_dashboard_selects_and_shows_a_running_inpool() {
    let test = "inpools_dashboard_selects_and_shows_a_running_inpool";
    if !support::tool_or_not_run("prometheus", "Debian's prometheus package", test) {
        return;
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(support::repo_root().join("config/grafana/inpool.json")).unwrap(),
    )
    .unwrap();

    let _turn = one_inpool_test_at_a_time().await;
    let scraped = Scraped::start("inpool-dashboard").await;
    let web = scraped.web;
    // A second pool, which the pool selector must be able to leave out.
    create(
        &Api::<InClusterIPPool>::namespaced(scraped.client.clone(), &scraped.ns),
        &pool("other", &["10.89.1.10-10.89.1.20"], 24, None),
    )
    .await;
    create(&scraped.claims, &claim("o", "other")).await;

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let other = answer(web, "inpool_pool_used{pool_name=\"other\"} > 0").await;
        let rated = answer(web, "rate(controller_runtime_reconcile_total[5m])").await;
        if other.as_ref().is_ok_and(|s| !s.is_empty())
            && rated.as_ref().is_ok_and(|s| !s.is_empty())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus has no pool or reconcile series of inpool after 60 s ({other:?}, \
             {rated:?}); {}",
            scraped.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Work while Prometheus watches, so that the rates have something to show, in both pools.
    create(&scraped.claims, &claim("e", "dashboard")).await;
    for released in ["a", "o"] {
        scraped
            .claims
            .delete(released, &kube::api::DeleteParams::default())
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(5)).await;

    // The selectors, in the dashboard's order, each at "All" for those after it: Grafana's
    // label_values(SELECTOR, LABEL) is Prometheus's label values of LABEL over SELECTOR.
    let mut all: Vec<(String, String)> = Vec::new();
    let mut listed: Vec<(String, Vec<String>)> = Vec::new();
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let name = variable["name"].as_str().unwrap().to_string();
        let query = variable["query"].as_str().unwrap();
        let (selector, label) = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.rsplit_once(','))
            .unwrap_or_else(|| panic!("{name}: {query}"));
        let selector = fill(selector.trim(), &all);
        let answer = prometheus_api(
            web,
            &format!(
                "label/{}/values?match[]={}",
                label.trim(),
                encode(&selector)
            ),
        )
        .await
        .unwrap_or_else(|| panic!("{name}: no answer for {selector}"));
        let values: Vec<String> = answer["data"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: {answer}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        let value = match variable["allValue"].as_str() {
            Some(all_value) => all_value.to_string(),
            None => all_of(&values),
        };
        listed.push((name.clone(), values));
        all.push((name, value));
    }
    let values_of =
        |name: &str| -> &Vec<String> { &listed.iter().find(|(n, _)| n == name).unwrap().1 };
    assert_eq!(values_of("job"), &["inpool"], "{listed:?}");
    assert_eq!(
        values_of("namespace"),
        std::slice::from_ref(&scraped.ns),
        "{listed:?}"
    );
    assert_eq!(values_of("pool"), &["dashboard", "other"], "{listed:?}");
    assert!(
        values_of("controller").contains(&"ipaddressclaim".to_string()),
        "{listed:?}"
    );

    let queries = queries(&dashboard);
    assert!(queries.len() >= 20, "{queries:?}");
    let mut empty = Vec::new();
    for (title, expr) in &queries {
        let filled = fill(expr, &all);
        assert!(!filled.contains('$'), "{title}: {filled}");
        if series(web, &filled).await.is_empty()
            && !ONLY_ON_FAILURE.iter().any(|name| filled.contains(name))
        {
            empty.push(format!("{title}: {filled}"));
        }
    }
    assert!(
        empty.is_empty(),
        "{} of {} queries returned no data:\n{}\ninpool's /metrics:\n{}",
        empty.len(),
        queries.len(),
        empty.join("\n"),
        scraped
            .inpool
            .get("/metrics")
            .await
            .map(|r| r.body)
            .unwrap_or_default()
    );

    // The pool `other` picked: every pool panel shows it, and nothing else.
    let picked: Vec<(String, String)> = all
        .iter()
        .map(|(name, value)| match name.as_str() {
            "namespace" => (name.clone(), scraped.ns.clone()),
            "pool" => (name.clone(), "other".to_string()),
            _ => (name.clone(), value.clone()),
        })
        .collect();
    let mut pool_panels = 0;
    for (title, expr) in queries.iter().filter(|(_, e)| e.contains("$pool")) {
        let filled = fill(expr, &picked);
        let found = series(web, &filled).await;
        assert!(!found.is_empty(), "{title}: {filled} shows nothing");
        for one in &found {
            assert_eq!(
                one["metric"]["pool_name"], "other",
                "{title}: {filled}: {one}"
            );
        }
        pool_panels += 1;
    }
    assert!(pool_panels >= 6, "{pool_panels} pool queries");
    inpool_testenv::say(&format!(
        "inpool's dashboard: {} queries over a running inpool, {} of them narrowed to one pool",
        queries.len(),
        pool_panels
    ));
}
