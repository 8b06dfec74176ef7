//! Migration to inpool from the real reference provider, and back.
//!
//! 1. The reference, cluster-api-ipam-provider-in-cluster v1.1.0 built from the Go module proxy,
//!    realises claims in all four pool kinds; one claim is deleted in a pool with
//!    `addressReuseGracePeriodSeconds`, so the reference holds it (claim and `IPAddress`) in its
//!    reuse grace period.
//! 2. The reference stops; inpool's CRDs are applied over the reference's with server-side apply
//!    and `--force-conflicts` (docs/migration.md, step 4); inpool starts. Every claim becomes
//!    `Ready=True` with its very `IPAddress` (same UID, same address), each address gets a
//!    reservation, the claim in its grace period is let go with its address still kept from
//!    every claim, and a new claim gets an address no claim held.
//! 3. inpool stops; the reference's CRDs are applied back and the reference starts
//!    (docs/migration.md, rolling back). It re-allocates nothing: every claim keeps its
//!    `IPAddress`; a new claim gets a free address; deleting a claim inpool had adopted removes
//!    it and its `IPAddress` (the finalizers are the reference's own names): nothing is stuck.
//!
//! The reference runs with its webhooks off (`--webhook-port=0`) and without leader election;
//! the CRDs are its `config/crd/bases`, without the conversion webhook its kustomize adds (no
//! pool is ever stored as v1alpha1 here).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use inpool::api::reservation::IPAddressReservation;
use inpool::api::{IPAddress, IPAddressClaim};
use inpool_testenv::common::{
    Inpool, apply_objects, claim, create, global_claim, global_prefix_claim, prefix_claim,
    ready_of, unique, wait_for,
};
use inpool_testenv::{reference, support};

use super::{ONE_AT_A_TIME, REALISED_WITHIN, apply_crds, realised_by_address_ref};
use kube::api::{Api, DeleteParams, ListParams, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// The reference's reuse grace period on the namespaced IP pool: longer than the test.
const GRACE_SECONDS: i64 = 3600;
/// inpool's label on a released reservation (docs/pools.md, `addressReuseGracePeriodSeconds`).
const RELEASED_LABEL: &str = "ipam.inpool.dev/released";

#[tokio::test]
async fn claims_keep_their_addresses_from_the_reference_to_inpool_and_back() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let env = support::reference_crds_env();
    let (client, ns) = env.namespace().await;
    let global_ip = unique("ref-gip");
    let global_prefix = unique("ref-gpp");
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);

    // 1. The reference realises claims in all four kinds.
    let reference = env.start_reference().await.expect("the reference starts");
    let pools = [
        json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
            "metadata": {"name": "ip", "namespace": ns},
            "spec": {"addresses": ["10.40.0.10-10.40.0.30"], "prefix": 24, "gateway": "10.40.0.1",
                "addressReuseGracePeriodSeconds": GRACE_SECONDS}}),
        json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "GlobalInClusterIPPool",
            "metadata": {"name": global_ip},
            "spec": {"addresses": ["10.41.0.0/28"], "prefix": 24, "gateway": "10.41.0.1"}}),
        json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterPrefixPool",
            "metadata": {"name": "prefix", "namespace": ns},
            "spec": {"prefixes": ["fd40::/48"], "allocationPrefixLength": 64}}),
        json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "GlobalInClusterPrefixPool",
            "metadata": {"name": global_prefix},
            "spec": {"prefixes": ["fd41::/56"], "allocationPrefixLength": 64}}),
    ];
    apply_objects(&client, &pools, &PatchParams::apply("test"))
        .await
        .expect("the reference's CRDs take the pools");
    let initial = [
        claim("ip-0", "ip"),
        claim("ip-1", "ip"),
        claim("ip-2", "ip"),
        global_claim("gip-0", &global_ip),
        global_claim("gip-1", &global_ip),
        prefix_claim("prefix-0", "prefix"),
        global_prefix_claim("gprefix-0", &global_prefix),
    ];
    for c in &initial {
        create(&claims, c).await;
    }
    let names: Vec<String> = initial.iter().map(|c| c.name_any()).collect();
    let by_reference = realised_by_address_ref(&claims, &addresses, &names, "the reference").await;
    let (graced, graced_address) = ("ip-0".to_string(), by_reference["ip-0"].0.clone());
    claims
        .delete(&graced, &DeleteParams::default())
        .await
        .expect("deleting a claim");
    wait_for(
        "the reference to hold the deleted claim in its reuse grace period",
        Duration::from_secs(20),
        || async {
            let deleting = claims.get_opt(&graced).await.ok()??;
            let address = addresses.get_opt(&graced).await.ok()??;
            let held = deleting.metadata.deletion_timestamp.is_some()
                && address.metadata.deletion_timestamp.is_none();
            held.then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        addresses.get_opt(&graced).await.unwrap().is_some(),
        "the reference keeps a claim's IPAddress during its reuse grace period"
    );
    drop(reference);

    // 2. inpool takes over: its CRDs over the reference's, then the binary.
    apply_crds(&client, &support::crd_files()).await;
    let started = Instant::now();
    let inpool = Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        "inpool",
        env.kubeconfig(),
        &[],
    );
    let kept: Vec<String> = names.iter().filter(|n| **n != graced).cloned().collect();
    wait_for(
        "inpool to realise every claim the reference realised",
        REALISED_WITHIN,
        || async {
            for name in &kept {
                let c = claims.get(name).await.ok()?;
                let (status, reason, _) = ready_of(&c)?;
                (status == "True" && reason == "AddressAllocated").then_some(())?;
            }
            Some(())
        },
    )
    .await;
    let adopted_in = started.elapsed();
    for name in &kept {
        let a = addresses.get(name).await.expect("the claim's IPAddress");
        assert_eq!(
            (a.spec.address.clone(), a.uid()),
            (by_reference[name].0.clone(), by_reference[name].1.clone()),
            "claim {name} keeps the IPAddress the reference made for it"
        );
    }
    let held = reservations(&client).await;
    for name in &kept {
        let address = &by_reference[name].0;
        assert_eq!(
            held.get(address).map(|(claim, _)| claim.as_str()),
            Some(name.as_str()),
            "the address {address} of claim {name} is reserved for it: {held:?}"
        );
    }
    wait_for(
        "inpool to let the claim in its grace period go, keeping its address",
        Duration::from_secs(30),
        || async {
            claims
                .get_opt(&graced)
                .await
                .ok()?
                .is_none()
                .then_some(())?;
            let held = reservations(&client).await;
            held.get(&graced_address)
                .is_some_and(|(_, released)| *released)
                .then_some(())
        },
    )
    .await;
    create(&claims, &claim("ip-new", "ip")).await;
    let new = realised(&claims, &addresses, "ip-new", "inpool").await;
    assert!(
        new != graced_address && !by_reference.values().any(|(a, _)| *a == new),
        "a new claim gets an address no claim held, and not the one in its grace period: {new}"
    );
    drop(inpool);

    // 3. Back to the reference: its CRDs again, then its manager.
    apply_crds(
        &client,
        &reference::PROGRAM
            .crd_files()
            .expect("the reference's CRDs"),
    )
    .await;
    let reference = env
        .start_reference()
        .await
        .expect("the reference starts again");
    create(&claims, &global_claim("gip-back", &global_ip)).await;
    let back = realised_by_address_ref(
        &claims,
        &addresses,
        &["gip-back".to_string()],
        "the reference",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for name in &kept {
        let a = addresses.get(name).await.expect("the claim's IPAddress");
        assert_eq!(
            (a.spec.address.clone(), a.uid()),
            (by_reference[name].0.clone(), by_reference[name].1.clone()),
            "claim {name} keeps its IPAddress after the rollback"
        );
    }
    let taken: Vec<&String> = by_reference
        .iter()
        .filter(|(n, _)| n.starts_with("gip-"))
        .map(|(_, (a, _))| a)
        .collect();
    assert!(
        !taken.contains(&&back["gip-back"].0),
        "the reference gives a new claim a free address: {} is held ({taken:?})",
        back["gip-back"].0
    );
    claims
        .delete("gip-0", &DeleteParams::default())
        .await
        .expect("deleting an adopted claim");
    wait_for(
        "the reference to release a claim inpool had adopted",
        Duration::from_secs(30),
        || async {
            let claim_gone = claims.get_opt("gip-0").await.ok()?.is_none();
            let address_gone = addresses.get_opt("gip-0").await.ok()?.is_none();
            (claim_gone && address_gone).then_some(())
        },
    )
    .await;
    eprintln!(
        "reference → inpool: {} claims Ready in {:.1} s; rolled back; reference log: {}",
        kept.len(),
        adopted_in.as_secs_f64(),
        reference.log().display()
    );
}

/// The address of claim `name` once realised.
async fn realised(
    claims: &Api<IPAddressClaim>,
    addresses: &Api<IPAddress>,
    name: &str,
    by: &str,
) -> String {
    let realised = realised_by_address_ref(claims, addresses, &[name.to_string()], by).await;
    realised[name].0.clone()
}

/// Every reservation by address: the claim it records and whether it is released.
async fn reservations(client: &Client) -> BTreeMap<String, (String, bool)> {
    Api::<IPAddressReservation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("listing reservations")
        .items
        .into_iter()
        .map(|r| {
            let released = r.labels().contains_key(RELEASED_LABEL);
            (
                r.spec.address.clone(),
                (r.spec.claim_name.clone(), released),
            )
        })
        .collect()
}
