//! The IPAM contract conformance suite (`conformance/`, the `inpool-conformance` crate) run
//! against inpool, as any provider would run it: on the test control plane with CAPI core's
//! manager and its webhooks (`support::capi_env`), an inpool controller for the suite's
//! namespace, and the provider configs committed in `conformance/providers/`. Every profile
//! must pass, on an IP pool, a prefix pool, a cluster-scoped IP pool and an IP pool carved from a
//! prefix pool. The reports are written to `target/conformance/`; `docs/conformance/` holds a
//! committed copy of each.

use std::path::PathBuf;
use std::process::Command;

use inpool_conformance::ProviderConfig;
use inpool_testenv::{common, repo_root, support};

async fn passes(provider_config: &str, name: &str) {
    let (client, ns) = support::capi_env().namespace().await;
    support::install_conformance_cluster_kind(&client).await;
    let _controller = common::start_controller(&client, &ns);
    let path = repo_root()
        .join("conformance")
        .join("providers")
        .join(provider_config);
    let mut config = ProviderConfig::from_file(&path).expect("the provider config");
    config.namespace = ns;
    config.implementation.version = Some(inpool_commit());
    config.environment.extend([
        (
            "clusterAPI".to_string(),
            format!(
                "{} (core manager with its webhooks; CRDs from its Go module)",
                inpool_testenv::capi::version()
            ),
        ),
        (
            "controlPlane".to_string(),
            inpool_testenv::control_plane_description(),
        ),
    ]);
    let report = inpool_conformance::run(client, config)
        .await
        .expect("the suite runs");
    let dir = repo_root().join("target").join("conformance");
    std::fs::create_dir_all(&dir).expect("target/conformance");
    let yaml = dir.join(format!("{name}-report.yaml"));
    std::fs::write(&yaml, report.to_yaml()).expect("writing the report");
    std::fs::write(dir.join(format!("{name}-junit.xml")), report.to_junit())
        .expect("writing the JUnit XML");
    assert!(
        report.all_green(),
        "inpool is not conformant on {provider_config}:\n{}\n(report: {})",
        report.failures().join("\n"),
        yaml.display()
    );
    for profile in &report.profiles {
        assert!(
            profile.cleanup.is_empty(),
            "profile {} left objects behind: {:?}",
            profile.name,
            profile.cleanup
        );
    }
}

/// The commit under test (`git describe --always --dirty`), for the report.
fn inpool_commit() -> String {
    let root: PathBuf = repo_root();
    Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown (not a git checkout)".into())
}

#[tokio::test]
async fn inpool_passes_every_profile_on_an_ip_pool() {
    passes("inpool-ip.yaml", "inpool-ip").await;
}

#[tokio::test]
async fn inpool_passes_every_profile_on_a_prefix_pool() {
    passes("inpool-prefix.yaml", "inpool-prefix").await;
}

#[tokio::test]
async fn inpool_passes_every_profile_on_a_cluster_scoped_pool() {
    passes("inpool-global-ip.yaml", "inpool-global-ip").await;
}

#[tokio::test]
async fn inpool_passes_every_profile_on_a_pool_carved_from_a_parent() {
    passes("inpool-child-ip.yaml", "inpool-child-ip").await;
}
