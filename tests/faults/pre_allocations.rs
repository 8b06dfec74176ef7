//! Pre-allocations (`spec.preAllocations`) under real faults: a pool of two subnets whose entries
//! name claims of a burst (one of them never created), with the provider SIGKILLed or the
//! control plane restarted while the claims arrive and while some are released. Two watches (on
//! `IPAddress`es and on reservations) record every holder of every address from before the
//! burst to the end, so that an address given to the wrong claim for a moment is caught even if
//! it was repaired later. At the end: every pre-allocated claim is Ready with exactly its
//! entry's address, no other claim ever held or reserved a pre-allocated address, every
//! invariant of the suite holds (addresses unique, counts equal the live `IPAddress`es and the
//! entries), and once every claim is released nothing is left but the entries' count in `used`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use inpool::api::{AdditionalSubnet, PreAllocation};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};

use super::*;

/// The entries of the pool: claim → address. `vm-absent` is never created: its address must stay
/// unused throughout.
const ENTRIES: [(&str, &str); 6] = [
    ("c-0003", "10.9.0.7"),
    ("c-0011", "10.9.0.2"),
    ("c-0017", "10.9.1.4"),
    ("c-0026", "10.9.0.20"),
    ("c-0034", "10.9.1.10"),
    ("vm-absent", "10.9.1.1"),
];
/// Claims of the burst, `c-0000`…: 5 named by an entry, 35 competing for the other 24 addresses.
const BURST: usize = 40;
/// 20 addresses in the pool's own subnet and 10 in the second one.
const TOTAL: i64 = 30;
/// Released under fire: two pre-allocated claims and six others.
const RELEASED: [&str; 8] = [
    "c-0003", "c-0017", "c-0000", "c-0001", "c-0002", "c-0004", "c-0005", "c-0006",
];

/// The fault injected during the burst and again during the releases.
#[derive(Clone, Copy)]
enum Injected {
    /// The provider SIGKILLed at a random moment and started again, `times` times.
    ProviderKilled { times: usize },
    /// The control plane stopped and started again on the same data (the provider keeps running).
    PlaneRestarted,
}

fn pre_allocating_pool() -> InClusterIPPool {
    let mut spanning = pool("pool", &["10.9.0.1-10.9.0.20"], 24, Some("10.9.0.254"));
    spanning.spec.additional_subnets = Some(vec![AdditionalSubnet::new(
        ["10.9.1.1-10.9.1.10"],
        24,
        Some("10.9.1.254"),
    )]);
    spanning.spec.pre_allocations = Some(
        ENTRIES
            .iter()
            .map(|(claim, address)| PreAllocation::new(*claim, *address))
            .collect(),
    );
    spanning
}

/// Every holder each address ever had, as a watch of one kind saw it: the kind, and address →
/// claims.
type Holders = (&'static str, Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>);

/// Records, until aborted, every (address, claim) pair the objects of `api` ever show. The watch
/// re-lists after an error (a restarted control plane), so nothing that persists is missed.
fn record_holders<K>(
    kind: &'static str,
    api: Api<K>,
    holder: impl Fn(&K) -> Option<(String, String)> + Send + 'static,
) -> (Holders, tokio::task::JoinHandle<()>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let holders = Arc::<Mutex<BTreeMap<String, BTreeSet<String>>>>::default();
    let recorded = holders.clone();
    let watch = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            if let Ok(WatchEvent::Apply(object) | WatchEvent::InitApply(object)) = event
                && let Some((address, claim)) = holder(&object)
            {
                recorded
                    .lock()
                    .unwrap()
                    .entry(address)
                    .or_default()
                    .insert(claim);
            }
        }
    });
    ((kind, holders), watch)
}

/// Each pre-allocated address held (or reserved) by any claim but its entry's, in words.
fn wrong_holders((kind, holders): &Holders) -> Vec<String> {
    let holders = holders.lock().unwrap();
    ENTRIES
        .iter()
        .flat_map(|(entry_claim, address)| {
            holders
                .get(*address)
                .into_iter()
                .flatten()
                .filter(move |claim| claim != entry_claim)
                .map(move |claim| {
                    format!(
                        "{address}, pre-allocated to {entry_claim}, was held by {claim} ({kind})"
                    )
                })
        })
        .collect()
}

/// Waits until `realised` claims are realised and `waiting` wait; fails at once, naming them,
/// when a watch saw a pre-allocated address held by another claim.
async fn settle(claims: &Api<IPAddressClaim>, realised: usize, waiting: usize, seen: &[&Holders]) {
    let wrong = wait_for(
        &format!("{realised} claims realised and {waiting} waiting"),
        Duration::from_secs(120),
        || async {
            let wrong: Vec<String> = seen.iter().flat_map(|h| wrong_holders(h)).collect();
            if !wrong.is_empty() {
                return Some(wrong);
            }
            (realised_and_waiting(claims).await == (realised, waiting)).then(Vec::new)
        },
    )
    .await;
    assert!(wrong.is_empty(), "{wrong:#?}");
}

struct Bed {
    kubeconfig: PathBuf,
    ns: String,
    moments: Moments,
    provider: Inpool,
    restarts: usize,
}

impl Bed {
    /// Injects `fault` at random moments of a phase (the burst, the releases) that lasts
    /// `phase`, so that it lands while claims arrive or go.
    async fn inject(&mut self, fault: Injected, phase: Duration) {
        let phase = phase.as_millis() as u64;
        match fault {
            Injected::ProviderKilled { times } => {
                for _ in 0..times {
                    tokio::time::sleep(self.moments.millis(10, phase / times as u64)).await;
                    self.provider.kill();
                    self.restarts += 1;
                    self.provider =
                        start_provider(&self.kubeconfig, &self.ns, &format!("p{}", self.restarts));
                }
            }
            Injected::PlaneRestarted => {
                tokio::time::sleep(self.moments.millis(10, phase)).await;
                restart_plane().await;
            }
        }
    }
}

/// The claims of `ns`, with a client made after the last fault (a restarted control plane drops
/// the old client's connections).
async fn claims_api(kubeconfig: &Path, ns: &str) -> (Client, Api<IPAddressClaim>) {
    let client = client(kubeconfig).await;
    (client.clone(), Api::namespaced(client, ns))
}

/// Every live pre-allocated claim `Ready=True` with exactly its entry's address, and no
/// `IPAddress` on the address of an entry whose claim is not live.
async fn assert_entries_honoured(client: &Client, ns: &str, live: &[&str]) {
    let held = common::addresses_by_claim(client, ns).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    for (claim, address) in ENTRIES {
        if live.contains(&claim) {
            let realised = wait_reason(&claims, claim, "AddressAllocated").await;
            assert!(
                common::ready_message(&realised).contains("pre-allocated"),
                "{claim}: {}",
                common::ready_message(&realised)
            );
            assert_eq!(
                held.get(claim).map(String::as_str),
                Some(address),
                "claim {claim}"
            );
        } else {
            assert!(
                !held.values().any(|a| a == address),
                "{address} is kept for {claim}, which is not live: {held:?}"
            );
        }
    }
}

/// The pool's (total, used, free) once the status shows `want`.
async fn wait_pool_counts(pools: &Api<InClusterIPPool>, want: (i64, i64, i64)) {
    wait_for(
        &format!("the pool to count {want:?}"),
        Duration::from_secs(60),
        || async {
            let counts = pools.get("pool").await.ok()?.status?.ip_addresses?;
            ((counts.total, counts.used, counts.free) == want).then_some(())
        },
    )
    .await;
}

/// The scenario of both tests: the burst with `fault` injected, releases under the same fault,
/// a released pre-allocated claim created again, then everything released.
async fn burst_on_pre_allocations(fault: Injected) -> Duration {
    let Scenario {
        _turn,
        kubeconfig,
        client,
        ns,
        moments,
        pools,
        claims,
    } = Scenario::start().await;
    create(&pools, &pre_allocating_pool()).await;
    let namespace = ns.clone();
    let (addresses_seen, addresses_watch) = record_holders(
        "an IPAddress",
        Api::<IPAddress>::namespaced(client.clone(), &ns),
        |a: &IPAddress| Some((a.spec.address.clone(), a.spec.claim_ref.name.clone())),
    );
    let (reservations_seen, reservations_watch) = record_holders(
        "a reservation",
        Api::<IPAddressReservation>::all(client.clone()),
        move |r: &IPAddressReservation| {
            (r.spec.claim_namespace == namespace)
                .then(|| (r.spec.address.clone(), r.spec.claim_name.clone()))
        },
    );
    let mut bed = Bed {
        provider: start_provider(&kubeconfig, &ns, "p0"),
        kubeconfig,
        ns,
        moments,
        restarts: 0,
    };

    // The burst: 5 pre-allocated claims realised, 24 others, 11 waiting.
    let burst = create_claims_in_background(&claims, "pool", "c", 0..BURST);
    bed.inject(fault, PACE * BURST as u32).await;
    burst.await.unwrap();
    let (client, claims) = claims_api(&bed.kubeconfig, &bed.ns).await;
    let seen = [&addresses_seen, &reservations_seen];
    settle(&claims, 29, 11, &seen).await;
    let ns = bed.ns.clone();
    let live_entries: Vec<&str> = ENTRIES[..5].iter().map(|(c, _)| *c).collect();
    assert_entries_honoured(&client, &ns, &live_entries).await;

    // Releases under fire. The addresses of the released pre-allocated claims stay kept for
    // them: of the 11 waiting, only 6 are realised (the 6 other releases).
    let releases =
        delete_claims_in_background(&claims, RELEASED.iter().map(ToString::to_string).collect());
    bed.inject(fault, PACE * RELEASED.len() as u32).await;
    let fault_ended = Instant::now();
    releases.await.unwrap();
    let (client, claims) = claims_api(&bed.kubeconfig, &ns).await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let recovered = assert_invariants(&client, &ns, &mut [&mut bed.provider]).await - fault_ended;
    settle(&claims, 27, 5, &seen).await;
    let live_entries = ["c-0011", "c-0026", "c-0034"];
    assert_entries_honoured(&client, &ns, &live_entries).await;
    wait_pool_counts(&pools, (TOTAL, TOTAL, 0)).await;

    // A released pre-allocated claim comes back: its address waited for it.
    create(&claims, &claim("c-0003", "pool")).await;
    wait_reason(&claims, "c-0003", "AddressAllocated").await;
    assert_entries_honoured(&client, &ns, &["c-0003", "c-0011", "c-0026", "c-0034"]).await;
    assert_invariants(&client, &ns, &mut [&mut bed.provider]).await;

    // Everything released: no IPAddress, no reservation; the entries' addresses stay used.
    let everyone = claims
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    delete_claims_in_background(&claims, everyone)
        .await
        .unwrap();
    wait_for("every claim gone", Duration::from_secs(60), || async {
        claims
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    let entries = ENTRIES.len() as i64;
    wait_pool_counts(&pools, (TOTAL, entries, TOTAL - entries)).await;
    let left = common::snapshot(&client, &ns).await.expect("a snapshot");
    assert_eq!(
        (left.addresses.len(), left.reservations.len()),
        (0, 0),
        "IPAddresses and reservations left after every claim was released"
    );
    assert_invariants(&client, &ns, &mut [&mut bed.provider]).await;

    addresses_watch.abort();
    reservations_watch.abort();
    let wrong: Vec<String> = wrong_holders(&addresses_seen)
        .into_iter()
        .chain(wrong_holders(&reservations_seen))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
    let handed_out = addresses_seen.1.lock().unwrap().len();
    assert!(
        handed_out >= 29,
        "the watch saw {handed_out} addresses handed out"
    );
    recovered
}

#[tokio::test]
async fn sigkill_mid_burst_on_a_pool_with_pre_allocations_keeps_every_entry_to_its_claim() {
    let recovered = burst_on_pre_allocations(Injected::ProviderKilled { times: 3 }).await;
    println!(
        "FAULTS pre-allocations-sigkill: 40 claims on two subnets with 6 entries + 8 releases, 6 SIGKILLs; \
         no pre-allocated address ever held by another claim; every invariant held {:.1}s after the last fault",
        recovered.as_secs_f64()
    );
}

#[tokio::test]
async fn a_control_plane_restart_mid_burst_keeps_every_entry_to_its_claim() {
    let recovered = burst_on_pre_allocations(Injected::PlaneRestarted).await;
    println!(
        "FAULTS pre-allocations-restart: 40 claims on two subnets with 6 entries + 8 releases, 2 control-plane restarts; \
         no pre-allocated address ever held by another claim; every invariant held {:.1}s after the last fault",
        recovered.as_secs_f64()
    );
}
