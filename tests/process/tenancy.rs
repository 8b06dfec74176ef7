//! What a tenant with claim rights can and cannot do, against the `inpool` binary as its
//! ServiceAccount (docs/security.md):
//!
//! - a claim's `poolRef` names a pool of its own namespace: a claim in another namespace naming
//!   a pool that exists elsewhere gets nothing from it (`PoolNotReady`, the pool named in the
//!   claim's namespace), while the pool's own claims are served;
//! - a `ResourceQuota` on `count/ipaddressclaims.ipam.cluster.x-k8s.io` limits how many claims a
//!   namespace holds, so how much of a global pool it can drain: the API server refuses the
//!   claim over the quota with its own clear message. The test control plane runs no
//!   kube-controller-manager, whose quota controller records a quota's first usage: the test
//!   writes that status (`used: 0`) as it would; the API server's quota admission counts every
//!   claim from there.

use std::time::Duration;

use inpool::api::{GlobalInClusterIPPool, IPAddressClaim, InClusterIPPool};
use inpool_testenv::{common, support};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use common::{
    Inpool, claim, create, ensure_applied, global_claim, global_pool, one_inpool_test_at_a_time,
    pool, ready_message, ready_of, service_account_kubeconfig, typed, unique, wait_for,
};

/// inpool as its ServiceAccount on the shared control plane, on every namespace.
fn start_inpool() -> Inpool {
    let kubeconfig = service_account_kubeconfig(support::env().kubeconfig());
    Inpool::start(env!("CARGO_BIN_EXE_inpool"), "inpool", &kubeconfig, &[])
}

/// The claim's `Ready` (status, reason) once it has one.
async fn settled(claims: &Api<IPAddressClaim>, name: &str) -> (String, String, String) {
    wait_for(
        &format!("claim {name} to get a Ready condition"),
        Duration::from_secs(30),
        || async {
            let claim = claims.get(name).await.ok()?;
            let (status, reason, _) = ready_of(&claim)?;
            Some((status, reason, ready_message(&claim)))
        },
    )
    .await
}

#[tokio::test]
async fn a_claim_reaches_no_pool_of_another_namespace() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let inpool = start_inpool();
    let env = support::env();
    let (client, owner) = env.namespace().await;
    let (_, tenant) = env.namespace().await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &owner);
    create(
        &pools,
        &pool("shared-name", &["10.79.0.10-10.79.0.19"], 24, None),
    )
    .await;
    let owners: Api<IPAddressClaim> = Api::namespaced(client.clone(), &owner);
    let tenants: Api<IPAddressClaim> = Api::namespaced(client.clone(), &tenant);
    create(&tenants, &claim("reaching", "shared-name")).await;
    create(&owners, &claim("own", "shared-name")).await;

    let (status, reason, _) = settled(&owners, "own").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "AddressAllocated")
    );
    let (status, reason, message) = settled(&tenants, "reaching").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "PoolNotReady"),
        "{message}"
    );
    assert!(
        message.contains(&format!("InClusterIPPool {tenant}/shared-name")),
        "the message names the pool in the claim's own namespace: {message}"
    );
    let reaching = tenants.get("reaching").await.unwrap();
    assert_eq!(
        reaching.address_ref(),
        None,
        "no address from another namespace"
    );
    drop(inpool);
}

#[tokio::test]
async fn a_resource_quota_limits_how_many_claims_a_tenant_holds_on_a_global_pool() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let inpool = start_inpool();
    let env = support::env();
    let (client, tenant) = env.namespace().await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &tenant);
    let counted = "count/ipaddressclaims.ipam.cluster.x-k8s.io";
    let quota: ResourceQuota = typed(json!({
        "metadata": {"name": "claims"},
        "spec": {"hard": {counted: "2"}},
    }));
    quotas
        .create(&PostParams::default(), &quota)
        .await
        .expect("the quota");
    // What kube-controller-manager's quota controller would write first.
    let status = json!({"status": {"hard": {counted: "2"}, "used": {counted: "0"}}});
    quotas
        .patch_status("claims", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("the quota's first usage");
    let global = unique("tenancy");
    let pools: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    create(
        &pools,
        &global_pool(&global, &["10.80.0.10-10.80.0.40"], 24),
    )
    .await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &tenant);
    for name in ["first", "second"] {
        create(&claims, &global_claim(name, &global)).await;
    }
    let refused = claims
        .create(&PostParams::default(), &global_claim("third", &global))
        .await
        .expect_err("a claim over the quota is refused");
    let kube::Error::Api(status) = refused else {
        panic!("not the API server's refusal: {refused}");
    };
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status.message.contains("exceeded quota: claims")
            && status.message.contains(&format!("requested: {counted}=1")),
        "the API server names the quota and the resource: {}",
        status.message
    );
    for name in ["first", "second"] {
        let (status, reason, message) = settled(&claims, name).await;
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "AddressAllocated"),
            "{message}"
        );
    }
    drop(inpool);
}
