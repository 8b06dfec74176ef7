//! The `inpool` controller binary: parses the command line, sets up logging, metrics, the health
//! server and the diagnostics server (`/metrics`, HTTPS with authentication unless
//! `--insecure-diagnostics`), connects to the API server and runs the controllers — under leader
//! election with `--leader-elect` — until SIGTERM or SIGINT, then stops cleanly and exits 0.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use kube::Client;
use kube::client::ClientBuilder;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};
use tokio::sync::watch;

use axum_server::tls_rustls::RustlsConfig;
use inpool::cli::{Args, DiagnosticsMode, DiagnosticsSettings};
use inpool::telemetry::{
    HealthState, Metrics, Paths, RestClientLayer, diagnostics, logging, server,
};

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse_checked();
    logging::init(args.log_format, &args.log_filter());
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "inpool failed");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "starting inpool");
    for caveat in args.caveats() {
        tracing::warn!("{caveat}");
    }
    let settings = args.settings();
    let metrics = Metrics::new();
    let health = HealthState::with_metrics(&metrics);

    // Shutdown: SIGTERM or SIGINT flips the channel; everything waits on a receiver.
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        let reason = wait_for_signal().await;
        tracing::info!(signal = reason, "shutdown requested");
        let _ = stop_tx.send(true);
    });
    let stopped = {
        let rx = stop_rx.clone();
        move || {
            let mut rx = rx.clone();
            async move {
                let _ = rx.wait_for(|stop| *stop).await;
            }
        }
    };

    // HTTP servers first, so that liveness answers while we connect.
    let (server_stop_tx, server_stop_rx) = watch::channel(false);
    let server_stopped = move || {
        let mut rx = server_stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let diagnostics = args.diagnostics();
    let mut servers = Vec::new();
    let secure = start_plain_servers(
        &args,
        &diagnostics,
        &health,
        &metrics,
        &server_stopped,
        &mut servers,
    )
    .await?;

    let client = connect(args.kubeconfig.as_deref(), &metrics).await?;
    if let Some((listener, tls)) = secure {
        let gate = diagnostics::Gate::new(diagnostics::ApiReviewer::new(client.clone()));
        let routes = diagnostics::protect(
            server::router(Paths::Metrics, health.clone(), metrics.clone()),
            gate,
        );
        servers.push(tokio::spawn(diagnostics::serve_tls(
            listener,
            tls,
            routes,
            server_stopped(),
        )));
    }

    let result = if args.leader_elect {
        let lease = args.lease_settings();
        metrics.elect_on(&lease.name);
        tracing::info!(
            lease = %lease.name,
            namespace = %lease.namespace,
            identity = %lease.identity,
            duration_seconds = lease.duration.as_secs(),
            "leader election on"
        );
        let work = {
            let (client, settings, metrics, health) = (
                client.clone(),
                settings.clone(),
                metrics.clone(),
                health.clone(),
            );
            move || {
                let run = inpool::controllers::run(
                    client.clone(),
                    settings.clone(),
                    metrics.clone(),
                    health.clone(),
                );
                let clear = ClearPoolsOnDrop(metrics.clone());
                async move {
                    let _clear = clear;
                    run.await
                }
            }
        };
        inpool::leader::run_as_leader(client, lease, health.clone(), work, stopped()).await
    } else {
        health.set_leader_state_known(true);
        health.set_leading(true);
        let controllers =
            inpool::controllers::run(client, settings, metrics.clone(), health.clone());
        tokio::select! {
            () = stopped() => {
                tracing::info!("shutting down: controllers stopped");
                Ok(())
            }
            result = controllers => result,
        }
    };
    // The controllers only end by themselves on an error; make an unexplained end one too.
    let result = result.and_then(|()| {
        if *stop_rx.borrow() {
            Ok(())
        } else {
            Err(anyhow::anyhow!("the controllers stopped unexpectedly"))
        }
    });
    health.set_leading(false);

    let _ = server_stop_tx.send(true);
    for handle in servers {
        match tokio::time::timeout(std::time::Duration::from_secs(5), handle).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "HTTP server error"),
            Ok(Err(e)) => tracing::warn!(error = %e, "HTTP server task failed"),
            Err(_) => tracing::warn!("HTTP server did not stop within 5s"),
        }
    }
    if result.is_ok() {
        tracing::info!("inpool stopped");
    }
    result
}

/// The plain HTTP servers: health; `/metrics` with `--insecure-diagnostics`; the deprecated plain
/// `/metrics` of `--metrics-bind-address`. Equal addresses make one server that answers all of
/// their paths. The HTTPS diagnostics server needs a port of its own.
fn plain_servers(
    health: SocketAddr,
    diagnostics: &DiagnosticsSettings,
) -> anyhow::Result<Vec<(SocketAddr, Paths)>> {
    let mut wanted = vec![(health, Paths::Health)];
    if diagnostics.mode == DiagnosticsMode::Insecure {
        wanted.push((diagnostics.address, Paths::Metrics));
    }
    wanted.extend(
        diagnostics
            .plain_metrics
            .map(|address| (address, Paths::Metrics)),
    );
    let mut servers: Vec<(SocketAddr, Paths)> = Vec::new();
    for (address, paths) in wanted {
        match servers.iter_mut().find(|(a, _)| *a == address) {
            Some((_, merged)) if *merged != paths => *merged = Paths::All,
            Some(_) => {}
            None => servers.push((address, paths)),
        }
    }
    if let DiagnosticsMode::Secure { .. } = diagnostics.mode
        && diagnostics.address.port() != 0
        && let Some((address, _)) = servers.iter().find(|(a, _)| *a == diagnostics.address)
    {
        anyhow::bail!(
            "--diagnostics-address and {} are both {address}: the diagnostics are served over \
             HTTPS and the others over plain HTTP, so they need two ports",
            if *address == health {
                "--health-bind-address"
            } else {
                "--metrics-bind-address"
            }
        );
    }
    Ok(servers)
}

/// Starts the plain HTTP servers ([`plain_servers`]). With secure diagnostics, binds their
/// address and loads the certificate, and returns both: the server starts once the API client
/// exists.
async fn start_plain_servers<F, Fut>(
    args: &Args,
    diagnostics: &DiagnosticsSettings,
    health: &HealthState,
    metrics: &Metrics,
    stopped: &F,
    servers: &mut Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
) -> anyhow::Result<Option<(std::net::TcpListener, RustlsConfig)>>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let plain = plain_servers(args.health_bind_address, diagnostics)?;
    let mut secure = None;
    if let DiagnosticsMode::Secure { cert_dir } = &diagnostics.mode {
        let (tls, loaded) = diagnostics::tls_config(cert_dir.as_deref(), &diagnostics.tls).await?;
        if let Some(dir) = cert_dir {
            // From the bytes loaded, so that a pair renewed since is picked up.
            tokio::spawn(diagnostics::reload_certificates(
                tls.clone(),
                diagnostics.tls.clone(),
                dir.clone(),
                diagnostics::CERT_RELOAD_PERIOD,
                loaded,
            ));
        }
        let listener = diagnostics::bind(diagnostics.address).with_context(|| {
            format!(
                "binding the diagnostics server to {} (--diagnostics-address)",
                diagnostics.address
            )
        })?;
        secure = Some((listener, tls));
    }
    for (addr, paths) in plain {
        let listener = server::bind(addr, paths).await.with_context(|| {
            format!("binding the HTTP server for {} to {addr}", paths.describe())
        })?;
        servers.push(tokio::spawn(server::serve_on(
            listener,
            server::router(paths, health.clone(), metrics.clone()),
            stopped(),
        )));
    }
    Ok(secure)
}

/// Drops the pool gauges when the controllers' future goes (lost lease, shutdown): only the
/// process running the controllers exports pool state.
struct ClearPoolsOnDrop(Metrics);

impl Drop for ClearPoolsOnDrop {
    fn drop(&mut self) {
        self.0.clear_pools();
    }
}

/// Waits for SIGTERM or SIGINT and returns its name.
async fn wait_for_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

/// The API client: from the given kubeconfig file(s) if any (a `KUBECONFIG`-style path list is
/// merged), else in-cluster, else kube's usual inference (`~/.kube/config`); every request it
/// sends is counted and timed in `metrics` (`rest_client_*`).
/// Requests waiting for the client's buffer (see [`connect`]); more wait for room. Far above the
/// requests inpool has in flight at once (the workers, the watches, the audit's pages).
const API_REQUEST_BUFFER: usize = 1024;

async fn connect(kubeconfig: Option<&Path>, metrics: &Metrics) -> anyhow::Result<Client> {
    let mut config = match kubeconfig.filter(|p| !p.as_os_str().is_empty()) {
        Some(paths) => {
            let mut merged: Option<Kubeconfig> = None;
            for path in std::env::split_paths(paths.as_os_str()) {
                if path.as_os_str().is_empty() {
                    continue;
                }
                let next = Kubeconfig::read_from(&path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                merged = Some(match merged {
                    Some(m) => m.merge(next)?,
                    None => next,
                });
            }
            let merged = merged.context("the kubeconfig path list is empty")?;
            Config::from_custom_kubeconfig(merged, &KubeConfigOptions::default())
                .await
                .context("loading the kubeconfig")?
        }
        None => match Config::incluster() {
            Ok(config) => config,
            Err(in_cluster) => Config::infer().await.map_err(|e| {
                anyhow::anyhow!(
                    "no Kubernetes configuration: not in a cluster ({in_cluster}) and {e}; \
                     pass --kubeconfig"
                )
            })?,
        },
    };
    // A connection that delivers nothing for this long fails its request (a blackholed one
    // waited forever); a write resets the timer, so an idle pooled connection's next request
    // gets the whole bound.
    config.read_timeout = Some(inpool::controllers::API_READ_TIMEOUT);
    config.reset_reader_on_write = true;
    tracing::info!(server = %config.cluster_url, "connecting to the API server");
    let host = config
        .cluster_url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    // kube's retry of `429`, `503` and `504` (after the server's Retry-After) goes outside the
    // metrics layer instead of inside kube's stack, so that each attempt is counted, as client-go
    // counts them: throttling by API Priority and Fairness shows as `code="429"`.
    config.default_retry = false;
    Ok(ClientBuilder::try_from(config)
        .context("building the Kubernetes client")?
        .with_layer(&RestClientLayer::new(metrics.clone(), &host))
        // The retry clones the service it retries: kube's stack is boxed, a buffer makes it so.
        .with_layer(&tower::buffer::BufferLayer::new(API_REQUEST_BUFFER))
        .with_layer(&tower::retry::RetryLayer::new(
            kube::client::retry::RetryPolicy::server_retry(),
        ))
        .build())
}
