//! Writes the CRDs generated from inpool's Rust types:
//! `crds/` (the pool CRDs) and `config/local-capi/` (local-use-only CAPI CRDs).
//!
//! ```text
//! cargo run --bin crdgen              # (re)write the files
//! cargo run --bin crdgen -- --check   # exit 1, naming the stale files, if any differs
//! cargo run --bin crdgen -- --print   # print every file to stdout instead
//! ```
//! Paths are relative to the crate root (`CARGO_MANIFEST_DIR`), whatever the working directory.

use std::{path::Path, process::ExitCode};

use inpool::api::crds::{GENERATE_COMMAND, generated_files, stale_files};

fn main() -> ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => write(root),
        ["--check"] => check(root),
        ["--print"] => {
            for f in generated_files() {
                println!("# --- {}\n{}", f.path, f.content);
            }
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: crdgen [--check | --print]");
            ExitCode::from(2)
        }
    }
}

fn write(root: &Path) -> ExitCode {
    for f in generated_files() {
        let path = root.join(&f.path);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(f.content.as_str()) {
            println!("unchanged {}", f.path);
            continue;
        }
        if let Some(dir) = path.parent()
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            eprintln!("crdgen: cannot create {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
        if let Err(e) = std::fs::write(&path, &f.content) {
            eprintln!("crdgen: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", f.path);
    }
    ExitCode::SUCCESS
}

fn check(root: &Path) -> ExitCode {
    let stale = stale_files(root);
    if stale.is_empty() {
        println!("crdgen: generated CRDs are up to date");
        return ExitCode::SUCCESS;
    }
    eprintln!("crdgen: these generated files differ from what the Rust types generate:");
    for p in &stale {
        eprintln!("  {p}");
    }
    eprintln!("run `{GENERATE_COMMAND}` and commit the result");
    ExitCode::FAILURE
}
