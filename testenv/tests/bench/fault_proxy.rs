//! The fault proxy itself (`inpool_testenv::fault_proxy`), against the real API server: a held
//! request goes upstream only once released, and never if its client is gone by then; a status
//! rule answers in place of the API server; a cut resets an open watch.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use inpool::api::IPAddressClaim;
use inpool_testenv::common::{claim, wait_for};
use inpool_testenv::fault_proxy::{Fault, FaultProxy, Match, Rule};
use inpool_testenv::support;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use tokio::io::AsyncWriteExt;
use tokio_rustls::rustls;

/// A fault proxy in front of the control plane whose kubeconfig is `kubeconfig` (its PKI
/// directory beside it).
async fn proxy_for(kubeconfig: &std::path::Path) -> FaultProxy {
    FaultProxy::start(kubeconfig, &kubeconfig.with_file_name("pki"))
        .await
        .expect("start the fault proxy")
}

#[tokio::test]
async fn the_fault_proxy_holds_a_request_and_drops_it_when_its_client_is_gone() {
    let env = support::env();
    let kubeconfig = env.kubeconfig();
    let (client, ns) = env.namespace().await;
    let proxy = proxy_for(kubeconfig).await;
    let proxied = support::client_from_kubeconfig(proxy.kubeconfig(), None).await;
    let direct: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let through: Api<IPAddressClaim> = Api::namespaced(proxied.clone(), &ns);
    through
        .list(&Default::default())
        .await
        .expect("a list through the proxy");
    assert_eq!(proxy.count("GET", "ipaddressclaims"), 1);

    // Held: nothing reaches the API server until the rule is removed.
    let hold = proxy.set(Rule::new(
        Match::all().method("POST").path("/ipaddressclaims"),
        Fault::Blackhole,
    ));
    let create = {
        let through = through.clone();
        tokio::spawn(async move {
            through
                .create(&PostParams::default(), &claim("held", "p"))
                .await
        })
    };
    assert!(proxy.wait_held(1, Duration::from_secs(10)).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        direct.get_opt("held").await.unwrap().is_none(),
        "held, not forwarded"
    );
    proxy.remove(hold);
    create.await.unwrap().expect("created once released");
    assert!(direct.get_opt("held").await.unwrap().is_some());

    // Held, then its client disconnects (as a SIGKILLed process's socket is closed by the
    // kernel): released later, it never goes upstream.
    proxy.set(Rule::new(
        Match::all().method("POST").path("/ipaddressclaims"),
        Fault::Blackhole,
    ));
    let token =
        std::fs::read_to_string(kubeconfig.with_file_name("pki").join("admin.token")).unwrap();
    let body = serde_json::to_string(&claim("orphan", "p")).unwrap();
    let mut raw = raw_tls(proxy.addr(), &kubeconfig.with_file_name("pki")).await;
    let request = format!(
        "POST /apis/ipam.cluster.x-k8s.io/v1beta2/namespaces/{ns}/ipaddressclaims HTTP/1.1\r\n\
         Host: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        proxy.addr(),
        token.trim(),
        body.len()
    );
    raw.write_all(request.as_bytes()).await.unwrap();
    raw.flush().await.unwrap();
    assert!(proxy.wait_held(1, Duration::from_secs(10)).await);
    drop(raw);
    wait_for(
        "the held request dropped",
        Duration::from_secs(10),
        || async { (proxy.held() == 0).then_some(()) },
    )
    .await;
    proxy.clear();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        direct.get_opt("orphan").await.unwrap().is_none(),
        "a request whose client is gone is never forwarded"
    );

    // A status in place of the API server's answer; kube's client retries a 503 after
    // Retry-After.
    proxy.set(
        Rule::new(
            Match::all().method("GET").path("/ipaddressclaims/held"),
            Fault::Status {
                code: 503,
                retry_after: Some(1),
            },
        )
        .times(1),
    );
    through
        .get("held")
        .await
        .expect("retried after Retry-After");
    let gets: Vec<_> = proxy
        .requests()
        .into_iter()
        .filter(|s| s.path.ends_with("/ipaddressclaims/held"))
        .collect();
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert!(
        gets[1].at - gets[0].at >= Duration::from_secs(1),
        "{gets:?}"
    );

    // A cut resets an open watch.
    let mut watch = through
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .unwrap()
        .boxed();
    let _first = watch.next().await;
    wait_for(
        "the watch open in the proxy",
        Duration::from_secs(10),
        || async { (proxy.open_exchanges(&Match::all().watches()) == 1).then_some(()) },
    )
    .await;
    assert_eq!(proxy.cut(&Match::all().watches()), 1);
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(event) = watch.next().await {
            if event.is_err() || matches!(event, Ok(WatchEvent::Error(_))) {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the cut watch ends at once");
    println!("PROXY requests: {:?}", proxy.counts());
}

/// A TLS connection to the proxy, verified with the test CA (`pki/ca.crt`).
async fn raw_tls(
    addr: std::net::SocketAddr,
    pki: &std::path::Path,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let ca = std::fs::read(pki.join("ca.crt")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject as _;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(
            rustls::pki_types::ServerName::IpAddress(addr.ip().into()),
            tcp,
        )
        .await
        .unwrap()
}
