//! Migration to inpool from the real reference provider, and back, from each release users run:
//! v1.1.0 and v1.0.3, both built from the Go module proxy.
//!
//! 1. The reference realises claims in every pool kind its release serves (v1.1.0: all four;
//!    v1.0.3: the two IP pool kinds, since the prefix pools came in v1.1.0). On v1.1.0 one claim
//!    is deleted in a pool with `addressReuseGracePeriodSeconds`, so the reference holds it
//!    (claim and `IPAddress`) in its reuse grace period, which v1.0.3 does not have.
//! 2. The reference stops; inpool's CRDs are applied over the reference's with server-side apply
//!    and `--force-conflicts` (docs/migration.md, step 4); inpool starts. Every claim becomes
//!    `Ready=True` with its very `IPAddress` (same UID, same address), each address gets a
//!    reservation, a claim in its grace period is let go with its address still kept from
//!    every claim, and a new claim gets an address no claim held.
//! 3. inpool stops; the release's CRDs are applied back and the same release starts
//!    (docs/migration.md, rolling back). It re-allocates nothing: every claim keeps its
//!    `IPAddress`; a new claim gets a free address; deleting a claim inpool had adopted removes
//!    it and its `IPAddress` (the finalizers are the reference's own names): nothing is stuck.
//!    On v1.1.0, the address inpool kept released for the grace period is the reference's to
//!    hand out at once (it does not read reservations).
//!
//! The reference sets no condition on the claims it realises; step 1 checks that.
//!
//! The reference runs with its webhooks off (`--webhook-port=0`) and without leader election;
//! the CRDs are its `config/crd/bases`, without the conversion webhook its kustomize adds (no
//! pool is ever stored as v1alpha1 here). Each run first applies its release's CRDs, whatever
//! the test before it left.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use inpool::api::reservation::IPAddressReservation;
use inpool::api::{IPAddress, IPAddressClaim};
use inpool_testenv::common::{
    Inpool, apply_objects, claim, create, global_claim, global_prefix_claim, prefix_claim,
    ready_of, unique, wait_for,
};
use inpool_testenv::{GoProgram, RunningManager, reference, support};

use super::{ONE_AT_A_TIME, REALISED_WITHIN, apply_crds, realised_by_address_ref};
use kube::api::{Api, DeleteParams, ListParams, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The reference's reuse grace period on the namespaced IP pool: longer than the test.
const GRACE_SECONDS: i64 = 3600;
/// inpool's label on a released reservation (docs/pools.md, `addressReuseGracePeriodSeconds`).
const RELEASED_LABEL: &str = "ipam.inpool.dev/released";

/// A release of the reference provider that users migrate from.
#[derive(Clone, Copy, Debug)]
enum Release {
    V1_1_0,
    V1_0_3,
}

impl Release {
    fn program(self) -> &'static GoProgram {
        match self {
            Release::V1_1_0 => &reference::PROGRAM,
            Release::V1_0_3 => &reference::PROGRAM_V1_0_3,
        }
    }

    async fn start(self, env: &support::TestEnv) -> RunningManager {
        let started = match self {
            Release::V1_1_0 => env.start_reference().await,
            Release::V1_0_3 => env.start_reference_v1_0_3().await,
        };
        started.unwrap_or_else(|e| panic!("the reference {self:?} starts: {e}"))
    }

    /// The second octet of the networks of this release's IP pools (`10.N.0.0/24` namespaced,
    /// `10.N+1.0.0/24` global): apart from the other release's, since inpool keeps overlapping
    /// pools from handing out one address twice and the control plane keeps every test's pools.
    fn network(self) -> u8 {
        match self {
            Release::V1_1_0 => 40,
            Release::V1_0_3 => 42,
        }
    }

    /// The prefix pool kinds and `addressReuseGracePeriodSeconds` came together in v1.1.0.
    fn has_prefix_pools_and_reuse_grace(self) -> bool {
        matches!(self, Release::V1_1_0)
    }
}

#[tokio::test]
async fn claims_keep_their_addresses_from_the_reference_v1_1_0_to_inpool_and_back() {
    migrate_and_roll_back(Release::V1_1_0).await;
}

#[tokio::test]
async fn claims_keep_their_addresses_from_the_reference_v1_0_3_to_inpool_and_back() {
    migrate_and_roll_back(Release::V1_0_3).await;
}

async fn migrate_and_roll_back(release: Release) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let env = support::reference_crds_env();
    let (client, ns) = env.namespace().await;
    let crds = release.program().crd_files().expect("the reference's CRDs");
    apply_crds(&client, &crds).await;
    let global_ip = unique("ref-gip");
    let global_prefix = unique("ref-gpp");
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);

    // 1. The reference realises claims in every kind it serves.
    let reference = release.start(env).await;
    let with_v1_1 = release.has_prefix_pools_and_reuse_grace();
    let (ip_net, global_net) = (release.network(), release.network() + 1);
    let mut ip_spec = json!({"addresses": [format!("10.{ip_net}.0.10-10.{ip_net}.0.30")],
        "prefix": 24, "gateway": format!("10.{ip_net}.0.1")});
    if with_v1_1 {
        ip_spec["addressReuseGracePeriodSeconds"] = json!(GRACE_SECONDS);
    }
    let mut pools = vec![
        json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
            "metadata": {"name": "ip", "namespace": ns}, "spec": ip_spec}),
        json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "GlobalInClusterIPPool",
            "metadata": {"name": global_ip},
            "spec": {"addresses": [format!("10.{global_net}.0.0/28")], "prefix": 24,
                "gateway": format!("10.{global_net}.0.1")}}),
    ];
    let mut initial = vec![
        claim("ip-0", "ip"),
        claim("ip-1", "ip"),
        claim("ip-2", "ip"),
        global_claim("gip-0", &global_ip),
        global_claim("gip-1", &global_ip),
    ];
    if with_v1_1 {
        pools.extend(prefix_pools(&ns, &global_prefix));
        initial.push(prefix_claim("prefix-0", "prefix"));
        initial.push(global_prefix_claim("gprefix-0", &global_prefix));
    }
    apply_objects(&client, &pools, &PatchParams::apply("test"))
        .await
        .expect("the reference's CRDs take the pools");
    for c in &initial {
        create(&claims, c).await;
    }
    let names: Vec<String> = initial.iter().map(|c| c.name_any()).collect();
    let by_reference = realised_by_address_ref(&claims, &addresses, &names, "the reference").await;
    for name in &names {
        let conditions = claims
            .get(name)
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions);
        assert!(
            conditions.as_ref().is_none_or(Vec::is_empty),
            "the reference sets no condition on a claim it realised: {name} has {conditions:?}"
        );
    }
    let graced = if with_v1_1 {
        Some(hold_in_grace_period(&claims, &addresses, "ip-0", &by_reference["ip-0"].0).await)
    } else {
        None
    };
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
    let kept: Vec<String> = names
        .iter()
        .filter(|n| graced.as_ref().is_none_or(|(g, _)| g != *n))
        .cloned()
        .collect();
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
    if let Some((graced, graced_address)) = &graced {
        wait_for(
            "inpool to let the claim in its grace period go, keeping its address",
            Duration::from_secs(30),
            || async {
                claims.get_opt(graced).await.ok()?.is_none().then_some(())?;
                let held = reservations(&client).await;
                held.get(graced_address)
                    .is_some_and(|(_, released)| *released)
                    .then_some(())
            },
        )
        .await;
    }
    create(&claims, &claim("ip-new", "ip")).await;
    let new = realised(&claims, &addresses, "ip-new", "inpool").await;
    let graced_address = graced.as_ref().map(|(_, address)| address);
    assert!(
        graced_address != Some(&new) && !by_reference.values().any(|(a, _)| *a == new),
        "a new claim gets an address no claim held, and not one in a grace period: {new}"
    );
    drop(inpool);

    // 3. Back to the same release: its CRDs again, then its manager.
    apply_crds(&client, &crds).await;
    let reference = release.start(env).await;
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
    if let Some((_, graced_address)) = &graced {
        // The reference does not read inpool's reservations: the address inpool kept released
        // for the pool's grace period is free for it at once, the lowest of the pool.
        create(&claims, &claim("ip-back", "ip")).await;
        let ip_back = realised(&claims, &addresses, "ip-back", "the reference").await;
        assert_eq!(
            &ip_back, graced_address,
            "the reference hands out the address inpool kept in its grace period"
        );
    }
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
        "reference {release:?} → inpool: {} claims Ready in {:.1} s; rolled back; reference log: {}",
        kept.len(),
        adopted_in.as_secs_f64(),
        reference.log().display()
    );
}

/// The reference's two prefix pools (v1.1.0 on), `prefix` in `ns` and the global `global`.
fn prefix_pools(ns: &str, global: &str) -> [Value; 2] {
    [
        json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterPrefixPool",
            "metadata": {"name": "prefix", "namespace": ns},
            "spec": {"prefixes": ["fd40::/48"], "allocationPrefixLength": 64}}),
        json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "GlobalInClusterPrefixPool",
            "metadata": {"name": global},
            "spec": {"prefixes": ["fd41::/56"], "allocationPrefixLength": 64}}),
    ]
}

/// Deletes claim `name` (realised with `address`) in a pool with a reuse grace period, and
/// returns once the reference holds it there: the claim deleting, its `IPAddress` kept. Returns
/// the claim's name and address.
async fn hold_in_grace_period(
    claims: &Api<IPAddressClaim>,
    addresses: &Api<IPAddress>,
    name: &str,
    address: &str,
) -> (String, String) {
    claims
        .delete(name, &DeleteParams::default())
        .await
        .expect("deleting a claim");
    wait_for(
        "the reference to hold the deleted claim in its reuse grace period",
        Duration::from_secs(20),
        || async {
            let deleting = claims.get_opt(name).await.ok()??;
            let kept = addresses.get_opt(name).await.ok()??;
            let held = deleting.metadata.deletion_timestamp.is_some()
                && kept.metadata.deletion_timestamp.is_none();
            held.then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        addresses.get_opt(name).await.unwrap().is_some(),
        "the reference keeps a claim's IPAddress during its reuse grace period"
    );
    (name.to_string(), address.to_string())
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
