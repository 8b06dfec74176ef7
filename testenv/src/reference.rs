//! The reference provider, kubernetes-sigs/cluster-api-ipam-provider-in-cluster v1.1.0, built from
//! the Go module proxy and run as a process against a [`ControlPlane`], so that the conformance
//! suite can run against it as it runs against inpool (`tests/peers/`). Not used by the `inpool`
//! binary.
//!
//! - [`PROGRAM`] builds `target/reference/manager` (the module's root package is its `main`) from
//!   `testenv/reference/go.mod`, a module of its own that names it as a `tool`: v1.1.0 is built on
//!   Cluster API v1.11 and k8s.io/* v0.33 (the line CAPV's build shares), and its go.mod has no
//!   `replace` directives to copy.
//! - [`PROGRAM`]'s CRDs are the reference's own, `config/crd/bases/` of the module in the Go module
//!   cache. They define the kinds inpool's CRDs define (`InClusterIPPool` and the three others of
//!   `ipam.cluster.x-k8s.io`), so a control plane holds one provider's CRDs or the other's.
//! - [`start`] runs it cluster-wide with leader election off (`--leader-elect=false`,
//!   its default) and its admission webhooks off (`--webhook-port=0`: its `main.go` registers
//!   the `InClusterIPPool` and `InClusterPrefixPool` webhooks only for a non-zero port, and the
//!   manager then starts no webhook server), health and diagnostics on loopback ports.

use super::tethered::free_ports;
use super::{ControlPlane, GoProgram, RunningManager};

/// The release of the reference provider the bench runs (`testenv/reference/go.mod` pins it).
pub const VERSION: &str = "v1.1.0";

/// The reference provider's Go module, whose root package is its manager.
pub const MODULE: &str = "sigs.k8s.io/cluster-api-ipam-provider-in-cluster";

/// The name of the manager's leader election Lease (its `main.go`'s `LeaderElectionID`).
pub const LEASE_NAME: &str = "7bb7acb4.ipam.cluster.x-k8s.io";

/// The reference's manager and its CRDs: `testenv/reference/go.mod` builds `target/reference/`.
pub static PROGRAM: GoProgram = GoProgram::new(
    "reference",
    MODULE,
    "building sigs.k8s.io/cluster-api-ipam-provider-in-cluster v1.1.0 (testenv/reference/, \
     once): about 2 minutes on 2 cores; it shares Cluster API v1.11 and k8s.io/* v0.33 with \
     CAPV's build",
);

/// Starts the manager for `plane` (whose CRDs must include CAPI's Cluster, IPAddressClaim and
/// IPAddress and [`PROGRAM`]'s CRDs, and not inpool's) and returns once it reports ready.
pub async fn start(plane: &ControlPlane) -> anyhow::Result<RunningManager> {
    let [health, diagnostics] = free_ports()?;
    let args = [
        format!("--kubeconfig={}", plane.kubeconfig.display()),
        "--leader-elect=false".into(),
        "--webhook-port=0".into(),
        format!("--health-probe-bind-address=127.0.0.1:{health}"),
        format!("--diagnostics-address=127.0.0.1:{diagnostics}"),
        "--insecure-diagnostics".into(),
    ];
    PROGRAM.start(plane, &args, health).await
}

/// Starts the manager as [`start`] does, with its leader election on: its Lease [`LEASE_NAME`]
/// in `namespace`, as a Deployment in that namespace holds it. The manager has no flag for the
/// Lease's namespace; controller-runtime reads a pod's namespace from the ServiceAccount mount
/// (`/var/run/secrets/kubernetes.io/serviceaccount/namespace`). It runs in a mount namespace of
/// its own (`unshare --mount`, so root), in which a tmpfs over `/run` holds that file, as a pod's
/// mount does; nothing outside the process sees it. Returns once it reports ready (a standby is
/// ready too: look at the Lease for the leader).
pub async fn start_leader_elected(
    plane: &ControlPlane,
    namespace: &str,
) -> anyhow::Result<RunningManager> {
    let [health, diagnostics] = free_ports()?;
    let args = [
        format!("--kubeconfig={}", plane.kubeconfig.display()),
        "--leader-elect=true".into(),
        "--webhook-port=0".into(),
        format!("--health-probe-bind-address=127.0.0.1:{health}"),
        format!("--diagnostics-address=127.0.0.1:{diagnostics}"),
        "--insecure-diagnostics".into(),
    ];
    let pod_namespace = "mount -t tmpfs tmpfs /run && \
        mkdir -p /run/secrets/kubernetes.io/serviceaccount && \
        printf %s \"$POD_NAMESPACE\" > /run/secrets/kubernetes.io/serviceaccount/namespace && \
        exec \"$@\"";
    let launcher = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        pod_namespace,
        "reference-manager",
    ];
    PROGRAM
        .start_through(
            plane,
            &launcher,
            &args,
            &[("POD_NAMESPACE", namespace)],
            health,
        )
        .await
}

/// The release users upgrade from, v1.0.3 (`testenv/reference-v1.0.3/go.mod` pins it): the
/// same module, so a wrapper of its own, since one go.mod pins one version of a tool.
pub const V1_0_3: &str = "v1.0.3";

/// v1.0.3's manager and its CRDs (`InClusterIPPool` and `GlobalInClusterIPPool` only: the
/// prefix pools came in v1.1.0): `testenv/reference-v1.0.3/go.mod` builds
/// `target/reference-v1.0.3/`. It is built on Cluster API v1.10 and `k8s.io/*` v0.32, a line no
/// other Go build here shares.
pub static PROGRAM_V1_0_3: GoProgram = GoProgram::new(
    "reference-v1.0.3",
    MODULE,
    "building sigs.k8s.io/cluster-api-ipam-provider-in-cluster v1.0.3 \
     (testenv/reference-v1.0.3/, once): about 5 minutes on 2 cores; Cluster API v1.10 and \
     k8s.io/* v0.32 are its own",
);

/// Starts v1.0.3's manager for `plane` (whose CRDs must include CAPI's Cluster, IPAddressClaim
/// and IPAddress and [`PROGRAM_V1_0_3`]'s CRDs, and not inpool's or v1.1.0's) and returns once it
/// reports ready. v1.0.3 predates Cluster API's diagnostics flags: its metrics are on
/// `--metrics-bind-address`. `--webhook-port=0` turns its webhooks off as v1.1.0's does.
pub async fn start_v1_0_3(plane: &ControlPlane) -> anyhow::Result<RunningManager> {
    let [health, metrics] = free_ports()?;
    let args = [
        format!("--kubeconfig={}", plane.kubeconfig.display()),
        "--leader-elect=false".into(),
        "--webhook-port=0".into(),
        format!("--health-probe-bind-address=127.0.0.1:{health}"),
        format!("--metrics-bind-address=127.0.0.1:{metrics}"),
    ];
    PROGRAM_V1_0_3.start(plane, &args, health).await
}
