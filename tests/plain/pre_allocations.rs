//! Pre-allocations (`spec.preAllocations`) on the real control plane: the named claim gets its
//! address, no other claim ever does (a 300-claim burst watched object by object), conflicts
//! fail the claim with the entry, the address and the holder and resolve by themselves, a
//! changed or removed entry never moves a realised claim and the pool reports it, a conflict in a
//! pool of several subnets names the subnet, and the CRD takes the largest list and refuses one
//! entry more.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use inpool::api::{
    AdditionalSubnet, GlobalInClusterIPPool, IPAddress, IPAddressClaim, InClusterIPPool,
    MAX_PRE_ALLOCATIONS, PreAllocation,
};
use inpool_testenv::{common, support};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Client, ResourceExt};
use serde_json::json;

use common::*;

fn with_entries(mut pool: InClusterIPPool, named: &[(&str, &str)]) -> InClusterIPPool {
    pool.spec.pre_allocations = Some(entries(named));
    pool
}

fn entries(entries: &[(&str, &str)]) -> Vec<PreAllocation> {
    entries
        .iter()
        .map(|(claim, address)| PreAllocation::new(*claim, *address))
        .collect()
}

fn pool_condition(pool: &InClusterIPPool, type_: &str) -> Option<(String, String, String)> {
    pool_status_condition(pool.status.as_ref(), type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until the claim is `Ready=False` with `reason` and a message containing every `part`.
async fn wait_failed_with(
    claims: &Api<IPAddressClaim>,
    name: &str,
    reason: &str,
    parts: &[&str],
) -> String {
    wait_for(
        &format!("claim {name}: {reason} naming {parts:?}"),
        Duration::from_secs(60),
        || async {
            let claim = claims.get(name).await.ok()?;
            let (status, r, _) = ready_of(&claim)?;
            let message = ready_message(&claim);
            (status == "False" && r == reason && parts.iter().all(|p| message.contains(p)))
                .then_some(message)
        },
    )
    .await
}

async fn address_of(client: &Client, ns: &str, claim: &str) -> Option<String> {
    addresses_by_claim(client, ns).await.get(claim).cloned()
}

/// A namespace with a controller and the pool `p`.
struct Bed {
    client: Client,
    ns: String,
    pools: Api<InClusterIPPool>,
    claims: Api<IPAddressClaim>,
    _controller: RunningController,
}

async fn bed(pool: InClusterIPPool) -> Bed {
    let (client, ns) = support::env().namespace().await;
    let controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool).await;
    Bed {
        claims: Api::namespaced(client.clone(), &ns),
        pools,
        client,
        ns,
        _controller: controller,
    }
}

impl Bed {
    async fn assert_holds(&self, claim: &str, address: &str) {
        assert_eq!(
            address_of(&self.client, &self.ns, claim).await.as_deref(),
            Some(address),
            "claim {claim}"
        );
    }

    async fn set_entries(&self, named: &[(&str, &str)]) {
        self.patch_spec(json!({ "preAllocations": entries(named) }))
            .await;
    }

    async fn patch_spec(&self, spec: serde_json::Value) {
        super::pools::patch_spec(&self.pools, "p", spec).await;
    }
}

#[tokio::test]
async fn a_pre_allocated_claim_gets_its_address_on_namespaced_and_global_pools() {
    let bed = bed(with_entries(
        pool("p", &["10.50.0.10-10.50.0.19"], 24, Some("10.50.0.1")),
        &[("vm-0-0-0", "10.50.0.15")],
    ))
    .await;
    let (client, ns, pools, claims) = (&bed.client, &bed.ns, &bed.pools, &bed.claims);
    // Nine claims without an entry fill every other address, and the named one, created last,
    // still gets its own.
    for i in 0..9 {
        create(claims, &claim(&format!("c{i}"), "p")).await;
    }
    for i in 0..9 {
        wait_reason(claims, &format!("c{i}"), "AddressAllocated").await;
    }
    create(claims, &claim("c9", "p")).await;
    wait_reason(claims, "c9", "PoolExhausted").await;
    create(claims, &claim("vm-0-0-0", "p")).await;
    let realised = wait_reason(claims, "vm-0-0-0", "AddressAllocated").await;
    assert!(
        ready_message(&realised).contains("address 10.50.0.15 allocated (pre-allocated"),
        "{}",
        ready_message(&realised)
    );
    let held = addresses_by_claim(client, ns).await;
    assert_eq!(held.get("vm-0-0-0").map(String::as_str), Some("10.50.0.15"));
    assert_eq!(
        held.values().filter(|a| *a == "10.50.0.15").count(),
        1,
        "{held:?}"
    );
    // The pre-allocated address counts as used before its claim holds it, so `used == 10` alone
    // can be read before the status has seen the claim realised: wait for both.
    let pool = wait_for("the pool's status", Duration::from_secs(30), || async {
        let pool = pools.get("p").await.ok()?;
        let counts = pool.status.as_ref()?.ip_addresses?;
        let (_, _, message) = pool_condition(&pool, "PreAllocations")?;
        (counts.used == 10 && message.starts_with("1 of 1 entries realised")).then_some(pool)
    })
    .await;
    let (status, reason, message) = pool_condition(&pool, "PreAllocations").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "PreAllocationsHonoured")
    );
    assert!(message.starts_with("1 of 1 entries realised"), "{message}");

    // A global pool names the claim's namespace.
    let globals: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    let name = unique("prealloc");
    let mut global = global_pool(&name, &["10.51.0.10-10.51.0.12"], 24);
    global.spec.pre_allocations = Some(vec![PreAllocation::in_namespace(
        ns.as_str(),
        "vm-1-0-0",
        "10.51.0.12",
    )]);
    create(&globals, &global).await;
    create(claims, &global_claim("vm-1-0-0", &name)).await;
    wait_reason(claims, "vm-1-0-0", "AddressAllocated").await;
    bed.assert_holds("vm-1-0-0", "10.51.0.12").await;
    delete_and_wait_gone(claims, "vm-1-0-0").await;
    globals
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_conflict_names_the_entry_the_address_and_the_holder_and_resolves() {
    let bed = bed(pool("p", &["10.52.0.10-10.52.0.12"], 24, Some("10.52.0.1"))).await;
    let (ns, pools, claims) = (&bed.ns, &bed.pools, &bed.claims);
    create(claims, &claim("x", "p")).await;
    wait_reason(claims, "x", "AddressAllocated").await;
    bed.assert_holds("x", "10.52.0.10").await;

    // Held by another claim.
    bed.set_entries(&[("vm", "10.52.0.10")]).await;
    create(claims, &claim("vm", "p")).await;
    let message = wait_failed_with(
        claims,
        "vm",
        "AllocationFailed",
        &[
            "spec.preAllocations entry",
            &format!("claim {ns}/vm"),
            "10.52.0.10",
            &format!("held by claim {ns}/x"),
        ],
    )
    .await;
    assert!(message.contains("as soon as that changes"), "{message}");
    let pool = wait_for("the pool's conflict", Duration::from_secs(30), || async {
        let pool = pools.get("p").await.ok()?;
        let (_, reason, _) = pool_condition(&pool, "PreAllocations")?;
        (reason == "PreAllocationConflict").then_some(pool)
    })
    .await;
    let (_, _, pool_message) = pool_condition(&pool, "PreAllocations").unwrap();
    assert!(
        pool_message.contains(&format!("held by claim {ns}/x")),
        "{pool_message}"
    );
    // The holder goes: the claim gets the address at once, with nothing else happening.
    claims.delete("x", &DeleteParams::default()).await.unwrap();
    wait_reason(claims, "vm", "AddressAllocated").await;
    bed.assert_holds("vm", "10.52.0.10").await;

    // The gateway, then an address the pool does not hand out: each resolves when the spec
    // changes.
    bed.set_entries(&[("vm", "10.52.0.10"), ("gw", "10.52.0.1")])
        .await;
    create(claims, &claim("gw", "p")).await;
    wait_failed_with(
        claims,
        "gw",
        "AllocationFailed",
        &["10.52.0.1", "the pool's gateway"],
    )
    .await;
    bed.patch_spec(json!({
        "gateway": "10.52.0.254",
        "addresses": ["10.52.0.1-10.52.0.12"],
    }))
    .await;
    wait_reason(claims, "gw", "AddressAllocated").await;
    bed.assert_holds("gw", "10.52.0.1").await;

    bed.set_entries(&[
        ("vm", "10.52.0.10"),
        ("gw", "10.52.0.1"),
        ("out", "10.52.0.50"),
    ])
    .await;
    create(claims, &claim("out", "p")).await;
    wait_failed_with(
        claims,
        "out",
        "AllocationFailed",
        &["10.52.0.50", "the pool does not hand it out"],
    )
    .await;
    bed.patch_spec(json!({ "addresses": ["10.52.0.1-10.52.0.60"] }))
        .await;
    wait_reason(claims, "out", "AddressAllocated").await;
    bed.assert_holds("out", "10.52.0.50").await;
}

/// In a pool that spans subnets, an entry inside any subnet is inside the pool; the gateway
/// conflict names the subnet whose gateway it is, and an entry outside every subnet says so,
/// naming each subnet; adding a subnet that holds it resolves the conflict.
#[tokio::test]
async fn a_conflict_in_a_pool_of_two_subnets_names_the_subnet() {
    let mut spanning = pool("p", &["10.56.0.10-10.56.0.12"], 24, Some("10.56.0.1"));
    spanning.spec.additional_subnets = Some(vec![AdditionalSubnet::new(
        ["10.57.0.10-10.57.0.20"],
        26,
        Some("10.57.0.1"),
    )]);
    let bed = bed(with_entries(
        spanning,
        &[
            ("second", "10.57.0.15"),
            ("gw", "10.57.0.1"),
            ("out", "10.58.0.5"),
        ],
    ))
    .await;
    let (pools, claims) = (&bed.pools, &bed.claims);
    for name in ["second", "gw", "out"] {
        create(claims, &claim(name, "p")).await;
    }
    wait_reason(claims, "second", "AddressAllocated").await;
    bed.assert_holds("second", "10.57.0.15").await;
    let gateway =
        "it is the pool's gateway of subnet 10.57.0.0/26 (spec.additionalSubnets[0].gateway)";
    wait_failed_with(claims, "gw", "AllocationFailed", &["10.57.0.1", gateway]).await;
    let outside = "the pool does not hand it out: it is outside the addresses of every subnet: \
                   spec.addresses (subnet 10.56.0.0/24), spec.additionalSubnets[0].addresses \
                   (subnet 10.57.0.0/26)";
    wait_failed_with(claims, "out", "AllocationFailed", &["10.58.0.5", outside]).await;
    // The pool's condition says the same.
    let pool = wait_for("the pool's conflicts", Duration::from_secs(30), || async {
        let pool = pools.get("p").await.ok()?;
        let (_, reason, message) = pool_condition(&pool, "PreAllocations")?;
        (reason == "PreAllocationConflict" && message.contains(outside)).then_some(pool)
    })
    .await;
    let (_, _, message) = pool_condition(&pool, "PreAllocations").unwrap();
    assert!(message.contains(gateway), "{message}");

    // A third subnet that holds the address: the claim gets it, with that subnet's network.
    bed.patch_spec(json!({"additionalSubnets": [
        {"addresses": ["10.57.0.10-10.57.0.20"], "prefix": 26, "gateway": "10.57.0.1"},
        {"addresses": ["10.58.0.2-10.58.0.9"], "prefix": 24, "gateway": "10.58.0.1"},
    ]}))
    .await;
    wait_reason(claims, "out", "AddressAllocated").await;
    let addresses: Api<IPAddress> = Api::namespaced(bed.client.clone(), &bed.ns);
    let out = addresses.get("out").await.unwrap();
    assert_eq!(
        (
            out.spec.address.as_str(),
            out.spec.prefix,
            out.spec.gateway.as_deref()
        ),
        ("10.58.0.5", 24, Some("10.58.0.1"))
    );
}

#[tokio::test]
async fn no_other_claim_takes_a_pre_allocated_address_in_a_300_claim_burst() {
    // 291 addresses: 290 for 300 claims (ten wait), one for the named claim.
    let bed = bed(with_entries(
        pool("p", &["10.53.0.10-10.53.1.44"], 23, Some("10.53.0.1")),
        &[("vm", "10.53.0.100")],
    ))
    .await;
    let (client, ns, claims) = (&bed.client, &bed.ns, &bed.claims);
    // Every IPAddress the API server ever shows, and every reservation of the address, from
    // before the burst to the end.
    let seen: Arc<Mutex<BTreeMap<String, Vec<String>>>> = Arc::default();
    let watch = {
        let seen = seen.clone();
        let addresses: Api<IPAddress> = Api::namespaced(client.clone(), ns);
        tokio::spawn(async move {
            let mut stream = watcher::watcher(addresses, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = stream.next().await {
                if let WatchEvent::Apply(a) | WatchEvent::InitApply(a) = event {
                    seen.lock()
                        .unwrap()
                        .entry(a.spec.address.clone())
                        .or_default()
                        .push(a.spec.claim_ref.name.clone());
                }
            }
        })
    };
    create_claims(claims, "p", 300).await;
    create(claims, &claim("vm", "p")).await;
    wait_counts(claims, 291, 10).await;
    bed.assert_holds("vm", "10.53.0.100").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 291, "291 distinct addresses were handed out");
    let holders: std::collections::BTreeSet<&String> =
        seen.get("10.53.0.100").into_iter().flatten().collect();
    assert_eq!(
        holders.into_iter().collect::<Vec<_>>(),
        ["vm"],
        "only the named claim ever held 10.53.0.100"
    );
    let reservations = reservations_of(client, ns).await;
    assert_eq!(
        reservations.get("10.53.0.100").map(String::as_str),
        Some("vm")
    );
    // Released, the ten waiting claims take its place, never the named address.
    claims
        .delete("c-0000", &DeleteParams::default())
        .await
        .unwrap();
    wait_counts(claims, 291, 9).await;
    bed.assert_holds("vm", "10.53.0.100").await;
}

#[tokio::test]
async fn a_changed_or_removed_entry_never_moves_a_realised_claim_and_is_reported() {
    let bed = bed(with_entries(
        pool("p", &["10.54.0.10-10.54.0.20"], 24, None),
        &[("a", "10.54.0.15"), ("b", "10.54.0.16")],
    ))
    .await;
    let (client, ns, pools, claims) = (&bed.client, &bed.ns, &bed.pools, &bed.claims);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), ns);
    for name in ["a", "b"] {
        create(claims, &claim(name, "p")).await;
        wait_reason(claims, name, "AddressAllocated").await;
    }
    let uids: Vec<Option<String>> = [
        addresses.get("a").await.unwrap().uid(),
        addresses.get("b").await.unwrap().uid(),
    ]
    .into();

    bed.set_entries(&[("a", "10.54.0.17")]).await;
    let pool = wait_for(
        "the pool to report the drift",
        Duration::from_secs(30),
        || async {
            let pool = pools.get("p").await.ok()?;
            let (_, reason, _) = pool_condition(&pool, "PreAllocations")?;
            (reason == "PreAllocationDrift").then_some(pool)
        },
    )
    .await;
    let (status, _, message) = pool_condition(&pool, "PreAllocations").unwrap();
    assert_eq!(status, "False");
    assert!(
        message.contains(&format!(
            "claim {ns}/a holds 10.54.0.15 while its entry names 10.54.0.17"
        )),
        "{message}"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let notes = wait_for(
        "the pool's drift Events",
        Duration::from_secs(30),
        || async {
            let notes: Vec<String> = events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|e| {
                    e.reason.as_deref() == Some("PreAllocationDrift")
                        && e.regarding.as_ref().and_then(|r| r.kind.as_deref())
                            == Some("InClusterIPPool")
                })
                .filter_map(|e| e.note)
                .collect();
            (notes.len() >= 2).then_some(notes)
        },
    )
    .await;
    assert!(
        notes.iter().any(|n| n.contains(&format!(
            "claim {ns}/a changed from 10.54.0.15 to 10.54.0.17; the claim keeps 10.54.0.15"
        ))),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&format!("claim {ns}/b (10.54.0.16) was removed"))),
        "{notes:?}"
    );
    // Nothing moved: the same IPAddress objects, the same addresses.
    let now: Vec<Option<String>> = [
        addresses.get("a").await.unwrap().uid(),
        addresses.get("b").await.unwrap().uid(),
    ]
    .into();
    assert_eq!(now, uids);
    let held = addresses_by_claim(client, ns).await;
    assert_eq!(held.get("a").map(String::as_str), Some("10.54.0.15"));
    assert_eq!(held.get("b").map(String::as_str), Some("10.54.0.16"));
    for name in ["a", "b"] {
        let claim = wait_reason(claims, name, "AddressAllocated").await;
        assert!(claim.status.unwrap().address_ref.is_some());
    }
    // .17 is kept for a: eight claims fill the other free addresses, the ninth waits.
    for i in 0..9 {
        create(claims, &claim(&format!("c{i}"), "p")).await;
    }
    wait_counts(claims, 10, 1).await;
    assert!(
        !addresses_by_claim(client, ns)
            .await
            .values()
            .any(|a| a == "10.54.0.17")
    );
    // a is released and comes back: now it gets the address its entry names.
    delete_and_wait_gone(claims, "a").await;
    create(claims, &claim("a", "p")).await;
    wait_reason(claims, "a", "AddressAllocated").await;
    bed.assert_holds("a", "10.54.0.17").await;
    let pool = wait_for("the drift to clear", Duration::from_secs(30), || async {
        let pool = pools.get("p").await.ok()?;
        let (status, _, _) = pool_condition(&pool, "PreAllocations")?;
        (status == "True").then_some(pool)
    })
    .await;
    let (_, reason, _) = pool_condition(&pool, "PreAllocations").unwrap();
    assert_eq!(reason, "PreAllocationsHonoured");
}

/// The largest list of pre-allocations passes the API server's CEL budget at runtime; one entry
/// more is refused, naming the field. (Each other rule's refusal is in the invalid corpus,
/// `tests/data/pools/invalid/*pre-allocation*.yaml`.)
#[tokio::test]
async fn the_largest_list_of_pre_allocations_fits_and_one_more_is_refused() {
    let (client, ns) = support::env().namespace().await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    // IPv6 addresses written with every digit: the longest text per entry.
    let entry = |i: usize| {
        PreAllocation::new(
            format!("machine-with-a-long-name-{i:05}-0-0"),
            format!("2001:0db8:0000:0000:0000:0000:0000:{i:04x}"),
        )
    };
    let mut largest = pool("largest", &["2001:db8::/64"], 64, Some("2001:db8::1"));
    largest.spec.pre_allocations = Some((0..MAX_PRE_ALLOCATIONS).map(entry).collect());
    pools
        .create(&PostParams::default(), &largest)
        .await
        .unwrap_or_else(|e| panic!("{MAX_PRE_ALLOCATIONS} pre-allocations are refused: {e}"));
    let mut too_many = largest.clone();
    too_many.metadata.name = Some("too-many".into());
    too_many
        .spec
        .pre_allocations
        .as_mut()
        .unwrap()
        .push(entry(MAX_PRE_ALLOCATIONS));
    let err = pools
        .create(&PostParams::default(), &too_many)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("spec.preAllocations: Too many"),
        "{err}"
    );
}

/// An entry keeps its address from every pool that can reach it, not only its own: `q`, a pool
/// of the same namespace whose range contains the address, never hands it to one of its claims,
/// even in a burst larger than its free space; both pools count it used; once the entry goes, it
/// is `q`'s to hand out.
#[tokio::test]
async fn an_overlapping_pool_never_hands_out_a_pre_allocated_address() {
    // p: 10.59.0.10-29 with vm → 10.59.0.20; q: 10.59.0.15-24, ten addresses, .20 among them.
    let bed = bed(with_entries(
        pool("p", &["10.59.0.10-10.59.0.29"], 24, Some("10.59.0.1")),
        &[("vm", "10.59.0.20")],
    ))
    .await;
    let (client, ns, pools, claims) = (&bed.client, &bed.ns, &bed.pools, &bed.claims);
    create(
        pools,
        &pool("q", &["10.59.0.15-10.59.0.24"], 24, Some("10.59.0.1")),
    )
    .await;
    // Every claim the API server ever shows holding the address, from before the burst on.
    let holders: Arc<Mutex<Vec<String>>> = Arc::default();
    let watch = {
        let holders = holders.clone();
        let addresses: Api<IPAddress> = Api::namespaced(client.clone(), ns);
        tokio::spawn(async move {
            let mut stream = watcher::watcher(addresses, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = stream.next().await {
                if let WatchEvent::Apply(a) | WatchEvent::InitApply(a) = event
                    && a.spec.address == "10.59.0.20"
                {
                    holders.lock().unwrap().push(a.spec.claim_ref.name.clone());
                }
            }
        })
    };
    let holders_now = || {
        let mut now = holders.lock().unwrap().clone();
        now.dedup();
        now
    };
    // Fifteen claims on q at once, for its nine free addresses.
    let burst: Vec<_> = (0..15)
        .map(|i| {
            let claims = claims.clone();
            tokio::spawn(async move { create(&claims, &claim(&format!("q-{i:02}"), "q")).await })
        })
        .collect();
    for task in burst {
        task.await.unwrap();
    }
    wait_counts(claims, 9, 6).await;
    assert!(
        !addresses_by_claim(client, ns)
            .await
            .values()
            .any(|a| a == "10.59.0.20")
    );
    // q counts the address used, as it counts an address held through p; p counts it too, with
    // q's nine.
    wait_pool_counts(pools, "q", (10, 10, 0)).await;
    wait_pool_counts(pools, "p", (20, 10, 10)).await;

    create(claims, &claim("vm", "p")).await;
    wait_reason(claims, "vm", "AddressAllocated").await;
    bed.assert_holds("vm", "10.59.0.20").await;
    wait_pool_counts(pools, "q", (10, 10, 0)).await;
    wait_pool_counts(pools, "p", (20, 10, 10)).await;
    // Released, the address stays kept while the entry exists: q's claims still wait.
    delete_and_wait_gone(claims, "vm").await;
    wait_pool_counts(pools, "p", (20, 10, 10)).await;
    wait_counts(claims, 9, 6).await;
    assert_eq!(holders_now(), ["vm"], "only vm ever held 10.59.0.20");

    // The entry goes: the oldest waiting claim of q gets the address.
    bed.set_entries(&[]).await;
    wait_counts(claims, 10, 5).await;
    let holder = wait_for(
        "q's claim on 10.59.0.20",
        Duration::from_secs(30),
        || async {
            let holders = holders_now();
            (holders.len() == 2).then(|| holders[1].clone())
        },
    )
    .await;
    assert!(holder.starts_with("q-"), "{holder}");
    wait_pool_counts(pools, "q", (10, 10, 0)).await;
    wait_pool_counts(pools, "p", (20, 10, 10)).await;
    watch.abort();
}

/// Waits until the pool's status counts are `(total, used, free)`.
async fn wait_pool_counts(pools: &Api<InClusterIPPool>, name: &str, want: (i64, i64, i64)) {
    wait_for(
        &format!("pool {name} counting {want:?}"),
        Duration::from_secs(30),
        || async {
            let counts = pools.get(name).await.ok()?.status?.ip_addresses?;
            ((counts.total, counts.used, counts.free) == want).then_some(())
        },
    )
    .await;
}
