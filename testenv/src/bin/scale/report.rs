//! The report: one Markdown table on stdout (runs as columns, figures as rows) and the same
//! figures as JSON.

use std::path::Path;

use serde::Serialize;

use crate::atsize::{self, AtSize, Idle, Restart, Trickle};
use crate::foreign::ForeignRun;
use crate::harness::Run;

/// Everything the JSON file holds.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Seconds since the Unix epoch when the run started.
    pub started_unix: u64,
    pub command_line: String,
    /// Git revision of the source tree the provider was built from.
    pub source: String,
    pub machine: Machine,
    pub concurrency: usize,
    pub floor_definition: String,
    pub runs: Vec<Run>,
    /// The foreign-claims scenario, when run.
    pub foreign: Option<ForeignRun>,
    /// With `--priority-level-shares`: what the API server counted at the provider's level.
    pub priority_level: Option<PriorityLevel>,
    pub targets: Vec<Target>,
    pub errors: Vec<String>,
}

/// The API Priority and Fairness level the provider ran in, and the API server's counts at it.
#[derive(Debug, Serialize)]
pub struct PriorityLevel {
    pub name: String,
    pub shares: u32,
    pub dispatched: f64,
    pub rejected: f64,
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub load_average_at_start: Option<f64>,
}

impl Machine {
    pub fn probe() -> Machine {
        let memory_kib: f64 = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(0.0);
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: memory_kib / 1024.0 / 1024.0,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            load_average_at_start: crate::harness::load_average(),
        }
    }
}

/// One of the harness's targets (time against the floor, memory), evaluated on a run.
#[derive(Debug, Serialize)]
pub struct Target {
    pub what: String,
    pub limit: f64,
    pub value: Option<f64>,
    pub met: bool,
}

/// The targets for the single-pool run of the provider: within 2× the floor (when the
/// floor was measured) and under 200 MiB peak memory.
pub fn targets(runs: &[Run]) -> Vec<Target> {
    let mut out = Vec::new();
    for run in runs
        .iter()
        // inpool's own targets: the floor and the reference are what it is measured against.
        .filter(|r| {
            r.scenario == "single" && !["floor", "reference"].contains(&r.provider.as_str())
        })
    {
        // Without a floor (--skip-floor) there is no ratio to hold against the limit.
        if let Some(ratio) = run.ratio_to_floor {
            out.push(Target {
                what: format!("{}: time to all Ready within 2× the floor", run.label),
                limit: 2.0,
                value: Some(ratio),
                met: ratio <= 2.0,
            });
        }
        let rss = run.provider_peak_rss_mib;
        out.push(Target {
            what: format!("{}: peak memory (VmHWM) under 200 MiB", run.label),
            limit: 200.0,
            value: rss,
            met: rss.is_some_and(|r| r < 200.0),
        });
        // A restart writes nothing and reconciles each claim at most once; idle writes
        // nothing.
        let at_size = run.at_size.as_ref();
        if let Some(restart) = at_size.and_then(|a| a.restart.as_ref()) {
            out.push(Target {
                what: format!("{}: API writes while a new process catches up", run.label),
                limit: 0.0,
                value: Some(restart.writes),
                met: restart.writes == 0.0,
            });
            let per_claim = restart.reconciles_per_existing_claim;
            out.push(Target {
                what: format!("{}: restart reconciles per existing claim", run.label),
                limit: 1.0,
                value: per_claim,
                met: per_claim.is_some_and(|r| r <= 1.0),
            });
        }
        if let Some(idle) = at_size.and_then(|a| a.idle.as_ref()) {
            out.push(Target {
                what: format!("{}: API writes while idle", run.label),
                limit: 0.0,
                value: Some(idle.writes),
                met: idle.writes == 0.0,
            });
        }
    }
    out
}

fn f(value: f64, decimals: usize) -> String {
    format!("{value:.decimals$}")
}

fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "–".to_string(), |v| f(v, decimals))
}

/// The runs as one Markdown table, columns aligned.
pub fn table(runs: &[Run]) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, cells: Vec<String>| rows.push((name.to_string(), cells));
    let each = |g: &dyn Fn(&Run) -> String| runs.iter().map(g).collect::<Vec<_>>();

    row("claims", each(&|r| r.claims.to_string()));
    row(
        "pools × claims per pool",
        each(&|r| format!("{} × {}", r.pools, r.claims / r.pools.max(1))),
    );
    row(
        "time to all Ready (s)",
        each(&|r| f(r.seconds_to_all_ready, 1)),
    );
    row("claims/s", each(&|r| f(r.claims_per_second, 0)));
    row(
        "× floor (time per claim)",
        each(&|r| opt(r.ratio_to_floor, 2)),
    );
    row("claim → Ready p50 (ms)", each(&|r| f(r.latency.p50_ms, 0)));
    row("claim → Ready p99 (ms)", each(&|r| f(r.latency.p99_ms, 0)));
    if runs.iter().any(|r| r.seconds_to_pools_ready.is_some()) {
        row(
            "every pool Ready at (s)",
            each(&|r| opt(r.seconds_to_pools_ready, 1)),
        );
    }
    row(
        "harness creates done at (s)",
        each(&|r| f(r.seconds_to_create, 1)),
    );
    row(
        "API writes/claim (besides the claim's create)",
        each(&|r| f(r.writes_per_claim, 2)),
    );
    let mut buckets: Vec<String> = runs
        .iter()
        .flat_map(|r| r.writes_per_claim_by_resource.keys().cloned())
        .collect();
    buckets.sort();
    buckets.dedup();
    for bucket in &buckets {
        row(
            &format!("  └ {bucket}"),
            each(&|r| opt(r.writes_per_claim_by_resource.get(bucket).copied(), 2)),
        );
    }
    row(
        "  of which refused (4xx)",
        each(&|r| f(r.refused_writes_per_claim, 2)),
    );
    for bucket in &buckets {
        row(
            &format!("API server ms/claim serving writes: {bucket}"),
            each(&|r| opt(r.write_ms_per_claim_by_resource.get(bucket).copied(), 2)),
        );
    }
    row("API GETs/claim", each(&|r| f(r.gets_per_claim, 2)));
    row(
        "requests answered 429, per claim",
        each(&|r| opt(r.throttled_requests.map(|t| t / r.claims.max(1) as f64), 2)),
    );
    row(
        "reconciles/claim",
        each(&|r| opt(r.reconciles_per_claim, 2)),
    );
    row(
        "provider CPU to all Ready (s)",
        each(&|r| opt(r.provider_cpu_seconds, 1)),
    );
    row(
        "every pool's status counts its claims at (s)",
        each(&|r| opt(r.seconds_to_pool_status, 1)),
    );
    row(
        "provider CPU until then (s)",
        each(&|r| opt(r.provider_cpu_seconds_to_pool_status, 1)),
    );
    row(
        "provider CPU per 1,000 claims (s)",
        each(&|r| {
            opt(
                r.provider_cpu_seconds
                    .map(|c| c * 1000.0 / r.claims.max(1) as f64),
                2,
            )
        }),
    );
    row(
        "provider RSS before the claims (MiB)",
        each(&|r| opt(r.provider_base_rss_mib, 1)),
    );
    row(
        "provider peak RSS (MiB)",
        each(&|r| opt(r.provider_peak_rss_mib, 1)),
    );
    row(
        "control plane CPU (s)",
        each(&|r| opt(r.control_plane_cpu_seconds, 1)),
    );
    row(
        "API server / etcd peak RSS since start, at the last Ready (MiB)",
        each(&|r| {
            let peaks = r.control_plane_peaks.unwrap_or_default();
            format!(
                "{} / {}",
                opt(peaks.api_server_mib, 0),
                opt(peaks.etcd_mib, 0)
            )
        }),
    );
    row("harness CPU (s)", each(&|r| opt(r.harness_cpu_seconds, 1)));
    row(
        "load average before → after",
        each(&|r| format!("{} → {}", opt(r.load_before, 1), opt(r.load_after, 1))),
    );
    row(
        "release all: time (s)",
        each(&|r| opt(r.release.as_ref().map(|x| x.seconds), 1)),
    );
    row(
        "release all: writes/claim",
        each(&|r| opt(r.release.as_ref().map(|x| x.writes_per_claim), 2)),
    );
    row(
        "correct (all Ready, distinct, no orphans)",
        each(&|r| match &r.correctness {
            None => "–".into(),
            Some(c) if c.ok => "yes".into(),
            Some(c) => format!("NO ({} problems)", c.problems.len()),
        }),
    );

    let header: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    render(header, rows)
}

/// The scenarios at size (restart, idle, trickle) of the runs that had them, one column each;
/// `None` when no run had them.
pub fn at_size_table(runs: &[Run]) -> Option<String> {
    let runs: Vec<(&Run, &AtSize)> = runs
        .iter()
        .filter_map(|r| Some((r, r.at_size.as_ref()?)))
        .collect();
    if runs.is_empty() {
        return None;
    }
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, cells: Vec<String>| rows.push((name.to_string(), cells));
    let each = |g: &dyn Fn(&AtSize) -> String| runs.iter().map(|(_, a)| g(a)).collect::<Vec<_>>();
    let restart = |g: &dyn Fn(&Restart) -> String| {
        each(&|a: &AtSize| a.restart.as_ref().map_or_else(|| "–".into(), g))
    };
    let idle = |g: &dyn Fn(&Idle) -> String| {
        each(&|a: &AtSize| a.idle.as_ref().map_or_else(|| "–".into(), g))
    };
    let trickle = |g: &dyn Fn(&Trickle) -> String| {
        each(&|a: &AtSize| a.trickle.as_ref().map_or_else(|| "–".into(), g))
    };
    let requests = |map: &atsize::Requests| {
        if map.is_empty() {
            "none".to_string()
        } else {
            map.iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join("; ")
        }
    };

    row("restart: signal", restart(&|r| r.signal.clone()));
    row(
        "restart: existing claims",
        restart(&|r| r.existing_claims.to_string()),
    );
    row(
        "restart: spawn → /readyz 200 (s)",
        restart(&|r| opt(r.seconds_to_ready, 1)),
    );
    row(
        "restart: spawn → last catch-up reconcile (s)",
        restart(&|r| f(r.seconds_to_caught_up, 1)),
    );
    row(
        "restart: provider API writes while catching up",
        restart(&|r| f(r.writes, 0)),
    );
    row(
        "  └ every write request (verb resource code: n)",
        restart(&|r| requests(&r.writes_by)),
    );
    row(
        "  └ reads (verb resource code: n)",
        restart(&|r| requests(&r.reads_by)),
    );
    row(
        "restart: claim reconciles",
        restart(&|r| opt(r.claim_reconciles, 0)),
    );
    row(
        "restart: reconciles per existing claim",
        restart(&|r| opt(r.reconciles_per_existing_claim, 3)),
    );
    row(
        "restart: reconcile errors",
        restart(&|r| opt(r.reconcile_errors, 0)),
    );
    row(
        "restart: CPU until caught up (s)",
        restart(&|r| opt(r.cpu_seconds, 1)),
    );
    row(
        "restart: RSS / peak when caught up (MiB)",
        restart(&|r| format!("{} / {}", opt(r.rss_mib, 1), opt(r.peak_rss_mib, 1))),
    );
    row(
        "restart 2: spawn → /readyz 200 (s)",
        restart(&|r| opt(r.probe_process_seconds_to_ready, 1)),
    );
    row(
        "restart 2: spawn → new claim Ready (s)",
        restart(&|r| f(r.probe_seconds_from_spawn, 1)),
    );
    row(
        "restart 2: new claim create → Ready (s)",
        restart(&|r| f(r.probe_seconds_from_create, 1)),
    );
    row(
        "restart 2: provider writes (new claim's included)",
        restart(&|r| f(r.probe_run_writes, 0)),
    );
    row(
        "  └ every write request (verb resource code: n)",
        restart(&|r| requests(&r.probe_run_writes_by)),
    );
    row("idle: window (s)", idle(&|i| f(i.seconds, 0)));
    row("idle: provider API writes", idle(&|i| f(i.writes, 0)));
    row(
        "  └ every write request (verb resource code: n)",
        idle(&|i| requests(&i.writes_by)),
    );
    row(
        "idle: GET / LIST / WATCH requests (all clients)",
        idle(&|i| format!("{} / {} / {}", i.gets, i.lists, i.watches)),
    );
    row(
        "  └ reads (verb resource code: n)",
        idle(&|i| requests(&i.reads_by)),
    );
    row("idle: audits run", idle(&|i| opt(i.audits, 0)));
    row(
        "idle: claim / pool reconciles",
        idle(&|i| {
            format!(
                "{} / {}",
                opt(i.claim_reconciles, 0),
                opt(i.pool_reconciles, 0)
            )
        }),
    );
    row("idle: CPU (s)", idle(&|i| opt(i.cpu_seconds, 2)));
    row(
        "idle: RSS at end / peak (MiB)",
        idle(&|i| format!("{} / {}", opt(i.rss_mib, 1), opt(i.peak_rss_mib, 1))),
    );
    row("trickle: claims", trickle(&|t| t.claims.to_string()));
    row(
        "trickle: claim → Ready p50 / p99 (ms)",
        trickle(&|t| format!("{} / {}", f(t.latency.p50_ms, 0), f(t.latency.p99_ms, 0))),
    );
    row(
        "trickle: create round trip p50 / p99 (ms)",
        trickle(&|t| {
            format!(
                "{} / {}",
                f(t.create_round_trip.p50_ms, 1),
                f(t.create_round_trip.p99_ms, 1)
            )
        }),
    );
    row(
        "trickle: provider writes per claim",
        trickle(&|t| f(t.writes_per_claim, 2)),
    );
    let header = runs.iter().map(|(r, _)| r.label.clone()).collect();
    Some(render(header, rows))
}

/// Runs as columns, figures as rows, columns aligned.
fn render(header: Vec<String>, rows: Vec<(String, Vec<String>)>) -> String {
    let mut widths: Vec<usize> = std::iter::once(
        rows.iter()
            .map(|(n, _)| n.chars().count())
            .max()
            .unwrap_or(0)
            .max("figure".len()),
    )
    .chain(header.iter().enumerate().map(|(i, h)| {
        rows.iter()
            .map(|(_, c)| c[i].chars().count())
            .chain([h.chars().count()])
            .max()
            .unwrap_or(0)
    }))
    .collect();
    for w in &mut widths {
        *w = (*w).max(3);
    }
    let line = |cells: Vec<String>, right: bool| {
        let mut out = String::from("|");
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            if right && i > 0 {
                out.push_str(&format!(" {}{} |", " ".repeat(pad), cell));
            } else {
                out.push_str(&format!(" {}{} |", cell, " ".repeat(pad)));
            }
        }
        out
    };
    let mut out = String::new();
    out.push_str(&line(
        std::iter::once("figure".to_string())
            .chain(header)
            .collect(),
        false,
    ));
    out.push('\n');
    let mut rule = String::from("|");
    for (i, w) in widths.iter().enumerate() {
        if i == 0 {
            rule.push_str(&format!("{}|", "-".repeat(w + 2)));
        } else {
            rule.push_str(&format!("{}:|", "-".repeat(w + 1)));
        }
    }
    out.push_str(&rule);
    out.push('\n');
    for (name, cells) in rows {
        out.push_str(&line(std::iter::once(name).chain(cells).collect(), true));
        out.push('\n');
    }
    out
}

pub fn write_json(path: &Path, report: &Report) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(report)? + "\n")?;
    Ok(())
}

/// The foreign-claims scenario as a Markdown table: the process that watched the foreign claims
/// arrive, and one restarted once they existed.
pub fn foreign_table(run: &ForeignRun) -> String {
    let mib = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}"));
    let count = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0}"));
    let bytes = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}"));
    let mut out = format!(
        "| {} claims of {} | watching them arrive | restarted with them |\n|---|---:|---:|\n",
        run.foreign_claims, run.pool_kind
    );
    let restarted = run.restarted.clone().unwrap_or_default();
    let w = &run.watching;
    let rows: [(&str, String, String); 9] = [
        (
            "resident memory: base → with the foreign claims (MiB)",
            format!("{} → {}", mib(w.rss_before_mib), mib(w.rss_after_mib)),
            format!(
                "{} → {}",
                mib(restarted.rss_before_mib),
                mib(restarted.rss_after_mib)
            ),
        ),
        (
            "peak resident memory (MiB)",
            mib(w.peak_after_mib),
            mib(restarted.peak_after_mib),
        ),
        (
            "**bytes per foreign claim** (resident memory)",
            bytes(run.bytes_per_claim_watching),
            bytes(run.bytes_per_claim_restarted),
        ),
        (
            "claims in the claim cache (`inpool_claims_watched`)",
            format!(
                "{} → {}",
                count(w.claims_watched_before),
                count(w.claims_watched_after)
            ),
            count(restarted.claims_watched_after),
        ),
        (
            "registry entries (`inpool_registry_entries`, summed)",
            format!(
                "{} → {}",
                count(w.registry_entries_before),
                count(w.registry_entries_after)
            ),
            count(restarted.registry_entries_after),
        ),
        (
            "claim reconciles / work-queue adds (the sentinel's)",
            format!("{} / {}", count(w.claim_reconciles), count(w.queue_adds)),
            format!(
                "{} / {}",
                count(restarted.claim_reconciles),
                count(restarted.queue_adds)
            ),
        ),
        (
            "API writes (the sentinel's)",
            format!("{:.0} {:?}", w.writes, w.writes_by),
            format!("{:.0} {:?}", restarted.writes, restarted.writes_by),
        ),
        (
            "inpool CPU (s)",
            w.cpu_seconds.map_or("–".into(), |v| format!("{v:.2}")),
            restarted
                .cpu_seconds
                .map_or("–".into(), |v| format!("{v:.2}")),
        ),
        (
            "foreign claims touched / their IPAddresses, reservations, Events",
            format!(
                "{} / {}, {}, {}",
                run.foreign_claims_touched,
                run.foreign_addresses,
                run.foreign_reservations,
                run.foreign_events
            ),
            "".into(),
        ),
    ];
    for (what, a, b) in rows {
        out.push_str(&format!("| {what} | {a} | {b} |\n"));
    }
    out.push_str(&format!(
        "\n(creating the {} claims took {:.1} s)\n",
        run.foreign_claims, run.seconds_to_create
    ));
    out
}
