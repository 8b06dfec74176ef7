//! docs/conformance.md's check-by-check table of every committed conformance report (inpool's
//! four and the peers', each a column) is made from the reports themselves: this test renders it from
//! `docs/conformance/*-report.yaml` and fails, printing the table to paste, when the doc's copy
//! differs, so that it cannot drift from the reports.

use std::path::{Path, PathBuf};

use inpool_testenv::repo_root;
use serde_json::Value;

/// The reports, in the table's column order: the file's name in `docs/conformance/` without
/// `-report.yaml`, and the column's heading.
const COLUMNS: &[(&str, &str)] = &[
    ("inpool-ip", "inpool `InClusterIPPool`"),
    ("inpool-prefix", "inpool `InClusterPrefixPool`"),
    ("inpool-global-ip", "inpool `GlobalInClusterIPPool`"),
    ("inpool-child-ip", "inpool carved `InClusterIPPool`"),
    ("reference-in-cluster", "reference v1.1.0"),
    ("reference-in-cluster-v1.0.3", "reference v1.0.3"),
    ("metal3-ipam", "Metal3 IPAM v1.13.2"),
];

/// The lines that open and close the generated table in docs/conformance.md.
const BEGIN: &str = "<!-- check-by-check: made from docs/conformance/*-report.yaml; tests/offline/conformance_table.rs fails when it differs -->";
const END: &str = "<!-- end of check-by-check -->";

/// One check's row in one report: its profile, level and result as the table shows it.
struct Cell {
    profile: String,
    id: String,
    level: String,
    shown: &'static str,
}

fn reports_dir() -> PathBuf {
    repo_root().join("docs").join("conformance")
}

fn report(dir: &Path, name: &str) -> Vec<Cell> {
    let path = dir.join(format!("{name}-report.yaml"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let report: Value = serde_saphyr::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
    let mut cells = Vec::new();
    for profile in report["profiles"].as_array().into_iter().flatten() {
        let declared = profile["result"].as_str() != Some("skipped");
        for check in profile["checks"].as_array().into_iter().flatten() {
            let field = |name: &str| check[name].as_str().unwrap_or_default().to_string();
            let shown = match (declared, check["result"].as_str()) {
                (false, _) => "not declared",
                (true, Some("pass")) => "pass",
                (true, Some("fail")) => "**fail**",
                (true, Some("skip")) => "skipped",
                (true, _) => "?",
            };
            cells.push(Cell {
                profile: profile["name"].as_str().unwrap_or_default().to_string(),
                id: field("id"),
                level: field("level"),
                shown,
            });
        }
    }
    cells
}

/// The table of the reports in `dir`, rows in the first report's order, then a row of
/// passed-of-declared counts.
fn table(dir: &Path) -> String {
    let reports: Vec<Vec<Cell>> = COLUMNS.iter().map(|(name, _)| report(dir, name)).collect();
    let mut lines = vec![
        format!(
            "| profile | check | level | {} |",
            COLUMNS
                .iter()
                .map(|(_, heading)| *heading)
                .collect::<Vec<_>>()
                .join(" | ")
        ),
        format!("|---|---|---|{}", "---|".repeat(COLUMNS.len())),
    ];
    for row in &reports[0] {
        let cells: Vec<&str> = reports
            .iter()
            .map(|cells| {
                cells
                    .iter()
                    .find(|cell| cell.id == row.id)
                    .map_or("not run", |cell| cell.shown)
            })
            .collect();
        lines.push(format!(
            "| {} | `{}` | {} | {} |",
            row.profile,
            row.id,
            row.level,
            cells.join(" | ")
        ));
    }
    let totals: Vec<String> = reports
        .iter()
        .map(|cells| {
            let declared = cells.iter().filter(|c| c.shown != "not declared").count();
            let passed = cells.iter().filter(|c| c.shown == "pass").count();
            format!("{passed} of {declared}")
        })
        .collect();
    lines.push(format!(
        "| | passed, of the declared profiles' checks | | {} |",
        totals.join(" | ")
    ));
    lines.join("\n")
}

#[test]
fn the_check_by_check_table_is_the_committed_reports() {
    let doc = std::fs::read_to_string(repo_root().join("docs").join("conformance.md"))
        .expect("docs/conformance.md");
    let (_, after) = doc
        .split_once(BEGIN)
        .expect("docs/conformance.md has the check-by-check table's opening line");
    let (in_doc, _) = after
        .split_once(END)
        .expect("docs/conformance.md has the check-by-check table's closing line");
    let expected = table(&reports_dir());
    assert_eq!(
        in_doc.trim(),
        expected,
        "docs/conformance.md's check-by-check table differs from the reports in \
         docs/conformance/; the table they make, to paste between its two marker lines:\n{expected}"
    );
}

#[test]
fn every_committed_report_has_a_column() {
    let mut reports: Vec<String> = std::fs::read_dir(reports_dir())
        .expect("docs/conformance/")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix("-report.yaml").map(str::to_string)
        })
        .collect();
    reports.sort();
    let mut columns: Vec<String> = COLUMNS.iter().map(|(name, _)| name.to_string()).collect();
    columns.sort();
    assert_eq!(
        reports, columns,
        "the table's columns (COLUMNS) are the reports in docs/conformance/"
    );
}

#[test]
fn a_changed_result_changes_its_cell_and_the_count() {
    // The reports copied, with Metal3's core-realised result flipped: the table must show it in
    // that cell and in Metal3's count, and nowhere else.
    let dir = std::env::temp_dir().join(format!("inpool-conformance-table-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    for (name, _) in COLUMNS {
        let file = format!("{name}-report.yaml");
        let mut text = std::fs::read_to_string(reports_dir().join(&file)).expect("a report");
        if *name == "metal3-ipam" {
            let at = text
                .find("- id: core-realised")
                .expect("Metal3's core-realised check");
            let result = at + text[at..].find("    result: pass").expect("it passed");
            text.replace_range(
                result..result + "    result: pass".len(),
                "    result: fail",
            );
        }
        std::fs::write(dir.join(&file), text).expect("writing the copy");
    }
    let before = table(&reports_dir());
    let after = table(&dir);
    std::fs::remove_dir_all(&dir).expect("removing the scratch directory");
    let changed: Vec<(&str, &str)> = before
        .lines()
        .zip(after.lines())
        .filter(|(b, a)| b != a)
        .collect();
    assert_eq!(changed.len(), 2, "two rows change: {changed:#?}");
    let column = 3 + COLUMNS
        .iter()
        .position(|(name, _)| *name == "metal3-ipam")
        .expect("a Metal3 column");
    let metal3 = |line: &str| {
        line.trim_matches('|')
            .split('|')
            .nth(column)
            .map(|cell| cell.trim().to_string())
    };
    assert!(changed[0].0.contains("`core-realised`"), "{changed:#?}");
    assert_eq!(metal3(changed[0].0).as_deref(), Some("pass"));
    assert_eq!(metal3(changed[0].1).as_deref(), Some("**fail**"));
    assert!(
        changed[1].0.contains("passed, of the declared"),
        "{changed:#?}"
    );
}
