//! The diagnostics server's HTTPS side: binding its address and serving over TLS, HTTP/1.1
//! only (as kubebuilder and Cluster API serve metrics, against HTTP/2 rapid reset).
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum_server::tls_rustls::RustlsConfig;

/// How long the server lets requests in flight finish after shutdown is asked.
const GRACE: Duration = Duration::from_secs(5);

/// Binds `addr` (port 0 picks a free port) for the HTTPS server and logs the address bound;
/// `[::]:PORT` falls back to `0.0.0.0:PORT` without IPv6 ([`crate::telemetry::server::listen`]).
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    crate::telemetry::server::listen(addr, "https", "/metrics")
}

/// Serves `routes` over TLS, HTTP/1.1 only, on an already bound listener until `shutdown`
/// completes, then lets requests in flight finish for up to 5 s.
pub async fn serve_tls(
    listener: std::net::TcpListener,
    tls: RustlsConfig,
    routes: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(Some(GRACE));
    });
    axum_server::from_tcp_rustls(listener, tls)?
        .http1_only()
        .handle(handle)
        .serve(routes.into_make_service())
        .await
}
