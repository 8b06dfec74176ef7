//! Cluster API Provider vSphere (CAPV) v1.14.0 and a vCenter simulator (govmomi v0.51.0), built
//! from the Go module proxy, for the end-to-end test with a real infrastructure provider
//! (`tests/capv/`). Not used by the `inpool` binary.
//!
//! - [`binaries`] builds `target/capv/manager` (CAPV's manager, the module's root package) and
//!   `target/capv/vcsim` (`testenv/capv/vcsim/`: the simulator, which also plays each powered-on
//!   VM's guest) from `testenv/capv/go.mod`, a module of its own: CAPV 1.14.0 is built on Cluster
//!   API v1.11 and k8s.io/* v0.33, a line the other Go programs of the tests do not share.
//! - [`crd_files`] is CAPV's CRDs, `config/default/crd/bases/` of the module, with the contract
//!   label `cluster.x-k8s.io/v1beta1: v1beta1` that CAPV's kustomization adds (CAPI refuses an
//!   infrastructure kind without a contract label), written to `target/capv/crds/`.
//! - [`Simulator::start`] serves a vCenter on 127.0.0.1; [`Manager::start`] runs CAPV's manager
//!   against a [`ControlPlane`] and that simulator, its admission webhooks registered with a URL
//!   on 127.0.0.1, as [`super::capi::Manager`] does for CAPI core. CAPV needs CAPI core running:
//!   it reads claims as `ipam.cluster.x-k8s.io/v1beta1` (CAPI's conversion webhook), and waits for
//!   CAPI's Cluster and Machine controllers.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use super::tethered::{ManagerPorts, ReadyManager, Tethered};
use super::webhooks::{register_admission, write_labelled_crds};
use super::{ControlPlane, go_build, repo_root};

/// The CAPV release the test runs with (`testenv/capv/go.mod` pins the same).
pub const VERSION: &str = "v1.14.0";

/// The govmomi release whose simulator serves the vCenter (`testenv/capv/go.mod`).
pub const GOVMOMI_VERSION: &str = "v0.51.0";

const MODULE: &str = "sigs.k8s.io/cluster-api-provider-vsphere";

/// CAPV's API group (its kinds are `v1beta1`).
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// How long CAPV's manager or the simulator may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The two programs the test runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// CAPV's manager.
    pub manager: PathBuf,
    /// The vCenter simulator (`testenv/capv/vcsim/`).
    pub vcsim: PathBuf,
}

fn wrapper_module() -> PathBuf {
    repo_root().join("testenv").join("capv")
}

fn out_dir() -> PathBuf {
    repo_root().join("target").join("capv")
}

/// Builds CAPV's manager and the simulator once per process (see [`go_build`]).
pub fn binaries() -> Result<Binaries, String> {
    static BINARIES: OnceLock<Result<Binaries, String>> = OnceLock::new();
    BINARIES
        .get_or_init(|| {
            let binaries = Binaries {
                manager: out_dir().join("manager"),
                vcsim: out_dir().join("vcsim"),
            };
            for (package, out) in [(MODULE, &binaries.manager), ("./vcsim", &binaries.vcsim)] {
                go_build(
                    &wrapper_module(),
                    package,
                    "",
                    out,
                    &format!(
                        "building {package} (testenv/capv/, once): about 6 minutes on 2 cores \
                         and 400 MB of modules, because CAPV {VERSION} is built on Kubernetes \
                         v0.33 and Cluster API v1.11, which nothing else here shares"
                    ),
                )?;
            }
            Ok(binaries)
        })
        .clone()
}

/// The CAPV module's source in the Go module cache (downloaded if needed).
pub fn module_dir() -> Result<PathBuf, String> {
    super::go_module_dir(&wrapper_module(), MODULE)
}

/// CAPV's CRDs with their contract label, written once per process to `target/capv/crds/`.
pub fn crd_files() -> Result<Vec<PathBuf>, String> {
    static FILES: OnceLock<Result<Vec<PathBuf>, String>> = OnceLock::new();
    FILES
        .get_or_init(|| {
            let bases = module_dir()?
                .join("config")
                .join("default")
                .join("crd")
                .join("bases");
            // What `commonLabels` in CAPV's config/default/crd/kustomization.yaml adds.
            write_labelled_crds(
                &bases,
                &out_dir().join("crds"),
                &[("cluster.x-k8s.io/v1beta1", "v1beta1")],
            )
        })
        .clone()
}

/// A vCenter served by the simulator on 127.0.0.1. It stops when dropped, or when the test
/// binary exits.
pub struct Simulator {
    process: Tethered,
    /// `host:port`, as a `VSphereCluster`'s `spec.server`.
    pub server: String,
    pub username: String,
    pub password: String,
}

impl Simulator {
    /// Starts the simulator, logging to `dir/vcsim.log`.
    pub async fn start(dir: &Path) -> anyhow::Result<Simulator> {
        let binaries = binaries().map_err(anyhow::Error::msg)?;
        let log = dir.join("vcsim.log");
        let mut process = Tethered::spawn(
            "vcsim",
            &binaries.vcsim,
            &["-listen".into(), "127.0.0.1:0".into()],
            &[],
            log.clone(),
        )?;
        let ready_line = || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .find(|line| line.starts_with("vcsim ready:"))
                .map(str::to_string)
        };
        process
            .wait_until(START_TIMEOUT, || ready_line().is_some())
            .await?;
        let line = ready_line().unwrap_or_default();
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .map(str::to_string)
                .with_context(|| format!("no {name} in the simulator's line {line:?}"))
        };
        Ok(Simulator {
            server: field("host=")?,
            username: field("username=")?,
            password: field("password=")?,
            process,
        })
    }

    /// What the guest of VM `vm` configured from the metadata CAPV wrote, as the simulator last
    /// printed it (`addresses=[10.10.0.10/24] gateway4=10.10.0.1 gateway6=`), if it did.
    pub fn guest_network(&self, vm: &str) -> Option<String> {
        let prefix = format!("guest {vm}: ");
        std::fs::read_to_string(&self.process.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.strip_prefix(&prefix))
            .next_back()
            .map(str::to_string)
    }

    /// The last lines of the simulator's log.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// CAPV's manager running against one control plane and one simulator, its admission webhooks
/// registered. It stops when dropped, or when the test binary exits.
pub struct Manager {
    process: Tethered,
}

impl Manager {
    /// Starts CAPV's manager for `plane` (whose CRDs must include CAPI's and [`crd_files`]) with
    /// the simulator's credentials as its default credentials, registers its admission webhooks,
    /// and returns once the API server calls them.
    pub async fn start(plane: &ControlPlane, simulator: &Simulator) -> anyhow::Result<Manager> {
        let binaries = binaries().map_err(anyhow::Error::msg)?;
        let ports = ManagerPorts::free()?;
        let pki = plane.data_dir.join("pki");
        let credentials = plane.data_dir.join("capv-credentials.yaml");
        std::fs::write(
            &credentials,
            format!(
                "username: {}\npassword: {}\n",
                simulator.username, simulator.password
            ),
        )
        .context("writing CAPV's credentials file")?;
        let mut args = vec![
            format!("--kubeconfig={}", plane.kubeconfig.display()),
            format!("--credentials-file={}", credentials.display()),
            "--leader-elect=false".into(),
        ];
        args.extend(ports.flags(&pki));
        let manager = ReadyManager::start(
            plane,
            "capv-manager",
            &binaries.manager,
            &args,
            // Where CAPV looks for VSphereClusterIdentity secrets (unused by the test).
            &[("POD_NAMESPACE", "capv-system".as_ref())],
            ports.health,
            START_TIMEOUT,
        )
        .await?;
        let manifests = module_dir()
            .map_err(anyhow::Error::msg)?
            .join("config")
            .join("govmomi")
            .join("webhook")
            .join("manifests.yaml");
        let base = ports.webhook_base();
        let (client, ca_bundle) = (&manager.client, &manager.ca_bundle);
        register_admission(client, &manifests, "capv", &base, ca_bundle).await?;
        wait_until_served(client, manager.started).await?;
        Ok(Manager {
            process: manager.process,
        })
    }

    /// The manager's log, in the control plane's data directory.
    pub fn log(&self) -> &Path {
        &self.process.log
    }

    /// The last lines of the manager's log.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// A CAPV kind (`v1beta1`) for dynamic access.
pub fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1beta1", kind))
}

/// Waits until the API server calls CAPV's validating webhook: only it refuses a
/// `VSphereMachine` whose static address is not in CIDR form.
async fn wait_until_served(client: &kube::Client, started: Instant) -> anyhow::Result<()> {
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &resource("VSphereMachine"));
    let probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1beta1"),
        "kind": "VSphereMachine",
        "metadata": {"name": "capv-webhook-probe"},
        "spec": {"template": "probe", "network": {"devices": [
            {"networkName": "probe", "ipAddrs": ["10.0.0.1"]},
        ]}},
    }))?;
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    loop {
        match machines.create(&dry_run, &probe).await {
            Err(kube::Error::Api(status))
                if status.message.contains("should be in the CIDR format") =>
            {
                return Ok(());
            }
            outcome => {
                if started.elapsed() > START_TIMEOUT {
                    bail!(
                        "the API server did not call CAPV's webhooks within {START_TIMEOUT:?}; \
                         the probe got {:?}",
                        outcome.map(|_| "accepted")
                    );
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
