//! The claim reconcile against a mock API server: for each step, every request it sends, in
//! order, with the fields of its body that carry the step's meaning, and nothing else.
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

use super::{error_policy, reconcile};
use crate::api::conditions::now;
use crate::api::{
    ADDRESS_FINALIZER, CLAIM_FINALIZER, IPAM_GROUP, IPAddress, IPAddressClaim,
    IPAddressClaimReference, IPAddressClaimSpec, IPAddressSpec, IPPoolReference, ObjectKey,
    PAUSED_ANNOTATION, REASON_ADDRESS_ALLOCATED, REASON_ALLOCATION_FAILED, REASON_POOL_EXHAUSTED,
    REASON_POOL_NOT_READY,
};
use crate::controllers::claims::cached_claim::CachedClaim;
use crate::controllers::fixtures::{
    Expect, Mock, ip_pool, pool_key, reservation, scenario, stored,
};
use crate::controllers::runtime::controller::Action;
use crate::controllers::runtime::error::Error;
use crate::controllers::state::Change;
use crate::controllers::state::facts::{address_hold, address_key};

const ADDRESSES: &str = "/apis/ipam.cluster.x-k8s.io/v1beta2/namespaces/ns/ipaddresses";
const RESERVATIONS: &str = "/apis/ipam.inpool.dev/v1alpha1/ipaddressreservations";
const CLAIMS: &str = "/apis/ipam.cluster.x-k8s.io/v1beta2/namespaces/ns/ipaddressclaims";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";
/// The query of every create inpool makes.
const CREATE: &str = "?&fieldManager=inpool";

/// Claim `ns/name` on pool `ns/p`, as the API server keeps it, with inpool's finalizer.
fn claim(name: &str) -> IPAddressClaim {
    let mut claim = IPAddressClaim::new(
        name,
        IPAddressClaimSpec {
            cluster_name: None,
            pool_ref: IPPoolReference::new(IPAM_GROUP, "InClusterIPPool", "p"),
        },
    );
    claim.metadata.namespace = Some("ns".into());
    claim.metadata.finalizers = Some(vec![CLAIM_FINALIZER.into()]);
    claim.metadata.creation_timestamp = Some(now());
    claim.metadata.generation = Some(1);
    stored(claim, &format!("{name}-uid"), "1")
}

/// A mock API server and a Context that knows pool `ns/p` of 10.0.0.10 and 10.0.0.11.
fn world() -> Mock {
    let mock = Mock::new();
    mock.pool(&ip_pool(&["10.0.0.10-10.0.0.11"]));
    mock
}

/// Caches `claim` as its watch event would, then runs its reconcile against `script`.
async fn reconcile_claim(
    mock: &mut Mock,
    claim: &IPAddressClaim,
    script: impl IntoIterator<Item = Expect>,
) -> Result<Action, Error> {
    let cached = mock.claim(claim.clone());
    let script = script.into_iter().collect();
    scenario(
        &mut mock.server,
        reconcile(cached, mock.ctx.clone()),
        script,
    )
    .await
}

/// The `IPAddress` inpool writes for claim `ns/name` (of UID `name-uid`) holding `ip`.
fn address(name: &str, ip: &str) -> IPAddress {
    let mut address = IPAddress::new(
        name,
        IPAddressSpec {
            address: ip.into(),
            claim_ref: IPAddressClaimReference { name: name.into() },
            gateway: Some("10.0.0.1".into()),
            pool_ref: CachedClaim::pool_ref(&pool_key()),
            prefix: 24,
        },
    );
    address.metadata.namespace = Some("ns".into());
    let owner = |kind: &str, name: &str, uid: String, controller| OwnerReference {
        kind: kind.into(),
        name: name.into(),
        uid,
        controller: Some(controller),
        block_owner_deletion: Some(true),
        ..OwnerReference::default()
    };
    address.metadata.owner_references = Some(vec![
        owner("IPAddressClaim", name, format!("{name}-uid"), true),
        owner("InClusterIPPool", "p", "pool-uid".into(), false),
    ]);
    stored(address, "address-uid", "7")
}

/// The look-up of an existing `IPAddress` named after the claim, answered "none".
fn no_address(name: &str) -> Expect {
    Expect::get(format!("{ADDRESSES}/{name}")).not_found()
}

/// The reservation create of `ip` for claim `ns/name`.
fn reserve(name: &str, ip: &str) -> Expect {
    let dashed = ip.replace('.', "-");
    Expect::post(format!("{RESERVATIONS}{CREATE}"))
        .with("/metadata/name", format!("{dashed}.ns.ns"))
        .with("/spec/address", ip)
        .with("/spec/claimName", name)
        .with("/spec/claimUID", format!("{name}-uid"))
}

/// The `IPAddress` create of `ip` for claim `ns/name`.
fn create_address(name: &str, ip: &str) -> Expect {
    Expect::post(format!("{ADDRESSES}{CREATE}"))
        .with("/metadata/name", name)
        .with("/spec/address", ip)
        .with("/spec/prefix", 24)
        .with("/spec/gateway", "10.0.0.1")
        .with("/spec/claimRef/name", name)
        .with("/metadata/ownerReferences/0/uid", format!("{name}-uid"))
        .with("/metadata/ownerReferences/1/uid", "pool-uid")
}

/// The claim's status patch (server-side apply, forced) to `Ready` `status` for `reason`, and
/// what it answers: the claim at resourceVersion 2.
fn ready(claim: &IPAddressClaim, status: &str, reason: &str) -> Expect {
    let name = claim.metadata.name.as_deref().unwrap();
    let mut written = claim.clone();
    written.metadata.resource_version = Some("2".into());
    Expect::patch(format!(
        "{CLAIMS}/{name}/status?&force=true&fieldManager=inpool"
    ))
    .with("/status/conditions/0/type", "Ready")
    .with("/status/conditions/0/status", status)
    .with("/status/conditions/0/reason", reason)
    .answer(&written)
}

/// What tells the claim it holds its address: `Ready=True` with its `addressRef`, and the Event.
fn allocated(claim: &IPAddressClaim) -> [Expect; 2] {
    let name = claim.metadata.name.as_deref().unwrap();
    [
        ready(claim, "True", REASON_ADDRESS_ALLOCATED).with("/status/addressRef/name", name),
        event(name, REASON_ADDRESS_ALLOCATED),
    ]
}

/// Runs `claim`'s reconcile against `script`, then what tells the claim it holds its address;
/// the claim then waits for a change.
async fn allocates(
    mock: &mut Mock,
    claim: &IPAddressClaim,
    script: impl IntoIterator<Item = Expect>,
) {
    let script = script.into_iter().chain(allocated(claim));
    let action = reconcile_claim(mock, claim, script).await;
    assert_eq!(action.unwrap(), Action::await_change());
}

/// What tells the claim why it waits: `Ready=False` for `reason`, and the Event.
fn waits(claim: &IPAddressClaim, reason: &str) -> [Expect; 2] {
    let name = claim.metadata.name.as_deref().unwrap();
    [ready(claim, "False", reason), event(name, reason)]
}

/// A new claim's allocation of `ip`: the look for an `IPAddress` of its name (none), then the
/// reservation create, then the `IPAddress` create.
fn allocation(name: &str, ip: &str) -> [Expect; 3] {
    [
        no_address(name),
        reserve(name, ip),
        create_address(name, ip),
    ]
}

/// The Event about claim `ns/name` for `reason`.
fn event(name: &str, reason: &str) -> Expect {
    Expect::post(format!("{EVENTS}{CREATE}"))
        .with("/regarding/name", name)
        .with("/reason", reason)
}

#[tokio::test]
async fn a_new_claim_reserves_then_creates_its_address_then_says_ready() {
    let mut mock = world();
    let c1 = claim("c1");
    allocates(&mut mock, &c1, allocation("c1", "10.0.0.10")).await;
}

#[tokio::test]
async fn a_claim_without_inpools_finalizer_gets_it_before_anything_else() {
    let mut mock = world();
    let mut c1 = claim("c1");
    c1.metadata.finalizers = None;
    let finalizer = Expect::patch(format!("{CLAIMS}/c1?&fieldManager=inpool"))
        .with("/metadata/resourceVersion", "1")
        .with("/metadata/finalizers", json!([CLAIM_FINALIZER]))
        .answer(&stored(claim("c1"), "c1-uid", "2"));
    let script = [finalizer].into_iter().chain(allocation("c1", "10.0.0.10"));
    allocates(&mut mock, &c1, script).await;
}

#[tokio::test]
async fn an_existing_address_of_the_claim_is_adopted_with_its_reservation() {
    let mut mock = world();
    let c1 = claim("c1");
    let script = [
        Expect::get(format!("{ADDRESSES}/c1")).answer(&address("c1", "10.0.0.11")),
        reserve("c1", "10.0.0.11"),
    ];
    allocates(&mut mock, &c1, script).await;
}

#[tokio::test]
async fn a_deleting_claim_releases_its_address_and_reservation_then_its_finalizer() {
    let mut mock = world();
    let mut held = address("c1", "10.0.0.10");
    held.metadata.finalizers = Some(vec![ADDRESS_FINALIZER.into()]);
    let reserved = reservation("c1", "10.0.0.10");
    mock.learn(&reserved);
    let hold = address_hold(&held).unwrap();
    mock.ctx.apply(Change::Address(address_key(&held), hold));
    let mut c1 = claim("c1");
    c1.metadata.deletion_timestamp = Some(now());
    let script = [
        Expect::get(format!("{ADDRESSES}/c1")).answer(&held),
        // inpool's protection goes first, guarded by the version read, then the address.
        Expect::patch(format!("{ADDRESSES}/c1?&fieldManager=inpool"))
            .with("/metadata/resourceVersion", "7")
            .with("/metadata/finalizers", json!([]))
            .answer(&address("c1", "10.0.0.10")),
        Expect::delete(format!("{ADDRESSES}/c1?")).answer(&held),
        Expect::delete(format!("{RESERVATIONS}/10-0-0-10.ns.ns?")).answer(&reserved),
        event("c1", "AddressReleased"),
        Expect::patch(format!("{CLAIMS}/c1?&fieldManager=inpool"))
            .with("/metadata/resourceVersion", "1")
            .with("/metadata/finalizers", json!([]))
            .answer(&claim("c1")),
    ];
    let action = reconcile_claim(&mut mock, &c1, script).await;
    assert_eq!(action.unwrap(), Action::await_change());
}

/// A new claim `c1` of `mock`'s pool looks for its address, then is told why it waits, and
/// nothing else: no reservation, no `IPAddress`.
async fn waits_for(mut mock: Mock, reason: &str) {
    let c1 = claim("c1");
    let script = [no_address("c1")].into_iter().chain(waits(&c1, reason));
    let action = reconcile_claim(&mut mock, &c1, script).await;
    assert_eq!(action.unwrap(), Action::await_change());
}

#[tokio::test]
async fn a_claim_of_an_exhausted_pool_says_so_and_waits() {
    let mock = Mock::new();
    mock.pool(&ip_pool(&["10.0.0.10"]));
    mock.learn(&reservation("c0", "10.0.0.10"));
    waits_for(mock, REASON_POOL_EXHAUSTED).await;
}

#[tokio::test]
async fn a_claim_of_a_missing_pool_says_so_and_waits() {
    waits_for(Mock::new(), REASON_POOL_NOT_READY).await;
}

#[tokio::test]
async fn a_paused_claim_sends_nothing() {
    let mut mock = world();
    let mut c1 = claim("c1");
    c1.metadata.annotations = Some([(PAUSED_ANNOTATION.to_string(), String::new())].into());
    let action = reconcile_claim(&mut mock, &c1, []).await;
    assert_eq!(action.unwrap(), Action::await_change());
}

#[tokio::test]
async fn a_claim_of_a_paused_cluster_sends_nothing() {
    let mut mock = world();
    mock.cluster(
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "k", "namespace": "ns", "uid": "cluster-uid"},
            "spec": {"paused": true},
        }))
        .unwrap(),
    );
    let mut c1 = claim("c1");
    c1.spec.cluster_name = Some("k".into());
    let action = reconcile_claim(&mut mock, &c1, []).await;
    assert_eq!(action.unwrap(), Action::await_change());
}

/// The claim's `IPAddress` create meets `AlreadyExists`, and the look that follows finds
/// `existing`.
fn create_met_by(existing: &IPAddress) -> [Expect; 4] {
    let [look, reserve, create] = allocation("c1", "10.0.0.10");
    let create = create.fails(409, "AlreadyExists");
    [
        look,
        reserve,
        create,
        Expect::get(format!("{ADDRESSES}/c1")).answer(existing),
    ]
}

#[tokio::test]
async fn an_address_create_met_by_its_own_earlier_answer_makes_the_claim_ready() {
    let mut mock = world();
    let c1 = claim("c1");
    let script = create_met_by(&address("c1", "10.0.0.10"));
    allocates(&mut mock, &c1, script).await;
}

#[tokio::test]
async fn an_address_create_met_by_another_address_gives_the_reservation_back() {
    let mut mock = world();
    let script = create_met_by(&address("c1", "10.0.0.11"));
    let give_back = Expect::delete(format!("{RESERVATIONS}/10-0-0-10.ns.ns?"))
        .answer(&reservation("c1", "10.0.0.10"));
    let c1 = claim("c1");
    let action = reconcile_claim(&mut mock, &c1, script.into_iter().chain([give_back])).await;
    // The next pass adopts the address that exists.
    assert_eq!(action.unwrap(), Action::requeue(Duration::from_millis(100)));
}

#[tokio::test]
async fn a_failed_address_create_is_said_then_retried_from_the_reservation() {
    let mut mock = world();
    let c1 = claim("c1");
    let [look, reserve, create] = allocation("c1", "10.0.0.10");
    let script = [look, reserve, create.fails(500, "InternalError")];
    let failed = reconcile_claim(
        &mut mock,
        &c1,
        script
            .into_iter()
            .chain(waits(&c1, REASON_ALLOCATION_FAILED)),
    );
    let error = failed.await.expect_err("the reconcile fails");
    let cached = mock.ctx.stores.claim(&ObjectKey::new("ns", "c1")).unwrap();
    let retry = error_policy(cached, &error, mock.ctx.clone());
    assert_ne!(retry, Action::await_change(), "{error}");

    // The retry, on the claim its status patch wrote: the reservation is recovered.
    let c1 = stored(c1, "c1-uid", "2");
    let script = [
        no_address("c1"),
        Expect::get(format!("{RESERVATIONS}/10-0-0-10.ns.ns"))
            .answer(&reservation("c1", "10.0.0.10")),
        create_address("c1", "10.0.0.10"),
    ];
    allocates(&mut mock, &c1, script).await;
}
