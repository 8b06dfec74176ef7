//! The pool controller on the real control plane: exact counts, conditions, overlap, deletion
//! protection, safe shrinking, and status writes that do not grow with the pool.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use inpool::allocator::{Allocator, PoolSpecInput};
use inpool::api::{IPAddressClaim, IPAddressesStatus, InClusterIPPool};
use inpool_testenv::{common, support};
use kube::api::{Api, DeleteParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::json;

use common::*;

/// The counts the allocator computes for the pool's current spec and the addresses held now.
async fn expected_counts(client: &Client, ns: &str, pool: &InClusterIPPool) -> IPAddressesStatus {
    let spec = &pool.spec;
    let parsed = PoolSpecInput {
        addresses: spec.addresses.clone(),
        prefix: i64::from(spec.prefix),
        gateway: spec.gateway.clone(),
        excluded_addresses: spec.excluded_addresses.clone().unwrap_or_default(),
        allocate_reserved_ip_addresses: spec.allocate_reserved_ip_addresses.unwrap_or(false),
        ..Default::default()
    }
    .parse()
    .expect("valid spec");
    let held: Vec<IpAddr> = addresses_of_pool(client, ns, &pool.name_any())
        .await
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let counts = Allocator::with_used(parsed.into_allocatable(), held)
        .counts()
        .to_status();
    IPAddressesStatus {
        total: counts.total,
        used: counts.used,
        free: counts.free,
        out_of_range: counts.out_of_range,
    }
}

/// Waits until the pool's status counts equal what the allocator computes from the cluster.
async fn counts_match(client: &Client, ns: &str, name: &str, step: &str) -> IPAddressesStatus {
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), ns);
    let mut last = None;
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let pool = pools.get(name).await.unwrap();
            let expected = expected_counts(client, ns, &pool).await;
            let actual = pool.status.as_ref().and_then(|s| s.ip_addresses);
            if actual.as_ref() == Some(&expected) {
                return expected;
            }
            last = Some((actual, expected));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("{step}: status counts never matched the allocator: {last:?}"))
}

/// Merge-patches a pool's spec with `spec`.
pub(super) async fn patch_spec(pools: &Api<InClusterIPPool>, name: &str, spec: serde_json::Value) {
    merge_patch(pools, name, json!({ "spec": spec })).await;
}

#[tokio::test]
async fn counts_match_the_allocator_after_every_step() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(
        &pools,
        &pool("p", &["10.40.0.10-10.40.0.19"], 24, Some("10.40.0.1")),
    )
    .await;
    let c = counts_match(&client, &ns, "p", "empty pool").await;
    assert_eq!((c.total, c.used, c.free), (10, 0, 10));

    for i in 0..6 {
        create(&claims, &claim(&format!("c{i}"), "p")).await;
    }
    for i in 0..6 {
        wait_reason(&claims, &format!("c{i}"), "AddressAllocated").await;
    }
    let c = counts_match(&client, &ns, "p", "allocate 6").await;
    assert_eq!((c.used, c.free), (6, 4));

    // Six claims reconciled at once take the six lowest addresses in any order: release the
    // one that holds the lowest, so that .11-.15 stay held.
    let lowest_holder = addresses_by_claim(&client, &ns)
        .await
        .into_iter()
        .find(|(_, address)| address == "10.40.0.10")
        .map(|(claim, _)| claim)
        .expect("a claim holds 10.40.0.10");
    delete_and_wait_gone(&claims, &lowest_holder).await;
    let c = counts_match(&client, &ns, "p", "release 1").await;
    assert_eq!((c.used, c.free), (5, 5));

    patch_spec(
        &pools,
        "p",
        json!({ "addresses": ["10.40.0.10-10.40.0.29"] }),
    )
    .await;
    let c = counts_match(&client, &ns, "p", "grow").await;
    assert_eq!((c.total, c.free), (20, 15));

    // Shrink below use: 10.40.0.11-15 are held; keep only .10-.12.
    patch_spec(
        &pools,
        "p",
        json!({ "addresses": ["10.40.0.10-10.40.0.12"] }),
    )
    .await;
    let c = counts_match(&client, &ns, "p", "shrink below use").await;
    assert_eq!((c.total, c.out_of_range), (3, 3));
    let shrunk = wait_for(
        "the out-of-range condition",
        Duration::from_secs(30),
        || async {
            let pool = pools.get("p").await.ok()?;
            let cond = pool_status_condition(pool.status.as_ref(), "AddressesInRange")?;
            (cond.status == "False").then(|| cond.message.clone())
        },
    )
    .await;
    assert!(shrunk.contains("claim "), "names the claims: {shrunk}");
    assert!(shrunk.contains("10.40.0.13"), "{shrunk}");
    // An out-of-range address is never handed to a new claim.
    create(&claims, &claim("late", "p")).await;
    let late = wait_for(
        "the late claim to settle",
        Duration::from_secs(30),
        || async {
            let claim = claims.get("late").await.ok()?;
            ready_of(&claim)
        },
    )
    .await;
    if late.1 == "AddressAllocated" {
        let address = addresses_by_claim(&client, &ns).await["late"].clone();
        assert!(
            ["10.40.0.10", "10.40.0.11", "10.40.0.12"].contains(&address.as_str()),
            "{address}"
        );
    }

    // Exclude an address in use: it stays held, counted outside the allocatable set.
    patch_spec(
        &pools,
        "p",
        json!({ "addresses": ["10.40.0.10-10.40.0.29"], "excludedAddresses": ["10.40.0.11"] }),
    )
    .await;
    counts_match(&client, &ns, "p", "exclude an in-use address").await;

    let others = (0..6)
        .map(|i| format!("c{i}"))
        .filter(|name| *name != lowest_holder)
        .chain(["late".to_string()]);
    for name in others {
        delete_and_wait_gone(&claims, &name).await;
    }
    let c = counts_match(&client, &ns, "p", "delete every claim").await;
    assert_eq!((c.used, c.out_of_range), (0, 0));
}

#[tokio::test]
async fn an_ipv6_64_reports_counts_without_overflow() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("wide", &["fd00:41::/64"], 64, None)).await;
    create(&pools, &pool("narrow", &["fd00:42::1000:0/100"], 64, None)).await;
    create(&claims, &claim("a", "wide")).await;
    create(&claims, &claim("b", "narrow")).await;
    wait_reason(&claims, "a", "AddressAllocated").await;
    wait_reason(&claims, "b", "AddressAllocated").await;

    let wide = counts_match(&client, &ns, "wide", "a /64").await;
    // 2^64 - 1 allocatable addresses do not fit the int64 field: saturated, never wrapped.
    assert_eq!(wide.total, i64::MAX);
    assert_eq!(wide.free, i64::MAX);
    assert_eq!(wide.used, 1);
    let narrow = counts_match(&client, &ns, "narrow", "a /100").await;
    // A /100 inside the /64 subnet: 2^28 addresses, all allocatable (the anycast address is
    // the /64's first, outside this range); exact.
    assert_eq!(narrow.total, 1 << 28);
    assert_eq!(narrow.free, (1 << 28) - 1);
}

#[tokio::test]
async fn overlapping_pools_report_each_other_and_never_share_an_address() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    // Whatever the interleaving, each side can serve its 100 claims: `right` can take at most
    // .100-.199 of the shared part, leaving `left` .1-.99 and .200-.210.
    create(&pools, &pool("left", &["10.42.0.1-10.42.0.210"], 23, None)).await;
    create(
        &pools,
        &pool("right", &["10.42.0.100-10.42.1.100"], 23, None),
    )
    .await;
    for (name, other) in [("left", "right"), ("right", "left")] {
        let message = wait_for(
            &format!("{name} to report the overlap"),
            Duration::from_secs(30),
            || async {
                let pool = pools.get(name).await.ok()?;
                let cond = pool_status_condition(pool.status.as_ref(), "Overlap")?;
                (cond.status == "True").then(|| cond.message.clone())
            },
        )
        .await;
        assert!(
            message.contains(&format!("{ns}/{other}")),
            "{name} names {other}: {message}"
        );
    }

    let mut tasks = Vec::new();
    for (half, pool_name) in [(0, "left"), (1, "right")] {
        let claims = claims.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..100 {
                create(&claims, &claim(&format!("c{half}-{i:03}"), pool_name)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    wait_counts(&claims, 200, 0).await;
    let held = addresses_by_claim(&client, &ns).await;
    assert_eq!(held.len(), 200);
    let distinct: BTreeSet<&String> = held.values().collect();
    assert_eq!(
        distinct.len(),
        200,
        "no address handed out twice across the two pools"
    );
}

#[tokio::test]
async fn a_pool_in_use_is_deleted_only_after_its_last_claim() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("doomed", &["10.43.0.0/24"], 24, None)).await;
    create(&claims, &claim("holder", "doomed")).await;
    wait_reason(&claims, "holder", "AddressAllocated").await;
    wait_for(
        "the ProtectPool finalizer",
        Duration::from_secs(30),
        || async {
            let pool = pools.get("doomed").await.ok()?;
            pool.finalizers()
                .contains(&"ipam.cluster.x-k8s.io/ProtectPool".to_string())
                .then_some(())
        },
    )
    .await;

    pools
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let ready = wait_for("Ready=False/Deleting", Duration::from_secs(30), || async {
        let pool = pools.get("doomed").await.ok()?;
        let cond = pool_status_condition(pool.status.as_ref(), "Ready")?;
        (cond.reason == "Deleting").then(|| cond.clone())
    })
    .await;
    assert_eq!(ready.status, "False");
    // A pool being deleted hands out no new address.
    create(&claims, &claim("newcomer", "doomed")).await;
    wait_reason(&claims, "newcomer", "PoolNotReady").await;
    assert!(
        pools.get_opt("doomed").await.unwrap().is_some(),
        "held while an address is allocated"
    );

    claims
        .delete("holder", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&pools, "doomed", Duration::from_secs(30)).await;
}

#[tokio::test]
async fn status_writes_do_not_grow_with_the_pool() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    // 65,533 allocatable addresses.
    create(&pools, &pool("big", &["10.44.0.0/16"], 16, None)).await;
    counts_match(&client, &ns, "big", "empty").await;

    let config = watcher::Config::default().fields("metadata.name=big");
    let mut events = watcher::watcher(pools.clone(), config).boxed();
    let modified = Arc::new(AtomicUsize::new(0));
    let counted = modified.clone();
    let counter = tokio::spawn(async move {
        while let Some(Ok(event)) = events.next().await {
            if let Event::Apply(_) = event {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let claims_made = 20;
    for i in 0..claims_made {
        create(&claims, &claim(&format!("c{i:02}"), "big")).await;
    }
    wait_counts(&claims, claims_made, 0).await;
    let c = counts_match(&client, &ns, "big", "after the burst").await;
    assert_eq!(c.used, 20);
    tokio::time::sleep(Duration::from_secs(2)).await;
    counter.abort();
    let modified = modified.load(Ordering::SeqCst);
    // One write per change at most (never per address of the pool); the rate limit folds a
    // burst into fewer. `modified` counts the initial listing event too.
    assert!(
        modified <= claims_made + 1,
        "{modified} pool writes for {claims_made} claims"
    );
}

#[tokio::test]
async fn ip_pool_claims_are_served_where_the_prefix_pool_crds_are_not_installed() {
    // A binary upgraded without its new CRDs: every CRD but the two prefix pool kinds'.
    let crds: Vec<_> = support::crd_files()
        .into_iter()
        .filter(|path| !path.to_string_lossy().contains("prefixpools"))
        .collect();
    let data_dir =
        std::env::temp_dir().join(format!("inpool-no-prefix-crds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let plane = support::ControlPlane::start_with_crds(&data_dir, true, &crds)
        .expect("control plane without the prefix pool CRDs");
    let client = plane.client().await;
    let ns = support::new_namespace(&client, "no-prefix-").await;
    let controller = start_controller(&client, &ns);

    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("v4", &["10.9.0.10-10.9.0.11"], 24, None)).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&claims, &claim("m0", "v4")).await;
    let realised = wait_reason(&claims, "m0", "AddressAllocated").await;
    assert_eq!(ready_message(&realised), "address 10.9.0.10 allocated");

    // The skipped kinds say so; the IP pool kinds are served.
    let metrics = controller.metrics();
    for (kind, served) in [
        ("InClusterIPPool", 1.0),
        ("GlobalInClusterIPPool", 1.0),
        ("InClusterPrefixPool", 0.0),
        ("GlobalInClusterPrefixPool", 0.0),
    ] {
        let name = format!("inpool_pool_kind_served{{pool_kind=\"{kind}\"}}");
        assert_eq!(sample(&metrics, &name), Some(served), "{kind}: {metrics}");
    }
    // `kubectl inpool pools` shows the IP pool, with a note for each missing kind.
    let snapshot = inpool::inspect::Snapshot::fetch(&client, Some(&ns))
        .await
        .expect("a snapshot without the prefix pool kinds");
    let names: Vec<&str> = snapshot.pools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["v4"]);
    assert_eq!(snapshot.notes.len(), 2, "{:?}", snapshot.notes);
    assert!(
        snapshot.notes[0].starts_with("InClusterPrefixPools are not shown"),
        "{:?}",
        snapshot.notes
    );
    drop(controller);
    drop(plane);
}
