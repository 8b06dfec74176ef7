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
//! The logic is generic over [`Reviewer`], so that it is tested without an API server;
//! [`ApiReviewer`] is the real one, and `tests/process/diagnostics.rs` runs it on a control plane.
//!
//! - [`certs`]: the certificate, from a directory and reloaded when renewed, or self-signed;
//! - [`review`]: the [`Reviewer`] and the API server's, [`ApiReviewer`];
//! - [`cache`]: the decisions kept, keyed by digests, and which a full cache gives up first;
//! - [`gate`]: the [`Gate`], which decides from the caches or the reviewer within the review
//!   slots, and the middleware ([`protect`]) that answers with its decision;
//! - [`https`]: binding and serving over TLS, HTTP/1.1 only.
//!
//! The limits and lifetimes named above are defined here, beside the account of what they do.

use std::time::Duration;

mod cache;
mod certs;
mod gate;
mod https;
mod review;

pub use certs::{PemPair, Reload, reload_certificates, reload_once, self_signed_pem, tls_config};
pub use gate::{Gate, protect};
pub use https::{bind, serve_tls};
pub use review::{ApiReviewer, Reviewer};

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
