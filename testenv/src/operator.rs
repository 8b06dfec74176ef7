//! cluster-api-operator v0.25.0, built from the Go module proxy, for the test that installs
//! Cluster API core and inpool through it (`tests/operator/`). Not used by the `inpool` binary.
//!
//! - [`binary`] builds `target/operator/manager` (the module's `cmd` package) from
//!   `testenv/operator/go.mod`, a module of its own: the operator is built on Cluster API v1.12
//!   and `k8s.io/*` v0.34, a line no other Go program of the tests shares. A fully cold build
//!   (empty Go module and build caches) took 3 min 8 s wall on 2 cores (196 s CPU), downloading
//!   111 modules (413 MB) into 1.3 GB of build cache; the binary is 90 MB.
//! - [`crd_files`] is the operator's CRDs, `config/crd/bases/` of the module. They serve
//!   `v1alpha2` alone, so the conversion patches of the operator's kustomization would never be
//!   called and are not applied.
//! - [`Operator::start`] runs it against a [`ControlPlane`] as its kustomize overlay wires it in
//!   a cluster, with a URL on 127.0.0.1 in place of the webhook Service: its
//!   `config/webhook/manifests.yaml` registered, the control plane's serving certificate as the
//!   webhook's (copied to `tls.crt`/`tls.key`, the only names the operator reads), no leader
//!   election, no profiler, and a `HOME` of its own so that no clusterctl configuration of the
//!   machine's user leaks in.
//! - [`components_config_map`] is a provider's components and metadata as `fetchConfig.selector`
//!   finds them; [`capi_core_components`] renders Cluster API core's components with kustomize
//!   from the Cluster API module's own `core/config/default`.
//! - [`report_available`] writes what the deployment controller would: the test control plane
//!   has no kubelet and no deployment controller, so a Deployment never gets pods; the test runs
//!   the Deployment's program itself and then reports it available.
//!
//! What the operator requires, read from its source: a provider other than the `CoreProvider`
//! waits (preflight check `WaitingForCoreProviderReady`) until a `CoreProvider` has `Ready=True`,
//! which its health check copies from the `Available` condition of the core Deployment, and only
//! on an update of that Deployment. The `CoreProvider` must be named `cluster-api`. A
//! `fetchConfig.selector` must match exactly one ConfigMap in the provider's namespace, whose
//! version is its `provider.cluster.x-k8s.io/version` label (else its name) and whose data holds
//! `metadata` and `components` (gzip-compressed in `binaryData` with the annotation
//! `provider.cluster.x-k8s.io/compressed: "true"`; Cluster API core's exceed a ConfigMap's 1 MiB).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use super::kustomize;
use super::tethered::{ReadyManager, Tethered, free_ports, serving_certificate_as_tls};
use super::webhooks::register_admission;
use super::{ControlPlane, capi, go_build, repo_root};

/// The cluster-api-operator release the test runs (`testenv/operator/go.mod` pins the same).
pub const VERSION: &str = "v0.25.0";

const MODULE: &str = "sigs.k8s.io/cluster-api-operator";

/// The operator's API group; its kinds are `v1alpha2`.
pub const GROUP: &str = "operator.cluster.x-k8s.io";

/// The label that gives a components ConfigMap's version.
pub const VERSION_LABEL: &str = "provider.cluster.x-k8s.io/version";

/// The annotation of a ConfigMap whose components are gzip-compressed in `binaryData`.
const COMPRESSED_ANNOTATION: &str = "provider.cluster.x-k8s.io/compressed";

/// Above this many bytes the operator itself compresses components (`maxConfigMapSize`).
const MAX_CONFIG_MAP_SIZE: usize = 1024 * 1024;

/// How long the operator may take to start and serve its webhooks.
const START_TIMEOUT: Duration = Duration::from_secs(120);

fn wrapper_module() -> PathBuf {
    repo_root().join("testenv").join("operator")
}

fn out_dir() -> PathBuf {
    repo_root().join("target").join("operator")
}

/// Builds the operator once per process (see [`go_build`]).
pub fn binary() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let binary = out_dir().join("manager");
            go_build(
                &wrapper_module(),
                &format!("{MODULE}/cmd"),
                "",
                &binary,
                &format!(
                    "building cluster-api-operator {VERSION} (testenv/operator/, once): about \
                     3 minutes on 2 cores and 400 MB of modules, because it is built on \
                     Kubernetes v0.34 and Cluster API v1.12, which nothing else here shares"
                ),
            )?;
            Ok(binary)
        })
        .clone()
}

/// The operator module's source in the Go module cache (downloaded if needed).
pub fn module_dir() -> Result<PathBuf, String> {
    super::go_module_dir(&wrapper_module(), MODULE)
}

/// The operator's CRDs (`config/crd/bases/` of the module).
pub fn crd_files() -> Result<Vec<PathBuf>, String> {
    let files = super::yaml_files(&module_dir()?.join("config").join("crd").join("bases"));
    if files.is_empty() {
        return Err("no CRDs in the operator module's config/crd/bases".into());
    }
    Ok(files)
}

/// An operator kind (`CoreProvider`, `IPAMProvider`, …) for dynamic access.
pub fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1alpha2", kind))
}

/// The operator running against one control plane, its admission webhooks registered. It stops
/// when dropped, or when the test binary exits.
pub struct Operator {
    process: Tethered,
}

impl Operator {
    /// Starts the operator for `plane` (whose CRDs must include [`crd_files`]), registers its
    /// webhooks, and returns once the API server calls them.
    pub async fn start(plane: &ControlPlane) -> anyhow::Result<Operator> {
        let binary = binary().map_err(anyhow::Error::msg)?;
        let [webhook, health, diagnostics] = free_ports()?;
        let cert_dir = serving_certificate_as_tls(plane, "operator-webhook-certs")?;
        let home = plane.data_dir.join("operator-home");
        std::fs::create_dir_all(&home).with_context(|| format!("creating {}", home.display()))?;
        let args = vec![
            "--leader-elect=false".to_string(),
            format!("--health-addr=127.0.0.1:{health}"),
            format!("--diagnostics-address=127.0.0.1:{diagnostics}"),
            "--insecure-diagnostics".into(),
            format!("--webhook-port={webhook}"),
            format!("--webhook-cert-dir={}", cert_dir.display()),
            "--profiler-address=".into(),
        ];
        let manager = ReadyManager::start(
            plane,
            "cluster-api-operator",
            &binary,
            &args,
            &[
                ("KUBECONFIG", plane.kubeconfig.as_os_str()),
                ("HOME", home.as_os_str()),
                ("XDG_CONFIG_HOME", home.as_os_str()),
            ],
            health,
            START_TIMEOUT,
        )
        .await?;
        let manifests = module_dir()
            .map_err(anyhow::Error::msg)?
            .join("config")
            .join("webhook")
            .join("manifests.yaml");
        let base = format!("https://127.0.0.1:{webhook}");
        let (client, ca_bundle) = (&manager.client, &manager.ca_bundle);
        register_admission(client, &manifests, "capi-operator", &base, ca_bundle).await?;
        wait_until_served(client, manager.started).await?;
        Ok(Operator {
            process: manager.process,
        })
    }

    /// The operator's log, in the control plane's data directory.
    pub fn log(&self) -> &Path {
        &self.process.log
    }

    /// The last lines of the operator's log.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// Waits until the API server calls the operator's defaulting webhook: only it fills in the
/// namespace of a provider's `configSecret` (dry run).
async fn wait_until_served(client: &kube::Client, started: Instant) -> anyhow::Result<()> {
    let providers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &resource("IPAMProvider"));
    let probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha2"),
        "kind": "IPAMProvider",
        "metadata": {"name": "operator-webhook-probe"},
        "spec": {"configSecret": {"name": "probe"}},
    }))?;
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    loop {
        let outcome = providers.create(&dry_run, &probe).await;
        if let Ok(created) = &outcome
            && created.data["spec"]["configSecret"]["namespace"] == "default"
        {
            return Ok(());
        }
        if started.elapsed() > START_TIMEOUT {
            bail!(
                "the API server did not call the operator's webhooks within {START_TIMEOUT:?}; \
                 the probe got {:?}",
                outcome.map(|created| created.data["spec"].clone())
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// ConfigMap `name` in `namespace` as a provider's `fetchConfig.selector` finds it: `labels`
/// (which the selector matches) plus [`VERSION_LABEL`] = `version`, with `metadata` and
/// `components`; components above 1 MiB are stored gzip-compressed, as the operator stores
/// what it downloads.
pub fn components_config_map(
    name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    version: &str,
    metadata: &str,
    components: &str,
) -> anyhow::Result<ConfigMap> {
    let mut labels = labels.clone();
    labels.insert(VERSION_LABEL.into(), version.into());
    let mut config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(labels),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("metadata".into(), metadata.into())])),
        ..Default::default()
    };
    if components.len() + metadata.len() <= MAX_CONFIG_MAP_SIZE {
        if let Some(data) = config_map.data.as_mut() {
            data.insert("components".into(), components.into());
        }
        return Ok(config_map);
    }
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(components.as_bytes())?;
    config_map.binary_data = Some(BTreeMap::from([(
        "components".into(),
        ByteString(gzip.finish()?),
    )]));
    config_map.metadata.annotations = Some(BTreeMap::from([(
        COMPRESSED_ANNOTATION.into(),
        "true".into(),
    )]));
    Ok(config_map)
}

/// Cluster API core's components ([`capi::version`]), rendered by kustomize from the Cluster
/// API module's `core/config/default` ([`capi::core_config`]), less cert-manager's
/// `Certificate` and `Issuer`: the test control plane has no cert-manager (the control plane's
/// serving certificate is the webhook certificate, see [`capi::Manager::start`]), and the
/// operator, like clusterctl, cannot create objects of a kind the API server does not know. The overlay is written to
/// `target/operator/capi-core/`.
pub fn capi_core_components() -> Result<String, String> {
    let overlay = out_dir().join("capi-core");
    std::fs::create_dir_all(&overlay)
        .map_err(|e| format!("creating {}: {e}", overlay.display()))?;
    let default = capi::core_config()?.join("default");
    let base = kustomize::relative_to(&default, &overlay);
    let deleted = |kind: &str, name: &str| {
        format!(
            "- patch: |\n    $patch: delete\n    apiVersion: cert-manager.io/v1\n    kind: {kind}\n    \
             metadata:\n      name: {name}\n      namespace: capi-system\n"
        )
    };
    let kustomization = format!(
        "# Written by inpool's tests (testenv/src/operator.rs): CAPI core's config/default without \
         cert-manager.\nresources:\n- {}\npatches:\n{}{}",
        base.display(),
        deleted("Certificate", "capi-serving-cert"),
        deleted("Issuer", "capi-selfsigned-issuer"),
    );
    let file = overlay.join("kustomization.yaml");
    std::fs::write(&file, kustomization).map_err(|e| format!("writing {}: {e}", file.display()))?;
    let components = kustomize::build(&overlay)?;
    if components.contains("cert-manager.io/v1") {
        return Err("CAPI core's rendered components still hold cert-manager objects".into());
    }
    Ok(components)
}

/// Cluster API's `metadata.yaml` (release series and contracts), from the module's root.
pub fn capi_metadata() -> Result<String, String> {
    let file = capi::module_dir()?.join("metadata.yaml");
    std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))
}

/// Marks Deployment `namespace/name` available, as the deployment controller does once its pod
/// is ready; the test control plane has neither kubelet nor deployment controller, and the
/// caller has started the Deployment's program itself and seen it ready.
pub async fn report_available(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
        "conditions": [{
            "type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
            "message": "Deployment has minimum availability.",
            "lastUpdateTime": now, "lastTransitionTime": now,
        }],
    }});
    deployments
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("reporting Deployment {namespace}/{name} available"))?;
    Ok(())
}
