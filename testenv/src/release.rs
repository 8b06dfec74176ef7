//! What checks the release (`.github/workflows/release.yml`) without publishing one: actionlint
//! v1.7.12 and krew v0.4.4, built from the Go module proxy (`testenv/actionlint/go.mod`,
//! `testenv/krew/go.mod`, wrapper modules of their own), and the `inpool` binary built as the
//! Dockerfile builds it, a static musl release build. Not used by the `inpool` binary.
//!
//! - [`actionlint`] builds `target/actionlint/actionlint` (`tests/offline/release.rs` lints
//!   `.github/workflows/` with it).
//! - [`krew`] builds `target/krew/krew` (the same test installs a kubectl-inpool archive with the
//!   krew manifest `hack/krew-manifest.sh` writes).
//! - [`static_inpool`] builds the image's binary into `target/musl/` from what the Dockerfile's
//!   build stage copies, with its build command's arguments (`tests/process/image.rs` runs it as
//!   the image would).

use std::path::{Path, PathBuf};
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
fn has_std(dir: &Path) -> bool {
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

/// The Dockerfile's build stage, as far as a build outside a container needs it: the paths each
/// `COPY` takes from the build context (the repository) with their destinations under the
/// `WORKDIR`, and the arguments of its build command as `cargo` arguments: `cargo auditable build
/// ARGS` is taken as `build ARGS`. cargo-auditable builds what `cargo build` builds and adds the
/// dependency list in a section of its own, so the binary checked here needs no cargo-auditable.
#[derive(Debug)]
struct BuildStage {
    copies: Vec<(Vec<String>, String)>,
    cargo_args: Vec<String>,
}

/// Reads [`BuildStage`] from the Dockerfile's first stage (up to the second `FROM`), whose lines
/// may continue with a trailing backslash.
fn build_stage(dockerfile: &str) -> Result<BuildStage, String> {
    let joined = dockerfile.replace("\\\n", " ");
    let mut stage = BuildStage {
        copies: Vec::new(),
        cargo_args: Vec::new(),
    };
    let mut froms = 0;
    for line in joined.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first().map(|w| w.to_ascii_uppercase()).as_deref() {
            Some("FROM") => {
                froms += 1;
                if froms == 2 {
                    break;
                }
            }
            Some("COPY") if words.len() >= 3 && !words[1].starts_with("--") => {
                let (dest, sources) = words[1..].split_last().unwrap();
                stage.copies.push((
                    sources.iter().map(|s| s.to_string()).collect(),
                    dest.to_string(),
                ));
            }
            Some("RUN") => {
                let build = ["cargo auditable build", "cargo build"]
                    .iter()
                    .find_map(|command| line.find(command).map(|at| at + command.len()));
                if let Some(args) = build {
                    let args = line[args..].split("&&").next().unwrap_or_default();
                    stage.cargo_args = std::iter::once("build")
                        .chain(args.split_whitespace())
                        .map(str::to_string)
                        .collect();
                }
            }
            _ => {}
        }
    }
    if stage.copies.is_empty() || stage.cargo_args.is_empty() {
        return Err(format!(
            "no COPY or no cargo build in the Dockerfile's build stage: {stage:?}"
        ));
    }
    Ok(stage)
}

/// Copies `from` to `to` with `cp -a`, whose kept modification times let Cargo see unchanged
/// sources as unchanged from one build to the next.
fn copy_preserving(from: &Path, to: &Path) -> Result<(), String> {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .map_err(|e| format!("running cp: {e}"))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| format!("cp -a {} {} failed", from.display(), to.display()))
}

/// Builds the `inpool` binary as the Dockerfile's build stage does, once per process: a build
/// context holding only what the stage's `COPY` lines take (`target/musl-context/`, laid out
/// anew each time), then `cargo build` with the stage's build arguments there (its `cargo
/// auditable build` less the dependency list, see [`BuildStage`]), for the musl target that
/// the stage's Alpine image builds natively. A file the stage does not copy but the build needs
/// fails here as it would in `docker build`. `target/musl/` is the build's own target
/// directory, so that it never waits for the `cargo test` that runs it, nor invalidates that
/// one's artifacts.
pub fn static_inpool() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let root = repo_root();
            let dockerfile = std::fs::read_to_string(root.join("Dockerfile"))
                .map_err(|e| format!("reading the Dockerfile: {e}"))?;
            let stage = build_stage(&dockerfile)?;
            let context = root.join("target").join("musl-context");
            if context.exists() {
                std::fs::remove_dir_all(&context)
                    .map_err(|e| format!("removing {}: {e}", context.display()))?;
            }
            // COPY's rules: a directory's contents go into the destination; files go into it
            // when it ends with `/` or there are several, else to it as a file name.
            for (sources, dest) in &stage.copies {
                let into_dir = dest.ends_with('/') || sources.len() > 1;
                let dest = context.join(dest.trim_start_matches("./"));
                for source in sources {
                    let from = root.join(source);
                    let (dir, from, to) = if from.is_dir() {
                        (dest.clone(), from.join("."), dest.clone())
                    } else if into_dir {
                        (dest.clone(), from, dest.clone())
                    } else {
                        (dest.parent().unwrap().to_path_buf(), from, dest.clone())
                    };
                    std::fs::create_dir_all(&dir)
                        .map_err(|e| format!("creating {}: {e}", dir.display()))?;
                    copy_preserving(&from, &to)?;
                }
            }
            let target = musl_target();
            let target_dir = root.join("target").join("musl");
            let binary = target_dir.join(&target).join("release").join("inpool");
            if !binary.exists() {
                say(&format!(
                    "building inpool for {target} as the Dockerfile does (once, into \
                     target/musl/): about 4 minutes on 2 cores"
                ));
            }
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
            let output = Command::new(cargo)
                .args(&stage.cargo_args)
                .args(["--target", &target, "--target-dir"])
                .arg(&target_dir)
                .current_dir(&context)
                .output()
                .map_err(|e| format!("running cargo build: {e}"))?;
            if !output.status.success() {
                return Err(format!(
                    "the Dockerfile's cargo build {:?} for {target}, in a context of what it \
                     copies ({}), failed ({}):\n{}",
                    stage.cargo_args,
                    context.display(),
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            Ok(binary)
        })
        .clone()
}
