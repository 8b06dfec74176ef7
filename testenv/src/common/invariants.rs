//! Every invariant of the claims, addresses, reservations and pools of a namespace, checked at
//! once: no address held twice, none lost, no orphan `IPAddress` or reservation, no claim
//! `Ready=True` without its `IPAddress`, every claim has `Ready`, pool counts equal the live
//! `IPAddress`es; and, of the `inpool` processes that ran, that the audit found no drift and
//! none panicked.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use inpool::allocator::{AddrRange, AddressSet, Family, Subnet};
use inpool::api::reservation::IPAddressReservation;
use inpool::api::{IPAddress, IPAddressClaim, InClusterIPPool};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::process::Inpool;
use super::reads::{nonzero_samples, ready_of};

/// Everything the checker reads, in one consistent-enough snapshot.
pub struct Snapshot {
    pub claims: Vec<IPAddressClaim>,
    pub addresses: Vec<IPAddress>,
    pub reservations: Vec<IPAddressReservation>,
    pub pools: Vec<InClusterIPPool>,
}

/// The claims, addresses, pools of `ns` and the reservations for its claims (`None` if a list
/// fails, e.g. while the API server restarts).
pub async fn snapshot(client: &Client, ns: &str) -> Option<Snapshot> {
    let all = ListParams::default();
    Some(Snapshot {
        claims: Api::<IPAddressClaim>::namespaced(client.clone(), ns)
            .list(&all)
            .await
            .ok()?
            .items,
        addresses: Api::<IPAddress>::namespaced(client.clone(), ns)
            .list(&all)
            .await
            .ok()?
            .items,
        reservations: Api::<IPAddressReservation>::all(client.clone())
            .list(&all)
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|r| r.spec.claim_namespace == ns)
            .collect(),
        pools: Api::<InClusterIPPool>::namespaced(client.clone(), ns)
            .list(&all)
            .await
            .ok()?
            .items,
    })
}

/// Every invariant that does not hold, in words (empty: all hold).
pub fn violations(s: &Snapshot) -> Vec<String> {
    let mut found = Vec::new();
    let claims: BTreeMap<String, &IPAddressClaim> =
        s.claims.iter().map(|c| (c.name_any(), c)).collect();
    let live_addresses: Vec<&IPAddress> = s
        .addresses
        .iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
        .collect();
    let address_of: BTreeMap<String, &IPAddress> =
        live_addresses.iter().map(|a| (a.name_any(), *a)).collect();

    // No address held twice: no two live IPAddresses' blocks (an address, or a prefix pool's
    // sub-prefix) share an address, whatever the shapes of their pools, except down a chain of
    // pools carved from a parent (see `nests`). Sorted by first address, the larger block first,
    // each block is checked against every open block that contains it.
    let mut blocks: Vec<Held> = live_addresses.iter().filter_map(|a| Held::of(a)).collect();
    // Of two equal blocks, a claim on a parent's first: it is the one that may hold the other.
    blocks.sort_by_key(|b| {
        (
            b.block.family(),
            b.block.first(),
            std::cmp::Reverse(b.block.len()),
            b.carves_for.is_none(),
        )
    });
    let mut open: Vec<&Held> = Vec::new();
    for held in &blocks {
        open.retain(|outer| {
            outer.block.family() == held.block.family() && outer.block.contains(held.block.first())
        });
        for outer in &open {
            if !nests(outer, held, &blocks) {
                found.push(format!(
                    "{} of IPAddress {} and {} of IPAddress {} share addresses",
                    outer.block, outer.name, held.block, held.name
                ));
            }
        }
        open.push(held);
    }
    // A pool carved from a parent hands out nothing outside the sub-prefixes held for it (a
    // sub-prefix let go stays held while an address of it is out), and lives as long as its
    // claims on the parent (their owner): no sub-prefix stays held for a pool that is gone.
    for a in &live_addresses {
        let Some(pool) = s.pools.iter().find(|p| {
            a.spec.pool_ref.kind == "InClusterIPPool" && p.name_any() == a.spec.pool_ref.name
        }) else {
            continue;
        };
        let Ok(ip) = a.spec.address.parse::<IpAddr>() else {
            continue;
        };
        let pool_key = ("InClusterIPPool".to_string(), pool.name_any());
        let inside = range_of(pool).is_some_and(|range| range.contains(ip))
            || blocks
                .iter()
                .any(|b| b.carves_for.as_ref() == Some(&pool_key) && b.block.contains(ip));
        if pool.spec.parent_pool.is_some() && !inside {
            found.push(format!(
                "IPAddress {} ({}) lies outside what its carved pool {} holds",
                a.name_any(),
                a.spec.address,
                pool.name_any()
            ));
        }
    }
    for held in &blocks {
        if let Some((kind, pool)) = &held.carves_for
            && kind == "InClusterIPPool"
            && !s.pools.iter().any(|p| p.name_any() == *pool)
        {
            found.push(format!(
                "IPAddress {} holds {} for pool {pool}, which is gone",
                held.name, held.block
            ));
        }
    }
    // Every claim has Ready; Ready=True only with its IPAddress.
    for (name, c) in &claims {
        if c.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match ready_of(c) {
            None => found.push(format!("claim {name} has no Ready condition")),
            Some((status, _, address_ref)) if status == "True" => {
                match (address_ref, address_of.get(name)) {
                    (Some(r), Some(a)) if r == *name && a.spec.claim_ref.name == *name => {}
                    (r, a) => found.push(format!(
                        "claim {name} is Ready=True with addressRef {r:?} but its IPAddress is {:?}",
                        a.map(|a| &a.spec.address)
                    )),
                }
            }
            Some(_) => {}
        }
    }
    // No orphan IPAddress: its claim exists and is the one it was made for.
    for a in &live_addresses {
        let owner_uid = a
            .owner_references()
            .iter()
            .find(|o| o.kind == "IPAddressClaim")
            .map(|o| o.uid.clone());
        match claims.get(&a.spec.claim_ref.name) {
            Some(c) if c.uid() == owner_uid => {}
            _ => found.push(format!("IPAddress {} has no claim", a.name_any())),
        }
    }
    // Reservations and IPAddresses match one to one (no stray, none missing).
    let reserved: BTreeSet<(String, String)> = s
        .reservations
        .iter()
        .filter(|r| !r.is_released())
        .map(|r| (r.spec.claim_name.clone(), r.spec.address.clone()))
        .collect();
    let held: BTreeSet<(String, String)> = live_addresses
        .iter()
        .map(|a| (a.spec.claim_ref.name.clone(), a.spec.address.clone()))
        .collect();
    for stray in reserved.difference(&held) {
        found.push(format!("reservation without its IPAddress: {stray:?}"));
    }
    for unreserved in held.difference(&reserved) {
        found.push(format!("IPAddress without its reservation: {unreserved:?}"));
    }
    // Pool counts equal the addresses the live IPAddresses use: the pool's own (out of range
    // ones included), and those of its range inside a block of an overlapping pool, plus the
    // addresses entries of spec.preAllocations keep; nobody waits next to a free address.
    let kept = pre_allocated(&s.pools);
    for p in &s.pools {
        let name = p.name_any();
        let used = used_in_pool(p, &live_addresses, &blocks, &kept);
        let counts = p.status.as_ref().and_then(|s| s.ip_addresses.as_ref());
        match counts {
            Some(c) if c.used == used && c.free + c.used - c.out_of_range == c.total => {
                let waiting = s.claims.iter().any(|c| {
                    c.spec.pool_ref.name == name
                        && ready_of(c).is_some_and(|(_, reason, _)| reason == "PoolExhausted")
                });
                if waiting && c.free > 0 {
                    found.push(format!(
                        "pool {name} has {} free addresses while claims wait",
                        c.free
                    ));
                }
            }
            other => found.push(format!(
                "pool {name} counts {other:?}, but the live IPAddresses use {used} of its addresses"
            )),
        }
    }
    found
}

/// A live `IPAddress` as the uniqueness check reads it.
struct Held {
    name: String,
    block: AddrRange,
    /// The pool (kind, name) it is held in.
    pool: (String, String),
    /// The pool (kind, name) its claim carves for, when it is a claim on a parent.
    carves_for: Option<(String, String)>,
}

impl Held {
    fn of(address: &IPAddress) -> Option<Held> {
        let name = address.name_any();
        let carves_for = inpool::api::carve::carving_pool(&inpool::api::ObjectKey::new(
            &address.namespace().unwrap_or_default(),
            &name,
        ))
        .map(|(pool, _)| (pool.kind.name().to_string(), pool.name.to_string()));
        Some(Held {
            block: block_of(address)?,
            pool: (
                address.spec.pool_ref.kind.clone(),
                address.spec.pool_ref.name.clone(),
            ),
            carves_for,
            name,
        })
    }
}

/// Whether `inner` may lie inside `outer`: `outer` is a sub-prefix held for a pool carved from a
/// parent, and `inner` is held in that pool, or inside a sub-prefix that pool carved in turn for
/// another, and so on down the chain (a /56 of a /48, a /64 of that /56, an address of the /64).
fn nests(outer: &Held, inner: &Held, blocks: &[Held]) -> bool {
    let Some(carved_for) = &outer.carves_for else {
        return false;
    };
    let mut current = inner;
    for _ in 0..blocks.len() {
        if current.pool == *carved_for {
            return true;
        }
        // The block held for the pool `current` is in, around it: one step up the chain.
        let Some(up) = blocks.iter().find(|b| {
            b.carves_for.as_ref() == Some(&current.pool)
                && b.block.contains(current.block.first())
                && b.name != current.name
        }) else {
            return false;
        };
        current = up;
    }
    false
}

/// The addresses an `IPAddress` holds: its sub-prefix for a prefix pool, else its address.
pub fn block_of(address: &IPAddress) -> Option<AddrRange> {
    let ip: IpAddr = address.spec.address.parse().ok()?;
    let length = if address.spec.pool_ref.kind.contains("Prefix") {
        u8::try_from(address.spec.prefix).ok()?
    } else {
        Family::of(ip).bits()
    };
    Some(Subnet::containing(ip, length)?.range())
}

/// The addresses the namespaced IP pool `pool` hands out (the union of its subnets, those it
/// carved from a parent included), if its spec parses, read as inpool reads it.
fn range_of(pool: &InClusterIPPool) -> Option<AddressSet> {
    let spec = inpool::api::PoolSpecRef::Addresses(&pool.spec);
    let namespace = pool.metadata.namespace.as_deref();
    match inpool::controllers::parse_pool(spec, pool.status.as_ref(), namespace).ok()? {
        inpool::allocator::ParsedSpec::Addresses(parsed) => Some(parsed.allocatable().clone()),
        inpool::allocator::ParsedSpec::Prefixes(_) => None,
    }
}

/// Every address an entry of `spec.preAllocations` keeps, over the namespace's pools: an entry's
/// address inside its own pool's range (outside it, it is no address of any pool).
fn pre_allocated(pools: &[InClusterIPPool]) -> Vec<AddrRange> {
    pools
        .iter()
        .filter_map(|pool| Some((range_of(pool)?, pool)))
        .flat_map(|(range, pool)| {
            pool.spec
                .pre_allocations
                .iter()
                .flatten()
                .filter_map(|entry| entry.address.parse::<IpAddr>().ok())
                .filter(move |ip| range.contains(*ip))
                .map(AddrRange::single)
        })
        .collect()
}

/// How many addresses of the namespaced IP pool `pool` are in use: its own `IPAddress`es
/// outside its range, and every address of its range inside one of `blocks` or kept by an entry
/// of `pre_allocated` (its own pool's or an overlapping one's: kept, held or not).
fn used_in_pool(
    pool: &InClusterIPPool,
    own: &[&IPAddress],
    blocks: &[Held],
    pre_allocated: &[AddrRange],
) -> i64 {
    let name = pool.name_any();
    let Some(range) = range_of(pool) else {
        return -1;
    };
    // A hold that covers a whole subnet carved for the pool is its parent's (or an ancestor's):
    // it gives the pool those addresses, it uses none of them.
    let carved: Vec<AddrRange> = pool
        .status
        .iter()
        .flat_map(|s| s.carved_prefixes.iter().flatten())
        .filter_map(|c| inpool::allocator::parse_network(&c.prefix).ok())
        .map(|subnet| subnet.range())
        .collect();
    let covered = AddressSet::from_ranges(
        range.family(),
        blocks
            .iter()
            .map(|held| held.block)
            .filter(|block| !carved.iter().any(|c| block.contains_range(*c)))
            .chain(pre_allocated.iter().copied())
            .filter(|block| block.family() == range.family()),
    )
    .map_or(0, |covered| range.intersection(&covered).len());
    let outside = own
        .iter()
        .filter(|a| a.spec.pool_ref.name == name && a.spec.pool_ref.kind == "InClusterIPPool")
        .filter(|a| a.spec.address.parse().is_ok_and(|ip| !range.contains(ip)))
        .count();
    i64::try_from(covered).unwrap_or(i64::MAX) + outside as i64
}

/// Waits until every invariant holds (the processes may still be recovering), then checks the
/// `inpool` processes: alive, no panic, audits ran and found no drift. Returns when the
/// invariants held.
pub async fn assert_invariants(
    client: &Client,
    ns: &str,
    processes: &mut [&mut Inpool],
) -> Instant {
    assert_invariants_beyond(client, ns, processes, &[]).await
}

/// [`assert_invariants`], where the drift samples of `explained` (lines of
/// `inpool_state_drift_total`, counts included) were found before and have a cause the test
/// states: the audit may have found them, and nothing more.
pub async fn assert_invariants_beyond(
    client: &Client,
    ns: &str,
    processes: &mut [&mut Inpool],
    explained: &[String],
) -> Instant {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    let mut last = Vec::new();
    loop {
        if let Some(s) = snapshot(client, ns).await {
            last = violations(&s);
            if last.is_empty() {
                break;
            }
        }
        if Instant::now() > deadline {
            for p in processes.iter() {
                eprintln!("--- log of inpool {}:\n{}", p.name, tail(&p.logs(), 60));
            }
            panic!("invariants still broken after 120 s: {last:#?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let held = Instant::now();
    for p in processes.iter_mut() {
        p.assert_healthy();
        // Let one more audit run on the settled state, then read its verdict.
        let audits = audits(p).await;
        let wait_until = Instant::now() + Duration::from_secs(30);
        while self::audits(p).await <= audits && Instant::now() < wait_until {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(
            self::audits(p).await > audits,
            "inpool {} ran no audit",
            p.name
        );
        let drift = nonzero_samples(
            &p.metrics().await.unwrap_or_default(),
            "inpool_state_drift_total",
        );
        let unexplained: Vec<&String> = drift.iter().filter(|d| !explained.contains(d)).collect();
        assert!(
            unexplained.is_empty(),
            "inpool {} found drift: {drift:?} (explained: {explained:?})",
            p.name
        );
    }
    held
}

/// `inpool_audits_total` of a process (0 when it does not answer).
async fn audits(p: &Inpool) -> f64 {
    p.sample("inpool_audits_total").await.unwrap_or(0.0)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A live `IPAddress` `name` of `address`/`prefix` from the pool `kind`/`pool`.
    fn address(name: &str, address: &str, prefix: i32, kind: &str, pool: &str) -> IPAddress {
        serde_json::from_value(json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"address": address, "prefix": prefix,
                "claimRef": {"name": name},
                "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": kind, "name": pool}},
        }))
        .unwrap()
    }

    fn shared(addresses: Vec<IPAddress>) -> Vec<String> {
        let snapshot = Snapshot {
            claims: Vec::new(),
            addresses,
            reservations: Vec::new(),
            pools: Vec::new(),
        };
        violations(&snapshot)
            .into_iter()
            .filter(|v| v.contains("share addresses"))
            .collect()
    }

    #[test]
    fn an_address_inside_a_carved_sub_prefix_is_shared_only_down_its_chain() {
        let parent = "InClusterPrefixPool";
        // A /56 held for the prefix pool `site`, a /64 of it held by `site` for the IP pool
        // `rack`, and an address of `rack` at the very start of both.
        let chain = || {
            vec![
                address("icpp-site-0", "fd00:10::", 56, parent, "region"),
                address("icipp-rack-0", "fd00:10::", 64, parent, "site"),
                address("host", "fd00:10::", 128, "InClusterIPPool", "rack"),
            ]
        };
        assert_eq!(shared(chain()), Vec::<String>::new());
        // An address of another pool inside the /64: held twice.
        let mut planted = chain();
        planted.push(address(
            "other",
            "fd00:10::5",
            128,
            "InClusterIPPool",
            "elsewhere",
        ));
        assert_eq!(shared(planted).len(), 2, "inside the /56 and the /64");
        // A block of an ordinary claim on the parent gives nothing to anyone.
        let ordinary = vec![
            address("machine", "10.0.0.0", 28, parent, "nodes"),
            address("icipp-a-0", "10.0.0.0", 28, parent, "nodes"),
        ];
        assert_eq!(shared(ordinary).len(), 1);
    }
}
