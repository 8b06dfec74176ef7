//! The secure diagnostics server: `/metrics` over HTTPS, only to callers the API server
//! authenticates and authorizes — what controller-runtime's
//! `filters.WithAuthenticationAndAuthorization` does for Cluster API providers.
//!
//! - **TLS**: the certificate and key `tls.crt` / `tls.key` of a directory (the names of
//!   controller-runtime's certificate watcher), read at start and re-read every
//!   [`CERT_RELOAD_PERIOD`] so that a renewed certificate (cert-manager) is used for new
//!   connections without a restart; without one, a self-signed certificate generated at start
//!   (for `localhost`, `127.0.0.1`, `::1` and the host name).
//! - **Authentication**: the request's `Authorization: Bearer TOKEN` goes to a TokenReview. No
//!   token, or one the API server does not authenticate: 401 `Unauthorized`; the review itself
//!   failing: 401 `Authentication failed`.
//! - **Authorization**: a SubjectAccessReview of the reviewed user (name, uid, groups, extra) for
//!   the non-resource URL of the request path with the request's method as verb (`get`
//!   `/metrics`). Denied: 403 `Authorization denied for user NAME`; the review failing: 500.
//! - **Cache**: decisions are kept per (token digest, verb, path) — allowed for
//!   [`ALLOWED_TTL`], denied or unauthenticated for [`DENIED_TTL`], at most [`CACHE_CAPACITY`]
//!   entries — so a Prometheus scraping every 15 s costs one TokenReview and one
//!   SubjectAccessReview a minute, and a new RoleBinding takes effect within 10 s. Failed reviews
//!   are not cached. (controller-runtime keeps tokens 1 min, allows 5 min, denials 30 s.)
//!
//! The logic is generic over [`Reviewer`], so that it is tested here without an API server;
//! [`ApiReviewer`] is the real one, and `tests/diagnostics.rs` runs it on a control plane.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

/// How long an allowed decision is reused.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a denied or unauthenticated decision is reused.
pub const DENIED_TTL: Duration = Duration::from_secs(10);
/// Most decisions kept at once; when full, expired ones are dropped, and if none had expired,
/// all.
pub const CACHE_CAPACITY: usize = 1024;
/// How often a certificate directory is checked for a renewed certificate.
pub const CERT_RELOAD_PERIOD: Duration = Duration::from_secs(10);
/// How long the server lets requests in flight finish after shutdown is asked.
const GRACE: Duration = Duration::from_secs(5);

/// The certificate: `tls.crt` and `tls.key` of `cert_dir`, else a self-signed one.
pub async fn tls_config(cert_dir: Option<&Path>) -> anyhow::Result<RustlsConfig> {
    match cert_dir {
        Some(dir) => {
            let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
            RustlsConfig::from_pem_file(&cert, &key)
                .await
                .with_context(|| {
                    format!(
                        "loading the diagnostics certificate {} and key {} (--diagnostics-cert-dir)",
                        cert.display(),
                        key.display()
                    )
                })
        }
        None => {
            let (cert, key) = self_signed_pem()?;
            RustlsConfig::from_pem(cert.into_bytes(), key.into_bytes())
                .await
                .context("using the generated self-signed diagnostics certificate")
        }
    }
}

/// Keeps `tls` at the certificate and key of `dir`: every `period`, re-reads `tls.crt` and
/// `tls.key` and, when their content changed, uses them for new connections. A pair that cannot
/// be read or used is logged and the one in use kept. Runs until dropped.
pub async fn reload_certificates(tls: RustlsConfig, dir: PathBuf, period: Duration) {
    let read = || async {
        let cert = tokio::fs::read(dir.join("tls.crt")).await?;
        let key = tokio::fs::read(dir.join("tls.key")).await?;
        std::io::Result::Ok((cert, key))
    };
    let mut last = read().await.ok();
    loop {
        tokio::time::sleep(period).await;
        let pair = match read().await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(
                    dir = %dir.display(),
                    error = %e,
                    "diagnostics certificate unreadable; keeping the one in use"
                );
                continue;
            }
        };
        if last.as_ref() == Some(&pair) {
            continue;
        }
        match tls.reload_from_pem(pair.0.clone(), pair.1.clone()).await {
            Ok(()) => tracing::info!(dir = %dir.display(), "diagnostics certificate reloaded"),
            Err(e) => tracing::warn!(
                dir = %dir.display(),
                error = %e,
                "diagnostics certificate changed but cannot be used; keeping the one in use"
            ),
        }
        last = Some(pair);
    }
}

/// A self-signed certificate and its key (PEM) for `localhost`, `127.0.0.1`, `::1` and this
/// host's name.
pub fn self_signed_pem() -> anyhow::Result<(String, String)> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty() && !names.contains(h));
    names.extend(host);
    let certified = rcgen::generate_simple_self_signed(names)
        .context("generating the self-signed diagnostics certificate")?;
    Ok((certified.cert.pem(), certified.signing_key.serialize_pem()))
}

/// Asks the API server who a token belongs to and what that user may do.
pub trait Reviewer: Send + Sync + 'static {
    /// The user a bearer token authenticates as; `None` if it authenticates no one.
    fn authenticate(
        &self,
        token: &str,
    ) -> impl Future<Output = anyhow::Result<Option<UserInfo>>> + Send;

    /// Whether `user` may use `verb` on the non-resource URL `path`, and the reason given.
    fn authorize(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
    ) -> impl Future<Output = anyhow::Result<(bool, String)>> + Send;
}

/// The API server's TokenReview and SubjectAccessReview (RBAC: `create` on
/// `authentication.k8s.io/tokenreviews` and `authorization.k8s.io/subjectaccessreviews`).
#[derive(Clone)]
pub struct ApiReviewer {
    client: Client,
}

impl ApiReviewer {
    pub fn new(client: Client) -> ApiReviewer {
        ApiReviewer { client }
    }
}

impl Reviewer for ApiReviewer {
    async fn authenticate(&self, token: &str) -> anyhow::Result<Option<UserInfo>> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .context("creating a TokenReview")?;
        let status = answer.status.unwrap_or_default();
        Ok(match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Some(user),
            _ => None,
        })
    }

    async fn authorize(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
    ) -> anyhow::Result<(bool, String)> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .context("creating a SubjectAccessReview")?;
        let status = answer
            .status
            .context("the SubjectAccessReview came back without a status")?;
        Ok((
            status.allowed && status.denied != Some(true),
            status.reason.unwrap_or_default(),
        ))
    }
}

/// A decision about one (token, verb, path).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Decision {
    Unauthenticated,
    Denied { user: String },
    Allowed,
}

type CacheKey = (Vec<u8>, String, String);

/// The clock the cache's expiry is measured on.
type Clock = Box<dyn Fn() -> Instant + Send + Sync>;

/// The reviewer and its decisions; shared by the server's requests.
pub struct Gate<R> {
    reviewer: R,
    cache: Mutex<HashMap<CacheKey, (Decision, Instant)>>,
    clock: Clock,
}

impl<R: Reviewer> Gate<R> {
    pub fn new(reviewer: R) -> Arc<Gate<R>> {
        Gate::with_clock(reviewer, Box::new(Instant::now))
    }

    fn with_clock(reviewer: R, clock: Clock) -> Arc<Gate<R>> {
        Arc::new(Gate {
            reviewer,
            cache: Mutex::new(HashMap::new()),
            clock,
        })
    }

    /// The decision for `token` on `verb path`, from the cache or the reviewer; `Err` is the
    /// response for a failed review.
    async fn decide(&self, token: &str, verb: &str, path: &str) -> Result<Decision, Response> {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let key = (digest.as_ref().to_vec(), verb.to_string(), path.to_string());
        let now = (self.clock)();
        if let Some((decision, expires)) = self.lock().get(&key)
            && *expires > now
        {
            return Ok(decision.clone());
        }
        let decision = match self.reviewer.authenticate(token).await {
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "diagnostics: authentication failed");
                return Err((StatusCode::UNAUTHORIZED, "Authentication failed\n").into_response());
            }
            Ok(None) => Decision::Unauthenticated,
            Ok(Some(user)) => {
                let name = user.username.clone().unwrap_or_default();
                match self.reviewer.authorize(&user, verb, path).await {
                    Err(e) => {
                        let message = format!("Authorization for user {name} failed");
                        tracing::warn!(error = %format!("{e:#}"), "diagnostics: {message}");
                        return Err((StatusCode::INTERNAL_SERVER_ERROR, format!("{message}\n"))
                            .into_response());
                    }
                    Ok((true, _)) => Decision::Allowed,
                    Ok((false, reason)) => {
                        tracing::debug!(user = %name, %reason, verb, path, "diagnostics: denied");
                        Decision::Denied { user: name }
                    }
                }
            }
        };
        let ttl = if decision == Decision::Allowed {
            ALLOWED_TTL
        } else {
            DENIED_TTL
        };
        let mut cache = self.lock();
        if cache.len() >= CACHE_CAPACITY {
            cache.retain(|_, (_, expires)| *expires > now);
            if cache.len() >= CACHE_CAPACITY {
                cache.clear();
            }
        }
        cache.insert(key, (decision.clone(), now + ttl));
        Ok(decision)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, (Decision, Instant)>> {
        // A panic while holding the lock cannot leave the map inconsistent: keep using it.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The bearer token of `Authorization: Bearer TOKEN` (scheme case-insensitive), if any.
fn bearer_token(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

async fn authenticate_and_authorize<R: Reviewer>(
    State(gate): State<Arc<Gate<R>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = bearer_token(&request) else {
        return (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
    };
    let verb = request.method().as_str().to_lowercase();
    let path = request.uri().path().to_string();
    match gate.decide(token, &verb, &path).await {
        Err(response) => response,
        Ok(Decision::Unauthenticated) => {
            (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response()
        }
        Ok(Decision::Denied { user }) => (
            StatusCode::FORBIDDEN,
            format!("Authorization denied for user {user}\n"),
        )
            .into_response(),
        Ok(Decision::Allowed) => next.run(request).await,
    }
}

/// `routes` behind authentication and authorization by `gate`: every path, known or not, so
/// that an anonymous caller learns nothing.
pub fn protect<R: Reviewer>(routes: Router, gate: Arc<Gate<R>>) -> Router {
    routes.layer(middleware::from_fn_with_state(
        gate,
        authenticate_and_authorize::<R>,
    ))
}

/// Binds `addr` (port 0 picks a free port) for the HTTPS server and logs the address bound.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    tracing::info!(
        addr = %listener.local_addr()?,
        scheme = "https",
        serves = "/metrics",
        "HTTP server listening"
    );
    Ok(listener)
}

/// Serves `routes` over TLS on an already bound listener until `shutdown` completes, then lets
/// requests in flight finish for up to 5 s.
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
        .handle(handle)
        .serve(routes.into_make_service())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    /// Tokens: `reader` (allowed), `other` (authenticated, denied), `broken` (TokenReview
    /// fails), `no-sar` (SubjectAccessReview fails); anything else authenticates no one.
    #[derive(Default)]
    struct Fake {
        token_reviews: AtomicUsize,
        access_reviews: AtomicUsize,
    }

    impl Reviewer for Arc<Fake> {
        async fn authenticate(&self, token: &str) -> anyhow::Result<Option<UserInfo>> {
            self.token_reviews.fetch_add(1, Ordering::SeqCst);
            let user = |name: &str| UserInfo {
                username: Some(name.to_string()),
                uid: Some(format!("uid-{name}")),
                groups: Some(vec!["system:authenticated".to_string()]),
                extra: Some(BTreeMap::from([("k".to_string(), vec!["v".to_string()])])),
            };
            match token {
                "reader" | "other" | "no-sar" => Ok(Some(user(token))),
                "broken" => anyhow::bail!("connection refused"),
                _ => Ok(None),
            }
        }

        async fn authorize(
            &self,
            user: &UserInfo,
            verb: &str,
            path: &str,
        ) -> anyhow::Result<(bool, String)> {
            self.access_reviews.fetch_add(1, Ordering::SeqCst);
            // What the SubjectAccessReview is asked: the reviewed user, whole.
            assert_eq!(
                user.uid.as_deref().map(|u| u.starts_with("uid-")),
                Some(true)
            );
            assert!(user.extra.is_some() && user.groups.is_some());
            match user.username.as_deref() {
                Some("no-sar") => anyhow::bail!("timeout"),
                Some("reader") => Ok((verb == "get" && path == "/metrics", String::new())),
                _ => Ok((false, "no RBAC rule".to_string())),
            }
        }
    }

    /// A clock that moves only when told to.
    #[derive(Clone)]
    struct TestClock(Arc<Mutex<Instant>>);

    impl TestClock {
        fn new() -> TestClock {
            TestClock(Arc::new(Mutex::new(Instant::now())))
        }
        fn advance(&self, by: Duration) {
            *self.0.lock().unwrap() += by;
        }
        fn boxed(&self) -> Clock {
            let clock = self.clone();
            Box::new(move || *clock.0.lock().unwrap())
        }
    }

    fn app_with_clock(fake: &Arc<Fake>, clock: &TestClock) -> Router {
        let routes = Router::new().route("/metrics", get(|| async { "metrics\n" }));
        protect(routes, Gate::with_clock(fake.clone(), clock.boxed()))
    }

    fn app(fake: &Arc<Fake>) -> Router {
        app_with_clock(fake, &TestClock::new())
    }

    async fn call(app: &Router, path: &str, authorization: Option<&str>) -> (u16, String) {
        let mut request = Request::get(path);
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        let response = app
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn answers_as_controller_runtimes_filter() {
        let fake = Arc::new(Fake::default());
        let app = app(&fake);
        let cases = [
            (None, 401, "Unauthorized\n"),
            (Some("Basic dXNlcjpwYXNz"), 401, "Unauthorized\n"),
            (Some("Bearer "), 401, "Unauthorized\n"),
            (Some("Bearer garbage"), 401, "Unauthorized\n"),
            (Some("Bearer broken"), 401, "Authentication failed\n"),
            (
                Some("Bearer other"),
                403,
                "Authorization denied for user other\n",
            ),
            (
                Some("Bearer no-sar"),
                500,
                "Authorization for user no-sar failed\n",
            ),
            (Some("bearer reader"), 200, "metrics\n"),
        ];
        for (authorization, status, body) in cases {
            assert_eq!(
                call(&app, "/metrics", authorization).await,
                (status, body.to_string()),
                "{authorization:?}"
            );
        }
        // Unknown paths are protected too: 404 only for a caller allowed on that path.
        assert_eq!(call(&app, "/healthz", None).await.0, 401);
        assert_eq!(call(&app, "/healthz", Some("Bearer reader")).await.0, 403);
    }

    #[tokio::test]
    async fn decisions_are_cached_for_their_ttl_and_failures_not_at_all() {
        let fake = Arc::new(Fake::default());
        let clock = TestClock::new();
        let app = app_with_clock(&fake, &clock);
        let reviews = || {
            (
                fake.token_reviews.load(Ordering::SeqCst),
                fake.access_reviews.load(Ordering::SeqCst),
            )
        };
        for _ in 0..3 {
            assert_eq!(call(&app, "/metrics", Some("Bearer reader")).await.0, 200);
            assert_eq!(call(&app, "/metrics", Some("Bearer other")).await.0, 403);
            assert_eq!(call(&app, "/metrics", Some("Bearer garbage")).await.0, 401);
        }
        assert_eq!(reviews(), (3, 2), "one review per token");
        for _ in 0..2 {
            assert_eq!(call(&app, "/metrics", Some("Bearer broken")).await.0, 401);
            assert_eq!(call(&app, "/metrics", Some("Bearer no-sar")).await.0, 500);
        }
        assert_eq!(reviews(), (7, 4), "failed reviews are not cached");

        // Denials expire first; the allowed decision lasts ALLOWED_TTL.
        clock.advance(DENIED_TTL + Duration::from_millis(1));
        call(&app, "/metrics", Some("Bearer reader")).await;
        call(&app, "/metrics", Some("Bearer other")).await;
        call(&app, "/metrics", Some("Bearer garbage")).await;
        assert_eq!(reviews(), (9, 5));
        clock.advance(ALLOWED_TTL);
        call(&app, "/metrics", Some("Bearer reader")).await;
        assert_eq!(reviews(), (10, 6));
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let fake = Arc::new(Fake::default());
        let gate = Gate::new(fake.clone());
        for i in 0..CACHE_CAPACITY + 10 {
            let decision = gate
                .decide(&format!("garbage-{i}"), "get", "/metrics")
                .await;
            assert!(matches!(decision, Ok(Decision::Unauthenticated)), "{i}");
        }
        assert!(gate.lock().len() <= CACHE_CAPACITY);
    }

    #[tokio::test]
    async fn a_renewed_certificate_is_reloaded_and_a_broken_one_ignored() {
        let dir = std::env::temp_dir().join(format!(
            "inpool-cert-reload-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |(cert, key): (String, String)| {
            std::fs::write(dir.join("tls.crt"), cert).unwrap();
            std::fs::write(dir.join("tls.key"), key).unwrap();
        };
        write(self_signed_pem().unwrap());
        let tls = tls_config(Some(&dir)).await.unwrap();
        let first = tls.get_inner();
        let period = Duration::from_millis(20);
        let watcher = tokio::spawn(reload_certificates(tls.clone(), dir.clone(), period));

        write(("not a certificate".to_string(), "nor a key".to_string()));
        tokio::time::sleep(period * 10).await;
        assert!(
            Arc::ptr_eq(&first, &tls.get_inner()),
            "a broken pair was used"
        );

        write(self_signed_pem().unwrap());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Arc::ptr_eq(&first, &tls.get_inner()) {
            assert!(
                Instant::now() < deadline,
                "the renewed certificate was not loaded"
            );
            tokio::time::sleep(period).await;
        }
        watcher.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_self_signed_certificate_is_pem() {
        let (cert, key) = self_signed_pem().unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
        assert!(key.contains("PRIVATE KEY-----"), "{key}");
    }
}
