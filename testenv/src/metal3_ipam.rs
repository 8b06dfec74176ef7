//! Metal3's IPAM, metal3-io/ip-address-manager v1.13.2 (the IPAM of Cluster API Provider Metal3),
//! built from the Go module proxy and run as a process against a [`ControlPlane`], so that the
//! conformance suite runs against a second peer (`tests/peers/`). Not used by the `inpool` binary.
//!
//! - [`PROGRAM`] builds `target/metal3-ipam/manager` (the module's root package is its `main`) from
//!   `testenv/metal3-ipam/go.mod`, a module of its own that names it as a `tool`. v1.13.2 is built
//!   on Cluster API v1.13 and k8s.io/* v0.35, a graph no other part of the bench shares. Its go.mod
//!   replaces its `api` module with `./api`, a path that means nothing outside its repository; the
//!   wrapper replaces it with the released `github.com/metal3-io/ip-address-manager/api` v1.13.2.
//!   Cold, with the module cache warm and an empty build cache (`GOCACHE` pointed at an empty
//!   directory), `go build` took 4 min 45 s of wall time and 211 s of CPU on 2 cores shared with
//!   other builds (`nice -n 10`, 74% of one core on average; 1.1 GB of build cache).
//! - [`PROGRAM`]'s CRDs are its own, `config/crd/bases/` of the module in the Go module cache:
//!   `IPPool`, `IPClaim` and `IPAddress` of `ipam.metal3.io`, a group of their own, so they sit
//!   beside the reference's (or inpool's) CRDs on one control plane.
//! - [`start`] runs it cluster-wide with leader election off (`--leader-elect=false`, its
//!   default). Its admission webhooks are served but not registered with the API server, so the
//!   API server never calls them: its `main.go` sets them up unconditionally and its `/readyz`
//!   waits for the webhook server, so the server must start, with a certificate. They validate
//!   and default only Metal3's own kinds (`IPPool`, `IPClaim`, `IPAddress` of `ipam.metal3.io`);
//!   none of them sees a CAPI `IPAddressClaim` or `IPAddress`.

use super::tethered::{free_ports, serving_certificate_as_tls};
use super::{ControlPlane, GoProgram, RunningManager};

/// The release of Metal3's IPAM the bench runs (`testenv/metal3-ipam/go.mod` pins it).
pub const VERSION: &str = "v1.13.2";

/// Metal3's IPAM Go module, whose root package is its manager.
pub const MODULE: &str = "github.com/metal3-io/ip-address-manager";

/// Its manager and its CRDs: `testenv/metal3-ipam/go.mod` builds `target/metal3-ipam/`.
pub static PROGRAM: GoProgram = GoProgram::new(
    "metal3-ipam",
    MODULE,
    "building github.com/metal3-io/ip-address-manager v1.13.2 (testenv/metal3-ipam/, once): \
     about 5 minutes on 2 cores; Cluster API v1.13 and k8s.io/* v0.35 are its own",
);

/// Starts the manager for `plane` (whose CRDs must include CAPI's Cluster, IPAddressClaim and
/// IPAddress and [`PROGRAM`]'s CRDs) and returns once it reports ready.
pub async fn start(plane: &ControlPlane) -> anyhow::Result<RunningManager> {
    let [webhook, health, diagnostics] = free_ports()?;
    // Its webhook server reads controller-runtime's default file names, tls.crt and tls.key
    // (it has no flags to name others).
    let certs = serving_certificate_as_tls(plane, "metal3-ipam-certs")?;
    let args = [
        format!("--kubeconfig={}", plane.kubeconfig.display()),
        "--leader-elect=false".into(),
        format!("--webhook-port={webhook}"),
        format!("--webhook-cert-dir={}", certs.display()),
        format!("--health-addr=127.0.0.1:{health}"),
        format!("--diagnostics-address=127.0.0.1:{diagnostics}"),
        "--insecure-diagnostics".into(),
    ];
    PROGRAM.start(plane, &args, health).await
}
