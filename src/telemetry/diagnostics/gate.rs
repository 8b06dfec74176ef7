//! The gate: the decision for a request's token on its verb and path, from the caches or the
//! [`Reviewer`] (at most [`MAX_REVIEWS_IN_FLIGHT`] reviews at once, each within
//! [`REVIEW_TIMEOUT`]), and the middleware that answers 401, 403, 500 or 503 with it, as
//! controller-runtime's filter does, or lets the request through.
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::cache::{Caches, Keep, TtlCache, access_key, token_key};
use super::review::Reviewer;
use super::{
    ALLOWED_TTL, CACHE_CAPACITY, DENIED_TTL, MAX_REVIEWS_IN_FLIGHT, REVIEW_SLOT_WAIT,
    REVIEW_TIMEOUT, TOKEN_TTL,
};

/// A decision about one (token, verb, path).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Decision {
    Unauthenticated,
    Denied { user: String },
    Allowed,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use axum::body::Body;
    use axum::routing::get;
    use k8s_openapi::api::authentication::v1::UserInfo;
    use tower::ServiceExt;

    use crate::telemetry::diagnostics::review::Verdict;

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

        async fn authorize(&self, user: &UserInfo, verb: &str, path: &str) -> Verdict {
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
}
