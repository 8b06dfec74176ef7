//! The secure diagnostics of the `inpool` binary on the test control plane, inpool running as
//! its ServiceAccount (the RBAC of `config/rbac`): `/metrics` over HTTPS answers 200 only to a
//! ServiceAccount bound to the `inpool-metrics-reader` ClusterRole, 403 to one without it, 401
//! without a token or with one the API server does not know; and a real Prometheus (Debian's
//! `prometheus` 2.42) scrapes it with a ServiceAccount token and a CA file, and answers a pool
//! gauge back through its query API.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use inpool::api::InClusterIPPool;
use inpool_testenv::{common, support};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::{Value, json};

use common::{
    Diagnostics, Inpool, assert_openmetrics, bind_metrics_reader, create, ensure_applied, http_get,
    negotiated_protocol, one_inpool_test_at_a_time, pool, service_account_kubeconfig,
    unbind_metrics_reader, unique, wait_for,
};

/// Creates ServiceAccount `namespace/name` and returns a one-hour token for it (TokenRequest).
async fn service_account_token(client: &Client, namespace: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap_or_else(|e| panic!("creating ServiceAccount {namespace}/{name}: {e}"));
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("requesting a token for ServiceAccount {namespace}/{name}: {e}"))
        .status
        .unwrap_or_else(|| panic!("the TokenRequest for {namespace}/{name} has no status"))
        .token
}

/// inpool as its ServiceAccount with secure diagnostics.
fn start_secure(name: &str, cert_dir: Option<PathBuf>) -> Inpool {
    let kubeconfig = service_account_kubeconfig(support::env().kubeconfig());
    Inpool::start_with(
        env!("CARGO_BIN_EXE_inpool"),
        name,
        &kubeconfig,
        &Diagnostics::Secure { cert_dir },
        &[],
    )
}

/// The HTTPS answer of `/metrics`; panics with the logs if there is none.
async fn secure_get(inpool: &Inpool, token: Option<&str>) -> common::HttpResponse {
    let response = inpool.https_get("/metrics", token).await;
    response.unwrap_or_else(|| {
        panic!(
            "no HTTPS answer from {}; logs:\n{}",
            inpool.diagnostics_addr(),
            inpool.logs()
        )
    })
}

#[tokio::test]
async fn secure_metrics_answer_only_authenticated_and_authorized_callers() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let (client, ns) = support::env().namespace().await;
    let reader = service_account_token(&client, &ns, "reader").await;
    let stranger = service_account_token(&client, &ns, "stranger").await;
    let binding = unique("diagnostics-reader");
    bind_metrics_reader(&client, &binding, &ns, "reader").await;
    let inpool = start_secure("secure", None);

    let allowed = secure_get(&inpool, Some(&reader)).await;
    assert_openmetrics(&allowed);

    let denied = secure_get(&inpool, Some(&stranger)).await;
    assert_eq!(
        (denied.status, denied.body.as_str()),
        (
            403,
            format!("Authorization denied for user system:serviceaccount:{ns}:stranger\n").as_str()
        )
    );
    for (what, token) in [("no token", None), ("a garbage token", Some("garbage"))] {
        let response = secure_get(&inpool, token).await;
        assert_eq!(
            (response.status, response.body.as_str()),
            (401, "Unauthorized\n"),
            "{what}"
        );
    }

    // Nothing of it over plain HTTP: the diagnostics port speaks only TLS, and the health
    // server does not serve /metrics.
    assert!(
        http_get(inpool.diagnostics_addr(), "/metrics")
            .await
            .is_none_or(|r| r.status != 200)
    );
    let plain = http_get(inpool.health_addr(), "/metrics").await;
    assert_eq!(
        plain.map(|r| r.status),
        Some(404),
        "/metrics on the health address"
    );
    // HTTP/1.1 only, even to a client offering HTTP/2 first (CVE-2023-44487).
    assert_eq!(
        negotiated_protocol(inpool.diagnostics_addr(), &[b"h2", b"http/1.1"]).await,
        Some(Some(b"http/1.1".to_vec()))
    );
    let health = inpool.get("/healthz").await.expect("/healthz answers");
    assert_eq!(health.status, 200);
    assert!(inpool.get("/readyz").await.is_some(), "/readyz answers");
    unbind_metrics_reader(&client, &binding).await;
    // The reviews were allowed to inpool's ServiceAccount (config/rbac).
    inpool.assert_nothing_forbidden();
}

/// A child process killed when dropped, so that it never outlives its test.
pub(crate) struct KillOnDrop(pub(crate) Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `GET http://ADDR/api/v1/PATH` of Prometheus, as JSON.
pub(crate) async fn prometheus_api(addr: std::net::SocketAddr, path: &str) -> Option<Value> {
    let response = http_get(addr, &format!("/api/v1/{path}")).await?;
    serde_json::from_str(&response.body).ok()
}

/// Percent-encodes a query parameter.
pub(crate) fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Starts Prometheus with `config` (written to `dir/prometheus.yml`; JSON is YAML), its data and
/// log (`prometheus.log`) in `dir`, its web API on `web`.
pub(crate) fn start_prometheus(
    dir: &Path,
    web: std::net::SocketAddr,
    config: &Value,
) -> KillOnDrop {
    write(&dir.join("prometheus.yml"), &config.to_string());
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    KillOnDrop(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    )
}

pub(crate) fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

#[tokio::test]
async fn prometheus_scrapes_the_secure_endpoint_with_a_service_account_token() {
    if !support::tool_or_not_run(
        "prometheus",
        "Debian's prometheus package",
        "prometheus_scrapes_the_secure_endpoint_with_a_service_account_token",
    ) {
        return;
    }
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let (client, ns) = support::env().namespace().await;
    let dir = std::env::temp_dir().join(unique("inpool-prometheus"));
    std::fs::create_dir_all(dir.join("certs")).unwrap();

    // A certificate inpool loads from --diagnostics-cert-dir, which Prometheus verifies.
    let (cert, key) = inpool::telemetry::diagnostics::self_signed_pem().unwrap();
    write(&dir.join("certs/tls.crt"), &cert);
    write(&dir.join("certs/tls.key"), &key);
    // Prometheus's ServiceAccount, bound to the reader role, its token in a file.
    let token = service_account_token(&client, &ns, "prometheus").await;
    write(&dir.join("token"), &token);
    let binding = unique("prometheus-reader");
    bind_metrics_reader(&client, &binding, &ns, "prometheus").await;

    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    create(
        &pools,
        &pool("scraped", &["10.88.0.10-10.88.0.19"], 24, None),
    )
    .await;
    let inpool = start_secure("scraped", Some(dir.join("certs")));

    let web: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = json!({
        "global": { "scrape_interval": "1s", "evaluation_interval": "1s" },
        "scrape_configs": [{
            "job_name": "inpool",
            "scheme": "https",
            "metrics_path": "/metrics",
            "authorization": { "credentials_file": dir.join("token") },
            "tls_config": { "ca_file": dir.join("certs/tls.crt") },
            "static_configs": [{ "targets": [inpool.diagnostics_addr().to_string()] }],
        }],
    });
    let started = Instant::now();
    let _prometheus = start_prometheus(&dir, web, &config);

    let query = format!(
        "query?query={}",
        encode(&format!(
            r#"inpool_pool_size{{pool_kind="InClusterIPPool",pool_namespace="{ns}",pool_name="scraped"}}"#
        ))
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let value = loop {
        let answer = prometheus_api(web, &query).await;
        if let Some(value) = answer
            .as_ref()
            .and_then(|a| a["data"]["result"][0]["value"][1].as_str())
        {
            break value.to_string();
        }
        if Instant::now() > deadline {
            let targets = prometheus_api(web, "targets").await;
            panic!(
                "Prometheus did not return the pool gauge within 60 s; last answer {answer:?}; \
                 targets {targets:?}; Prometheus log:\n{}\ninpool logs:\n{}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default(),
                inpool.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(value, "10", "the pool holds 10 addresses");
    inpool_testenv::say(&format!(
        "prometheus scraped the pool gauge {:.1?} after it started",
        started.elapsed()
    ));
    // The scrape itself was healthy: up is 1 and the target has no error.
    let up = wait_for("up{job=\"inpool\"}", Duration::from_secs(10), || async {
        let answer = prometheus_api(
            web,
            &format!("query?query={}", encode("up{job=\"inpool\"}")),
        )
        .await?;
        answer["data"]["result"][0]["value"][1]
            .as_str()
            .map(str::to_string)
    })
    .await;
    assert_eq!(up, "1");
    unbind_metrics_reader(&client, &binding).await;
    inpool.assert_nothing_forbidden();
    let _ = std::fs::remove_dir_all(&dir);
}
