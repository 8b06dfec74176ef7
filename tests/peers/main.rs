//! The conformance suite run against a peer: the reference provider,
//! cluster-api-ipam-provider-in-cluster v1.1.0, built from the Go module proxy and running as a
//! process on the test control plane (`support::reference_env`: CAPI core's manager with its
//! webhooks, the reference's own CRDs in place of inpool's, the reference's manager cluster-wide
//! with its webhooks and leader election off). The peer's result is pinned check by check to the
//! committed report, `docs/conformance/reference-in-cluster-report.yaml`: a check whose result
//! changes fails the test and is named. The fresh report is written to `target/conformance/`.

use inpool_conformance::ProviderConfig;
use inpool_testenv::{KUBERNETES_VERSION, capi, reference, repo_root, support};
use serde_json::Value;

/// The name of the report, in `target/conformance/` and `docs/conformance/`.
const NAME: &str = "reference-in-cluster";

#[tokio::test]
async fn the_reference_provider_keeps_its_conformance_results() {
    let env = support::reference_env();
    let (client, ns) = env.namespace().await;
    support::install_conformance_cluster_kind(&client).await;
    let providers = repo_root().join("conformance").join("providers");
    let mut config = ProviderConfig::from_file(&providers.join(format!("{NAME}.yaml")))
        .expect("the provider config");
    assert_eq!(
        config.implementation.version.as_deref(),
        Some(reference::VERSION),
        "the provider config names the release the bench builds"
    );
    config.namespace = ns;
    config.environment.extend([
        (
            "clusterAPI".to_string(),
            format!(
                "{} (core manager with its webhooks; CRDs from its Go module)",
                capi::VERSION
            ),
        ),
        (
            "controlPlane".to_string(),
            format!("inpool's test control plane: etcd 3.6, kube-apiserver {KUBERNETES_VERSION}"),
        ),
        (
            "provider".to_string(),
            format!(
                "{} {} from the Go module proxy, its CRDs from the module; one manager process, \
                 cluster-wide, --webhook-port=0 (no admission webhooks), --leader-elect=false",
                reference::MODULE,
                reference::VERSION
            ),
        ),
    ]);
    let report = inpool_conformance::run(client, config)
        .await
        .expect("the suite runs");
    let dir = repo_root().join("target").join("conformance");
    std::fs::create_dir_all(&dir).expect("target/conformance");
    let fresh = dir.join(format!("{NAME}-report.yaml"));
    std::fs::write(&fresh, report.to_yaml()).expect("writing the report");
    std::fs::write(dir.join(format!("{NAME}-junit.xml")), report.to_junit())
        .expect("writing the JUnit XML");

    let committed = repo_root()
        .join("docs")
        .join("conformance")
        .join(format!("{NAME}-report.yaml"));
    let text = std::fs::read_to_string(&committed).expect("the committed report");
    let committed: Value = serde_saphyr::from_str(&text).expect("the committed report is YAML");
    let now: Value = serde_saphyr::from_str(&report.to_yaml()).expect("the fresh report");
    let changed = differences(&committed, &now);
    let log = env.reference().map(|m| m.log_tail()).unwrap_or_default();
    assert!(
        changed.is_empty(),
        "the reference provider's conformance changed, check by check:\n{}\n(fresh report: {}; \
         if the change is meant, copy it over docs/conformance/{NAME}-report.yaml)\n\
         the manager's log ends:\n{log}",
        changed.join("\n"),
        fresh.display()
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
