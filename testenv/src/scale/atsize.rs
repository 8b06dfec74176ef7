//! The scenarios at size (restart, idle, trickle), run on a single-pool scenario once its N claims
//! are Ready, with the provider that realised them:
//!
//! - **restart**: the provider is stopped and a new process started, twice. The first new
//!   process only catches up (nothing changes meanwhile): time to `/readyz`, API writes and reads
//!   while it catches up, reconciles of the existing claims (inpool's
//!   `inpool_reconciles_total{controller="claim"}`), its CPU and peak memory. The second is given
//!   one new claim as soon as it is spawned: time until that claim is Ready. Two processes,
//!   so that the new claim's own writes are not counted as catch-up writes.
//! - **idle**: nothing changes for a window; API requests (by verb and resource), CPU, memory,
//!   and the audits and reconciles the provider ran in it.
//! - **trickle**: claims created one at a time, each once the previous one is Ready: claim →
//!   Ready latency against the API server's round trip for a claim create (the writes a claim
//!   needs cost about that much each).
//!
//! The extra claims (the restart probe, the trickle) carry `scale.inpool.dev/claim=extra`, so the
//! scenario's own checks do not count them; they are deleted, and their objects waited for, before
//! the scenario's end-state check.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use inpool::api::{IPAM_GROUP, IPAddress, IPAddressClaim, PoolKind};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::apimetrics::{self, RequestCounts};
use super::harness::{self, CLAIM_LABEL, Latency, ReadyTracker, Scenario};
use super::process::{self, ProviderProcess, ProviderSpec, StopSignal};

/// Value of [`CLAIM_LABEL`] on the claims these scenarios add.
pub const EXTRA: &str = "extra";

/// Which scenarios at size (restart, idle, trickle) to run after the claims are Ready (none by
/// default).
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Restart the provider, stopping it with this signal.
    pub restart: Option<StopSignal>,
    /// Restart it a second time and create a claim as soon as the new process is spawned.
    pub restart_with_new_claim: bool,
    /// Watch the provider idle for this long.
    pub idle: Option<Duration>,
    /// Claims created one at a time (0: no trickle).
    pub trickle: usize,
    /// Leave the claims and pools in place after the check: no release phase and no tear-down
    /// (the run's control plane goes with it). For a size whose release another run measured
    /// and which would otherwise take as long again as realising.
    pub keep_claims: bool,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.restart.is_none() && self.idle.is_none() && self.trickle == 0
    }
}

/// API requests of a phase, `VERB resource[/subresource] code` → count.
pub type Requests = BTreeMap<String, f64>;

/// What the restart scenario measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Restart {
    /// `SIGTERM` or `SIGKILL`.
    pub signal: String,
    /// How the old process ended.
    pub old_exit: String,
    /// Claims that existed when the new process started (the scenario's and the canary).
    pub existing_claims: usize,
    /// Spawn → `/readyz` answered 200.
    pub seconds_to_ready: Option<f64>,
    /// Spawn → the last claim reconcile of the catch-up (inpool: its claim reconciles then stayed
    /// still for [`STABLE`] and the API server was quiet).
    pub seconds_to_caught_up: f64,
    /// Writes to the provider's resources (claims, addresses, reservations, pools, Events) while
    /// it caught up, whoever made them (nobody else writes to them meanwhile).
    pub writes: f64,
    /// Every write request the API server counted meanwhile (other resources included, e.g. the
    /// API server's own leases), by verb, resource and code.
    pub writes_by: Requests,
    /// GET and LIST requests (to resources) meanwhile, by verb, resource and code.
    pub reads_by: Requests,
    /// `inpool_reconciles_total{controller="claim"}` of the new process when caught up.
    pub claim_reconciles: Option<f64>,
    pub reconciles_per_existing_claim: Option<f64>,
    pub reconcile_errors: Option<f64>,
    /// CPU seconds of the new process from its start until caught up.
    pub cpu_seconds: Option<f64>,
    /// Its peak resident memory (VmHWM) when caught up, MiB.
    pub peak_rss_mib: Option<f64>,
    /// Its resident memory when caught up, MiB.
    pub rss_mib: Option<f64>,
    /// Second restart (when planned): spawn → `/readyz` 200.
    pub probe_process_seconds_to_ready: Option<f64>,
    /// Second restart: spawn → the new claim (created right after the spawn) Ready.
    pub probe_seconds_from_spawn: f64,
    /// Second restart: the new claim's create → Ready.
    pub probe_seconds_from_create: f64,
    /// Second restart: writes to the provider's resources until caught up (the new claim's
    /// included: 4 writes and an Event for a claim, plus pool status).
    pub probe_run_writes: f64,
    pub probe_run_writes_by: Requests,
}

/// What the idle scenario measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Idle {
    pub seconds: f64,
    /// Writes to the provider's resources in the window.
    pub writes: f64,
    pub writes_by: Requests,
    /// GET and LIST requests to resources, and WATCH requests (each counted when it ends; the
    /// control plane's controller manager watches too).
    pub reads_by: Requests,
    pub gets: f64,
    pub lists: f64,
    pub watches: f64,
    pub cpu_seconds: Option<f64>,
    pub rss_mib: Option<f64>,
    pub peak_rss_mib: Option<f64>,
    /// `inpool_audits_total` gained in the window.
    pub audits: Option<f64>,
    /// `inpool_reconciles_total{controller="claim"}` gained in the window.
    pub claim_reconciles: Option<f64>,
    pub pool_reconciles: Option<f64>,
}

/// What the trickle scenario measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Trickle {
    pub claims: usize,
    /// Claim create returned → Ready seen by the harness's watch.
    pub latency: Latency,
    /// The harness's claim create, request to response: one API write's round trip.
    pub create_round_trip: Latency,
    /// Writes to the provider's resources per claim (the harness's creates not counted).
    pub writes_per_claim: f64,
}

/// Everything the scenarios at size measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AtSize {
    pub restart: Option<Restart>,
    pub idle: Option<Idle>,
    pub trickle: Option<Trickle>,
}

/// How long the claim reconcile counter must stay still for a process to count as caught up.
pub const STABLE: Duration = Duration::from_secs(5);

/// Runs the planned scenarios, in the order restart, idle, trickle; `process` is the provider
/// that realised the claims, replaced by the restarts. Extra claims are gone when it returns.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    client: &Client,
    kubeconfig: &Path,
    provider: &ProviderSpec,
    scenario: &Scenario,
    process: &mut ProviderProcess,
    log_dir: &Path,
    plan: &Plan,
) -> anyhow::Result<AtSize> {
    let ns = scenario.namespace.as_str();
    let mut out = AtSize::default();
    let result = async {
        if let Some(signal) = plan.restart {
            out.restart = Some(
                restart(
                    client,
                    kubeconfig,
                    provider,
                    scenario,
                    process,
                    log_dir,
                    signal,
                    plan.restart_with_new_claim,
                )
                .await?,
            );
        }
        if let Some(window) = plan.idle {
            out.idle = Some(idle(client, provider, process, window).await?);
        }
        if plan.trickle > 0 {
            out.trickle = Some(trickle(client, ns, plan.trickle, process).await?);
        }
        anyhow::Ok(())
    }
    .await;
    let removed = remove_extras(client, ns, scenario.timeout).await;
    result?;
    removed?;
    Ok(out)
}

/// The restart scenario: see the module docs.
#[allow(clippy::too_many_arguments)]
async fn restart(
    client: &Client,
    kubeconfig: &Path,
    provider: &ProviderSpec,
    scenario: &Scenario,
    process: &mut ProviderProcess,
    log_dir: &Path,
    signal: StopSignal,
    with_new_claim: bool,
) -> anyhow::Result<Restart> {
    let ns = scenario.namespace.as_str();
    let existing = scenario.total() + 1;
    let settle = scenario.settle;
    // Always, even in a correctness run: the old process may still have work of its own to
    // finish (a pool status write waits up to a second after the last allocation), which the new
    // process would then do and which is not catching up.
    harness::wait_quiet(client, "restart").await?;
    let mut out = Restart {
        signal: signal.name().into(),
        existing_claims: existing,
        ..Default::default()
    };

    // 1. Catch-up only.
    out.old_exit = process.signal_and_wait(signal).await?.to_string();
    let before = apimetrics::scrape(client).await?;
    let log = log_dir.join(format!("{}-{}-restart-1.log", provider.name, scenario.name));
    *process = ProviderProcess::start(provider, kubeconfig, ns, scenario.concurrency, &log)?;
    let spawned = Instant::now();
    eprintln!(
        "  restart ({}): new process pid {}, log {}",
        signal.name(),
        process.pid,
        log.display()
    );
    out.seconds_to_ready = wait_ready(process, scenario.timeout).await?;
    let caught_up = wait_caught_up(client, process, provider, scenario.timeout, settle).await?;
    out.seconds_to_caught_up = caught_up
        .at
        .saturating_duration_since(spawned)
        .as_secs_f64();
    let delta = apimetrics::scrape(client).await?.since(&before);
    out.writes = provider_writes(&delta);
    out.writes_by = by_request(&delta, |verb| apimetrics::WRITE_VERBS.contains(&verb));
    out.reads_by = by_request(&delta, |verb| matches!(verb, "GET" | "LIST"));
    out.claim_reconciles = caught_up.claim_reconciles;
    out.reconciles_per_existing_claim = caught_up.claim_reconciles.map(|r| r / existing as f64);
    out.reconcile_errors = caught_up.errors;
    if let Some(stat) = process.stat() {
        out.cpu_seconds = Some(stat.cpu_seconds);
        out.peak_rss_mib = Some(stat.hwm_kib as f64 / 1024.0);
        out.rss_mib = Some(stat.rss_kib as f64 / 1024.0);
    }
    eprintln!(
        "  restart: ready after {}, caught up after {:.1} s; {} writes, {} claim reconciles; \
         RSS {} MiB (peak {} MiB)",
        out.seconds_to_ready
            .map_or("–".into(), |s| format!("{s:.1} s")),
        out.seconds_to_caught_up,
        out.writes,
        out.claim_reconciles.map_or("–".into(), |r| r.to_string()),
        out.rss_mib.map_or("–".into(), |m| format!("{m:.1}")),
        out.peak_rss_mib.map_or("–".into(), |m| format!("{m:.1}")),
    );

    // 2. A new claim as soon as the process is spawned.
    if !with_new_claim {
        return Ok(out);
    }
    if settle {
        harness::wait_quiet(client, "restart with a new claim").await?;
    }
    process.signal_and_wait(signal).await?;
    let tracker =
        ReadyTracker::start_labelled(client, ns, &format!("{CLAIM_LABEL}={EXTRA}")).await?;
    let before = apimetrics::scrape(client).await?;
    let log = log_dir.join(format!("{}-{}-restart-2.log", provider.name, scenario.name));
    *process = ProviderProcess::start(provider, kubeconfig, ns, scenario.concurrency, &log)?;
    let spawned = Instant::now();
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    claims
        .create(&PostParams::default(), &extra_claim("after-restart"))
        .await
        .context("creating the claim after the restart")?;
    let created = Instant::now();
    let ready = async {
        tracker
            .wait_all(
                spawned,
                1,
                scenario.timeout,
                "claim after restart",
                &mut || None,
            )
            .await
    };
    let (ready, probe_ready) = tokio::join!(ready, wait_ready(process, scenario.timeout));
    ready?;
    out.probe_process_seconds_to_ready = probe_ready?;
    let ready_at = tracker.ready_times()["after-restart"];
    out.probe_seconds_from_spawn = ready_at.duration_since(spawned).as_secs_f64();
    out.probe_seconds_from_create = ready_at.duration_since(created).as_secs_f64();
    drop(tracker);
    wait_caught_up(client, process, provider, scenario.timeout, settle).await?;
    let delta = apimetrics::scrape(client).await?.since(&before);
    // The harness's create of the new claim is not the provider's.
    out.probe_run_writes = provider_writes(&delta) - 1.0;
    out.probe_run_writes_by = by_request(&delta, |verb| apimetrics::WRITE_VERBS.contains(&verb));
    eprintln!(
        "  restart 2: the new claim was Ready {:.1} s after the spawn ({:.1} s after its create)",
        out.probe_seconds_from_spawn, out.probe_seconds_from_create
    );
    Ok(out)
}

/// Polls `/readyz` until it answers 200; `None` if the provider does not serve it (no answer at
/// all for the whole timeout). Seconds since `process` was started.
async fn wait_ready(
    process: &mut ProviderProcess,
    timeout: Duration,
) -> anyhow::Result<Option<f64>> {
    let started = Instant::now();
    let mut answered = false;
    loop {
        match process::http_get(process.health_addr, "/readyz").await {
            Ok((200, _)) => return Ok(Some(started.elapsed().as_secs_f64())),
            Ok(_) => answered = true,
            Err(_) => {}
        }
        if let Some(why) = process.exited() {
            bail!(
                "the restarted provider exited ({why}); log:\n{}",
                process.log_tail(30)
            );
        }
        if started.elapsed() > timeout {
            if answered {
                bail!("the restarted provider's /readyz did not answer 200 within {timeout:?}");
            }
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct CaughtUp {
    /// When the claim reconciles last grew (inpool), or when the API server was found quiet.
    at: Instant,
    claim_reconciles: Option<f64>,
    errors: Option<f64>,
}

/// Waits until the provider's claim reconciles stopped growing for [`STABLE`] (inpool) and, with
/// `settle`, the API server is quiet. inpool writes from inside its reconciles (Events included),
/// so once they stopped, so did its writes.
async fn wait_caught_up(
    client: &Client,
    process: &mut ProviderProcess,
    provider: &ProviderSpec,
    timeout: Duration,
    settle: bool,
) -> anyhow::Result<CaughtUp> {
    let started = Instant::now();
    let reconciles =
        |page: &str| process::metric_sum(page, r#"inpool_reconciles_total{controller="claim"}"#);
    let mut last: Option<(f64, Instant)> = None;
    if provider.is_inpool {
        loop {
            if let Some(why) = process.exited() {
                bail!(
                    "the restarted provider exited ({why}); log:\n{}",
                    process.log_tail(30)
                );
            }
            if started.elapsed() > timeout {
                bail!("the restarted provider was still reconciling claims after {timeout:?}");
            }
            let now = process::http_get_metrics(process.metrics_addr)
                .await
                .ok()
                .and_then(|page| reconciles(&page));
            match (now, last) {
                (Some(n), Some((l, since))) if n == l => {
                    if n > 0.0 && since.elapsed() >= STABLE {
                        break;
                    }
                }
                (Some(n), _) => last = Some((n, Instant::now())),
                (None, _) => {}
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    if settle {
        harness::wait_quiet(client, "catching up").await?;
    }
    let at = last.map_or_else(Instant::now, |(_, since)| since);
    let page = if provider.is_inpool {
        process::http_get_metrics(process.metrics_addr).await.ok()
    } else {
        None
    };
    Ok(CaughtUp {
        at,
        claim_reconciles: page.as_deref().and_then(reconciles),
        errors: page
            .as_deref()
            .and_then(|p| process::metric_sum(p, "inpool_reconcile_errors_total")),
    })
}

/// The idle scenario: see the module docs.
async fn idle(
    client: &Client,
    provider: &ProviderSpec,
    process: &mut ProviderProcess,
    window: Duration,
) -> anyhow::Result<Idle> {
    harness::wait_quiet(client, "idle").await?;
    let page = |process: &ProviderProcess| {
        let addr = process.metrics_addr;
        let inpool = provider.is_inpool;
        async move {
            if inpool {
                process::http_get_metrics(addr).await.ok()
            } else {
                None
            }
        }
    };
    let metric = |page: &Option<String>, name: &str| {
        page.as_deref().and_then(|p| process::metric_sum(p, name))
    };
    let before = apimetrics::scrape(client).await?;
    let stat_before = process.stat();
    let page_before = page(process).await;
    let started = Instant::now();
    eprintln!("  idle: watching for {:.0} s", window.as_secs_f64());
    while started.elapsed() < window {
        if let Some(why) = process.exited() {
            bail!(
                "the provider exited while idle ({why}); log:\n{}",
                process.log_tail(30)
            );
        }
        let left = window.saturating_sub(started.elapsed());
        tokio::time::sleep(left.min(Duration::from_secs(60))).await;
        if !left.is_zero() && started.elapsed() < window {
            eprintln!(
                "  idle: {:.0}/{:.0} s",
                started.elapsed().as_secs_f64(),
                window.as_secs_f64()
            );
        }
    }
    let delta = apimetrics::scrape(client).await?.since(&before);
    let seconds = started.elapsed().as_secs_f64();
    let stat_after = process.stat();
    let page_after = page(process).await;
    let gained = |name: &str| {
        metric(&page_after, name)
            .zip(metric(&page_before, name))
            .map(|(a, b)| a - b)
    };
    Ok(Idle {
        seconds,
        writes: provider_writes(&delta),
        writes_by: by_request(&delta, |verb| apimetrics::WRITE_VERBS.contains(&verb)),
        reads_by: by_request(&delta, |verb| matches!(verb, "GET" | "LIST" | "WATCH")),
        gets: delta.verb("GET"),
        lists: delta.verb("LIST"),
        watches: delta.verb("WATCH"),
        cpu_seconds: stat_after
            .zip(stat_before)
            .map(|(a, b)| a.cpu_seconds - b.cpu_seconds),
        rss_mib: stat_after.map(|s| s.rss_kib as f64 / 1024.0),
        peak_rss_mib: stat_after.map(|s| s.hwm_kib as f64 / 1024.0),
        audits: gained("inpool_audits_total"),
        claim_reconciles: gained(r#"inpool_reconciles_total{controller="claim"}"#),
        pool_reconciles: gained(r#"inpool_reconciles_total{controller="pool"}"#),
    })
}

/// Longest wait for one trickle claim to be Ready.
const TRICKLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The trickle scenario: see the module docs.
async fn trickle(
    client: &Client,
    ns: &str,
    claims: usize,
    process: &mut ProviderProcess,
) -> anyhow::Result<Trickle> {
    harness::wait_quiet(client, "trickle").await?;
    let tracker =
        ReadyTracker::start_labelled(client, ns, &format!("{CLAIM_LABEL}={EXTRA}")).await?;
    let api: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    let before = apimetrics::scrape(client).await?;
    let mut latencies = Vec::with_capacity(claims);
    let mut round_trips = Vec::with_capacity(claims);
    eprintln!("  trickle: {claims} claims, one at a time");
    for i in 0..claims {
        let name = format!("trickle-{i:05}");
        let sent = Instant::now();
        api.create(&PostParams::default(), &extra_claim(&name))
            .await
            .with_context(|| format!("creating claim {name}"))?;
        let created = Instant::now();
        round_trips.push(created - sent);
        let ready_at = loop {
            if let Some(at) = tracker.ready_times().get(&name) {
                break *at;
            }
            if let Some(why) = process.exited() {
                bail!(
                    "the provider exited ({why}) during the trickle; log:\n{}",
                    process.log_tail(30)
                );
            }
            if created.elapsed() > TRICKLE_TIMEOUT {
                bail!("trickle: claim {name} was not Ready within {TRICKLE_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        latencies.push(ready_at.saturating_duration_since(created));
    }
    let delta = apimetrics::scrape(client).await?.since(&before);
    Ok(Trickle {
        claims,
        latency: Latency::of(latencies),
        create_round_trip: Latency::of(round_trips),
        writes_per_claim: (provider_writes(&delta) - claims as f64) / claims.max(1) as f64,
    })
}

/// Deletes the claims these scenarios added and waits until they, their `IPAddress`es and their
/// reservations are gone, so that the scenario's end-state check sees only its own claims.
async fn remove_extras(client: &Client, ns: &str, timeout: Duration) -> anyhow::Result<()> {
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), ns);
    let extra = ListParams::default().labels(&format!("{CLAIM_LABEL}={EXTRA}"));
    let names: Vec<String> = claims
        .list_metadata(&extra)
        .await?
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    claims
        .delete_collection(&DeleteParams::default(), &extra)
        .await
        .context("deleting the extra claims")?;
    let started = Instant::now();
    loop {
        let claims_left = claims.list_metadata(&extra).await?.items.len();
        let addresses_left = addresses
            .list_metadata(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|a| names.contains(&a.name_any()))
            .count();
        let reservations_left = harness::reservations_of(client, ns)
            .await?
            .iter()
            .filter(|r| names.contains(&r.spec.claim_name))
            .count();
        if claims_left + addresses_left + reservations_left == 0 {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!(
                "{claims_left} extra claims, {addresses_left} of their IPAddresses and \
                 {reservations_left} reservations left {timeout:?} after their deletion"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn extra_claim(name: &str) -> IPAddressClaim {
    let mut claim = harness::claim_object(
        name,
        IPAM_GROUP,
        PoolKind::InCluster.name(),
        &harness::pool_name(0),
        false,
    );
    claim.metadata.labels = Some([(CLAIM_LABEL.to_string(), EXTRA.to_string())].into());
    claim
}

/// Writes to the resources a provider writes (everything but the `other` bucket, e.g. the API
/// server's own leases).
fn provider_writes(delta: &RequestCounts) -> f64 {
    delta
        .writes_by_bucket()
        .iter()
        .filter(|(bucket, _)| bucket.as_str() != "other")
        .map(|(_, v)| v)
        .fold(0.0, |a, b| a + b)
}

/// Requests to resources whose verb passes `keep`, by `VERB resource[/subresource] code`.
fn by_request(delta: &RequestCounts, keep: impl Fn(&str) -> bool) -> Requests {
    let mut out = Requests::new();
    for (key, value) in &delta.0 {
        if key.resource.is_empty() || !keep(&key.verb) {
            continue;
        }
        let resource = if key.subresource.is_empty() {
            key.resource.clone()
        } else {
            format!("{}/{}", key.resource, key.subresource)
        };
        *out.entry(format!("{} {resource} {}", key.verb, key.code))
            .or_insert(0.0) += value;
    }
    out
}
