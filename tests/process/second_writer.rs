//! A second IPAM provider writing beside the `inpool` binary (as its ServiceAccount, cluster-wide
//! as deployed), played by the test with the API server's own objects:
//! - an `IPAddress` of a served pool created after inpool started by another field manager: its
//!   address is never handed out; the pool gets `ForeignAddresses=True`, a Warning Event naming the
//!   object and its manager, and `inpool_foreign_addresses` counts it; once it is deleted the
//!   condition clears and its address is served. Every object inpool created carries its field
//!   manager;
//! - the reference provider's leader election Lease, held and renewed by the test: inpool logs an
//!   error naming it and allocates nothing (claims `AllocationFailed` naming the Lease); once the
//!   test stops renewing, the Lease expires and the claims are realised; and
//!   `--ignore-reference-provider-lease` allocates despite a live Lease.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use inpool::api::reservation::IPAddressReservation;
use inpool::api::{
    IPAddress, IPAddressClaim, IPAddressClaimReference, IPAddressSpec, IPPoolReference,
    InClusterIPPool,
};
use inpool_testenv::{common, support};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use common::{
    GROUP, Inpool, addresses_by_claim, claim, claim_states, create, ensure_applied, managers,
    one_inpool_test_at_a_time, pool, ready_message, service_account_kubeconfig, wait_explained,
    wait_for,
};

/// The reference provider's leader election Lease, as its `main.go` names it.
const REFERENCE_LEASE: &str = "7bb7acb4.ipam.cluster.x-k8s.io";

/// The field manager of the other provider (the reference's binary is `manager`).
const OTHER_WRITER: &str = "manager";

/// inpool as its ServiceAccount on the shared control plane, on every namespace.
fn start_inpool(name: &str, args: &[&str]) -> Inpool {
    let kubeconfig = service_account_kubeconfig(support::env().kubeconfig());
    Inpool::start(env!("CARGO_BIN_EXE_inpool"), name, &kubeconfig, args)
}

async fn wait_ready(inpool: &Inpool) {
    wait_for("/readyz to answer 200", Duration::from_secs(30), || async {
        inpool.get("/readyz").await.filter(|r| r.status == 200)
    })
    .await;
}

/// The pool's condition `type_`: (status, reason, message).
async fn pool_condition(
    pools: &Api<InClusterIPPool>,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let pool = pools.get(name).await.ok()?;
    let condition = pool
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == type_)?;
    Some((condition.status, condition.reason, condition.message))
}

#[tokio::test]
async fn a_foreign_address_is_never_handed_out_and_is_reported_until_it_is_gone() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let (client, ns) = support::env().namespace().await;
    let inpool = start_inpool("foreign", &[]);
    wait_ready(&inpool).await;

    // Creation timestamps have whole seconds: an object created in the second inpool started
    // cannot be told from a leftover, and is not evidence.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("pool", &["10.78.0.10-10.78.0.12"], 24, None)).await;
    // Another provider's IPAddress, for a claim inpool never saw, on the pool's lowest address:
    // the address inpool would hand out first.
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    let foreign = IPAddress::new(
        "theirs",
        IPAddressSpec {
            address: "10.78.0.10".into(),
            claim_ref: IPAddressClaimReference {
                name: "theirs".into(),
            },
            gateway: None,
            pool_ref: IPPoolReference::new(GROUP, "InClusterIPPool", "pool"),
            prefix: 24,
        },
    );
    let as_other = PostParams {
        field_manager: Some(OTHER_WRITER.into()),
        ..PostParams::default()
    };
    addresses.create(&as_other, &foreign).await.unwrap();

    let gauge = format!(
        "inpool_foreign_addresses{{pool_kind=\"InClusterIPPool\",pool_namespace=\"{ns}\",pool_name=\"pool\"}}"
    );
    let noticed = Instant::now();
    let (status, reason, message) = wait_explained(
        "the pool's ForeignAddresses condition",
        Duration::from_secs(30),
        || async {
            pool_condition(&pools, "pool", "ForeignAddresses")
                .await
                .filter(|(status, ..)| status == "True")
        },
        || inpool.logs(),
    )
    .await;
    println!(
        "ForeignAddresses=True {:.1} s after the foreign IPAddress was created",
        noticed.elapsed().as_secs_f64()
    );
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "AnotherWriter")
    );
    assert!(
        message.contains(&format!("{ns}/theirs 10.78.0.10")),
        "{message}"
    );
    assert!(message.contains("\"manager\""), "{message}");
    assert_eq!(inpool.sample(&gauge).await, Some(1.0));
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let event = wait_for(
        "the ForeignAddress Event",
        Duration::from_secs(30),
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("ForeignAddress"))
        },
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let regarding = event.regarding.clone().unwrap_or_default();
    assert_eq!(
        (regarding.kind.as_deref(), regarding.name.as_deref()),
        (Some("InClusterIPPool"), Some("pool"))
    );
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(&format!("{ns}/theirs")) && note.contains("\"manager\""),
        "{note}"
    );

    // Three claims on three addresses, one of them held by the other provider: two realised,
    // never on its address; the third waits.
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    for name in ["a", "b", "c"] {
        create(&claims, &claim(name, "pool")).await;
        // Creation timestamps have one-second resolution: the queue order is a, b, c.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let allocated = || ("True".to_string(), "AddressAllocated".to_string());
    let exhausted = || ("False".to_string(), "PoolExhausted".to_string());
    let expected = BTreeMap::from([
        ("a".to_string(), allocated()),
        ("b".to_string(), allocated()),
        ("c".to_string(), exhausted()),
    ]);
    wait_for(
        "two claims realised, one waiting",
        Duration::from_secs(60),
        || async { (claim_states(&claims).await == expected).then_some(()) },
    )
    .await;
    let held = addresses_by_claim(&client, &ns).await;
    assert_eq!(held["a"], "10.78.0.11", "{held:?}");
    assert_eq!(held["b"], "10.78.0.12", "{held:?}");
    assert_eq!(held["theirs"], "10.78.0.10", "{held:?}");

    // Every object inpool created names it as its field manager.
    for name in ["a", "b"] {
        let address = addresses.get(name).await.unwrap();
        assert_eq!(managers(&address), ["inpool"], "IPAddress {name}");
    }
    let reservations: Api<IPAddressReservation> = Api::all(client.clone());
    for reservation in reservations.list(&ListParams::default()).await.unwrap() {
        if reservation.spec.claim_namespace == ns {
            assert_eq!(
                managers(&reservation),
                ["inpool"],
                "{}",
                reservation.name_any()
            );
        }
    }
    // The claim: the test's create (no field manager: `unknown`), then inpool's finalizer patch
    // and status apply.
    let mut claim_managers = managers(&claims.get("a").await.unwrap());
    claim_managers.sort();
    assert_eq!(claim_managers, ["inpool", "inpool", "unknown"]);
    // The other writer's object stays the other writer's: inpool did not adopt or touch it.
    assert_eq!(
        managers(&addresses.get("theirs").await.unwrap()),
        [OTHER_WRITER]
    );

    // The other provider's address goes: the condition clears, the gauge drops, and the waiting
    // claim gets the address.
    addresses
        .delete("theirs", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "ForeignAddresses=False",
        Duration::from_secs(30),
        || async {
            pool_condition(&pools, "pool", "ForeignAddresses")
                .await
                .filter(|(status, reason, _)| status == "False" && reason == "NoForeignAddresses")
        },
    )
    .await;
    assert_eq!(inpool.sample(&gauge).await, Some(0.0));
    wait_for(
        "the waiting claim to get the freed address",
        Duration::from_secs(30),
        || async {
            let held = addresses_by_claim(&client, &ns).await;
            (held.get("c").map(String::as_str) == Some("10.78.0.10")).then_some(())
        },
    )
    .await;
    for name in ["a", "b", "c"] {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    wait_for("the claims released", Duration::from_secs(30), || async {
        claim_states(&claims).await.is_empty().then_some(())
    })
    .await;
    inpool.assert_nothing_forbidden();
}

/// The reference provider's Lease in `namespace`, held by `holder` and renewed now.
fn reference_lease(holder: &str, seconds: i32) -> Lease {
    let now = MicroTime(Timestamp::now());
    let mut lease = Lease::default();
    lease.metadata.name = Some(REFERENCE_LEASE.into());
    lease.spec = Some(LeaseSpec {
        holder_identity: Some(holder.into()),
        lease_duration_seconds: Some(seconds),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        ..LeaseSpec::default()
    });
    lease
}

/// Renews the Lease every 500 ms, as its holder would, until dropped.
struct Renewing(tokio::task::JoinHandle<()>);

impl Renewing {
    fn start(leases: Api<Lease>) -> Renewing {
        Renewing(tokio::spawn(async move {
            loop {
                let patch = json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
                let _ = leases
                    .patch(
                        REFERENCE_LEASE,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }))
    }
}

impl Drop for Renewing {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits until both claims of the namespace have `Ready` (status, reason); panics with inpool's
/// log after `seconds`.
async fn wait_both(
    claims: &Api<IPAddressClaim>,
    inpool: &Inpool,
    (status, reason): (&str, &str),
    seconds: u64,
) {
    wait_explained(
        &format!("both claims {status}/{reason}"),
        Duration::from_secs(seconds),
        || async {
            let states = claim_states(claims).await;
            let wanted = (status.to_string(), reason.to_string());
            (states.len() == 2 && states.values().all(|s| *s == wanted)).then_some(())
        },
        || inpool.logs(),
    )
    .await;
}

#[tokio::test]
async fn a_live_reference_lease_holds_allocation_until_it_expires_unless_overridden() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let (client, ns) = support::env().namespace().await;
    // The reference provider's Lease, in a namespace of its own as the reference installs it.
    let (_, lease_ns) = support::env().namespace().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &lease_ns);
    const LEASE_SECONDS: i32 = 4;
    leases
        .create(
            &PostParams::default(),
            &reference_lease("reference-1", LEASE_SECONDS),
        )
        .await
        .unwrap();
    // Should the test fail, the Lease stops being renewed with it and expires within 4 s: no later
    // test's inpool is held back.
    let renewing = Renewing::start(leases.clone());

    let mut inpool = start_inpool("held", &[]);
    wait_ready(&inpool).await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("pool", &["10.79.0.10-10.79.0.19"], 24, None)).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    for name in ["a", "b"] {
        create(&claims, &claim(name, "pool")).await;
    }
    let lease_name = format!("{lease_ns}/{REFERENCE_LEASE}");
    wait_both(&claims, &inpool, ("False", "AllocationFailed"), 30).await;
    let message = ready_message(&claims.get("a").await.unwrap());
    assert!(
        message.contains(&lease_name) && message.contains("reference-1"),
        "{message}"
    );
    // Held for a few lease durations while it is renewed: nothing is allocated.
    tokio::time::sleep(Duration::from_secs(3 * LEASE_SECONDS as u64)).await;
    assert_eq!(addresses_by_claim(&client, &ns).await, BTreeMap::new());
    assert_eq!(
        inpool.sample("inpool_reference_provider_lease").await,
        Some(1.0)
    );
    let logs = inpool.logs();
    assert!(
        logs.lines().any(|l| l.contains("\"ERROR\"")
            && l.contains(&lease_name)
            && l.contains("reference-1")),
        "no error naming the Lease:\n{logs}"
    );

    // The other provider stops: its Lease is no longer renewed and expires; the claims are realised.
    drop(renewing);
    let stopped = Instant::now();
    wait_both(&claims, &inpool, ("True", "AddressAllocated"), 60).await;
    let allocated = || ("True".to_string(), "AddressAllocated".to_string());
    println!(
        "claims realised {:.1} s after the Lease's last renewal (lease {LEASE_SECONDS} s)",
        stopped.elapsed().as_secs_f64()
    );
    assert!(inpool.logs().contains("gone or expired; allocating"));
    assert_eq!(
        inpool.sample("inpool_reference_provider_lease").await,
        Some(0.0)
    );
    assert_eq!(inpool.terminate(), Some(0));

    // With the override, a live Lease holds nothing back.
    leases
        .patch(
            REFERENCE_LEASE,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"holderIdentity": "reference-2"}})),
        )
        .await
        .unwrap();
    let _renewing = Renewing::start(leases.clone());
    let mut overriding = start_inpool("override", &["--ignore-reference-provider-lease"]);
    wait_ready(&overriding).await;
    create(&claims, &claim("c", "pool")).await;
    wait_explained(
        "claim c realised despite the live Lease",
        Duration::from_secs(30),
        || async { (claim_states(&claims).await.get("c") == Some(&allocated())).then_some(()) },
        || overriding.logs(),
    )
    .await;
    assert_eq!(
        overriding.sample("inpool_reference_provider_lease").await,
        Some(1.0),
        "the Lease was live all along"
    );
    assert!(
        overriding.logs().contains("Allocating anyway"),
        "{}",
        overriding.logs()
    );
    for name in ["a", "b", "c"] {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    wait_for("the claims released", Duration::from_secs(30), || async {
        claim_states(&claims).await.is_empty().then_some(())
    })
    .await;
    overriding.assert_nothing_forbidden();
    assert_eq!(overriding.terminate(), Some(0));
    leases
        .delete(REFERENCE_LEASE, &DeleteParams::default())
        .await
        .unwrap();
}
