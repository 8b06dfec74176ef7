//! Every invariant of the claims, addresses, reservations and pools of a namespace, checked at
//! once: no address held twice, none lost, no orphan `IPAddress` or reservation, no claim
//! `Ready=True` without its `IPAddress`, every claim has `Ready`, pool counts equal the live
//! `IPAddress`es; and, of the `inpool` processes that ran, that the audit found no drift and
//! none panicked.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

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

    // No address held twice.
    let mut holders: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for a in &live_addresses {
        holders
            .entry(&a.spec.address)
            .or_default()
            .push(a.name_any());
    }
    for (address, names) in holders.iter().filter(|(_, n)| n.len() > 1) {
        found.push(format!(
            "{address} is held by several IPAddresses: {names:?}"
        ));
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
    // Pool counts equal the live IPAddresses; nobody waits next to a free address.
    for p in &s.pools {
        let name = p.name_any();
        let used = live_addresses
            .iter()
            .filter(|a| a.spec.pool_ref.name == name)
            .count() as i64;
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
                "pool {name} counts {other:?}, but {used} IPAddresses are live"
            )),
        }
    }
    found
}

/// Waits until every invariant holds (the processes may still be recovering), then checks the
/// `inpool` processes: alive, no panic, audits ran and found no drift. Returns when the
/// invariants held.
pub async fn assert_invariants(
    client: &Client,
    ns: &str,
    processes: &mut [&mut Inpool],
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
        assert!(drift.is_empty(), "inpool {} found drift: {drift:?}", p.name);
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
