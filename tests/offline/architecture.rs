//! docs/architecture.md names, in its "decides / performs" table, the function behind each step
//! of a claim's reconcile. Each name must be a function that exists where the path says, so that
//! the table cannot drift from the code it describes.

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
