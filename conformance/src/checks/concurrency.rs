//! The concurrency profile: a burst of claims, and churn, never share an address.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::future::join_all;
use kube::ResourceExt;
use kube::api::{DynamicObject, ListParams};

use crate::harness::*;
use crate::profiles::Profile;
use crate::report::CheckReport;

pub async fn run(sc: &Scenario<'_>) -> Vec<CheckReport> {
    let mut out = Checks::new(Profile::Concurrency);
    out.push(burst(sc).await);
    out.push(churn(sc).await);
    out.finish(None)
}

async fn burst(sc: &Scenario<'_>) -> CheckReport {
    let n = sc.suite.config.burst as u32;
    let mut check = Check::new("concurrency-burst");
    let result = async {
        let pool = sc.pool("burst", n, n).await?;
        let keys: Vec<String> = (0..n).map(|i| format!("b{i:03}")).collect();
        let started = Instant::now();
        for created in join_all(keys.iter().map(|k| sc.claim(k, &pool.name))).await {
            created?;
        }
        let names: Vec<String> = keys.iter().map(|k| sc.name(k)).collect();
        let held = settle(sc, &pool, &names, n as usize, &mut check).await?;
        check.timing("allRealisedSeconds", started.elapsed());
        Ok::<_, Failed>(format!(
            "{n} claims created at once got {} distinct addresses of the pool in {:.1}s",
            held.len(),
            started.elapsed().as_secs_f64()
        ))
    }
    .await;
    check.end(result)
}

/// Waits until `expected` of the live claims `names` are realised with distinct addresses of
/// `pool` and the others have no `addressRef`; returns the addresses by claim.
async fn settle(
    sc: &Scenario<'_>,
    pool: &Pool,
    names: &[String],
    expected: usize,
    check: &mut Check,
) -> Result<BTreeMap<String, IpAddr>, Failed> {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < sc.suite.act() {
        let claims = sc.all_claims().await?;
        let live: Vec<&DynamicObject> = claims
            .iter()
            .filter(|c| names.contains(&c.name_any()) && c.metadata.deletion_timestamp.is_none())
            .collect();
        let addresses: BTreeMap<String, DynamicObject> = sc
            .all_addresses()
            .await?
            .into_iter()
            .map(|a| (a.name_any(), a))
            .collect();
        let mut held = BTreeMap::new();
        for claim in &live {
            if let Some(address) = address_ref(claim).and_then(|r| addresses.get(&r)) {
                held.insert(claim.name_any(), in_pool(pool, address)?);
            }
        }
        let distinct: BTreeSet<&IpAddr> = held.values().collect();
        if distinct.len() != held.len() {
            return Err(format!("two claims hold one address: {held:?}"));
        }
        if held.len() == expected {
            return Ok(held);
        }
        let waiting: Vec<String> = live
            .iter()
            .filter(|c| !held.contains_key(&c.name_any()))
            .map(|c| format!("{} ({})", c.name_any(), claim_state(c)))
            .collect();
        last = format!(
            "{} of {} live claims realised, {expected} expected; not realised: {}",
            held.len(),
            live.len(),
            waiting.join("; ")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    check.note(&last);
    Err(format!(
        "not settled within {}s: {last}",
        sc.suite.act().as_secs()
    ))
}

async fn churn(sc: &Scenario<'_>) -> CheckReport {
    const SIZE: u32 = 8;
    const ROUNDS: usize = 4;
    const CREATE: usize = 6;
    const DELETE: usize = 4;
    let mut check = Check::new("concurrency-churn");
    let result = async {
        let pool = sc.pool("churn", SIZE, SIZE).await?;
        // Every 200 ms, all IPAddresses of the pool (terminating ones too) must hold distinct
        // addresses.
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let addresses = sc.suite.addresses.clone();
            let pool_name = pool.name.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut samples = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(list) = addresses.list(&ListParams::default()).await {
                        samples += 1;
                        let mut by_ip: BTreeMap<String, Vec<DynamicObject>> = BTreeMap::new();
                        for a in list.items {
                            if a.data["spec"]["poolRef"]["name"].as_str() == Some(&pool_name) {
                                let ip = a.data["spec"]["address"]
                                    .as_str()
                                    .and_then(|s| s.parse::<IpAddr>().ok())
                                    .map(|ip| ip.to_string())
                                    .unwrap_or_default();
                                by_ip.entry(ip).or_default().push(a);
                            }
                        }
                        if let Some((_, twins)) = by_ip.into_iter().find(|(_, v)| v.len() > 1) {
                            return Err((samples, twins));
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(samples)
            })
        };
        let started = Instant::now();
        let mut names: Vec<String> = Vec::new();
        let mut deleted = 0;
        let mut outcome = Ok(());
        for round in 0..ROUNDS {
            let realised: Vec<String> = sc
                .all_claims()
                .await?
                .iter()
                .filter(|c| names.contains(&c.name_any()) && address_ref(c).is_some())
                .map(|c| c.name_any())
                .take(DELETE)
                .collect();
            let keys: Vec<String> = (0..CREATE).map(|i| format!("r{round}-{i}")).collect();
            let creates = join_all(keys.iter().map(|k| sc.claim(k, &pool.name)));
            let deletes = join_all(realised.iter().map(|n| sc.delete(&sc.suite.claims, n)));
            let (created, removed) = tokio::join!(creates, deletes);
            for r in created {
                r?;
            }
            for r in removed {
                r?;
            }
            deleted += realised.len();
            names.retain(|n| !realised.contains(n));
            names.extend(keys.iter().map(|k| sc.name(k)));
            let expected = names.len().min(SIZE as usize);
            if let Err(e) = settle(sc, &pool, &names, expected, &mut check).await {
                outcome = Err(format!("round {}: {e}", round + 1));
                break;
            }
        }
        stop.store(true, Ordering::SeqCst);
        let samples = match sampler.await {
            Ok(Ok(samples)) => samples,
            Ok(Err((samples, twins))) => {
                for twin in &twins {
                    check.saw("IPAddresses of one pool holding one address", twin);
                }
                return Err(format!(
                    "sample {samples}: {} IPAddresses hold {}",
                    twins.len(),
                    twins[0].data["spec"]["address"]
                ));
            }
            Err(e) => return Err(format!("the sampler failed: {e}")),
        };
        outcome?;
        check.timing("churnSeconds", started.elapsed());
        Ok(format!(
            "{ROUNDS} rounds of {CREATE} claims created while {DELETE} realised ones were deleted \
             ({deleted} deletions, {} claims live at the end, pool of {SIZE}): no address held \
             twice in {samples} samples of the pool's IPAddresses; every round settled with \
             min(live, {SIZE}) realised",
            names.len()
        ))
    }
    .await;
    check.end(result)
}
