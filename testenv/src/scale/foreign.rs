//! The foreign-claims scenario: what claims of another IPAM provider cost inpool. N claims whose
//! `poolRef` names a kind inpool does not serve (metal3's `IPPool`) are created in the namespace
//! inpool watches, beside one pool of its own; then a sentinel claim of inpool's pool, created
//! after them, is waited for. The claim watch delivers events in the order the API server
//! stored them, so once the sentinel is Ready inpool has seen every foreign claim. Measured:
//! inpool's resident memory before and after, its claim reconciles and work-queue adds, what
//! its claim cache and registry hold (its own gauges), the API server's writes in the window,
//! and, object by object, whether anything of inpool's touches a foreign claim (finalizer,
//! status, a field manager, an `IPAddress`, a reservation or an Event). Then the same from a
//! restarted process, which lists every foreign claim at its start.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use inpool::api::{IPAM_GROUP, IPAddress, IPAddressClaim, InClusterIPPool, PoolKind};
use ipnet::IpNet;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::apimetrics::{self, RequestCounts};
use super::harness::{self, Retries};
use super::process::{self, ProviderProcess, ProviderSpec};

/// The pool kind the foreign claims name: metal3's, which inpool does not serve.
pub const FOREIGN_GROUP: &str = "ipam.metal3.io";
pub const FOREIGN_KIND: &str = "IPPool";
/// Label on every foreign claim.
const FOREIGN_LABEL: &str = "scale.inpool.dev/foreign";
/// inpool's pool, for the canary and the sentinels.
const POOL: &str = "own";

/// What a scenario measured from one inpool process.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Window {
    /// Resident memory before the foreign claims (the first process) or at its start, MiB.
    pub rss_before_mib: Option<f64>,
    /// Resident memory and peak (`VmHWM`) once every foreign claim was seen, MiB.
    pub rss_after_mib: Option<f64>,
    pub peak_after_mib: Option<f64>,
    /// `inpool_claims_watched` before and after: the claims in inpool's claim cache.
    pub claims_watched_before: Option<f64>,
    pub claims_watched_after: Option<f64>,
    /// `inpool_registry_entries`, all maps summed, before and after.
    pub registry_entries_before: Option<f64>,
    pub registry_entries_after: Option<f64>,
    /// Claim reconciles (`controller_runtime_reconcile_total{controller="ipaddressclaim"}`) and
    /// claims put on the work queue (`workqueue_adds_total{name="ipaddressclaim"}`) in the
    /// window: the sentinel's own.
    pub claim_reconciles: Option<f64>,
    pub queue_adds: Option<f64>,
    /// The API server's writes in the window, the harness's creates left out: the sentinel's own
    /// (finalizer, reservation, `IPAddress`, status, Event, pool status).
    pub writes: f64,
    pub writes_by: BTreeMap<String, f64>,
    /// inpool's CPU seconds in the window.
    pub cpu_seconds: Option<f64>,
}

/// The foreign-claims scenario's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ForeignRun {
    pub foreign_claims: usize,
    pub pool_kind: String,
    pub seconds_to_create: f64,
    /// The process that was running while the foreign claims were created.
    pub watching: Window,
    /// A new process started once they exist: it lists them all at its start. `rss_before_mib`
    /// is the first process's base, before any foreign claim.
    pub restarted: Option<Window>,
    /// Foreign claims that carry anything of inpool's: a finalizer, a status, or inpool's field
    /// manager.
    pub foreign_claims_touched: usize,
    /// `IPAddress`es, reservations and Events of foreign claims.
    pub foreign_addresses: usize,
    pub foreign_reservations: usize,
    pub foreign_events: usize,
    /// What the foreign claims cost inpool's resident memory, per claim, in bytes: the watching
    /// process's growth, and the restarted process's resident memory over the first one's base.
    pub bytes_per_claim_watching: Option<f64>,
    pub bytes_per_claim_restarted: Option<f64>,
}

/// The sum of every sample of `metric` whose labels include `label` (`name="value"`).
fn labelled_sum(page: &str, metric: &str, label: &str) -> Option<f64> {
    let mut found = None;
    for line in page.lines() {
        let Some(rest) = line.strip_prefix(metric) else {
            continue;
        };
        let Some(labels) = rest.strip_prefix('{').and_then(|r| r.split_once('}')) else {
            continue;
        };
        if !labels.0.split(',').any(|l| l == label) {
            continue;
        }
        if let Some(v) = labels
            .1
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// What the window compares, taken at one moment.
struct Reading {
    requests: RequestCounts,
    stat: Option<process::ProcStat>,
    page: Option<String>,
}

async fn read(client: &Client, process: &ProviderProcess) -> anyhow::Result<Reading> {
    Ok(Reading {
        requests: apimetrics::scrape(client).await?,
        stat: process.stat(),
        page: process::http_get_metrics(process.metrics_addr).await.ok(),
    })
}

impl Reading {
    fn metric(&self, metric: &str, label: Option<&str>) -> Option<f64> {
        let page = self.page.as_deref()?;
        match label {
            Some(label) => labelled_sum(page, metric, label),
            None => process::metric_sum(page, metric),
        }
    }
}

fn window(before: &Reading, after: &Reading, harness_creates: f64) -> Window {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let delta = after.requests.since(&before.requests);
    let mut writes_by = delta.writes_by_bucket();
    if let Some(c) = writes_by.get_mut("claims") {
        *c -= harness_creates;
    }
    writes_by.retain(|_, v| *v > 0.0);
    let change = |metric: &str, label: Option<&str>| {
        Some(after.metric(metric, label)? - before.metric(metric, label).unwrap_or(0.0))
    };
    Window {
        rss_before_mib: before.stat.map(|s| mib(s.rss_kib)),
        rss_after_mib: after.stat.map(|s| mib(s.rss_kib)),
        peak_after_mib: after.stat.map(|s| mib(s.hwm_kib)),
        claims_watched_before: before.metric("inpool_claims_watched", None),
        claims_watched_after: after.metric("inpool_claims_watched", None),
        registry_entries_before: before.metric("inpool_registry_entries", None),
        registry_entries_after: after.metric("inpool_registry_entries", None),
        claim_reconciles: change(
            "controller_runtime_reconcile_total",
            Some(r#"controller="ipaddressclaim""#),
        ),
        queue_adds: change("workqueue_adds_total", Some(r#"name="ipaddressclaim""#)),
        writes: delta.writes() - harness_creates,
        writes_by,
        cpu_seconds: after
            .stat
            .zip(before.stat)
            .map(|(a, b)| a.cpu_seconds - b.cpu_seconds),
    }
}

/// Creates an inpool claim named `name` of the scenario's pool and waits until it is Ready.
async fn realise_sentinel(
    claims: &Api<IPAddressClaim>,
    name: &str,
    process: &mut ProviderProcess,
) -> anyhow::Result<()> {
    let claim = harness::claim_object(name, IPAM_GROUP, PoolKind::InCluster.name(), POOL, false);
    claims
        .create(&PostParams::default(), &claim)
        .await
        .with_context(|| format!("creating claim {name}"))?;
    let started = Instant::now();
    loop {
        if harness::ready_ref(&claims.get(name).await?).is_some() {
            return Ok(());
        }
        if let Some(why) = process.exited() {
            bail!(
                "the provider exited ({why}) before claim {name} was Ready; log:\n{}",
                process.log_tail(30)
            );
        }
        if started.elapsed() > Duration::from_secs(1800) {
            bail!("claim {name} was not Ready within 1800 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One run of the scenario.
#[derive(Clone, Copy)]
pub struct Setup<'a> {
    pub kubeconfig: &'a Path,
    pub provider: &'a ProviderSpec,
    /// Created for the run, and deleted at its end.
    pub namespace: &'a str,
    pub foreign_claims: usize,
    /// Claims created at once, and the provider's `{concurrency}`.
    pub concurrency: usize,
    /// Where the provider's logs go.
    pub log_dir: &'a Path,
}

/// Runs the scenario against a fresh provider process.
pub async fn run(client: &Client, setup: Setup<'_>) -> anyhow::Result<ForeignRun> {
    let Setup {
        kubeconfig,
        provider,
        namespace,
        concurrency,
        log_dir,
        ..
    } = setup;
    if !provider.is_inpool {
        bail!("the foreign-claims scenario reads inpool's own metrics: inpool only");
    }
    harness::create_namespace(client, namespace).await?;
    let net: IpNet = "10.0.0.0/16".parse().expect("valid CIDR");
    harness::create_ip_pool(client, namespace, POOL, &net).await?;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), namespace);
    let log = log_dir.join(format!("{}-foreign.log", provider.name));
    let mut process = ProviderProcess::start(provider, kubeconfig, namespace, concurrency, &log)?;
    eprintln!(
        "{} / foreign: started `{}` (pid {}, log {})",
        provider.name,
        process.command_line,
        process.pid,
        log.display()
    );
    let result = measure(client, setup, &claims, &mut process).await;
    // Own claims and the pool go while a provider runs (it releases their finalizers), then
    // everything.
    let dp = DeleteParams::default();
    let foreign = ListParams::default().labels(&format!("{FOREIGN_LABEL}=true"));
    let _ = claims.delete_collection(&dp, &foreign).await;
    for name in ["canary", "sentinel-1", "sentinel-2"] {
        let _ = claims.delete(name, &dp).await;
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    let any = ListParams::default().limit(1);
    while !claims.list_metadata(&any).await?.items.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), namespace);
    let _ = pools.delete(POOL, &dp).await;
    while pools.get_opt(POOL).await?.is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = process.stop().await;
    let deleted =
        harness::delete_namespace(client, namespace, Some(Duration::from_secs(600))).await;
    match (result, deleted) {
        (Ok(run), Err(e)) => {
            eprintln!("  warning: {e:#}");
            Ok(run)
        }
        (result, _) => result,
    }
}

async fn measure(
    client: &Client,
    setup: Setup<'_>,
    claims: &Api<IPAddressClaim>,
    process: &mut ProviderProcess,
) -> anyhow::Result<ForeignRun> {
    let Setup {
        kubeconfig,
        provider,
        namespace,
        foreign_claims,
        concurrency,
        log_dir,
    } = setup;
    realise_sentinel(claims, "canary", process).await?;
    harness::wait_quiet(client, "foreign").await?;
    let before = read(client, process).await?;

    eprintln!("  creating {foreign_claims} claims of {FOREIGN_GROUP} {FOREIGN_KIND}");
    let t0 = Instant::now();
    let retries = Retries::default();
    harness::create_claims(
        claims,
        foreign_claims,
        concurrency,
        &retries,
        |i| {
            let mut claim = harness::claim_object(
                &format!("f-{i:06}"),
                FOREIGN_GROUP,
                FOREIGN_KIND,
                "metal3-pool",
                false,
            );
            claim.metadata.labels = Some([(FOREIGN_LABEL.to_string(), "true".to_string())].into());
            claim
        },
        |_, _, _| {},
    )
    .await?;
    let seconds_to_create = t0.elapsed().as_secs_f64();
    // Stored after every foreign claim: once it is Ready, inpool's watch has delivered them all.
    realise_sentinel(claims, "sentinel-1", process).await?;
    harness::wait_quiet(client, "foreign").await?;
    let after = read(client, process).await?;
    let watching = window(&before, &after, foreign_claims as f64 + 1.0);
    let per_claim = |from: Option<f64>, to: Option<f64>| {
        Some((to? - from?) * 1024.0 * 1024.0 / foreign_claims.max(1) as f64)
    };
    let bytes_per_claim_watching = per_claim(watching.rss_before_mib, watching.rss_after_mib);
    eprintln!(
        "  watching: RSS {:?} → {:?} MiB, claim reconciles {:?}, writes {:.0}",
        watching.rss_before_mib, watching.rss_after_mib, watching.claim_reconciles, watching.writes
    );

    // A new process lists every foreign claim at its start.
    let base = watching.rss_before_mib;
    process.signal_and_wait(process::StopSignal::Term).await?;
    let log = log_dir.join(format!("{}-foreign-restarted.log", provider.name));
    *process = ProviderProcess::start(provider, kubeconfig, namespace, concurrency, &log)?;
    let started = read(client, process).await?;
    // The claim runtime reconciles only once its first list is complete: the sentinel's Ready
    // says the list of every foreign claim is done.
    realise_sentinel(claims, "sentinel-2", process).await?;
    harness::wait_quiet(client, "foreign, restarted").await?;
    let restarted_after = read(client, process).await?;
    let mut restarted = window(&started, &restarted_after, 1.0);
    restarted.rss_before_mib = base;
    let bytes_per_claim_restarted = per_claim(base, restarted.rss_after_mib);
    eprintln!(
        "  restarted: RSS {:?} MiB (peak {:?}) against a base of {base:?}, claims watched {:?}",
        restarted.rss_after_mib, restarted.peak_after_mib, restarted.claims_watched_after
    );

    // Object by object: nothing of inpool's on or for a foreign claim.
    let foreign = ListParams::default().labels(&format!("{FOREIGN_LABEL}=true"));
    let listed = harness::list_paged(claims, &foreign).await?;
    if listed.len() != foreign_claims {
        bail!(
            "{} foreign claims exist, {foreign_claims} were created",
            listed.len()
        );
    }
    let touched = listed
        .iter()
        .filter(|c| {
            !c.finalizers().is_empty()
                || c.status.is_some()
                || c.managed_fields()
                    .iter()
                    .any(|m| m.manager.as_deref() == Some("inpool"))
        })
        .count();
    let is_foreign = |name: &str| name.starts_with("f-");
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), namespace);
    let foreign_addresses = harness::list_paged(&addresses, &ListParams::default())
        .await?
        .iter()
        .filter(|a| is_foreign(&a.spec.claim_ref.name))
        .count();
    let foreign_reservations = harness::reservations_of(client, namespace)
        .await?
        .iter()
        .filter(|r| is_foreign(&r.spec.claim_name))
        .count();
    let events: Api<KubeEvent> = Api::namespaced(client.clone(), namespace);
    let foreign_events = harness::list_paged(&events, &ListParams::default())
        .await?
        .iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .and_then(|r| r.name.as_deref())
                .is_some_and(is_foreign)
        })
        .count();
    Ok(ForeignRun {
        foreign_claims,
        pool_kind: format!("{FOREIGN_GROUP} {FOREIGN_KIND}"),
        seconds_to_create,
        watching,
        restarted: Some(restarted),
        foreign_claims_touched: touched,
        foreign_addresses,
        foreign_reservations,
        foreign_events,
        bytes_per_claim_watching,
        bytes_per_claim_restarted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_labelled_sum_adds_the_samples_with_that_label() {
        let page = "controller_runtime_reconcile_total{controller=\"claim\",result=\"success\"} 3\n\
                    controller_runtime_reconcile_total{result=\"error\",controller=\"claim\"} 1\n\
                    controller_runtime_reconcile_total{controller=\"pool\",result=\"success\"} 7\n";
        let sum = |label| labelled_sum(page, "controller_runtime_reconcile_total", label);
        assert_eq!(sum(r#"controller="claim""#), Some(4.0));
        assert_eq!(sum(r#"controller="other""#), None);
    }
}
