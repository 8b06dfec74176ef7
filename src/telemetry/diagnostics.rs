//! The secure diagnostics server: `/metrics` over HTTPS, only to callers the API server
//! authenticates and authorizes — as controller-runtime's
//! `filters.WithAuthenticationAndAuthorization` does for Cluster API providers, with shorter
//! caches.
//!
//! - **TLS**: the certificate and key `tls.crt` / `tls.key` of a directory (the names of
//!   controller-runtime's certificate watcher), read at start and re-read every
//!   [`CERT_RELOAD_PERIOD`] so that a renewed certificate (cert-manager) is used for new
//!   connections without a restart; without one, a self-signed certificate generated at start
//!   (for `localhost`, `127.0.0.1`, `::1` and the host name). HTTP/1.1 only (ALPN and server),
//!   as kubebuilder and Cluster API serve metrics, against HTTP/2 rapid reset (CVE-2023-44487).
//! - **Authentication**: the request's `Authorization: Bearer TOKEN` goes to a TokenReview. No
//!   token, or one the API server does not authenticate: 401 `Unauthorized`; the review itself
//!   failing or taking longer than [`REVIEW_TIMEOUT`]: 401 `Authentication failed`.
//! - **Authorization**: a SubjectAccessReview of the reviewed user (name, uid, groups, extra) for
//!   the non-resource URL of the request path with the request's method as verb (`get`
//!   `/metrics`). Denied: 403 `Authorization denied for user NAME`; the review failing or
//!   taking longer than [`REVIEW_TIMEOUT`]: 500.
//! - **Caches**: two, each of at most [`CACHE_CAPACITY`] entries keyed by a SHA-256 digest (so an
//!   entry's key is 32 bytes whatever the token or path): authentication by token — the user for
//!   [`TOKEN_TTL`], "no one" for [`DENIED_TTL`] — and authorization by (user, verb, path), for
//!   authenticated users only — allowed for [`ALLOWED_TTL`], denied for [`DENIED_TTL`]. A
//!   Prometheus scraping every 15 s thus costs one TokenReview and one SubjectAccessReview a
//!   minute, and a new RoleBinding takes effect within 10 s. Failed reviews are not cached. A
//!   full cache drops its expired entries, then denials, then allows, soonest to expire first,
//!   so a flood of garbage tokens does not evict Prometheus's decision. (controller-runtime
//!   keeps tokens 1 min, allows 5 min, denials 30 s.)
//! - **Reviews in flight**: at most [`MAX_REVIEWS_IN_FLIGHT`] requests review at once; a request
//!   needing a review waits up to [`REVIEW_SLOT_WAIT`] for a slot, then gets 503 `Too many
//!   reviews in flight` with `Retry-After: 1`. Cached decisions need no slot.
//!
//! The logic is generic over [`Reviewer`], so that it is tested here without an API server;
//! [`ApiReviewer`] is the real one, and `tests/plain/diagnostics.rs` runs it on a control plane.

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
use tokio::sync::{Semaphore, SemaphorePermit};

use super::tls::TlsPolicy;

/// How long an authenticated token is reused.
pub const TOKEN_TTL: Duration = Duration::from_secs(60);
/// How long an allowed decision is reused.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a denied decision, or a token that authenticates no one, is reused.
pub const DENIED_TTL: Duration = Duration::from_secs(10);
/// Most entries of each cache (authentication, authorization); when full, expired entries are
/// dropped first, then denials, then allows.
pub const CACHE_CAPACITY: usize = 1024;
/// How long a TokenReview or SubjectAccessReview may take (controller-runtime's
/// `TokenAccessReviewTimeout`): kube's client has no read timeout, so a stalled API server
/// would otherwise hold every scrape.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Most requests reviewing (TokenReview, SubjectAccessReview) at once.
pub const MAX_REVIEWS_IN_FLIGHT: usize = 8;
/// How long a request needing a review waits for one of the [`MAX_REVIEWS_IN_FLIGHT`] slots
/// before it is answered 503.
pub const REVIEW_SLOT_WAIT: Duration = Duration::from_secs(1);
/// How often a certificate directory is checked for a renewed certificate.
pub const CERT_RELOAD_PERIOD: Duration = Duration::from_secs(10);
/// How long the server lets requests in flight finish after shutdown is asked.
const GRACE: Duration = Duration::from_secs(5);

/// The content of a certificate directory's `tls.crt` and `tls.key`.
pub type PemPair = (Vec<u8>, Vec<u8>);

/// The certificate: `tls.crt` and `tls.key` of `cert_dir`, else a self-signed one, served under
/// `policy`; and, with a directory, the bytes loaded from it, for [`reload_certificates`] to
/// compare against.
pub async fn tls_config(
    cert_dir: Option<&Path>,
    policy: &TlsPolicy,
) -> anyhow::Result<(RustlsConfig, Option<PemPair>)> {
    match cert_dir {
        Some(dir) => {
            let context = || {
                format!(
                    "loading the diagnostics certificate {} and key {} (--diagnostics-cert-dir)",
                    dir.join("tls.crt").display(),
                    dir.join("tls.key").display()
                )
            };
            let pair = read_pair(dir).await.with_context(context)?;
            let config = policy
                .server_config(&pair.0, &pair.1)
                .with_context(context)?;
            Ok((RustlsConfig::from_config(Arc::new(config)), Some(pair)))
        }
        None => {
            let (cert, key) = self_signed_pem()?;
            let config = policy
                .server_config(cert.as_bytes(), key.as_bytes())
                .context("using the generated self-signed diagnostics certificate")?;
            Ok((RustlsConfig::from_config(Arc::new(config)), None))
        }
    }
}

async fn read_pair(dir: &Path) -> std::io::Result<PemPair> {
    let cert = tokio::fs::read(dir.join("tls.crt")).await?;
    let key = tokio::fs::read(dir.join("tls.key")).await?;
    Ok((cert, key))
}

/// What one look at the certificate directory did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// The pair is the one last seen.
    Unchanged,
    /// A new pair is used for new connections.
    Reloaded,
    /// The pair cannot be read; the one in use is kept.
    Unreadable,
    /// The pair changed but cannot be used; the one in use is kept.
    Rejected,
}

/// Looks once at `tls.crt` and `tls.key` of `dir`: when their content differs from `last`, uses
/// them for new connections of `tls` and remembers them in `last` (a pair that cannot be used
/// too, so that it is reported once).
pub async fn reload_once(
    tls: &RustlsConfig,
    policy: &TlsPolicy,
    dir: &Path,
    last: &mut Option<PemPair>,
) -> Reload {
    let pair = match read_pair(dir).await {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(
                dir = %dir.display(),
                error = %e,
                "diagnostics certificate unreadable; keeping the one in use"
            );
            return Reload::Unreadable;
        }
    };
    if last.as_ref() == Some(&pair) {
        return Reload::Unchanged;
    }
    let outcome = match policy.server_config(&pair.0, &pair.1) {
        Ok(fresh) => {
            tls.reload_from_config(Arc::new(fresh));
            tracing::info!(dir = %dir.display(), "diagnostics certificate reloaded");
            Reload::Reloaded
        }
        Err(e) => {
            tracing::warn!(
                dir = %dir.display(),
                error = %e,
                "diagnostics certificate changed but cannot be used; keeping the one in use"
            );
            Reload::Rejected
        }
    };
    *last = Some(pair);
    outcome
}

/// Keeps `tls` at the certificate and key of `dir`: every `period`, [`reload_once`], starting
/// from `loaded`, the pair `tls` was built from ([`tls_config`]), so that a pair renewed between
/// loading and this watcher's start is not missed. Runs until dropped.
pub async fn reload_certificates(
    tls: RustlsConfig,
    policy: TlsPolicy,
    dir: PathBuf,
    period: Duration,
    loaded: Option<PemPair>,
) {
    let mut last = loaded;
    loop {
        tokio::time::sleep(period).await;
        reload_once(&tls, &policy, &dir, &mut last).await;
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

/// A cache key: a SHA-256 digest, the same size whatever it digests.
type Digest = [u8; 32];

/// Feeds length-prefixed fields into SHA-256, so that different field lists never digest alike.
struct KeyBuilder(ring::digest::Context);

impl KeyBuilder {
    fn new(kind: &str) -> KeyBuilder {
        let mut builder = KeyBuilder(ring::digest::Context::new(&ring::digest::SHA256));
        builder.field(kind.as_bytes());
        builder
    }

    fn field(&mut self, bytes: &[u8]) -> &mut KeyBuilder {
        self.0.update(&(bytes.len() as u64).to_be_bytes());
        self.0.update(bytes);
        self
    }

    fn optional(&mut self, text: Option<&str>) -> &mut KeyBuilder {
        match text {
            None => self.field(b"-"),
            Some(text) => self.field(b"+").field(text.as_bytes()),
        }
    }

    fn finish(self) -> Digest {
        let mut key = [0; 32];
        key.copy_from_slice(self.0.finish().as_ref());
        key
    }
}

/// The authentication cache's key of `token`.
fn token_key(token: &str) -> Digest {
    let mut key = KeyBuilder::new("token");
    key.field(token.as_bytes());
    key.finish()
}

/// The authorization cache's key of `user` (all of it: name, uid, groups, extra) on `verb path`.
fn access_key(user: &UserInfo, verb: &str, path: &str) -> Digest {
    let mut key = KeyBuilder::new("access");
    key.optional(user.username.as_deref())
        .optional(user.uid.as_deref());
    let groups = user.groups.as_deref().unwrap_or_default();
    key.field(&(groups.len() as u64).to_be_bytes());
    for group in groups {
        key.field(group.as_bytes());
    }
    let extra = user.extra.as_ref();
    key.field(&(extra.map_or(0, |e| e.len()) as u64).to_be_bytes());
    for (name, values) in extra.into_iter().flatten() {
        key.field(name.as_bytes())
            .field(&(values.len() as u64).to_be_bytes());
        for value in values {
            key.field(value.as_bytes());
        }
    }
    key.field(verb.as_bytes()).field(path.as_bytes());
    key.finish()
}

/// Which entries a full cache gives up first: denials before allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Keep {
    Denial,
    Allow,
}

struct Entry<V> {
    value: V,
    keep: Keep,
    expires: Instant,
}

/// A map of at most `capacity` entries that expire.
struct TtlCache<V> {
    entries: HashMap<Digest, Entry<V>>,
    capacity: usize,
}

impl<V: Clone> TtlCache<V> {
    fn new(capacity: usize) -> TtlCache<V> {
        TtlCache {
            entries: HashMap::new(),
            capacity,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    /// The value of `key` if it has not expired at `now`.
    fn get(&self, key: &Digest, now: Instant) -> Option<V> {
        self.entries
            .get(key)
            .filter(|entry| entry.expires > now)
            .map(|entry| entry.value.clone())
    }

    /// Keeps `value` under `key` for `ttl`. When full: drops the expired entries, then, while
    /// still full, the denial soonest to expire, then the allow soonest to expire.
    fn insert(&mut self, key: Digest, value: V, keep: Keep, ttl: Duration, now: Instant) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            self.entries.retain(|_, entry| entry.expires > now);
            while self.entries.len() >= self.capacity {
                let victim = self
                    .entries
                    .iter()
                    .min_by_key(|(_, entry)| (entry.keep, entry.expires))
                    .map(|(key, _)| *key);
                match victim {
                    Some(victim) => self.entries.remove(&victim),
                    None => break,
                };
            }
        }
        let expires = now + ttl;
        self.entries.insert(
            key,
            Entry {
                value,
                keep,
                expires,
            },
        );
    }
}

/// The decisions kept: who a token is (`None`: no one), whether a user may `verb path`.
struct Caches {
    tokens: TtlCache<Option<UserInfo>>,
    access: TtlCache<bool>,
}

/// The clock the caches' expiry is measured on.
type Clock = Box<dyn Fn() -> Instant + Send + Sync>;

/// The reviewer and its decisions; shared by the server's requests.
pub struct Gate<R> {
    reviewer: R,
    caches: Mutex<Caches>,
    reviews: Semaphore,
    clock: Clock,
}

/// The answer when a TokenReview fails or times out.
fn authentication_failed() -> Response {
    (StatusCode::UNAUTHORIZED, "Authentication failed\n").into_response()
}

impl<R: Reviewer> Gate<R> {
    pub fn new(reviewer: R) -> Arc<Gate<R>> {
        Gate::with_clock(reviewer, Box::new(Instant::now))
    }

    fn with_clock(reviewer: R, clock: Clock) -> Arc<Gate<R>> {
        Arc::new(Gate {
            reviewer,
            caches: Mutex::new(Caches {
                tokens: TtlCache::new(CACHE_CAPACITY),
                access: TtlCache::new(CACHE_CAPACITY),
            }),
            reviews: Semaphore::new(MAX_REVIEWS_IN_FLIGHT),
            clock,
        })
    }

    /// The decision for `token` on `verb path`, from the caches or the reviewer; `Err` is the
    /// response for a failed or timed out review, or for no free review slot.
    async fn decide(&self, token: &str, verb: &str, path: &str) -> Result<Decision, Response> {
        let token_key = token_key(token);
        let cached = self.lock().tokens.get(&token_key, (self.clock)());
        // One review slot for both reviews of this request, taken only if one is needed.
        let mut slot = None;
        let user = match cached {
            Some(user) => user,
            None => {
                slot = Some(self.slot().await?);
                let user = match tokio::time::timeout(
                    REVIEW_TIMEOUT,
                    self.reviewer.authenticate(token),
                )
                .await
                {
                    Err(_) => {
                        tracing::warn!(
                            timeout = ?REVIEW_TIMEOUT,
                            "diagnostics: authentication failed: the TokenReview timed out"
                        );
                        return Err(authentication_failed());
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %format!("{e:#}"), "diagnostics: authentication failed");
                        return Err(authentication_failed());
                    }
                    Ok(Ok(user)) => user,
                };
                let (keep, ttl) = match user {
                    Some(_) => (Keep::Allow, TOKEN_TTL),
                    None => (Keep::Denial, DENIED_TTL),
                };
                let now = (self.clock)();
                self.lock()
                    .tokens
                    .insert(token_key, user.clone(), keep, ttl, now);
                user
            }
        };
        let Some(user) = user else {
            return Ok(Decision::Unauthenticated);
        };
        let name = user.username.clone().unwrap_or_default();
        let access_key = access_key(&user, verb, path);
        let cached = self.lock().access.get(&access_key, (self.clock)());
        let allowed = match cached {
            Some(allowed) => allowed,
            None => {
                if slot.is_none() {
                    slot = Some(self.slot().await?);
                }
                let failed = |error: String| {
                    let message = format!("Authorization for user {name} failed");
                    tracing::warn!(error, "diagnostics: {message}");
                    (StatusCode::INTERNAL_SERVER_ERROR, format!("{message}\n")).into_response()
                };
                let allowed = match tokio::time::timeout(
                    REVIEW_TIMEOUT,
                    self.reviewer.authorize(&user, verb, path),
                )
                .await
                {
                    Err(_) => {
                        return Err(failed(format!(
                            "the SubjectAccessReview timed out after {REVIEW_TIMEOUT:?}"
                        )));
                    }
                    Ok(Err(e)) => return Err(failed(format!("{e:#}"))),
                    Ok(Ok((allowed, reason))) => {
                        if !allowed {
                            tracing::debug!(user = %name, %reason, verb, path, "diagnostics: denied");
                        }
                        allowed
                    }
                };
                let (keep, ttl) = if allowed {
                    (Keep::Allow, ALLOWED_TTL)
                } else {
                    (Keep::Denial, DENIED_TTL)
                };
                let now = (self.clock)();
                self.lock()
                    .access
                    .insert(access_key, allowed, keep, ttl, now);
                allowed
            }
        };
        drop(slot);
        Ok(if allowed {
            Decision::Allowed
        } else {
            Decision::Denied { user: name }
        })
    }

    /// One of the [`MAX_REVIEWS_IN_FLIGHT`] review slots, waiting up to [`REVIEW_SLOT_WAIT`];
    /// `Err` is the 503 answer when none became free.
    async fn slot(&self) -> Result<SemaphorePermit<'_>, Response> {
        match tokio::time::timeout(REVIEW_SLOT_WAIT, self.reviews.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => {
                tracing::warn!(
                    max = MAX_REVIEWS_IN_FLIGHT,
                    "diagnostics: too many reviews in flight; answering 503"
                );
                Err((
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "1")],
                    "Too many reviews in flight\n",
                )
                    .into_response())
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Caches> {
        // A panic while holding the lock cannot leave the maps inconsistent: keep using them.
        self.caches.lock().unwrap_or_else(|e| e.into_inner())
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

/// Binds `addr` (port 0 picks a free port) for the HTTPS server and logs the address bound;
/// `[::]:PORT` falls back to `0.0.0.0:PORT` without IPv6 ([`super::server::listen`]).
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    super::server::listen(addr, "https", "/metrics")
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    /// Tokens: `reader` (allowed), `other` (authenticated, denied), `broken` (TokenReview
    /// fails), `no-sar` (SubjectAccessReview fails), `stalled` (TokenReview never answers),
    /// `stalled-sar` (SubjectAccessReview never answers); anything else authenticates no one.
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
                "reader" | "other" | "no-sar" | "stalled-sar" => Ok(Some(user(token))),
                "broken" => anyhow::bail!("connection refused"),
                "stalled" => std::future::pending().await,
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
                Some("stalled-sar") => std::future::pending().await,
                Some("reader") => Ok((verb == "get" && path == "/metrics", String::new())),
                _ => Ok((false, "no RBAC rule".to_string())),
            }
        }
    }

    impl Fake {
        /// (TokenReviews, SubjectAccessReviews) asked so far.
        fn reviews(&self) -> (usize, usize) {
            (
                self.token_reviews.load(Ordering::SeqCst),
                self.access_reviews.load(Ordering::SeqCst),
            )
        }
    }

    /// A clock that moves only when told to.
    #[derive(Clone)]
    struct TestClock(Arc<Mutex<Instant>>);

    impl TestClock {
        fn new() -> TestClock {
            TestClock(Arc::new(Mutex::new(Instant::now())))
        }
        fn now(&self) -> Instant {
            *self.0.lock().unwrap()
        }
        fn advance(&self, by: Duration) {
            *self.0.lock().unwrap() += by;
        }
        fn boxed(&self) -> Clock {
            let clock = self.clone();
            Box::new(move || clock.now())
        }
    }

    fn protected(gate: Arc<Gate<Arc<Fake>>>) -> Router {
        let routes = Router::new().route("/metrics", get(|| async { "metrics\n" }));
        protect(routes, gate)
    }

    fn app_with_clock(fake: &Arc<Fake>, clock: &TestClock) -> Router {
        protected(Gate::with_clock(fake.clone(), clock.boxed()))
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

    /// Paused time: the reviews that never answer time out at once, in virtual time.
    #[tokio::test(start_paused = true)]
    async fn a_review_that_never_answers_times_out_as_a_failed_one() {
        let fake = Arc::new(Fake::default());
        let app = app(&fake);
        // Without the gate's timeout this fails (in virtual time) instead of hanging.
        let answer = |token: &'static str| {
            let app = app.clone();
            async move {
                let authorization = format!("Bearer {token}");
                tokio::time::timeout(
                    REVIEW_TIMEOUT * 2,
                    call(&app, "/metrics", Some(&authorization)),
                )
                .await
                .expect("an answer although the review never came")
            }
        };
        let started = tokio::time::Instant::now();
        assert_eq!(
            answer("stalled").await,
            (401, "Authentication failed\n".to_string())
        );
        assert_eq!(started.elapsed(), REVIEW_TIMEOUT);
        assert_eq!(
            answer("stalled-sar").await,
            (
                500,
                "Authorization for user stalled-sar failed\n".to_string()
            )
        );
        // Timed out reviews are not cached: the next request asks again.
        call(&app, "/metrics", Some("Bearer stalled")).await;
        call(&app, "/metrics", Some("Bearer stalled-sar")).await;
        assert_eq!(fake.reviews(), (3, 2));
    }

    #[tokio::test]
    async fn decisions_are_cached_for_their_ttl_and_failures_not_at_all() {
        let fake = Arc::new(Fake::default());
        let clock = TestClock::new();
        let app = app_with_clock(&fake, &clock);
        for _ in 0..3 {
            assert_eq!(call(&app, "/metrics", Some("Bearer reader")).await.0, 200);
            assert_eq!(call(&app, "/metrics", Some("Bearer other")).await.0, 403);
            assert_eq!(call(&app, "/metrics", Some("Bearer garbage")).await.0, 401);
        }
        assert_eq!(fake.reviews(), (3, 2), "one review per token");
        for _ in 0..2 {
            assert_eq!(call(&app, "/metrics", Some("Bearer broken")).await.0, 401);
            assert_eq!(call(&app, "/metrics", Some("Bearer no-sar")).await.0, 500);
        }
        // no-sar's authentication is cached; the failed reviews are not.
        assert_eq!(fake.reviews(), (6, 4), "failed reviews are not cached");

        // Denials (and tokens of no one) expire first; a user and an allow last 60 s.
        clock.advance(DENIED_TTL + Duration::from_millis(1));
        call(&app, "/metrics", Some("Bearer reader")).await;
        call(&app, "/metrics", Some("Bearer other")).await;
        call(&app, "/metrics", Some("Bearer garbage")).await;
        assert_eq!(
            fake.reviews(),
            (7, 5),
            "garbage authenticated, other authorized again"
        );
        clock.advance(ALLOWED_TTL.max(TOKEN_TTL));
        call(&app, "/metrics", Some("Bearer reader")).await;
        assert_eq!(fake.reviews(), (8, 6));
    }

    #[test]
    fn cache_keys_are_digests_of_everything_that_decides() {
        let user = |name: &str, groups: &[&str]| UserInfo {
            username: Some(name.to_string()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            ..UserInfo::default()
        };
        let reader = user("reader", &["a", "b"]);
        let key = access_key(&reader, "get", "/metrics");
        assert_eq!(key, access_key(&reader.clone(), "get", "/metrics"));
        for other in [
            access_key(&reader, "post", "/metrics"),
            access_key(&reader, "get", "/metrics/"),
            access_key(&user("reader", &["ab"]), "get", "/metrics"),
            access_key(&user("reader", &["a"]), "get", "/metrics"),
            access_key(&user("reade", &["a", "b"]), "get", "/metrics"),
            access_key(
                &UserInfo {
                    uid: Some("1".to_string()),
                    ..reader.clone()
                },
                "get",
                "/metrics",
            ),
            // Fields run together differently: length-prefixed, they differ.
            access_key(&reader, "ge", "t/metrics"),
        ] {
            assert_ne!(key, other);
        }
        assert_ne!(token_key("reader"), token_key("other"));
        // Same size whatever the input.
        assert_eq!(token_key(&"x".repeat(1 << 16)).len(), 32);
    }

    #[test]
    fn a_full_cache_drops_expired_entries_then_denials_then_allows() {
        let clock = TestClock::new();
        let t0 = clock.now();
        let key = |i: u8| [i; 32];
        let second = Duration::from_secs(1);
        let mut cache = TtlCache::new(3);
        cache.insert(key(1), "allow, 5 s", Keep::Allow, second * 5, t0);
        cache.insert(key(2), "denial, 10 s", Keep::Denial, second * 10, t0);
        cache.insert(key(3), "denial, 20 s", Keep::Denial, second * 20, t0);
        // Expired first, allow or not.
        let t6 = t0 + second * 6;
        assert_eq!(cache.get(&key(1), t6), None);
        cache.insert(key(4), "allow, 100 s", Keep::Allow, second * 100, t6);
        assert_eq!(cache.len(), 3);
        assert!(!cache.entries.contains_key(&key(1)));
        // Then the denial soonest to expire, though the allow expires sooner still.
        cache.insert(key(5), "allow, 1 s", Keep::Allow, second, t6);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&key(2), t6), None);
        assert_eq!(cache.get(&key(3), t6), Some("denial, 20 s"));
        cache.insert(key(6), "allow, 50 s", Keep::Allow, second * 50, t6);
        assert_eq!(cache.get(&key(3), t6), None, "the last denial goes");
        // Only allows left: the one soonest to expire goes.
        cache.insert(key(7), "denial, 10 s", Keep::Denial, second * 10, t6);
        assert_eq!(cache.get(&key(5), t6), None);
        let mut kept: Vec<_> = cache.entries.values().map(|e| e.value).collect();
        kept.sort();
        assert_eq!(kept, ["allow, 100 s", "allow, 50 s", "denial, 10 s"]);
        // Replacing a key never evicts.
        cache.insert(key(7), "allow, 10 s", Keep::Allow, second * 10, t6);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&key(4), t6), Some("allow, 100 s"));
    }

    #[tokio::test]
    async fn the_caches_are_bounded_and_a_flood_keeps_the_allowed_decision() {
        let fake = Arc::new(Fake::default());
        let gate = Gate::new(fake.clone());
        let reader = gate.decide("reader", "get", "/metrics").await;
        assert!(matches!(reader, Ok(Decision::Allowed)));
        // Garbage tokens, and an authenticated user asking for many paths.
        for i in 0..2 * CACHE_CAPACITY {
            let garbage = gate
                .decide(&format!("garbage-{i}"), "get", "/metrics")
                .await;
            assert!(matches!(garbage, Ok(Decision::Unauthenticated)), "{i}");
            let path = format!("/metrics/{}", "x".repeat(i));
            let denied = gate.decide("other", "get", &path).await;
            assert!(matches!(denied, Ok(Decision::Denied { .. })), "{i}");
        }
        {
            let caches = gate.lock();
            assert_eq!(caches.tokens.len(), CACHE_CAPACITY);
            assert_eq!(caches.access.len(), CACHE_CAPACITY);
        }
        let before = fake.reviews();
        let reader = gate.decide("reader", "get", "/metrics").await;
        assert!(matches!(reader, Ok(Decision::Allowed)));
        assert_eq!(fake.reviews(), before, "reader's decision is still cached");
    }

    /// Paused time: requests wait for a review slot in virtual time.
    #[tokio::test(start_paused = true)]
    async fn reviews_in_flight_are_bounded_and_cached_decisions_need_no_slot() {
        let fake = Arc::new(Fake::default());
        let gate = Gate::new(fake.clone());
        let app = protected(gate.clone());
        assert_eq!(call(&app, "/metrics", Some("Bearer reader")).await.0, 200);
        // Every slot held by a review that never answers.
        let stalled: Vec<_> = (0..MAX_REVIEWS_IN_FLIGHT)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move { call(&app, "/metrics", Some("Bearer stalled")).await })
            })
            .collect();
        while fake.reviews().0 < 1 + MAX_REVIEWS_IN_FLIGHT {
            tokio::task::yield_now().await;
        }
        assert_eq!(gate.reviews.available_permits(), 0);

        // A new token waits REVIEW_SLOT_WAIT for a slot, then is told to come back.
        let started = tokio::time::Instant::now();
        let response = app
            .clone()
            .oneshot(
                Request::get("/metrics")
                    .header(header::AUTHORIZATION, "Bearer garbage")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(started.elapsed(), REVIEW_SLOT_WAIT);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(
            fake.reviews().0,
            1 + MAX_REVIEWS_IN_FLIGHT,
            "no review asked"
        );
        // A cached decision needs no slot.
        assert_eq!(call(&app, "/metrics", Some("Bearer reader")).await.0, 200);

        // Once the stalled reviews time out, their slots are free again.
        for task in stalled {
            assert_eq!(task.await.unwrap().0, 401);
        }
        assert_eq!(gate.reviews.available_permits(), MAX_REVIEWS_IN_FLIGHT);
        assert_eq!(call(&app, "/metrics", Some("Bearer garbage")).await.0, 401);
    }

    /// A fresh directory for one test.
    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "inpool-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Writes `tls.crt` and `tls.key` of `dir` as cert-manager's kubelet-projected secrets
    /// change: each file whole, through a temporary file and a rename.
    fn write_pair(dir: &Path, (cert, key): (String, String)) {
        for (name, text) in [("tls.crt", cert), ("tls.key", key)] {
            let temp = dir.join(format!(".{name}.tmp"));
            std::fs::write(&temp, text).unwrap();
            std::fs::rename(&temp, dir.join(name)).unwrap();
        }
    }

    fn offers_only_http1(tls: &RustlsConfig) -> bool {
        tls.get_inner().alpn_protocols == [b"http/1.1".to_vec()]
    }

    #[tokio::test]
    async fn a_renewed_certificate_is_reloaded_and_a_broken_one_ignored() {
        let dir = temp_dir("cert-reload");
        write_pair(&dir, self_signed_pem().unwrap());
        let (tls, loaded) = tls_config(Some(&dir), &TlsPolicy::default()).await.unwrap();
        assert!(offers_only_http1(&tls));
        let first = tls.get_inner();
        let mut last = loaded;
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Unchanged
        );
        assert!(Arc::ptr_eq(&first, &tls.get_inner()));

        write_pair(&dir, ("not a certificate".into(), "nor a key".into()));
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Rejected
        );
        assert!(
            Arc::ptr_eq(&first, &tls.get_inner()),
            "a broken pair was used"
        );
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Unchanged,
            "a broken pair is reported once"
        );

        write_pair(&dir, self_signed_pem().unwrap());
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Reloaded
        );
        assert!(!Arc::ptr_eq(&first, &tls.get_inner()));
        assert!(
            offers_only_http1(&tls),
            "a reloaded certificate keeps HTTP/1.1 only"
        );
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Unchanged
        );

        std::fs::remove_file(dir.join("tls.key")).unwrap();
        let current = tls.get_inner();
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Unreadable
        );
        assert!(Arc::ptr_eq(&current, &tls.get_inner()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_certificate_renewed_between_loading_and_watching_is_picked_up() {
        let dir = temp_dir("cert-renewed-at-start");
        write_pair(&dir, self_signed_pem().unwrap());
        let (tls, loaded) = tls_config(Some(&dir), &TlsPolicy::default()).await.unwrap();
        let first = tls.get_inner();
        // Renewed before the watcher's first look: it compares with what was loaded.
        write_pair(&dir, self_signed_pem().unwrap());
        let mut last = loaded;
        assert_eq!(
            reload_once(&tls, &TlsPolicy::default(), &dir, &mut last).await,
            Reload::Reloaded
        );
        assert!(!Arc::ptr_eq(&first, &tls.get_inner()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn the_self_signed_certificate_offers_only_http1() {
        let (tls, loaded) = tls_config(None, &TlsPolicy::default()).await.unwrap();
        assert!(loaded.is_none());
        assert!(offers_only_http1(&tls));
    }

    #[test]
    fn the_self_signed_certificate_is_pem() {
        let (cert, key) = self_signed_pem().unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
        assert!(key.contains("PRIVATE KEY-----"), "{key}");
    }
}
