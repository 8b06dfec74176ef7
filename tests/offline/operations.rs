//! The operations files in `config/`: the alert rules (`config/prometheus/prometheusrule.yaml`)
//! pass `promtool check rules` and their unit tests (`rules.test.yaml`, `promtool test rules`),
//! each alert's `runbook_url` leads to its section of `docs/runbooks.md` (and every section link of
//! the runbooks and of the operations pages, `docs/operations.md` and the pages it indexes, names
//! a heading that exists), and the rules and the Grafana dashboard (`config/grafana/inpool.json`)
//! name only metrics inpool exports; the dashboard's queries parse (promtool), filter by its pool
//! and job selectors, and use only the template variables it defines. No control plane is needed.
//!
//! promtool comes from Debian's `prometheus` package, which `.ci/run` installs when it is
//! missing. Without it the promtool tests fail under CI (`CI` set) and elsewhere say NOT RUN.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use inpool::api::PoolKey;
use inpool::telemetry::{Metrics, ReconcileResult};
use inpool_testenv::support;
use serde_json::Value;

fn config(path: &str) -> PathBuf {
    support::repo_root().join("config").join(path)
}

/// The sample lines inpool's metrics endpoint can show, every family recorded once (the pool
/// families for the pool `ns/p`).
fn exported_samples() -> Vec<String> {
    let metrics = Metrics::new();
    let pool = PoolKey::in_cluster("ns", "p");
    metrics.pool_capacity(&pool, 10, 1, 9, 0);
    metrics.pool_waiting_claims(&pool, 0);
    metrics.foreign_addresses(&pool, 1);
    metrics.reference_provider_lease(true);
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
    metrics.registry_sizes(&inpool::telemetry::metrics::RegistrySizes::default());
    metrics.elect_on("inpool-leader");
    metrics.set_leader(true);
    let controller = metrics.controller("ipaddressclaim", 16);
    controller.finished(controller.started(), ReconcileResult::Error);
    let queue = metrics.queue("ipaddressclaim");
    queue.depth(1, 1);
    queue.added(1);
    queue.taken(Duration::from_millis(1));
    queue.done(Duration::from_millis(1));
    queue.retried();
    queue.in_progress(Duration::from_millis(1), Duration::from_millis(1));
    metrics.rest_client_request("GET", "200", "api", Duration::from_millis(1));
    metrics
        .encode()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The name of a sample line.
fn sample_name(line: &str) -> String {
    line.split(['{', ' ']).next().unwrap().to_string()
}

/// The sample names inpool's metrics endpoint can show.
fn exported_names() -> BTreeSet<String> {
    exported_samples().iter().map(|l| sample_name(l)).collect()
}

/// The prefixes of the metric families the rules and the dashboard may name: inpool's own and
/// those every controller-runtime manager exports.
const FAMILIES: [&str; 6] = [
    "inpool_",
    "controller_runtime_",
    "workqueue_",
    "rest_client_",
    "process_",
    "leader_election_",
];

/// The identifiers of a PromQL expression outside its quoted strings, each with its byte offset.
fn identifiers(expr: &str) -> Vec<(usize, &str)> {
    let mut found = Vec::new();
    let mut quote = None;
    let mut start = None;
    let mut escaped = false;
    for (at, c) in expr.char_indices() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        let part_of_name = c.is_ascii_alphanumeric() || c == '_' || c == ':';
        match (part_of_name, start) {
            (true, None) => start = Some(at),
            (false, Some(from)) => {
                found.push((from, &expr[from..at]));
                start = None;
            }
            _ => {}
        }
        if c == '"' || c == '\'' || c == '`' {
            quote = Some(c);
        }
    }
    if let Some(from) = start {
        found.push((from, &expr[from..]));
    }
    found
}

/// The metric names (of [`FAMILIES`]) a PromQL expression uses.
fn names_in(expr: &str) -> Vec<String> {
    identifiers(expr)
        .into_iter()
        .map(|(_, name)| name)
        .filter(|name| FAMILIES.iter().any(|f| name.starts_with(f)))
        .map(str::to_string)
        .collect()
}

/// Each use of a metric in `expr`, with the label matchers right after it ("" when none).
fn uses_in(expr: &str) -> Vec<(String, String)> {
    identifiers(expr)
        .into_iter()
        .filter(|(_, name)| FAMILIES.iter().any(|f| name.starts_with(f)))
        .map(|(at, name)| {
            let rest = &expr[at + name.len()..];
            let matchers = match rest.strip_prefix('{') {
                Some(inner) => inner[..inner.find('}').expect("closing brace")].to_string(),
                None => String::new(),
            };
            (name.to_string(), matchers)
        })
        .collect()
}

fn assert_exported(what: &str, exprs: &[String]) {
    let exported = exported_names();
    for family in [
        "inpool_pool_free",
        "workqueue_depth",
        "process_resident_memory_bytes",
    ] {
        assert!(exported.contains(family), "{family} not in {exported:?}");
    }
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

fn dashboard() -> Value {
    let text = std::fs::read_to_string(config("grafana/inpool.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Each panel query of the dashboard, with its panel's title.
fn panel_queries(dashboard: &Value) -> Vec<(String, String)> {
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap().to_string();
            p["targets"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap().to_string()))
        })
        .collect()
}

/// The dashboard's template variables by name.
fn variables(dashboard: &Value) -> BTreeMap<String, Value> {
    dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap().to_string(), v.clone()))
        .collect()
}

/// A query variable's `label_values(SELECTOR, LABEL)`: the selector and the label.
fn label_values(variable: &Value) -> (String, String) {
    let query = variable["query"].as_str().expect("a query variable");
    let inner = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not label_values(...): {query}"));
    let (selector, label) = inner
        .rsplit_once(',')
        .expect("label_values(selector, label)");
    (selector.trim().to_string(), label.trim().to_string())
}

/// Every PromQL expression of the dashboard: the panels' queries and the variables' selectors.
fn dashboard_exprs(dashboard: &Value) -> Vec<String> {
    let mut exprs: Vec<String> = panel_queries(dashboard)
        .into_iter()
        .map(|(_, expr)| expr)
        .collect();
    for variable in variables(dashboard).values() {
        if variable["type"] == "query" {
            exprs.push(label_values(variable).0);
        }
    }
    exprs
}

/// The sample names whose series carry a pool's labels.
fn pool_labelled_names() -> BTreeSet<String> {
    exported_samples()
        .iter()
        .filter(|l| l.contains("pool_name=\"p\""))
        .map(|l| sample_name(l))
        .collect()
}

#[test]
fn the_dashboard_names_only_metrics_inpool_exports() {
    let exprs = dashboard_exprs(&dashboard());
    assert!(exprs.len() >= 20, "{exprs:?}");
    assert_exported("config/grafana/inpool.json", &exprs);
}

#[test]
fn the_dashboard_selects_pools_and_inpools_processes() {
    let dashboard = dashboard();
    let variables = variables(&dashboard);

    // The pool selector: pool names of a pool gauge, narrowed by the pool namespace. "All" must
    // match series without a namespace (global pools: Prometheus drops an empty label), hence
    // `.*` rather than the list of namespaces.
    let pool_names = pool_labelled_names();
    assert!(pool_names.contains("inpool_pool_free"), "{pool_names:?}");
    for (variable, label) in [("namespace", "pool_namespace"), ("pool", "pool_name")] {
        let v = &variables[variable];
        let (selector, by) = label_values(v);
        assert_eq!(by, label, "{variable}");
        let names = names_in(&selector);
        assert!(
            names.len() == 1 && pool_names.contains(&names[0]),
            "{variable}: {selector} is not a pool gauge"
        );
        assert_eq!(v["includeAll"], true, "{variable}");
        assert_eq!(v["allValue"], ".*", "{variable}");
    }
    assert!(
        label_values(&variables["pool"])
            .0
            .contains("pool_namespace=~\"$namespace\"")
    );
    // The job selector: the jobs that scrape inpool. Its "All" is their list, never `.*`: the
    // standard families (process_*, rest_client_*) are every scraped process's.
    let job = &variables["job"];
    assert_eq!(
        label_values(job),
        ("inpool_build_info".to_string(), "job".to_string())
    );
    assert!(job["allValue"].is_null(), "{job}");
    let (selector, by) = label_values(&variables["controller"]);
    assert_eq!(by, "controller");
    assert!(
        names_in(&selector)[0].starts_with("controller_runtime_"),
        "{selector}"
    );

    let queries = panel_queries(&dashboard);
    for (title, expr) in &queries {
        // Every variable a query uses is defined.
        for (at, _) in expr.match_indices('$') {
            let used: String = expr[at + 1..]
                .trim_start_matches('{')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                variables.contains_key(&used),
                "{title}: `{expr}` uses ${used}, which the dashboard does not define"
            );
        }
        for (name, matchers) in uses_in(expr) {
            assert!(
                matchers.contains("job=~\"$job\""),
                "{title}: {name} in `{expr}` is not narrowed to the selected jobs"
            );
            if pool_names.contains(&name) {
                for wanted in ["pool_namespace=~\"$namespace\"", "pool_name=~\"$pool\""] {
                    assert!(
                        matchers.contains(wanted),
                        "{title}: {name} in `{expr}` lacks {wanted}: the pool selector must apply"
                    );
                }
            }
        }
    }

    // The panels of the standard families: queue depth, reconcile latency, API-client errors and
    // memory, by controller where the family has one.
    let panel_of = |wanted: &str| -> Vec<&String> {
        queries
            .iter()
            .filter(|(_, expr)| names_in(expr).iter().any(|n| n == wanted))
            .map(|(_, expr)| expr)
            .collect()
    };
    for (family, also) in [
        ("workqueue_depth", "name=~\"$controller\""),
        (
            "controller_runtime_reconcile_time_seconds_bucket",
            "controller=~\"$controller\"",
        ),
        (
            "controller_runtime_reconcile_errors_total",
            "controller=~\"$controller\"",
        ),
        ("rest_client_requests_total", "code!~\"2..\""),
        ("process_resident_memory_bytes", ""),
    ] {
        let exprs = panel_of(family);
        assert!(!exprs.is_empty(), "no panel shows {family}");
        for expr in exprs {
            assert!(expr.contains(also), "`{expr}` lacks {also}");
        }
    }
}

/// Runs `promtool ARGS` in `dir`; panics with what it said unless it succeeds.
fn promtool(dir: &Path, args: &[&str]) {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(dir)
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

#[test]
fn promtool_parses_every_dashboard_query_with_its_variables_filled_in() {
    if !support::tool_or_not_run(
        "promtool",
        "Debian's prometheus package",
        "promtool_parses_every_dashboard_query_with_its_variables_filled_in",
    ) {
        return;
    }
    // The variables as Grafana fills them in: a regex of the selected values, or the all value.
    let dashboard = dashboard();
    let filled: BTreeMap<String, &str> = variables(&dashboard)
        .into_iter()
        .filter(|(_, v)| v["type"] == "query")
        .map(|(name, v)| {
            let value = if v["allValue"].is_null() {
                "(one|two-2)"
            } else {
                ".*"
            };
            (name, value)
        })
        .collect();
    let rules: Vec<Value> = dashboard_exprs(&dashboard)
        .iter()
        .enumerate()
        .map(|(i, expr)| {
            let mut expr = expr.clone();
            for (name, value) in &filled {
                expr = expr
                    .replace(&format!("${{{name}}}"), value)
                    .replace(&format!("${name}"), value);
            }
            assert!(!expr.contains('$'), "an unknown variable in `{expr}`");
            serde_json::json!({ "record": format!("dashboard:query_{i}"), "expr": expr })
        })
        .collect();
    let dir = support::repo_root().join("target").join("grafana");
    std::fs::create_dir_all(&dir).unwrap();
    let file = serde_json::json!({ "groups": [{ "name": "dashboard", "rules": rules }] });
    std::fs::write(
        dir.join("queries.yaml"),
        serde_json::to_string(&file).unwrap(),
    )
    .unwrap();
    promtool(&dir, &["check", "rules", "queries.yaml"]);
}

fn alerts() -> Vec<Value> {
    rule_groups()
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["alert"].is_string())
        .collect()
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
    assert_eq!(exprs.len(), 8, "{exprs:?}");
    assert_exported("config/prometheus/prometheusrule.yaml", &exprs);
}

/// The anchors GitHub gives the headings of a Markdown file: lowercased, punctuation dropped,
/// spaces as hyphens, a repeated one suffixed `-1`, `-2`…; headings inside code fences are not
/// headings.
fn anchors(markdown: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let text = heading.trim_start_matches('#').trim();
        let slug: String = text
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while found.contains_key(&anchor) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
        found.insert(anchor, text.to_string());
    }
    found
}

/// Every link of `docs/FILE` to a section (`#anchor`, `other.md#anchor`) names a heading there.
fn assert_section_links_resolve(file: &str) {
    let docs = support::repo_root().join("docs");
    let text = std::fs::read_to_string(docs.join(file)).unwrap();
    let mut checked = 0;
    for (at, _) in text.match_indices("](") {
        let target = &text[at + 2..];
        let target = &target[..target.find(')').expect("closing parenthesis")];
        let Some((path, anchor)) = target.split_once('#') else {
            continue;
        };
        if path.contains("://") {
            continue;
        }
        let linked = if path.is_empty() { file } else { path };
        let headings = anchors(&std::fs::read_to_string(docs.join(linked)).unwrap());
        assert!(
            headings.contains_key(anchor),
            "docs/{file} links to {linked}#{anchor}, which has no such heading; it has {:?}",
            headings.keys().collect::<Vec<_>>()
        );
        checked += 1;
    }
    assert!(checked > 0, "docs/{file} links to no section");
}

#[test]
fn every_alert_has_a_runbook_url_to_its_own_section_of_the_runbooks() {
    const RUNBOOKS: &str = "https://github.com/inpool-dev/inpool/blob/main/docs/runbooks.md#";
    let text = std::fs::read_to_string(support::repo_root().join("docs/runbooks.md")).unwrap();
    let sections = anchors(&text);
    let alerts = alerts();
    assert_eq!(alerts.len(), 8, "{alerts:?}");
    for rule in alerts {
        let alert = rule["alert"].as_str().unwrap();
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{alert} has no runbook_url"));
        let anchor = url
            .strip_prefix(RUNBOOKS)
            .unwrap_or_else(|| panic!("{alert}: {url} is not a section of {RUNBOOKS}"));
        let heading = sections
            .get(anchor)
            .unwrap_or_else(|| panic!("{alert}: docs/runbooks.md has no section #{anchor}"));
        assert_eq!(
            heading, alert,
            "{alert}'s runbook_url leads to another section"
        );
    }
    assert_section_links_resolve("runbooks.md");
    // The operations pages, by task: operations.md is their index.
    for page in [
        "operations.md",
        "install.md",
        "configuration.md",
        "migration.md",
        "monitoring.md",
        "troubleshooting.md",
        "reliability.md",
        "scale.md",
    ] {
        assert_section_links_resolve(page);
    }
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
    promtool(&dir, &["check", "rules", "rules.yaml"]);
    promtool(&dir, &["test", "rules", "rules.test.yaml"]);
}
