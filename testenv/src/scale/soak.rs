//! What the soak run (`src/bin/soak.rs`) computes from its samples: the slope of a series after
//! warm-up, the duplicate check that holds at any moment of churn, and the picture (a small SVG
//! written by hand: a few panels of lines, with the kills and restarts marked).

use std::fmt::Write as _;

use inpool::allocator::AddrRange;
use inpool::api::IPAddress;
use kube::ResourceExt;

use crate::common::invariants::block_of;

/// One sample of a series: the process it was read from (`segment`: a new one after each kill),
/// when (seconds), and the value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub segment: u32,
    pub t: f64,
    pub y: f64,
}

/// Least-squares slope of `y` over `t` with one intercept per segment: each process starts from
/// its own level (a killed process's memory goes with it), and what the fit measures is how
/// fast a value grows while a process runs. `None` with fewer than two distinct times in any
/// segment.
pub fn slope(points: &[Point]) -> Option<f64> {
    let mut segments: Vec<u32> = points.iter().map(|p| p.segment).collect();
    segments.sort_unstable();
    segments.dedup();
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for segment in segments {
        let own: Vec<&Point> = points.iter().filter(|p| p.segment == segment).collect();
        let n = own.len() as f64;
        let mean_t = own.iter().map(|p| p.t).sum::<f64>() / n;
        let mean_y = own.iter().map(|p| p.y).sum::<f64>() / n;
        for p in own {
            sxy += (p.t - mean_t) * (p.y - mean_y);
            sxx += (p.t - mean_t) * (p.t - mean_t);
        }
    }
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Pairs of live `IPAddress`es whose blocks share an address, in words. Holds at any moment,
/// churn or not: two live `IPAddress`es never share an address, even for an instant.
pub fn duplicates(addresses: &[IPAddress]) -> Vec<String> {
    let mut blocks: Vec<(AddrRange, String)> = addresses
        .iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
        .filter_map(|a| Some((block_of(a)?, a.name_any())))
        .collect();
    blocks.sort_by_key(|(block, _)| (block.family(), block.first()));
    blocks
        .windows(2)
        .filter(|pair| {
            pair[0].0.family() == pair[1].0.family() && pair[0].0.contains(pair[1].0.first())
        })
        .map(|pair| {
            format!(
                "{} of IPAddress {} and {} of IPAddress {} share addresses",
                pair[0].0, pair[0].1, pair[1].0, pair[1].1
            )
        })
        .collect()
}

/// One line of a panel.
#[derive(Clone, Debug, Default)]
pub struct Line {
    pub name: String,
    /// `(x, y)`, x in minutes.
    pub points: Vec<(f64, f64)>,
}

/// One panel: its title (with the unit) and its lines, on a y axis from 0.
#[derive(Clone, Debug, Default)]
pub struct Panel {
    pub title: String,
    pub lines: Vec<Line>,
}

/// A vertical mark across every panel at `x` (minutes): a kill, a restart.
#[derive(Clone, Debug)]
pub struct Mark {
    pub x: f64,
    pub kind: MarkKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkKind {
    Kill,
    PlaneRestart,
}

const WIDTH: f64 = 900.0;
const PANEL_HEIGHT: f64 = 170.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const GAP: f64 = 45.0;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf",
];

/// The panels stacked, sharing an x axis from 0 to `x_max` minutes, the warm-up (until
/// `warm_up` minutes) shaded, kills (red) and control-plane restarts (blue) marked.
pub fn svg(title: &str, panels: &[Panel], marks: &[Mark], warm_up: f64, x_max: f64) -> String {
    svg_with_caption(
        title,
        panels,
        marks,
        warm_up,
        x_max,
        "minutes · shaded: warm-up · red dashes: inpool SIGKILLed · blue dashes: control plane restarted",
    )
}

/// The same picture with its own caption under the panels (what the x axis and the marks are).
pub fn svg_with_caption(
    title: &str,
    panels: &[Panel],
    marks: &[Mark],
    warm_up: f64,
    x_max: f64,
    caption: &str,
) -> String {
    let plot_width = WIDTH - LEFT - RIGHT;
    let height = TOP + panels.len() as f64 * (PANEL_HEIGHT + GAP) + 10.0;
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let sx = |x: f64| LEFT + x.clamp(0.0, x_max) / x_max * plot_width;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="20" font-size="14">{}</text>"#,
        escape(title)
    );
    for (i, panel) in panels.iter().enumerate() {
        let top = TOP + i as f64 * (PANEL_HEIGHT + GAP);
        let bottom = top + PANEL_HEIGHT;
        let y_max = nice_ceiling(
            panel
                .lines
                .iter()
                .flat_map(|l| l.points.iter().map(|p| p.1))
                .fold(0.0, f64::max),
        );
        let sy = |y: f64| bottom - (y / y_max).clamp(0.0, 1.0) * PANEL_HEIGHT;
        let _ = writeln!(
            out,
            r##"<rect x="{LEFT}" y="{top}" width="{:.1}" height="{PANEL_HEIGHT}" fill="#f0f0f0"/><rect x="{LEFT}" y="{top}" width="{plot_width}" height="{PANEL_HEIGHT}" fill="none" stroke="#888"/>"##,
            sx(warm_up) - LEFT
        );
        let _ = writeln!(
            out,
            r#"<text x="{LEFT}" y="{:.1}" font-weight="bold">{}</text>"#,
            top - 6.0,
            escape(&panel.title)
        );
        for tick in 0..=4 {
            let value = y_max * f64::from(tick) / 4.0;
            let y = sy(value);
            let _ = writeln!(
                out,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + plot_width,
                LEFT - 4.0,
                y + 4.0,
                tick_label(value)
            );
        }
        for mark in marks {
            let colour = match mark.kind {
                MarkKind::Kill => "#d62728",
                MarkKind::PlaneRestart => "#1f3fbf",
            };
            let x = sx(mark.x);
            let _ = writeln!(
                out,
                r#"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="{colour}" stroke-dasharray="3,3"/>"#
            );
        }
        for (j, line) in panel.lines.iter().enumerate() {
            let colour = COLOURS[j % COLOURS.len()];
            let path: Vec<String> = line
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
                .collect();
            if !path.is_empty() {
                let _ = writeln!(
                    out,
                    r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
                    path.join(" ")
                );
            }
            let y = top + 14.0 + j as f64 * 16.0;
            let x = LEFT + plot_width + 10.0;
            let _ = writeln!(
                out,
                r#"<line x1="{x}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2"/><text x="{:.1}" y="{y:.1}">{}</text>"#,
                y - 4.0,
                x + 16.0,
                y - 4.0,
                x + 20.0,
                escape(&line.name)
            );
        }
        let step = nice_ceiling(x_max / 6.0);
        let mut x = 0.0;
        while x <= x_max + 1e-9 {
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                sx(x),
                bottom + 14.0,
                tick_label(x)
            );
            x += step;
        }
    }
    let legend_y = height - 6.0;
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{legend_y:.1}">{}</text>"#,
        escape(caption)
    );
    out.push_str("</svg>\n");
    out
}

/// The smallest of 1, 2, 2.5, 5 × 10ⁿ at or above `value` (1 for 0).
fn nice_ceiling(value: f64) -> f64 {
    if value <= 0.0 || !value.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|v| *v >= value * (1.0 - 1e-12))
        .unwrap_or(10.0 * magnitude)
}

fn tick_label(value: f64) -> String {
    if value.fract().abs() < 1e-9 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use inpool::api::{IPAddressClaimReference, IPAddressSpec, IPPoolReference};

    fn points(segment: u32, line: impl Fn(f64) -> f64, ts: &[f64]) -> Vec<Point> {
        ts.iter()
            .map(|&t| Point {
                segment,
                t,
                y: line(t),
            })
            .collect()
    }

    #[test]
    fn the_slope_of_a_line_is_its_slope() {
        let p = points(0, |t| 3.0 + 0.5 * t, &[0.0, 1.0, 2.0, 5.0]);
        assert!((slope(&p).unwrap() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn each_process_keeps_its_own_level() {
        // Two processes that grow at the same rate from different levels: the slope is that
        // rate, not the drop at the restart.
        let mut p = points(0, |t| 100.0 + 2.0 * t, &[0.0, 10.0, 20.0]);
        p.extend(points(1, |t| 2.0 * t - 50.0, &[30.0, 40.0, 50.0, 60.0]));
        assert!((slope(&p).unwrap() - 2.0).abs() < 1e-12);
        // Flat in each process, at different levels: flat.
        let mut flat = points(0, |_| 80.0, &[0.0, 1.0]);
        flat.extend(points(1, |_| 20.0, &[2.0, 3.0]));
        assert_eq!(slope(&flat), Some(0.0));
    }

    #[test]
    fn no_slope_without_two_times_in_a_process() {
        assert_eq!(slope(&[]), None);
        assert_eq!(slope(&points(0, |t| t, &[4.0])), None);
        assert_eq!(
            slope(&[points(0, |t| t, &[1.0]), points(1, |t| t, &[2.0])].concat()),
            None
        );
    }

    fn address(name: &str, ip: &str, kind: &str, prefix: i32) -> IPAddress {
        IPAddress::new(
            name,
            IPAddressSpec {
                address: ip.into(),
                prefix,
                gateway: None,
                claim_ref: IPAddressClaimReference { name: name.into() },
                pool_ref: IPPoolReference::new("ipam.cluster.x-k8s.io", kind, "p"),
            },
        )
    }

    #[test]
    fn duplicates_are_blocks_that_share_an_address() {
        let distinct = [
            address("a", "10.0.0.1", "InClusterIPPool", 16),
            address("b", "10.0.0.2", "InClusterIPPool", 16),
        ];
        assert!(duplicates(&distinct).is_empty());
        let twice = [
            address("a", "10.0.0.1", "InClusterIPPool", 16),
            address("b", "10.0.0.1", "InClusterIPPool", 16),
        ];
        assert_eq!(duplicates(&twice).len(), 1);
        let inside = [
            address("a", "fd00::", "InClusterPrefixPool", 64),
            address("b", "fd00::5", "InClusterIPPool", 64),
        ];
        assert_eq!(duplicates(&inside).len(), 1, "an address inside a held /64");
    }

    #[test]
    fn the_picture_has_a_panel_per_panel_a_line_per_line_and_every_mark() {
        let panels = [
            Panel {
                title: "RSS <MiB>".into(),
                lines: vec![Line {
                    name: "rss".into(),
                    points: vec![(0.0, 10.0), (30.0, 12.0), (60.0, 11.0)],
                }],
            },
            Panel {
                title: "entries".into(),
                lines: vec![
                    Line {
                        name: "a".into(),
                        points: vec![(0.0, 1.0), (60.0, 1.0)],
                    },
                    Line {
                        name: "b".into(),
                        points: vec![],
                    },
                ],
            },
        ];
        let marks = [
            Mark {
                x: 10.0,
                kind: MarkKind::Kill,
            },
            Mark {
                x: 20.0,
                kind: MarkKind::PlaneRestart,
            },
        ];
        let text = svg("soak", &panels, &marks, 5.0, 60.0);
        assert!(text.starts_with("<svg") && text.ends_with("</svg>\n"));
        assert_eq!(
            text.matches("<polyline").count(),
            2,
            "an empty line draws nothing"
        );
        assert_eq!(
            text.matches("stroke=\"#d62728\"").count(),
            2,
            "a kill in each panel"
        );
        assert_eq!(text.matches("stroke=\"#1f3fbf\"").count(), 2);
        assert!(text.contains("RSS &lt;MiB&gt;"));
        // The last point of the first line sits at the right edge.
        assert!(text.contains(&format!("{:.1},", WIDTH - RIGHT)));
    }

    #[test]
    fn axes_end_on_round_numbers() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(10.0), 10.0);
        assert_eq!(nice_ceiling(180.0), 200.0);
        assert_eq!(nice_ceiling(23.0), 25.0);
        assert_eq!(nice_ceiling(0.3), 0.5);
    }
}
