//! The claim controller on the real control plane: the IPAM contract, the `Ready` condition,
//! fair and event-driven waiting, release, adoption, pause, uniqueness with two processes, and
//! one watch per kind.
//!
//! CAPI core's manager runs beside it (`support::capi_env`): every `IPAddress` inpool writes, and
//! every Cluster and claim the tests write, passes CAPI's own webhooks, and CAPI's Cluster
//! controller reconciles the Clusters whose pause the claims follow.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use inpool::api::reservation::IPAddressReservation;
use inpool::api::{Cluster, IPAddress, IPAddressClaim, IPPoolReference, InClusterIPPool};
use inpool_testenv::{common, support};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use common::*;

#[tokio::test]
async fn a_claim_is_realised_with_an_address_that_follows_the_contract() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let created_pool = create(
        &pools,
        &pool("pool", &["10.0.0.0/24"], 24, Some("10.0.0.1")),
    )
    .await;
    let mut c = claim("machine-0", "pool");
    c.metadata.labels = Some([("cluster.x-k8s.io/cluster-name".into(), "c1".into())].into());
    // The cluster label names a Cluster that must exist.
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    create(&clusters, &cluster("c1", false)).await;
    let created = create(&claims, &c).await;

    let claim = wait_reason(&claims, "machine-0", "AddressAllocated").await;
    let ready = claim
        .conditions()
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.observed_generation, claim.metadata.generation);
    assert_eq!(
        claim
            .status
            .as_ref()
            .unwrap()
            .address_ref
            .as_ref()
            .unwrap()
            .name,
        "machine-0"
    );
    let legacy = claim.status.as_ref().unwrap().legacy_conditions().unwrap();
    let mirrored = legacy.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(mirrored.status, "True", "legacy mirror matches Ready");
    assert!(
        claim
            .finalizers()
            .contains(&"ipam.cluster.x-k8s.io/ReleaseAddress".to_string())
    );

    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    let address = addresses.get("machine-0").await.unwrap();
    assert_eq!(
        address.spec.address, "10.0.0.2",
        "lowest free: network and gateway skipped"
    );
    assert_eq!(address.spec.prefix, 24);
    assert_eq!(address.spec.gateway.as_deref(), Some("10.0.0.1"));
    assert_eq!(address.spec.pool_ref, created.spec.pool_ref);
    assert_eq!(address.spec.claim_ref.name, "machine-0");
    assert_eq!(
        address
            .labels()
            .get("cluster.x-k8s.io/cluster-name")
            .map(String::as_str),
        Some("c1")
    );
    assert!(
        address
            .finalizers()
            .contains(&"ipam.cluster.x-k8s.io/ProtectAddress".to_string())
    );
    let owners = address.owner_references();
    let claim_owner = owners.iter().find(|o| o.kind == "IPAddressClaim").unwrap();
    assert_eq!(claim_owner.uid, created.uid().unwrap());
    assert_eq!(claim_owner.controller, Some(true));
    assert_eq!(claim_owner.block_owner_deletion, Some(true));
    let pool_owner = owners.iter().find(|o| o.kind == "InClusterIPPool").unwrap();
    assert_eq!(pool_owner.uid, created_pool.uid().unwrap());
    assert_eq!(pool_owner.controller, Some(false));
    assert_eq!(pool_owner.block_owner_deletion, Some(true));

    // Deleting the claim releases the address and its reservation.
    claims
        .delete("machine-0", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&claims, "machine-0", Duration::from_secs(30)).await;
    assert!(addresses.get_opt("machine-0").await.unwrap().is_none());
    let reservations: Api<IPAddressReservation> = Api::all(client.clone());
    assert!(
        reservations
            .get_opt(&format!("10-0-0-2.ns.{ns}"))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn exhaustion_then_release_serves_the_oldest_waiting_claim() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("small", &["10.1.0.10"], 24, None)).await;
    create(&claims, &claim("holder", "small")).await;
    wait_reason(&claims, "holder", "AddressAllocated").await;

    create(&claims, &claim("first-waiter", "small")).await;
    let waiting = wait_reason(&claims, "first-waiter", "PoolExhausted").await;
    let (status, _, address_ref) = ready_of(&waiting).unwrap();
    assert_eq!(status, "False");
    assert_eq!(address_ref, None, "no addressRef while no address is held");
    // Creation timestamps have one-second resolution: make the order unambiguous.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create(&claims, &claim("a-second-waiter", "small")).await;
    wait_reason(&claims, "a-second-waiter", "PoolExhausted").await;

    claims
        .delete("holder", &DeleteParams::default())
        .await
        .unwrap();
    wait_reason(&claims, "first-waiter", "AddressAllocated").await;
    let second = claims.get("a-second-waiter").await.unwrap();
    assert_eq!(ready_of(&second).unwrap().1, "PoolExhausted");
    assert_eq!(
        addresses_by_claim(&client, &ns)
            .await
            .get("first-waiter")
            .map(String::as_str),
        Some("10.1.0.10")
    );
}

#[tokio::test]
async fn growing_the_pool_realises_every_waiting_claim() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("grow", &["10.2.0.10"], 24, None)).await;
    for i in 0..4 {
        create(&claims, &claim(&format!("c{i}"), "grow")).await;
    }
    wait_for(
        "one realised, three exhausted",
        Duration::from_secs(60),
        || async {
            let list = claims.list(&ListParams::default()).await.ok()?;
            let reasons: Vec<String> = list
                .items
                .iter()
                .filter_map(|c| Some(ready_of(c)?.1))
                .collect();
            let allocated = reasons.iter().filter(|r| *r == "AddressAllocated").count();
            let exhausted = reasons.iter().filter(|r| *r == "PoolExhausted").count();
            (allocated == 1 && exhausted == 3).then_some(())
        },
    )
    .await;

    let patch = json!({ "spec": { "addresses": ["10.2.0.10-10.2.0.13"] } });
    pools
        .patch("grow", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    for i in 0..4 {
        wait_reason(&claims, &format!("c{i}"), "AddressAllocated").await;
    }
    let held: BTreeSet<String> = addresses_by_claim(&client, &ns)
        .await
        .into_values()
        .collect();
    assert_eq!(held.len(), 4);
}

#[tokio::test]
async fn a_missing_pool_is_not_ready_until_it_is_created() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&claims, &claim("early", "later")).await;
    let waiting = wait_reason(&claims, "early", "PoolNotReady").await;
    let message = &waiting.conditions()[0].message;
    assert!(message.contains("does not exist"), "{message}");
    assert!(
        message.contains("later"),
        "the message names the pool: {message}"
    );

    create(&pools, &pool("later", &["10.3.0.0/30"], 30, None)).await;
    wait_reason(&claims, "early", "AddressAllocated").await;
}

#[tokio::test]
async fn claims_of_other_providers_are_never_touched() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let mut foreign = claim("foreign", "x");
    foreign.spec.pool_ref = IPPoolReference::new("ipam.metal3.io", "IPPool", "x");
    create(&claims, &foreign).await;
    // A claim of ours created afterwards is served, so the controller has seen both.
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("p", &["10.4.0.0/30"], 30, None)).await;
    create(&claims, &claim("ours", "p")).await;
    wait_reason(&claims, "ours", "AddressAllocated").await;
    let foreign = claims.get("foreign").await.unwrap();
    assert!(foreign.status.is_none());
    assert!(foreign.finalizers().is_empty());
}

#[tokio::test]
async fn an_ipaddress_created_by_hand_is_adopted() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("p", &["10.5.0.0/24"], 24, None)).await;
    let address: IPAddress = serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
        "metadata": { "name": "migrated" },
        "spec": {
            "address": "10.5.0.77", "prefix": 24,
            "claimRef": { "name": "migrated" },
            "poolRef": { "apiGroup": GROUP, "kind": "InClusterIPPool", "name": "p" }
        }
    }))
    .unwrap();
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    create(&addresses, &address).await;
    create(&claims, &claim("migrated", "p")).await;
    wait_reason(&claims, "migrated", "AddressAllocated").await;
    assert_eq!(
        addresses_by_claim(&client, &ns).await,
        BTreeMap::from([("migrated".to_string(), "10.5.0.77".to_string())]),
        "adopted, not allocated again"
    );
    // The API server now protects the adopted address too.
    let reservations: Api<IPAddressReservation> = Api::all(client.clone());
    let reservation = reservations
        .get(&format!("10-5-0-77.ns.{ns}"))
        .await
        .expect("a reservation for the adopted address");
    assert_eq!(reservation.spec.claim_name, "migrated");
    // The adopted address is held: a new claim gets another one.
    create(&claims, &claim("next", "p")).await;
    wait_reason(&claims, "next", "AddressAllocated").await;
    assert_eq!(
        addresses_by_claim(&client, &ns)
            .await
            .get("next")
            .map(String::as_str),
        Some("10.5.0.1")
    );
}

async fn create_cluster(client: &Client, ns: &str, name: &str, paused: bool) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), ns);
    create(&clusters, &cluster(name, paused)).await;
}

#[tokio::test]
async fn a_paused_cluster_freezes_its_claims_until_unpaused() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("p", &["10.6.0.0/24"], 24, None)).await;
    create_cluster(&client, &ns, "frozen", true).await;
    create(&claims, &of_cluster(claim("c", "p"), "frozen")).await;
    // A claim in the same namespace that is not paused proves the controller is running.
    create(&claims, &claim("witness", "p")).await;
    wait_reason(&claims, "witness", "AddressAllocated").await;
    let frozen = claims.get("c").await.unwrap();
    assert!(frozen.status.is_none(), "no change at all while paused");
    assert!(frozen.finalizers().is_empty());

    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .patch(
            "frozen",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    wait_reason(&claims, "c", "AddressAllocated").await;
}

async fn unpause<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({ "metadata": { "annotations": { "cluster.x-k8s.io/paused": null } } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_paused_annotation_on_a_claim_its_pool_or_its_cluster_freezes_the_claim() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    let paused = || BTreeMap::from([("cluster.x-k8s.io/paused".to_string(), String::new())]);

    create(&pools, &pool("open", &["10.7.0.0/24"], 24, None)).await;
    let mut frozen_pool = pool("frozen", &["10.7.1.0/24"], 24, None);
    frozen_pool.metadata.annotations = Some(paused());
    create(&pools, &frozen_pool).await;
    let mut annotated = cluster("annotated", false);
    annotated.metadata.annotations = Some(paused());
    create(&clusters, &annotated).await;

    let mut by_claim = claim("by-claim", "open");
    by_claim.metadata.annotations = Some(paused());
    create(&claims, &by_claim).await;
    create(&claims, &claim("by-pool", "frozen")).await;
    create(
        &claims,
        &of_cluster(claim("by-cluster", "open"), "annotated"),
    )
    .await;
    // Created last, realised: the controller has seen the three before it.
    create(&claims, &claim("witness", "open")).await;
    wait_reason(&claims, "witness", "AddressAllocated").await;
    for name in ["by-claim", "by-pool", "by-cluster"] {
        let frozen = claims.get(name).await.unwrap();
        assert!(
            frozen.status.is_none(),
            "{name}: no change at all while paused"
        );
        assert!(
            frozen.finalizers().is_empty(),
            "{name}: no finalizer while paused"
        );
    }

    unpause(&claims, "by-claim").await;
    wait_reason(&claims, "by-claim", "AddressAllocated").await;
    unpause(&pools, "frozen").await;
    let by_pool = wait_reason(&claims, "by-pool", "AddressAllocated").await;
    assert!(
        by_pool
            .finalizers()
            .iter()
            .any(|f| f == "ipam.cluster.x-k8s.io/ReleaseAddress")
    );
    unpause(&clusters, "annotated").await;
    wait_reason(&claims, "by-cluster", "AddressAllocated").await;
}

/// Pool `graced` of one address with a reuse grace period.
fn graced_pool(address: &str, seconds: i32) -> InClusterIPPool {
    let mut graced = pool("graced", &[address], 24, None);
    graced.spec.address_reuse_grace_period_seconds = Some(seconds);
    graced
}

#[tokio::test]
async fn a_released_address_is_not_handed_out_again_within_the_reuse_grace_period() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let reservations: Api<IPAddressReservation> = Api::all(client.clone());
    // Long enough that the next claim is surely seen waiting first, short enough for a test.
    create(&pools, &graced_pool("10.9.0.5", 8)).await;
    create(&claims, &claim("first", "graced")).await;
    wait_reason(&claims, "first", "AddressAllocated").await;
    let reservation_name = format!("10-9-0-5.ns.{ns}");

    claims
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    // The claim finishes deleting at once; its reservation stays, released.
    wait_gone(&claims, "first", Duration::from_secs(60)).await;
    let released = reservations.get(&reservation_name).await.unwrap();
    assert_eq!(
        released
            .labels()
            .get("ipam.inpool.dev/released")
            .map(String::as_str),
        Some("true")
    );
    assert!(
        released
            .annotations()
            .contains_key("ipam.inpool.dev/reusable-after")
    );

    create(&claims, &claim("second", "graced")).await;
    wait_reason(&claims, "second", "PoolExhausted").await;
    assert!(
        reservations
            .get_opt(&reservation_name)
            .await
            .unwrap()
            .is_some(),
        "the claim waited while the released reservation held the address"
    );
    let second = wait_reason(&claims, "second", "AddressAllocated").await;
    assert_eq!(
        addresses_by_claim(&client, &ns)
            .await
            .get("second")
            .map(String::as_str),
        Some("10.9.0.5")
    );
    let now_held = reservations.get(&reservation_name).await.unwrap();
    assert_eq!(now_held.spec.claim_name, "second");
    assert!(!now_held.labels().contains_key("ipam.inpool.dev/released"));
    assert_eq!(
        ready_of(&second).map(|(status, _, _)| status).as_deref(),
        Some("True")
    );
}

#[tokio::test]
async fn deleting_a_pool_does_not_wait_for_the_reuse_grace_period_of_released_addresses() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let reservations: Api<IPAddressReservation> = Api::all(client.clone());
    create(&pools, &graced_pool("10.9.1.5", 3600)).await;
    create(&claims, &claim("gone", "graced")).await;
    wait_reason(&claims, "gone", "AddressAllocated").await;
    let reservation_name = format!("10-9-1-5.ns.{ns}");
    claims
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the reservation to be released",
        Duration::from_secs(60),
        || async {
            let r = reservations.get_opt(&reservation_name).await.unwrap()?;
            r.labels()
                .contains_key("ipam.inpool.dev/released")
                .then_some(())
        },
    )
    .await;

    pools
        .delete("graced", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&pools, "graced", Duration::from_secs(60)).await;
    assert!(
        reservations
            .get_opt(&reservation_name)
            .await
            .unwrap()
            .is_none(),
        "the released address was freed with its pool, an hour early"
    );
}

#[tokio::test]
async fn claims_finish_deleting_after_their_cluster_is_gone() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("p", &["10.7.0.0/24"], 24, None)).await;
    create_cluster(&client, &ns, "doomed", false).await;
    create(&claims, &of_cluster(claim("c", "p"), "doomed")).await;
    wait_reason(&claims, "c", "AddressAllocated").await;

    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    claims.delete("c", &DeleteParams::default()).await.unwrap();
    wait_gone(&claims, "c", Duration::from_secs(30)).await;
    assert!(
        addresses_by_claim(&client, &ns).await.is_empty(),
        "address released"
    );
}

#[tokio::test]
async fn a_claim_deleted_for_move_keeps_its_address() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("p", &["10.8.0.0/24"], 24, None)).await;
    create(&claims, &claim("moving", "p")).await;
    wait_reason(&claims, "moving", "AddressAllocated").await;
    let annotate =
        json!({"metadata": {"annotations": {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}}});
    claims
        .patch("moving", &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .unwrap();
    claims
        .delete("moving", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&claims, "moving", Duration::from_secs(30)).await;
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    assert!(
        addresses.get_opt("moving").await.unwrap().is_some(),
        "nothing is released for a move"
    );
}

#[tokio::test]
async fn an_infrastructure_machine_gets_three_addresses_and_gc_releases_them() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    for (name, cidr) in [
        ("mgmt", "10.9.0.0/24"),
        ("storage", "10.9.1.0/24"),
        ("v6", "fd00:9::/64"),
    ] {
        let prefix = if name == "v6" { 64 } else { 24 };
        create(&pools, &pool(name, &[cidr], prefix, None)).await;
    }
    let machines: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let machine = create(
        &machines,
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some("vm-0".into()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    for pool_name in ["mgmt", "storage", "v6"] {
        let mut c = claim(&format!("vm-0-{pool_name}"), pool_name);
        c.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "vm-0".into(),
            uid: machine.uid().unwrap(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        create(&claims, &c).await;
    }
    for pool_name in ["mgmt", "storage", "v6"] {
        wait_reason(&claims, &format!("vm-0-{pool_name}"), "AddressAllocated").await;
    }
    let held = addresses_by_claim(&client, &ns).await;
    assert_eq!(held.get("vm-0-mgmt").map(String::as_str), Some("10.9.0.1"));
    assert_eq!(
        held.get("vm-0-storage").map(String::as_str),
        Some("10.9.1.1")
    );
    assert_eq!(held.get("vm-0-v6").map(String::as_str), Some("fd00:9::1"));

    machines
        .delete("vm-0", &DeleteParams::foreground())
        .await
        .unwrap();
    wait_for(
        "every address released",
        Duration::from_secs(60),
        || async {
            let gone = claims
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty()
                && addresses_by_claim(&client, &ns).await.is_empty();
            gone.then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn two_controllers_at_once_never_hand_out_an_address_twice() {
    let (client, ns) = support::capi_env().namespace().await;
    let _a = start_controller(&client, &ns);
    let _b = start_controller(&support::capi_env().client().await, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    // 10.20.0.1 - 10.20.1.44: 300 addresses.
    create(&pools, &pool("p", &["10.20.0.1-10.20.1.44"], 16, None)).await;
    create_claims(&claims, "p", 500).await;
    wait_counts(&claims, 300, 200).await;

    let held = addresses_by_claim(&client, &ns).await;
    assert_eq!(held.len(), 300);
    let distinct: BTreeSet<&String> = held.values().collect();
    assert_eq!(distinct.len(), 300, "no address appears twice");
    // Every held address is protected by a reservation for its own claim.
    let reserved: BTreeMap<String, String> = wait_for(
        "a reservation for every held address",
        Duration::from_secs(30),
        || async {
            let reserved: BTreeMap<String, String> = reservations_of(&client, &ns)
                .await
                .into_iter()
                .map(|(address, claim)| (claim, address))
                .collect();
            (reserved == held).then_some(reserved)
        },
    )
    .await;
    assert_eq!(reserved.len(), 300);
    let r = reasons(&claims).await;
    for (claim, reason) in &r {
        assert_eq!(
            held.contains_key(claim),
            reason == "AddressAllocated",
            "claim {claim}: Ready matches whether it holds an address"
        );
    }
}

#[tokio::test]
async fn released_addresses_go_to_the_oldest_waiting_claims() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("p", &["10.21.0.1-10.21.1.44"], 16, None)).await;
    create_claims(&claims, "p", 500).await;
    wait_counts(&claims, 300, 200).await;

    let list = claims.list(&ListParams::default()).await.unwrap().items;
    let order = |c: &IPAddressClaim| (c.creation_timestamp().map(|t| t.0), c.name_any());
    let mut waiting: Vec<&IPAddressClaim> = list
        .iter()
        .filter(|c| ready_of(c).is_some_and(|r| r.1 == "PoolExhausted"))
        .collect();
    waiting.sort_by_key(|c| order(c));
    let expected: BTreeSet<String> = waiting.iter().take(100).map(|c| c.name_any()).collect();
    let held: Vec<String> = list
        .iter()
        .filter(|c| ready_of(c).is_some_and(|r| r.1 == "AddressAllocated"))
        .map(|c| c.name_any())
        .take(100)
        .collect();
    for name in &held {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    wait_counts(&claims, 300, 100).await;
    let r = reasons(&claims).await;
    let newly: BTreeSet<String> = expected
        .iter()
        .filter(|name| r.get(*name).map(String::as_str) == Some("AddressAllocated"))
        .cloned()
        .collect();
    assert_eq!(
        newly, expected,
        "exactly the 100 oldest waiting claims were realised"
    );
}

/// Every kind inpool reads is watched once, and that one watch serves the registry, the
/// stores and every controller (pool status, reuse grace); Leases are watched for the reference
/// provider's only.
#[tokio::test]
async fn every_kind_is_watched_once() {
    let (client, ns) = support::capi_env().namespace().await;
    let (counting, watches) = client_counting_watches().await;
    let _controller = start_controller(&counting, &ns);
    // A pool with counts and a Ready claim: every controller is running.
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("pool", &["10.0.0.0/24"], 24, None)).await;
    create(&claims, &claim("machine-0", "pool")).await;
    wait_reason(&claims, "machine-0", "AddressAllocated").await;
    wait_for("the pool's counts", Duration::from_secs(30), || async {
        let status = pools.get("pool").await.ok()?.status?;
        (status.ip_addresses?.used == 1).then_some(())
    })
    .await;
    let watched = watches.lock().unwrap().clone();
    eprintln!("watch requests by resource: {watched:?}");
    let kinds = [
        "clusters",
        "globalinclusterippools",
        "globalinclusterprefixpools",
        "inclusterippools",
        "inclusterprefixpools",
        "ipaddressclaims",
        "ipaddresses",
        "ipaddressreservations",
        // The reference provider's leader election Lease, by name in every namespace.
        "leases",
    ];
    let once: BTreeMap<String, usize> = kinds.into_iter().map(|r| (r.to_string(), 1)).collect();
    assert_eq!(watched, once);
}

type WatchCounts = std::sync::Arc<std::sync::Mutex<BTreeMap<String, usize>>>;

/// An admin client that counts its `watch=true` requests by resource (the path's last segment).
async fn client_counting_watches() -> (Client, WatchCounts) {
    let watches = WatchCounts::default();
    let kubeconfig = kube::config::Kubeconfig::read_from(support::capi_env().kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let counts = watches.clone();
    let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        let uri = req.uri();
        let watch = uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true"));
        if let (true, Some(resource)) = (watch, uri.path().rsplit('/').next()) {
            *counts
                .lock()
                .unwrap()
                .entry(resource.to_string())
                .or_default() += 1;
        }
        req
    });
    let client = kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build();
    (client, watches)
}
