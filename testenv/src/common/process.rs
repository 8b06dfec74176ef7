//! The `inpool` binary as a process: started with a kubeconfig and flags, its JSON log lines
//! collected, its HTTP endpoints read (the secure `/metrics` over HTTPS with a bearer token),
//! stopped with a signal (SIGTERM, SIGINT, SIGKILL) or frozen (SIGSTOP). Dropping it kills the
//! process.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::rustls;

use super::reads::sample;

/// A running `inpool` process with its JSON log lines collected.
pub struct Inpool {
    /// Names the process in messages (several may run in one test).
    pub name: String,
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    /// The plain HTTP server of `/healthz` and `/readyz`.
    health_addr: SocketAddr,
    /// The server of `/metrics` (the same as `health_addr` when insecure).
    diagnostics_addr: SocketAddr,
}

/// How the process serves `/metrics`.
pub enum Diagnostics {
    /// `--insecure-diagnostics` on the health server's address: one plain server for all three
    /// paths.
    Insecure,
    /// HTTPS with authentication and authorization, with the certificate of `cert_dir` or a
    /// self-signed one.
    Secure { cert_dir: Option<PathBuf> },
}

/// An answer of inpool's HTTP server.
pub struct HttpResponse {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: String,
}

impl Inpool {
    /// Starts `BINARY --kubeconfig KUBECONFIG ARGS` with JSON logs at level info, one plain
    /// HTTP server for `/metrics`, `/healthz` and `/readyz` on a free loopback port
    /// (`--insecure-diagnostics`); returns once the server listens.
    ///
    /// `binary` is the `inpool` binary under test: the root package's integration tests pass
    /// `env!("CARGO_BIN_EXE_inpool")`, which Cargo sets for them alone.
    pub fn start(binary: impl AsRef<Path>, name: &str, kubeconfig: &Path, args: &[&str]) -> Inpool {
        Inpool::start_with(binary, name, kubeconfig, &Diagnostics::Insecure, args)
    }

    /// Starts `BINARY --kubeconfig KUBECONFIG ARGS` with JSON logs at level info, its servers on
    /// free loopback ports and `/metrics` served as `diagnostics` says; returns once both
    /// servers listen.
    pub fn start_with(
        binary: impl AsRef<Path>,
        name: &str,
        kubeconfig: &Path,
        diagnostics: &Diagnostics,
        args: &[&str],
    ) -> Inpool {
        Inpool::start_command(
            Command::new(binary.as_ref()),
            name,
            kubeconfig,
            diagnostics,
            args,
        )
    }

    /// As [`Inpool::start_with`], with `command` in place of the binary: a program and its
    /// arguments that end by executing `inpool` in the same process (as `chroot ROOT /inpool`
    /// does), to which inpool's arguments are appended; `kubeconfig` is the path inpool sees.
    pub fn start_command(
        mut command: Command,
        name: &str,
        kubeconfig: &Path,
        diagnostics: &Diagnostics,
        args: &[&str],
    ) -> Inpool {
        command.arg("--kubeconfig").arg(kubeconfig).args([
            "--diagnostics-address=127.0.0.1:0",
            "--health-bind-address=127.0.0.1:0",
            "--log-format=json",
            "--log-level=info",
        ]);
        match diagnostics {
            Diagnostics::Insecure => {
                command.arg("--insecure-diagnostics");
            }
            Diagnostics::Secure { cert_dir: None } => {}
            Diagnostics::Secure {
                cert_dir: Some(dir),
            } => {
                command.arg("--diagnostics-cert-dir").arg(dir);
            }
        }
        command
            .args(args)
            .env_remove("POD_NAMESPACE")
            .env_remove("RUST_LOG");
        Inpool::spawn(name, command)
    }

    /// Starts `BINARY ARGS` with exactly the environment `env` (nothing inherited), as a
    /// container of a Deployment runs it: the caller passes the container's args and env (and
    /// `KUBECONFIG`). The args must ask for JSON logs (`--log-format=json`); returns once the
    /// health and diagnostics servers listen.
    pub fn start_as_deployed(
        binary: impl AsRef<Path>,
        name: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Inpool {
        let mut command = Command::new(binary.as_ref());
        command
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)));
        Inpool::spawn(name, command)
    }

    /// Spawns `command` (its stderr collected as log lines) and waits until the log says where
    /// `/healthz` and `/metrics` are served.
    fn spawn(name: &str, mut command: Command) -> Inpool {
        let mut child = command
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
                        && entry["message"] == "HTTP server listening"
                        && let Some(addr) = entry["addr"].as_str().and_then(|a| a.parse().ok())
                    {
                        let serves = entry["serves"].as_str().unwrap_or_default();
                        let _ = tx.send((addr, serves.to_string()));
                    }
                    logs.lock().unwrap().push(line);
                }
            });
        }
        let (mut health_addr, mut diagnostics_addr) = (None, None);
        let deadline = Instant::now() + Duration::from_secs(30);
        while health_addr.is_none() || diagnostics_addr.is_none() {
            let wait = deadline.saturating_duration_since(Instant::now());
            let Ok((addr, serves)) = rx.recv_timeout(wait) else {
                let _ = child.kill();
                panic!(
                    "inpool {name} did not start its HTTP servers; logs:\n{}",
                    logs.lock().unwrap().join("\n")
                );
            };
            if serves.contains("/healthz") {
                health_addr = Some(addr);
            }
            if serves.contains("/metrics") {
                diagnostics_addr = Some(addr);
            }
        }
        Inpool {
            name: name.to_string(),
            child,
            logs,
            health_addr: health_addr.unwrap(),
            diagnostics_addr: diagnostics_addr.unwrap(),
        }
    }

    /// The address `/metrics` is served on.
    pub fn diagnostics_addr(&self) -> SocketAddr {
        self.diagnostics_addr
    }

    /// The plain HTTP server of `/healthz` and `/readyz`.
    pub fn health_addr(&self) -> SocketAddr {
        self.health_addr
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every log line so far.
    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// A plain HTTP GET of one of its endpoints (`/metrics` on the diagnostics address, the
    /// others on the health address), if it answers within 5 s.
    pub async fn get(&self, path: &str) -> Option<HttpResponse> {
        let addr = if path == "/metrics" {
            self.diagnostics_addr
        } else {
            self.health_addr
        };
        http_get(addr, path).await
    }

    /// An HTTPS GET of `path` on the diagnostics address with `Authorization: Bearer TOKEN` if
    /// a token is given (any server certificate accepted), if it answers within 5 s.
    pub async fn https_get(&self, path: &str, token: Option<&str>) -> Option<HttpResponse> {
        https_get(self.diagnostics_addr, path, token).await
    }

    /// Waits until `/readyz` answers 200 (the controllers' caches have synced, or this process
    /// knows it is a standby), or panics after `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) {
        super::wait::wait_for("/readyz to answer 200", timeout, || async {
            self.get("/readyz").await.filter(|r| r.status == 200)
        })
        .await;
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

/// Panics unless `response` is inpool's `/metrics` page: 200, OpenMetrics, its `# EOF`, and the
/// build info.
pub fn assert_openmetrics(response: &HttpResponse) {
    assert_eq!(response.status, 200, "{}", response.body);
    assert_eq!(
        response.content_type.as_deref(),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(response.body.ends_with("# EOF\n"), "{}", response.body);
    assert!(
        response.body.contains("inpool_build_info{version="),
        "{}",
        response.body
    );
}

/// `kill -SIGNAL PID`; panics if it fails.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A minimal HTTP/1.1 GET (no client library needed for a few fixed endpoints).
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<HttpResponse> {
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        get_on(stream, addr, path, None).await
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}

/// [`http_get`] over TLS, with `Authorization: Bearer TOKEN` if a token is given. Any server
/// certificate is accepted: the tests that need it verified hand Prometheus the CA.
pub async fn https_get(addr: SocketAddr, path: &str, token: Option<&str>) -> Option<HttpResponse> {
    let exchange = async {
        let tls = tls_connect(addr, &[]).await?;
        get_on(tls, addr, path, token).await
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}

/// The application protocol the TLS server at `addr` picks among `offered` (ALPN; `None` if it
/// picks none), if the handshake completes within 5 s.
pub async fn negotiated_protocol(addr: SocketAddr, offered: &[&[u8]]) -> Option<Option<Vec<u8>>> {
    let handshake = async {
        let tls = tls_connect(addr, offered).await?;
        Some(tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec))
    };
    tokio::time::timeout(Duration::from_secs(5), handshake)
        .await
        .ok()
        .flatten()
}

/// A TLS connection to `addr` offering the ALPN protocols `alpn`, any server certificate
/// accepted.
async fn tls_connect(
    addr: SocketAddr,
    alpn: &[&[u8]],
) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    connector.connect(name, tcp).await.ok()
}

/// One GET on a connected stream; the answer is read to the end of the connection (a TLS
/// stream closed without close_notify ends it too).
async fn get_on(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Option<HttpResponse> {
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{authorization}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => break,
            Err(_) => return None,
        }
    }
    let text = String::from_utf8(raw).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(&str, &str)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(name, value)| (name.trim(), value.trim()))
        .collect();
    let header = |wanted: &str| {
        headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
            .map(|(_, value)| value.to_string())
    };
    let body = match header("transfer-encoding") {
        Some(coding) if coding.eq_ignore_ascii_case("chunked") => dechunk(body)?,
        _ => body.to_string(),
    };
    Some(HttpResponse {
        status,
        content_type: header("content-type"),
        body,
    })
}

/// The body of a response sent with `Transfer-Encoding: chunked` (as Prometheus sends larger
/// answers).
fn dechunk(mut chunked: &str) -> Option<String> {
    let mut body = String::new();
    loop {
        let (size, rest) = chunked.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.push_str(rest.get(..size)?);
        chunked = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// Accepts any server certificate, still checking the handshake's signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
