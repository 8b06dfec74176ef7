//! The plain HTTP servers: `/healthz` (liveness) and `/readyz` (readiness) on the health
//! address, and `/metrics` (OpenMetrics) with `--insecure-diagnostics` (the secure `/metrics` is
//! [`super::diagnostics`]); [`Paths`] says which a server answers.
//!
//! - `/healthz` answers 200 `ok` while the process runs.
//! - `/readyz` answers 200 `ok` once the leader election state is known and, if this process
//!   is the one running the controllers, their caches have synced; otherwise 503 with the
//!   reason. A standby replica holds no caches (the controllers run only on the leader), so it is
//!   ready as soon as it knows it is not the leader.
//! - `/metrics` answers the registry with content type
//!   `application/openmetrics-text; version=1.0.0; charset=utf-8`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use super::Metrics;

/// Content type of `/metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Default)]
struct Inner {
    caches_synced: AtomicBool,
    leader_state_known: AtomicBool,
    leading: AtomicBool,
    metrics: Option<Metrics>,
}

/// What `/readyz` reports, shared by the controllers, leader election and the server. Cheap to
/// clone (all clones share the state).
#[derive(Clone, Debug, Default)]
pub struct HealthState {
    inner: Arc<Inner>,
}

impl HealthState {
    /// A state of its own (nothing synced, leader state unknown, not leading).
    pub fn new() -> HealthState {
        HealthState::default()
    }

    /// A state whose leading flag is also exported by `metrics` ([`Metrics::set_leader`]).
    pub fn with_metrics(metrics: &Metrics) -> HealthState {
        HealthState {
            inner: Arc::new(Inner {
                metrics: Some(metrics.clone()),
                ..Inner::default()
            }),
        }
    }

    /// Called by the controllers once their caches and stores have synced, and with
    /// `false` when they stop.
    pub fn set_caches_synced(&self, synced: bool) {
        self.inner.caches_synced.store(synced, Ordering::SeqCst);
    }

    /// Called by leader election once it knows whether this process leads (and always true when
    /// leader election is off).
    pub fn set_leader_state_known(&self, known: bool) {
        self.inner.leader_state_known.store(known, Ordering::SeqCst);
    }

    /// Whether this process runs the controllers now (the leader, or leader election off).
    pub fn set_leading(&self, leading: bool) {
        self.inner.leading.store(leading, Ordering::SeqCst);
        if let Some(metrics) = &self.inner.metrics {
            metrics.set_leader(leading);
        }
    }

    pub fn caches_synced(&self) -> bool {
        self.inner.caches_synced.load(Ordering::SeqCst)
    }

    pub fn leader_state_known(&self) -> bool {
        self.inner.leader_state_known.load(Ordering::SeqCst)
    }

    pub fn is_leading(&self) -> bool {
        self.inner.leading.load(Ordering::SeqCst)
    }

    /// `Ok` when ready, else the reason.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if !self.leader_state_known() {
            return Err("leader election state not known yet");
        }
        if self.is_leading() && !self.caches_synced() {
            return Err("caches not synced yet");
        }
        Ok(())
    }
}

/// Which paths a server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Paths {
    /// `/healthz` and `/readyz`.
    Health,
    /// `/metrics`.
    Metrics,
    /// All three (the demo; `--insecure-diagnostics` on the health address).
    All,
}

impl Paths {
    /// The paths, for the log.
    pub fn describe(self) -> &'static str {
        match self {
            Paths::Health => "/healthz, /readyz",
            Paths::Metrics => "/metrics",
            Paths::All => "/metrics, /healthz, /readyz",
        }
    }
}

#[derive(Clone)]
struct AppState {
    health: HealthState,
    metrics: Metrics,
}

/// The routes of `paths`, for serving or for tests.
pub fn router(paths: Paths, health: HealthState, metrics: Metrics) -> Router {
    let mut router = Router::new();
    if paths != Paths::Metrics {
        router = router
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz));
    }
    if paths != Paths::Health {
        router = router.route("/metrics", get(metrics_handler));
    }
    router.with_state(AppState { health, metrics })
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.health.readiness() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response(),
    }
}

async fn metrics_handler(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        state.metrics.encode(),
    )
        .into_response()
}

/// Binds `addr` (port 0 picks a free port) for a server of `paths` and logs the address
/// actually bound; `[::]:PORT` falls back to `0.0.0.0:PORT` without IPv6 ([`listen`]).
pub async fn bind(addr: SocketAddr, paths: Paths) -> std::io::Result<TcpListener> {
    TcpListener::from_std(listen(addr, "http", paths.describe())?)
}

/// Binds `addr` (non-blocking, for tokio) and logs `HTTP server listening` with the address
/// actually bound, the `scheme` and the paths it `serves`. The IPv6 wildcard `[::]:PORT` (what
/// `:PORT` means) listens on IPv6 and, as Linux does by default, IPv4; where IPv6 is not
/// available it falls back to `0.0.0.0:PORT` ([`bind_falling_back`]).
pub fn listen(
    addr: SocketAddr,
    scheme: &str,
    serves: &str,
) -> std::io::Result<std::net::TcpListener> {
    let listener = bind_falling_back(addr, std::net::TcpListener::bind)?;
    listener.set_nonblocking(true)?;
    tracing::info!(
        addr = %listener.local_addr()?,
        scheme,
        serves,
        "HTTP server listening"
    );
    Ok(listener)
}

/// `bind(addr)`; if `addr` is `[::]:PORT` and that fails other than because the port is taken
/// or not allowed (no IPv6: the address family unsupported, the address unavailable),
/// `bind(0.0.0.0:PORT)`. Fails with the first error if the fallback fails too.
pub fn bind_falling_back<L>(
    addr: SocketAddr,
    mut bind: impl FnMut(SocketAddr) -> std::io::Result<L>,
) -> std::io::Result<L> {
    use std::io::ErrorKind;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    match bind(addr) {
        Err(e)
            if addr.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED)
                && !matches!(e.kind(), ErrorKind::AddrInUse | ErrorKind::PermissionDenied) =>
        {
            let ipv4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), addr.port());
            tracing::info!(%addr, error = %e, fallback = %ipv4, "no IPv6: listening on IPv4 only");
            bind(ipv4).map_err(|_| e)
        }
        result => result,
    }
}

/// Serves `routes` on an already bound listener until `shutdown` completes, then finishes the
/// requests in flight.
pub async fn serve_on(
    listener: TcpListener,
    routes: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, routes)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get_path(app: &Router, path: &str) -> (StatusCode, Option<String>, String) {
        let response = app
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            content_type,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn healthz_is_always_ok() {
        let app = router(Paths::All, HealthState::new(), Metrics::new());
        let (status, _, body) = get_path(&app, "/healthz").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "ok\n");
    }

    #[tokio::test]
    async fn readyz_needs_leader_state_and_synced_caches_on_the_leader() {
        let health = HealthState::new();
        let app = router(Paths::All, health.clone(), Metrics::new());

        let (status, _, body) = get_path(&app, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "leader election state not known yet\n");

        // Caches alone are not enough.
        health.set_caches_synced(true);
        assert_eq!(
            get_path(&app, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        health.set_caches_synced(false);

        // A standby that knows it is one is ready without caches.
        health.set_leader_state_known(true);
        assert_eq!(get_path(&app, "/readyz").await.0, StatusCode::OK);

        // The leader is ready only once its caches synced.
        health.set_leading(true);
        let (status, _, body) = get_path(&app, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "caches not synced yet\n");
        health.set_caches_synced(true);
        let (status, _, body) = get_path(&app, "/readyz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));

        // Losing the leader state again makes it unready.
        health.set_leader_state_known(false);
        assert_eq!(
            get_path(&app, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[tokio::test]
    async fn metrics_are_openmetrics() {
        let metrics = Metrics::new();
        let health = HealthState::with_metrics(&metrics);
        health.set_leading(true);
        let app = router(Paths::All, health, metrics);
        let (status, content_type, body) = get_path(&app, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type.as_deref(), Some(OPENMETRICS_CONTENT_TYPE));
        assert!(body.ends_with("# EOF\n"), "{body}");
        assert!(body.contains("\ninpool_leader 1\n"), "{body}");
    }

    #[tokio::test]
    async fn each_server_answers_only_its_paths() {
        let health = router(Paths::Health, HealthState::new(), Metrics::new());
        assert_eq!(get_path(&health, "/healthz").await.0, StatusCode::OK);
        assert_eq!(get_path(&health, "/metrics").await.0, StatusCode::NOT_FOUND);
        let metrics = router(Paths::Metrics, HealthState::new(), Metrics::new());
        assert_eq!(get_path(&metrics, "/metrics").await.0, StatusCode::OK);
        assert_eq!(get_path(&metrics, "/readyz").await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn unknown_paths_are_404() {
        let app = router(Paths::All, HealthState::new(), Metrics::new());
        assert_eq!(get_path(&app, "/").await.0, StatusCode::NOT_FOUND);
    }

    #[test]
    fn the_ipv6_wildcard_falls_back_to_ipv4_only_without_ipv6() {
        use std::io::{Error, ErrorKind};
        let v6: SocketAddr = "[::]:8443".parse().unwrap();
        let v4: SocketAddr = "0.0.0.0:8443".parse().unwrap();
        // Binding `[::]` works: no fallback.
        let mut tried = Vec::new();
        let bound = bind_falling_back(v6, |a| {
            tried.push(a);
            Ok(a)
        });
        assert_eq!((bound.unwrap(), tried), (v6, vec![v6]));
        // No IPv6: the IPv4 wildcard, same port.
        let mut tried = Vec::new();
        let bound = bind_falling_back(v6, |a| {
            tried.push(a);
            if a.is_ipv6() {
                Err(Error::new(ErrorKind::AddrNotAvailable, "no IPv6"))
            } else {
                Ok(a)
            }
        });
        assert_eq!((bound.unwrap(), tried), (v4, vec![v6, v4]));
        // A taken port, a specific address, or a failing fallback: the first error, as is.
        for (addr, kind) in [
            (v6, ErrorKind::AddrInUse),
            (v6, ErrorKind::PermissionDenied),
            ("[::1]:8443".parse().unwrap(), ErrorKind::AddrNotAvailable),
        ] {
            let mut tried = Vec::new();
            let error = bind_falling_back(addr, |a| -> std::io::Result<SocketAddr> {
                tried.push(a);
                Err(Error::new(kind, "no"))
            })
            .unwrap_err();
            assert_eq!((error.kind(), tried), (kind, vec![addr]), "{addr} {kind:?}");
        }
        let error = bind_falling_back(v6, |a| -> std::io::Result<SocketAddr> {
            Err(Error::new(
                ErrorKind::AddrNotAvailable,
                if a.is_ipv6() { "first" } else { "second" },
            ))
        })
        .unwrap_err();
        assert_eq!(error.to_string(), "first");
    }

    #[tokio::test]
    async fn serves_on_a_socket_and_stops_on_shutdown() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = bind("127.0.0.1:0".parse().unwrap(), Paths::All)
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_on(
            listener,
            router(Paths::All, HealthState::new(), Metrics::new()),
            async move {
                let _ = stopped.await;
            },
        ));
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        stop.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), server)
            .await
            .expect("server stops after shutdown")
            .unwrap()
            .unwrap();
    }
}
