//! The reference provider, kubernetes-sigs/cluster-api-ipam-provider-in-cluster v1.1.0, built from
//! the Go module proxy and run as a process against a [`ControlPlane`], so that the conformance
//! suite can run against it as it runs against inpool (`tests/peers/`). Not used by the `inpool`
//! binary.
//!
//! - [`binary`] builds `target/reference/manager` (the module's root package is its `main`) from
//!   `testenv/reference/go.mod`, a module of its own that names it as a `tool`: v1.1.0 is built on
//!   Cluster API v1.11 and k8s.io/* v0.33 (the line CAPV's build shares), and its go.mod has no
//!   `replace` directives to copy.
//! - [`crd_files`] is the reference's own CRDs, `config/crd/bases/` of the module in the Go module
//!   cache. They define the kinds inpool's CRDs define (`InClusterIPPool` and the three others of
//!   `ipam.cluster.x-k8s.io`), so a control plane holds one provider's CRDs or the other's.
//! - [`Manager::start`] runs it cluster-wide with leader election off (`--leader-elect=false`,
//!   its default) and its admission webhooks off (`--webhook-port=0`: its `main.go` registers
//!   the `InClusterIPPool` and `InClusterPrefixPool` webhooks only for a non-zero port, and the
//!   manager then starts no webhook server), health and diagnostics on loopback ports.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use super::tethered::{Tethered, free_ports, readyz};
use super::{ControlPlane, go_build, repo_root};

/// The release of the reference provider the bench runs (`testenv/reference/go.mod` pins it).
pub const VERSION: &str = "v1.1.0";

/// The reference provider's Go module, whose root package is its manager.
pub const MODULE: &str = "sigs.k8s.io/cluster-api-ipam-provider-in-cluster";

/// How long the manager may take to report ready.
const START_TIMEOUT: Duration = Duration::from_secs(120);

fn wrapper_module() -> PathBuf {
    repo_root().join("testenv").join("reference")
}

fn out_dir() -> PathBuf {
    repo_root().join("target").join("reference")
}

/// Builds the reference's manager once per process (see [`go_build`]).
pub fn binary() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let out = out_dir().join("manager");
            go_build(
                &wrapper_module(),
                MODULE,
                "",
                &out,
                &format!(
                    "building {MODULE} {VERSION} (testenv/reference/, once): about 2 minutes on \
                     2 cores; it shares Cluster API v1.11 and k8s.io/* v0.33 with CAPV's build"
                ),
            )?;
            Ok(out)
        })
        .clone()
}

/// The reference module's source in the Go module cache (downloaded if needed).
pub fn module_dir() -> Result<PathBuf, String> {
    super::go_module_dir(&wrapper_module(), MODULE)
}

/// The reference's CRDs, `config/crd/bases/` of its module, read where the Go module cache
/// holds them.
pub fn crd_files() -> Result<Vec<PathBuf>, String> {
    let bases = module_dir()?.join("config").join("crd").join("bases");
    let files = super::yaml_files(&bases);
    if files.is_empty() {
        return Err(format!("no CRDs in {}", bases.display()));
    }
    Ok(files)
}

/// The reference's manager running against one control plane. It stops when dropped, or when
/// the test binary exits.
pub struct Manager {
    process: Tethered,
}

impl Manager {
    /// Starts the manager for `plane` (whose CRDs must include CAPI's Cluster, IPAddressClaim
    /// and IPAddress and [`crd_files`], and not inpool's) and returns once it reports ready.
    pub async fn start(plane: &ControlPlane) -> anyhow::Result<Manager> {
        let binary = binary().map_err(anyhow::Error::msg)?;
        let [health, diagnostics] = free_ports()?;
        let args = vec![
            format!("--kubeconfig={}", plane.kubeconfig.display()),
            "--leader-elect=false".into(),
            "--webhook-port=0".into(),
            format!("--health-probe-bind-address=127.0.0.1:{health}"),
            format!("--diagnostics-address=127.0.0.1:{diagnostics}"),
            "--insecure-diagnostics".into(),
        ];
        let mut process = Tethered::spawn(
            "reference-manager",
            &binary,
            &args,
            &[],
            plane.data_dir.join("reference-manager.log"),
        )?;
        process.wait_until(START_TIMEOUT, || readyz(health)).await?;
        Ok(Manager { process })
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
