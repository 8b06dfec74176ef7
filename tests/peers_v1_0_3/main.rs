//! The conformance suite run against the reference provider v1.0.3, the release users upgrade
//! from, built from the Go module proxy and running as a process on a control plane of its own
//! (`support::reference_v1_0_3_env`: CAPI core's manager with its webhooks, v1.0.3's CRDs in
//! place of inpool's, its manager cluster-wide with its webhooks and leader election off). Its
//! CRDs define the kinds v1.1.0's do, so it cannot share `tests/peers/`'s control plane. Its
//! result is pinned check by check to `docs/conformance/reference-in-cluster-v1.0.3-report.yaml`,
//! as the other peers' are.

#[path = "../peers/pinned.rs"]
mod pinned;

use inpool_testenv::{reference, support};
use pinned::{built_here, keeps_its_results};

#[tokio::test]
async fn the_reference_provider_v1_0_3_keeps_its_conformance_results() {
    let env = support::reference_v1_0_3_env();
    keeps_its_results(
        env,
        "reference-in-cluster-v1.0.3",
        reference::V1_0_3,
        built_here(
            reference::MODULE,
            reference::V1_0_3,
            "--webhook-port=0 (no admission webhooks), --leader-elect=false",
        ),
        env.reference(),
    )
    .await;
}
