//! What the reconcilers' unit tests share: a [`Context`] on a mock API server, built as
//! [`run`](super::run) builds it but with empty stores the test fills, and the mock server's
//! script: each request a step must send, in order, with the answer it gets (controller-rs's
//! `fixtures.rs` scenarios, on kube's own mock, `tower_test::mock`). Its rule: a scenario fails on
//! a request out of order, a request too many, or one that never comes.
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::runtime::{reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use super::claims::cache::{CacheWriter, ClaimCache};
use super::claims::cached_claim::{CachedClaim, WatchedClaim};
use super::context::Context;
use super::sources::pool_cache::PoolView;
use super::sources::{served, watch};
use super::state::Change;
use super::state::facts::pool_state;
use super::state::reservation::{IPAddressReservation, hold_of, new_reservation};
use crate::api::{
    Cluster, IPAddressClaim, IPPool, InClusterIPPool, InClusterIPPoolSpec, ObjectKey, PoolKey,
    PoolKind, Scope,
};
use crate::settings::Settings;
use crate::telemetry::Metrics;

/// How long a scenario waits for a request, or for the step to end once its script is played:
/// longer than any wait of a step (the audit's 5 s settle), so that a test in paused time, where
/// the clock jumps to the next timer, sees the step's timers first.
const PATIENCE: Duration = Duration::from_secs(10);

/// The mock API server's end: the requests the client sends, each waiting for its answer.
pub(crate) type Server = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// A [`Context`] on a mock API server, with the stores the test fills.
pub(crate) struct Mock {
    pub ctx: Arc<Context>,
    pub server: Server,
    claims: Mutex<CacheWriter>,
    clusters: Mutex<reflector::store::Writer<Cluster>>,
}

impl Mock {
    /// The [`Context`] `run` builds, on a client whose requests reach [`Mock::server`], serving
    /// every pool kind, with empty stores (the watches `watch::start` returns are never polled).
    pub(crate) fn new() -> Mock {
        let (service, server) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let settings = Settings::default();
        let served = served::ServedKinds::all();
        let claim_cache = ClaimCache::default();
        let (mut stores, _feeds, _subscriptions) =
            watch::start(&client, &settings, claim_cache.clone(), &served);
        let (clusters, cluster_writer) = reflector::store();
        stores.clusters = clusters;
        // A dropped receiver: the wakes a step asks for go nowhere.
        let (wake, _) = mpsc::unbounded();
        let ctx = Arc::new(Context::new(
            client,
            settings,
            Metrics::default(),
            stores,
            served,
            wake,
        ));
        Mock {
            ctx,
            server,
            claims: Mutex::new(CacheWriter::new(claim_cache)),
            clusters: Mutex::new(cluster_writer),
        }
    }

    /// Puts `pool` into its kind's pool cache and the registry, as its watch event would.
    pub(crate) fn pool<P: IPPool>(&self, pool: &P) {
        let state = pool_state(pool);
        let view = Arc::new(PoolView::of(pool, &state));
        self.ctx.stores.pools.cache(P::KIND).applied(view);
        self.ctx.apply(Change::Pool(pool.key(), state));
    }

    /// Puts `claim` into the claim cache, as its watch event would; returns the cached claim.
    pub(crate) fn claim(&self, claim: IPAddressClaim) -> Arc<CachedClaim> {
        let mut writer = self.claims.lock().expect("claim writer");
        let requests = writer.apply(watcher::Event::Apply(WatchedClaim::from(claim)));
        let (key, _) = requests.first().expect("a claim of a served pool kind");
        self.ctx.stores.claim(key).expect("the claim just cached")
    }

    /// Tells the registry of `reservation`, as its watch event would.
    pub(crate) fn learn(&self, reservation: &IPAddressReservation) {
        let hold = hold_of(reservation).expect("a reservation of a pool");
        self.ctx
            .apply(Change::Reservation(reservation.name_any(), hold));
    }

    /// Puts `cluster` into the Cluster store.
    pub(crate) fn cluster(&self, cluster: Cluster) {
        let mut writer = self.clusters.lock().expect("cluster writer");
        writer.apply_watcher_event(&watcher::Event::Apply(cluster));
    }
}

/// One request a step must send (its method, path and query, and fields of its JSON body) and
/// the answer the mock server gives it.
pub(crate) struct Expect {
    method: Method,
    uri: String,
    fields: Vec<(&'static str, Value)>,
    status: StatusCode,
    answer: Answer,
}

enum Answer {
    /// The request's body, as the API server stores it (a UID and a resourceVersion added).
    Echo,
    Json(Value),
}

impl Expect {
    fn new(method: Method, uri: impl Into<String>) -> Expect {
        Expect {
            method,
            uri: uri.into(),
            fields: Vec::new(),
            status: StatusCode::OK,
            answer: Answer::Echo,
        }
    }

    pub(crate) fn get(uri: impl Into<String>) -> Expect {
        Expect::new(Method::GET, uri)
    }

    pub(crate) fn post(uri: impl Into<String>) -> Expect {
        Expect::new(Method::POST, uri).created()
    }

    pub(crate) fn patch(uri: impl Into<String>) -> Expect {
        Expect::new(Method::PATCH, uri)
    }

    pub(crate) fn delete(uri: impl Into<String>) -> Expect {
        Expect::new(Method::DELETE, uri)
    }

    /// The body's field at the JSON pointer `pointer` must be `value`.
    pub(crate) fn with(mut self, pointer: &'static str, value: impl Into<Value>) -> Expect {
        self.fields.push((pointer, value.into()));
        self
    }

    /// Answered `201 Created` with the object sent.
    pub(crate) fn created(mut self) -> Expect {
        self.status = StatusCode::CREATED;
        self.answer = Answer::Echo;
        self
    }

    /// Answered `200 OK` with `object`.
    pub(crate) fn answer(mut self, object: &impl serde::Serialize) -> Expect {
        self.status = StatusCode::OK;
        self.answer = Answer::Json(serde_json::to_value(object).expect("serialise the answer"));
        self
    }

    /// Answered with a failure `Status` of `code` and `reason`.
    pub(crate) fn fails(mut self, code: u16, reason: &str) -> Expect {
        self.status = StatusCode::from_u16(code).expect("a status code");
        self.answer = Answer::Json(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("{reason} (mock)"), "reason": reason, "code": code,
        }));
        self
    }

    /// Answered `404 Not Found`.
    pub(crate) fn not_found(self) -> Expect {
        self.fails(404, "NotFound")
    }

    /// Checks `request` against this expectation (the `n`th of the script) and makes the answer.
    fn answer_to(self, n: usize, request: &http::request::Parts, body: &[u8]) -> Response<Body> {
        let uri = request.uri.to_string();
        let sent: Value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(body).expect("a JSON body")
        };
        assert_eq!(
            (&request.method, uri.as_str()),
            (&self.method, self.uri.as_str()),
            "request {n}: body {sent}"
        );
        for (pointer, value) in &self.fields {
            assert_eq!(
                sent.pointer(pointer),
                Some(value),
                "request {n} {} {uri}: {pointer} of {sent}",
                self.method
            );
        }
        let answer = match self.answer {
            Answer::Json(object) => object,
            Answer::Echo => {
                let mut object = sent;
                object["metadata"]["uid"] = json!(format!("uid-{n}"));
                object["metadata"]["resourceVersion"] = json!(format!("{}", 100 + n));
                object
            }
        };
        Response::builder()
            .status(self.status)
            .body(Body::from(serde_json::to_vec(&answer).expect("serialise")))
            .expect("a response")
    }
}

/// Runs `step` against the mock server, which answers the requests of `script` in order and
/// fails on any other; returns what the step returned.
pub(crate) async fn scenario<T: Send + 'static>(
    server: &mut Server,
    step: impl Future<Output = T> + Send + 'static,
    script: Vec<Expect>,
) -> T {
    let mut step = tokio::spawn(step);
    for (n, expected) in script.into_iter().enumerate() {
        let (method, uri) = (expected.method.clone(), expected.uri.clone());
        let (request, respond) = tokio::select! {
            request = server.next_request() => request.expect("the client is gone"),
            ended = &mut step => {
                ended.expect("the step panicked");
                panic!("the step ended before request {n}: {method} {uri}");
            }
            () = tokio::time::sleep(PATIENCE) => panic!("request {n} never came: {method} {uri}"),
        };
        let (parts, body) = request.into_parts();
        let body = body.collect_bytes().await.expect("the request body");
        respond.send_response(expected.answer_to(n, &parts, &body));
    }
    tokio::select! {
        request = server.next_request() => {
            let (request, _) = request.expect("the client is gone");
            panic!("a request after the script: {} {}", request.method(), request.uri());
        }
        ended = &mut step => ended.expect("the step panicked"),
        () = tokio::time::sleep(PATIENCE) => panic!("the step did not end after the script"),
    }
}

/// An object's `metadata.uid` and `resourceVersion`, as the API server sets them.
pub(crate) fn stored<K: Resource>(mut object: K, uid: &str, version: &str) -> K {
    object.meta_mut().uid = Some(uid.to_string());
    object.meta_mut().resource_version = Some(version.to_string());
    object
}

/// `InClusterIPPool` `ns/p` of `addresses`, /24, gateway 10.0.0.1, as the API server keeps it
/// (UID `pool-uid`, resourceVersion 1).
pub(crate) fn ip_pool(addresses: &[&str]) -> InClusterIPPool {
    let mut spec = InClusterIPPoolSpec::new(addresses.iter().copied(), 24);
    spec.gateway = Some("10.0.0.1".into());
    let mut pool = InClusterIPPool::new("p", spec);
    pool.metadata.namespace = Some("ns".into());
    stored(pool, "pool-uid", "1")
}

/// The key of [`ip_pool`].
pub(crate) fn pool_key() -> PoolKey {
    PoolKey::of_kind(PoolKind::InCluster, Some("ns"), "p").expect("a pool key")
}

/// The reservation inpool makes of `ip` of [`ip_pool`] for claim `ns/claim` (of UID
/// `claim-uid`), as the API server keeps it.
pub(crate) fn reservation(claim: &str, ip: &str) -> IPAddressReservation {
    let ip: IpAddr = ip.parse().expect("an IP address");
    let scope = Scope::Namespace("ns".into());
    let claim_key = ObjectKey::new("ns", claim);
    let uid = Some(format!("{claim}-uid"));
    let reservation = new_reservation(&scope, &pool_key(), &claim_key, uid, ip, 32);
    stored(reservation, "reservation-uid", "5")
}
