//! The `inpool` binary as a process: started with a kubeconfig and flags, its JSON log lines
//! collected, its HTTP endpoints read, stopped with a signal (SIGTERM, SIGINT, SIGKILL) or
//! frozen (SIGSTOP). Dropping it kills the process.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::reads::sample;

/// A running `inpool` process with its JSON log lines collected.
pub struct Inpool {
    /// Names the process in messages (several may run in one test).
    pub name: String,
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    addr: SocketAddr,
}

/// An answer of inpool's HTTP server.
pub struct HttpResponse {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: String,
}

impl Inpool {
    /// Starts `inpool --kubeconfig KUBECONFIG ARGS` with JSON logs at level info, its HTTP
    /// server on a free loopback port; returns once the server listens.
    pub fn start(name: &str, kubeconfig: &Path, args: &[&str]) -> Inpool {
        let mut child = Command::new(env!("CARGO_BIN_EXE_inpool"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "--metrics-bind-address=127.0.0.1:0",
                "--health-bind-address=127.0.0.1:0",
                "--log-format=json",
                "--log-level=info",
            ])
            .args(args)
            .env_remove("POD_NAMESPACE")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start inpool");
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Ok(entry) = serde_json::from_str::<Value>(&line)
                        && entry["message"]
                            .as_str()
                            .is_some_and(|m| m.starts_with("HTTP server listening"))
                        && let Some(addr) = entry["addr"].as_str().and_then(|a| a.parse().ok())
                    {
                        let _ = tx.send(addr);
                    }
                    logs.lock().unwrap().push(line);
                }
            });
        }
        let addr: SocketAddr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "inpool {name} did not start its HTTP server; logs:\n{}",
                    logs.lock().unwrap().join("\n")
                );
            }
        };
        Inpool {
            name: name.to_string(),
            child,
            logs,
            addr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every log line so far.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// A GET of one of its endpoints, if it answers within 5 s.
    pub async fn get(&self, path: &str) -> Option<HttpResponse> {
        http_get(self.addr, path).await
    }

    /// The `/metrics` exposition, if it answers 200.
    pub async fn metrics(&self) -> Option<String> {
        let response = self.get("/metrics").await?;
        (response.status == 200).then_some(response.body)
    }

    /// The value of one sample of `/metrics` (`name` with its labels), if present.
    pub async fn sample(&self, name: &str) -> Option<f64> {
        sample(&self.metrics().await?, name)
    }

    /// The `inpool_leader` gauge, if the endpoint answers.
    pub async fn leader(&self) -> Option<bool> {
        self.sample("inpool_leader").await.map(|v| v == 1.0)
    }

    /// Sends `signal` (`TERM`, `INT`, `STOP`, `CONT`…) to the process.
    pub fn signal(&self, signal: &str) {
        self::signal(self.pid(), signal);
    }

    /// Sends SIGTERM; returns the exit code once the process ended (None after 20 s).
    pub fn terminate(&mut self) -> Option<i32> {
        self.stop_with("TERM")
    }

    /// Sends `signal`; returns the exit code once the process ended (None after 20 s).
    pub fn stop_with(&mut self, signal: &str) -> Option<i32> {
        self.signal(signal);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// SIGKILL, and waits for the process to end: nothing is released.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Panics if a request was forbidden (the log says so): the RBAC lacks a rule.
    pub fn assert_nothing_forbidden(&self) {
        let logs = self.logs();
        assert!(
            !logs.to_lowercase().contains("forbidden"),
            "an API request was forbidden to inpool {}:\n{logs}",
            self.name
        );
    }

    /// Panics if the process died by itself or panicked: it may be killed, never crash.
    pub fn assert_healthy(&mut self) {
        let logs = self.logs();
        assert!(
            !logs.contains("panicked"),
            "inpool {} panicked:\n{logs}",
            self.name
        );
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("inpool {} exited by itself ({status}):\n{logs}", self.name);
        }
    }
}

impl Drop for Inpool {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// `kill -SIGNAL PID`; panics if it fails.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A minimal HTTP/1.1 GET (no client library needed for three fixed endpoints).
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<HttpResponse> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        let mut lines = head.lines();
        let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let content_type = lines.find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        });
        Some(HttpResponse {
            status,
            content_type,
            body: body.to_string(),
        })
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}
