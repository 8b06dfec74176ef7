//! The fault suite: inpool as a real process against a real control plane, with faults injected
//! for real — SIGKILL of the provider at random moments, a second provider killed mid-burst, the
//! control plane restarted, etcd compacted and defragmented, the API server frozen with SIGSTOP,
//! one of two API servers behind a balancer stopped, frozen or its connections moved,
//! a leader partitioned from the API
//! server while a standby takes over, objects removed out of band while
//! the provider was frozen (a re-list after an API-server restart), an `IPAddress` deleted under
//! a realised claim, a pool grown and shrunk under claim churn. After each, one invariant
//! checker (`common::invariants`): no address held twice, none lost, no orphan `IPAddress` or
//! reservation, no claim `Ready=True` without its `IPAddress`, every claim has `Ready`, pool
//! counts equal the live `IPAddress`es, the audit found no drift, the provider never panicked.
//!
//! The tests share one control plane of their own (this binary restarts and freezes it) and
//! take turns. Each prints what it injected and how long recovery took; the fault suite
//! section of docs/testing.md has the figures of a run.

use std::path::{Path, PathBuf};
use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant};

use inpool::api::reservation::IPAddressReservation;
use inpool::api::{IPAddress, IPAddressClaim, InClusterIPPool};
use inpool_testenv::fault_proxy::{Fault, FaultProxy, Match, Rule};
use inpool_testenv::{common, support};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

mod http;

use common::{
    Inpool, assert_invariants, claim, create, pool, ready_of, signal, wait_for, wait_reason,
};

// Overlapping pools of every shape under a burst.
mod overlap;
// A leader cut off from the API server while a standby takes over.
mod partition;
// Two API servers on one etcd behind a balancer: one stopped, one frozen, connections moved.
mod two_apiservers;
// Pre-allocations, on a pool of two subnets, under SIGKILLs and control-plane restarts.
mod pre_allocations;
// Pools carved from a parent, under SIGKILLs and a control-plane restart at every step.
mod carved;

/// The control plane of this test binary, restartable.
struct Plane {
    data_dir: PathBuf,
    running: Option<support::ControlPlane>,
}

static PLANE: StdMutex<Option<Plane>> = StdMutex::new(None);
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Takes this binary's turn lock and makes sure the control plane runs; returns its kubeconfig.
async fn plane() -> (tokio::sync::MutexGuard<'static, ()>, PathBuf) {
    let turn = TURN.lock().await;
    let kubeconfig = tokio::task::spawn_blocking(|| {
        let mut plane = PLANE.lock().unwrap_or_else(|e| e.into_inner());
        let plane = plane.get_or_insert_with(|| {
            let data_dir =
                std::env::temp_dir().join(format!("inpool-faults-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&data_dir);
            Plane {
                data_dir,
                running: None,
            }
        });
        if plane.running.is_none() {
            plane.running = Some(start_plane(&plane.data_dir));
        }
        plane.running.as_ref().unwrap().kubeconfig.clone()
    })
    .await
    .unwrap();
    (turn, kubeconfig)
}

fn start_plane(data_dir: &Path) -> support::ControlPlane {
    support::ControlPlane::start_with_crds(data_dir, false, &support::crd_files())
        .expect("start the control plane")
}

/// Stops the control plane with SIGTERM and starts it again on the same data directory (same
/// objects, same address). Watches that resume then get "too old resource version" and re-list.
async fn restart_plane() {
    tokio::task::spawn_blocking(|| {
        let mut plane = PLANE.lock().unwrap();
        let plane = plane.as_mut().unwrap();
        let running = plane.running.take().unwrap();
        assert_eq!(running.terminate(), Some(0), "control plane stops cleanly");
        plane.running = Some(start_plane(&plane.data_dir));
    })
    .await
    .unwrap();
}

/// The control plane's supervisor process.
fn supervisor_pid() -> u32 {
    PLANE
        .lock()
        .unwrap()
        .as_ref()
        .unwrap()
        .running
        .as_ref()
        .unwrap()
        .pid()
}

/// The kube-apiserver process of the control plane (a child of its supervisor).
fn apiserver_pid() -> u32 {
    let supervisor = supervisor_pid();
    inpool_testenv::ha::apiserver_pid(supervisor)
        .unwrap_or_else(|| panic!("no kube-apiserver child of the control plane {supervisor}"))
}

/// The port the control plane's API server serves on.
fn apiserver_port() -> u16 {
    let plane = PLANE.lock().unwrap();
    let server = &plane.as_ref().unwrap().running.as_ref().unwrap().server;
    server
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {server}"))
}

/// `inpool` for one namespace, audited every 2 s, stray reservations collected after 5 s.
fn start_provider(kubeconfig: &Path, namespace: &str, name: &str) -> Inpool {
    Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        name,
        kubeconfig,
        &[
            &format!("--namespace={namespace}"),
            "--audit-interval=2s",
            "--stray-reservation-age=5s",
        ],
    )
}

/// A small deterministic generator for the moments of the faults; the seed is printed.
struct Moments(u64);

impl Moments {
    fn new() -> Moments {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64
            | 1;
        println!("fault moments seed: {seed}");
        Moments(seed)
    }

    /// A duration in `[low, high)` milliseconds.
    fn millis(&mut self, low: u64, high: u64) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(low + self.0 % (high - low))
    }
}

async fn client(kubeconfig: &Path) -> Client {
    support::client_from_kubeconfig(kubeconfig, None).await
}

/// A fault proxy in front of the control plane whose kubeconfig is `kubeconfig` (its PKI
/// directory beside it).
async fn proxy_for(kubeconfig: &Path) -> FaultProxy {
    FaultProxy::start(kubeconfig, &kubeconfig.with_file_name("pki"))
        .await
        .expect("start the fault proxy")
}

/// What every fault test starts from: its turn, the control plane, a fresh namespace.
struct Scenario {
    _turn: tokio::sync::MutexGuard<'static, ()>,
    kubeconfig: PathBuf,
    client: Client,
    ns: String,
    moments: Moments,
    pools: Api<InClusterIPPool>,
    claims: Api<IPAddressClaim>,
}

impl Scenario {
    async fn start() -> Scenario {
        let (turn, kubeconfig) = plane().await;
        let client = client(&kubeconfig).await;
        let ns = support::new_namespace(&client, "fault-").await;
        Scenario {
            _turn: turn,
            pools: Api::namespaced(client.clone(), &ns),
            claims: Api::namespaced(client.clone(), &ns),
            moments: Moments::new(),
            kubeconfig,
            client,
            ns,
        }
    }
}

/// Time between two claims of a burst (creations or deletions).
const PACE: Duration = Duration::from_millis(40);

/// Creates claims `prefix-0000`… in order, in the background.
fn create_claims_in_background(
    claims: &Api<IPAddressClaim>,
    pool: &str,
    prefix: &str,
    range: std::ops::Range<usize>,
) -> tokio::task::JoinHandle<()> {
    let claims = claims.clone();
    let pool = pool.to_string();
    let prefix = prefix.to_string();
    tokio::spawn(async move {
        for i in range {
            // Paced like machines arriving, so that a fault lands in the middle of the burst.
            tokio::time::sleep(PACE).await;
            let name = format!("{prefix}-{i:04}");
            // The API server may be down for a moment (restart): try again.
            for _ in 0..600 {
                match claims
                    .create(&PostParams::default(), &claim(&name, &pool))
                    .await
                {
                    Ok(_) => break,
                    Err(kube::Error::Api(s)) if s.code == 409 => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
    })
}

/// Deletes claims by name, in the background, retrying while the API server is away.
fn delete_claims_in_background(
    claims: &Api<IPAddressClaim>,
    names: Vec<String>,
) -> tokio::task::JoinHandle<()> {
    let claims = claims.clone();
    tokio::spawn(async move {
        for name in names {
            tokio::time::sleep(PACE).await;
            for _ in 0..600 {
                match claims.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => break,
                    Err(kube::Error::Api(s)) if s.code == 404 => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
    })
}

/// Deletes an object as a user or a buggy tool might: finalizers cleared first.
async fn force_delete<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let clear = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    api.patch(name, &PatchParams::default(), &clear)
        .await
        .unwrap();
    api.delete(name, &DeleteParams::default()).await.unwrap();
}

/// Deletes by hand every reservation that records the claim `ns/claim`.
async fn delete_reservations_of(reservations: &Api<IPAddressReservation>, ns: &str, claim: &str) {
    let all = reservations.list(&ListParams::default()).await.unwrap();
    for r in all.items {
        if r.spec.claim_namespace == ns && r.spec.claim_name == claim {
            reservations
                .delete(&r.name_any(), &DeleteParams::default())
                .await
                .unwrap();
        }
    }
}

/// Claims with Ready=True, and with reason PoolExhausted.
async fn realised_and_waiting(claims: &Api<IPAddressClaim>) -> (usize, usize) {
    let list = claims
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let reasons: Vec<String> = list.iter().filter_map(|c| Some(ready_of(c)?.1)).collect();
    (
        reasons.iter().filter(|r| *r == "AddressAllocated").count(),
        reasons.iter().filter(|r| *r == "PoolExhausted").count(),
    )
}

async fn wait_realised(claims: &Api<IPAddressClaim>, realised: usize, waiting: usize) -> Duration {
    let started = Instant::now();
    wait_for(
        &format!("{realised} claims realised and {waiting} waiting"),
        Duration::from_secs(120),
        || async { (realised_and_waiting(claims).await == (realised, waiting)).then_some(()) },
    )
    .await;
    started.elapsed()
}

/// Creates one probe claim per free address and checks that each is realised: no address is
/// lost. Deletes them again.
async fn probe_free_addresses(client: &Client, ns: &str, pool_name: &str) {
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), ns);
    let free = pools
        .get(pool_name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.ip_addresses)
        .map_or(0, |c| c.free) as usize;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    let names: Vec<String> = (0..free).map(|i| format!("probe-{i:04}")).collect();
    for name in &names {
        create(&claims, &claim(name, pool_name)).await;
    }
    for name in &names {
        wait_reason(&claims, name, "AddressAllocated").await;
    }
    delete_claims_in_background(&claims, names.clone())
        .await
        .unwrap();
    wait_for("probe claims gone", Duration::from_secs(60), || async {
        let left = claims.list(&ListParams::default()).await.ok()?.items;
        (!left.iter().any(|c| c.name_any().starts_with("probe-"))).then_some(())
    })
    .await;
    println!("probe: all {free} free addresses of {pool_name} were allocated");
}

#[tokio::test]
async fn sigkill_at_random_moments_of_bursts_loses_and_duplicates_nothing() {
    let Scenario {
        _turn,
        kubeconfig,
        client,
        ns,
        mut moments,
        pools,
        claims,
    } = Scenario::start().await;
    create(&pools, &pool("pool", &["10.1.0.1-10.1.0.30"], 24, None)).await;

    let mut provider = start_provider(&kubeconfig, &ns, "p0");
    let burst = create_claims_in_background(&claims, "pool", "c", 0..40);
    let mut kills = 0;
    for _ in 0..3 {
        tokio::time::sleep(moments.millis(200, 1500)).await;
        provider.kill();
        kills += 1;
        provider = start_provider(&kubeconfig, &ns, &format!("p{kills}"));
    }
    burst.await.unwrap();
    wait_realised(&claims, 30, 10).await;

    // Releases under fire: 15 claims deleted, the provider killed twice meanwhile.
    let names = (0..15).map(|i| format!("c-{:04}", i * 2)).collect();
    let releases = delete_claims_in_background(&claims, names);
    for _ in 0..2 {
        tokio::time::sleep(moments.millis(100, 1000)).await;
        provider.kill();
        kills += 1;
        provider = start_provider(&kubeconfig, &ns, &format!("p{kills}"));
    }
    let fault_ended = Instant::now();
    releases.await.unwrap();
    let recovered = assert_invariants(&client, &ns, &mut [&mut provider]).await - fault_ended;
    let (realised, waiting) = realised_and_waiting(&claims).await;
    assert_eq!((realised, waiting), (25, 0), "25 live claims, 30 addresses");
    probe_free_addresses(&client, &ns, "pool").await;
    assert_invariants(&client, &ns, &mut [&mut provider]).await;
    println!(
        "FAULTS sigkill: 40 claims + 15 releases + 5 probes, {kills} SIGKILLs; every invariant held {:.1}s after the last fault",
        recovered.as_secs_f64()
    );
}

/// Two providers on one pool; the victim, B, reaches the API server through the fault proxy,
/// which holds its `IPAddress` creates. B takes the burst first, so that it is certain to stop
/// between its two writes (a reservation created, its `IPAddress` create held); the survivor, A,
/// joins while B is stuck there, and B is SIGKILLed once both serve the pool. A runs with the
/// default `--stray-reservation-age` (2 min): what B left must be recovered (its claim creates the
/// `IPAddress` of the reservation) or collected as stray (its claim was realised with another
/// address) on evidence, within seconds, not after the age.
#[tokio::test]
async fn two_providers_with_one_killed_mid_burst_leave_no_stray_reservation() {
    let Scenario {
        _turn,
        kubeconfig,
        client,
        ns,
        pools,
        claims,
        ..
    } = Scenario::start().await;
    create(&pools, &pool("pool", &["10.2.0.1-10.2.0.30"], 24, None)).await;
    let proxy = holding_ipaddress_creates(&kubeconfig).await;

    let mut victim = start_provider(proxy.kubeconfig(), &ns, "b");
    victim.wait_ready(Duration::from_secs(60)).await;
    let burst = create_claims_in_background(&claims, "pool", "c", 0..40);
    let reserved_by_victim = between_its_two_writes(&proxy).await;
    let mut survivor = Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        "a",
        &kubeconfig,
        &[&format!("--namespace={ns}"), "--audit-interval=2s"],
    );
    survivor.wait_ready(Duration::from_secs(60)).await;
    victim.kill();
    let killed = Instant::now();
    let held_when_killed = proxy.held();
    burst.await.unwrap();
    wait_realised(&claims, 30, 10).await;
    let realised = killed.elapsed();
    let recovered = assert_invariants(&client, &ns, &mut [&mut survivor]).await - killed;
    proxy.clear();
    // A release must reach the oldest waiting claim: no stray holds its address.
    claims
        .delete("c-0000", &DeleteParams::default())
        .await
        .unwrap();
    wait_realised(&claims, 30, 9).await;
    assert_invariants(&client, &ns, &mut [&mut survivor]).await;
    assert!(
        realised < Duration::from_secs(60),
        "the claims waited {:.1}s after the kill, as long as the old age guard",
        realised.as_secs_f64()
    );
    let collected = survivor
        .sample("inpool_stray_reservations_collected_total")
        .await
        .unwrap_or(0.0);
    println!(
        "FAULTS two-providers: 40 claims, B SIGKILLed between its reservation and its IPAddress \
         ({reserved_by_victim} reservations created by B, {held_when_killed} IPAddress creates held); \
         30 realised and 10 waiting {:.1}s after the kill, every invariant held {:.1}s after it; \
         {collected} stray reservations collected",
        realised.as_secs_f64(),
        recovered.as_secs_f64()
    );
}

/// A fault proxy that holds every `IPAddress` create: a provider behind it stops between its
/// reservation and its `IPAddress`.
async fn holding_ipaddress_creates(kubeconfig: &Path) -> FaultProxy {
    let proxy = proxy_for(kubeconfig).await;
    proxy.set(Rule::new(
        Match::all().method("POST").path("/ipaddresses"),
        Fault::Blackhole,
    ));
    proxy
}

/// Waits until the provider behind `proxy` (a [`holding_ipaddress_creates`] one) is between its
/// two writes: it creates an `IPAddress` right after each reservation it creates, so once it has
/// created one and as many of its `IPAddress` creates are held, it is. Returns how many
/// reservations it created.
async fn between_its_two_writes(proxy: &FaultProxy) -> usize {
    wait_for(
        "B holds a reservation whose IPAddress create is held",
        Duration::from_secs(60),
        || async {
            let reserved = reservations_created(proxy);
            (reserved >= 1 && proxy.held() >= reserved).then_some(reserved)
        },
    )
    .await
}

/// Reservations created through the proxy (answered 201).
fn reservations_created(proxy: &FaultProxy) -> usize {
    proxy
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.resource == "ipaddressreservations")
        .filter(|r| r.upstream_status == Some(201))
        .count()
}

/// A stray left by a provider killed between its two writes, whose claim was then realised with
/// another address (here by hand, as another writer would): a claim waiting in the pool gets that
/// address within seconds, found on evidence by the survivor, whose audit runs only every 30 s and
/// whose `--stray-reservation-age` is the default 2 min.
#[tokio::test]
async fn a_stray_whose_claim_holds_another_address_is_collected_for_a_waiting_claim() {
    let Scenario {
        _turn,
        kubeconfig,
        client,
        ns,
        pools,
        claims,
        ..
    } = Scenario::start().await;
    create(&pools, &pool("pool", &["10.8.0.1-10.8.0.2"], 24, None)).await;
    let proxy = holding_ipaddress_creates(&kubeconfig).await;
    let mut victim = start_provider(proxy.kubeconfig(), &ns, "b");
    create(&claims, &claim("c-0", "pool")).await;
    assert_eq!(between_its_two_writes(&proxy).await, 1);
    assert_eq!(proxy.held(), 1);
    victim.kill();
    // Its held create is dropped with its connection, never forwarded.
    wait_for(
        "B's held create dropped",
        Duration::from_secs(10),
        || async { (proxy.held() == 0).then_some(()) },
    )
    .await;
    proxy.clear();
    // Another writer realises c-0 with the other address.
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    let owner = claims.get("c-0").await.unwrap().uid().unwrap();
    let mut by_hand: IPAddress = serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddress",
        "metadata": {
            "name": "c-0",
            "namespace": ns,
            "ownerReferences": [{
                "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
                "kind": "IPAddressClaim",
                "name": "c-0",
                "uid": owner,
                "controller": true,
            }],
        },
        "spec": {
            "address": "10.8.0.2",
            "prefix": 24,
            "claimRef": {"name": "c-0"},
            "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"},
        },
    }))
    .unwrap();
    by_hand = addresses
        .create(&PostParams::default(), &by_hand)
        .await
        .unwrap();
    assert_eq!(by_hand.spec.address, "10.8.0.2");

    let mut survivor = Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        "a",
        &kubeconfig,
        &[&format!("--namespace={ns}"), "--audit-interval=30s"],
    );
    let started = Instant::now();
    create(&claims, &claim("c-1", "pool")).await;
    wait_reason(&claims, "c-1", "AddressAllocated").await;
    let realised = started.elapsed();
    assert_eq!(
        addresses.get("c-1").await.unwrap().spec.address,
        "10.8.0.1",
        "the stray's address"
    );
    assert_eq!(
        survivor.sample("inpool_audits_total").await,
        Some(0.0),
        "found on evidence, before any audit"
    );
    assert_eq!(
        survivor
            .sample("inpool_stray_reservations_collected_total")
            .await,
        Some(1.0)
    );
    assert!(realised < Duration::from_secs(20), "{realised:?}");
    assert_invariants(&client, &ns, &mut [&mut survivor]).await;
    println!(
        "FAULTS stray-on-evidence: the stray of a provider killed between its writes, its claim realised \
         with another address; the waiting claim realised {:.1}s after the survivor started",
        realised.as_secs_f64()
    );
}

/// 30 claims on 25 addresses with `fault` injected at a random moment of the burst; returns how
/// long after the fault every invariant held.
async fn burst_with_a_fault<F, Fut>(range: &str, fault: F) -> Duration
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Scenario {
        _turn,
        kubeconfig,
        ns,
        mut moments,
        pools,
        claims,
        ..
    } = Scenario::start().await;
    create(&pools, &pool("pool", &[range], 24, None)).await;
    let mut provider = start_provider(&kubeconfig, &ns, "p");
    let burst = create_claims_in_background(&claims, "pool", "c", 0..30);
    tokio::time::sleep(moments.millis(300, 1500)).await;
    fault().await;
    let fault_ended = Instant::now();
    burst.await.unwrap();
    // After a restart the old client's connections are gone: a new client.
    let client = self::client(&kubeconfig).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    wait_realised(&claims, 25, 5).await;
    assert_invariants(&client, &ns, &mut [&mut provider]).await - fault_ended
}

#[tokio::test]
async fn a_control_plane_restart_mid_burst_loses_nothing() {
    let recovered = burst_with_a_fault("10.3.0.1-10.3.0.25", restart_plane).await;
    println!(
        "FAULTS control-plane-restart: 30 claims, 1 restart mid-burst; every invariant held {:.1}s after the last fault",
        recovered.as_secs_f64()
    );
}

/// The etcd of this binary's control plane.
fn etcd() -> inpool_testenv::etcd::Etcd {
    let plane = PLANE.lock().unwrap();
    inpool_testenv::etcd::Etcd::of(&plane.as_ref().unwrap().data_dir)
        .expect("the control plane's etcd")
}

/// etcd's history compacted to its current revision and its database defragmented three times
/// mid-burst, as an operator's maintenance does; then the control plane restarted, so that every
/// watch resumes behind the compaction: the new API server's watch cache starts at a revision
/// after it, inpool's watches get "too old resource version" and list again.
#[tokio::test]
async fn etcd_compacted_and_defragmented_mid_burst_loses_nothing() {
    let compacted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = compacted.clone();
    let recovered = burst_with_a_fault("10.28.0.1-10.28.0.25", || async move {
        let etcd = etcd();
        for _ in 0..3 {
            let revision = etcd.compact().await.expect("etcd compacts");
            eprintln!("compacted etcd at revision {revision}");
            etcd.defragment().await.expect("etcd defragments");
            seen.lock().unwrap().push(revision);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        restart_plane().await;
    })
    .await;
    let compacted = compacted.lock().unwrap().clone();
    assert_eq!(compacted.len(), 3);
    assert!(
        compacted.windows(2).all(|w| w[0] <= w[1]) && compacted[0] < compacted[2],
        "the compactions followed the burst's writes: {compacted:?}"
    );
    println!(
        "FAULTS etcd-compaction: 30 claims, compacted at revisions {compacted:?} and defragmented \
         mid-burst, then a restart behind the compaction; every invariant held {:.1}s after",
        recovered.as_secs_f64()
    );
}

#[tokio::test]
async fn an_api_server_frozen_for_20_seconds_loses_nothing() {
    let recovered = burst_with_a_fault("10.4.0.1-10.4.0.25", || async {
        let apiserver = apiserver_pid();
        signal(apiserver, "STOP");
        tokio::time::sleep(Duration::from_secs(20)).await;
        signal(apiserver, "CONT");
    })
    .await;
    println!(
        "FAULTS apiserver-frozen: 30 claims, SIGSTOP for 20 s mid-burst; every invariant held {:.1}s after the last fault",
        recovered.as_secs_f64()
    );
}

/// A failure once seen: provider frozen, API server restarted, a realised claim removed by
/// hand (finalizers cleared, its IPAddress and reservation deleted), provider resumed. Its
/// watches re-list; the address must be free again and the waiting claim get it.
#[tokio::test]
async fn a_relist_after_an_out_of_band_removal_frees_the_address() {
    let Scenario {
        _turn,
        kubeconfig,
        ns,
        pools,
        claims,
        ..
    } = Scenario::start().await;
    create(&pools, &pool("pool", &["10.5.0.1-10.5.0.2"], 24, None)).await;
    create(&pools, &pool("doomed", &["10.5.1.1"], 24, None)).await;
    let mut provider = start_provider(&kubeconfig, &ns, "p");
    for name in ["c-0", "c-1", "c-2"] {
        create(&claims, &claim(name, "pool")).await;
        tokio::time::sleep(Duration::from_millis(1100)).await; // distinct creation seconds
    }
    wait_realised(&claims, 2, 1).await;

    provider.signal("STOP");
    restart_plane().await;
    let client = self::client(&kubeconfig).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    let reservations: Api<IPAddressReservation> = Api::all(client.clone());
    force_delete(&addresses, "c-0").await;
    delete_reservations_of(&reservations, &ns, "c-0").await;
    force_delete(&claims, "c-0").await;
    force_delete(&pools, "doomed").await;
    provider.signal("CONT");
    let resumed = Instant::now();

    let c2 = wait_reason(&claims, "c-2", "AddressAllocated").await;
    let took = resumed.elapsed();
    assert_eq!(ready_of(&c2).unwrap().2.as_deref(), Some("c-2"));
    // The re-list found the removal; the audit (which would also have fixed it) found nothing.
    let healed = assert_invariants(&client, &ns, &mut [&mut provider]).await - resumed;
    println!(
        "FAULTS relist: provider frozen, control plane restarted, claim removed by hand; waiting claim realised {:.1}s after resume, every invariant held after {:.1}s",
        took.as_secs_f64(),
        healed.as_secs_f64()
    );
}

/// A failure once seen: an `IPAddress` deleted under a realised claim comes back with the
/// same address; with its reservation gone too, the claim is allocated again. Never Ready=True
/// without its IPAddress for longer than the repair.
#[tokio::test]
async fn an_ipaddress_deleted_under_a_realised_claim_is_restored() {
    let Scenario {
        _turn,
        kubeconfig,
        client,
        ns,
        pools,
        claims,
        ..
    } = Scenario::start().await;
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    let reservations: Api<IPAddressReservation> = Api::all(client.clone());
    create(&pools, &pool("pool", &["10.6.0.1-10.6.0.3"], 24, None)).await;
    let mut provider = start_provider(&kubeconfig, &ns, "p");
    create(&claims, &claim("c-0", "pool")).await;
    create(&claims, &claim("c-1", "pool")).await;
    wait_realised(&claims, 2, 0).await;
    let before = addresses.get("c-0").await.unwrap();
    force_delete(&addresses, "c-0").await;
    let deleted = Instant::now();
    let restored = wait_for(
        "IPAddress c-0 restored",
        Duration::from_secs(60),
        || async {
            addresses
                .get_opt("c-0")
                .await
                .ok()
                .flatten()
                .filter(|a| a.uid() != before.uid())
        },
    )
    .await;
    let took = deleted.elapsed();
    assert_eq!(
        restored.spec.address, before.spec.address,
        "the same address"
    );
    let healed = assert_invariants(&client, &ns, &mut [&mut provider]).await - deleted;

    // Both the IPAddress and its reservation gone: the claim is allocated again.
    force_delete(&addresses, "c-1").await;
    delete_reservations_of(&reservations, &ns, "c-1").await;
    wait_for("IPAddress c-1 again", Duration::from_secs(60), || async {
        addresses.get_opt("c-1").await.ok().flatten()
    })
    .await;
    assert_invariants(&client, &ns, &mut [&mut provider]).await;
    println!(
        "FAULTS ipaddress-deleted: IPAddress restored with the same address in {:.1}s, every invariant held after {:.1}s",
        took.as_secs_f64(),
        healed.as_secs_f64()
    );
}

#[tokio::test]
async fn a_pool_grown_and_shrunk_under_claim_churn_stays_consistent() {
    let Scenario {
        _turn,
        kubeconfig,
        client,
        ns,
        mut moments,
        pools,
        claims,
    } = Scenario::start().await;
    create(&pools, &pool("pool", &["10.7.0.1-10.7.0.10"], 24, None)).await;
    let mut provider = start_provider(&kubeconfig, &ns, "p");

    let churn = {
        let claims = claims.clone();
        tokio::spawn(async move {
            for round in 0..6 {
                create_claims_in_background(&claims, "pool", &format!("r{round}"), 0..6)
                    .await
                    .unwrap();
                let old = (0..3).map(|i| format!("r{round}-{i:04}")).collect();
                delete_claims_in_background(&claims, old).await.unwrap();
            }
        })
    };
    let sizes = [
        "10.7.0.1-10.7.0.20",
        "10.7.0.1-10.7.0.5",
        "10.7.0.3-10.7.0.15",
        "10.7.0.1-10.7.0.12",
    ];
    for range in sizes {
        tokio::time::sleep(moments.millis(300, 1200)).await;
        let patch = Patch::Merge(json!({"spec": {"addresses": [range]}}));
        pools
            .patch("pool", &PatchParams::default(), &patch)
            .await
            .unwrap();
    }
    churn.await.unwrap();
    let fault_ended = Instant::now();
    let recovered = assert_invariants(&client, &ns, &mut [&mut provider]).await - fault_ended;
    // 18 live claims; out-of-range addresses stay with their claims, so at least 12 realised.
    let (realised, waiting) = realised_and_waiting(&claims).await;
    assert_eq!(realised + waiting, 18);
    assert!(realised >= 12, "{realised} realised");
    println!(
        "FAULTS churn: 36 claims created, 18 deleted, pool resized 4 times; every invariant held {:.1}s after the churn",
        recovered.as_secs_f64()
    );
}
