//! Helpers shared by the controller tests (`#[path]`-included): a namespace-scoped controller,
//! object builders, and waits on claim conditions.
#![allow(dead_code)] // each test file uses a different part

use std::collections::BTreeMap;
use std::time::Duration;

use inpool::api::{
    Cluster, IPAddress, IPAddressClaim, IPAddressClaimSpec, IPPoolReference, InClusterIPPool,
    InClusterIPPoolSpec,
};
use inpool::cli::Settings;
use inpool::telemetry::{HealthState, Metrics};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};

pub const GROUP: &str = "ipam.cluster.x-k8s.io";

/// An inpool controller running for one namespace until the test ends, audited every second
/// (see `controllers::audit`). When the test ends it asserts that no audit found drift between
/// the controller's memory and the API server: every controller test checks the audit too.
pub struct RunningController {
    task: tokio::task::JoinHandle<()>,
    metrics: Metrics,
}

/// Runs an inpool controller for one namespace until the test ends.
pub fn start_controller(client: &Client, ns: &str) -> RunningController {
    let settings = Settings {
        namespace: Some(ns.to_string()),
        audit_interval: Duration::from_secs(1),
        stray_reservation_age: Duration::from_secs(5),
        ..Settings::default()
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let client = client.clone();
    let metrics = Metrics::default();
    let task = {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let result =
                inpool::controllers::run(client, settings, metrics, HealthState::default()).await;
            panic!("controller stopped: {result:?}");
        })
    };
    RunningController { task, metrics }
}

impl RunningController {
    /// The `inpool_state_drift_total` samples that are not zero.
    pub fn drift(&self) -> Vec<String> {
        nonzero_samples(&self.metrics.encode(), "inpool_state_drift_total")
    }
}

impl Drop for RunningController {
    fn drop(&mut self) {
        self.task.abort();
        if !std::thread::panicking() {
            let drift = self.drift();
            assert!(drift.is_empty(), "the audit found drift: {drift:?}");
        }
    }
}

/// The samples of a metric family (`name{labels} value` lines) whose value is not zero.
pub fn nonzero_samples(exposition: &str, name: &str) -> Vec<String> {
    exposition
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| {
            l.rsplit(' ')
                .next()
                .is_some_and(|v| v.parse::<f64>() != Ok(0.0))
        })
        .map(str::to_string)
        .collect()
}

pub fn pool(name: &str, addresses: &[&str], prefix: i32, gateway: Option<&str>) -> InClusterIPPool {
    let mut spec = InClusterIPPoolSpec::new(addresses.iter().copied(), prefix);
    spec.gateway = gateway.map(str::to_string);
    InClusterIPPool::new(name, spec)
}

pub fn claim(name: &str, pool: &str) -> IPAddressClaim {
    IPAddressClaim::new(
        name,
        IPAddressClaimSpec {
            cluster_name: None,
            pool_ref: IPPoolReference::new(GROUP, "InClusterIPPool", pool),
        },
    )
}

/// A Cluster that CAPI's webhooks admit (they require a reference to its infrastructure; the
/// referenced object need not exist).
pub fn cluster(name: &str, paused: bool) -> Cluster {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {
            "paused": paused,
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                  "kind": "VSphereCluster", "name": name},
        },
    }))
    .expect("a Cluster")
}

pub async fn create<K>(api: &Api<K>, object: &K) -> K
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.create(&PostParams::default(), object)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", object.name_any()))
}

/// (status, reason, addressRef) of a claim's Ready condition.
pub fn ready_of(claim: &IPAddressClaim) -> Option<(String, String, Option<String>)> {
    let ready = claim.conditions().iter().find(|c| c.type_ == "Ready")?;
    let address_ref = claim
        .status
        .as_ref()
        .and_then(|s| s.address_ref.as_ref())
        .map(|r| r.name.clone());
    Some((ready.status.clone(), ready.reason.clone(), address_ref))
}

pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn wait_reason(claims: &Api<IPAddressClaim>, name: &str, reason: &str) -> IPAddressClaim {
    wait_for(
        &format!("claim {name} to be {reason}"),
        Duration::from_secs(60),
        || async {
            let claim = claims.get(name).await.ok()?;
            let (_, r, _) = ready_of(&claim)?;
            (r == reason).then_some(claim)
        },
    )
    .await
}

/// The address each claim holds, read from the `IPAddress` objects.
/// The addresses held from one pool.
pub async fn addresses_of_pool(client: &Client, ns: &str, pool: &str) -> Vec<String> {
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), ns);
    addresses
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none() && a.spec.pool_ref.name == pool)
        .map(|a| a.spec.address)
        .collect()
}

pub async fn addresses_by_claim(client: &Client, ns: &str) -> BTreeMap<String, String> {
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), ns);
    addresses
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
        .map(|a| (a.spec.claim_ref.name.clone(), a.spec.address.clone()))
        .collect()
}

/// Creates `n` claims quickly; names sort in creation order.
pub async fn create_claims(claims: &Api<IPAddressClaim>, pool: &str, n: usize) {
    let mut tasks = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(n.div_ceil(8)) {
        let claims = claims.clone();
        let names: Vec<String> = chunk.iter().map(|i| format!("c-{i:04}")).collect();
        let pool = pool.to_string();
        tasks.push(tokio::spawn(async move {
            for name in names {
                create(&claims, &claim(&name, &pool)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

pub async fn reasons(claims: &Api<IPAddressClaim>) -> BTreeMap<String, String> {
    claims
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|c| Some((c.name_any(), ready_of(c)?.1)))
        .collect()
}

pub async fn wait_counts(claims: &Api<IPAddressClaim>, allocated: usize, exhausted: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let r = reasons(claims).await;
        let a = r.values().filter(|v| *v == "AddressAllocated").count();
        let e = r.values().filter(|v| *v == "PoolExhausted").count();
        if a == allocated && e == exhausted {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let mut histogram: BTreeMap<&String, usize> = BTreeMap::new();
            for v in r.values() {
                *histogram.entry(v).or_default() += 1;
            }
            let list = claims.list(&ListParams::default()).await.unwrap().items;
            let stuck: Vec<String> = list
                .iter()
                .filter_map(|c| {
                    let ready = c.conditions().iter().find(|x| x.type_ == "Ready")?;
                    (ready.reason != "AddressAllocated").then(|| {
                        format!(
                            "{} ({}): {}",
                            c.name_any(),
                            c.spec.pool_ref.name,
                            ready.message
                        )
                    })
                })
                .take(5)
                .collect();
            panic!(
                "wanted {allocated} allocated and {exhausted} exhausted; reasons: {histogram:?} of {} claims; e.g. {stuck:?}",
                r.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
