//! The provider under test as a separate process, and what Linux says about processes:
//! CPU seconds (`/proc/<pid>/stat`) and peak resident memory (`VmHWM` in `/proc/<pid>/status`).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How to start a provider: a shell command with placeholders (each substituted shell-quoted):
/// `{kubeconfig}`, `{namespace}`, `{concurrency}`, `{metrics_addr}`, `{health_addr}`.
#[derive(Clone, Debug)]
pub struct ProviderSpec {
    /// Name in the report, e.g. `inpool`.
    pub name: String,
    pub command: String,
    /// The provider is inpool: it keeps `IPAddressReservation`s (checked one per claim) and
    /// exports `inpool_reconciles_total` on `{metrics_addr}`.
    pub is_inpool: bool,
}

impl ProviderSpec {
    /// inpool's binary, limited to the scenario namespace, with the given concurrency.
    pub fn inpool(binary: &Path) -> ProviderSpec {
        ProviderSpec {
            name: "inpool".into(),
            command: format!(
                "{} --kubeconfig {{kubeconfig}} --namespace {{namespace}} \
                 --concurrency {{concurrency}} --insecure-diagnostics \
                 --diagnostics-address {{metrics_addr}} --health-bind-address {{health_addr}}",
                shell_quote(&binary.to_string_lossy())
            ),
            is_inpool: true,
        }
    }

    /// The reference provider's manager (`crate::reference`), limited to the scenario namespace
    /// with its own `--namespace` flag, its webhooks and leader election off as in the tests'
    /// bed. It has no concurrency flag: its claim controller runs controller-runtime's default,
    /// one reconcile at a time.
    pub fn reference(binary: &Path) -> ProviderSpec {
        ProviderSpec {
            name: "reference".into(),
            command: format!(
                "{} --kubeconfig={{kubeconfig}} --namespace={{namespace}} --leader-elect=false \
                 --webhook-port=0 --insecure-diagnostics --diagnostics-address={{metrics_addr}} \
                 --health-probe-bind-address={{health_addr}}",
                shell_quote(&binary.to_string_lossy())
            ),
            is_inpool: false,
        }
    }

    /// The command line with every placeholder filled in.
    pub fn render(
        &self,
        kubeconfig: &Path,
        namespace: &str,
        concurrency: usize,
        metrics_addr: SocketAddr,
        health_addr: SocketAddr,
    ) -> String {
        self.command
            .replace("{kubeconfig}", &shell_quote(&kubeconfig.to_string_lossy()))
            .replace("{namespace}", &shell_quote(namespace))
            .replace("{concurrency}", &concurrency.to_string())
            .replace("{metrics_addr}", &metrics_addr.to_string())
            .replace("{health_addr}", &health_addr.to_string())
    }
}

pub fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=,+@".contains(c))
    {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_local_addr() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?)
}

/// A running provider: `sh -c 'exec COMMAND'`, so the process measured is the provider itself.
pub struct ProviderProcess {
    child: tokio::process::Child,
    pub pid: u32,
    pub metrics_addr: SocketAddr,
    /// Where the provider serves `/healthz` and `/readyz` (`{health_addr}`).
    pub health_addr: SocketAddr,
    pub command_line: String,
    pub log: PathBuf,
}

impl ProviderProcess {
    pub fn start(
        spec: &ProviderSpec,
        kubeconfig: &Path,
        namespace: &str,
        concurrency: usize,
        log: &Path,
    ) -> anyhow::Result<ProviderProcess> {
        let metrics_addr = free_local_addr()?;
        let health_addr = free_local_addr()?;
        let command_line = spec.render(
            kubeconfig,
            namespace,
            concurrency,
            metrics_addr,
            health_addr,
        );
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let out = std::fs::File::create(log)
            .with_context(|| format!("creating the provider log {}", log.display()))?;
        let err = out.try_clone()?;
        let child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(format!("exec {command_line}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the provider: {command_line}"))?;
        let pid = child.id().context("the provider exited at once")?;
        Ok(ProviderProcess {
            child,
            pid,
            metrics_addr,
            health_addr,
            command_line,
            log: log.to_path_buf(),
        })
    }

    /// `Some(description)` once the process has ended.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// The last lines of its log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn stat(&self) -> Option<ProcStat> {
        proc_stat(self.pid)
    }

    /// SIGTERM, then up to 20 s for a clean exit, then SIGKILL. Returns the exit code.
    pub async fn stop(mut self) -> Option<i32> {
        self.signal_and_wait(StopSignal::Term)
            .await
            .ok()
            .and_then(|status| status.code())
    }

    /// Sends `signal` and waits for the exit (after SIGTERM at most 20 s, then SIGKILL).
    /// Returns how the process ended.
    pub async fn signal_and_wait(
        &mut self,
        signal: StopSignal,
    ) -> anyhow::Result<std::process::ExitStatus> {
        let name = match signal {
            StopSignal::Term => "-TERM",
            StopSignal::Kill => "-KILL",
        };
        std::process::Command::new("kill")
            .args([name, &self.pid.to_string()])
            .status()
            .with_context(|| format!("kill {name} {}", self.pid))?;
        match tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                self.child.kill().await?;
                Ok(self.child.wait().await?)
            }
        }
    }
}

/// How the harness stops a provider it restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGTERM: a rolling upgrade or a drained node (the process shuts down cleanly).
    Term,
    /// SIGKILL: a crash, an OOM kill, a lost node (nothing is flushed or released).
    Kill,
}

impl StopSignal {
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Term => "SIGTERM",
            StopSignal::Kill => "SIGKILL",
        }
    }
}

/// CPU and memory of one process.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcStat {
    /// User + system CPU seconds since the process started.
    pub cpu_seconds: f64,
    /// Resident memory now, KiB.
    pub rss_kib: u64,
    /// Peak resident memory (high-water mark), KiB.
    pub hwm_kib: u64,
}

fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Reads `/proc/<pid>/stat` and `/proc/<pid>/status` (Linux).
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at field 3 (state).
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some(ProcStat {
        cpu_seconds: (utime + stime) / clock_ticks(),
        rss_kib: kib("VmRSS:"),
        hwm_kib: kib("VmHWM:"),
    })
}

/// CPU seconds of a process and all its descendants (the control plane runs the API server and
/// the controller manager as child processes).
pub fn tree_cpu_seconds(root: u32) -> Option<f64> {
    Some(
        process_tree(root)?
            .iter()
            .filter_map(|p| proc_stat(*p))
            .map(|s| s.cpu_seconds)
            .sum(),
    )
}

/// Peak resident memory (VmHWM) of the test control plane's parts, MiB: the supervisor, which
/// hosts etcd in-process, and the API server, the child process it runs as `apiserver`.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct PlanePeaks {
    pub api_server_mib: Option<f64>,
    pub etcd_mib: Option<f64>,
}

pub fn plane_peaks(root: u32) -> PlanePeaks {
    let peak = |pid: u32| proc_stat(pid).map(|s| s.hwm_kib as f64 / 1024.0);
    let api_server = process_tree(root)
        .unwrap_or_default()
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                cmdline.split(|b| *b == 0).nth(1) == Some(b"apiserver".as_slice())
            })
        });
    PlanePeaks {
        api_server_mib: api_server.and_then(peak),
        etcd_mib: peak(root),
    }
}

/// A process and all its descendants.
fn process_tree(root: u32) -> Option<Vec<u32>> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let ppid = stat[close + 2..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        parents.push((pid, ppid));
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    Some(tree)
}

/// `GET http://ADDR/metrics` (plain HTTP/1.0 on 127.0.0.1): the provider's own metrics page.
pub async fn http_get_metrics(addr: SocketAddr) -> anyhow::Result<String> {
    Ok(http_get(addr, "/metrics").await?.1)
}

/// `GET http://ADDR/PATH` (plain HTTP/1.0 on 127.0.0.1): the status code and the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
            .await??;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut body = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut body)).await??;
    let text = String::from_utf8_lossy(&body).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP status line from {addr}{path}"))?;
    Ok((
        code,
        text.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    ))
}

/// Sum of every sample of `metric` (any labels) on a Prometheus/OpenMetrics page.
pub fn metric_sum(page: &str, metric: &str) -> Option<f64> {
    let mut found = false;
    let mut sum = 0.0;
    for line in page.lines() {
        let Some(rest) = line.strip_prefix(metric) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let value = match rest.rfind('}') {
            Some(end) => &rest[end + 1..],
            None => rest,
        };
        if let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            sum += v;
            found = true;
        }
    }
    found.then_some(sum)
}
