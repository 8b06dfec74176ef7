//! `cargo run --bin demo`: inpool on a local control plane, with a live picture of its pools and
//! claims.
//!
//! 1. Builds (first run only) and starts the local control plane from `testenv/` (etcd,
//!    kube-apiserver, garbage collector) with inpool's CRDs (`crds/`) and the local-use-only CAPI
//!    CRDs (`config/local-capi/`), so that no Cluster API installation is needed.
//! 2. Runs inpool's controllers in this process, as the `inpool` binary does (its log goes to a
//!    file, so the terminal shows the picture), and serves its `/metrics` on 127.0.0.1.
//! 3. Applies `config/samples/*.yaml` with server-side apply: a Cluster, a 5-address IPv4 pool, a
//!    global IPv6 pool, a global prefix pool (/64s out of a /56), an IPv4 pool spanning two
//!    subnets with a pre-allocation, and 15 claims, 8 of them for the 5-address pool.
//! 4. Shows pools (total/used/free, conditions) and claims (Ready, reason, address) every second.
//!    Once every claim has a Ready condition and the picture is stable (12 realised, 3
//!    `PoolExhausted`), says what each pre-allocated claim and each address of an additional
//!    subnet holds (prefix and gateway), then applies `config/samples/grow/*.yaml`, which grows
//!    the 5-address pool to 8 addresses, and the waiting claims turn Ready.
//! 5. Keeps showing the picture until Ctrl-C (or, with `--once`, exits 0 once every claim is
//!    Ready), then stops the controllers and the control plane and removes its data directory.
//!
//! inpool runs in-process rather than as a child `inpool` process: `cargo run --bin demo` then
//! builds one binary, one Ctrl-C handler stops everything in order, and inpool's log can go to
//! a file instead of over the picture.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use kube::Client;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{Scope, pinned_kind};
use serde_json::Value;
use tokio::sync::watch;

use inpool::api::PoolKind;
use inpool::cli::Settings;
use inpool::inspect::{self, Snapshot};
use inpool::telemetry::{HealthState, Metrics, server};
use inpool_testenv::{self as testenv, ControlPlane, StartOptions};

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
        start_timeout: None,
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
    let listener = server::bind("127.0.0.1:0".parse()?, server::Paths::All).await?;
    let metrics_addr = listener.local_addr()?;
    let (server_stop, server_stopped) = watch::channel(false);
    let http = tokio::spawn(server::serve_on(
        listener,
        server::router(server::Paths::All, health.clone(), metrics.clone()),
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
            "  try: KUBECONFIG={} kubectl get inclusterippools,globalinclusterippools,globalinclusterprefixpools,ipaddressclaims,ipaddresses -A",
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
        let snapshot = Snapshot::fetch(&client, None).await?;
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
                    for line in inspect::pre_allocations_and_subnets(&client).await? {
                        screen.note(&line);
                    }
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
        pool if PoolKind::from_name(pool).is_some() => 2,
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
