//! Waits: one poll loop, [`wait_for`], and the waits on claims built on it.

use std::collections::BTreeMap;
use std::time::Duration;

use inpool::api::IPAddressClaim;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};

use super::reads::{ready_of, reasons};

/// Polls `check` every 100 ms until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_explained(what, timeout, check, String::new).await
}

/// [`wait_for`], whose panic adds what `explain` says then (the end of a process's log, say).
pub async fn wait_explained<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
    explain: impl FnOnce() -> String,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}{}",
                explain()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the object `name` is gone (deleted, finalizers done).
pub async fn wait_gone<K>(api: &Api<K>, name: &str, timeout: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} to be gone"), timeout, || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// Deletes the object `name` and waits, 30 s at most, until it is gone (its finalizers done: for
/// a claim, its address released).
pub async fn delete_and_wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
    wait_gone(api, name, Duration::from_secs(30)).await;
}

/// Waits until the claim's `Ready` condition has `reason`; returns the claim.
pub async fn wait_reason(claims: &Api<IPAddressClaim>, name: &str, reason: &str) -> IPAddressClaim {
    wait_for(
        &format!("claim {name} to be {reason}"),
        Duration::from_secs(60),
        || async {
            let claim = claims.get(name).await.ok()?;
            let (_, r, _) = ready_of(&claim)?;
            (r == reason).then_some(claim)
        },
    )
    .await
}

/// Waits until exactly `allocated` claims are realised and `exhausted` wait; on a timeout the
/// panic shows the reasons and a few claims that are not realised.
pub async fn wait_counts(claims: &Api<IPAddressClaim>, allocated: usize, exhausted: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let r = reasons(claims).await;
        let a = r.values().filter(|v| *v == "AddressAllocated").count();
        let e = r.values().filter(|v| *v == "PoolExhausted").count();
        if a == allocated && e == exhausted {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let mut histogram: BTreeMap<&String, usize> = BTreeMap::new();
            for v in r.values() {
                *histogram.entry(v).or_default() += 1;
            }
            let list = claims.list(&ListParams::default()).await.unwrap().items;
            let stuck: Vec<String> = list
                .iter()
                .filter_map(|c| {
                    let ready = c.conditions().iter().find(|x| x.type_ == "Ready")?;
                    (ready.reason != "AddressAllocated").then(|| {
                        format!(
                            "{} ({}): {}",
                            c.name_any(),
                            c.spec.pool_ref.name,
                            ready.message
                        )
                    })
                })
                .take(5)
                .collect();
            panic!(
                "wanted {allocated} allocated and {exhausted} exhausted; reasons: {histogram:?} of {} claims; e.g. {stuck:?}",
                r.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
