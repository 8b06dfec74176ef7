//! The reference provider already running, with its leader election, when inpool starts beside
//! it (docs/migration.md, "Another provider beside inpool"): inpool's CRDs are installed, as
//! `clusterctl init --ipam inpool` would on a cluster where the reference still runs.
//!
//! - The reference holds its Lease (`7bb7acb4.ipam.cluster.x-k8s.io`, in the namespace its
//!   process is given as a pod's) and realises claims.
//! - inpool starts: it notices the Lease (`inpool_reference_provider_lease` 1, an error in its
//!   log naming it) and allocates nothing: every `IPAddress`, of the claims before and after
//!   its start, is the reference's, distinct; those created after its start are reported
//!   (`ForeignAddresses=True` naming them).
//! - The reference stops (SIGTERM): it leaves its Lease held (it does not release it on stop);
//!   once the Lease has expired inpool serves the next claim itself, with an address no claim
//!   holds.
//!
//! Needs root and util-linux's `unshare`: the reference finds the namespace of its Lease where a
//! pod's ServiceAccount mount puts it, which the bench provides in a mount namespace of the
//! reference's own (`reference::start_leader_elected`). Otherwise it prints NOT RUN.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use inpool::api::{IPAddress, IPAddressClaim, InClusterIPPool};
use inpool_testenv::common::{
    Inpool, apply_objects, claim, create, managers, wait_explained, wait_for,
};
use inpool_testenv::{reference, support};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PatchParams};
use serde_json::json;

use super::{ONE_AT_A_TIME, apply_crds, realised_by_address_ref};

/// inpool's field manager, on every object it writes.
const INPOOL: &str = "inpool";

const TEST: &str = "inpool_allocates_nothing_while_the_reference_holds_its_lease_and_says_so";

#[tokio::test]
async fn inpool_allocates_nothing_while_the_reference_holds_its_lease_and_says_so() {
    if !runs_as_root(TEST) {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().await;
    let (env, client, ns) = beside_bed().await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);

    let reference = start_leader(env, &client, &ns).await;
    let pool = json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "metadata": {"name": "beside", "namespace": ns},
        "spec": {"addresses": ["10.60.0.10-10.60.0.29"], "prefix": 24, "gateway": "10.60.0.1"}});
    apply_objects(&client, &[pool], &PatchParams::apply("test"))
        .await
        .expect("the pool");
    let before: Vec<String> = (0..4).map(|i| format!("b-{i}")).collect();
    for name in &before {
        create(&claims, &claim(name, "beside")).await;
    }
    realised_by_address_ref(&claims, &addresses, &before, "the reference").await;

    let inpool = Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        "inpool",
        env.kubeconfig(),
        &[],
    );
    wait_for(
        "inpool to notice the reference's Lease",
        Duration::from_secs(30),
        || async {
            (inpool.sample("inpool_reference_provider_lease").await == Some(1.0)).then_some(())
        },
    )
    .await;
    ready_and_a_second_on(&inpool).await;
    let after: Vec<String> = (4..8).map(|i| format!("b-{i}")).collect();
    for name in &after {
        create(&claims, &claim(name, "beside")).await;
    }
    let all: Vec<String> = before.iter().chain(&after).cloned().collect();
    let realised = realised_by_address_ref(&claims, &addresses, &all, "the reference").await;
    // Time for inpool to act on every claim, had it meant to.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let listed = addresses
        .list(&ListParams::default())
        .await
        .expect("listing IPAddresses")
        .items;
    assert_eq!(listed.len(), all.len(), "one IPAddress per claim");
    for address in &listed {
        assert!(
            !managers(address).iter().any(|m| m == INPOOL),
            "inpool wrote IPAddress {} while the reference held its Lease: {:?}",
            address.name_any(),
            managers(address)
        );
    }
    let mut held: Vec<&String> = realised.values().map(|(a, _)| a).collect();
    held.sort();
    held.dedup();
    assert_eq!(held.len(), all.len(), "distinct addresses: {realised:?}");
    let logs = inpool.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("\"ERROR\"") && l.contains(reference::LEASE_NAME)),
        "inpool logs an error naming the reference's Lease"
    );
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let seen = std::sync::Mutex::new(String::new());
    let foreign = wait_explained(
        "the pool to report the reference's IPAddresses made since inpool started",
        Duration::from_secs(30),
        || async {
            let pool = pools.get("beside").await.ok()?;
            let conditions = pool.status.and_then(|s| s.conditions).unwrap_or_default();
            *seen.lock().unwrap() = format!("{conditions:#?}");
            let condition = conditions
                .into_iter()
                .find(|c| c.type_ == "ForeignAddresses" && c.status == "True")?;
            after
                .iter()
                .all(|name| condition.message.contains(name.as_str()))
                .then_some(condition.message)
        },
        || format!("; the pool's conditions: {}", seen.lock().unwrap()),
    )
    .await;

    // The reference stops (SIGTERM, waited for); it does not release its Lease, which must
    // expire before inpool serves the next claim.
    drop(reference);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let holder = leases
        .get(reference::LEASE_NAME)
        .await
        .expect("the reference's Lease")
        .spec
        .and_then(|s| s.holder_identity);
    assert!(
        holder.as_deref().is_some_and(|h| !h.is_empty()),
        "a stopped reference leaves its Lease held until it expires: holder {holder:?}"
    );
    create(&claims, &claim("b-next", "beside")).await;
    let next = wait_for(
        "inpool to serve a claim once the reference's Lease has expired",
        Duration::from_secs(60),
        || async {
            let c = claims.get("b-next").await.ok()?;
            let address = addresses.get_opt(c.address_ref()?).await.ok()??;
            managers(&address)
                .iter()
                .any(|m| m == INPOOL)
                .then_some(address.spec.address)
        },
    )
    .await;
    assert!(
        !held.contains(&&next),
        "inpool hands out an address no claim holds: {next} ({held:?})"
    );
    eprintln!("reported by inpool: {foreign}");
}

const TOGETHER: &str = "the_reference_taking_its_lease_stops_inpool_at_once";

/// The reference, with its leader election, started beside inpool that has realised claims of a
/// 40-address pool: inpool notices its Lease from the watch's event (the time from the Lease
/// being held to inpool's gauge is printed), and the claims created from then on are the
/// reference's alone, none on an address inpool holds.
#[tokio::test]
async fn the_reference_taking_its_lease_stops_inpool_at_once() {
    if !runs_as_root(TOGETHER) {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().await;
    let (env, client, ns) = beside_bed().await;
    let pool = json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "metadata": {"name": "together", "namespace": ns},
        "spec": {"addresses": ["10.61.0.10-10.61.0.49"], "prefix": 24}});
    apply_objects(&client, &[pool], &PatchParams::apply("test"))
        .await
        .expect("the pool");
    let inpool = Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        "inpool",
        env.kubeconfig(),
        &[],
    );
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    let first: Vec<String> = (0..10).map(|i| format!("t-{i:02}")).collect();
    for name in &first {
        create(&claims, &claim(name, "together")).await;
    }
    let by_inpool = realised_by_address_ref(&claims, &addresses, &first, "inpool").await;

    let reference = start_leader(env, &client, &ns).await;
    let held = std::time::Instant::now();
    wait_for(
        "inpool to notice the reference's Lease",
        Duration::from_secs(30),
        || async {
            (inpool.sample("inpool_reference_provider_lease").await == Some(1.0)).then_some(())
        },
    )
    .await;
    let noticed = held.elapsed();
    let rest: Vec<String> = (10..40).map(|i| format!("t-{i:02}")).collect();
    for name in &rest {
        create(&claims, &claim(name, "together")).await;
    }
    let by_reference = realised_by_address_ref(&claims, &addresses, &rest, "the reference").await;
    // Whatever either provider still had on the way lands meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let listed = addresses
        .list(&ListParams::default())
        .await
        .expect("listing IPAddresses")
        .items;
    eprintln!(
        "inpool noticed the reference's Lease {} ms after the test saw it held",
        noticed.as_millis()
    );
    for address in &listed {
        let name = address.name_any();
        let expected = if first.contains(&name) {
            INPOOL
        } else {
            "manager"
        };
        assert!(
            managers(address).iter().any(|m| m == expected),
            "IPAddress {name} is written by {:?}, expected {expected}",
            managers(address)
        );
    }
    let mut taken: Vec<&String> = by_inpool
        .values()
        .chain(by_reference.values())
        .map(|(a, _)| a)
        .collect();
    taken.sort();
    taken.dedup();
    assert_eq!(
        taken.len(),
        40,
        "every address held once: {by_inpool:?} {by_reference:?}"
    );
    drop(inpool);
    drop(reference);
}

/// Waits until inpool's `/readyz` answers 200, then a second more: creation timestamps have whole
/// seconds, and an object created in the second inpool's controllers started counts as a
/// leftover, not as foreign. Returns the second it was ready in.
async fn ready_and_a_second_on(inpool: &Inpool) -> i64 {
    let ready = ready_second_of(inpool).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ready
}

/// Waits until inpool's `/readyz` answers 200 (looked at every 100 ms); returns the second that
/// happened in (Unix seconds, as creation timestamps count). By then its controllers have
/// started, and with them the moment from which it counts an `IPAddress` as foreign.
async fn ready_second_of(inpool: &Inpool) -> i64 {
    wait_for(
        "inpool's /readyz to answer 200",
        Duration::from_secs(60),
        || async { inpool.get("/readyz").await.filter(|r| r.status == 200) },
    )
    .await;
    unix_seconds()
}

/// Now, in whole seconds since the Unix epoch.
fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Whether this process runs as root, as the reference's leader election needs (a mount
/// namespace of its own); otherwise it prints NOT RUN for `test`.
fn runs_as_root(test: &str) -> bool {
    // /proc/self belongs to the process's effective uid.
    let root = std::fs::metadata("/proc/self").map(|m| m.uid()).ok() == Some(0);
    if !root {
        let why = "the reference's leader election runs in a mount namespace of its own, as root";
        support::not_run(test, why);
    }
    root
}

/// The bed with inpool's CRDs installed, as beside a running reference, and a fresh namespace.
/// The reference's Leases other tests left are deleted: one held by a reference that was
/// stopped would keep inpool from allocating until it expired.
async fn beside_bed() -> (&'static support::TestEnv, kube::Client, String) {
    let env = support::reference_crds_env();
    let (client, ns) = env.namespace().await;
    apply_crds(&client, &support::crd_files()).await;
    let by_name = ListParams::default().fields(&format!("metadata.name={}", reference::LEASE_NAME));
    for lease in Api::<Lease>::all(client.clone())
        .list(&by_name)
        .await
        .expect("listing Leases")
        .items
    {
        let namespace = lease.namespace().unwrap_or_default();
        let _ = Api::<Lease>::namespaced(client.clone(), &namespace)
            .delete(reference::LEASE_NAME, &Default::default())
            .await;
    }
    (env, client, ns)
}

/// Starts the reference with its leader election, its Lease in `ns`, and returns once it holds
/// the Lease.
async fn start_leader(
    env: &support::TestEnv,
    client: &kube::Client,
    ns: &str,
) -> inpool_testenv::RunningManager {
    let reference = env
        .start_leader_elected_reference(ns)
        .await
        .expect("the reference starts with its leader election");
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    wait_for(
        "the reference to hold its leader election Lease",
        Duration::from_secs(60),
        || async {
            let lease = leases.get_opt(reference::LEASE_NAME).await.ok()??;
            lease.spec?.holder_identity.filter(|h| !h.is_empty())
        },
    )
    .await;
    reference
}

/// The reference started without its leader election (`--leader-elect=false`, so no Lease for
/// inpool to find) beside a running inpool, in the middle of a burst on one pool: the two race.
/// inpool counts every `IPAddress` the reference writes (`inpool_foreign_addresses` of the pool),
/// and never writes an address's `IPAddress` after the reference's had been there for it to see
/// (2 s: creation timestamps have whole seconds, and an allocation already on its way when the
/// reference's appeared still lands). Prints how many addresses ended up held twice: the window
/// docs/migration.md states. Runs as any user: no leader election, no mount namespace.
#[tokio::test]
async fn without_its_leader_election_the_reference_is_reported_and_inpool_never_writes_second() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (env, client, ns) = beside_bed().await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    let (inpool, inpool_started) =
        pool_and_inpool(env, &client, &ns, "race", "10.62.0.10-10.62.0.49").await;
    let inpool_ready = ready_and_a_second_on(&inpool).await;

    let names: Vec<String> = (0..50).map(|i| format!("r-{i:02}")).collect();
    let mut reference = None;
    for (i, name) in names.iter().enumerate() {
        if i == 10 {
            reference = Some(env.start_reference().await.expect("the reference starts"));
        }
        create(&claims, &claim(name, "race")).await;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let lifetime = (inpool_started, inpool_ready);
    let race = settled_race(&inpool, lifetime, &addresses, &ns, "race").await;
    eprintln!(
        "the reference without leader election, started mid-burst: it wrote {} IPAddresses, \
         inpool {}; {} addresses held twice, inpool never second by 2 s or more and counts \
         them",
        race.theirs, race.ours, race.held_twice
    );
    drop(inpool);
    drop(reference);
}

/// What two providers racing on one pool left, once it settled.
struct Race {
    /// `IPAddress`es the reference wrote, and inpool.
    theirs: usize,
    ours: usize,
    /// Addresses with an `IPAddress` of each.
    held_twice: usize,
    /// The creation second of each `IPAddress` inpool wrote.
    ours_created: Vec<i64>,
}

/// Waits until the `IPAddress`es of `ns` stop changing (checked every 5 s, at most 90 s), then
/// checks what must hold whatever the race: the reference wrote some; inpool never wrote an
/// address's `IPAddress` after the reference's had been there for it to see (2 s: creation
/// timestamps have whole seconds, and an allocation already on its way when the reference's
/// appeared still lands); inpool counts in `inpool_foreign_addresses` of `pool` every one the
/// reference wrote in a second after `inpool_ready` and none from before `inpool_started` (Unix
/// seconds: what was created before its controllers started is a leftover to adopt, not
/// foreign, docs/migration.md; they start between the two).
async fn settled_race(
    inpool: &Inpool,
    (inpool_started, inpool_ready): (i64, i64),
    addresses: &Api<IPAddress>,
    ns: &str,
    pool: &str,
) -> Race {
    let mut listed = Vec::new();
    let mut last = usize::MAX;
    for _ in 0..18 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        listed = addresses
            .list(&ListParams::default())
            .await
            .expect("listing IPAddresses")
            .items;
        if listed.len() == last {
            break;
        }
        last = listed.len();
    }
    let written_by = |a: &IPAddress, manager: &str| managers(a).iter().any(|m| m == manager);
    let foreign: Vec<&IPAddress> = listed.iter().filter(|a| written_by(a, "manager")).collect();
    let ours: Vec<&IPAddress> = listed.iter().filter(|a| written_by(a, INPOOL)).collect();
    assert!(!foreign.is_empty(), "the reference wrote IPAddresses");
    let created = |a: &IPAddress| {
        a.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
            .unwrap_or_default()
    };
    let mut held_twice = 0;
    for theirs in &foreign {
        for mine in ours
            .iter()
            .filter(|m| m.spec.address == theirs.spec.address)
        {
            held_twice += 1;
            assert!(
                created(mine) < created(theirs) + 2,
                "inpool wrote IPAddress {} for {} {} s after the reference's {}",
                mine.name_any(),
                mine.spec.address,
                created(mine) - created(theirs),
                theirs.name_any()
            );
        }
    }
    let series = |exposition: &str| {
        exposition
            .lines()
            .filter(|l| l.starts_with("inpool_foreign_addresses{"))
            .filter(|l| l.contains(&format!("\"{ns}\"")) && l.contains(&format!("\"{pool}\"")))
            .find_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    let at_least = foreign.iter().filter(|a| created(a) > inpool_ready).count() as f64;
    let at_most = foreign
        .iter()
        .filter(|a| created(a) >= inpool_started)
        .count() as f64;
    wait_for(
        "inpool to count every IPAddress the reference wrote since it started",
        Duration::from_secs(30),
        || async {
            let counted = series(&inpool.metrics().await?).unwrap_or(0.0);
            (at_least..=at_most).contains(&counted).then_some(())
        },
    )
    .await;
    Race {
        theirs: foreign.len(),
        ours: ours.len(),
        held_twice,
        ours_created: ours.iter().map(|a| created(a)).collect(),
    }
}

/// inpool's claim workers (`--concurrency`, its default): the most allocations it can have
/// decided and not yet written.
const CONCURRENCY: usize = 16;

/// Rounds of each "started together" test; docs/migration.md states the figures over them.
const ROUNDS: usize = 3;

const SAME_SECOND: &str = "inpool_and_the_reference_started_in_the_same_second";

/// inpool and the reference with its leader election started at the same moment, claims
/// arriving from that moment (40 on 40 addresses, one every 100 ms), three rounds: besides what
/// [`settled_race`] checks, inpool wrote at most [`CONCURRENCY`] `IPAddress`es from the second
/// the reference took its Lease on, and at most that many addresses are held twice (it stops at
/// the Lease's watch event; only allocations it had decided before land). Prints the addresses
/// held twice: the window docs/migration.md states.
#[tokio::test]
async fn inpool_and_the_reference_started_in_the_same_second() {
    if !runs_as_root(SAME_SECOND) {
        return;
    }
    started_together(true).await;
}

/// The same with the reference without its leader election: nothing tells inpool it runs but
/// its `IPAddress`es.
#[tokio::test]
async fn inpool_and_the_reference_without_leader_election_started_in_the_same_second() {
    started_together(false).await;
}

async fn started_together(leader_election: bool) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut held_twice = Vec::new();
    for round in 0..ROUNDS {
        let (env, client, ns) = beside_bed().await;
        let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
        let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
        let range = format!("10.63.{round}.10-10.63.{round}.49");
        let (inpool, inpool_started) = pool_and_inpool(env, &client, &ns, "together", &range).await;
        let burst = async {
            for i in 0..40 {
                create(&claims, &claim(&format!("s-{i:02}"), "together")).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let start_reference = async {
            if leader_election {
                env.start_leader_elected_reference(&ns).await
            } else {
                env.start_reference().await
            }
        };
        let (reference, (), inpool_ready) =
            tokio::join!(start_reference, burst, ready_second_of(&inpool));
        let reference = reference.expect("the reference starts");
        let lifetime = (inpool_started, inpool_ready);
        let race = settled_race(&inpool, lifetime, &addresses, &ns, "together").await;
        let mut after_the_lease = String::new();
        if leader_election {
            let taken = Api::<Lease>::namespaced(client.clone(), &ns)
                .get(reference::LEASE_NAME)
                .await
                .expect("the reference's Lease")
                .spec
                .and_then(|s| s.acquire_time)
                .expect("the Lease's acquireTime")
                .0
                .as_second();
            // What inpool wrote from the second the Lease was taken: at most the allocations it
            // had decided before the Lease's watch event, one per claim worker.
            let late = race.ours_created.iter().filter(|c| **c >= taken).count();
            assert!(
                late <= CONCURRENCY && race.held_twice <= CONCURRENCY,
                "inpool wrote {late} IPAddresses from the second the reference took its Lease, \
                 {} addresses held twice: over its {CONCURRENCY} claim workers",
                race.held_twice
            );
            after_the_lease = format!(", {late} of inpool's from the second of the Lease on");
        }
        eprintln!(
            "started in the same second (the reference's leader election {}), round {round}: \
             the reference wrote {} IPAddresses, inpool {}{after_the_lease}; {} addresses held \
             twice",
            if leader_election { "on" } else { "off" },
            race.theirs,
            race.ours,
            race.held_twice
        );
        held_twice.push(race.held_twice);
        drop(inpool);
        drop(reference);
    }
    eprintln!("addresses held twice, by round: {held_twice:?}");
}

/// An `InClusterIPPool` `name` of `range` in `ns`, then inpool started: its process, and the
/// second it started in (Unix seconds, as creation timestamps count).
async fn pool_and_inpool(
    env: &support::TestEnv,
    client: &kube::Client,
    ns: &str,
    name: &str,
    range: &str,
) -> (Inpool, i64) {
    let pool = json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"addresses": [range], "prefix": 24}});
    apply_objects(client, &[pool], &PatchParams::apply("test"))
        .await
        .expect("the pool");
    let started = unix_seconds();
    let inpool = Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        "inpool",
        env.kubeconfig(),
        &[],
    );
    (inpool, started)
}
