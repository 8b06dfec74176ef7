//! Overlapping pools of every shape under one burst: an IP pool, prefix pools of two allocation
//! lengths, and a global IP pool and global prefix pool, all over one /120, with claims on all of
//! them at once and the provider killed in the middle. The reservations cannot keep these apart
//! (a sub-prefix and an address inside it have different names): only the registry's accounting
//! across unit sizes does. The invariant checker compares every `IPAddress`'s block (address or
//! sub-prefix) with every other; this test also checks each pool's counts against the space the
//! live blocks use, and that nobody waits while a unit is free.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};

use common::{block_of, claim_on, global_pool, snapshot};
use inpool::allocator::{AddrRange, AddressSet, Family, PoolSpecInput, PrefixPoolSpecInput};
use inpool::api::{
    GlobalInClusterIPPool, GlobalInClusterPrefixPool, GlobalInClusterPrefixPoolSpec,
    IPAddressesStatus, IPPoolReference, InClusterPrefixPool, InClusterPrefixPoolSpec,
};

use super::*;

/// One pool of the scenario: how claims refer to it, its allocatable space and its unit.
struct Shape {
    pool_ref: IPPoolReference,
    space: AddressSet,
    unit: u8,
}

fn ip_shape(kind: &str, name: &str, addresses: &[&str], prefix: i32) -> Shape {
    let parsed = PoolSpecInput {
        addresses: addresses.iter().map(|a| a.to_string()).collect(),
        prefix: i64::from(prefix),
        ..Default::default()
    }
    .parse()
    .expect("valid IP pool");
    Shape {
        pool_ref: IPPoolReference::new(common::GROUP, kind, name),
        space: parsed.allocatable().clone(),
        unit: 128,
    }
}

fn prefix_shape(kind: &str, name: &str, prefix: &str, length: u8) -> Shape {
    let parsed = PrefixPoolSpecInput {
        prefixes: vec![prefix.to_string()],
        allocation_prefix_length: Some(i64::from(length)),
        gateway: None,
        excluded_prefixes: Vec::new(),
    }
    .parse()
    .expect("valid prefix pool");
    Shape {
        pool_ref: IPPoolReference::new(common::GROUP, kind, name),
        space: parsed.allocatable().clone(),
        unit: length,
    }
}

fn prefix_spec(prefix: &str, length: i32) -> InClusterPrefixPoolSpec {
    let mut spec = InClusterPrefixPoolSpec::new([prefix]);
    spec.allocation_prefix_length = Some(length);
    spec
}

/// The units of `shape` (addresses, or sub-prefixes) that share an address with a block.
fn units_used(shape: &Shape, blocks: &[AddrRange]) -> u128 {
    let shift = 128 - u32::from(shape.unit);
    let mut units = BTreeSet::new();
    for block in blocks {
        let Ok(block) = AddressSet::from_ranges(Family::V6, [*block]) else {
            continue;
        };
        for range in shape.space.intersection(&block).ranges() {
            let bits = |ip: IpAddr| match ip {
                IpAddr::V6(v6) => u128::from(v6) >> shift,
                IpAddr::V4(_) => unreachable!("IPv6 only"),
            };
            units.extend(bits(range.first())..=bits(range.last()));
        }
    }
    units.len() as u128
}

async fn counts(
    client: &Client,
    ns: &str,
    pool_ref: &IPPoolReference,
) -> Option<IPAddressesStatus> {
    let name = pool_ref.name.as_str();
    let status = match pool_ref.kind.as_str() {
        "InClusterIPPool" => {
            Api::<InClusterIPPool>::namespaced(client.clone(), ns)
                .get(name)
                .await
                .ok()?
                .status
        }
        "InClusterPrefixPool" => {
            Api::<InClusterPrefixPool>::namespaced(client.clone(), ns)
                .get(name)
                .await
                .ok()?
                .status
        }
        "GlobalInClusterIPPool" => {
            Api::<GlobalInClusterIPPool>::all(client.clone())
                .get(name)
                .await
                .ok()?
                .status
        }
        _ => {
            Api::<GlobalInClusterPrefixPool>::all(client.clone())
                .get(name)
                .await
                .ok()?
                .status
        }
    };
    status?.ip_addresses
}

/// What is wrong with the pools' counts and queues, in words (empty: nothing).
async fn accounting(client: &Client, ns: &str, shapes: &[Shape]) -> Vec<String> {
    let Some(snapshot) = snapshot(client, ns).await else {
        return vec!["the API server did not answer".into()];
    };
    let blocks: Vec<AddrRange> = snapshot
        .addresses
        .iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
        .filter_map(block_of)
        .collect();
    let mut wrong = Vec::new();
    for shape in shapes {
        let used = units_used(shape, &blocks);
        let total = shape.space.len() >> (128 - u32::from(shape.unit));
        let name = &shape.pool_ref.name;
        match counts(client, ns, &shape.pool_ref).await {
            Some(c) if c.used as u128 == used && (c.free + c.used) as u128 == total => {}
            other => wrong.push(format!(
                "{} {name}: status {other:?}, but the live blocks use {used} of {total} units",
                shape.pool_ref.kind
            )),
        }
        let waits = snapshot.claims.iter().any(|c| {
            c.spec.pool_ref == shape.pool_ref
                && common::ready_of(c).is_some_and(|(_, reason, _)| reason == "PoolExhausted")
        });
        if waits && used < total {
            wrong.push(format!(
                "a claim of {name} waits while {} of its units are free",
                total - used
            ));
        }
    }
    wrong
}

#[tokio::test]
async fn a_burst_on_overlapping_pools_of_every_shape_never_hands_out_space_twice() {
    let Scenario {
        _turn,
        kubeconfig,
        client,
        ns,
        mut moments,
        pools,
        claims,
    } = Scenario::start().await;
    // Global pools are cluster-scoped: named after the namespace, removed at the end.
    let (global_addresses, global_eights) = (format!("{ns}-addresses"), format!("{ns}-eights"));
    create(&pools, &pool("addresses", &["fd10::1-fd10::ff"], 120, None)).await;
    let prefix_pools: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), &ns);
    create(
        &prefix_pools,
        &InClusterPrefixPool::new("sixteens", prefix_spec("fd10::/120", 124)),
    )
    .await;
    create(
        &prefix_pools,
        &InClusterPrefixPool::new("fours", prefix_spec("fd10::/121", 126)),
    )
    .await;
    let global_ip_pools: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    create(
        &global_ip_pools,
        &global_pool(&global_addresses, &["fd10::80-fd10::ff"], 120),
    )
    .await;
    let global_prefix_pools: Api<GlobalInClusterPrefixPool> = Api::all(client.clone());
    create(
        &global_prefix_pools,
        &GlobalInClusterPrefixPool::new(
            &global_eights,
            GlobalInClusterPrefixPoolSpec(prefix_spec("fd10::80/121", 125)),
        ),
    )
    .await;
    let shapes = [
        ip_shape("InClusterIPPool", "addresses", &["fd10::1-fd10::ff"], 120),
        prefix_shape("InClusterPrefixPool", "sixteens", "fd10::/120", 124),
        prefix_shape("InClusterPrefixPool", "fours", "fd10::/121", 126),
        ip_shape(
            "GlobalInClusterIPPool",
            &global_addresses,
            &["fd10::80-fd10::ff"],
            120,
        ),
        prefix_shape(
            "GlobalInClusterPrefixPool",
            &global_eights,
            "fd10::80/121",
            125,
        ),
    ];

    // 24 claims on each pool, interleaved, paced; the provider is killed once in the middle.
    let mut provider = start_provider(&kubeconfig, &ns, "overlap-0");
    let burst = {
        let claims = claims.clone();
        let refs: Vec<IPPoolReference> = shapes.iter().map(|s| s.pool_ref.clone()).collect();
        tokio::spawn(async move {
            for i in 0..24 {
                for (p, pool_ref) in refs.iter().enumerate() {
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    let claim = claim_on(&format!("c{p}-{i:02}"), pool_ref.clone());
                    claims.create(&PostParams::default(), &claim).await.unwrap();
                }
            }
        })
    };
    tokio::time::sleep(moments.millis(500, 1500)).await;
    provider.kill();
    let mut provider = start_provider(&kubeconfig, &ns, "overlap-1");
    burst.await.unwrap();
    let burst_ended = Instant::now();
    assert_invariants(&client, &ns, &mut [&mut provider]).await;
    let settled = wait_explained_accounting(&client, &ns, &shapes).await;
    println!(
        "FAULTS overlap: 120 claims on 5 overlapping pools of 4 unit sizes, 1 SIGKILL; invariants and counts held {:.1}s after the burst",
        (settled - burst_ended).as_secs_f64()
    );

    // `kubectl inpool who-has` names the claim of a sub-prefix for an address inside it.
    let sixteen = Api::<IPAddress>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|a| a.spec.pool_ref.name == "sixteens")
        .expect("a sub-prefix of the /124 pool was handed out");
    let inside = match sixteen.spec.address.parse::<IpAddr>().unwrap() {
        IpAddr::V6(network) => IpAddr::V6(Ipv6Addr::from(u128::from(network) + 5)),
        IpAddr::V4(_) => unreachable!("IPv6 only"),
    };
    let holders = inpool::inspect::who_has(&client, inside).await.unwrap();
    assert!(
        holders
            .iter()
            .any(|h| h.claim == sixteen.spec.claim_ref.name && h.reservation.is_some()),
        "who-has {inside}: {holders:?}"
    );

    // Releases hand the space to the waiting claims of every shape, never twice.
    let realised: Vec<String> = claims
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| common::ready_of(c).is_some_and(|(status, _, _)| status == "True"))
        .map(|c| c.name_any())
        .collect();
    assert!(
        realised.len() > 5,
        "space was handed out: {} claims realised",
        realised.len()
    );
    let released: Vec<String> = realised.iter().step_by(2).cloned().collect();
    delete_claims_in_background(&claims, released)
        .await
        .unwrap();
    assert_invariants(&client, &ns, &mut [&mut provider]).await;
    wait_explained_accounting(&client, &ns, &shapes).await;

    let _ = global_ip_pools
        .delete(&global_addresses, &DeleteParams::default())
        .await;
    let _ = global_prefix_pools
        .delete(&global_eights, &DeleteParams::default())
        .await;
}

/// Waits until the pools' counts and queues agree with the live blocks (statuses are written a
/// moment after the addresses); fails with what is still wrong after 60 s.
async fn wait_explained_accounting(client: &Client, ns: &str, shapes: &[Shape]) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let wrong = accounting(client, ns, shapes).await;
        if wrong.is_empty() {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "the pools' accounting is still wrong after 60 s: {wrong:#?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[test]
fn units_are_counted_once_whatever_the_blocks() {
    let shape = prefix_shape("InClusterPrefixPool", "p", "fd10::/120", 124);
    let range = |first: &str, last: &str| {
        AddrRange::new(
            IpAddr::V6(first.parse::<Ipv6Addr>().unwrap()),
            IpAddr::V6(last.parse::<Ipv6Addr>().unwrap()),
        )
        .unwrap()
    };
    assert_eq!(units_used(&shape, &[range("fd10::", "fd10::1f")]), 2);
    assert_eq!(
        units_used(
            &shape,
            &[range("fd10::5", "fd10::5"), range("fd10::8", "fd10::b")]
        ),
        1
    );
    assert_eq!(units_used(&shape, &[range("fd11::", "fd11::")]), 0);
}
