//! The `inpool` binary running as its ServiceAccount (exactly the permissions of `config/rbac`,
//! cluster-wide as deployed) on real pools and claims: it realises and releases claims without a
//! single forbidden request, and its per-pool gauges equal the pools' `status.ipAddresses`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use inpool::api::{Cluster, GlobalInClusterIPPool, IPAddressClaim, InClusterIPPool};
use inpool_testenv::{common, support};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

use common::{
    Inpool, addresses_by_claim, claim, claim_states, cluster, create, ensure_applied, global_claim,
    global_pool, merge_patch, of_cluster, one_inpool_test_at_a_time, pool, reservations_of,
    service_account_kubeconfig, unique, wait_for, wait_gone,
};

/// inpool as its ServiceAccount on the shared control plane, on every namespace.
fn start_inpool(name: &str) -> Inpool {
    let kubeconfig = service_account_kubeconfig(support::env().kubeconfig());
    Inpool::start(env!("CARGO_BIN_EXE_inpool"), name, &kubeconfig, &[])
}

async fn create_cluster(client: &Client, namespace: &str, name: &str) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    create(&clusters, &cluster(name, false)).await;
}

/// Runs the `inpool` binary as its ServiceAccount (exactly the permissions of `config/rbac`,
/// cluster-wide as deployed) against real pools and claims: claims are realised, a deleted claim
/// releases its address and reservation to the oldest waiting claim, Events are recorded, a
/// pool is protected while in use and let go after, and nothing is ever forbidden. A missing
/// rule in `config/rbac/role.yaml` makes one of these steps fail.
#[tokio::test]
async fn as_its_service_account_inpool_realises_and_releases_claims() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let (client, ns) = support::env().namespace().await;
    let mut inpool = start_inpool("claims");
    inpool.wait_ready(Duration::from_secs(30)).await;

    create_cluster(&client, &ns, "workload").await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    create(
        &pools,
        &pool("pool", &["10.77.0.10-10.77.0.11"], 24, Some("10.77.0.1")),
    )
    .await;
    let global_name = unique("sa-v6");
    let global_pools: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    create(
        &global_pools,
        &global_pool(&global_name, &["2001:db8:77::10-2001:db8:77::1f"], 64),
    )
    .await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    for name in ["first", "second"] {
        create(&claims, &of_cluster(claim(name, "pool"), "workload")).await;
    }
    let v6 = of_cluster(global_claim("v6", &global_name), "workload");
    create(&claims, &v6).await;
    // Creation timestamps have one-second resolution: the waiting claim is unambiguously last.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create(&claims, &of_cluster(claim("waiting", "pool"), "workload")).await;

    let allocated = || ("True".to_string(), "AddressAllocated".to_string());
    let exhausted = || ("False".to_string(), "PoolExhausted".to_string());
    let expected = BTreeMap::from([
        ("first".to_string(), allocated()),
        ("second".to_string(), allocated()),
        ("v6".to_string(), allocated()),
        ("waiting".to_string(), exhausted()),
    ]);
    wait_for(
        "three claims realised, one PoolExhausted",
        Duration::from_secs(60),
        || async { (claim_states(&claims).await == expected).then_some(()) },
    )
    .await;
    let held = addresses_by_claim(&client, &ns).await;
    assert_eq!(held.len(), 3, "{held:?}");
    assert_eq!(held["v6"], "2001:db8:77::10");
    let reserved = reservations_of(&client, &ns).await;
    for (claim, address) in &held {
        assert_eq!(reserved.get(address), Some(claim), "{reserved:?}");
    }
    // Events were recorded (events.k8s.io create/patch).
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    wait_for(
        "AddressAllocated and PoolExhausted events",
        Duration::from_secs(30),
        || async {
            let reasons: BTreeSet<String> = events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|e| e.reason)
                .collect();
            (reasons.contains("AddressAllocated") && reasons.contains("PoolExhausted"))
                .then_some(())
        },
    )
    .await;

    // Deleting a realised claim releases its address (IPAddress and reservation) to the waiting
    // claim.
    let released = held["first"].clone();
    claims
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&claims, "first", Duration::from_secs(30)).await;
    wait_for(
        "the waiting claim to get the released address",
        Duration::from_secs(30),
        || async {
            let states = claim_states(&claims).await;
            (states.get("waiting") == Some(&allocated())).then_some(())
        },
    )
    .await;
    let held = addresses_by_claim(&client, &ns).await;
    assert_eq!(held.get("first"), None);
    assert_eq!(held.get("waiting"), Some(&released));
    let reserved = reservations_of(&client, &ns).await;
    assert_eq!(reserved.get(&released).map(String::as_str), Some("waiting"));
    assert!(!reserved.values().any(|c| c == "first"), "{reserved:?}");

    // A pool in use is protected (ProtectPool) and let go once its claims are gone.
    let pool = pools.get("pool").await.unwrap();
    assert!(
        pool.finalizers()
            .contains(&"ipam.cluster.x-k8s.io/ProtectPool".to_string()),
        "{:?}",
        pool.finalizers()
    );
    pools
        .delete("pool", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        pools.get_opt("pool").await.unwrap().is_some(),
        "a pool in use is not deleted"
    );
    for name in ["second", "waiting", "v6"] {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    wait_gone(&pools, "pool", Duration::from_secs(30)).await;
    wait_for(
        "every address and reservation released",
        Duration::from_secs(30),
        || async {
            (addresses_by_claim(&client, &ns).await.is_empty()
                && reservations_of(&client, &ns).await.is_empty())
            .then_some(())
        },
    )
    .await;
    global_pools
        .delete(&global_name, &DeleteParams::default())
        .await
        .unwrap();

    inpool.assert_nothing_forbidden();
    assert_eq!(inpool.terminate(), Some(0), "logs:\n{}", inpool.logs());
    inpool.assert_nothing_forbidden();
}

/// The `inpool_pool_*` gauges of one pool, by metric name, from an OpenMetrics text.
fn pool_gauges(text: &str, kind_: &str, namespace: &str, name_: &str) -> BTreeMap<String, i64> {
    let line = regex::Regex::new(r"^(inpool_pool_[a-z_]+)\{([^}]*)\} (\S+)$").unwrap();
    let label = regex::Regex::new(r#"(\w+)="([^"]*)""#).unwrap();
    let mut gauges = BTreeMap::new();
    for l in text.lines() {
        let Some(c) = line.captures(l) else { continue };
        let labels: BTreeMap<&str, &str> = label
            .captures_iter(c.get(2).unwrap().as_str())
            .map(|l| (l.get(1).unwrap().as_str(), l.get(2).unwrap().as_str()))
            .collect();
        if labels.get("pool_kind") == Some(&kind_)
            && labels.get("pool_namespace") == Some(&namespace)
            && labels.get("pool_name") == Some(&name_)
            && let Ok(value) = c[3].parse()
        {
            gauges.insert(c[1].to_string(), value);
        }
    }
    gauges
}

/// The gauges a pool's `status.ipAddresses` implies, plus the waiting claims.
fn gauges_of(status: &inpool::api::IPAddressesStatus, waiting: i64) -> BTreeMap<String, i64> {
    BTreeMap::from([
        ("inpool_pool_size".to_string(), status.total),
        ("inpool_pool_used".to_string(), status.used),
        ("inpool_pool_free".to_string(), status.free),
        ("inpool_pool_out_of_range".to_string(), status.out_of_range),
        ("inpool_pool_waiting_claims".to_string(), waiting),
    ])
}

/// `/metrics` of a running `inpool` (as its ServiceAccount): the per-pool gauges equal the pool's
/// `status.ipAddresses` (and the waiting claims), follow a growth of the pool, and go when the
/// pool goes.
#[tokio::test]
async fn per_pool_gauges_match_the_pool_status() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let (client, ns) = support::env().namespace().await;
    let inpool = start_inpool("gauges");
    create_cluster(&client, &ns, "workload").await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    create(
        &pools,
        &pool("gauged", &["10.78.0.10-10.78.0.13"], 24, None),
    )
    .await;
    let global_name = unique("gauged-v6");
    let global_pools: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    create(
        &global_pools,
        &global_pool(&global_name, &["2001:db8:78::/120"], 64),
    )
    .await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    for i in 0..5 {
        let c = of_cluster(claim(&format!("m-{i}"), "gauged"), "workload");
        create(&claims, &c).await;
    }
    let v6 = of_cluster(global_claim("v6", &global_name), "workload");
    create(&claims, &v6).await;

    // Polls until the pool's status has the expected counts and the gauges equal them.
    let observe = || async {
        let pool = pools.get("gauged").await.ok();
        let status = pool.and_then(|p| p.status?.ip_addresses);
        let global = global_pools.get(&global_name).await.ok();
        let global_status = global.and_then(|p| p.status?.ip_addresses);
        let metrics = inpool
            .get("/metrics")
            .await
            .map(|r| r.body)
            .unwrap_or_default();
        let ours = pool_gauges(&metrics, "InClusterIPPool", &ns, "gauged");
        let theirs = pool_gauges(&metrics, "GlobalInClusterIPPool", "", &global_name);
        (status, global_status, ours, theirs)
    };
    let wait_for_match = |what: &'static str, expected: (i64, i64, i64, i64), waiting: i64| {
        let observe = &observe;
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let observed = observe().await;
                let (status, global_status, ours, theirs) = &observed;
                if let (Some(status), Some(global_status)) = (status, global_status)
                    && (status.total, status.used, status.free, status.out_of_range) == expected
                    && *ours == gauges_of(status, waiting)
                    && *theirs == gauges_of(global_status, 0)
                    && (global_status.total, global_status.used) == (255, 1)
                {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for {what}: pool status, global pool status, pool gauges, \
                     global pool gauges: {observed:#?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // 4 addresses, 5 claims: 4 used, none free, one waiting. The IPv6 /120 without its
    // subnet-router anycast address: 255, one used.
    wait_for_match(
        "gauges equal to the status (4 used, 1 waiting)",
        (4, 4, 0, 0),
        1,
    )
    .await;

    // Grown to 6 addresses: the waiting claim is realised, one address stays free.
    merge_patch(
        &pools,
        "gauged",
        json!({ "spec": { "addresses": ["10.78.0.10-10.78.0.15"] } }),
    )
    .await;
    wait_for_match(
        "gauges equal to the status after growth (5 used, 1 free)",
        (6, 5, 1, 0),
        0,
    )
    .await;

    // The pool goes (after its claims): so do its gauges.
    for i in 0..5 {
        claims
            .delete(&format!("m-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    pools
        .delete("gauged", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the deleted pool's gauges to go",
        Duration::from_secs(60),
        || async {
            let metrics = inpool.get("/metrics").await?.body;
            pool_gauges(&metrics, "InClusterIPPool", &ns, "gauged")
                .is_empty()
                .then_some(())
        },
    )
    .await;
    inpool.assert_nothing_forbidden();
}
