//! Soak run: inpool under endless churn at size for a long time, with random kills, control-plane
//! restarts and HTTP faults, sampled as it goes. Not a test and not in CI: it runs for hours.
//!
//! ```text
//! cargo build --release --bin inpool --bin soak
//! nice -n 10 target/release/soak [--minutes 60] [--claims 10000] [--spare 20]
//!     [--churn-batch 50] [--churn-seconds 10] [--kill-minutes 12] [--restart-minutes 20]
//!     [--check-minutes 10] [--warm-up-minutes 10] [--sample-seconds 30] [--seed N]
//! ```
//!
//! It starts its own control plane (the scale harness's: `inpool-testenv` with CAPI's and
//! inpool's CRDs, on a data directory kept across restarts) and a fault proxy in front of it
//! (`inpool_testenv::fault_proxy`). inpool (its release binary, the scale harness's provider
//! command, with `--audit-interval 120s`) reaches the API server only through the proxy; the
//! harness talks to the API server directly. One namespace, one `InClusterIPPool` of
//! `claims + spare` addresses; the harness fills it with `claims` claims, then until the end:
//!
//! - churn: every `--churn-seconds`, creates `--churn-batch` new claims, then deletes as many
//!   realised ones picked at random. With a batch larger than the spare, some new claims wait
//!   (`PoolExhausted`) until the deletions free their addresses;
//! - kills: inpool SIGKILLed and started again, at random (uniform within ±50 % of
//!   `--kill-minutes`);
//! - control-plane restarts: SIGTERM, then started again on the same data directory (same
//!   objects, same address), at random around `--restart-minutes`;
//! - HTTP faults, one episode of 60 s at a time with 30 to 120 s between episodes, each one of:
//!   `429` with `Retry-After: 1`, `503`, `500`, connection resets, 1 s delays, writes whose answer
//!   is lost after the API server applied them, blackholed requests (held until the episode
//!   ends), every open watch cut;
//! - every `--sample-seconds`: inpool's resident memory (`VmRSS`) and open file descriptors
//!   (`/proc/PID/fd`), its registry sizes (`inpool_registry_entries`), `inpool_claims_watched`,
//!   `inpool_state_drift_total`, and a list of every `IPAddress`: no two live ones share an
//!   address, at any moment of the churn;
//! - every `--check-minutes`: churn and faults pause until every invariant of the namespace holds
//!   (`common::invariants::violations`: no duplicate, no lost address, counts right, no stray),
//!   or 5 minutes pass (a finding).
//!
//! Output (in `target/soak/<start time>/`): `samples.csv`, `events.csv`, `summary.md` (slopes per
//! hour after warm-up, by least squares with one intercept per inpool process: a killed process
//! takes its memory with it), and `soak.svg`. Linux only (`/proc`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use clap::Parser;
use futures::StreamExt;
use inpool::api::{
    IPAM_GROUP, IPAddress, IPAddressClaim, InClusterIPPool, InClusterIPPoolSpec, PoolKind,
};
use inpool_testenv::common::invariants;
use inpool_testenv::fault_proxy::{Fault, FaultProxy, Match, Rule};
use inpool_testenv::scale::harness::{self, ReadyTracker, Retries};
use inpool_testenv::scale::process::{self, ProviderProcess, ProviderSpec, StopSignal};
use inpool_testenv::scale::soak::{self, Line, Mark, MarkKind, Panel, Point};
use inpool_testenv::{repo_root, support};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

const NAMESPACE: &str = "soak";
const POOL: &str = "pool-000";
/// A started inpool lists everything, rebuilds its registry, and its resident memory then climbs
/// in steps to its plateau as churn reaches its working set: about 6.5 minutes at 10,000 claims
/// (docs/reliability.md#soak). The slopes leave each process's first 7 minutes out.
const PROCESS_SETTLE: Duration = Duration::from_secs(420);
/// How long a quiet check waits for every invariant to hold before it reports what does not.
const CHECK_TIMEOUT: Duration = Duration::from_secs(300);
const FAULT_EPISODE: Duration = Duration::from_secs(60);
/// The registry maps sampled, as `inpool_registry_entries{map}` names them.
const REGISTRY_MAPS: [&str; 6] = [
    "pools",
    "reservations",
    "claims_reserved",
    "addresses",
    "in_flight",
    "waiting",
];

#[derive(Debug, Parser)]
#[command(name = "soak", about = "inpool's soak run")]
struct Args {
    /// Length of the churn phase (after the fill).
    #[arg(long, default_value_t = 60.0)]
    minutes: f64,
    /// Live claims.
    #[arg(long, default_value_t = 10_000)]
    claims: usize,
    /// Addresses of the pool beyond `--claims`.
    #[arg(long, default_value_t = 20)]
    spare: usize,
    /// Claims replaced at each churn step.
    #[arg(long, default_value_t = 50)]
    churn_batch: usize,
    /// Seconds between churn steps.
    #[arg(long, default_value_t = 10.0)]
    churn_seconds: f64,
    /// Mean minutes between SIGKILLs of inpool (0: none).
    #[arg(long, default_value_t = 12.0)]
    kill_minutes: f64,
    /// Mean minutes between control-plane restarts (0: none).
    #[arg(long, default_value_t = 20.0)]
    restart_minutes: f64,
    /// Minutes between quiet invariant checks.
    #[arg(long, default_value_t = 10.0)]
    check_minutes: f64,
    /// Minutes of churn left out of the slopes.
    #[arg(long, default_value_t = 10.0)]
    warm_up_minutes: f64,
    #[arg(long, default_value_t = 30)]
    sample_seconds: u64,
    /// Requests at once, the harness's and inpool's `--concurrency`.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// inpool binary (default: target/release/inpool).
    #[arg(long)]
    inpool_binary: Option<PathBuf>,
    /// Seed of the random choices (default: the clock).
    #[arg(long)]
    seed: Option<u64>,
}

fn main() -> ExitCode {
    inpool_testenv::scale::main(run(Args::parse()))
}

/// xorshift64: the random choices of one run, reproducible from its seed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// Uniform within ±50 % of `mean`.
    fn around(&mut self, mean: Duration) -> Duration {
        mean.mul_f64(0.5 + (self.next() % 1000) as f64 / 1000.0)
    }
}

/// A series of the summary: its name and how to read it from a sample.
type Series = (&'static str, Box<dyn Fn(&Sample) -> Option<f64>>);

#[derive(Clone, Debug)]
struct Event {
    at: f64,
    what: String,
}

#[derive(Default)]
struct Sample {
    t: f64,
    segment: u32,
    pid: u32,
    age: f64,
    rss_mib: Option<f64>,
    fds: Option<f64>,
    claims_watched: Option<f64>,
    registry: [Option<f64>; REGISTRY_MAPS.len()],
    drift_process: Option<f64>,
    drift_total: f64,
    audits_total: f64,
    live: usize,
    realised: usize,
    churned: usize,
    fault: String,
}

impl Sample {
    const HEADER: &str = "t_seconds,segment,pid,process_age_seconds,rss_mib,fds,claims_watched,\
        registry_pools,registry_reservations,registry_claims_reserved,registry_addresses,\
        registry_in_flight,registry_waiting,drift_this_process,drift_total,audits_total,\
        live_claims,realised_claims,claims_replaced,fault";

    fn csv(&self) -> String {
        let opt = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_default();
        let registry: Vec<String> = self.registry.iter().map(|v| opt(*v)).collect();
        format!(
            "{:.1},{},{},{:.1},{},{},{},{},{},{:.0},{:.0},{},{},{},{}",
            self.t,
            self.segment,
            self.pid,
            self.age,
            opt(self.rss_mib),
            opt(self.fds),
            opt(self.claims_watched),
            registry.join(","),
            opt(self.drift_process),
            self.drift_total,
            self.audits_total,
            self.live,
            self.realised,
            self.churned,
            self.fault
        )
    }
}

struct Soak {
    args: Args,
    out: PathBuf,
    data_dir: PathBuf,
    crds: Vec<PathBuf>,
    plane: Option<support::ControlPlane>,
    client: Client,
    proxy: FaultProxy,
    spec: ProviderSpec,
    inpool: ProviderProcess,
    segment: u32,
    process_started: Instant,
    tracker: ReadyTracker,
    retries: Retries,
    random: Random,
    started: Instant,
    /// When the churn began: the warm-up and the slopes count from here.
    churn_started: Instant,
    /// The harness's claims that exist and are not being deleted.
    live: BTreeSet<String>,
    next_claim: usize,
    churned: usize,
    churn_errors: usize,
    /// Drift and audits counted by the processes that ended.
    drift_before: f64,
    audits_before: f64,
    kills: usize,
    restarts: usize,
    exits: Vec<String>,
    fault: Option<(String, Instant)>,
    /// When the next fault episode begins (30 to 120 s after the last one ended).
    next_fault: Instant,
    faults: BTreeMap<String, usize>,
    events: Vec<Event>,
    samples: Vec<Sample>,
    csv: std::fs::File,
    checks: Vec<(f64, f64, Vec<String>)>,
    duplicates: Vec<String>,
}

async fn run(args: Args) -> anyhow::Result<bool> {
    if !cfg!(target_os = "linux") {
        bail!("the soak run reads /proc: Linux only");
    }
    let binary = args.inpool_binary.clone().unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target"))
            .join("release/inpool")
    });
    if !binary.exists() {
        bail!(
            "no inpool binary at {} (cargo build --release --bin inpool)",
            binary.display()
        );
    }
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    }) | 1;
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let out = repo_root().join("target/soak").join(unix.to_string());
    std::fs::create_dir_all(&out)?;
    eprintln!(
        "soak: seed {seed}, output in {}; command: {}",
        out.display(),
        std::env::args().collect::<Vec<_>>().join(" ")
    );

    let data_dir = std::env::temp_dir().join(format!("inpool-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let crds = support::crd_files();
    let plane = start_plane(&data_dir, &crds).await?;
    let client = plane.client().await;
    let proxy = FaultProxy::start(&plane.kubeconfig, &plane.kubeconfig.with_file_name("pki"))
        .await
        .context("starting the fault proxy")?;
    proxy.seed(seed);

    create_namespace_and_pool(&client, args.claims + args.spare).await?;
    let mut spec = ProviderSpec::inpool(&binary);
    spec.command = format!("{} --audit-interval 120s", spec.command);
    let inpool = start_inpool(&spec, proxy.kubeconfig(), &out, 0, args.concurrency).await?;
    let tracker = ReadyTracker::start(&client, NAMESPACE).await?;
    let mut csv = std::fs::File::create(out.join("samples.csv"))?;
    writeln!(csv, "{}", Sample::HEADER)?;
    let now = Instant::now();
    let mut soak = Soak {
        args,
        out,
        data_dir,
        crds,
        plane: Some(plane),
        client,
        proxy,
        spec,
        inpool,
        segment: 0,
        process_started: now,
        tracker,
        retries: Retries::default(),
        random: Random(seed),
        started: now,
        churn_started: now,
        live: BTreeSet::new(),
        next_claim: 0,
        churned: 0,
        churn_errors: 0,
        drift_before: 0.0,
        audits_before: 0.0,
        kills: 0,
        restarts: 0,
        exits: Vec::new(),
        fault: None,
        next_fault: now + Duration::from_secs(30),
        faults: BTreeMap::new(),
        events: Vec::new(),
        samples: Vec::new(),
        csv,
        checks: Vec::new(),
        duplicates: Vec::new(),
    };
    let result = soak.run().await;
    let ok = soak.finish().await?;
    result?;
    Ok(ok)
}

/// Starts the control plane on `data_dir`. Restarted on tens of thousands of objects beside a
/// busy inpool, its garbage collector took more than the default 3 minutes to pass the start-up
/// probe on 2 cores, and the soak stopped there; it gets 15.
async fn start_plane(data_dir: &Path, crds: &[PathBuf]) -> anyhow::Result<support::ControlPlane> {
    let data_dir = data_dir.to_path_buf();
    let options = inpool_testenv::StartOptions {
        ephemeral: false,
        crds: crds.to_vec(),
        own_process_group: false,
        start_timeout: Some(Duration::from_secs(15 * 60)),
    };
    tokio::task::spawn_blocking(move || support::ControlPlane::start_with(&data_dir, &options))
        .await?
        .map_err(anyhow::Error::msg)
}

async fn create_namespace_and_pool(client: &Client, size: usize) -> anyhow::Result<()> {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    // 10.0.0.1 onwards, `size` addresses, in a /16.
    let last = u32::from(std::net::Ipv4Addr::new(10, 0, 0, 0)) + size as u32;
    let range = format!("10.0.0.1-{}", std::net::Ipv4Addr::from(last));
    Api::<InClusterIPPool>::namespaced(client.clone(), NAMESPACE)
        .create(
            &PostParams::default(),
            &InClusterIPPool::new(POOL, InClusterIPPoolSpec::new([range], 16)),
        )
        .await?;
    Ok(())
}

/// Starts inpool and waits until its metrics answer.
async fn start_inpool(
    spec: &ProviderSpec,
    kubeconfig: &Path,
    out: &Path,
    segment: u32,
    concurrency: usize,
) -> anyhow::Result<ProviderProcess> {
    let log = out.join(format!("inpool-{segment:02}.log"));
    let mut inpool = ProviderProcess::start(spec, kubeconfig, NAMESPACE, concurrency, &log)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while process::http_get_metrics(inpool.metrics_addr)
        .await
        .is_err()
    {
        if let Some(exit) = inpool.exited() {
            bail!("inpool exited at start ({exit}):\n{}", inpool.log_tail(30));
        }
        if Instant::now() > deadline {
            bail!("inpool's metrics did not answer within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(inpool)
}

fn claim(name: &str) -> IPAddressClaim {
    harness::claim_object(name, IPAM_GROUP, PoolKind::InCluster.name(), POOL, true)
}

impl Soak {
    fn minutes(&self) -> f64 {
        self.started.elapsed().as_secs_f64() / 60.0
    }

    fn event(&mut self, what: String) {
        let at = self.started.elapsed().as_secs_f64();
        eprintln!("[{:6.1} min] {what}", at / 60.0);
        self.events.push(Event { at, what });
    }

    async fn run(&mut self) -> anyhow::Result<()> {
        self.fill().await?;
        self.churn_started = Instant::now();
        self.event(format!(
            "churn starts: {} claims live, {} replaced every {} s",
            self.live.len(),
            self.args.churn_batch,
            self.args.churn_seconds
        ));
        let minutes = |m: f64| Duration::from_secs_f64(m * 60.0);
        let end = self.churn_started + minutes(self.args.minutes);
        let every = |m: f64, random: &mut Random| {
            (m > 0.0).then(|| Instant::now() + random.around(minutes(m)))
        };
        let mut next_kill = every(self.args.kill_minutes, &mut self.random);
        let mut next_restart = every(self.args.restart_minutes, &mut self.random);
        let mut next_check = Instant::now() + minutes(self.args.check_minutes);
        let mut next_sample = Instant::now();
        let mut next_churn = Instant::now();
        while Instant::now() < end {
            let now = Instant::now();
            if let Some(exit) = self.inpool.exited() {
                let tail = self.inpool.log_tail(20);
                self.exits.push(format!("{exit}: {tail}"));
                self.event(format!("inpool exited on its own ({exit}); started again"));
                self.replace_inpool(None).await?;
            }
            if now >= next_sample {
                self.sample().await;
                next_sample = now + Duration::from_secs(self.args.sample_seconds);
            }
            if now >= next_check {
                self.quiet_check().await;
                next_check = Instant::now() + minutes(self.args.check_minutes);
            }
            if next_kill.is_some_and(|at| now >= at) {
                self.kill().await?;
                next_kill = every(self.args.kill_minutes, &mut self.random);
            }
            if next_restart.is_some_and(|at| now >= at) {
                self.restart_plane().await?;
                next_restart = every(self.args.restart_minutes, &mut self.random);
            }
            match &self.fault {
                Some((_, until)) if now >= *until => self.end_fault(),
                None if now >= self.next_fault => self.start_fault(),
                _ => {}
            }
            if now >= next_churn {
                self.churn_step().await;
                next_churn = now + Duration::from_secs_f64(self.args.churn_seconds);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.end_fault();
        self.event("churn ends".into());
        self.sample().await;
        self.quiet_check().await;
        self.sample().await;
        Ok(())
    }

    /// Creates the claims and waits until all are realised.
    async fn fill(&mut self) -> anyhow::Result<()> {
        let total = self.args.claims;
        self.event(format!("fill: creating {total} claims"));
        let names: Vec<String> = (0..total).map(|i| format!("c-{i:07}")).collect();
        self.next_claim = total;
        let created = self.create(&names).await;
        self.live.extend(created);
        let deadline = Instant::now() + Duration::from_secs(1800);
        loop {
            let ready = self.tracker.ready_count();
            if ready >= self.live.len() {
                break;
            }
            if Instant::now() > deadline {
                bail!("fill: {ready}/{} claims realised after 30 minutes", total);
            }
            if let Some(exit) = self.inpool.exited() {
                bail!("inpool exited during the fill ({exit})");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.event(format!("fill: {} claims realised", self.live.len()));
        Ok(())
    }

    /// Creates the claims (retrying transient errors); returns the names created.
    async fn create(&mut self, names: &[String]) -> Vec<String> {
        self.each(names, |api, name, retries| async move {
            let object = claim(&name);
            let pp = PostParams::default();
            harness::with_retries(&retries, "create", || api.create(&pp, &object))
                .await
                .is_ok()
        })
        .await
    }

    /// Deletes the claims; returns the names deleted (or already gone).
    async fn delete(&mut self, names: &[String]) -> Vec<String> {
        self.each(names, |api, name, retries| async move {
            let dp = DeleteParams::default();
            match harness::with_retries(&retries, "delete", || api.delete(&name, &dp)).await {
                Ok(_) => true,
                Err(e) => e
                    .downcast_ref::<kube::Error>()
                    .is_some_and(|e| matches!(e, kube::Error::Api(s) if s.code == 404)),
            }
        })
        .await
    }

    /// Runs `request` for each name, `--concurrency` at a time; returns the names it went
    /// through for and counts the others as churn errors.
    async fn each<F, Fut>(&mut self, names: &[String], request: F) -> Vec<String>
    where
        F: Fn(Api<IPAddressClaim>, String, Retries) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let api: Api<IPAddressClaim> = Api::namespaced(self.client.clone(), NAMESPACE);
        let results: Vec<(String, bool)> = futures::stream::iter(names.iter().cloned())
            .map(|name| {
                let done = request(api.clone(), name.clone(), self.retries.clone());
                async move { (name, done.await) }
            })
            .buffer_unordered(self.args.concurrency.max(1))
            .collect()
            .await;
        self.churn_errors += results.iter().filter(|(_, done)| !done).count();
        results
            .into_iter()
            .filter_map(|(name, done)| done.then_some(name))
            .collect()
    }

    /// New claims first (some wait for the addresses the deletions free), then deletes as many
    /// realised claims picked at random.
    async fn churn_step(&mut self) {
        let ready = self.tracker.ready_times();
        let mut realised: Vec<String> = self
            .live
            .iter()
            .filter(|name| ready.contains_key(*name))
            .cloned()
            .collect();
        let batch = self.args.churn_batch.min(realised.len());
        for i in 0..batch {
            let j = i + self.random.below(realised.len() - i);
            realised.swap(i, j);
        }
        realised.truncate(batch);
        let names: Vec<String> = (0..batch)
            .map(|i| format!("c-{:07}", self.next_claim + i))
            .collect();
        self.next_claim += batch;
        let created = self.create(&names).await;
        self.live.extend(created);
        let deleted = self.delete(&realised).await;
        for name in &deleted {
            self.live.remove(name);
        }
        self.churned += deleted.len();
    }

    async fn sample(&mut self) {
        let pid = self.inpool.pid;
        let mut sample = Sample {
            t: self.started.elapsed().as_secs_f64(),
            segment: self.segment,
            pid,
            age: self.process_started.elapsed().as_secs_f64(),
            rss_mib: process::proc_stat(pid).map(|s| s.rss_kib as f64 / 1024.0),
            fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
                .ok()
                .map(|d| d.count() as f64),
            live: self.live.len(),
            churned: self.churned,
            fault: self
                .fault
                .as_ref()
                .map(|(f, _)| f.clone())
                .unwrap_or_default(),
            ..Sample::default()
        };
        let ready = self.tracker.ready_times();
        sample.realised = self.live.iter().filter(|n| ready.contains_key(*n)).count();
        if let Ok(page) = process::http_get_metrics(self.inpool.metrics_addr).await {
            sample.claims_watched = process::metric_sum(&page, "inpool_claims_watched");
            for (i, map) in REGISTRY_MAPS.iter().enumerate() {
                sample.registry[i] = process::metric_sum(
                    &page,
                    &format!("inpool_registry_entries{{map=\"{map}\"}}"),
                );
            }
            sample.drift_process = process::metric_sum(&page, "inpool_state_drift_total");
            sample.audits_total = self.audits_before
                + process::metric_sum(&page, "inpool_audits_total").unwrap_or(0.0);
        }
        sample.drift_total = self.drift_before + sample.drift_process.unwrap_or(0.0);
        let _ = writeln!(self.csv, "{}", sample.csv());
        eprintln!(
            "[{:6.1} min] rss {:.1} MiB, fds {}, watched {}, reservations {}, live {}, realised {}, replaced {}, drift {}{}",
            sample.t / 60.0,
            sample.rss_mib.unwrap_or(0.0),
            sample.fds.unwrap_or(0.0),
            sample.claims_watched.unwrap_or(-1.0),
            sample.registry[1].unwrap_or(-1.0),
            sample.live,
            sample.realised,
            sample.churned,
            sample.drift_total,
            if sample.fault.is_empty() {
                String::new()
            } else {
                format!(", fault {}", sample.fault)
            }
        );
        self.samples.push(sample);
        // No two live IPAddresses share an address, at any moment.
        let addresses = Api::<IPAddress>::namespaced(self.client.clone(), NAMESPACE);
        if let Ok(list) = addresses.list(&ListParams::default()).await {
            let found = soak::duplicates(&list.items);
            if !found.is_empty() {
                self.event(format!("DUPLICATES mid-churn: {found:?}"));
                self.duplicates.extend(found);
            }
        }
    }

    /// Reads the ending process's drift and audits into the totals, then starts a new one.
    async fn replace_inpool(&mut self, kill: Option<StopSignal>) -> anyhow::Result<()> {
        if let Ok(page) = process::http_get_metrics(self.inpool.metrics_addr).await {
            self.drift_before +=
                process::metric_sum(&page, "inpool_state_drift_total").unwrap_or(0.0);
            self.audits_before += process::metric_sum(&page, "inpool_audits_total").unwrap_or(0.0);
        }
        if let Some(signal) = kill {
            self.inpool.signal_and_wait(signal).await?;
        }
        self.segment += 1;
        let kubeconfig = self.proxy.kubeconfig().to_path_buf();
        // The proxy may be failing requests: the new process's metrics answer regardless.
        self.inpool = start_inpool(
            &self.spec,
            &kubeconfig,
            &self.out,
            self.segment,
            self.args.concurrency,
        )
        .await?;
        self.process_started = Instant::now();
        Ok(())
    }

    async fn kill(&mut self) -> anyhow::Result<()> {
        let pid = self.inpool.pid;
        self.replace_inpool(Some(StopSignal::Kill)).await?;
        self.kills += 1;
        self.event(format!(
            "inpool {pid} SIGKILLed; inpool {} started",
            self.inpool.pid
        ));
        Ok(())
    }

    /// SIGTERM to the control plane, then a new one on the same data directory. The harness's
    /// client and claim watch are made again (their connections are gone); inpool recovers on
    /// its own.
    async fn restart_plane(&mut self) -> anyhow::Result<()> {
        self.end_fault();
        let began = Instant::now();
        let plane = self.plane.take().context("no control plane")?;
        let code = tokio::task::spawn_blocking(move || plane.terminate()).await?;
        let plane = start_plane(&self.data_dir, &self.crds).await?;
        self.client = plane.client().await;
        self.plane = Some(plane);
        self.tracker = ReadyTracker::start(&self.client, NAMESPACE).await?;
        self.restarts += 1;
        self.event(format!(
            "control plane restarted (stopped with {code:?}; down {:.1} s)",
            began.elapsed().as_secs_f64()
        ));
        Ok(())
    }

    fn start_fault(&mut self) {
        const KINDS: [&str; 8] = [
            "429",
            "503",
            "500",
            "reset",
            "delay",
            "lost-answer",
            "blackhole",
            "cut-watches",
        ];
        let kind = KINDS[self.random.below(KINDS.len())];
        let requests = Match::all().not_watches();
        let rules = match kind {
            "429" => vec![
                Rule::new(
                    requests,
                    Fault::Status {
                        code: 429,
                        retry_after: Some(1),
                    },
                )
                .probability(0.3),
            ],
            "503" | "500" => vec![
                Rule::new(
                    requests,
                    Fault::Status {
                        code: kind.parse().unwrap_or(503),
                        retry_after: None,
                    },
                )
                .probability(0.2),
            ],
            "reset" => vec![Rule::new(Match::all(), Fault::Reset).probability(0.1)],
            "delay" => {
                vec![Rule::new(Match::all(), Fault::Delay(Duration::from_secs(1))).probability(0.5)]
            }
            "lost-answer" => vec![
                Rule::new(Match::all().writes(), Fault::ResetAfterForward).probability(0.1),
                Rule::new(Match::all().writes(), Fault::StatusAfterForward(503)).probability(0.1),
            ],
            "blackhole" => vec![Rule::new(requests, Fault::Blackhole).probability(0.05)],
            _ => {
                let cut = self.proxy.cut(&Match::all().watches());
                self.event(format!("fault cut-watches: {cut} open watches reset"));
                Vec::new()
            }
        };
        for rule in rules {
            self.proxy.set(rule);
        }
        *self.faults.entry(kind.to_string()).or_default() += 1;
        self.fault = Some((kind.to_string(), Instant::now() + FAULT_EPISODE));
    }

    /// Removes every rule (held requests go on) and draws when the next episode begins.
    fn end_fault(&mut self) {
        self.proxy.clear();
        self.fault = None;
        self.next_fault = Instant::now() + Duration::from_secs(30 + self.random.next() % 91);
    }

    /// Pauses churn and faults until every invariant holds, or [`CHECK_TIMEOUT`].
    async fn quiet_check(&mut self) {
        self.end_fault();
        let at = self.minutes();
        let began = Instant::now();
        let mut last = vec!["no snapshot could be read".to_string()];
        while began.elapsed() < CHECK_TIMEOUT {
            if let Some(snapshot) = invariants::snapshot(&self.client, NAMESPACE).await {
                last = invariants::violations(&snapshot);
                // The cluster is the truth about which claims live.
                self.live = snapshot
                    .claims
                    .iter()
                    .filter(|c| c.metadata.deletion_timestamp.is_none())
                    .filter(|c| c.labels().contains_key(harness::CLAIM_LABEL))
                    .map(|c| c.name_any())
                    .collect();
                if last.is_empty() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let waited = began.elapsed().as_secs_f64();
        if last.is_empty() {
            self.event(format!(
                "check: every invariant holds after {waited:.1} s quiet ({} claims)",
                self.live.len()
            ));
        } else {
            self.event(format!(
                "check FAILED after {waited:.1} s: {} violations, first {:?}",
                last.len(),
                &last[..last.len().min(5)]
            ));
        }
        self.checks.push((at, waited, last));
    }

    /// Stops inpool, writes the events, the summary and the picture; `true` when nothing was
    /// found.
    async fn finish(&mut self) -> anyhow::Result<bool> {
        self.end_fault();
        if let Ok(page) = process::http_get_metrics(self.inpool.metrics_addr).await {
            self.drift_before +=
                process::metric_sum(&page, "inpool_state_drift_total").unwrap_or(0.0);
            self.audits_before += process::metric_sum(&page, "inpool_audits_total").unwrap_or(0.0);
        }
        let _ = self.inpool.signal_and_wait(StopSignal::Term).await;
        let mut events = String::from("t_seconds,event\n");
        for e in &self.events {
            let _ = writeln!(events, "{:.1},\"{}\"", e.at, e.what.replace('"', "'"));
        }
        std::fs::write(self.out.join("events.csv"), events)?;
        let (summary, ok) = self.summary();
        std::fs::write(self.out.join("summary.md"), &summary)?;
        std::fs::write(self.out.join("soak.svg"), self.picture())?;
        println!("{summary}");
        println!("output: {}", self.out.display());
        if let Some(plane) = self.plane.take() {
            let _ = tokio::task::spawn_blocking(move || plane.terminate()).await;
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
        Ok(ok)
    }

    /// The samples of one series after warm-up, from settled processes, in hours.
    fn steady(&self, value: impl Fn(&Sample) -> Option<f64>) -> Vec<Point> {
        let warm_up =
            (self.churn_started - self.started).as_secs_f64() + self.args.warm_up_minutes * 60.0;
        self.samples
            .iter()
            .filter(|s| s.t >= warm_up && s.age >= PROCESS_SETTLE.as_secs_f64())
            .filter_map(|s| {
                Some(Point {
                    segment: s.segment,
                    t: s.t / 3600.0,
                    y: value(s)?,
                })
            })
            .collect()
    }

    fn series(&self) -> Vec<Series> {
        let mut series: Vec<Series> = vec![
            ("resident memory (MiB)", Box::new(|s: &Sample| s.rss_mib)),
            ("open file descriptors", Box::new(|s: &Sample| s.fds)),
            (
                "inpool_claims_watched",
                Box::new(|s: &Sample| s.claims_watched),
            ),
        ];
        for (i, map) in REGISTRY_MAPS.iter().enumerate() {
            let name: &'static str = match *map {
                "pools" => "registry: pools",
                "reservations" => "registry: reservations",
                "claims_reserved" => "registry: claims_reserved",
                "addresses" => "registry: addresses",
                "in_flight" => "registry: in_flight",
                _ => "registry: waiting",
            };
            series.push((name, Box::new(move |s: &Sample| s.registry[i])));
        }
        series
    }

    fn summary(&self) -> (String, bool) {
        let churn_minutes = self.samples.last().map_or(0.0, |s| {
            s.t - (self.churn_started - self.started).as_secs_f64()
        }) / 60.0;
        let failed_checks: Vec<&(f64, f64, Vec<String>)> =
            self.checks.iter().filter(|c| !c.2.is_empty()).collect();
        let longest_quiet = self.checks.iter().map(|c| c.1).fold(0.0, f64::max);
        let mut s = String::new();
        let _ = writeln!(s, "## Soak: {:.0} minutes of churn\n", churn_minutes);
        let _ = writeln!(
            s,
            "- command: `{}`",
            std::env::args().collect::<Vec<_>>().join(" ")
        );
        let _ = writeln!(
            s,
            "- {} claims live in one pool of {}; {} claims replaced ({:.0} a minute), {} create/delete failures after retries",
            self.args.claims,
            self.args.claims + self.args.spare,
            self.churned,
            self.churned as f64 / churn_minutes.max(1e-9),
            self.churn_errors
        );
        let _ = writeln!(
            s,
            "- inpool SIGKILLed {} times, exited on its own {} times; control plane restarted {} times; fault episodes: {:?}",
            self.kills,
            self.exits.len(),
            self.restarts,
            self.faults
        );
        let _ = writeln!(
            s,
            "- quiet checks: {} ({} failed), longest wait until every invariant held {:.1} s",
            self.checks.len(),
            failed_checks.len(),
            longest_quiet
        );
        let _ = writeln!(
            s,
            "- duplicates seen mid-churn (every {} s): {}",
            self.args.sample_seconds,
            self.duplicates.len()
        );
        let _ = writeln!(
            s,
            "- inpool_state_drift_total over all processes: {}; audits: {}",
            self.drift_before, self.audits_before
        );
        let _ = writeln!(
            s,
            "\nAfter {} minutes of warm-up, leaving out each process's first {} s:\n",
            self.args.warm_up_minutes,
            PROCESS_SETTLE.as_secs()
        );
        let _ = writeln!(s, "| series | mean | min | max | slope per hour |");
        let _ = writeln!(s, "|---|---|---|---|---|");
        for (name, value) in self.series() {
            let points = self.steady(value);
            if points.is_empty() {
                let _ = writeln!(s, "| {name} | – | – | – | – |");
                continue;
            }
            let ys: Vec<f64> = points.iter().map(|p| p.y).collect();
            let mean = ys.iter().sum::<f64>() / ys.len() as f64;
            let _ = writeln!(
                s,
                "| {name} | {mean:.1} | {:.1} | {:.1} | {} |",
                ys.iter().copied().fold(f64::MAX, f64::min),
                ys.iter().copied().fold(f64::MIN, f64::max),
                soak::slope(&points).map_or("–".into(), |v| format!("{v:+.2}"))
            );
        }
        for (at, waited, found) in &failed_checks {
            let _ = writeln!(
                s,
                "\ncheck at {at:.1} min failed after {waited:.1} s: {found:#?}"
            );
        }
        for d in &self.duplicates {
            let _ = writeln!(s, "\nduplicate: {d}");
        }
        for e in &self.exits {
            let _ = writeln!(s, "\ninpool exited: {e}");
        }
        let ok = failed_checks.is_empty()
            && self.duplicates.is_empty()
            && self.drift_before == 0.0
            && self.exits.is_empty();
        (s, ok)
    }

    fn picture(&self) -> String {
        let minutes_of = |s: &Sample| s.t / 60.0;
        let line = |name: &str, value: &dyn Fn(&Sample) -> Option<f64>| Line {
            name: name.into(),
            points: self
                .samples
                .iter()
                .filter_map(|s| Some((minutes_of(s), value(s)?)))
                .collect(),
        };
        let panels = vec![
            Panel {
                title: "inpool resident memory (MiB)".into(),
                lines: vec![line("VmRSS", &|s| s.rss_mib)],
            },
            Panel {
                title: "inpool open file descriptors".into(),
                lines: vec![line("fds", &|s| s.fds)],
            },
            Panel {
                title: "registry entries and claims watched".into(),
                lines: vec![
                    line("claims watched", &|s| s.claims_watched),
                    line("reservations", &|s| s.registry[1]),
                    line("addresses", &|s| s.registry[3]),
                    line("claims reserved", &|s| s.registry[2]),
                ],
            },
            Panel {
                title: "claims waiting, allocations in flight".into(),
                lines: vec![
                    line("waiting", &|s| s.registry[5]),
                    line("in flight", &|s| s.registry[4]),
                ],
            },
        ];
        let marks: Vec<Mark> = self
            .events
            .iter()
            .filter_map(|e| {
                let kind = if e.what.contains("SIGKILLed") {
                    MarkKind::Kill
                } else if e.what.starts_with("control plane restarted") {
                    MarkKind::PlaneRestart
                } else {
                    return None;
                };
                Some(Mark {
                    x: e.at / 60.0,
                    kind,
                })
            })
            .collect();
        let warm_up =
            (self.churn_started - self.started).as_secs_f64() / 60.0 + self.args.warm_up_minutes;
        let x_max = self.samples.last().map_or(1.0, minutes_of);
        soak::svg(
            &format!(
                "inpool soak: {} claims, {} replaced, {} kills, {} control-plane restarts",
                self.args.claims, self.churned, self.kills, self.restarts
            ),
            &panels,
            &marks,
            warm_up,
            x_max,
        )
    }
}
