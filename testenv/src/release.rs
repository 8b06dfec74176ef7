//! What checks the release (`.github/workflows/release.yml`) without publishing one: actionlint
//! v1.7.12 and krew v0.4.4, built from the Go module proxy (`testenv/actionlint/go.mod`,
//! `testenv/krew/go.mod`, wrapper modules of their own), and the `inpool` binary built as the
//! Dockerfile builds it, a static musl release build. Not used by the `inpool` binary.
//!
//! - [`actionlint`] builds `target/actionlint/actionlint` (`tests/offline/release.rs` lints
//!   `.github/workflows/` with it).
//! - [`krew`] builds `target/krew/krew` (the same test installs a kubectl-inpool archive with the
//!   krew manifest `hack/krew-manifest.sh` writes).
//! - [`static_inpool`] builds the image's binary into `target/musl/` (`tests/process/image.rs`
//!   runs it as the image would).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::{go_build, repo_root, say};

/// The actionlint release the tests run (`testenv/actionlint/go.mod` pins the same).
pub const ACTIONLINT_VERSION: &str = "v1.7.12";

/// The krew release the tests run (`testenv/krew/go.mod` pins the same; the Go module proxy does
/// not serve v0.4.5).
pub const KREW_VERSION: &str = "v0.4.4";

/// Builds `target/NAME/NAME` from `package` in the wrapper module `testenv/NAME/` (see
/// [`go_build`]).
fn go_tool(name: &str, package: &str, version: &str) -> Result<PathBuf, String> {
    let out = repo_root().join("target").join(name).join(name);
    go_build(
        &repo_root().join("testenv").join(name),
        package,
        "",
        &out,
        &format!(
            "building {name} {version} (testenv/{name}/, once): seconds once the Go standard \
             library is cached, a minute or two before"
        ),
    )?;
    Ok(out)
}

/// actionlint, built once per process.
pub fn actionlint() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            go_tool(
                "actionlint",
                "github.com/rhysd/actionlint/cmd/actionlint",
                ACTIONLINT_VERSION,
            )
        })
        .clone()
}

/// krew, built once per process.
pub fn krew() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| go_tool("krew", "sigs.k8s.io/krew/cmd/krew", KREW_VERSION))
        .clone()
}

/// The Rust target the image's binary is built for on this machine: musl, whose binaries are
/// statically linked, as the Dockerfile's Alpine build stage makes them.
pub fn musl_target() -> String {
    format!("{}-unknown-linux-musl", std::env::consts::ARCH)
}

/// What the musl build needs and this machine lacks (the target's standard library, from
/// `rustup target add`; `musl-gcc`, from Debian's musl-tools, for ring's C parts), or `None`.
pub fn static_build_missing() -> Option<String> {
    let target = musl_target();
    let sysroot = Command::new(rustc())
        .args(["--print", "target-libdir", "--target", &target])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if !sysroot.is_some_and(|dir| has_std(&dir)) {
        return Some(format!(
            "the Rust standard library for {target} is not installed (`rustup target add \
             {target}`; .ci/run does)"
        ));
    }
    if Command::new("musl-gcc").arg("--version").output().is_err() {
        return Some(
            "musl-gcc is not on PATH (Debian's musl-tools: `apt-get install -y \
             --no-install-recommends musl-tools`; .ci/run does)"
                .to_string(),
        );
    }
    None
}

/// Whether `dir` holds a `libstd-*.rlib` (the standard library's file name carries a hash).
fn has_std(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("libstd-") && name.ends_with(".rlib")
        })
    })
}

fn rustc() -> String {
    std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string())
}

/// Builds the `inpool` binary as the Dockerfile's build stage does (`cargo build --release
/// --locked --package inpool --bin inpool`, for the musl target) into `target/musl/`, once per
/// process. A target directory of its own, so that this build never waits for the one running
/// the tests, nor invalidates it.
pub fn static_inpool() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let target = musl_target();
            let target_dir = repo_root().join("target").join("musl");
            let binary = target_dir.join(&target).join("release").join("inpool");
            if !binary.exists() {
                say(&format!(
                    "building inpool for {target} as the Dockerfile does (once, into \
                     target/musl/): about 4 minutes on 2 cores"
                ));
            }
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
            let output = Command::new(cargo)
                .args(["build", "--release", "--locked", "--package", "inpool"])
                .args(["--bin", "inpool", "--target", &target, "--target-dir"])
                .arg(&target_dir)
                .current_dir(repo_root())
                .output()
                .map_err(|e| format!("running cargo build: {e}"))?;
            if !output.status.success() {
                return Err(format!(
                    "cargo build for {target} failed ({}):\n{}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            Ok(binary)
        })
        .clone()
}
