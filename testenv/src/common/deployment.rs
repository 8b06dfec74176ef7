//! What a kubelet and the Deployment controller do for inpool's Deployment, stood in for where no
//! pod runs: while the Deployment exists, undeleted, with `spec.replicas` of 1 or more, one
//! `inpool` process runs as its ServiceAccount with its leader election, and `status.replicas`
//! says 1; scaled to zero or deleted, the process gets SIGTERM and is waited for, as a pod's
//! graceful termination, and then `status.replicas` says 0. clusterctl's and
//! cluster-api-operator's upgrades scale the provider down, wait for that 0, delete its
//! components and install the new ones: with this stand-in a test sees the provider stop and the
//! new one start exactly where those steps put them. The image of each run is recorded, so that a
//! test can tell which release's Deployment it stood in for.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Inpool, SERVICE_ACCOUNT, SYSTEM_NAMESPACE, service_account_kubeconfig};

/// inpool's Deployment as the components name it.
pub const DEPLOYMENT: &str = "inpool-controller-manager";

/// One run of the process the stand-in made.
#[derive(Clone, Debug)]
pub struct PodRun {
    /// The Deployment's image when the run began.
    pub image: String,
    pub started: Instant,
    /// When its `/readyz` first answered 200.
    pub ready: Option<Instant>,
    /// When it had exited after SIGTERM, and its exit code.
    pub stopped: Option<(Instant, Option<i32>)>,
}

/// The stand-in, polling the Deployment every 100 ms. Dropping it stops the process.
pub struct DeploymentStandIn {
    runs: Arc<Mutex<Vec<PodRun>>>,
    task: tokio::task::JoinHandle<()>,
}

impl DeploymentStandIn {
    /// Stands in for the kubelet of `inpool-system/inpool-controller-manager` on the control
    /// plane of `admin` (a kubeconfig), running `binary`.
    pub fn start(client: &Client, admin: &Path, binary: &Path) -> DeploymentStandIn {
        let runs = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(stand_in(
            Api::namespaced(client.clone(), SYSTEM_NAMESPACE),
            service_account_kubeconfig(admin),
            binary.to_path_buf(),
            runs.clone(),
        ));
        DeploymentStandIn { runs, task }
    }

    /// The runs so far, oldest first.
    pub fn runs(&self) -> Vec<PodRun> {
        self.runs.lock().unwrap().clone()
    }
}

impl Drop for DeploymentStandIn {
    fn drop(&mut self) {
        // Aborting the task drops its process, which kills it.
        self.task.abort();
    }
}

async fn stand_in(
    deployments: Api<Deployment>,
    kubeconfig: PathBuf,
    binary: PathBuf,
    runs: Arc<Mutex<Vec<PodRun>>>,
) {
    let mut running: Option<Inpool> = None;
    let mut reported: Option<i32> = None;
    loop {
        let deployment = match deployments.get_opt(DEPLOYMENT).await {
            Ok(found) => found,
            // The API server may be away for a moment: look again.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let wanted = deployment.as_ref().is_some_and(|d| {
            d.metadata.deletion_timestamp.is_none()
                && d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1) > 0
        });
        running = match (running.take(), wanted) {
            (None, true) => {
                let image = deployment
                    .as_ref()
                    .and_then(|d| d.spec.as_ref()?.template.spec.as_ref())
                    .and_then(|pod| pod.containers.first()?.image.clone())
                    .unwrap_or_default();
                let leader_election = format!("--leader-election-namespace={SYSTEM_NAMESPACE}");
                let name = format!("{SERVICE_ACCOUNT} ({image})");
                let started = Instant::now();
                let process = Inpool::start(
                    &binary,
                    &name,
                    &kubeconfig,
                    &["--leader-elect", &leader_election],
                );
                runs.lock().unwrap().push(PodRun {
                    image,
                    started,
                    ready: None,
                    stopped: None,
                });
                Some(process)
            }
            (Some(mut process), false) => {
                // SIGTERM, waited for off the runtime's threads (it blocks up to 20 s).
                let code = tokio::task::spawn_blocking(move || process.terminate())
                    .await
                    .unwrap_or(None);
                if let Some(run) = runs.lock().unwrap().last_mut() {
                    run.stopped = Some((Instant::now(), code));
                }
                None
            }
            (Some(process), true) => {
                let waiting = runs
                    .lock()
                    .unwrap()
                    .last()
                    .is_some_and(|r| r.ready.is_none());
                if waiting
                    && process
                        .get("/readyz")
                        .await
                        .is_some_and(|r| r.status == 200)
                    && let Some(run) = runs.lock().unwrap().last_mut()
                {
                    run.ready = Some(Instant::now());
                }
                Some(process)
            }
            (None, false) => None,
        };
        let replicas = i32::from(running.is_some());
        if deployment.is_some() && reported != Some(replicas) {
            let status = json!({"status": {"replicas": replicas}});
            if deployments
                .patch_status(DEPLOYMENT, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .is_ok()
            {
                reported = Some(replicas);
            }
        } else if deployment.is_none() {
            reported = None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
