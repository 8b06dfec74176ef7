//! The Go programs the tests run beside the control plane (CAPI core's manager, CAPV's manager,
//! the vCenter simulator): started tied to this process, logged to a file, probed until ready.
//! [`ReadyManager`] is the start the managers with webhooks share; [`serving_certificate_as_tls`]
//! is the certificate of those that read only controller-runtime's default file names.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::ControlPlane;

/// A child process that stops when this process exits, however it exits: its standard input is
/// a pipe from this process, and a shell stops the program when the pipe closes (controller-
/// runtime managers do not watch their stdin).
pub struct Tethered {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    /// Where the program's stdout and stderr go.
    pub log: PathBuf,
}

impl Tethered {
    /// Starts `program` with `args` and `env`, its output in `log`. `name` is what errors call it.
    pub fn spawn(
        name: &str,
        program: &std::path::Path,
        args: &[String],
        env: &[(&str, &std::ffi::OsStr)],
        log: PathBuf,
    ) -> anyhow::Result<Tethered> {
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(concat!(
                // An asynchronous list reads /dev/null unless told otherwise: keep stdin as fd 3.
                r#"exec 3<&0; "$@" </dev/null & program=$!; "#,
                r#"(cat <&3 >/dev/null; kill "$program" 2>/dev/null) & wait "$program""#
            ))
            .arg(name)
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        let stdin = child.stdin.take();
        Ok(Tethered {
            name: name.to_string(),
            child,
            stdin,
            log,
        })
    }

    /// Waits until `ready` returns true, failing early (with the end of the log) if the program
    /// exits, or after `timeout`.
    pub async fn wait_until(
        &mut self,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        while !ready() {
            if !self.is_running() {
                bail!(
                    "{} exited before it was ready; its log ({}) ends:\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail()
                );
            }
            if started.elapsed() > timeout {
                bail!(
                    "{} was not ready within {timeout:?}; its log ({}) ends:\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(())
    }

    /// The last lines of the log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// The process id of the shell that runs the program (the program is its child).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the program runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Tethered {
    /// Closing stdin asks the shell to stop the program; after 30 s it is killed.
    fn drop(&mut self) {
        self.stdin.take();
        for _ in 0..300 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Free loopback ports, distinct: the listeners are held until every port is chosen.
pub fn free_ports<const N: usize>() -> anyhow::Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

/// The loopback ports of a Cluster API manager (CAPI core's, CAPV's) started by the tests.
pub struct ManagerPorts {
    pub webhook: u16,
    pub health: u16,
    pub diagnostics: u16,
}

impl ManagerPorts {
    /// Three distinct free ports.
    pub fn free() -> anyhow::Result<ManagerPorts> {
        let [webhook, health, diagnostics] = free_ports()?;
        Ok(ManagerPorts {
            webhook,
            health,
            diagnostics,
        })
    }

    /// The flags Cluster API's managers share (`sigs.k8s.io/cluster-api/util/flags`) for these
    /// ports, with the webhook serving the control plane's certificate from `pki` (valid for
    /// 127.0.0.1) and plain-HTTP diagnostics.
    pub fn flags(&self, pki: &Path) -> Vec<String> {
        vec![
            format!("--webhook-port={}", self.webhook),
            format!("--webhook-cert-dir={}", pki.display()),
            "--webhook-cert-name=serving.crt".into(),
            "--webhook-key-name=serving.key".into(),
            format!("--health-addr=127.0.0.1:{}", self.health),
            format!("--diagnostics-address=127.0.0.1:{}", self.diagnostics),
            "--insecure-diagnostics".into(),
        ]
    }

    /// The webhook server's base URL.
    pub fn webhook_base(&self) -> String {
        format!("https://127.0.0.1:{}", self.webhook)
    }
}

/// A controller-runtime manager's `/readyz` on 127.0.0.1:`port` answers 200.
pub fn readyz(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200")
}

/// A Go manager with webhooks (CAPI core's, CAPV's, CAPM3's, cluster-api-operator's) started
/// against a control plane and ready, with what registering its webhooks needs.
pub struct ReadyManager {
    pub process: Tethered,
    /// An admin client of the control plane.
    pub client: kube::Client,
    /// The control plane's CA, which signed the serving certificate the webhooks serve: the
    /// `caBundle` of every webhook registration.
    pub ca_bundle: Vec<u8>,
    /// When the manager was started: the wait for the API server to call its webhooks counts
    /// from here.
    pub started: Instant,
}

impl ReadyManager {
    /// Starts `program` with `args` and `env` as `name`, its output in `<name>.log` in the data
    /// directory of `plane`, and returns once its `/readyz` on 127.0.0.1:`health` answers, within
    /// `timeout`.
    pub async fn start(
        plane: &ControlPlane,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &std::ffi::OsStr)],
        health: u16,
        timeout: Duration,
    ) -> anyhow::Result<ReadyManager> {
        let log = plane.data_dir.join(format!("{name}.log"));
        let mut process = Tethered::spawn(name, program, args, env, log)?;
        let started = Instant::now();
        process.wait_until(timeout, || readyz(health)).await?;
        let client = plane.client().await?;
        let ca_bundle = std::fs::read(plane.data_dir.join("pki").join("ca.crt"))
            .context("reading the control plane CA")?;
        Ok(ReadyManager {
            process,
            client,
            ca_bundle,
            started,
        })
    }
}

/// The control plane's serving certificate (valid for 127.0.0.1) copied, as `tls.crt` and
/// `tls.key`, to the directory `dir` of its data directory, which is returned: a manager whose
/// webhook server has no flags for the file names reads controller-runtime's defaults.
pub fn serving_certificate_as_tls(plane: &ControlPlane, dir: &str) -> anyhow::Result<PathBuf> {
    let pki = plane.data_dir.join("pki");
    let certs = plane.data_dir.join(dir);
    std::fs::create_dir_all(&certs).with_context(|| format!("creating {}", certs.display()))?;
    for (from, to) in [("serving.crt", "tls.crt"), ("serving.key", "tls.key")] {
        std::fs::copy(pki.join(from), certs.join(to))
            .with_context(|| format!("copying the control plane's {from}"))?;
    }
    Ok(certs)
}
