//! The conformance suite run against two peers, each built from the Go module proxy and running
//! as a process on the test control plane (`support::peers_env`: CAPI core's manager with its
//! webhooks, the peers' own CRDs in place of inpool's, each manager cluster-wide with leader
//! election off):
//!
//! - the reference provider, cluster-api-ipam-provider-in-cluster v1.1.0 (webhooks off);
//! - Metal3's IPAM, ip-address-manager v1.13.2 (webhooks served, not registered).
//!
//! Each peer's result is pinned check by check to its committed report in `docs/conformance/`: a
//! check whose result changes fails the test and is named. The fresh report is written to
//! `target/conformance/` first.

mod pinned;

use inpool_testenv::{metal3_ipam, reference, support};
use pinned::{built_here, keeps_its_results};
use tokio::sync::Mutex;

/// One suite at a time: the two share the control plane and the machine's two cores, and the
/// suite's timed checks (quiet periods, the burst) should measure the peer, not the other run.
static ONE_SUITE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

#[tokio::test]
async fn the_reference_provider_keeps_its_conformance_results() {
    let _turn = ONE_SUITE_AT_A_TIME.lock().await;
    let env = support::peers_env();
    keeps_its_results(
        env,
        "reference-in-cluster",
        reference::VERSION,
        built_here(
            reference::MODULE,
            reference::VERSION,
            "--webhook-port=0 (no admission webhooks), --leader-elect=false",
        ),
        env.reference(),
    )
    .await;
}

#[tokio::test]
async fn metal3_ipam_keeps_its_conformance_results() {
    let _turn = ONE_SUITE_AT_A_TIME.lock().await;
    let env = support::peers_env();
    keeps_its_results(
        env,
        "metal3-ipam",
        metal3_ipam::VERSION,
        built_here(
            metal3_ipam::MODULE,
            metal3_ipam::VERSION,
            "--leader-elect=false, its admission webhooks served but not registered (the API \
             server does not call them)",
        ),
        env.metal3(),
    )
    .await;
}
