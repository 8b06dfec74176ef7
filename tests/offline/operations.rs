//! The operations files in `config/`: the alert rules (`config/prometheus/prometheusrule.yaml`)
//! pass `promtool check rules` and their unit tests (`rules.test.yaml`, `promtool test rules`),
//! and the rules and the Grafana dashboard (`config/grafana/inpool.json`) name only metrics inpool
//! exports. No control plane is needed.
//!
//! promtool comes from Debian's `prometheus` package, which `.ci/run` installs when it is
//! missing. Without it the promtool test fails under CI (`CI` set) and elsewhere says NOT RUN.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use inpool::api::PoolKey;
use inpool::telemetry::Metrics;
use inpool_testenv::support;
use serde_json::Value;

fn config(path: &str) -> PathBuf {
    support::repo_root().join("config").join(path)
}

/// The sample names inpool's metrics endpoint can show, every family recorded once.
fn exported_names() -> BTreeSet<String> {
    let metrics = Metrics::new();
    let pool = PoolKey::in_cluster("ns", "p");
    metrics.pool_capacity(&pool, 10, 1, 9, 0);
    metrics.pool_waiting_claims(&pool, 0);
    metrics.allocation(&pool);
    metrics.release(&pool);
    metrics.failure("PoolExhausted");
    metrics.claim_ready_latency(1.0);
    metrics.reconcile("claim");
    metrics.reconcile_error("claim", "conflict");
    metrics.state_drift("pool");
    metrics.orphan_address_released();
    metrics.stray_reservation_collected();
    metrics.audit_completed();
    metrics.set_leader(true);
    metrics
        .encode()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// The `inpool_…` names a PromQL expression uses.
fn names_in(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("inpool_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        names.push(name);
    }
    names
}

fn assert_exported(what: &str, exprs: &[String]) {
    let exported = exported_names();
    assert!(exported.contains("inpool_pool_free"), "{exported:?}");
    let mut checked = 0;
    for expr in exprs {
        for name in names_in(expr) {
            assert!(
                exported.contains(&name),
                "{what}: {name} (in `{expr}`) is not a metric inpool exports; it exports {exported:?}"
            );
            checked += 1;
        }
    }
    assert!(
        checked >= exprs.len(),
        "{what}: every expression names a metric"
    );
}

fn rule_groups() -> Value {
    let text = std::fs::read_to_string(config("prometheus/prometheusrule.yaml")).unwrap();
    let rule: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"]["groups"].clone()
}

#[test]
fn the_dashboard_names_only_metrics_inpool_exports() {
    let text = std::fs::read_to_string(config("grafana/inpool.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    assert_exported("config/grafana/inpool.json", &exprs);
}

#[test]
fn the_alert_rules_name_only_metrics_inpool_exports() {
    let exprs: Vec<String> = rule_groups()
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| r["expr"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(exprs.len(), 6, "{exprs:?}");
    assert_exported("config/prometheus/prometheusrule.yaml", &exprs);
}

#[test]
fn promtool_checks_the_alert_rules_and_runs_their_unit_tests() {
    if !support::tool_or_not_run(
        "promtool",
        "Debian's prometheus package",
        "promtool_checks_the_alert_rules_and_runs_their_unit_tests",
    ) {
        return;
    }
    // promtool reads a plain rules file: the PrometheusRule's spec, beside the unit tests.
    let dir = support::repo_root().join("target").join("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let rules = serde_json::json!({ "groups": rule_groups() });
    std::fs::write(
        dir.join("rules.yaml"),
        serde_json::to_string(&rules).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        config("prometheus/rules.test.yaml"),
        dir.join("rules.test.yaml"),
    )
    .unwrap();
    for args in [
        ["check", "rules", "rules.yaml"],
        ["test", "rules", "rules.test.yaml"],
    ] {
        let output = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "promtool {args:?}:\n{said}");
        assert!(said.contains("SUCCESS"), "promtool {args:?}:\n{said}");
    }
}
