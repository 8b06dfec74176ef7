//! docs/architecture.md names, in its "decides / performs" table, the function behind each step
//! of a claim's reconcile. Each name must be a function that exists where the path says, so that
//! the table cannot drift from the code it describes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use inpool_testenv::repo_root;

/// The backticked paths in the table under `heading` (cells only, `a::b::c` with at least one
/// `::`), e.g. `claims::reconcile::gate`.
fn table_paths(doc: &str, heading: &str) -> Vec<String> {
    let section = doc
        .split_once(heading)
        .unwrap_or_else(|| panic!("docs/architecture.md has no heading {heading:?}"))
        .1;
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .lines()
        .filter(|line| line.starts_with('|'))
        .flat_map(|line| line.split('`').skip(1).step_by(2))
        .filter(|path| path.contains("::") && !path.contains(' '))
        .map(str::to_string)
        .collect()
}

/// The source file of the longest module prefix of `segments` under `src/controllers/`, and how
/// many segments it took.
fn module_file(controllers: &Path, segments: &[&str]) -> Option<(PathBuf, usize)> {
    (1..segments.len()).rev().find_map(|taken| {
        let dir = segments[..taken]
            .iter()
            .fold(controllers.to_path_buf(), |dir, s| dir.join(s));
        [dir.with_extension("rs"), dir.join("mod.rs")]
            .into_iter()
            .find(|file| file.is_file())
            .map(|file| (file, taken))
    })
}

/// The text of `file`, and of every `.rs` file beside it in its module's folder (an `impl` block
/// may live in a child module of the type's).
fn module_text(file: &Path) -> String {
    let mut text = std::fs::read_to_string(file).unwrap();
    let folder = if file.ends_with("mod.rs") {
        file.parent().map(Path::to_path_buf)
    } else {
        Some(file.with_extension(""))
    };
    if let Some(Ok(entries)) = folder.map(std::fs::read_dir) {
        for entry in entries.flatten() {
            if entry.path().extension().is_some_and(|e| e == "rs") {
                text.push_str(&std::fs::read_to_string(entry.path()).unwrap());
            }
        }
    }
    text
}

#[test]
fn every_function_of_the_decides_performs_table_exists() {
    let root = repo_root();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let controllers = root.join("src/controllers");
    let paths = table_paths(&doc, "## A claim's reconcile, step by step");
    assert!(
        paths.len() >= 15,
        "the table names too few functions: {paths:?}"
    );
    let mut missing = Vec::new();
    for path in &paths {
        let segments: Vec<&str> = path.split("::").collect();
        let function = segments[segments.len() - 1];
        // `Step::Ready`, `Allocation::Recover`: variants named beside the planner, not paths.
        if function.starts_with(char::is_uppercase) {
            continue;
        }
        let Some((file, taken)) = module_file(&controllers, &segments) else {
            missing.push(format!("{path}: no module src/controllers/{}", segments[0]));
            continue;
        };
        let type_name = segments[taken..segments.len() - 1].first();
        // A free function is looked for in its module's file; a method also in the files of
        // the module's folder (an `impl` may live in a child module of the type's).
        let text = match type_name {
            Some(_) => module_text(&file),
            None => std::fs::read_to_string(&file).unwrap(),
        };
        let type_found = type_name.is_none_or(|t| {
            text.contains(&format!("struct {t}")) || text.contains(&format!("impl {t} "))
        });
        let defines = |text: &str| {
            text.contains(&format!("fn {function}(")) || text.contains(&format!("fn {function}<"))
        };
        if !type_found || !defines(&text) {
            missing.push(format!("{path}: not in {}", file.display()));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md names functions that do not exist:\n{}",
        missing.join("\n")
    );
}

/// The layers of `src/`, from the bottom up, as `src/lib.rs` states them: a module imports only
/// modules of its own layer or below.
const LAYERS: [&str; 8] = [
    "allocator",
    "api",
    "settings",
    "telemetry",
    "controllers",
    "leader",
    "inspect",
    "cli",
];

/// The room of a module: its top-level module, or under `controllers` the room inside it
/// (`controllers/claims`, `controllers/context`).
fn room(module: &[String]) -> String {
    match module {
        [top, inner, ..] if top == "controllers" => format!("{top}/{inner}"),
        [top, ..] => top.clone(),
        [] => String::new(),
    }
}

/// The module a file of `src/` is: `src/a/b.rs` and `src/a/b/mod.rs` are `a/b`.
fn module_of(file: &str) -> Vec<String> {
    let path = file.trim_end_matches(".rs");
    let mut segments: Vec<String> = path.split('/').map(str::to_string).collect();
    if segments.last().is_some_and(|s| s == "mod" || s == "lib") {
        segments.pop();
    }
    segments
}

/// The code of a file without its comments and its inline unit tests: each `#[cfg(test)]` item
/// that opens a block (`mod tests { ... }`) is cut to its closing brace; everything around it,
/// before or after, stays.
fn code(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect();
    let mut kept = Vec::new();
    let mut lines = lines.into_iter();
    while let Some(line) = lines.next() {
        if line.trim() != "#[cfg(test)]" {
            kept.push(line);
            continue;
        }
        let Some(item) = lines.next() else { break };
        if !item.trim_end().ends_with('{') {
            continue; // `mod tests;`, a test-only `use` or function signature on one line
        }
        let mut depth = 1i32;
        for inner in lines.by_ref() {
            depth += inner.matches('{').count() as i32 - inner.matches('}').count() as i32;
            if depth <= 0 {
                break;
            }
        }
    }
    kept.join("\n")
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let path: String = path.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = path.find('{') else {
        return vec![path];
    };
    let (prefix, inner) = (&path[..open], &path[open + 1..path.len() - 1]);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|part| !part.is_empty())
        .flat_map(|part| expand(&format!("{prefix}{part}")))
        .collect()
}

/// Every path the code names from `crate`, `super` or `self`: its `use` declarations, braces
/// expanded, and the paths it spells out inline.
fn named_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = ["crate::", "super::", "self::"]
        .iter()
        .filter_map(|start| {
            rest.match_indices(start)
                .find(|(i, _)| {
                    !rest[..*i]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
                })
                .map(|(i, _)| i)
        })
        .min()
    {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let (path, taken) = if tail[end..].starts_with('{') {
            // `use a::{...};`: up to the brace that closes the first.
            let mut depth = 0;
            let close = tail[end..]
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(tail.len(), |(i, _)| end + i + 1);
            (tail[..close].to_string(), close)
        } else {
            (tail[..end].to_string(), end)
        };
        paths.extend(expand(&path));
        rest = &tail[taken.max(1)..];
    }
    paths
}

/// The module of `src/` a path named in `module` reaches: its longest prefix that is a module.
fn target(modules: &BTreeSet<Vec<String>>, module: &[String], path: &str) -> Option<Vec<String>> {
    let mut segments: Vec<&str> = path.split("::").collect();
    let mut base: Vec<String> = match segments[0] {
        "crate" => Vec::new(),
        _ => module.to_vec(),
    };
    if segments[0] == "crate" || segments[0] == "self" {
        segments.remove(0);
    }
    while segments.first() == Some(&"super") {
        base.pop();
        segments.remove(0);
    }
    base.extend(
        segments
            .iter()
            .map(|s| s.split(" as ").next().unwrap().to_string()),
    );
    (1..=base.len())
        .rev()
        .map(|n| base[..n].to_vec())
        .find(|prefix| modules.contains(prefix))
}

/// Every import of one module by another in `files` (path under `src/` → text), as (importer,
/// imported); test-only files and the binaries left out.
fn imports(files: &BTreeMap<String, String>) -> BTreeSet<(Vec<String>, Vec<String>)> {
    let product = |file: &&String| {
        !file.starts_with("bin/")
            && file.as_str() != "main.rs"
            && !file.ends_with("/tests.rs")
            && !file.ends_with("/fixtures.rs")
            && !file.contains("/tests/")
    };
    let modules: BTreeSet<Vec<String>> = files.keys().map(|f| module_of(f)).collect();
    let mut edges = BTreeSet::new();
    for (file, text) in files.iter().filter(|(f, _)| product(f)) {
        let module = module_of(file);
        for path in named_paths(&code(text)) {
            let Some(to) = target(&modules, &module, &path) else {
                continue;
            };
            // A module's own items and its children are its own business.
            if to.starts_with(&module) || module.starts_with(&to) {
                continue;
            }
            edges.insert((module.clone(), to));
        }
    }
    edges
}

/// What breaks the layering: an import of a higher layer, an import by `controllers/runtime` of
/// another room of `controllers`, and every circle of modules that spans two rooms.
fn layering_faults(files: &BTreeMap<String, String>) -> Vec<String> {
    let edges = imports(files);
    let layer = |module: &[String]| {
        LAYERS
            .iter()
            .position(|l| module.first().is_some_and(|m| m == l))
    };
    let name = |module: &[String]| module.join("/");
    let mut faults = Vec::new();
    for (from, to) in &edges {
        if let (Some(a), Some(b)) = (layer(from), layer(to))
            && b > a
        {
            faults.push(format!(
                "{} imports {}, a layer above it",
                name(from),
                name(to)
            ));
        }
        if room(from) == "controllers/runtime"
            && room(to).starts_with("controllers/")
            && room(to) != "controllers/runtime"
        {
            faults.push(format!(
                "{} imports {}: the runtime knows no reconciler",
                name(from),
                name(to)
            ));
        }
    }
    // Circles: modules that reach each other. Small graph: a reachability closure will do.
    let mut reach: BTreeMap<&Vec<String>, BTreeSet<&Vec<String>>> = BTreeMap::new();
    for (from, to) in &edges {
        reach.entry(from).or_default().insert(to);
    }
    loop {
        let mut grown = false;
        let snapshot = reach.clone();
        for targets in reach.values_mut() {
            for via in targets.clone() {
                for next in snapshot.get(via).into_iter().flatten() {
                    grown |= targets.insert(next);
                }
            }
        }
        if !grown {
            break;
        }
    }
    let mut circles: BTreeSet<Vec<String>> = BTreeSet::new();
    for (module, reached) in &reach {
        let circle: BTreeSet<String> = reached
            .iter()
            .filter(|other| reach.get(*other).is_some_and(|r| r.contains(module)))
            .map(|m| name(m))
            .chain([name(module)])
            .collect();
        let rooms: BTreeSet<String> = reached
            .iter()
            .filter(|other| reach.get(*other).is_some_and(|r| r.contains(module)))
            .map(|m| room(m))
            .chain([room(module)])
            .collect();
        if rooms.len() > 1 {
            circles.insert(circle.into_iter().collect());
        }
    }
    faults.extend(
        circles
            .into_iter()
            .map(|circle| format!("a circle spans rooms: {}", circle.join(", "))),
    );
    faults
}

/// Every `.rs` file under `src/`, by its path there.
fn source_files() -> BTreeMap<String, String> {
    let src = repo_root().join("src");
    let mut files = BTreeMap::new();
    let mut folders = vec![src.clone()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path
                    .strip_prefix(&src)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                files.insert(relative, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    files
}

#[test]
fn no_module_imports_a_layer_above_its_own_and_no_circle_spans_two_rooms() {
    let files = source_files();
    assert!(
        imports(&files).len() > 100,
        "too few imports found: the reader of `use` lines is broken"
    );
    let faults = layering_faults(&files);
    assert!(
        faults.is_empty(),
        "the layering is broken:\n{}",
        faults.join("\n")
    );
}

/// The check above catches each kind of wrong import, planted in the real tree.
#[test]
fn the_layering_check_catches_a_planted_wrong_import() {
    let planted = |file: &str, line: &str| {
        let mut files = source_files();
        let text = files.get_mut(file).unwrap();
        *text = format!("{line}\n{text}");
        layering_faults(&files)
    };
    assert_eq!(
        planted("telemetry/metrics.rs", "use crate::cli::Args;"),
        ["telemetry/metrics imports cli, a layer above it"]
    );
    // A unit-test module declared above the code hides none of it.
    assert_eq!(
        planted(
            "telemetry/metrics.rs",
            "#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod more {\n    use crate::cli::Args;\n}\nuse crate::inspect::Snapshot;"
        ),
        ["telemetry/metrics imports inspect, a layer above it"]
    );
    let faults = planted(
        "controllers/runtime/queue.rs",
        "use crate::controllers::{claims::reconcile, context::Context};",
    );
    assert_eq!(
        faults[..2],
        [
            "controllers/runtime/queue imports controllers/claims/reconcile: the runtime knows no reconciler",
            "controllers/runtime/queue imports controllers/context: the runtime knows no reconciler",
        ]
    );
    // The context imports the runtime, so the runtime's import of it closes a circle.
    assert!(
        faults[2].starts_with("a circle spans rooms: ")
            && faults[2].contains("controllers/context")
            && faults[2].contains("controllers/runtime/queue"),
        "{faults:?}"
    );
    assert_eq!(faults.len(), 3, "{faults:?}");
    assert_eq!(
        planted(
            "controllers/state/plan.rs",
            "use super::super::claims::reconcile;"
        ),
        ["a circle spans rooms: controllers/claims/reconcile, controllers/state/plan"]
    );
}
