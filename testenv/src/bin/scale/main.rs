//! Scale harness: how fast a provider realises thousands of claims on a local
//! control plane, side by side with the floor that control plane allows.
//!
//! ```text
//! cargo run --release --bin scale -- [--claims 10000] [--pre-allocations 1000]
//!     [--pools 10 --claims-per-pool 100] [--carved]
//!     [--global-pools 200 --global-namespaces 50] [--prefix-claims 1000] [--foreign-claims 100000]
//!     [--skip-floor] [--provider-command "CMD"] [--provider-name NAME] [--with-reference]
//!     [--json PATH]
//!     [--scenarios restart,idle,trickle] [--idle-window 600] [--trickle-claims 100]
//!     [--restart-signal term|kill] [--inpool-args "ARGS"] [--keep-claims]
//!     [--priority-level-shares N]
//! ```
//!
//! It starts its own control plane (`inpool-testenv`, the one the tests use; built by Go on first
//! use), with CAPI's CRDs from the Cluster API Go module (as the tests) and inpool's own CRDs
//! from `crds/`. Then, in order:
//!
//! 1. the floor: the same claims, realised by an ideal provider inside the harness that only
//!    writes (see `harness::FLOOR_DEFINITION`);
//! 2. the provider (inpool's release binary unless `--provider-command`) on N claims in one pool
//!    (with `--pre-allocations P`, the pool names P of them in `spec.preAllocations`);
//! 3. a fresh provider process on M pools × K claims (with `--carved`, twice: M pools of a /26
//!    each written in its spec, then M pools carving their /26 from one parent prefix pool, the
//!    pools made on the clock: see `harness::Carving`);
//! 4. with `--global-pools G`, a fresh provider process watching every namespace on G
//!    `GlobalInClusterIPPool`s × K claims, the claims spread over `--global-namespaces`
//!    namespaces so that each pool serves every namespace;
//! 5. with `--prefix-claims P`, a fresh provider process on P claims in one prefix pool (/64s out
//!    of a /48);
//! 6. with `--with-reference`, steps 2 to 5 again with the reference provider v1.1.0 (a claim
//!    counts as realised once its `status.addressRef` is set: the reference sets no condition);
//! 7. with `--foreign-claims F`, a fresh provider process beside F claims of a pool kind inpool
//!    does not serve (see `testenv/src/scale/foreign.rs`).
//!
//! With `--priority-level-shares N`, the provider runs as inpool's ServiceAccount with the shipped
//! RBAC, and API Priority and Fairness gives that ServiceAccount a priority level of its own of N
//! nominal shares (none lent, the surplus answered `429`), as a busy management cluster may; the
//! report adds the requests the API server dispatched and rejected at that level.
//!
//! With `--scenarios`, the scenarios at size run on the single-pool scenario once its
//! claims are Ready, before its check and release (see `testenv/src/scale/atsize.rs`): `restart`,
//! `idle`, `trickle`.
//!
//! Each provider run waits for a canary claim (the provider is up, caches synced), creates the
//! claims 16 at a time, waits until a watch sees every claim `Ready=True`, checks the result
//! (all Ready, distinct addresses inside their pools, one reservation per claim for inpool, no
//! orphan `IPAddress`), deletes every claim at once and checks nothing is left (not with
//! `--keep-claims`). It prints one
//! Markdown table and writes the same figures as JSON. Linux only (`/proc`).

mod report;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use clap::Parser;
use inpool_testenv::scale::{atsize, foreign, harness, process};
use inpool_testenv::{common, reference, repo_root, support};

use harness::{Run, Scenario};
use process::{ProviderSpec, StopSignal};

#[derive(Debug, Parser)]
#[command(name = "scale", about = "inpool's scale harness")]
struct Args {
    /// Claims in the single-pool scenario (0 skips it). The floor uses the same number.
    #[arg(long, default_value_t = 10_000)]
    claims: usize,
    /// Claims of the single-pool scenario its pool names in `spec.preAllocations` (at most
    /// --claims and 1,000): every (claims / N)-th claim, their addresses spread across the pool;
    /// the claims are created in the usual order.
    #[arg(long, default_value_t = 0)]
    pre_allocations: usize,
    /// Pools in the multi-pool scenario (0 skips it).
    #[arg(long, default_value_t = 10)]
    pools: usize,
    /// Claims per pool in the multi-pool and the global-pools scenarios.
    #[arg(long, default_value_t = 100)]
    claims_per_pool: usize,
    /// Runs the multi-pool scenario as the carved-pools comparison: its pools are IPv4 /26s,
    /// written in each pool's spec (`multi`), then carved by each pool from one parent
    /// `InClusterPrefixPool` of 10.0.0.0/8 (`carved`, `spec.parentPool` with 1 sub-prefix); on
    /// both, the pools are made once the clock runs and the claims created once every pool is
    /// Ready (at most 61 claims per pool).
    #[arg(long)]
    carved: bool,
    /// `GlobalInClusterIPPool`s in the global-pools scenario (0 skips it): --claims-per-pool
    /// claims each, spread over --global-namespaces namespaces, the provider watching every
    /// namespace.
    #[arg(long, default_value_t = 0)]
    global_pools: usize,
    /// Namespaces the claims of the global-pools scenario are spread over.
    #[arg(long, default_value_t = 50)]
    global_namespaces: usize,
    /// Claims in the prefix-pool scenario: one `InClusterPrefixPool` of a /48 handing out /64s
    /// (0 skips it).
    #[arg(long, default_value_t = 0)]
    prefix_claims: usize,
    /// Claims of another provider's pool kind (metal3's `IPPool`) beside one pool of inpool's,
    /// in a fresh provider process: what they cost inpool (0 skips it; inpool only).
    #[arg(long, default_value_t = 0)]
    foreign_claims: usize,
    /// Client concurrency: claims created at once by the harness, claims realised at once by the
    /// floor's ideal provider, and `{concurrency}` in the provider command (inpool's default).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Do not measure the floor (no ratio in the report).
    #[arg(long)]
    skip_floor: bool,
    /// Command that starts the provider under test, run as `sh -c 'exec COMMAND'`. Placeholders
    /// (substituted shell-quoted): {kubeconfig} (the control plane's admin kubeconfig; inpool's
    /// ServiceAccount's with --priority-level-shares),
    /// {namespace} (the scenario's namespace), {concurrency}, {metrics_addr}, {health_addr}
    /// (free 127.0.0.1 ports). Default: inpool's release binary with all five.
    #[arg(long)]
    provider_command: Option<String>,
    /// Name of the provider in the report. `inpool` also checks reservations and reads
    /// inpool's metrics on {metrics_addr}.
    #[arg(long)]
    provider_name: Option<String>,
    /// Also run every scenario with the reference provider, cluster-api-ipam-provider-in-cluster
    /// v1.1.0 (built from the Go module proxy as the tests' bed builds it), after the provider
    /// under test, on the same control plane and inpool's pool CRDs (a superset of its own).
    #[arg(long)]
    with_reference: bool,
    /// inpool binary to run (default: `cargo build --release --bin inpool`, then
    /// target/release/inpool).
    #[arg(long)]
    inpool_binary: Option<PathBuf>,
    /// Where to write the JSON report.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Longest wait for every claim of a scenario to be Ready (seconds).
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// Scenarios at size, run on the single-pool scenario once its claims are Ready
    /// (comma-separated): `restart` (stop the provider, start a new one twice: catch-up cost,
    /// then a new claim), `idle` (nothing changes for --idle-window), `trickle` (claims one at a
    /// time). None by default.
    #[arg(long, value_delimiter = ',', value_enum)]
    scenarios: Vec<AtSizeScenario>,
    /// Length of the idle window (seconds). inpool audits every 10 minutes by default: a
    /// shorter window may hold no audit (the report counts the audits in the window).
    #[arg(long, default_value_t = 600)]
    idle_window: u64,
    /// Claims created one at a time by the trickle scenario.
    #[arg(long, default_value_t = 100)]
    trickle_claims: usize,
    /// How the restart scenario stops the provider: `term` (SIGTERM, as a rolling upgrade) or
    /// `kill` (SIGKILL, as a crash or an OOM kill).
    #[arg(long, value_enum, default_value_t = RestartSignal::Term)]
    restart_signal: RestartSignal,
    /// More arguments for the default inpool command (e.g. `--audit-interval 60s`).
    #[arg(long, allow_hyphen_values = true)]
    inpool_args: Option<String>,
    /// Single-pool scenario: after the check, leave the claims in place (no release phase, no
    /// tear-down; the control plane goes with the run). For a size whose release was measured
    /// in another run: at 100,000 claims it takes as long again as realising.
    #[arg(long)]
    keep_claims: bool,
    /// Run the provider as inpool's ServiceAccount (the shipped RBAC applied) in an API Priority
    /// and Fairness priority level of its own with this many nominal concurrency shares, none
    /// lent, the surplus rejected (`429`). The harness itself stays exempt. inpool only.
    #[arg(long)]
    priority_level_shares: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum AtSizeScenario {
    Restart,
    Idle,
    Trickle,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum RestartSignal {
    Term,
    Kill,
}

impl Args {
    fn at_size(&self) -> atsize::Plan {
        let on = |s| self.scenarios.contains(&s);
        atsize::Plan {
            restart: on(AtSizeScenario::Restart).then_some(match self.restart_signal {
                RestartSignal::Term => StopSignal::Term,
                RestartSignal::Kill => StopSignal::Kill,
            }),
            restart_with_new_claim: true,
            idle: on(AtSizeScenario::Idle).then(|| Duration::from_secs(self.idle_window)),
            trickle: if on(AtSizeScenario::Trickle) {
                self.trickle_claims
            } else {
                0
            },
            keep_claims: self.keep_claims,
        }
    }
}

fn main() -> ExitCode {
    inpool_testenv::scale::main(run(Args::parse()))
}

/// CAPI's CRDs (from the Cluster API Go module) and inpool's own, as the tests install them.
fn crd_files() -> Vec<PathBuf> {
    support::crd_files()
}

/// `cargo build --release --bin inpool`, with the cargo that runs this harness.
fn build_inpool() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("building inpool (cargo build --release --bin inpool)");
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "--bin", "inpool"])
        .current_dir(repo_root())
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build --release --bin inpool failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    Ok(target.join("release").join("inpool"))
}

async fn run(args: Args) -> anyhow::Result<bool> {
    if !cfg!(target_os = "linux") {
        bail!("the scale harness reads /proc: Linux only");
    }
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let machine = report::Machine::probe();
    let source = source_revision();
    let out_dir = harness::scale_dir(&repo_root());
    let json_path = args
        .json
        .clone()
        .unwrap_or_else(|| out_dir.join("result.json"));

    let provider = match &args.provider_command {
        Some(command) => {
            let name = args
                .provider_name
                .clone()
                .unwrap_or_else(|| "provider".into());
            ProviderSpec {
                is_inpool: name == "inpool",
                name,
                command: command.clone(),
            }
        }
        None => {
            let binary = match &args.inpool_binary {
                Some(path) => path.clone(),
                None => tokio::task::spawn_blocking(build_inpool).await??,
            };
            if !binary.exists() {
                bail!("no inpool binary at {}", binary.display());
            }
            let mut spec = ProviderSpec::inpool(&binary);
            if let Some(name) = &args.provider_name {
                spec.name = name.clone();
            }
            if let Some(more) = &args.inpool_args {
                spec.command = format!("{} {more}", spec.command);
            }
            spec
        }
    };

    let data_dir = std::env::temp_dir().join(format!("inpool-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let crds = crd_files();
    eprintln!(
        "starting a dedicated control plane in {} with {} CRD files",
        data_dir.display(),
        crds.len()
    );
    let plane = {
        let data_dir = data_dir.clone();
        tokio::task::spawn_blocking(move || {
            support::ControlPlane::start_with_crds(&data_dir, true, &crds)
        })
        .await?
        .map_err(anyhow::Error::msg)?
    };
    eprintln!(
        "control plane ready in {:.1} s (kubeconfig {})",
        plane.startup_seconds,
        plane.kubeconfig.display()
    );
    let client = plane.client().await;
    let plane_pid = Some(plane.pid());
    if args.priority_level_shares.is_some() && (args.with_reference || !provider.is_inpool) {
        bail!(
            "--priority-level-shares runs inpool as its ServiceAccount with its RBAC: it is for \
             inpool alone (not with --with-reference or another --provider-command)"
        );
    }
    let provider_kubeconfig = match args.priority_level_shares {
        Some(shares) => throttle(&client, &plane.kubeconfig, shares).await?,
        None => plane.kubeconfig.clone(),
    };
    let timeout = Duration::from_secs(args.timeout);

    let mut runs: Vec<Run> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    let floor_claims = if args.claims > 0 {
        args.claims
    } else {
        args.pools * args.claims_per_pool
    };
    if !args.skip_floor && floor_claims > 0 {
        match harness::run_floor(&client, plane_pid, floor_claims, args.concurrency, timeout).await
        {
            Ok(run) => runs.push(run),
            Err(e) => {
                eprintln!("floor failed: {e:#}");
                errors.push(format!("floor: {e:#}"));
            }
        }
    }
    let at_size = args.at_size();
    if args.pre_allocations > 0 && args.claims == 0 {
        bail!("--pre-allocations is for the single-pool scenario: give --claims N (N > 0)");
    }
    if !at_size.is_empty() && args.claims == 0 {
        bail!("--scenarios runs on the single-pool scenario: give --claims N (N > 0)");
    }
    // Each scenario in its own namespace, `scale-NAME`.
    let scenario = |name: &str, pools: usize, claims_per_pool: usize| Scenario {
        name: name.into(),
        namespace: format!("scale-{name}"),
        pools,
        claims_per_pool,
        concurrency: args.concurrency,
        timeout,
        settle: true,
        sub_prefixes: None,
        at_size: atsize::Plan::default(),
        shared_by_namespaces: None,
        pre_allocations: 0,
        carving: None,
    };
    let mut scenarios = Vec::new();
    if args.claims > 0 {
        scenarios.push(Scenario {
            at_size,
            pre_allocations: args.pre_allocations,
            ..scenario("single", 1, args.claims)
        });
    }
    if args.pools > 0 && args.claims_per_pool > 0 {
        if args.carved {
            for (name, carving) in [
                ("multi", harness::Carving::Literal),
                ("carved", harness::Carving::FromParent),
            ] {
                scenarios.push(Scenario {
                    carving: Some(carving),
                    ..scenario(name, args.pools, args.claims_per_pool)
                });
            }
        } else {
            scenarios.push(scenario("multi", args.pools, args.claims_per_pool));
        }
    } else if args.carved {
        bail!("--carved is for the multi-pool scenario: give --pools M (M > 0)");
    }
    if args.global_pools > 0 && args.claims_per_pool > 0 {
        scenarios.push(Scenario {
            shared_by_namespaces: Some(args.global_namespaces.max(1)),
            ..scenario("global", args.global_pools, args.claims_per_pool)
        });
    }
    if args.prefix_claims > 0 {
        scenarios.push(Scenario {
            sub_prefixes: Some(64),
            ..scenario("prefix", 1, args.prefix_claims)
        });
    }
    let mut providers = vec![provider.clone()];
    if args.with_reference {
        let binary = tokio::task::spawn_blocking(|| reference::PROGRAM.binary())
            .await?
            .map_err(anyhow::Error::msg)?;
        providers.push(ProviderSpec::reference(&binary));
    }
    for (i, provider) in providers.iter().enumerate() {
        for scenario in &scenarios {
            // A namespace of its own for each provider after the first: the first one's may
            // still be terminating.
            let mut scenario = scenario.clone();
            if i > 0 {
                scenario.namespace = format!("{}-{}", scenario.namespace, provider.name);
            }
            match harness::run_scenario(
                &client,
                &provider_kubeconfig,
                plane_pid,
                provider,
                &scenario,
                &out_dir,
            )
            .await
            {
                Ok(run) => runs.push(run),
                Err(e) => {
                    eprintln!("{} / {} failed: {e:#}", provider.name, scenario.name);
                    errors.push(format!("{} / {}: {e:#}", provider.name, scenario.name));
                }
            }
        }
    }

    let mut foreign_run = None;
    if args.foreign_claims > 0 {
        let setup = foreign::Setup {
            kubeconfig: &provider_kubeconfig,
            provider: &provider,
            namespace: "scale-foreign",
            foreign_claims: args.foreign_claims,
            concurrency: args.concurrency,
            log_dir: &out_dir,
        };
        match foreign::run(&client, setup).await {
            Ok(run) => foreign_run = Some(run),
            Err(e) => {
                eprintln!("{} / foreign failed: {e:#}", provider.name);
                errors.push(format!("{} / foreign: {e:#}", provider.name));
            }
        }
    }

    let priority_level = match args.priority_level_shares {
        Some(shares) => {
            let page = common::apiserver_metrics(&client).await?;
            let (dispatched, rejected) = common::priority_level_counts(&page, PRIORITY_LEVEL);
            Some(report::PriorityLevel {
                name: PRIORITY_LEVEL.into(),
                shares,
                dispatched,
                rejected,
            })
        }
        None => None,
    };

    let floor_rate = runs
        .iter()
        .find(|r| r.provider == "floor")
        .map(|r| r.claims_per_second);
    for run in &mut runs {
        run.ratio_to_floor = floor_rate.map(|f| f / run.claims_per_second.max(1e-9));
    }
    let targets = report::targets(&runs);
    let correct = runs
        .iter()
        .filter_map(|r| r.correctness.as_ref())
        .all(|c| c.ok);

    println!();
    println!("{}", report::table(&runs));
    if let Some(table) = report::at_size_table(&runs) {
        println!("{table}");
    }
    if let Some(run) = &foreign_run {
        println!("{}", report::foreign_table(run));
    }
    for run in &runs {
        if let Some(c) = run.correctness.as_ref().filter(|c| !c.ok) {
            println!("{}: {} problems:", run.label, c.problems.len());
            for p in &c.problems {
                println!("  - {p}");
            }
        }
    }
    for target in &targets {
        println!(
            "target {}: {} (limit {}, measured {})",
            if target.met { "met" } else { "NOT met" },
            target.what,
            target.limit,
            target.value.map_or("–".into(), |v| format!("{v:.2}"))
        );
    }
    if let Some(level) = &priority_level {
        println!(
            "API Priority and Fairness: priority level {} ({} shares): {} requests dispatched, {} \
             rejected (429)",
            level.name, level.shares, level.dispatched, level.rejected
        );
    }
    for e in &errors {
        println!("error: {e}");
    }

    let report = report::Report {
        started_unix,
        command_line,
        source,
        machine,
        concurrency: args.concurrency,
        floor_definition: harness::FLOOR_DEFINITION.to_string(),
        runs,
        foreign: foreign_run,
        priority_level,
        targets,
        errors: errors.clone(),
    };
    report::write_json(&json_path, &report)?;
    println!("source: {}", report.source);
    println!("JSON: {}", display(&json_path));
    drop(plane);
    Ok(correct && errors.is_empty())
}

/// The priority level of `--priority-level-shares`.
const PRIORITY_LEVEL: &str = "inpool-scale";

/// Applies the shipped ServiceAccount and RBAC and a priority level of `shares` for it; returns a
/// kubeconfig that acts as that ServiceAccount.
async fn throttle(client: &kube::Client, admin: &Path, shares: u32) -> anyhow::Result<PathBuf> {
    let access = [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ];
    let objects: Vec<_> = common::components()
        .into_iter()
        .filter(|o| access.contains(&common::kind(o)))
        .collect();
    let params = kube::api::PatchParams::apply(common::FIELD_MANAGER);
    common::apply_objects(client, &objects, &params)
        .await
        .map_err(anyhow::Error::msg)?;
    common::apply_priority_level_for_inpool(client, PRIORITY_LEVEL, shares)
        .await
        .map_err(anyhow::Error::msg)?;
    Ok(common::service_account_kubeconfig(admin))
}

/// `git rev-parse --short HEAD`, and whether `src/` has uncommitted changes.
fn source_revision() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(repo_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        None => "unknown (not a git checkout)".into(),
        Some(head) => match git(&["status", "--porcelain", "--", "src", "Cargo.toml"]) {
            Some(changes) if !changes.is_empty() => {
                format!("{head} + uncommitted changes in src/")
            }
            _ => head,
        },
    }
}

fn display(path: &Path) -> String {
    path.strip_prefix(repo_root())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}
