//! A peer's conformance pinned to its committed report: the suite runs against the peer already
//! running on a bed, writes the fresh report to `target/conformance/`, and fails naming every
//! check whose result differs from `docs/conformance/<name>-report.yaml`. Shared by the peers'
//! test binaries (`tests/peers/`, and `tests/peers_v1_0_3/` for the reference release that needs a
//! control plane of its own).

use inpool_conformance::ProviderConfig;
use inpool_testenv::support::TestEnv;
use inpool_testenv::{RunningManager, capi, repo_root, support};
use serde_json::Value;

/// The report's `environment.provider`: how the bench built and runs the peer, `flags` its
/// flags that matter.
pub fn built_here(module: &str, version: &str, flags: &str) -> String {
    format!(
        "{module} {version} from the Go module proxy, its CRDs from the module; one manager \
         process, cluster-wide, {flags}"
    )
}

/// Runs the suite with `conformance/providers/<name>.yaml` against the peer `manager` running on
/// `env`, writes the report to `target/conformance/`, and fails naming every check whose result
/// differs from `docs/conformance/<name>-report.yaml`, with the end of the peer's log after them.
pub async fn keeps_its_results(
    env: &TestEnv,
    name: &str,
    version: &str,
    provider: String,
    manager: Option<&RunningManager>,
) {
    let (client, ns) = env.namespace().await;
    support::install_conformance_cluster_kind(&client).await;
    let providers = repo_root().join("conformance").join("providers");
    let mut config = ProviderConfig::from_file(&providers.join(format!("{name}.yaml")))
        .expect("the provider config");
    assert_eq!(
        config.implementation.version.as_deref(),
        Some(version),
        "the provider config names the release the bench builds"
    );
    config.namespace = ns;
    config.environment.extend([
        (
            "clusterAPI".to_string(),
            format!(
                "{} (core manager with its webhooks; CRDs from its Go module)",
                capi::version()
            ),
        ),
        (
            "controlPlane".to_string(),
            inpool_testenv::control_plane_description(),
        ),
        ("provider".to_string(), provider),
    ]);
    let report = inpool_conformance::run(client, config)
        .await
        .expect("the suite runs");
    let dir = repo_root().join("target").join("conformance");
    std::fs::create_dir_all(&dir).expect("target/conformance");
    let fresh = dir.join(format!("{name}-report.yaml"));
    std::fs::write(&fresh, report.to_yaml()).expect("writing the report");
    std::fs::write(dir.join(format!("{name}-junit.xml")), report.to_junit())
        .expect("writing the JUnit XML");

    let committed = repo_root()
        .join("docs")
        .join("conformance")
        .join(format!("{name}-report.yaml"));
    let text = std::fs::read_to_string(&committed).expect("the committed report");
    let committed: Value = serde_saphyr::from_str(&text).expect("the committed report is YAML");
    let now: Value = serde_saphyr::from_str(&report.to_yaml()).expect("the fresh report");
    let changed = differences(&committed, &now);
    assert!(
        changed.is_empty(),
        "{name}'s conformance changed, check by check:\n{}\n(fresh report: {}; if the change is \
         meant, copy it over docs/conformance/{name}-report.yaml)\nthe manager's log ends:\n{}",
        changed.join("\n"),
        fresh.display(),
        manager.map(|m| m.log_tail()).unwrap_or_default()
    );
}

/// Every check whose result differs between the two reports (and every check one of them lacks),
/// one line each: its id, the committed result, the result now and the message now.
fn differences(committed: &Value, now: &Value) -> Vec<String> {
    let results = |report: &Value| -> Vec<(String, String, String)> {
        report["profiles"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|profile| profile["checks"].as_array().into_iter().flatten())
            .map(|check| {
                let field = |name: &str| check[name].as_str().unwrap_or_default().to_string();
                (field("id"), field("result"), field("message"))
            })
            .collect()
    };
    let before = results(committed);
    let after = results(now);
    let mut changed = Vec::new();
    for (id, was, _) in &before {
        match after.iter().find(|(other, _, _)| other == id) {
            Some((_, is, message)) if is != was => {
                changed.push(format!("{id}: was {was}, now {is}: {message}"));
            }
            Some(_) => {}
            None => changed.push(format!("{id}: was {was}, now not run")),
        }
    }
    for (id, is, message) in &after {
        if !before.iter().any(|(other, _, _)| other == id) {
            changed.push(format!("{id}: new, {is}: {message}"));
        }
    }
    changed
}
