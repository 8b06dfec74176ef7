//! inpool meets the real Cluster API: CAPI core v1.14.2's manager runs against this binary's
//! control plane (`support::capi_env`), so CAPI's validating webhook checks every `IPAddress`
//! inpool writes and CAPI's conversion webhook serves claims to v1beta1 consumers (CAPV, CAPM3 and
//! CAPMOX read claims as `ipam.cluster.x-k8s.io/v1beta1`).

use inpool::api::{Cluster, IPAddress, IPAddressClaim, InClusterIPPool};
use inpool_testenv::capi::api_resource;
use inpool_testenv::{common, support};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use common::*;

fn v1beta1<K: kube::Resource<DynamicType = ()>>(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &api_resource::<K>("v1beta1"))
}

/// The claim's `Ready` condition as a v1beta1 consumer reads it (`status.conditions[]`, CAPI's
/// legacy condition type with a severity).
fn v1beta1_ready(claim: &DynamicObject) -> Value {
    claim.data["status"]["conditions"]
        .as_array()
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_else(|| panic!("no v1beta1 Ready condition on {}", claim.name_any()))
}

#[tokio::test]
async fn v1beta1_consumers_see_the_ready_condition_with_reason_message_and_severity() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("pool", &["10.0.0.5"], 24, Some("10.0.0.1"))).await;
    create(&pools, &pool("other", &["10.0.1.5"], 24, None)).await;

    // AllocationFailed: an IPAddress named like the claim already exists for another pool. CAPI's
    // webhook compares an address's pool with its claim's only when the claim exists, so the
    // address comes first, as after a bad restore.
    let stray: IPAddress = serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
        "metadata": {"name": "failed"},
        "spec": {"address": "10.0.1.9", "prefix": 24, "claimRef": {"name": "failed"},
                 "poolRef": {"apiGroup": GROUP, "kind": "InClusterIPPool", "name": "other"}},
    }))
    .unwrap();
    create(&addresses, &stray).await;

    create(&claims, &claim("realised", "pool")).await;
    wait_reason(&claims, "realised", "AddressAllocated").await;
    create(&claims, &claim("exhausted", "pool")).await;
    create(&claims, &claim("no-pool", "missing")).await;
    create(&claims, &claim("failed", "pool")).await;

    let expected = [
        ("realised", "True", "AddressAllocated", None),
        ("exhausted", "False", "PoolExhausted", Some("Warning")),
        ("no-pool", "False", "PoolNotReady", Some("Warning")),
        ("failed", "False", "AllocationFailed", Some("Error")),
    ];
    let served = v1beta1::<IPAddressClaim>(&client, &ns);
    for (name, status, reason, severity) in expected {
        let claim = wait_reason(&claims, name, reason).await;
        let ours = claim
            .conditions()
            .iter()
            .find(|c| c.type_ == "Ready")
            .cloned()
            .unwrap();
        let read = served.get(name).await.unwrap();
        assert_eq!(
            read.types.as_ref().unwrap().api_version,
            "ipam.cluster.x-k8s.io/v1beta1"
        );
        let ready = v1beta1_ready(&read);
        assert_eq!(ready["status"], status, "{name}: {ready}");
        assert_eq!(ready["reason"], reason, "{name}: {ready}");
        assert_eq!(ready["message"], ours.message.as_str(), "{name}: {ready}");
        assert_eq!(ready["severity"].as_str(), severity, "{name}: {ready}");
        // The v1beta2 conditions travel along under status.v1beta2 for newer readers.
        let v1beta2_ready = read.data["status"]["v1beta2"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
            .unwrap_or_else(|| panic!("{name}: no status.v1beta2 Ready: {}", read.data));
        assert_eq!(v1beta2_ready["reason"], reason);
        let address_ref = read.data["status"]["addressRef"]["name"].as_str();
        if reason == "AddressAllocated" {
            assert_eq!(address_ref, Some(name), "{name}: {}", read.data);
        } else {
            // CAPI #8424: addressRef only once an address really exists.
            assert_eq!(address_ref, None, "{name}: {}", read.data);
        }
    }
    assert!(
        ready_message(&claims.get("failed").await.unwrap())
            .contains("already exists for pool InClusterIPPool other"),
    );

    // The IPAddress inpool wrote reads back through v1beta1 with the contract's fields.
    let address = v1beta1::<IPAddress>(&client, &ns)
        .get("realised")
        .await
        .unwrap();
    assert_eq!(address.data["spec"]["address"], "10.0.0.5");
    assert_eq!(address.data["spec"]["prefix"], 24);
    assert_eq!(address.data["spec"]["gateway"], "10.0.0.1");
    assert_eq!(address.data["spec"]["claimRef"]["name"], "realised");
    assert_eq!(address.data["spec"]["poolRef"]["name"], "pool");
}

#[tokio::test]
async fn a_claim_written_as_v1beta1_is_served_like_any_other() {
    let (client, ns) = support::capi_env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("pool", &["10.0.2.0/30"], 30, None)).await;

    // The claim names its Cluster, which CAPI's webhooks must admit (a v1beta1 Cluster would need
    // its infrastructure kind's CRD for the conversion; the claim is what this test writes so).
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    create(&clusters, &cluster("c1", false)).await;
    // What a v1beta1 consumer (CAPV 1.14's claim code) sends.
    let served = v1beta1::<IPAddressClaim>(&client, &ns);
    let written: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddressClaim",
        "metadata": {"name": "vm-0", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"poolRef": {"apiGroup": GROUP, "kind": "InClusterIPPool", "name": "pool"}},
    }))
    .unwrap();
    served
        .create(&PostParams::default(), &written)
        .await
        .unwrap();
    let claim = wait_reason(&claims, "vm-0", "AddressAllocated").await;
    assert_eq!(claim.address_ref(), Some("vm-0"));
    let read = served.get("vm-0").await.unwrap();
    assert_eq!(v1beta1_ready(&read)["status"], "True");
    assert_eq!(read.data["status"]["addressRef"]["name"], "vm-0");
}

#[tokio::test]
async fn capis_webhooks_are_in_the_path() {
    // Guards the other tests: without the webhooks they would pass against a plain API server.
    let (client, ns) = support::capi_env().namespace().await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&claims, &claim("c", "pool")).await;
    let change = json!({"spec": {"poolRef": {"name": "elsewhere"}}});
    let refused = claims
        .patch("c", &PatchParams::default(), &Patch::Merge(&change))
        .await
        .expect_err("CAPI's webhook keeps a claim's spec immutable");
    assert!(refused.to_string().contains("immutable"), "{refused}");
}
