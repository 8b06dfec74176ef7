//! `cargo run --bin demo`: inpool on a local control plane, with a live picture of its pools and
//! claims.
//!
//! 1. Builds (first run only) and starts the local control plane from `testenv/` (etcd,
//!    kube-apiserver, garbage collector) with inpool's CRDs (`crds/`) and the local-use-only CAPI
//!    CRDs (`config/local-capi/`), so that no Cluster API installation is needed.
//! 2. Runs inpool's controllers in this process, as the `inpool` binary does (its log goes to a
//!    file, so the terminal shows the picture), and serves its `/metrics` on 127.0.0.1.
//! 3. Applies `config/samples/*.yaml` with server-side apply: a Cluster, a 5-address IPv4 pool, a
//!    global IPv6 pool and 10 claims, 8 of them for the IPv4 pool.
//! 4. Shows pools (total/used/free, conditions) and claims (Ready, reason, address) every second.
//!    Once every claim has a Ready condition and the picture is stable (5 realised, 3
//!    `PoolExhausted`), applies `config/samples/grow/*.yaml`, which grows the IPv4 pool to 8
//!    addresses, and the waiting claims turn Ready.
//! 5. Keeps showing the picture until Ctrl-C (or, with `--once`, exits 0 once every claim is
//!    Ready), then stops the controllers and the control plane and removes its data directory.
//!
//! inpool runs in-process rather than as a child `inpool` process: `cargo run --bin demo` then
//! builds one binary, one Ctrl-C handler stops everything in order, and inpool's log can go to
//! a file instead of over the picture.

use std::io::{IsTerminal, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::discovery::{Scope, pinned_kind};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::watch;

use inpool::allocator::{Allocator, Family, PoolSpecInput};
use inpool::api::{
    GlobalInClusterIPPool, IPAM_GROUP, IPAddress, IPAddressClaim, IPPool, InClusterIPPool,
    REASON_ADDRESS_ALLOCATED, REASON_POOL_EXHAUSTED,
};
use inpool::cli::Settings;
use inpool::telemetry::{HealthState, Metrics, server};
use inpool::testenv::{self, ControlPlane, StartOptions};

/// Field manager of the demo's server-side applies (the samples are the demo's, not inpool's).
const FIELD_MANAGER: &str = "inpool-demo";

/// inpool on a local control plane: sample pools and claims, a live picture, the pool grown.
#[derive(Debug, Parser)]
#[command(name = "demo")]
struct Args {
    /// Exit 0 once every claim is Ready after the pool has grown, instead of showing the live
    /// picture until Ctrl-C.
    #[arg(long)]
    once: bool,

    /// Directory of the sample manifests: its `*.yaml` are applied first, `grow/*.yaml` once the
    /// first picture is stable.
    #[arg(long, value_name = "DIR", default_value_os_t = testenv::repo_root().join("config").join("samples"))]
    samples: PathBuf,

    /// Seconds each step may take before the demo gives up (exit 1).
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    step_timeout: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let samples = testenv::yaml_files(&args.samples);
    if samples.is_empty() {
        bail!("no *.yaml in {}", args.samples.display());
    }
    let grow = testenv::yaml_files(&args.samples.join("grow"));

    let data_dir = std::env::temp_dir().join(format!("inpool-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    say(&format!(
        "step 1/4: starting the local control plane (etcd + kube-apiserver from testenv/; the \
         first run builds it with Go, which takes several minutes) in {}",
        data_dir.display()
    ));
    let options = StartOptions {
        ephemeral: true,
        crds: testenv::local_crd_files(),
        own_process_group: true,
    };
    let plane = {
        let data_dir = data_dir.clone();
        tokio::task::spawn_blocking(move || ControlPlane::start_with(&data_dir, &options))
            .await?
            .map_err(|e| anyhow::anyhow!(e))?
    };
    say(&format!(
        "control plane ready in {:.1}s: pid {}, server {}",
        plane.startup_seconds,
        plane.pid(),
        plane.server
    ));

    // From here on everything this process started is stopped on every path.
    let stop = shutdown_signal();
    let result = tokio::select! {
        result = demo(&args, &plane, &samples, &grow) => result,
        signal = stop => {
            say(&format!("{signal}: stopping"));
            Ok(())
        }
    };
    let pid = plane.pid();
    let code = tokio::task::spawn_blocking(move || plane.terminate())
        .await
        .unwrap_or(None);
    let removed = !data_dir.exists();
    say(&format!(
        "stopped the control plane (pid {pid}, exit {}); data dir {} {}",
        code.map_or("unknown".to_string(), |c| c.to_string()),
        data_dir.display(),
        if removed { "removed" } else { "NOT removed" }
    ));
    if code != Some(0) {
        eprintln!(
            "the control plane did not stop cleanly; its log is in {}/logs",
            data_dir.display()
        );
    }
    result
}

/// Everything between "control plane ready" and "stop": runs until done (`--once`), an error,
/// or the caller drops it on Ctrl-C.
async fn demo(
    args: &Args,
    plane: &ControlPlane,
    samples: &[PathBuf],
    grow: &[PathBuf],
) -> anyhow::Result<()> {
    let log_path = plane.data_dir.join("logs").join("inpool.log");
    init_logging(&log_path)?;
    let client = plane.client().await?;

    say("step 2/4: running inpool's controllers in this process");
    let metrics = Metrics::new();
    let health = HealthState::with_metrics(&metrics);
    health.set_leader_state_known(true);
    health.set_leading(true);
    let listener = server::bind("127.0.0.1:0".parse()?).await?;
    let metrics_addr = listener.local_addr()?;
    let (server_stop, server_stopped) = watch::channel(false);
    let http = tokio::spawn(server::serve_on(
        listener,
        health.clone(),
        metrics.clone(),
        async move {
            let mut rx = server_stopped;
            let _ = rx.wait_for(|s| *s).await;
        },
    ));
    let settings = Settings::default();
    let mut controllers = tokio::spawn(inpool::controllers::run(
        client.clone(),
        settings,
        metrics.clone(),
        health.clone(),
    ));
    // Stops the controllers and the HTTP server whichever way this function ends.
    let _guard = AbortOnDrop(vec![controllers.abort_handle(), http.abort_handle()]);

    let info = vec![
        format!("kubeconfig: {}", plane.kubeconfig.display()),
        format!(
            "  try: KUBECONFIG={} kubectl get inclusterippools,globalinclusterippools,ipaddressclaims,ipaddresses -A",
            plane.kubeconfig.display()
        ),
        format!("inpool's metrics: http://{metrics_addr}/metrics"),
        format!("inpool's log: {}", log_path.display()),
    ];
    println!();
    for line in &info {
        println!("  {line}");
    }
    println!();

    say(&format!(
        "step 3/4: applying {}",
        samples
            .iter()
            .map(|p| display_path(p))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let objects = read_manifests(samples)?;
    apply_all(&client, &objects).await?;

    let tty = std::io::stdout().is_terminal();
    let mut screen = Screen::new(tty, info);
    let step_timeout = Duration::from_secs(args.step_timeout);
    let mut phase = Phase::Filling {
        since: Instant::now(),
        stable_ticks: 0,
        grow_at: None,
    };
    let mut previous: Option<String> = None;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            result = &mut controllers => {
                let result = result.map_err(anyhow::Error::from).and_then(|r| r);
                bail!("inpool's controllers stopped: {result:?} (log: {})", log_path.display());
            }
        }
        let snapshot = Snapshot::fetch(&client).await?;
        let picture = snapshot.render();
        let changed = previous.as_deref() != Some(picture.as_str());
        screen.show(&picture, changed);
        previous = Some(picture);

        phase = match phase {
            Phase::Filling {
                since,
                stable_ticks,
                grow_at,
            } => {
                let settled = snapshot.settled();
                let stable_ticks = if settled && !changed {
                    stable_ticks + 1
                } else {
                    0
                };
                if let Some(at) = grow_at {
                    if Instant::now() >= at {
                        grow_pools(&client, grow, &mut screen).await?;
                        Phase::Growing {
                            since: Instant::now(),
                        }
                    } else {
                        Phase::Filling {
                            since,
                            stable_ticks,
                            grow_at,
                        }
                    }
                } else if stable_ticks >= 1 {
                    let (ready, exhausted) = snapshot.tally();
                    screen.note(&format!(
                        "the first picture is stable: {ready} claims realised, {exhausted} waiting \
                         (Ready=False, PoolExhausted)"
                    ));
                    if exhausted == 0 || grow.is_empty() {
                        screen.note("nothing to grow");
                        Phase::Done
                    } else {
                        // Give a person in front of the terminal time to read the picture.
                        let pause = if tty {
                            Duration::from_secs(4)
                        } else {
                            Duration::ZERO
                        };
                        Phase::Filling {
                            since,
                            stable_ticks,
                            grow_at: Some(Instant::now() + pause),
                        }
                    }
                } else if since.elapsed() > step_timeout {
                    bail!(
                        "the claims did not settle within {step_timeout:?} (inpool's log: {})",
                        log_path.display()
                    );
                } else {
                    Phase::Filling {
                        since,
                        stable_ticks,
                        grow_at,
                    }
                }
            }
            Phase::Growing { since } => {
                if snapshot.all_ready() {
                    let (ready, _) = snapshot.tally();
                    screen.note(&format!(
                        "all {ready} claims are Ready: the waiting claims got the new addresses"
                    ));
                    Phase::Done
                } else if since.elapsed() > step_timeout {
                    bail!(
                        "the waiting claims were not realised within {step_timeout:?} after the \
                         pool grew (inpool's log: {})",
                        log_path.display()
                    );
                } else {
                    Phase::Growing { since }
                }
            }
            Phase::Done => Phase::Done,
        };
        if let Phase::Done = phase {
            if args.once {
                screen.finish(previous.as_deref().unwrap_or_default());
                break;
            }
            if !screen.told_to_stop {
                screen.note("showing the live picture; Ctrl-C stops inpool and the control plane");
                screen.told_to_stop = true;
            }
        }
    }
    let _ = server_stop.send(true);
    Ok(())
}

enum Phase {
    /// Samples applied; waiting for every claim to settle (then, after a pause, grow).
    Filling {
        since: Instant,
        stable_ticks: u32,
        grow_at: Option<Instant>,
    },
    /// The pool grew; waiting for every claim to be Ready.
    Growing {
        since: Instant,
    },
    Done,
}

async fn grow_pools(client: &Client, grow: &[PathBuf], screen: &mut Screen) -> anyhow::Result<()> {
    let objects = read_manifests(grow)?;
    let what: Vec<String> = objects
        .iter()
        .map(|o| {
            let addresses = o["spec"]["addresses"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            format!("{} {} to [{addresses}]", kind(o), qualified_name(o))
        })
        .collect();
    screen.note(&format!(
        "step 4/4: growing {} (applying {})",
        what.join("; "),
        grow.iter()
            .map(|p| display_path(p))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    apply_all(client, &objects).await
}

// ------------------------------------------------------------------------------------------
// The picture
// ------------------------------------------------------------------------------------------

struct PoolRow {
    kind: &'static str,
    namespace: Option<String>,
    name: String,
    family: String,
    counts: Result<(i64, i64, i64), String>,
    source: &'static str,
    waiting: usize,
    /// Claims of the pool that hold an address (Ready=True).
    realised: usize,
    conditions: String,
}

struct ClaimRow {
    namespace: String,
    name: String,
    pool: String,
    ready: String,
    reason: String,
    address: String,
}

struct Snapshot {
    pools: Vec<PoolRow>,
    claims: Vec<ClaimRow>,
}

impl Snapshot {
    async fn fetch(client: &Client) -> anyhow::Result<Snapshot> {
        let lp = ListParams::default();
        let pools = Api::<InClusterIPPool>::all(client.clone())
            .list(&lp)
            .await?;
        let global_pools = Api::<GlobalInClusterIPPool>::all(client.clone())
            .list(&lp)
            .await?;
        let claims = Api::<IPAddressClaim>::all(client.clone()).list(&lp).await?;
        let addresses = Api::<IPAddress>::all(client.clone()).list(&lp).await?;

        let mut claim_rows: Vec<ClaimRow> = claims
            .items
            .iter()
            .map(|claim| claim_row(claim, &addresses.items))
            .collect();
        claim_rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

        let mut pool_rows = Vec::new();
        for pool in &pools.items {
            let namespace = pool.namespace().unwrap_or_default();
            pool_rows.push(pool_row(
                pool,
                "InClusterIPPool",
                Some(namespace.clone()),
                &addresses.items,
                &claims.items,
            ));
        }
        for pool in &global_pools.items {
            pool_rows.push(pool_row(
                pool,
                "GlobalInClusterIPPool",
                None,
                &addresses.items,
                &claims.items,
            ));
        }
        Ok(Snapshot {
            pools: pool_rows,
            claims: claim_rows,
        })
    }

    /// Every claim has a Ready condition, each is realised or waiting for an address, and the
    /// pools' counts agree with the claims.
    fn settled(&self) -> bool {
        !self.claims.is_empty()
            && self.claims.iter().all(|c| {
                c.reason == REASON_ADDRESS_ALLOCATED
                    || (c.ready == "False" && c.reason == REASON_POOL_EXHAUSTED)
            })
            && self.pools_agree()
    }

    /// Every claim is Ready and the pools' counts agree with the claims.
    fn all_ready(&self) -> bool {
        !self.claims.is_empty()
            && self
                .claims
                .iter()
                .all(|c| c.ready == "True" && c.reason == REASON_ADDRESS_ALLOCATED)
            && self.pools_agree()
    }

    /// Each pool counts as used exactly the addresses of its realised claims (its status, written
    /// by inpool's pool controller, may lag a moment behind the claims).
    fn pools_agree(&self) -> bool {
        self.pools.iter().all(|p| match p.counts {
            Ok((_, used, _)) => usize::try_from(used).is_ok_and(|u| u == p.realised),
            Err(_) => true,
        })
    }

    /// (claims Ready, claims PoolExhausted)
    fn tally(&self) -> (usize, usize) {
        let ready = self.claims.iter().filter(|c| c.ready == "True").count();
        let exhausted = self
            .claims
            .iter()
            .filter(|c| c.reason == REASON_POOL_EXHAUSTED)
            .count();
        (ready, exhausted)
    }

    fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("POOLS\n");
        let rows: Vec<Vec<String>> = self
            .pools
            .iter()
            .map(|p| {
                let (total, used, free) = match &p.counts {
                    Ok((t, u, f)) => (t.to_string(), u.to_string(), f.to_string()),
                    Err(_) => ("-".into(), "-".into(), "-".into()),
                };
                let conditions = match &p.counts {
                    Err(e) => format!("{} ({e})", p.conditions),
                    Ok(_) => p.conditions.clone(),
                };
                vec![
                    p.kind.to_string(),
                    p.namespace.clone().unwrap_or_else(|| "-".into()),
                    p.name.clone(),
                    p.family.clone(),
                    total,
                    used,
                    free,
                    p.waiting.to_string(),
                    p.source.to_string(),
                    conditions,
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "KIND",
                "NAMESPACE",
                "NAME",
                "FAMILY",
                "TOTAL",
                "USED",
                "FREE",
                "WAITING",
                "COUNTS FROM",
                "CONDITIONS",
            ],
            &rows,
        ));
        out.push('\n');
        let (ready, exhausted) = self.tally();
        out.push_str(&format!(
            "CLAIMS ({} in all: {ready} Ready, {exhausted} PoolExhausted)\n",
            self.claims.len()
        ));
        let rows: Vec<Vec<String>> = self
            .claims
            .iter()
            .map(|c| {
                vec![
                    c.namespace.clone(),
                    c.name.clone(),
                    c.pool.clone(),
                    c.ready.clone(),
                    c.reason.clone(),
                    c.address.clone(),
                ]
            })
            .collect();
        out.push_str(&table(
            &["NAMESPACE", "NAME", "POOL", "READY", "REASON", "ADDRESS"],
            &rows,
        ));
        out
    }
}

fn claim_row(claim: &IPAddressClaim, addresses: &[IPAddress]) -> ClaimRow {
    let namespace = claim.namespace().unwrap_or_default();
    let ready = claim.conditions().iter().find(|c| c.type_ == "Ready");
    let address_ref = claim
        .status
        .as_ref()
        .and_then(|s| s.address_ref.as_ref())
        .map(|r| r.name.clone());
    let address = match address_ref {
        None => "-".to_string(),
        Some(name) => addresses
            .iter()
            .find(|a| a.namespace().as_deref() == Some(namespace.as_str()) && a.name_any() == name)
            .map(|a| format!("{}/{}", a.spec.address, a.spec.prefix))
            .unwrap_or_else(|| format!("{name}?")),
    };
    let pool_ref = &claim.spec.pool_ref;
    ClaimRow {
        namespace,
        name: claim.name_any(),
        pool: format!("{}/{}", pool_ref.kind, pool_ref.name),
        ready: ready.map_or("-".to_string(), |c| c.status.clone()),
        reason: ready.map_or("-".to_string(), |c| c.reason.clone()),
        address,
    }
}

/// A pool's row: counts from `status.ipAddresses` when the pool controller has written them,
/// else counted here from the spec and the `IPAddress`es that name the pool.
fn pool_row<P: IPPool>(
    pool: &P,
    kind: &'static str,
    namespace: Option<String>,
    addresses: &[IPAddress],
    claims: &[IPAddressClaim],
) -> PoolRow {
    let name = pool.name_any();
    let names_pool = |pool_ref: &inpool::api::IPPoolReference, object_namespace: Option<String>| {
        pool_ref.api_group == IPAM_GROUP
            && pool_ref.kind == kind
            && pool_ref.name == name
            && (namespace.is_none() || object_namespace == namespace)
    };
    let spec = pool.pool_spec();
    let input = PoolSpecInput {
        addresses: spec.addresses.clone(),
        prefix: i64::from(spec.prefix),
        gateway: spec.gateway.clone(),
        excluded_addresses: spec.excluded_addresses.clone().unwrap_or_default(),
        allocate_reserved_ip_addresses: spec.allocate_reserved_ip_addresses.unwrap_or(false),
    };
    let parsed = input.parse();
    let family = match parsed.as_ref().map(|p| p.family()) {
        Ok(Family::V4) => "IPv4",
        Ok(Family::V6) => "IPv6",
        Err(_) => "?",
    }
    .to_string();
    let status = pool.pool_status();
    let (counts, source) = match status.and_then(|s| s.ip_addresses) {
        Some(c) => (Ok((c.total, c.used, c.free)), "status"),
        None => {
            let counted = match parsed {
                Ok(parsed) => {
                    let mut allocator = Allocator::new(parsed.into_allocatable());
                    for a in addresses {
                        if names_pool(&a.spec.pool_ref, a.namespace())
                            && a.metadata.deletion_timestamp.is_none()
                            && let Ok(ip) = a.spec.address.parse::<IpAddr>()
                        {
                            allocator.mark_used(ip);
                        }
                    }
                    let c = allocator.counts().to_status();
                    Ok((c.total, c.used, c.free))
                }
                Err(e) => Err(format!("invalid spec: {e}")),
            };
            (counted, "IPAddresses")
        }
    };
    let ready_reasons: Vec<(String, String)> = claims
        .iter()
        .filter(|c| names_pool(&c.spec.pool_ref, c.namespace()))
        .filter_map(|c| {
            let ready = c.conditions().iter().find(|r| r.type_ == "Ready")?;
            Some((ready.status.clone(), ready.reason.clone()))
        })
        .collect();
    let waiting = ready_reasons
        .iter()
        .filter(|(_, reason)| reason == REASON_POOL_EXHAUSTED)
        .count();
    let realised = ready_reasons
        .iter()
        .filter(|(status, reason)| status == "True" && reason == REASON_ADDRESS_ALLOCATED)
        .count();
    let conditions = status
        .and_then(|s| s.conditions.as_ref())
        .filter(|c| !c.is_empty())
        .map(|list| {
            list.iter()
                .map(|c| {
                    if c.status == "True" {
                        format!("{}=True", c.type_)
                    } else {
                        format!("{}={} ({})", c.type_, c.status, c.reason)
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|| "(none yet)".to_string());
    PoolRow {
        kind,
        namespace,
        name,
        family,
        counts,
        source,
        waiting,
        realised,
        conditions,
    }
}

/// Plain-text columns, left-aligned, two spaces apart.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        text.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    if rows.is_empty() {
        out.push_str("(none)\n");
    }
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// Where the picture goes: redrawn in place on a terminal; printed as a snapshot whenever it
/// changes otherwise (a pipe, a file, a test).
struct Screen {
    tty: bool,
    /// Lines shown under the header of every frame on a terminal (where to find things).
    info: Vec<String>,
    notes: Vec<String>,
    told_to_stop: bool,
}

impl Screen {
    fn new(tty: bool, info: Vec<String>) -> Screen {
        Screen {
            tty,
            info,
            notes: Vec::new(),
            told_to_stop: false,
        }
    }

    fn header() -> String {
        let now = k8s_openapi::jiff::Timestamp::now();
        format!("=== inpool demo · {} UTC ===", now.strftime("%H:%M:%S"))
    }

    fn show(&mut self, picture: &str, changed: bool) {
        let mut out = std::io::stdout().lock();
        if self.tty {
            // Home, clear the screen, then the whole frame.
            let _ = writeln!(
                out,
                "\x1b[H\x1b[2J{}  (Ctrl-C stops everything)",
                Self::header()
            );
            for line in &self.info {
                let _ = writeln!(out, "{line}");
            }
            let _ = write!(out, "\n{picture}\n");
            for note in self.notes.iter().rev().take(6).rev() {
                let _ = writeln!(out, "» {note}");
            }
        } else if changed {
            let _ = write!(out, "{}\n{picture}\n", Self::header());
        }
        let _ = out.flush();
    }

    /// A step or an observation: under the picture on a terminal, a line of its own otherwise.
    fn note(&mut self, text: &str) {
        if self.tty {
            self.notes.push(text.to_string());
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "» {text}");
            let _ = out.flush();
        } else {
            say(text);
        }
    }

    /// The last picture, printed once more as the final one.
    fn finish(&mut self, picture: &str) {
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "\n{} (final)\n{picture}\n", Self::header());
        let _ = out.flush();
    }
}

/// A line of the demo's own narration.
fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "» {text}");
    let _ = out.flush();
}

// ------------------------------------------------------------------------------------------
// Manifests
// ------------------------------------------------------------------------------------------

fn read_manifests(files: &[PathBuf]) -> anyhow::Result<Vec<Value>> {
    let mut objects = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let documents: Vec<Value> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("parsing {}", file.display()))?;
        objects.extend(documents.into_iter().filter(|d| !d.is_null()));
    }
    // Clusters and pools before claims, so that no claim waits for its pool.
    objects.sort_by_key(|o| match kind(o) {
        "Namespace" => 0,
        "Cluster" => 1,
        "InClusterIPPool" | "GlobalInClusterIPPool" => 2,
        _ => 3,
    });
    Ok(objects)
}

fn kind(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

fn qualified_name(object: &Value) -> String {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// Server-side apply of each object, as `kubectl apply --server-side` does.
async fn apply_all(client: &Client, objects: &[Value]) -> anyhow::Result<()> {
    for object in objects {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind(object));
        let (resource, capabilities) = pinned_kind(client, &gvk)
            .await
            .with_context(|| format!("discovering {api_version} {}", kind(object)))?;
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default"),
                &resource,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let name = object["metadata"]["name"]
            .as_str()
            .context("an object without metadata.name")?;
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .with_context(|| format!("applying {} {}", kind(object), qualified_name(object)))?;
    }
    Ok(())
}

fn display_path(path: &Path) -> String {
    path.strip_prefix(testenv::repo_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

// ------------------------------------------------------------------------------------------
// Process plumbing
// ------------------------------------------------------------------------------------------

/// inpool's log, to a file: the terminal belongs to the picture.
fn init_logging(path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .try_init();
    Ok(())
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM and names it.
async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            return tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "Ctrl-C",
            };
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    "Ctrl-C"
}

struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for handle in &self.0 {
            handle.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_their_columns() {
        let text = table(
            &["A", "LONGER"],
            &[
                vec!["wide cell".into(), "x".into()],
                vec!["y".into(), "z".into()],
            ],
        );
        assert_eq!(text, "A          LONGER\nwide cell  x\ny          z\n");
    }
}
