//! Metal3's Cluster API Provider (CAPM3) v1.13.2, built from the Go module proxy, for the
//! end-to-end tests with a bare-metal infrastructure provider (`tests/capm3/`). Not used by the
//! `inpool` binary.
//!
//! - [`PROGRAM`] builds `target/capm3/manager` (CAPM3's manager, the module's root package) from
//!   `testenv/capm3/go.mod`, a module of its own: CAPM3 v1.13.2 is built on Cluster API v1.13.4,
//!   controller-runtime v0.23 and k8s.io/* v0.35, a line no other Go program of the tests shares
//!   (CAPV's and the reference's are on v0.33, the control plane's and CAPI core's on v0.36).
//!   `time go build -o /tmp/m github.com/metal3-io/cluster-api-provider-metal3` in
//!   `testenv/capm3/`, 2 cores shared with other builds (load 6 to 14), module cache warm: 3 min
//!   59 s wall (2 min 18 s user CPU) on the build cache the other Go builds here had filled, 11 min
//!   52 s wall (3 min 10 s user CPU; 1.2 GB of build cache) with an empty `GOCACHE` of its own.
//!   Later builds are a cache hit. The binary is 84 MB.
//! - [`crd_files`] is CAPM3's CRDs, `config/crd/bases/` of the module, with the contract labels
//!   that CAPM3's `config/crd/kustomization.yaml` adds (`cluster.x-k8s.io/v1beta1: v1beta1` and
//!   `cluster.x-k8s.io/v1beta2: v1beta2`), written to `target/capm3/crds/`, and the
//!   `BareMetalHost` CRD (`metal3.io/v1alpha1`) that the module ships for its own development
//!   set-up (`examples/metal3crds/`, applied by its Makefile): the test plays baremetal-operator's
//!   part, so only the kind is needed, not its operator. Metal3's own IPAM CRDs
//!   (`ipam.metal3.io`) are not installed: CAPM3 watches `IPClaim`s only when the kind exists
//!   (`controllers/metal3data_controller.go`), and the tests name only Cluster API pools.
//! - [`start_manager`] runs CAPM3's manager against a [`ControlPlane`] as CAPI core's and CAPV's
//!   are run: its conversion webhook (`config/crd/patches/webhook_in_*.yaml`) and admission
//!   webhooks (`config/webhook/manifests.yaml`) registered with a URL on 127.0.0.1. CAPM3's
//!   webhooks cannot be turned off: its `main.go` registers them unconditionally, and its
//!   readiness check is the webhook server's. CAPM3 needs CAPI core running first: its
//!   `Metal3Data` controller lists `IPAddressClaim`s as `ipam.cluster.x-k8s.io/v1beta1` (CAPI's
//!   conversion webhook) when it starts, and watches them only if that kind exists then.
//!
//! CAPM3 v1.13.2 declares Cluster API v1.13; the bench runs CAPI core v1.14.2 with it, as it does
//! for CAPV: both speak the v1beta2 contract, and what CAPM3 reads from CAPI core's objects (the
//! Cluster's v1beta1 `InfrastructureReady` condition, kept under `status.deprecated.v1beta1`, and
//! the Machine's owner reference on the `Metal3Machine`) v1.14.2 still writes
//! (`core/reconcilers/cluster/cluster_controller_phases.go`). `tests/capm3/` shows it end to end.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use kube::core::{ApiResource, GroupVersionKind};

use super::tethered::{ManagerPorts, ReadyManager, serving_certificate_as_tls};
use super::webhooks::{register_admission, register_conversion, write_labelled_crds};
use super::{ControlPlane, GoProgram, RunningManager, repo_root};

/// The CAPM3 release the tests run with (`testenv/capm3/go.mod` pins the same).
pub const VERSION: &str = "v1.13.2";

/// CAPM3's Go module, whose root package is its manager.
pub const MODULE: &str = "github.com/metal3-io/cluster-api-provider-metal3";

/// CAPM3's API group (its kinds are served as `v1beta1` and `v1beta2`, stored as `v1beta2`).
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";

/// The `BareMetalHost`'s API group (`metal3.io/v1alpha1`).
pub const BMH_GROUP: &str = "metal3.io";

/// How long CAPM3's manager may take to report ready.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// CAPM3's manager: `testenv/capm3/go.mod` builds `target/capm3/manager` (see [`GoProgram`]).
pub static PROGRAM: GoProgram = GoProgram::new(
    "capm3",
    MODULE,
    "building github.com/metal3-io/cluster-api-provider-metal3 v1.13.2 (testenv/capm3/, once): \
     4 to 12 minutes on 2 cores, because CAPM3 is built on Kubernetes v0.35 and Cluster API \
     v1.13, which nothing else here shares",
);

fn out_dir() -> PathBuf {
    repo_root().join("target").join(PROGRAM.dir)
}

/// CAPM3's CRDs with their contract labels, and the `BareMetalHost` CRD, written once per
/// process to `target/capm3/crds/`.
pub fn crd_files() -> Result<Vec<PathBuf>, String> {
    static FILES: OnceLock<Result<Vec<PathBuf>, String>> = OnceLock::new();
    FILES
        .get_or_init(|| {
            let module = PROGRAM.module_dir()?;
            let bases = module.join("config").join("crd").join("bases");
            // What `labels` in CAPM3's config/crd/kustomization.yaml adds: CAPI reads the
            // contract version of an infrastructure kind from these.
            let mut files = write_labelled_crds(
                &bases,
                &out_dir().join("crds"),
                &[
                    ("cluster.x-k8s.io/v1beta1", "v1beta1"),
                    ("cluster.x-k8s.io/v1beta2", "v1beta2"),
                ],
            )?;
            let hosts = module
                .join("examples")
                .join("metal3crds")
                .join("metal3.io_baremetalhosts.yaml");
            if !hosts.is_file() {
                return Err(format!("no BareMetalHost CRD at {}", hosts.display()));
            }
            files.push(hosts);
            Ok(files)
        })
        .clone()
}

/// Starts CAPM3's manager for `plane` (whose CRDs must include CAPI's and [`crd_files`], and
/// whose CAPI core runs), points CAPM3's conversion and admission webhooks at it, and returns
/// once it reports ready. It stops when dropped, or when the test binary exits.
pub async fn start_manager(plane: &ControlPlane) -> anyhow::Result<RunningManager> {
    let binary = PROGRAM.binary().map_err(anyhow::Error::msg)?;
    let ports = ManagerPorts::free()?;
    // CAPM3 has no flags for the certificate's file names: it serves controller-runtime's
    // defaults, tls.crt and tls.key, from --webhook-cert-dir.
    let certs = serving_certificate_as_tls(plane, "capm3-webhook-certs")?;
    let args = vec![
        format!("--webhook-port={}", ports.webhook),
        format!("--webhook-cert-dir={}", certs.display()),
        format!("--health-addr=127.0.0.1:{}", ports.health),
        format!("--diagnostics-address=127.0.0.1:{}", ports.diagnostics),
        "--insecure-diagnostics".into(),
        "--leader-elect=false".into(),
        // Verbose enough to show each claim CAPM3 creates and each address it reads.
        "--v=4".into(),
    ];
    let manager = ReadyManager::start(
        plane,
        "capm3-manager",
        &binary,
        &args,
        &[("KUBECONFIG", plane.kubeconfig.as_os_str())],
        ports.health,
        START_TIMEOUT,
    )
    .await?;
    let (client, ca_bundle) = (&manager.client, &manager.ca_bundle);
    let config = PROGRAM
        .module_dir()
        .map_err(anyhow::Error::msg)?
        .join("config");
    let base = ports.webhook_base();
    register_conversion(
        client,
        &config.join("crd").join("patches"),
        &base,
        ca_bundle,
    )
    .await?;
    let manifests = config.join("webhook").join("manifests.yaml");
    register_admission(client, &manifests, "capm3", &base, ca_bundle).await?;
    Ok(RunningManager {
        process: manager.process,
    })
}

/// A CAPM3 kind (`v1beta2`, the version CAPM3 stores) for dynamic access.
pub fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1beta2", kind))
}

/// The `BareMetalHost` kind (`metal3.io/v1alpha1`) for dynamic access.
pub fn bare_metal_host() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        BMH_GROUP,
        "v1alpha1",
        "BareMetalHost",
    ))
}
