//! What a kubelet and the Deployment controller do for inpool's Deployment, stood in for where no
//! pod runs: while the Deployment exists, undeleted, with `spec.replicas` of 1 or more, one
//! `inpool` process runs its `manager` container as deployed (its args, its env with the downward
//! API resolved, as its ServiceAccount), and once it is ready the Deployment's status says one
//! replica available; scaled to zero or deleted, the process gets SIGTERM and is waited for, as a
//! pod's graceful termination, and then `status.replicas` says 0. clusterctl's and
//! cluster-api-operator's upgrades scale the provider down, wait for that 0, delete its
//! components and install the new ones: with this stand-in a test sees the provider stop and the
//! new one start exactly where those steps put them. The image of each run is recorded, so that a
//! test can tell which release's Deployment it stood in for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use inpool::api::{IPAddressClaim, InClusterIPPool};

use super::{
    Inpool, SYSTEM_NAMESPACE, addresses_by_claim, assert_invariants, claim, create,
    service_account_kubeconfig_of, wait_counts, wait_for,
};

/// inpool's Deployment as the components name it.
pub const DEPLOYMENT: &str = "inpool-controller-manager";

/// One run of the process the stand-in made.
#[derive(Clone, Debug)]
pub struct PodRun {
    /// The container's image when the run began.
    pub image: String,
    pub started: Instant,
    /// When its `/readyz` first answered 200.
    pub ready: Option<Instant>,
    /// When it had exited after SIGTERM, and its exit code.
    pub stopped: Option<(Instant, Option<i32>)>,
    /// The uid of the Deployment it ran for: a Deployment deleted and created again has a new
    /// one.
    pub deployment_uid: String,
    /// Why it was stopped: its Deployment scaled to zero, or deleted.
    pub stopped_because: Option<Stop>,
}

/// What made the stand-in stop a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    ScaledToZero,
    Deleted,
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
            admin.to_path_buf(),
            binary.to_path_buf(),
            runs.clone(),
        ));
        DeploymentStandIn { runs, task }
    }

    /// The runs so far, oldest first. Panics if the stand-in itself has ended (its own panic,
    /// printed above, says why), so that a wait on it fails at once rather than at its timeout.
    pub fn runs(&self) -> Vec<PodRun> {
        assert!(
            !self.task.is_finished(),
            "the Deployment stand-in ended: its panic is printed above"
        );
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
    admin: PathBuf,
    binary: PathBuf,
    runs: Arc<Mutex<Vec<PodRun>>>,
) {
    let mut running: Option<Inpool> = None;
    // The status last reported: none yet, 0 replicas, or 1 available.
    let mut reported: Option<bool> = None;
    loop {
        let deployment = match deployments.get_opt(DEPLOYMENT).await {
            Ok(found) => found,
            // The API server may be away for a moment: look again.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let unwanted = match &deployment {
            None => Some(Stop::Deleted),
            Some(d) if d.metadata.deletion_timestamp.is_some() => Some(Stop::Deleted),
            Some(d) if d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1) == 0 => {
                Some(Stop::ScaledToZero)
            }
            Some(_) => None,
        };
        let wanted = deployment.as_ref().filter(|_| unwanted.is_none());
        running = match (running.take(), wanted) {
            (None, Some(deployment)) => {
                let (image, process) = run_as_deployed(deployment, &admin, &binary);
                runs.lock().unwrap().push(PodRun {
                    image,
                    started: Instant::now(),
                    ready: None,
                    stopped: None,
                    deployment_uid: deployment.uid().unwrap_or_default(),
                    stopped_because: None,
                });
                Some(process)
            }
            (Some(mut process), None) => {
                // SIGTERM, waited for off the runtime's threads (it blocks up to 20 s).
                let code = tokio::task::spawn_blocking(move || process.terminate())
                    .await
                    .unwrap_or(None);
                if let Some(run) = runs.lock().unwrap().last_mut() {
                    run.stopped = Some((Instant::now(), code));
                    run.stopped_because = unwanted;
                }
                None
            }
            (Some(process), Some(_)) => {
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
            (None, None) => None,
        };
        let available = running.is_some()
            && runs
                .lock()
                .unwrap()
                .last()
                .is_some_and(|r| r.ready.is_some());
        if deployment.is_none() {
            reported = None;
        } else if reported != Some(available) {
            // Available, as cluster-api-operator's health check reads it; else the replicas left.
            let reported_now = if available {
                crate::operator::report_available(
                    &deployments.clone().into_client(),
                    SYSTEM_NAMESPACE,
                    DEPLOYMENT,
                )
                .await
                .is_ok()
            } else {
                let status = json!({"status": {"replicas": i32::from(running.is_some()),
                    "updatedReplicas": null, "readyReplicas": null, "availableReplicas": null,
                    "conditions": null}});
                deployments
                    .patch_status(DEPLOYMENT, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .is_ok()
            };
            if reported_now {
                reported = Some(available);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts `binary` as the `manager` container of `deployment` runs: its args, its env (the
/// downward API resolved) and `KUBECONFIG` acting as the pod's ServiceAccount; returns the
/// container's image and the process.
fn run_as_deployed(deployment: &Deployment, admin: &Path, binary: &Path) -> (String, Inpool) {
    let pod = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("the Deployment has a pod template");
    let container = pod
        .containers
        .iter()
        .find(|c| c.name == "manager")
        .expect("a container named manager");
    let namespace = deployment.namespace().unwrap_or_default();
    let account = pod.service_account_name.as_deref().unwrap_or("default");
    let mut env = container_env(container, deployment);
    env.push((
        "KUBECONFIG".into(),
        service_account_kubeconfig_of(admin, &namespace, account)
            .display()
            .to_string(),
    ));
    let image = container.image.clone().unwrap_or_default();
    let args = container.args.clone().unwrap_or_default();
    let name = format!("{} ({image})", deployment.name_any());
    (image, Inpool::start_as_deployed(binary, &name, &args, &env))
}

/// The container's environment as the kubelet gives it to the process: plain values, and the
/// pod's namespace and name for the downward API's `metadata.namespace` and `metadata.name` (a
/// pod of the Deployment is named after it); any other source fails the test.
pub fn container_env(container: &Container, deployment: &Deployment) -> Vec<(String, String)> {
    let pod_name = format!("{}-0", deployment.name_any());
    let namespace = deployment.namespace().unwrap_or_default();
    container
        .env
        .iter()
        .flatten()
        .map(|var| {
            let value = match (&var.value, &var.value_from) {
                (Some(value), None) => value.clone(),
                (None, Some(from)) => {
                    match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                        Some("metadata.namespace") => namespace.clone(),
                        Some("metadata.name") => pod_name.clone(),
                        _ => panic!("no kubelet here to resolve {var:?}"),
                    }
                }
                _ => String::new(),
            };
            (var.name.clone(), value)
        })
        .collect()
}

/// What an upgrade test sets up before it upgrades: once `pods` runs the installed release's
/// provider and it is ready, an `InClusterIPPool` `pool` of `range` (/24) in `ns` and ten claims
/// `PREFIX-00` to `PREFIX-09` on it, realised. `realised_already` counts the claims of `ns`
/// realised by earlier steps. Returns claim → address of every claim of `ns`, to hold against
/// the addresses after the upgrade ([`replaced_once`]).
pub async fn realised_before_upgrade(
    client: &Client,
    pods: &DeploymentStandIn,
    ns: &str,
    (pool, range): (&str, &str),
    prefix: &str,
    realised_already: usize,
) -> BTreeMap<String, String> {
    wait_for(
        "the installed release's provider to be ready",
        Duration::from_secs(60),
        || async { pods.runs().first()?.ready },
    )
    .await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), ns);
    create(&pools, &super::pool(pool, &[range], 24, None)).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    for i in 0..10 {
        create(&claims, &claim(&format!("{prefix}-{i:02}"), pool)).await;
    }
    wait_counts(&claims, realised_already + 10, 0).await;
    addresses_by_claim(client, ns).await
}

/// Claims `PREFIX-NN` on `pool` for each of `numbers`, one every 100 ms, in a task: as machines
/// arrive while a provider is upgraded. The task returns when each was created.
pub fn claims_arriving(
    claims: &Api<IPAddressClaim>,
    pool: &str,
    prefix: &str,
    numbers: std::ops::Range<usize>,
) -> tokio::task::JoinHandle<Vec<Instant>> {
    let (claims, pool, prefix) = (claims.clone(), pool.to_string(), prefix.to_string());
    tokio::spawn(async move {
        let mut created = Vec::new();
        for i in numbers {
            create(&claims, &claim(&format!("{prefix}-{i:02}"), &pool)).await;
            created.push(Instant::now());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        created
    })
}

/// Judges a provider replaced by an upgrade while the claims of `created` arrived, as clusterctl's
/// upgrader replaces one: `pods` ran one provider for each of `images` in turn; the old one was
/// stopped because its Deployment was scaled to zero, and exited 0; the new one ran for another
/// Deployment (deleted and created again, not rolled) and got ready; some claims were created
/// while none ran; every claim of `before` (claim → address, read before the upgrade) keeps its
/// address in `ns`; every invariant of `ns` holds. Returns the time without a provider (the old
/// one's exit to the new one's readiness) and how many claims were created in it.
pub async fn replaced_once(
    pods: &DeploymentStandIn,
    images: [&str; 2],
    created: &[Instant],
    client: &Client,
    ns: &str,
    before: &BTreeMap<String, String>,
) -> (Duration, usize) {
    let runs = pods.runs();
    assert_eq!(
        runs.iter().map(|r| r.image.as_str()).collect::<Vec<_>>(),
        images,
        "one provider for each release's Deployment"
    );
    let (stopped, code) = runs[0].stopped.expect("the old release's provider stopped");
    assert_eq!(code, Some(0), "the old provider exits 0 on SIGTERM");
    assert_eq!(
        runs[0].stopped_because,
        Some(Stop::ScaledToZero),
        "the upgrade scales the old Deployment to zero before it deletes it"
    );
    assert_ne!(
        runs[0].deployment_uid, runs[1].deployment_uid,
        "the new release's Deployment is a new object, not the old one rolled"
    );
    let ready = runs[1].ready.expect("the new provider ready");
    let after = addresses_by_claim(client, ns).await;
    for (claim, address) in before {
        assert_eq!(
            after.get(claim),
            Some(address),
            "claim {claim} realised before the upgrade keeps its address"
        );
    }
    assert_invariants(client, ns, &mut []).await;
    let during_gap = created
        .iter()
        .filter(|t| (stopped..ready).contains(*t))
        .count();
    assert!(
        during_gap > 0,
        "no claim was created while no provider ran: the burst missed the upgrade"
    );
    (ready - stopped, during_gap)
}
