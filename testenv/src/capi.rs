//! Cluster API core v1.14.2 and clusterctl v1.14.2, built from the Go module proxy, for the
//! tests that meet the real Cluster API (`tests/capi/`). Not used by the `inpool` binary.
//!
//! - [`binaries`] builds `target/capi/core` (CAPI's manager: its controllers, its validating and
//!   mutating webhooks and its conversion webhook) and `target/capi/clusterctl` from
//!   `testenv/capi/go.mod`, a module of its own whose `tool` directives name the two main
//!   packages (`go install …@v1.14.2` refuses the module: it has `replace` directives).
//! - [`VARIABLE`] (`INPOOL_TESTENV_CAPI=1.11`) picks another release line instead: the wrapper
//!   `testenv/capi-1.11/go.mod`, its binaries in `target/capi-1.11/`. Its `tool` directives name
//!   the manager's package, which moved from the module's root to `core/` in v1.14, and with it
//!   `config/`.
//! - [`crd_dir`] is CAPI's own CRDs, `core/config/crd/bases/` of the same module, version-pinned
//!   by `testenv/capi/go.sum`: every test takes the CAPI CRDs from there.
//! - [`Manager::start`] runs the manager against a [`ControlPlane`] the way CAPI's kustomize
//!   overlays wire it in a cluster, with a URL on 127.0.0.1 in place of the webhook Service:
//!   each CRD that CAPI patches with `webhook_in_*.yaml` converts through the manager's
//!   `/convert`, and CAPI's `manifests.yaml` webhook configurations point at the manager. The
//!   control plane's serving certificate (valid for 127.0.0.1, signed by its CA) is the
//!   webhook's certificate, and that CA is every `caBundle`. The same works when CAPI core was
//!   installed from its components (through cluster-api-operator, `tests/operator/`): the URL
//!   replaces the webhook Service they name.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Resource};
use serde_json::json;

use super::tethered::{ManagerPorts, ReadyManager, Tethered};
use super::webhooks::{register_admission, register_conversion};
use super::{ControlPlane, GoLine, go_build, repo_root, version_ldflags};

/// The Cluster API release the tests run with unless [`VARIABLE`] picks another
/// (`testenv/capi/go.mod` pins the same); [`version`] is the one they run with.
pub const VERSION: &str = "v1.14.2";

/// The environment variable that runs the bench on another Cluster API: `1.11` builds CAPI core
/// and clusterctl from `testenv/capi-1.11/go.mod`; unset, from `testenv/capi/go.mod`. The
/// support matrix's lower bound runs this way (docs/install.md, "Supported versions").
pub const VARIABLE: &str = "INPOOL_TESTENV_CAPI";

const MODULE: &str = "sigs.k8s.io/cluster-api";

/// clusterctl's package; the wrapper's other `tool` is the manager's.
const CLUSTERCTL: &str = "sigs.k8s.io/cluster-api/cmd/clusterctl";

/// The Cluster API release the tests run with: [`VERSION`], or the one [`VARIABLE`]'s `go.mod`
/// pins. Panics when the variable names no such `go.mod`.
pub fn version() -> &'static str {
    match line() {
        Ok(Some(line)) => &line.version,
        Ok(None) => VERSION,
        Err(e) => panic!("{e}"),
    }
}

fn line() -> &'static Result<Option<GoLine>, String> {
    static LINE: OnceLock<Result<Option<GoLine>, String>> = OnceLock::new();
    LINE.get_or_init(|| GoLine::from_env(VARIABLE, "capi", MODULE))
}

/// The wrapper module's folder under `testenv/`, and the binaries' under `target/`.
fn dir() -> Result<&'static str, String> {
    Ok(match line().as_ref()? {
        Some(line) => &line.dir,
        None => "capi",
    })
}

/// CAPI core's manager package: the wrapper's `tool` that is not clusterctl (a tool line is a
/// package path alone, where a `require` line also has a version).
fn manager_package() -> Result<String, String> {
    let go_mod = wrapper_module()?.join("go.mod");
    let text = std::fs::read_to_string(&go_mod)
        .map_err(|e| format!("reading {}: {e}", go_mod.display()))?;
    text.lines()
        .map(|line| line.trim().trim_start_matches("tool ").trim())
        .find(|line| {
            (*line == MODULE || line.starts_with(&format!("{MODULE}/")))
                && !line.contains(char::is_whitespace)
                && *line != CLUSTERCTL
        })
        .map(str::to_string)
        .ok_or_else(|| format!("{} names no CAPI manager as a tool", go_mod.display()))
}

/// How long the manager may take to serve its webhooks once started.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The two CAPI programs the tests run.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// CAPI core's manager (`sigs.k8s.io/cluster-api/core`).
    pub manager: PathBuf,
    pub clusterctl: PathBuf,
}

fn wrapper_module() -> Result<PathBuf, String> {
    Ok(repo_root().join("testenv").join(dir()?))
}

/// Builds CAPI core's manager and clusterctl once per process (see [`go_build`]).
pub fn binaries() -> Result<Binaries, String> {
    static BINARIES: OnceLock<Result<Binaries, String>> = OnceLock::new();
    BINARIES
        .get_or_init(|| {
            let target = repo_root().join("target").join(dir()?);
            let binaries = Binaries {
                manager: target.join("core"),
                clusterctl: target.join("clusterctl"),
            };
            // What CAPI's release build stamps in, so that clusterctl knows its own version.
            let version = version();
            let ldflags = version_ldflags(&format!("{MODULE}/version"), version);
            let wrapper = wrapper_module()?;
            for (package, out) in [
                (manager_package()?.as_str(), &binaries.manager),
                (CLUSTERCTL, &binaries.clusterctl),
            ] {
                go_build(
                    &wrapper,
                    package,
                    &ldflags,
                    out,
                    &format!(
                        "building {package} {version} (testenv/{}/, once): about 3 minutes \
                         on 2 cores after a control plane's build of the same k8s.io/* line, \
                         whose compiled packages it shares",
                        dir()?
                    ),
                )?;
            }
            Ok(binaries)
        })
        .clone()
}

/// The Cluster API module's source in the Go module cache (downloaded if needed).
pub fn module_dir() -> Result<PathBuf, String> {
    super::go_module_dir(&wrapper_module()?, MODULE)
}

/// `config/` beside CAPI core's manager package in the Cluster API module (`core/config/` since
/// v1.14): CRDs, their conversion patches, webhooks, the `default` kustomization.
pub fn core_config() -> Result<PathBuf, String> {
    let package = manager_package()?;
    let beside = package.strip_prefix(MODULE).unwrap_or_default();
    Ok(module_dir()?
        .join(beside.trim_start_matches('/'))
        .join("config"))
}

/// CAPI's CRDs (`core/config/crd/bases/` of the module).
pub fn crd_dir() -> Result<PathBuf, String> {
    Ok(core_config()?.join("crd").join("bases"))
}

/// The CAPI CRDs inpool works with: Cluster, IPAddressClaim and IPAddress.
pub fn contract_crd_files() -> Result<Vec<PathBuf>, String> {
    let dir = crd_dir()?;
    Ok([
        "cluster.x-k8s.io_clusters.yaml",
        "ipam.cluster.x-k8s.io_ipaddressclaims.yaml",
        "ipam.cluster.x-k8s.io_ipaddresses.yaml",
    ]
    .map(|file| dir.join(file))
    .to_vec())
}

/// Every CRD CAPI core installs (the manager watches all of them).
pub fn all_crd_files() -> Result<Vec<PathBuf>, String> {
    Ok(super::yaml_files(&crd_dir()?))
}

/// CAPI core's manager running against one control plane, its webhooks registered. It stops
/// when dropped, or when the test binary exits.
pub struct Manager {
    process: Tethered,
    /// The webhook server's port on 127.0.0.1.
    pub webhook_port: u16,
}

impl Manager {
    /// Starts the manager for `plane` (whose CRDs must include [`all_crd_files`]), then points
    /// CAPI's conversion and admission webhooks at it, and returns once the API server calls
    /// both.
    pub async fn start(plane: &ControlPlane) -> anyhow::Result<Manager> {
        let binaries = binaries().map_err(anyhow::Error::msg)?;
        let ports = ManagerPorts::free()?;
        let pki = plane.data_dir.join("pki");
        let manager = ReadyManager::start(
            plane,
            "capi-manager",
            &binaries.manager,
            &ports.flags(&pki),
            &[("KUBECONFIG", plane.kubeconfig.as_os_str())],
            ports.health,
            START_TIMEOUT,
        )
        .await?;
        let (client, ca_bundle) = (&manager.client, &manager.ca_bundle);
        let base = ports.webhook_base();
        let patches = core_config()
            .map_err(anyhow::Error::msg)?
            .join("crd")
            .join("patches");
        register_conversion(client, &patches, &base, ca_bundle).await?;
        let manifests = core_config()
            .map_err(anyhow::Error::msg)?
            .join("webhook")
            .join("manifests.yaml");
        register_admission(client, &manifests, "capi", &base, ca_bundle).await?;
        wait_until_served(client, manager.started).await?;
        Ok(Manager {
            process: manager.process,
            webhook_port: ports.webhook,
        })
    }

    /// The manager's log (klog; CAPI's manager logs at verbosity 2 by default), in the control
    /// plane's data directory.
    pub fn log(&self) -> &Path {
        &self.process.log
    }

    /// The last lines of the manager's log (the control plane's data directory, and with it the
    /// log, goes when the tests end).
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// True while the manager runs.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }
}

fn resource(version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "ipam.cluster.x-k8s.io",
        version,
        kind,
    ))
}

/// Waits until the API server sends requests to the manager: an IPv4 `IPAddress` with prefix
/// 33 passes the CRD schema and only CAPI's validating webhook refuses it, and a v1beta2 claim's
/// conditions appear under `status.v1beta2` in v1beta1 only through the conversion webhook.
async fn wait_until_served(client: &Client, started: Instant) -> anyhow::Result<()> {
    let addresses: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &resource("v1beta2", "IPAddress"));
    let claims: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("v1beta2", "IPAddressClaim"),
    );
    let claims_v1beta1: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("v1beta1", "IPAddressClaim"),
    );
    let probe = "capi-webhook-probe";
    let pool_ref = json!({"apiGroup": "probe.invalid", "kind": "ProbePool", "name": "probe"});
    let invalid_address: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddress",
        "metadata": {"name": probe},
        "spec": {"address": "10.0.0.1", "prefix": 33, "claimRef": {"name": probe}, "poolRef": pool_ref},
    }))?;
    let claim: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddressClaim",
        "metadata": {"name": probe},
        "spec": {"poolRef": pool_ref},
    }))?;
    let _ = claims.delete(probe, &DeleteParams::default()).await;
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut validating = false;
    let mut converting = false;
    while !(validating && converting) {
        if started.elapsed() > START_TIMEOUT {
            bail!(
                "the API server did not call CAPI's webhooks within {START_TIMEOUT:?} \
                 (validating: {validating}, converting: {converting})"
            );
        }
        if !validating {
            validating = matches!(
                addresses.create(&dry_run, &invalid_address).await,
                Err(kube::Error::Api(status)) if status.message.contains("prefix is too large")
            );
        }
        if validating && !converting {
            converting = converts(&claims, &claims_v1beta1, &claim, probe).await;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    claims
        .delete(probe, &DeleteParams::default())
        .await
        .context("deleting the webhook probe claim")?;
    Ok(())
}

async fn converts(
    claims: &Api<DynamicObject>,
    claims_v1beta1: &Api<DynamicObject>,
    claim: &DynamicObject,
    probe: &str,
) -> bool {
    if claims.get_opt(probe).await.ok().flatten().is_none()
        && claims.create(&PostParams::default(), claim).await.is_err()
    {
        return false;
    }
    let status = json!({"status": {"conditions": [{
        "type": "Probe", "status": "True", "reason": "Probe", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}});
    if claims
        .patch_status(probe, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .is_err()
    {
        return false;
    }
    match claims_v1beta1.get(probe).await {
        Ok(converted) => converted.data["status"]["v1beta2"]["conditions"].is_array(),
        Err(_) => false,
    }
}

/// `K`'s API resource at another served `version` (tests read CAPI's objects as v1beta1).
pub fn api_resource<K: Resource<DynamicType = ()>>(version: &str) -> ApiResource {
    let mut resource = ApiResource::erase::<K>(&());
    resource.version = version.to_string();
    resource.api_version = format!("{}/{version}", resource.group);
    resource
}
