//! A fault-injecting HTTPS proxy between a client of the test API server (an `inpool` process)
//! and the API server itself, for the fault suite: HTTP-level faults injected for real, on the
//! wire, on command from the test.
//!
//! - TLS is terminated with the control plane's own serving certificate (signed by the test CA,
//!   valid for 127.0.0.1), so that a client keeps the test CA of its kubeconfig; the proxy opens
//!   its own TLS connection to the API server, verified against that CA. The client's headers,
//!   its bearer token included, go upstream unchanged: the test kubeconfig authenticates with a
//!   token, so nothing else is needed.
//! - One upstream connection per client connection: a connection cut here is cut there too, and
//!   HTTP/1.1 (what kube's client speaks) keeps one request at a time on each.
//! - [`FaultProxy::kubeconfig`] is the test kubeconfig with the proxy as its server.
//!
//! On command ([`FaultProxy::set`] adds a [`Rule`]: a [`Fault`] for the requests a [`Match`]
//! selects, optionally a number of times or with a probability):
//! - answer a status (`429` with `Retry-After`, `500`, `503`) without forwarding;
//! - reset the connection (zero linger: the client gets a TCP RST);
//! - delay a request;
//! - blackhole a request: the connection stays open and nothing comes back; the request is held,
//!   and goes upstream only when the rule is removed and its client is still connected (a killed
//!   client's request never does);
//! - forward a write, then lose its answer (a status or a reset in place of the API server's):
//!   the write happened, the client does not know.
//!
//! And for the exchanges already open (watches): [`FaultProxy::cut`] resets their connections,
//! [`FaultProxy::stall`] stops forwarding their bytes for good (a blackholed stream).
//!
//! Every request is logged ([`Seen`]: when, method, path, resource, what it got), so that a test
//! counts writes per claim and checks retry timing against `Retry-After`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Which requests a rule, a cut or a stall applies to; every condition given must hold.
#[derive(Clone, Debug, Default)]
pub struct Match {
    methods: Option<Vec<String>>,
    path: Option<String>,
    query: Option<String>,
    watch: Option<bool>,
}

impl Match {
    /// Every request.
    pub fn all() -> Match {
        Match::default()
    }

    /// Only requests with this method (`"POST"`…).
    pub fn method(mut self, method: &str) -> Match {
        self.methods = Some(vec![method.to_ascii_uppercase()]);
        self
    }

    /// Only writes: POST, PUT, PATCH, DELETE.
    pub fn writes(mut self) -> Match {
        self.methods = Some(
            ["POST", "PUT", "PATCH", "DELETE"]
                .map(String::from)
                .to_vec(),
        );
        self
    }

    /// Only requests whose path contains `part` (e.g. `"/ipaddresses"`).
    pub fn path(mut self, part: &str) -> Match {
        self.path = Some(part.to_string());
        self
    }

    /// Only requests whose query contains `part` (e.g. `"limit="`: pages of a paged list).
    pub fn query(mut self, part: &str) -> Match {
        self.query = Some(part.to_string());
        self
    }

    /// Only watches (`?watch=true`).
    pub fn watches(mut self) -> Match {
        self.watch = Some(true);
        self
    }

    /// Only requests that are not watches.
    pub fn not_watches(mut self) -> Match {
        self.watch = Some(false);
        self
    }

    pub fn matches(&self, seen: &Seen) -> bool {
        self.methods
            .as_ref()
            .is_none_or(|m| m.contains(&seen.method))
            && self.path.as_ref().is_none_or(|p| seen.path.contains(p))
            && self.query.as_ref().is_none_or(|q| seen.query.contains(q))
            && self.watch.is_none_or(|w| w == seen.watch)
    }
}

/// What the proxy does to a request a rule selects.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Answers `code` without forwarding, with `Retry-After: SECONDS` if given, and a
    /// `metav1.Status` body as the API server sends.
    Status { code: u16, retry_after: Option<u64> },
    /// Resets the connection (TCP RST) without forwarding.
    Reset,
    /// Forwards after this long.
    Delay(Duration),
    /// Holds the request: nothing forwarded, nothing answered, the connection left open. Once the
    /// rule is removed, a held request whose client is still connected goes upstream.
    Blackhole,
    /// Forwards the request, then answers `code` in place of the API server's answer.
    StatusAfterForward(u16),
    /// Forwards the request, then resets the connection in place of the API server's answer.
    ResetAfterForward,
}

/// A fault for the requests `matches` selects: the first active rule that selects a request
/// applies to it.
#[derive(Clone, Debug)]
pub struct Rule {
    pub matches: Match,
    pub fault: Fault,
    /// Applies to this many requests, then no more (`None`: to every one).
    pub times: Option<usize>,
    /// Applies to a request with this probability (from the proxy's seeded generator).
    pub probability: f64,
}

impl Rule {
    pub fn new(matches: Match, fault: Fault) -> Rule {
        Rule {
            matches,
            fault,
            times: None,
            probability: 1.0,
        }
    }

    pub fn times(mut self, times: usize) -> Rule {
        self.times = Some(times);
        self
    }

    pub fn probability(mut self, probability: f64) -> Rule {
        self.probability = probability;
        self
    }
}

/// A rule as [`FaultProxy::set`] returns it, for [`FaultProxy::remove`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuleId(u64);

/// One request the proxy received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// When the proxy received its head.
    pub at: Instant,
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub query: String,
    /// The resource (`ipaddresses`, `ipaddressclaims`…) and subresource (`status`) the path
    /// names.
    pub resource: String,
    pub subresource: Option<String>,
    pub watch: bool,
    /// A digest of the body: a client's retry of a request sends the same method, path and
    /// body.
    pub body_digest: u64,
    /// The fault applied, if any.
    pub fault: Option<Fault>,
    /// The status the API server answered, if the request was forwarded and answered.
    pub upstream_status: Option<u16>,
}

impl Seen {
    fn new(method: &str, path: &str, query: &str, body: &[u8]) -> Seen {
        use std::hash::{Hash as _, Hasher as _};
        let mut digest = std::collections::hash_map::DefaultHasher::new();
        body.hash(&mut digest);
        let (resource, subresource) = resource_of(path);
        Seen {
            at: Instant::now(),
            method: method.to_string(),
            path: path.to_string(),
            query: query.to_string(),
            resource,
            subresource,
            watch: query
                .split('&')
                .any(|p| p == "watch=true" || p == "watch=1"),
            body_digest: digest.finish(),
            fault: None,
            upstream_status: None,
        }
    }

    /// The same request as `other`: method, path, query and body.
    pub fn same_request(&self, other: &Seen) -> bool {
        self.method == other.method
            && self.path == other.path
            && self.query == other.query
            && self.body_digest == other.body_digest
    }

    /// A write: POST, PUT, PATCH or DELETE.
    pub fn is_write(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
    }
}

/// The resource and subresource an API path names: `/apis/G/V/namespaces/NS/R/NAME/SUB` and
/// `/api/v1/R/NAME` alike.
fn resource_of(path: &str) -> (String, Option<String>) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return (path.to_string(), None),
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    (
        rest.first().map(|r| r.to_string()).unwrap_or_default(),
        rest.get(2).map(|s| s.to_string()),
    )
}

struct ActiveRule {
    id: RuleId,
    rule: Rule,
    applied: usize,
}

/// An exchange whose response is on its way (a watch while it streams).
struct OpenExchange {
    seen: Seen,
    connection: u64,
    stalled: Arc<AtomicBool>,
}

#[derive(Default)]
struct State {
    rules: Vec<ActiveRule>,
    log: Vec<Seen>,
    /// How many requests [`FaultProxy::take_requests`] took out of `log` so far: request
    /// number `n` is at `log[n - taken]`.
    taken: usize,
    connections: HashMap<u64, Arc<Notify>>,
    open: HashMap<u64, OpenExchange>,
    held: usize,
    rng: u64,
}

impl State {
    fn next_random(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The rule that applies to `seen`, counted as applied.
    fn pick(&mut self, seen: &Seen) -> Option<(RuleId, Fault)> {
        for i in 0..self.rules.len() {
            let active = &self.rules[i];
            if !active.rule.matches.matches(seen)
                || active.rule.times.is_some_and(|t| active.applied >= t)
            {
                continue;
            }
            let probability = active.rule.probability;
            if probability < 1.0 && self.next_random() >= probability {
                continue;
            }
            let active = &mut self.rules[i];
            active.applied += 1;
            return Some((active.id, active.rule.fault.clone()));
        }
        None
    }
}

struct Shared {
    state: Mutex<State>,
    /// Notified when rules are removed: held requests look again.
    rules_removed: Notify,
    next_id: AtomicU64,
    upstream: SocketAddr,
    upstream_tls: tokio_rustls::TlsConnector,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// The running proxy; dropping it stops accepting and closes every connection.
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    kubeconfig: PathBuf,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port in front of the API server of `kubeconfig` (a
    /// test kubeconfig: token authentication, `certificate-authority-data`), presenting the
    /// serving certificate of the control plane's `pki` directory (`serving.crt`,
    /// `serving.key`); writes the kubeconfig that points at the proxy beside `kubeconfig`.
    pub async fn start(kubeconfig: &Path, pki: &Path) -> anyhow::Result<FaultProxy> {
        let text = std::fs::read_to_string(kubeconfig)
            .with_context(|| format!("reading {}", kubeconfig.display()))?;
        let server = crate::kubeconfig_server(&text)?;
        let upstream: SocketAddr = server
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .parse()
            .with_context(|| format!("the server {server} is not https://IP:PORT"))?;
        let ca_pem = std::fs::read(pki.join("ca.crt"))?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca_pem) {
            roots.add(cert?)?;
        }
        let client_config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let chain = CertificateDer::pem_file_iter(pki.join("serving.crt"))?
            .collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(pki.join("serving.key"))?;
        let mut server_config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        server_config.alpn_protocols = vec![b"http/1.1".to_vec()];

        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .subsec_nanos() as u64
            | 1;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                rng: seed,
                ..State::default()
            }),
            rules_removed: Notify::new(),
            next_id: AtomicU64::new(1),
            upstream,
            upstream_tls: tokio_rustls::TlsConnector::from(Arc::new(client_config)),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server_config)),
        });
        let proxied = kubeconfig.with_file_name(format!(
            "{}.proxy-{}",
            kubeconfig
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default(),
            addr.port()
        ));
        std::fs::write(&proxied, text.replace(&server, &format!("https://{addr}")))?;
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        crate::say(&format!(
            "fault proxy on {addr} in front of {upstream} (random seed {seed})"
        ));
        Ok(FaultProxy {
            shared,
            addr,
            kubeconfig: proxied,
            accept,
        })
    }

    /// The kubeconfig whose server is this proxy.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Seeds the generator that draws a rule's probability.
    pub fn seed(&self, seed: u64) {
        self.shared.state().rng = seed | 1;
    }

    /// Adds a rule after the existing ones.
    pub fn set(&self, rule: Rule) -> RuleId {
        let id = RuleId(self.shared.id());
        self.shared.state().rules.push(ActiveRule {
            id,
            rule,
            applied: 0,
        });
        id
    }

    /// Removes a rule; the requests it held go on.
    pub fn remove(&self, id: RuleId) {
        self.shared.state().rules.retain(|r| r.id != id);
        self.shared.rules_removed.notify_waiters();
    }

    /// Removes every rule; held requests go on.
    pub fn clear(&self) {
        self.shared.state().rules.clear();
        self.shared.rules_removed.notify_waiters();
    }

    /// How many requests a rule has applied to so far.
    pub fn applied(&self, id: RuleId) -> usize {
        let state = self.shared.state();
        state
            .rules
            .iter()
            .find(|r| r.id == id)
            .map_or(0, |r| r.applied)
    }

    /// How many requests are held by blackhole rules now.
    pub fn held(&self) -> usize {
        self.shared.state().held
    }

    /// Waits up to `timeout` until at least `count` requests are held; true if they are.
    pub async fn wait_held(&self, count: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.held() < count {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// Resets the connections of the open exchanges `matches` selects (watches among them);
    /// returns how many.
    pub fn cut(&self, matches: &Match) -> usize {
        let state = self.shared.state();
        let mut cut = 0;
        for open in state.open.values() {
            if matches.matches(&open.seen)
                && let Some(connection) = state.connections.get(&open.connection)
            {
                connection.notify_one();
                cut += 1;
            }
        }
        cut
    }

    /// Stops, for good, forwarding the bytes of the open exchanges `matches` selects: their
    /// connections stay open and silent. Returns how many.
    pub fn stall(&self, matches: &Match) -> usize {
        let state = self.shared.state();
        let mut stalled = 0;
        for open in state.open.values() {
            if matches.matches(&open.seen) {
                open.stalled.store(true, Ordering::SeqCst);
                stalled += 1;
            }
        }
        stalled
    }

    /// Every request received so far (since the last [`FaultProxy::take_requests`]).
    pub fn requests(&self) -> Vec<Seen> {
        self.shared.state().log.clone()
    }

    /// Every request received so far, removed from the log: a long run (the soak) keeps the
    /// log short by taking it from time to time.
    pub fn take_requests(&self) -> Vec<Seen> {
        let mut state = self.shared.state();
        state.taken += state.log.len();
        std::mem::take(&mut state.log)
    }

    /// The requests received so far, counted by (method, resource).
    pub fn counts(&self) -> BTreeMap<(String, String), usize> {
        let mut counts = BTreeMap::new();
        for seen in &self.shared.state().log {
            *counts
                .entry((seen.method.clone(), seen.resource.clone()))
                .or_default() += 1;
        }
        counts
    }

    /// How many `method` requests for `resource` were received so far.
    pub fn count(&self, method: &str, resource: &str) -> usize {
        let state = self.shared.state();
        state
            .log
            .iter()
            .filter(|s| s.method == method && s.resource == resource)
            .count()
    }

    /// How many exchanges are open now (watches, mostly).
    pub fn open_exchanges(&self, matches: &Match) -> usize {
        let state = self.shared.state();
        state
            .open
            .values()
            .filter(|o| matches.matches(&o.seen))
            .count()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        let state = self.shared.state();
        for connection in state.connections.values() {
            connection.notify_one();
        }
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        // A connection the proxy closes is reset (RST), as a fault wants it; the client closes
        // its idle ones itself.
        let _ = tcp.set_zero_linger();
        let _ = tcp.set_nodelay(true);
        tokio::spawn(serve(tcp, shared.clone()));
    }
}

/// Serves one client connection over one upstream connection, until either ends or the
/// connection is cut.
async fn serve(tcp: TcpStream, shared: Arc<Shared>) {
    let id = shared.id();
    let cut = Arc::new(Notify::new());
    shared.state().connections.insert(id, cut.clone());
    let served = async {
        let client = shared.acceptor.accept(tcp).await.ok()?;
        let upstream = TcpStream::connect(shared.upstream).await.ok()?;
        let _ = upstream.set_nodelay(true);
        let name = ServerName::IpAddress(shared.upstream.ip().into());
        let upstream = shared.upstream_tls.connect(name, upstream).await.ok()?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake::<_, ProxyBody>(TokioIo::new(upstream))
                .await
                .ok()?;
        let upstream_driver = tokio::spawn(connection);
        let sender = Arc::new(tokio::sync::Mutex::new(sender));
        let service = hyper::service::service_fn(|request| {
            exchange(shared.clone(), id, sender.clone(), request)
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(client), service)
            .await;
        upstream_driver.abort();
        Some(())
    };
    tokio::select! {
        _ = served => {}
        _ = cut.notified() => {}
    }
    let mut state = shared.state();
    state.connections.remove(&id);
    state.open.retain(|_, o| o.connection != id);
}

/// Marks a request held while it lives.
struct Holding(Arc<Shared>);

impl Holding {
    fn new(shared: &Arc<Shared>) -> Holding {
        shared.state().held += 1;
        Holding(shared.clone())
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.0.state().held -= 1;
    }
}

/// One request: a fault, or forwarded upstream and its answer relayed.
async fn exchange(
    shared: Arc<Shared>,
    connection: u64,
    sender: Arc<tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<ProxyBody>>>,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, hyper::Error> {
    // Bodies of API requests are small objects: read whole, so that a retry is recognised by
    // its digest.
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let mut seen = Seen::new(
        parts.method.as_str(),
        parts.uri.path(),
        parts.uri.query().unwrap_or_default(),
        &body,
    );
    let fault = {
        let mut state = shared.state();
        let picked = state.pick(&seen);
        seen.fault = picked.as_ref().map(|(_, f)| f.clone());
        state.log.push(seen.clone());
        (state.taken + state.log.len() - 1, picked)
    };
    let (index, picked) = fault;
    let cut = || {
        if let Some(c) = shared.state().connections.get(&connection) {
            c.notify_one();
        }
    };
    match picked {
        Some((_, Fault::Status { code, retry_after })) => {
            return Ok(status_response(code, retry_after));
        }
        Some((_, Fault::Reset)) => {
            cut();
            return std::future::pending().await;
        }
        Some((_, Fault::Delay(delay))) => tokio::time::sleep(delay).await,
        Some((rule, Fault::Blackhole)) => {
            let _holding = Holding::new(&shared);
            loop {
                let removed = shared.rules_removed.notified();
                if !shared.state().rules.iter().any(|r| r.id == rule) {
                    break;
                }
                removed.await;
            }
        }
        _ => {}
    }

    let upstream_request = Request::from_parts(
        parts,
        Full::new(body).map_err(|never| match never {}).boxed(),
    );
    let response = {
        let mut sender = sender.lock().await;
        sender.ready().await?;
        sender.send_request(upstream_request).await?
    };
    {
        let mut state = shared.state();
        let taken = state.taken;
        if let Some(logged) = index.checked_sub(taken).and_then(|i| state.log.get_mut(i)) {
            logged.upstream_status = Some(response.status().as_u16());
        }
    }
    match picked {
        Some((_, Fault::StatusAfterForward(code))) => {
            // The answer is read to its end, so the connection stays usable upstream.
            let _ = response.into_body().collect().await;
            return Ok(status_response(code, None));
        }
        Some((_, Fault::ResetAfterForward)) => {
            cut();
            return std::future::pending().await;
        }
        _ => {}
    }
    let stalled = Arc::new(AtomicBool::new(false));
    let open_id = shared.id();
    shared.state().open.insert(
        open_id,
        OpenExchange {
            seen,
            connection,
            stalled: stalled.clone(),
        },
    );
    let (parts, body) = response.into_parts();
    let relayed = Relayed {
        inner: body,
        stalled,
        open: OpenGuard(shared.clone(), open_id),
    };
    Ok(Response::from_parts(parts, relayed.boxed()))
}

/// A `metav1.Status` answer with `code`, and `Retry-After` if given.
fn status_response(code: u16, retry_after: Option<u64>) -> Response<ProxyBody> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let reason = match code {
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    };
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("injected by the fault proxy: {code}"),
        "reason": reason,
        "code": code,
    })
    .to_string();
    let mut response = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(seconds) = retry_after {
        response = response.header("retry-after", seconds.to_string());
    }
    response
        .body(
            Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed(),
        )
        .expect("a valid response")
}

/// Removes an open exchange from the table when its response is done or dropped.
struct OpenGuard(Arc<Shared>, u64);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.state().open.remove(&self.1);
    }
}

/// The API server's response body, relayed until the exchange is stalled.
struct Relayed {
    inner: Incoming,
    stalled: Arc<AtomicBool>,
    #[allow(dead_code)] // held for its Drop
    open: OpenGuard,
}

impl Body for Relayed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if this.stalled.load(Ordering::SeqCst) {
            // Silent for good: nothing will wake it; the client gives up and closes.
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        !self.stalled.load(Ordering::SeqCst) && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::resource_of;

    #[test]
    fn resources_are_read_from_paths() {
        let of = |p: &str| resource_of(p);
        assert_eq!(
            of("/apis/ipam.cluster.x-k8s.io/v1beta2/namespaces/ns/ipaddresses"),
            ("ipaddresses".into(), None)
        );
        assert_eq!(
            of("/apis/ipam.cluster.x-k8s.io/v1beta2/namespaces/ns/ipaddressclaims/c/status"),
            ("ipaddressclaims".into(), Some("status".into()))
        );
        assert_eq!(of("/api/v1/namespaces"), ("namespaces".into(), None));
        assert_eq!(of("/api/v1/namespaces/ns"), ("namespaces".into(), None));
        assert_eq!(
            of("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"),
            ("leases".into(), None)
        );
    }
}
