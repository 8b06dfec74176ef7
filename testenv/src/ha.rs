//! A control plane of two API servers, as a production management cluster has several: a second
//! kube-apiserver on a [`ControlPlane`](crate::ControlPlane)'s etcd, and a TCP balancer in front of
//! both, as a load balancer in front of a real control plane spreads connections. For the fault
//! suite.
//!
//! - [`SecondApiServer`] runs the control plane's own kube-apiserver binary (the supervisor's
//!   `apiserver` mode) with the first API server's very arguments (read from its
//!   `/proc/PID/cmdline`: the same etcd, certificates, tokens and service-account keys) but its
//!   port. Each API server keeps its own watch cache, so a list or a watch through one can be
//!   behind the other. The test freezes (SIGSTOP), stops and starts it. Its etcd connections go
//!   through a [`Link`] the test can hold ([`SecondApiServer::hold_etcd`]): its watch cache then
//!   stops at what it had, and serves that to a list that accepts any resource version
//!   (`resourceVersion=0`), while the first API server serves the truth, as a control-plane node
//!   cut off from etcd does.
//! - [`Balancer`] accepts TCP connections on a loopback port and hands each, round robin, to an
//!   API server its health check finds ready (`GET /readyz` answered within a second, every
//!   half second; any when none is), then copies bytes both ways: TLS passes through, so a client keeps the test
//!   CA and its token. A connection stays on its API server until either end closes it or the
//!   test cuts it ([`Balancer::cut`]), as a load balancer does when it fails over; an API server
//!   found unready only gets no new connections.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

use crate::tethered::{Tethered, free_ports};

/// The kube-apiserver child of the control plane's supervisor `supervisor` (its `apiserver`
/// mode), if one runs.
pub fn apiserver_pid(supervisor: u32) -> Option<u32> {
    child_pids(supervisor).into_iter().find(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        cmdline.split(|b| *b == 0).nth(1) == Some(b"apiserver".as_slice())
    })
}

/// The processes whose parent is `parent`.
fn child_pids(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            ppid == Some(parent)
        })
        .collect()
}

/// `kubeconfig` with its server's port replaced by `port`, written beside it as
/// `kubeconfig-NAME`.
pub fn kubeconfig_on_port(kubeconfig: &Path, port: u16, name: &str) -> anyhow::Result<PathBuf> {
    let text = std::fs::read_to_string(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let server = crate::kubeconfig_server(&text)?;
    let path = kubeconfig.with_file_name(format!("kubeconfig-{name}"));
    std::fs::write(
        &path,
        text.replace(&server, &format!("https://127.0.0.1:{port}")),
    )?;
    Ok(path)
}

/// A second kube-apiserver on a control plane's etcd. Stops when dropped, or when this process
/// exits.
pub struct SecondApiServer {
    binary: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    /// The port it serves on.
    pub port: u16,
    process: Option<Tethered>,
    etcd: Link,
}

impl SecondApiServer {
    /// Starts a second API server beside the first of the control plane whose supervisor is
    /// `supervisor` and whose kubeconfig is `kubeconfig`; returns once it answers `/readyz`.
    pub async fn start(supervisor: u32, kubeconfig: &Path) -> anyhow::Result<SecondApiServer> {
        let first = apiserver_pid(supervisor).context("no kube-apiserver runs")?;
        let cmdline = std::fs::read(format!("/proc/{first}/cmdline"))?;
        let words: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        let (binary, words) = words.split_first().context("an empty command line")?;
        let binary = PathBuf::from(binary);
        let [port] = free_ports()?;
        let etcd_server = "--etcd-servers=http://127.0.0.1:";
        let etcd_port = words
            .iter()
            .find_map(|w| w.strip_prefix(etcd_server)?.parse::<u16>().ok())
            .context("the first API server names no single etcd on 127.0.0.1")?;
        let etcd = Link::start(etcd_port).await?;
        let args: Vec<String> = words
            .iter()
            .cloned()
            .map(|w| {
                if w.starts_with("--secure-port=") {
                    format!("--secure-port={port}")
                } else if w.starts_with(etcd_server) {
                    format!("{etcd_server}{}", etcd.port)
                } else {
                    w
                }
            })
            .collect();
        anyhow::ensure!(
            args.first().map(String::as_str) == Some("apiserver")
                && args.iter().any(|a| *a == format!("--secure-port={port}")),
            "the first API server's command line is not the supervisor's: {args:?}"
        );
        let log = kubeconfig.with_file_name("apiserver-2.log");
        let mut second = SecondApiServer {
            binary,
            args,
            log,
            port,
            process: None,
            etcd,
        };
        second.start_again(kubeconfig).await?;
        Ok(second)
    }

    /// Starts it again after [`SecondApiServer::stop`], on the same port; returns once it
    /// answers `/readyz`.
    pub async fn start_again(&mut self, kubeconfig: &Path) -> anyhow::Result<()> {
        let process = Tethered::spawn(
            "the second kube-apiserver",
            &self.binary,
            &self.args,
            &[],
            self.log.clone(),
        )?;
        let process = self.process.insert(process);
        let own = kubeconfig_on_port(kubeconfig, self.port, "apiserver-2")?;
        let client = crate::client_from_kubeconfig(&own, None).await?;
        let started = std::time::Instant::now();
        loop {
            if ready(&client).await {
                return Ok(());
            }
            anyhow::ensure!(
                process.is_running(),
                "the second kube-apiserver exited; its log ends:\n{}",
                process.log_tail()
            );
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(120),
                "the second kube-apiserver was not ready within 2 minutes; its log ends:\n{}",
                process.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Stops it (SIGTERM to the API server, waited for).
    pub fn stop(&mut self) {
        self.process = None;
    }

    /// Holds its link to etcd: nothing more passes either way until [`SecondApiServer::release_etcd`].
    pub fn hold_etcd(&self) {
        self.etcd.hold(true);
    }

    /// Lets its link to etcd pass again, what was held first.
    pub fn release_etcd(&self) {
        self.etcd.hold(false);
    }

    /// Sends `signal` (`STOP`, `CONT`) to the API server process itself (not the shell that
    /// tethers it).
    pub fn signal(&self, signal: &str) {
        let shell = self
            .process
            .as_ref()
            .expect("the second API server runs")
            .pid();
        let pid = apiserver_pid(shell).expect("the second kube-apiserver process");
        crate::common::signal(pid, signal);
    }
}

/// A TCP relay from a loopback port to another, which the test can hold as a link that stalls:
/// while held, what either side sends waits in the relay (and then in the kernel's buffers) and a
/// new connection waits before it is passed on; released, everything goes on in order. Nothing is
/// lost or closed, so neither side sees an error until its own timeouts give up.
struct Link {
    port: u16,
    held: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Link {
    async fn start(target: u16) -> anyhow::Result<Link> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (held, watching) = watch::channel(false);
        let accept = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((inbound, _)) = listener.accept().await {
                // Forget the connections that ended.
                while connections.try_join_next().is_some() {}
                let mut held = watching.clone();
                connections.spawn(async move {
                    if held.wait_for(|h| !*h).await.is_err() {
                        return;
                    }
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let (from_client, to_client) = inbound.into_split();
                    let (from_server, to_server) = outbound.into_split();
                    tokio::join!(
                        relay(from_client, to_server, held.clone()),
                        relay(from_server, to_client, held),
                    );
                });
            }
        });
        Ok(Link { port, held, accept })
    }

    fn hold(&self, held: bool) {
        self.held.send_replace(held);
    }
}

impl Drop for Link {
    /// Ends the relay and, with its task set, every connection through it.
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies `from` to `to`, each chunk once the link is not held.
async fn relay(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut held: watch::Receiver<bool>,
) {
    let mut chunk = vec![0; 64 * 1024];
    while let Ok(n @ 1..) = from.read(&mut chunk).await {
        if held.wait_for(|h| !*h).await.is_err() || to.write_all(&chunk[..n]).await.is_err() {
            return;
        }
    }
}

/// Whether the API server behind `client` answers `GET /readyz` with `ok` within a second.
async fn ready(client: &kube::Client) -> bool {
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .expect("a request");
    matches!(
        tokio::time::timeout(Duration::from_secs(1), client.request_text(request)).await,
        Ok(Ok(text)) if text == "ok"
    )
}

/// What the balancer shares with its tasks.
struct Shared {
    ports: Vec<u16>,
    healthy: Vec<AtomicBool>,
    next: AtomicUsize,
    /// Connections handed to each API server so far.
    handed: Vec<AtomicUsize>,
    open: Mutex<Vec<(usize, AbortHandle)>>,
}

impl Shared {
    /// The next API server, round robin, among the healthy ones (any when none is).
    fn pick(&self) -> usize {
        let n = self.ports.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| self.healthy[i].load(Ordering::Relaxed))
            .unwrap_or(start % n)
    }
}

/// A TCP balancer in front of API servers.
pub struct Balancer {
    shared: Arc<Shared>,
    kubeconfig: PathBuf,
    tasks: Vec<JoinHandle<()>>,
}

impl Balancer {
    /// Starts a balancer over the API servers on `ports` (127.0.0.1), with a kubeconfig that is
    /// `kubeconfig` pointing at it; returns once its health check has looked at each once.
    pub async fn start(kubeconfig: &Path, ports: &[u16]) -> anyhow::Result<Balancer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let own = kubeconfig_on_port(kubeconfig, listener.local_addr()?.port(), "balancer")?;
        let shared = Arc::new(Shared {
            ports: ports.to_vec(),
            healthy: ports.iter().map(|_| AtomicBool::new(false)).collect(),
            next: AtomicUsize::new(0),
            handed: ports.iter().map(|_| AtomicUsize::new(0)).collect(),
            open: Mutex::new(Vec::new()),
        });
        let mut clients = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let path = kubeconfig_on_port(kubeconfig, *port, &format!("balanced-{i}"))?;
            clients.push(crate::client_from_kubeconfig(&path, None).await?);
        }
        for (i, client) in clients.iter().enumerate() {
            shared.healthy[i].store(ready(client).await, Ordering::Relaxed);
        }
        let health = tokio::spawn(check_health(shared.clone(), clients));
        let accept = tokio::spawn(accept(listener, shared.clone()));
        Ok(Balancer {
            shared,
            kubeconfig: own,
            tasks: vec![health, accept],
        })
    }

    /// A kubeconfig whose server is the balancer.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Closes the open connections, to API server `upstream` or to all (`None`); returns how
    /// many. Their clients connect again, and are handed round robin.
    pub fn cut(&self, upstream: Option<usize>) -> usize {
        let mut open = self.shared.open.lock().unwrap();
        let mut cut = 0;
        open.retain(|(to, task)| {
            if task.is_finished() {
                return false;
            }
            if upstream.is_none_or(|u| u == *to) {
                task.abort();
                cut += 1;
                return false;
            }
            true
        });
        cut
    }

    /// Connections handed to each API server so far.
    pub fn handed(&self) -> Vec<usize> {
        self.shared
            .handed
            .iter()
            .map(|h| h.load(Ordering::Relaxed))
            .collect()
    }

    /// Whether the health check finds each API server ready now.
    pub fn healthy(&self) -> Vec<bool> {
        self.shared
            .healthy
            .iter()
            .map(|h| h.load(Ordering::Relaxed))
            .collect()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.cut(None);
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn check_health(shared: Arc<Shared>, clients: Vec<kube::Client>) {
    loop {
        for (i, client) in clients.iter().enumerate() {
            shared.healthy[i].store(ready(client).await, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        let shared_for_task = shared.clone();
        let to = shared.pick();
        // An API server that stopped since the last health check refuses: the connection is
        // closed and its client connects again, as through a real balancer.
        let task = tokio::spawn(async move {
            let port = shared_for_task.ports[to];
            if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", port)).await {
                shared_for_task.handed[to].fetch_add(1, Ordering::Relaxed);
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
        shared.open.lock().unwrap().push((to, task.abort_handle()));
    }
}
