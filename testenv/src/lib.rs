//! inpool's test bench, a crate of its own so that the `inpool` binary never builds it; only the
//! integration tests depend on it, and the demo and the scale and soak harnesses are its binaries.
//!
//! - This module: the local control plane (etcd + kube-apiserver + the garbage-collector and
//!   namespace controllers) built from the Go sources beside this crate.
//! - [`capi`], [`capv`], [`operator`]: Cluster API core and clusterctl, CAPV with a vCenter
//!   simulator, and cluster-api-operator, built from the Go module proxy and run against that
//!   control plane; [`kustomize`] renders upstream kustomizations.
//! - [`reference`](mod@reference): the reference provider (cluster-api-ipam-provider-in-cluster),
//!   built from the Go module proxy and run against that control plane, for the conformance suite.
//! - [`release`]: what checks the release: actionlint and krew, built from the Go module proxy,
//!   and the image's static binary.
//! - [`support`]: the tests' shared control planes (one per test binary and kind of bed), each
//!   handing a test its own namespace.
//! - [`common`]: what the integration tests share: object builders, waits, reads, invariants, an
//!   in-process controller and the `inpool` binary as a process.
//! - [`fault_proxy`]: an HTTPS proxy in front of the API server that injects HTTP-level faults
//!   (throttling, errors, resets, delays, blackholes) on command, for the fault suite; [`etcd`]:
//!   compaction and defragmentation of a control plane's etcd; [`ha`]: a second API server on
//!   its etcd and a TCP balancer in front of both.
//! - [`scale`]: the scale harness's engine.
//! - `src/bin/demo.rs`: the demo (`cargo run --bin demo`).
//! - `src/bin/scale/`, `src/bin/scale_slope.rs`, `src/bin/soak.rs`: the scale harness
//!   (`cargo run --release --bin scale`), its slope picture and the soak run (docs/performance.md).
//!
//! - [`testenv_binary`] builds `target/testenv/inpool-testenv` with the Go toolchain, once per
//!   process; a file lock makes concurrent processes wait for one build, and Go's build cache
//!   makes a rebuild of unchanged sources a no-op.
//! - [`ControlPlane`] runs one instance and stops it when dropped. Its standard input is a pipe:
//!   when this process exits, however it exits, the pipe closes and the control plane shuts down
//!   (and, when ephemeral, deletes its data directory).
//!
//! Paths are relative to the checkout this crate was built from ([`repo_root`]): the demo and the
//! tests run from a checkout.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

use kube::{Client, Config};

pub mod capi;
pub mod capm3;
pub mod capv;
pub mod common;
pub mod etcd;
pub mod fault_proxy;
pub mod ha;
pub mod kustomize;
pub mod metal3_ipam;
pub mod operator;
pub mod reference;
pub mod release;
pub mod scale;
pub mod support;
pub mod tethered;
pub mod webhooks;

/// The Kubernetes release `testenv/go.mod` builds (etcd 3.6, kube-apiserver and the controllers):
/// the control plane's unless [`KUBERNETES_VARIABLE`] picks another ([`kubernetes_version`]).
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// The environment variable that runs the bench on another Kubernetes: `1.32` builds the control
/// plane's Go sources with `testenv/kubernetes-1.32/go.mod` as their `go.mod` (`go build
/// -modfile`) into `target/testenv/kubernetes-1.32/`; unset, `testenv/go.mod`. The support
/// matrix's lower bound runs this way (docs/install.md, "Supported versions").
pub const KUBERNETES_VARIABLE: &str = "INPOOL_TESTENV_KUBERNETES";

/// The Kubernetes release the control plane runs: [`KUBERNETES_VERSION`], or the one that
/// [`KUBERNETES_VARIABLE`]'s `go.mod` pins. Panics when the variable names no such `go.mod`.
pub fn kubernetes_version() -> &'static str {
    match kubernetes_line() {
        Ok(Some(line)) => &line.version,
        Ok(None) => KUBERNETES_VERSION,
        Err(e) => panic!("{e}"),
    }
}

/// The control plane the tests run on, as a conformance report's environment names it:
/// `inpool's test control plane: etcd 3.6, kube-apiserver v1.36.3`.
pub fn control_plane_description() -> String {
    let go_mod = match kubernetes_line() {
        Ok(Some(line)) => line.go_mod.clone(),
        _ => repo_root().join("testenv").join("go.mod"),
    };
    let etcd = std::fs::read_to_string(&go_mod)
        .ok()
        .and_then(|text| required_version(&text, "go.etcd.io/etcd/server/v3"))
        .map(|version| {
            let numbers: Vec<&str> = version.trim_start_matches('v').split('.').collect();
            numbers[..numbers.len().min(2)].join(".")
        })
        .unwrap_or_else(|| "(unknown)".to_string());
    format!(
        "inpool's test control plane: etcd {etcd}, kube-apiserver {}",
        kubernetes_version()
    )
}

fn kubernetes_line() -> &'static Result<Option<GoLine>, String> {
    static LINE: OnceLock<Result<Option<GoLine>, String>> = OnceLock::new();
    LINE.get_or_init(|| GoLine::from_env(KUBERNETES_VARIABLE, "kubernetes", "k8s.io/kubernetes"))
}

/// Another release line of a Go program the bench builds, picked by an environment variable:
/// `VARIABLE=X` names the wrapper `testenv/<prefix>-X/go.mod`, which pins that line's release.
#[derive(Clone, Debug)]
pub(crate) struct GoLine {
    /// The wrapper's folder under `testenv/` (`<prefix>-X`), and its binaries' under `target/`.
    pub dir: String,
    /// The wrapper's `go.mod`.
    pub go_mod: PathBuf,
    /// The release of the program's module that the wrapper requires (`vMAJOR.MINOR.PATCH`).
    pub version: String,
}

impl GoLine {
    /// The line `variable` picks for `module` (`None` when it is unset or empty); an error names
    /// the wrappers there are when no `testenv/<prefix>-X/go.mod` requires `module`.
    pub(crate) fn from_env(
        variable: &str,
        prefix: &str,
        module: &str,
    ) -> Result<Option<GoLine>, String> {
        match std::env::var(variable).ok().filter(|v| !v.is_empty()) {
            Some(value) => Self::named(variable, &value, prefix, module).map(Some),
            None => Ok(None),
        }
    }

    /// The line `value` names (`variable` only words the error).
    fn named(variable: &str, value: &str, prefix: &str, module: &str) -> Result<GoLine, String> {
        let dir = format!("{prefix}-{value}");
        let go_mod = repo_root().join("testenv").join(&dir).join("go.mod");
        let text = std::fs::read_to_string(&go_mod).map_err(|e| {
            let mut there: Vec<String> = std::fs::read_dir(repo_root().join("testenv"))
                .into_iter()
                .flatten()
                .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .filter_map(|name| Some(name.strip_prefix(&format!("{prefix}-"))?.to_string()))
                .collect();
            there.sort();
            format!(
                "{variable}={value}: reading {} ({e}); the lines there are: {}",
                go_mod.display(),
                there.join(", ")
            )
        })?;
        let version = required_version(&text, module)
            .ok_or_else(|| format!("{} requires no {module}", go_mod.display()))?;
        Ok(GoLine {
            dir,
            go_mod,
            version,
        })
    }
}

/// The version of `module` that a `go.mod`'s text requires.
fn required_version(go_mod: &str, module: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let mut words = line
            .trim()
            .trim_start_matches("require ")
            .split_whitespace();
        (words.next() == Some(module))
            .then(|| words.next())
            .flatten()
            .filter(|version| version.starts_with('v'))
            .map(str::to_string)
    })
}

/// How long a cold control plane may take to announce itself ready.
pub const START_TIMEOUT: Duration = Duration::from_secs(240);

/// The checkout this crate was built from: the workspace root, one level above `testenv/`.
pub fn repo_root() -> PathBuf {
    let testenv = Path::new(env!("CARGO_MANIFEST_DIR"));
    testenv.parent().unwrap_or(testenv).to_path_buf()
}

fn testenv_dir() -> PathBuf {
    repo_root().join("target").join("testenv")
}

/// Checks that a Go toolchain is on `path` (a `PATH` value) and says what to install if not.
pub fn check_go_toolchain(path: &str) -> Result<String, String> {
    let missing = || {
        "the Go toolchain (`go`, version 1.26 or newer) is not on PATH: inpool's tests and demo \
         build their Kubernetes control plane from source in testenv/. Install Go 1.26+ \
         (https://go.dev/doc/install) and run them again."
            .to_string()
    };
    let output = Command::new("go")
        .arg("version")
        .env("PATH", path)
        .output()
        .map_err(|_| missing())?;
    if !output.status.success() {
        return Err(missing());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Builds the control plane binary once per process; concurrent processes wait on a file lock,
/// and Go's build cache makes a rebuild of unchanged sources a no-op.
pub fn testenv_binary() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY.get_or_init(build_testenv).clone()
}

fn build_testenv() -> Result<PathBuf, String> {
    let testenv = repo_root().join("testenv");
    // The version the API server reports: Cluster API and clusterctl refuse a server whose
    // version they cannot parse (a plain `go build` reports v0.0.0-master).
    let ldflags = |version| version_ldflags("k8s.io/component-base/version", version);
    match kubernetes_line().clone()? {
        None => {
            let binary = testenv_dir().join("inpool-testenv");
            go_build(
                &testenv,
                ".",
                &ldflags(KUBERNETES_VERSION),
                &binary,
                "building the local control plane (testenv/, once) — the first build downloads \
                 the Kubernetes modules and compiles kube-apiserver: 6 to 20 minutes on 2 cores, \
                 by load",
            )?;
            Ok(binary)
        }
        Some(line) => {
            let binary = testenv_dir().join(&line.dir).join("inpool-testenv");
            go_build_with_modfile(
                &testenv,
                Some(&line.go_mod),
                ".",
                &ldflags(&line.version),
                &binary,
                &format!(
                    "building the local control plane on Kubernetes {} (testenv/{}/go.mod, \
                     once): a build of its own, 6 to 20 minutes on 2 cores",
                    line.version, line.dir
                ),
            )?;
            Ok(binary)
        }
    }
}

/// The source of Go module `module` as the wrapper module `wrapper` pins it, from the Go module
/// cache (downloaded if needed): the tests read upstream CRDs and webhook manifests from there.
/// Looked up once per process and module.
pub(crate) fn go_module_dir(wrapper: &Path, module: &str) -> Result<PathBuf, String> {
    type Found = std::collections::HashMap<(PathBuf, String), Result<PathBuf, String>>;
    static FOUND: std::sync::Mutex<Option<Found>> = std::sync::Mutex::new(None);
    let key = (wrapper.to_path_buf(), module.to_string());
    let mut found = FOUND
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    found
        .get_or_insert_with(Found::new)
        .entry(key)
        .or_insert_with(|| download_go_module(wrapper, module))
        .clone()
}

/// A provider's manager the bench builds from the Go module proxy: the root package of `module`,
/// named as a `tool` by a wrapper module of its own, `testenv/<dir>/go.mod` (one graph of
/// Cluster API and `k8s.io/*` versions per wrapper), built once per process into
/// `target/<dir>/manager`.
pub struct GoProgram {
    /// The wrapper module's folder under `testenv/`, and the binary's under `target/`.
    pub dir: &'static str,
    /// The Go module whose root package is the manager.
    pub module: &'static str,
    /// The line printed before a first build: what it builds and how long it takes.
    first_time: &'static str,
    built: OnceLock<Result<PathBuf, String>>,
}

impl GoProgram {
    pub const fn new(dir: &'static str, module: &'static str, first_time: &'static str) -> Self {
        GoProgram {
            dir,
            module,
            first_time,
            built: OnceLock::new(),
        }
    }

    fn wrapper(&self) -> PathBuf {
        repo_root().join("testenv").join(self.dir)
    }

    /// Builds the manager once per process (see [`go_build`]) and returns its path.
    pub fn binary(&self) -> Result<PathBuf, String> {
        self.built
            .get_or_init(|| {
                let out = repo_root().join("target").join(self.dir).join("manager");
                go_build(&self.wrapper(), self.module, "", &out, self.first_time)?;
                Ok(out)
            })
            .clone()
    }

    /// The module's source in the Go module cache, at the version the wrapper pins.
    pub fn module_dir(&self) -> Result<PathBuf, String> {
        go_module_dir(&self.wrapper(), self.module)
    }

    /// The module's own CRDs, `config/crd/bases/` of its source in the Go module cache.
    pub fn crd_files(&self) -> Result<Vec<PathBuf>, String> {
        module_crd_bases(&self.module_dir()?)
    }

    /// Builds the manager if needed and starts it with `args`, its output in
    /// `<data dir>/<dir>-manager.log` of `plane`; returns once its `/readyz` on 127.0.0.1:`health`
    /// answers, within two minutes.
    pub async fn start(
        &self,
        plane: &ControlPlane,
        args: &[String],
        health: u16,
    ) -> anyhow::Result<RunningManager> {
        self.start_through(plane, &[], args, &[], health).await
    }

    /// [`GoProgram::start`], the manager run by `launcher` (a program and its arguments, to which
    /// the manager's path and `args` are appended; none: the manager itself), with `env` added to
    /// the environment.
    pub async fn start_through(
        &self,
        plane: &ControlPlane,
        launcher: &[&str],
        args: &[String],
        env: &[(&str, &str)],
        health: u16,
    ) -> anyhow::Result<RunningManager> {
        let binary = self.binary().map_err(anyhow::Error::msg)?;
        let name = format!("{}-manager", self.dir);
        let log = plane.data_dir.join(format!("{name}.log"));
        let (program, mut launched) = match launcher.split_first() {
            Some((program, rest)) => (
                PathBuf::from(program),
                rest.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            ),
            None => (binary.clone(), Vec::new()),
        };
        if !launcher.is_empty() {
            launched.push(binary.display().to_string());
        }
        launched.extend(args.iter().cloned());
        let env: Vec<(&str, &std::ffi::OsStr)> = env
            .iter()
            .map(|(key, value)| (*key, std::ffi::OsStr::new(*value)))
            .collect();
        let mut process = tethered::Tethered::spawn(&name, &program, &launched, &env, log)?;
        process
            .wait_until(Duration::from_secs(120), || tethered::readyz(health))
            .await?;
        Ok(RunningManager { process })
    }
}

/// A [`GoProgram`]'s manager running against one control plane. It stops when dropped, or when
/// the test binary exits.
pub struct RunningManager {
    process: tethered::Tethered,
}

impl RunningManager {
    /// The manager's log, in the control plane's data directory.
    pub fn log(&self) -> &Path {
        &self.process.log
    }

    /// The last lines of the manager's log.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// The CRDs of a kubebuilder-laid-out Go module, `config/crd/bases/` of its source in
/// `module_dir`; an error when there are none, since a provider without CRDs cannot run.
fn module_crd_bases(module_dir: &Path) -> Result<Vec<PathBuf>, String> {
    let bases = module_dir.join("config").join("crd").join("bases");
    let files = yaml_files(&bases);
    if files.is_empty() {
        return Err(format!("no CRDs in {}", bases.display()));
    }
    Ok(files)
}

fn download_go_module(wrapper: &Path, module: &str) -> Result<PathBuf, String> {
    check_go_toolchain(&std::env::var("PATH").unwrap_or_default())?;
    let output = Command::new("go")
        .args(["mod", "download", "-json", module])
        .current_dir(wrapper)
        .output()
        .map_err(|e| format!("running go mod download {module}: {e}"))?;
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "go mod download {module} printed no module ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    match info["Dir"].as_str() {
        Some(dir) if output.status.success() => Ok(PathBuf::from(dir)),
        _ => Err(format!(
            "go mod download {module} failed: {} {}",
            info["Error"].as_str().unwrap_or_default(),
            String::from_utf8_lossy(&output.stderr)
        )),
    }
}

/// The `-ldflags` that stamp `version` (`vMAJOR.MINOR.PATCH`) into a Go `package` that keeps it
/// in `gitMajor`, `gitMinor`, `gitVersion` and `gitTreeState` (Kubernetes' and Cluster API's
/// version packages do), as their release builds do.
pub(crate) fn version_ldflags(package: &str, version: &str) -> String {
    let mut numbers = version.trim_start_matches('v').split('.');
    let major = numbers.next().unwrap_or_default();
    let minor = numbers.next().unwrap_or_default();
    [
        ("gitMajor", major),
        ("gitMinor", minor),
        ("gitVersion", version),
        ("gitTreeState", "clean"),
    ]
    .map(|(var, value)| format!("-X {package}.{var}={value}"))
    .join(" ")
}

/// How long one Go build may take before it is stopped as stuck: a cold control-plane build
/// took 6 to 20 minutes on 2 cores.
const BUILD_DEADLINE: Duration = Duration::from_secs(45 * 60);

/// How often a long Go build says that it is still working.
const BUILD_PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// Runs `go build -v -ldflags ldflags -o out package` in the Go module `module` under a file lock
/// beside `out`, so that concurrent processes wait for one build; Go's build cache makes a
/// rebuild of unchanged sources a no-op. `first_time` is printed when `out` does not exist yet.
/// Go's output goes to `out` + `.build.log`; while the build runs, a line every
/// [`BUILD_PROGRESS_EVERY`] says how long it has taken and how far it is, so that a first run is
/// never silent for minutes.
pub(crate) fn go_build(
    module: &Path,
    package: &str,
    ldflags: &str,
    out: &Path,
    first_time: &str,
) -> Result<(), String> {
    go_build_with_modfile(module, None, package, ldflags, out, first_time)
}

/// [`go_build`] with `modfile`, when given, read in place of the module's own `go.mod` (and the
/// `go.sum` beside it): the same sources built on another graph of dependency versions.
fn go_build_with_modfile(
    module: &Path,
    modfile: Option<&Path>,
    package: &str,
    ldflags: &str,
    out: &Path,
    first_time: &str,
) -> Result<(), String> {
    check_go_toolchain(&std::env::var("PATH").unwrap_or_default())?;
    let dir = out.parent().expect("an output file has a directory");
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let lock = std::fs::File::create(dir.join("build.lock")).map_err(|e| e.to_string())?;
    if lock.try_lock().is_err() {
        say(&format!(
            "waiting for another process that is building in {}",
            dir.display()
        ));
        lock.lock()
            .map_err(|e| format!("locking the build in {}: {e}", dir.display()))?;
    }
    if !out.exists() {
        say(first_time);
    }
    let mut log_path = out.as_os_str().to_owned();
    log_path.push(".build.log");
    let log_path = PathBuf::from(log_path);
    let log = std::fs::File::create(&log_path)
        .map_err(|e| format!("creating {}: {e}", log_path.display()))?;
    let mut child = Command::new("go")
        .args(["build", "-v", "-ldflags", ldflags])
        .args(modfile.map(|file| format!("-modfile={}", file.display())))
        .arg("-o")
        .arg(out)
        .arg(package)
        .current_dir(module)
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("running go build in {}: {e}", module.display()))?;
    let what = match package {
        "." => module.display().to_string(),
        package => package.to_string(),
    };
    let started = std::time::Instant::now();
    let mut next_report = BUILD_PROGRESS_EVERY;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > BUILD_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "go build of {what} did not finish within {} minutes (a stuck module download or \
                 cache lock?); its log so far: {}",
                BUILD_DEADLINE.as_secs() / 60,
                log_path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
        if started.elapsed() >= next_report {
            next_report += BUILD_PROGRESS_EVERY;
            say(&format!(
                "… still building {what}: {}s, {} (log: {})",
                started.elapsed().as_secs(),
                build_progress(&log_path),
                log_path.display()
            ));
        }
    };
    if !status.success() {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        return Err(format!(
            "go build of {package} in {} failed ({status}); the end of {}:\n{}",
            module.display(),
            log_path.display(),
            lines[lines.len().saturating_sub(30)..].join("\n")
        ));
    }
    Ok(())
}

/// What `go build -v`'s log shows so far: modules downloaded, packages compiled.
fn build_progress(log: &Path) -> String {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let downloads = log
        .lines()
        .filter(|l| l.starts_with("go: downloading"))
        .count();
    let packages = log.lines().count() - downloads;
    format!("{downloads} modules downloaded, {packages} packages compiled")
}

/// A line on stderr that shows even inside a test: libtest captures the print macros, not
/// writes to the stream itself.
pub fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// How to start a [`ControlPlane`].
#[derive(Clone, Debug, Default)]
pub struct StartOptions {
    /// Delete the data directory when the control plane stops.
    pub ephemeral: bool,
    /// CRD files installed before the controllers start (so that the garbage collector watches
    /// them from the beginning).
    pub crds: Vec<PathBuf>,
    /// Run the control plane in a process group of its own, so that a Ctrl-C in the terminal
    /// reaches only this process, which then stops the control plane in order.
    pub own_process_group: bool,
    /// How long start-up may take (the control plane's own default, 3 minutes, when `None`). A
    /// restart on a data directory of tens of thousands of objects, on a loaded machine, can take
    /// longer: the garbage collector lists every kind before the start-up probe passes.
    pub start_timeout: Option<std::time::Duration>,
}

/// One running control plane process.
pub struct ControlPlane {
    child: Child,
    stdin: Option<ChildStdin>,
    pub data_dir: PathBuf,
    pub kubeconfig: PathBuf,
    /// The API server's URL (`https://127.0.0.1:PORT`).
    pub server: String,
    pub startup_seconds: f64,
}

impl ControlPlane {
    /// Starts a control plane on `data_dir` (created if needed, kept after it stops unless
    /// `ephemeral`).
    pub fn start(data_dir: &Path, ephemeral: bool) -> Result<ControlPlane, String> {
        Self::start_with_crds(data_dir, ephemeral, &[])
    }

    /// Starts a control plane that installs `crds` before its controllers start, so that the
    /// garbage collector watches them from the beginning.
    pub fn start_with_crds(
        data_dir: &Path,
        ephemeral: bool,
        crds: &[PathBuf],
    ) -> Result<ControlPlane, String> {
        Self::start_with(
            data_dir,
            &StartOptions {
                ephemeral,
                crds: crds.to_vec(),
                own_process_group: false,
                start_timeout: None,
            },
        )
    }

    /// Starts a control plane on `data_dir` as `options` say, and waits until it is ready. A
    /// start that fails is tried once more: a CI run saw kube-apiserver exit with status 1 while
    /// starting, once, right after another test binary's control plane had been killed.
    pub fn start_with(data_dir: &Path, options: &StartOptions) -> Result<ControlPlane, String> {
        Self::start_once(data_dir, options).or_else(|first| {
            say(&format!(
                "the control plane did not start ({first}); trying once more"
            ));
            Self::start_once(data_dir, options)
                .map_err(|second| format!("{second} (and before that: {first})"))
        })
    }

    fn start_once(data_dir: &Path, options: &StartOptions) -> Result<ControlPlane, String> {
        let binary = testenv_binary()?;
        let kubeconfig = data_dir.join("kubeconfig");
        let mut command = Command::new(binary);
        command
            .arg("run")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--exit-on-stdin-eof")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if options.ephemeral {
            command.arg("--remove-data-dir-on-exit");
        }
        for crd in &options.crds {
            command.arg("--crd").arg(crd);
        }
        if let Some(timeout) = options.start_timeout {
            command.arg(format!("--start-timeout={}s", timeout.as_secs()));
        }
        #[cfg(unix)]
        if options.own_process_group {
            use std::os::unix::process::CommandExt as _;
            command.process_group(0);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("starting inpool-testenv: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        // The supervisor gives up at its own start timeout; this waits a minute longer, so that its
        // reason is what the caller sees.
        let wait = options
            .start_timeout
            .map_or(START_TIMEOUT, |timeout| timeout + Duration::from_secs(60));
        let ready = match wait_ready_line(stdout, wait) {
            Ok(ready) => ready,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        Ok(ControlPlane {
            child,
            stdin,
            data_dir: data_dir.to_path_buf(),
            kubeconfig,
            server: ready.server,
            startup_seconds: ready.startup_seconds,
        })
    }

    /// An admin client (member of `system:masters`).
    pub async fn client(&self) -> anyhow::Result<Client> {
        client_from_kubeconfig(&self.kubeconfig, None).await
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the control plane process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM and waits for a clean exit; returns the exit status code.
    pub fn terminate(mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        self.wait_exit()
    }

    /// Waits up to a minute for the process to end, then kills it.
    fn wait_exit(&mut self) -> Option<i32> {
        for _ in 0..600 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        self.child.wait().ok().and_then(|s| s.code())
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Closing stdin asks for a clean shutdown.
        self.stdin.take();
        if let Ok(None) = self.child.try_wait() {
            self.wait_exit();
        }
    }
}

struct Ready {
    server: String,
    startup_seconds: f64,
}

/// Reads the supervisor's stdout until it says it is ready (then keeps draining it in the
/// background, so that a later line never meets a closed pipe).
fn wait_ready_line(stdout: std::process::ChildStdout, wait: Duration) -> Result<Ready, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut announced = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !announced && line.starts_with("inpool-testenv ready:") {
                announced = true;
                let _ = tx.send(Ok(line));
            }
        }
        if !announced {
            let _ = tx.send(Err(
                "inpool-testenv exited before it was ready (see its messages above)".to_string(),
            ));
        }
    });
    let line = rx
        .recv_timeout(wait)
        .map_err(|_| format!("inpool-testenv was not ready within {wait:?}"))??;
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .map(str::to_string)
    };
    let startup_seconds = field("startup=")
        .and_then(|s| s.trim_end_matches('s').parse().ok())
        .unwrap_or(0.0);
    Ok(Ready {
        server: field("server=").unwrap_or_default(),
        startup_seconds,
    })
}

/// A client for the given kubeconfig, optionally impersonating `(user, groups)`.
pub async fn client_from_kubeconfig(
    path: &Path,
    impersonate: Option<(&str, &[&str])>,
) -> anyhow::Result<Client> {
    use anyhow::Context as _;
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    if let Some((user, groups)) = impersonate {
        config.auth_info.impersonate = Some(user.to_string());
        config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    }
    Client::try_from(config).context("building the Kubernetes client")
}

/// The server URL of a test kubeconfig's first cluster (`https://127.0.0.1:PORT`), from its
/// text: what the fault proxy and the balancer put themselves in place of.
pub fn kubeconfig_server(text: &str) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let parsed = Kubeconfig::from_yaml(text)?;
    parsed
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .context("the kubeconfig names no cluster")?
        .server
        .clone()
        .context("the kubeconfig's cluster has no server")
}

/// The `*.yaml` / `*.yml` files of `dir` but its `kustomization.yaml` (which kustomize reads, not
/// the API server), sorted by name (none if `dir` does not exist).
pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .filter(|p| !p.ends_with("kustomization.yaml"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// inpool's own CRDs (`crds/`) and the local-use-only CAPI CRDs (`config/local-capi/`): what a
/// control plane without Cluster API needs to run inpool (the demo).
pub fn local_crd_files() -> Vec<PathBuf> {
    let mut files = yaml_files(&repo_root().join("config").join("local-capi"));
    files.extend(yaml_files(&repo_root().join("crds")));
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The control plane's `go.mod` and each other line's pin `k8s.io/kubernetes` and every
    /// staging module to one release (`v1.X.Y` and `v0.X.Y`): an update of one pin alone would
    /// build an API server of mixed releases.
    #[test]
    fn each_kubernetes_line_pins_one_release() {
        let testenv = repo_root().join("testenv");
        let mut go_mods = vec![testenv.join("go.mod")];
        go_mods.extend(
            std::fs::read_dir(&testenv)
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .filter(|dir| {
                    dir.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with("kubernetes-")
                })
                .map(|dir| dir.join("go.mod")),
        );
        assert!(go_mods.len() > 1, "no testenv/kubernetes-*/go.mod");
        for go_mod in go_mods {
            let text = std::fs::read_to_string(&go_mod).unwrap();
            let kubernetes = required_version(&text, "k8s.io/kubernetes").unwrap();
            let staging = kubernetes.replacen("v1.", "v0.", 1);
            let pins: Vec<&str> = text.lines().filter(|l| l.contains("=> k8s.io/")).collect();
            assert!(pins.len() > 20, "{}: {pins:?}", go_mod.display());
            for pin in pins {
                assert!(
                    pin.ends_with(&format!(" {staging}")),
                    "{} requires k8s.io/kubernetes {kubernetes}, and pins {pin:?}",
                    go_mod.display()
                );
            }
        }
    }

    #[test]
    fn a_variable_names_a_wrapper_and_its_release() {
        let kubernetes = GoLine::named("K", "1.32", "kubernetes", "k8s.io/kubernetes").unwrap();
        assert_eq!(kubernetes.dir, "kubernetes-1.32");
        assert_eq!(kubernetes.version, "v1.32.4");
        let capi = GoLine::named("C", "1.11", "capi", "sigs.k8s.io/cluster-api").unwrap();
        assert_eq!(capi.version, "v1.11.0");
        let missing = GoLine::named("K", "1.2", "kubernetes", "k8s.io/kubernetes").unwrap_err();
        assert!(
            missing.starts_with("K=1.2: reading ") && missing.contains("the lines there are: 1.32"),
            "{missing}"
        );
    }
}
