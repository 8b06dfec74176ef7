//! `clusterctl upgrade apply` from inpool's installed release to the next, under a live burst of
//! claims, as an operator upgrades a management cluster.
//!
//! clusterctl v1.14.2 upgrades a provider by scaling its Deployment to zero, waiting for
//! `status.replicas` to say 0, deleting its components (all but the CRDs, the namespace and the
//! inventory: the RBAC and the Deployment go too) and installing the new release's. No pod runs
//! here: [`DeploymentStandIn`] runs inpool's binary for the Deployment as a kubelet would, stops it
//! with SIGTERM when it is scaled down, and starts it again for the new Deployment. The next
//! release is the committed components with another image tag (no second release exists), so the
//! same binary runs before and after: what is tested is the upgrade's path, not a change of code.
//!
//! Checked: the old Deployment is scaled to zero and its process exits 0, and the new release's
//! is a new Deployment; some claims are created while no provider runs, and are served once the
//! new one is ready; no claim realised before the upgrade moves; every invariant holds; the
//! inventory names the new release. The time without a provider is
//! printed, and docs/install.md#upgrade states it.

use std::path::Path;
use std::time::Duration;

use inpool::api::IPAddressClaim;
use inpool_testenv::common::*;
use kube::api::Api;

use super::clusterctl::{
    Clusterctl, control_plane, create_namespace, inpool_version, inventory_of_inpool,
};

/// The release the test upgrades to.
const NEXT: &str = "v0.1.1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_upgrade_apply_under_a_burst_reallocates_nothing() {
    let dir =
        std::env::temp_dir().join(format!("inpool-clusterctl-upgrade-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let clusterctl = Clusterctl::new(&dir);
    let plane = control_plane("upgrade");
    let client = plane.client().await;
    let kubeconfig = plane.kubeconfig.to_str().unwrap();
    clusterctl.init(&plane.kubeconfig, &[]).await;
    let pods = DeploymentStandIn::start(
        &client,
        &plane.kubeconfig,
        Path::new(env!("CARGO_BIN_EXE_inpool")),
    );
    let ns = "upgraded";
    create_namespace(&client, ns).await;
    let range = ("pool", "10.11.0.10-10.11.0.99");
    let before = realised_before_upgrade(&client, &pods, ns, range, "u", 0).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);

    clusterctl.add_release(NEXT);
    // A claim every 100 ms, from before clusterctl starts until after it is done.
    let burst = claims_arriving(&claims, "pool", "u", 10..70);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let upgrade = format!("inpool-system/inpool:{NEXT}");
    clusterctl
        .run(&[
            "upgrade",
            "apply",
            "--kubeconfig",
            kubeconfig,
            "--ipam",
            &upgrade,
        ])
        .await;
    let created = burst.await.unwrap();
    wait_counts(&claims, 70, 0).await;

    let old = format!("ghcr.io/inpool-dev/inpool:{}", inpool_version());
    let new = format!("ghcr.io/inpool-dev/inpool:{NEXT}");
    let (gap, during_gap) =
        replaced_once(&pods, [&old, &new], &created, &client, ns, &before).await;
    let runs = pods.runs();
    let inpool = inventory_of_inpool(&client).await;
    assert_eq!(inpool.data["version"], NEXT);
    println!(
        "UPGRADE clusterctl upgrade apply {} -> {NEXT} under a burst (a claim every 100 ms): no \
         provider for {:.1} s (the old one's exit to the new one's readiness; the new one \
         started {:.1} s after the exit); {during_gap} claims created meanwhile, all served \
         after it; the 10 claims realised before kept their addresses; 70 of 70 realised",
        inpool_version(),
        gap.as_secs_f64(),
        (runs[1].started - runs[0].stopped.unwrap().0).as_secs_f64(),
    );
}
