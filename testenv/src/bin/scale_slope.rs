//! The slope picture of docs/performance.md: inpool's figures at 1,000, 10,000 and 100,000 claims
//! in one pool, each from one run of the scale harness, drawn with the soak run's panels.
//!
//! ```text
//! cargo run --release --bin scale_slope -- --out docs/scale-slope.svg \
//!     --point CLAIMS:SECONDS:FLOOR_SECONDS:PEAK_MIB ...
//! ```
//!
//! Each `--point` is one run: its claims, its time to all Ready (s), the floor's time in the same
//! run (`-` when the run measured none) and inpool's peak resident memory (MiB). The picture has
//! two panels over the claims: time to all Ready (inpool and the floor), and peak memory beside
//! the Deployment's 256 Mi limit.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Parser;
use inpool_testenv::scale::soak::{self, Line, Panel};

/// The Deployment's memory limit (`config/manager`), MiB.
const MEMORY_LIMIT_MIB: f64 = 256.0;

#[derive(Debug, Parser)]
#[command(
    name = "scale_slope",
    about = "draws inpool's figures against the claims"
)]
struct Args {
    /// Where to write the SVG.
    #[arg(long)]
    out: PathBuf,
    /// One run: CLAIMS:SECONDS:FLOOR_SECONDS:PEAK_MIB (FLOOR_SECONDS `-` when not measured).
    #[arg(long = "point", required = true)]
    points: Vec<String>,
}

struct Run {
    claims: f64,
    seconds: f64,
    floor_seconds: Option<f64>,
    peak_mib: f64,
}

fn parse(point: &str) -> anyhow::Result<Run> {
    let fields: Vec<&str> = point.split(':').collect();
    let [claims, seconds, floor, peak] = fields[..] else {
        bail!("--point {point}: want CLAIMS:SECONDS:FLOOR_SECONDS:PEAK_MIB");
    };
    let number = |text: &str| {
        text.parse::<f64>()
            .with_context(|| format!("--point {point}: `{text}` is no number"))
    };
    Ok(Run {
        claims: number(claims)?,
        seconds: number(seconds)?,
        floor_seconds: if floor == "-" {
            None
        } else {
            Some(number(floor)?)
        },
        peak_mib: number(peak)?,
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut runs = args
        .points
        .iter()
        .map(|p| parse(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    runs.sort_by(|a, b| a.claims.total_cmp(&b.claims));
    // Thousands of claims on the x axis.
    let x = |run: &Run| run.claims / 1000.0;
    let x_max = runs.iter().map(x).fold(0.0, f64::max);
    let panels = [
        Panel {
            title: "time to all Ready (s)".into(),
            lines: vec![
                Line {
                    name: "inpool".into(),
                    points: runs.iter().map(|r| (x(r), r.seconds)).collect(),
                },
                Line {
                    name: "floor, same run".into(),
                    points: runs
                        .iter()
                        .filter_map(|r| Some((x(r), r.floor_seconds?)))
                        .collect(),
                },
            ],
        },
        Panel {
            title: "inpool peak resident memory (MiB)".into(),
            lines: vec![
                Line {
                    name: "inpool".into(),
                    points: runs.iter().map(|r| (x(r), r.peak_mib)).collect(),
                },
                Line {
                    name: "256 Mi limit".into(),
                    points: vec![(0.0, MEMORY_LIMIT_MIB), (x_max, MEMORY_LIMIT_MIB)],
                },
            ],
        },
    ];
    // A line needs two points: a floor measured at one size only is left out of the picture.
    let panels = panels.map(|mut panel| {
        panel.lines.retain(|line| line.points.len() >= 2);
        panel
    });
    let text = soak::svg_with_caption(
        "inpool, claims in one pool",
        &panels,
        &[],
        0.0,
        x_max,
        "thousands of claims · each point one run of the scale harness (docs/performance.md)",
    );
    std::fs::write(&args.out, text).with_context(|| format!("writing {}", args.out.display()))?;
    Ok(())
}
