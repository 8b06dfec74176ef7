//! The IPAM contract conformance suite (`conformance/`, the `inpool-conformance` crate) run
//! against inpool, as any provider would run it: on the test control plane with CAPI core's
//! manager and its webhooks (`support::capi_env`), an inpool controller for the suite's
//! namespace, and the provider configs committed in `conformance/providers/`. Every profile
//! must pass, on an IP pool, a prefix pool and a cluster-scoped IP pool. The reports are written
//! to `target/conformance/`; `docs/conformance/` holds a committed copy of each.

use std::path::PathBuf;
use std::process::Command;

use inpool_conformance::ProviderConfig;
use inpool_testenv::{KUBERNETES_VERSION, common, repo_root, support};

async fn passes(provider_config: &str, name: &str) {
    let (client, ns) = support::capi_env().namespace().await;
    install_infrastructure_kind(&client).await;
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
            "v1.14.2 (core manager with its webhooks; CRDs from its Go module)".to_string(),
        ),
        (
            "controlPlane".to_string(),
            format!("inpool's test control plane: etcd 3.6, kube-apiserver {KUBERNETES_VERSION}"),
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

/// The suite's Clusters name a `ConformanceCluster` infrastructure, which CAPI's Cluster
/// controller must be able to look up to finish deleting them.
async fn install_infrastructure_kind(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, PostParams};
    use kube::runtime::wait::{await_condition, conditions};
    let path = repo_root().join("conformance/crds/conformanceclusters.yaml");
    let text = std::fs::read_to_string(&path).expect("the ConformanceCluster CRD");
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).expect("a CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("installing {}: {e}", path.display()),
    }
    let name = crd.metadata.name.clone().unwrap_or_default();
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        await_condition(crds, &name, conditions::is_crd_established()),
    )
    .await
    .expect("the ConformanceCluster CRD is established in time")
    .expect("watching the CRD");
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
