//! Test support: a real Kubernetes control plane (etcd + kube-apiserver + the garbage-collector
//! and namespace controllers) built from `testenv/` and shared by all tests of one test binary.
//!
//! - [`env`] starts the shared control plane on first use with the CAPI fixture CRDs and
//!   inpool's own CRDs installed and established.
//! - [`TestEnv::namespace`] gives each test a fresh namespace and an admin client.
//! - [`ControlPlane`] runs an extra, separately controlled instance (restart and fault tests).
//!
//! The control plane process watches its standard input: when the test binary exits, however it
//! exits, the pipe closes and the control plane shuts down and deletes its data directory.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// How long a cold control plane may take to announce itself ready.
const START_TIMEOUT: Duration = Duration::from_secs(240);

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `../shared` beside the project: the upstream CRD fixtures.
pub fn shared_dir() -> PathBuf {
    repo_root().join("..").join("shared")
}

fn testenv_dir() -> PathBuf {
    repo_root().join("target").join("testenv")
}

/// Checks that a Go toolchain is on `path` (a `PATH` value) and says what to install if not.
pub fn check_go_toolchain(path: &str) -> Result<String, String> {
    let missing = || {
        "the Go toolchain (`go`, version 1.26 or newer) is not on PATH: inpool's tests build \
         their Kubernetes control plane from source in testenv/. Install Go 1.26+ \
         (https://go.dev/doc/install) and run the tests again."
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

/// Builds the control plane binary once; concurrent test binaries wait on a file lock, and Go's
/// build cache makes a rebuild of unchanged sources a no-op.
pub fn testenv_binary() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY.get_or_init(build_testenv).clone()
}

fn build_testenv() -> Result<PathBuf, String> {
    check_go_toolchain(&std::env::var("PATH").unwrap_or_default())?;
    let dir = testenv_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let lock = std::fs::File::create(dir.join("build.lock")).map_err(|e| e.to_string())?;
    lock.lock()
        .map_err(|e| format!("locking the testenv build: {e}"))?;
    let binary = dir.join("inpool-testenv");
    if !binary.exists() {
        eprintln!(
            "building the test control plane (testenv/) — the first build downloads the \
             Kubernetes modules and compiles kube-apiserver: several minutes"
        );
    }
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(repo_root().join("testenv"))
        .status()
        .map_err(|e| format!("running go build: {e}"))?;
    if !status.success() {
        return Err(format!("go build of testenv/ failed ({status})"));
    }
    Ok(binary)
}

/// One running control plane process.
pub struct ControlPlane {
    child: Child,
    stdin: Option<ChildStdin>,
    pub data_dir: PathBuf,
    pub kubeconfig: PathBuf,
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
        if ephemeral {
            command.arg("--remove-data-dir-on-exit");
        }
        for crd in crds {
            command.arg("--crd").arg(crd);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("starting inpool-testenv: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let startup_seconds = wait_ready_line(stdout)?;
        Ok(ControlPlane {
            child,
            stdin,
            data_dir: data_dir.to_path_buf(),
            kubeconfig,
            startup_seconds,
        })
    }

    pub async fn client(&self) -> Client {
        client_from_kubeconfig(&self.kubeconfig, None).await
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for a clean exit; returns the exit status code.
    pub fn terminate(mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        self.wait_exit()
    }

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

/// Reads the supervisor's stdout until it says it is ready; returns its start-up time.
fn wait_ready_line(stdout: std::process::ChildStdout) -> Result<f64, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("inpool-testenv ready:") {
                let _ = tx.send(Ok(line));
                return;
            }
        }
        let _ = tx.send(Err(
            "inpool-testenv exited before it was ready (see its messages above)".to_string(),
        ));
    });
    let line = rx
        .recv_timeout(START_TIMEOUT)
        .map_err(|_| format!("inpool-testenv was not ready within {START_TIMEOUT:?}"))??;
    let seconds = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("startup="))
        .and_then(|s| s.trim_end_matches('s').parse().ok())
        .unwrap_or(0.0);
    Ok(seconds)
}

/// A client for the given kubeconfig, optionally impersonating `(user, groups)`.
pub async fn client_from_kubeconfig(path: &Path, impersonate: Option<(&str, &[&str])>) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).expect("readable kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("valid kubeconfig");
    if let Some((user, groups)) = impersonate {
        config.auth_info.impersonate = Some(user.to_string());
        config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    }
    Client::try_from(config).expect("client from kubeconfig")
}

/// The control plane shared by the tests of one test binary, with all CRDs installed.
pub struct TestEnv {
    plane: ControlPlane,
}

/// Starts (once per test binary) and returns the shared control plane.
pub fn env() -> &'static TestEnv {
    static ENV: OnceLock<Result<TestEnv, String>> = OnceLock::new();
    let env = ENV.get_or_init(TestEnv::start);
    match env {
        Ok(env) => env,
        Err(e) => panic!("test control plane unavailable: {e}"),
    }
}

impl TestEnv {
    fn start() -> Result<TestEnv, String> {
        let data_dir = std::env::temp_dir().join(format!(
            "inpool-testenv-{}-{}",
            std::process::id(),
            test_binary_name()
        ));
        let _ = std::fs::remove_dir_all(&data_dir);
        let plane = ControlPlane::start_with_crds(&data_dir, true, &crd_files())?;
        Ok(TestEnv { plane })
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.plane.kubeconfig
    }

    pub fn startup_seconds(&self) -> f64 {
        self.plane.startup_seconds
    }

    /// An admin client (member of `system:masters`).
    pub async fn client(&self) -> Client {
        self.plane.client().await
    }

    /// A client that impersonates `user` in `groups`: subject to RBAC like a real user.
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> Client {
        client_from_kubeconfig(&self.plane.kubeconfig, Some((user, groups))).await
    }

    /// A fresh namespace for one test, and an admin client.
    pub async fn namespace(&self) -> (Client, String) {
        let client = self.client().await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                generate_name: Some("t-".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let created = namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("create test namespace");
        let name = created.metadata.name.expect("generated name");
        (client, name)
    }
}

fn test_binary_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "tests".into())
}

/// The CAPI fixture CRDs and every CRD inpool generates into `crds/`.
pub fn crd_files() -> Vec<PathBuf> {
    let mut files = yaml_files(&shared_dir().join("fixtures").join("capi"));
    files.extend(yaml_files(&repo_root().join("crds")));
    files
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}
