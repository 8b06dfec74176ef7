//! Prometheus metrics (OpenMetrics text): inpool's own, prefixed `inpool_`, and the families
//! every controller-runtime manager exports ([`super::standard`]).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `inpool_pool_size` | gauge | `pool_kind`, `pool_namespace`, `pool_name` |
//! | `inpool_pool_used` | gauge | same |
//! | `inpool_pool_free` | gauge | same |
//! | `inpool_pool_out_of_range` | gauge | same |
//! | `inpool_pool_waiting_claims` | gauge | same |
//! | `inpool_foreign_addresses` | gauge | same |
//! | `inpool_allocations_total` | counter | same |
//! | `inpool_releases_total` | counter | same |
//! | `inpool_claim_failures_total` | counter | `reason` |
//! | `inpool_claim_ready_latency_seconds` | histogram | — |
//! | `inpool_reconciles_total` | counter | `controller` |
//! | `inpool_reconcile_errors_total` | counter | `controller`, `error` |
//! | `inpool_pool_kind_served` | gauge | `pool_kind` |
//! | `inpool_claims_watched` | gauge | — |
//! | `inpool_registry_entries` | gauge | `map` |
//! | `inpool_leader` | gauge | — |
//! | `inpool_reference_provider_lease` | gauge | — |
//! | `inpool_build_info` | info | `version` |
//!
//! `pool_namespace` is `""` for a global pool (`GlobalInClusterIPPool`,
//! `GlobalInClusterPrefixPool`); a prefix pool's gauges count sub-prefixes. Counters are
//! registered without the `_total` suffix: prometheus-client adds it (and, since 0.26, panics
//! under debug assertions if a counter's registered name already ends in `_total`).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use std::time::Duration;

use super::pool_series::{PoolCounter, PoolGauge, PoolSeries};
use super::standard::Standard;
use super::standard::{ControllerMetrics, QueueMetrics};
use crate::api::PoolKey;

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PoolKindLabels {
    pool_kind: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ErrorLabels {
    controller: String,
    error: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MapLabels {
    map: String,
}

type U64Gauge = Gauge<u64, AtomicU64>;

/// How many entries each map of the registry holds (`inpool_registry_entries{map}`): under
/// steady churn every one stays flat; one that grows is a leak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegistrySizes {
    pub pools: usize,
    pub reservations: usize,
    /// Claims with at least one reservation recorded.
    pub claims_reserved: usize,
    pub addresses: usize,
    /// Allocations between their decision and their reservation's watch event.
    pub in_flight: usize,
    /// Claims queued for an address, over all pools.
    pub waiting: usize,
    /// Deletions remembered while reconciles had requests on the way.
    pub deletions: usize,
}

/// Upper bounds (seconds) of the claim-to-Ready latency buckets: from an immediate allocation
/// (tens of milliseconds) to a claim that waited minutes for a pool to grow.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
];

struct Inner {
    registry: Registry,
    standard: Standard,
    /// The leader election Lease, once this process elects on one.
    lease: std::sync::OnceLock<String>,
    /// Every pool's gauges and counters.
    pools: PoolSeries,
    pool_kind_served: Family<PoolKindLabels, Gauge>,
    claim_failures: Family<ReasonLabels, Counter>,
    claim_ready_latency: Histogram,
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    state_drift: Family<KindLabels, Counter>,
    stray_reservations: Counter,
    orphan_addresses: Counter,
    audits: Counter,
    claims_watched: U64Gauge,
    registry_entries: Family<MapLabels, U64Gauge>,
    leader: Gauge,
    reference_provider_lease: Gauge,
}

/// The kinds of drift the audit reports (`controllers::state::Change::kind`, and the
/// allocator recount).
pub const DRIFT_KINDS: [&str; 4] = ["pool", "reservation", "address", "allocator"];

/// The process's metrics. Cheap to clone (all clones share one registry).
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut root = Registry::default();
        let standard = Standard::register(&mut root);
        let registry = root.sub_registry_with_prefix("inpool");
        let pools = PoolSeries::default();
        registry.register_collector(pools.collector());
        let pool_kind_served = Family::<PoolKindLabels, Gauge>::default();
        let claim_failures = Family::<ReasonLabels, Counter>::default();
        let claim_ready_latency = Histogram::new(LATENCY_BUCKETS);
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let leader = Gauge::default();
        let state_drift = Family::<KindLabels, Counter>::default();
        // Each kind starts at 0, so that the first drift after a start is an increase an alert
        // (`increase(...)`) can see, not a series that appears at 1.
        for kind in DRIFT_KINDS {
            let _created = state_drift.get_or_create(&KindLabels {
                kind: kind.to_string(),
            });
        }
        let stray_reservations = Counter::default();
        let orphan_addresses = Counter::default();
        let audits = Counter::default();

        registry.register(
            "pool_kind_served",
            "1 while inpool watches and serves the pool kind, 0 when the API server does not serve it or inpool may not list and watch it (its CRD or RBAC is not installed)",
            pool_kind_served.clone(),
        );
        registry.register(
            "claim_failures",
            "Claims that could not get an address, by the reason of their Ready condition",
            claim_failures.clone(),
        );
        registry.register_with_unit(
            "claim_ready_latency",
            "Time from a claim's creation to its Ready condition becoming True",
            Unit::Seconds,
            claim_ready_latency.clone(),
        );
        registry.register("reconciles", "Reconciliations run", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciliations that failed, by error kind",
            reconcile_errors.clone(),
        );
        registry.register(
            "state_drift",
            "Differences the audit found between inpool's memory and the API server, and corrected, by kind (pool, reservation, address, allocator); 0 in a healthy run",
            state_drift.clone(),
        );
        registry.register(
            "stray_reservations_collected",
            "Reservations the audit deleted because their claim was gone or held another address (left by a crash between two writes)",
            stray_reservations.clone(),
        );
        registry.register(
            "orphan_addresses_released",
            "IPAddresses of inpool's pools, being deleted, whose finalizer the audit removed because their claim was gone (such as those clusterctl move leaves on the source for claims on global pools, once the operator deletes them)",
            orphan_addresses.clone(),
        );
        registry.register("audits", "Audits completed", audits.clone());
        let claims_watched = U64Gauge::default();
        registry.register(
            "claims_watched",
            "IPAddressClaims in this process's cache (its --namespace and --watch-filter): its memory grows with this number",
            claims_watched.clone(),
        );
        let registry_entries = Family::<MapLabels, U64Gauge>::default();
        registry.register(
            "registry_entries",
            "Entries in each map of the allocation registry (pools, reservations, claims_reserved, addresses, in_flight, waiting), as of the last pool status published: flat under steady churn",
            registry_entries.clone(),
        );
        registry.register(
            "leader",
            "1 while this process holds the leader election lease (or runs without leader election), else 0",
            leader.clone(),
        );
        let reference_provider_lease = Gauge::default();
        registry.register(
            "reference_provider_lease",
            "1 while the reference IPAM provider's leader election Lease is held and renewed (another provider runs beside inpool), else 0",
            reference_provider_lease.clone(),
        );
        registry.register(
            "build",
            "inpool's version",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
            }),
        );

        Metrics {
            inner: Arc::new(Inner {
                registry: root,
                standard,
                lease: std::sync::OnceLock::new(),
                pools,
                pool_kind_served,
                claim_failures,
                claim_ready_latency,
                reconciles,
                reconcile_errors,
                state_drift,
                stray_reservations,
                orphan_addresses,
                audits,
                claims_watched,
                registry_entries,
                leader,
                reference_provider_lease,
            }),
        }
    }

    /// Sets whether a pool kind is served (`inpool_pool_kind_served`).
    pub fn pool_kind_served(&self, kind: crate::api::PoolKind, served: bool) {
        self.inner
            .pool_kind_served
            .get_or_create(&PoolKindLabels {
                pool_kind: kind.name().to_string(),
            })
            .set(i64::from(served));
    }

    /// Sets a pool's capacity gauges (the same numbers as its status).
    pub fn pool_capacity(
        &self,
        pool: &PoolKey,
        total: u64,
        used: u64,
        free: u64,
        out_of_range: u64,
    ) {
        self.inner.pools.set(
            pool,
            &[
                (PoolGauge::Size, total),
                (PoolGauge::Used, used),
                (PoolGauge::Free, free),
                (PoolGauge::OutOfRange, out_of_range),
            ],
        );
    }

    /// Sets how many claims wait for an address from the pool.
    pub fn pool_waiting_claims(&self, pool: &PoolKey, waiting: u64) {
        self.inner
            .pools
            .set(pool, &[(PoolGauge::WaitingClaims, waiting)]);
    }

    /// Sets how many foreign `IPAddress`es the pool has (see `controllers::sources::writers`).
    pub fn foreign_addresses(&self, pool: &PoolKey, count: u64) {
        self.inner
            .pools
            .set(pool, &[(PoolGauge::ForeignAddresses, count)]);
    }

    /// Sets whether the reference provider's leader election Lease is live.
    pub fn reference_provider_lease(&self, live: bool) {
        self.inner.reference_provider_lease.set(i64::from(live));
    }

    /// Drops a deleted pool's gauges. Its allocation and release counters stay (counters must not
    /// go backwards while the process runs).
    pub fn forget_pool(&self, pool: &PoolKey) {
        self.inner.pools.forget(pool);
    }

    /// Drops every pool's gauges (and the reference Lease's): when this process stops running
    /// the controllers (lost the lease, shutting down), so that only the leader exports pool
    /// state and a former leader leaves no stale series behind.
    pub fn clear_pools(&self) {
        self.inner.pools.forget_all();
        self.inner.reference_provider_lease.set(0);
    }

    /// Counts one address allocated from the pool.
    pub fn allocation(&self, pool: &PoolKey) {
        self.inner.pools.inc(pool, PoolCounter::Allocations);
    }

    /// Counts one address released back to the pool.
    pub fn release(&self, pool: &PoolKey) {
        self.inner.pools.inc(pool, PoolCounter::Releases);
    }

    /// Counts a claim that could not get an address; `reason` is the reason of its Ready
    /// condition (`PoolExhausted`, `PoolNotReady`, `AllocationFailed`).
    pub fn failure(&self, reason: &str) {
        self.inner
            .claim_failures
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Records the time from a claim's creation to its Ready=True condition.
    pub fn claim_ready_latency(&self, seconds: f64) {
        self.inner.claim_ready_latency.observe(seconds.max(0.0));
    }

    /// Counts one reconciliation by `controller` (e.g. `ipaddressclaim`).
    pub fn reconcile(&self, controller: &str) {
        self.inner
            .reconciles
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .inc();
    }

    /// Counts one failed reconciliation; `error` is a short, bounded error kind.
    pub fn reconcile_error(&self, controller: &str, error: &str) {
        self.inner
            .reconcile_errors
            .get_or_create(&ErrorLabels {
                controller: controller.to_string(),
                error: error.to_string(),
            })
            .inc();
    }

    /// Sets the `inpool_leader` gauge.
    /// The audit corrected one difference of this kind.
    pub fn state_drift(&self, kind: &str) {
        self.inner
            .state_drift
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// The audit released an `IPAddress` being deleted whose claim was gone.
    pub fn orphan_address_released(&self) {
        self.inner.orphan_addresses.inc();
    }

    /// The audit deleted a stray reservation.
    pub fn stray_reservation_collected(&self) {
        self.inner.stray_reservations.inc();
    }

    /// An audit completed.
    pub fn audit_completed(&self) {
        self.inner.audits.inc();
    }

    /// How many claims the claim watch's cache holds.
    pub fn claims_watched(&self, claims: usize) {
        self.inner.claims_watched.set(claims as u64);
    }

    /// Sets `inpool_registry_entries`.
    pub fn registry_sizes(&self, sizes: &RegistrySizes) {
        let maps = [
            ("pools", sizes.pools),
            ("reservations", sizes.reservations),
            ("claims_reserved", sizes.claims_reserved),
            ("addresses", sizes.addresses),
            ("in_flight", sizes.in_flight),
            ("waiting", sizes.waiting),
            ("deletions", sizes.deletions),
        ];
        for (map, entries) in maps {
            self.inner
                .registry_entries
                .get_or_create(&MapLabels { map: map.into() })
                .set(entries as u64);
        }
    }

    /// Sets `inpool_leader` and, once this process elects on a Lease
    /// ([`Metrics::elect_on`]), `leader_election_master_status` of that Lease.
    pub fn set_leader(&self, leading: bool) {
        self.inner.leader.set(i64::from(leading));
        if let Some(lease) = self.inner.lease.get() {
            self.inner.standard.set_leader(lease, leading);
        }
    }

    /// This process elects its leader on the Lease `name` (namespace-free, as client-go labels
    /// it): `leader_election_master_status{name}` starts at 0.
    pub fn elect_on(&self, name: &str) {
        if self.inner.lease.set(name.to_string()).is_ok() {
            self.inner.standard.set_leader(name, false);
        }
    }

    /// The reconcile families of `controller`, which runs at most `max_concurrent` reconciles
    /// at once (0: no limit).
    pub fn controller(&self, controller: &str, max_concurrent: u16) -> ControllerMetrics {
        self.inner.standard.controller(controller, max_concurrent)
    }

    /// The work-queue families of `controller`'s queue.
    pub fn queue(&self, controller: &str) -> QueueMetrics {
        self.inner.standard.queue(controller)
    }

    /// Counts one API request (see [`RestClientLayer`]).
    pub fn rest_client_request(&self, method: &str, code: &str, host: &str, took: Duration) {
        self.inner.standard.request(method, code, host, took);
    }

    /// The registry in the OpenMetrics text format (ends with `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.inner.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::ReconcileResult;

    /// The sample lines of `text` (no comments), for exact comparisons.
    fn samples(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn fresh_registry() {
        let text = Metrics::new().encode();
        // Families (labelled metrics) appear with their first sample; the rest always do.
        for line in [
            "# TYPE inpool_claim_ready_latency_seconds histogram",
            "# UNIT inpool_claim_ready_latency_seconds seconds",
            "# TYPE inpool_leader gauge",
            "# TYPE inpool_build info",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert!(!text.contains("inpool_pool_free"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains(&format!(
            "inpool_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
        assert!(samples(&text).contains(&"inpool_leader 0"));
        assert!(samples(&text).contains(&"inpool_claim_ready_latency_seconds_count 0"));
    }

    #[test]
    fn every_family_has_its_type_once_used() {
        let m = Metrics::new();
        let pool = PoolKey::global("g");
        m.pool_capacity(&pool, 1, 0, 1, 0);
        m.pool_waiting_claims(&pool, 0);
        m.allocation(&pool);
        m.release(&pool);
        m.failure("PoolExhausted");
        m.reconcile("ipaddressclaim");
        m.reconcile_error("ipaddressclaim", "Kube");
        let text = m.encode();
        for line in [
            "# TYPE inpool_pool_size gauge",
            "# TYPE inpool_pool_used gauge",
            "# TYPE inpool_pool_free gauge",
            "# TYPE inpool_pool_out_of_range gauge",
            "# TYPE inpool_pool_waiting_claims gauge",
            "# TYPE inpool_allocations counter",
            "# TYPE inpool_releases counter",
            "# TYPE inpool_claim_failures counter",
            "# TYPE inpool_reconciles counter",
            "# TYPE inpool_reconcile_errors counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }

    #[test]
    fn pool_gauges_carry_pool_labels() {
        let m = Metrics::new();
        let pool = PoolKey::in_cluster("team-a", "nodes");
        let global = PoolKey::global("shared");
        m.pool_capacity(&pool, 254, 10, 244, 1);
        m.pool_waiting_claims(&pool, 3);
        m.pool_capacity(&global, u64::MAX, 0, u64::MAX, 0);
        let text = m.encode();
        let labels = r#"{pool_kind="InClusterIPPool",pool_namespace="team-a",pool_name="nodes"}"#;
        let samples = samples(&text);
        for line in [
            format!("inpool_pool_size{labels} 254"),
            format!("inpool_pool_used{labels} 10"),
            format!("inpool_pool_free{labels} 244"),
            format!("inpool_pool_out_of_range{labels} 1"),
            format!("inpool_pool_waiting_claims{labels} 3"),
            r#"inpool_pool_free{pool_kind="GlobalInClusterIPPool",pool_namespace="",pool_name="shared"} 18446744073709551615"#.to_string(),
        ] {
            assert!(samples.contains(&line.as_str()), "{line} missing in\n{text}");
        }

        // Updating overwrites; forgetting removes every gauge of that pool only.
        m.pool_capacity(&pool, 254, 11, 243, 0);
        assert!(
            m.encode()
                .contains(&format!("inpool_pool_free{labels} 243\n"))
        );
        m.forget_pool(&pool);
        let text = m.encode();
        assert!(!text.contains("pool_name=\"nodes\""), "{text}");
        assert!(text.contains("pool_name=\"shared\""), "{text}");

        // Clearing drops every pool gauge but keeps the counters.
        m.allocation(&global);
        m.clear_pools();
        let text = m.encode();
        assert!(!text.contains("inpool_pool_"), "{text}");
        assert!(text.contains("inpool_allocations_total{"), "{text}");
    }

    #[test]
    fn counters_and_histogram() {
        let m = Metrics::new();
        let pool = PoolKey::in_cluster("ns", "p");
        m.allocation(&pool);
        m.allocation(&pool);
        m.release(&pool);
        m.failure("PoolExhausted");
        m.failure("PoolExhausted");
        m.failure("PoolNotReady");
        m.reconcile("ipaddressclaim");
        m.reconcile_error("ipaddressclaim", "Kube");
        m.claim_ready_latency(0.2);
        m.claim_ready_latency(42.0);
        m.set_leader(true);
        let text = m.encode();
        let samples = samples(&text);
        let labels = r#"{pool_kind="InClusterIPPool",pool_namespace="ns",pool_name="p"}"#;
        for line in [
            format!("inpool_allocations_total{labels} 2"),
            format!("inpool_releases_total{labels} 1"),
            r#"inpool_claim_failures_total{reason="PoolExhausted"} 2"#.to_string(),
            r#"inpool_claim_failures_total{reason="PoolNotReady"} 1"#.to_string(),
            r#"inpool_reconciles_total{controller="ipaddressclaim"} 1"#.to_string(),
            r#"inpool_reconcile_errors_total{controller="ipaddressclaim",error="Kube"} 1"#
                .to_string(),
            "inpool_claim_ready_latency_seconds_sum 42.2".to_string(),
            "inpool_claim_ready_latency_seconds_count 2".to_string(),
            r#"inpool_claim_ready_latency_seconds_bucket{le="0.1"} 0"#.to_string(),
            r#"inpool_claim_ready_latency_seconds_bucket{le="0.25"} 1"#.to_string(),
            r#"inpool_claim_ready_latency_seconds_bucket{le="60.0"} 2"#.to_string(),
            r#"inpool_claim_ready_latency_seconds_bucket{le="+Inf"} 2"#.to_string(),
            "inpool_leader 1".to_string(),
        ] {
            assert!(
                samples.contains(&line.as_str()),
                "{line} missing in\n{text}"
            );
        }
    }

    #[test]
    fn registry_sizes_are_one_gauge_per_map() {
        let m = Metrics::new();
        m.registry_sizes(&RegistrySizes {
            pools: 1,
            reservations: 10,
            claims_reserved: 9,
            addresses: 8,
            in_flight: 2,
            waiting: 3,
            deletions: 4,
        });
        let text = m.encode();
        for line in [
            r#"inpool_registry_entries{map="pools"} 1"#,
            r#"inpool_registry_entries{map="reservations"} 10"#,
            r#"inpool_registry_entries{map="claims_reserved"} 9"#,
            r#"inpool_registry_entries{map="addresses"} 8"#,
            r#"inpool_registry_entries{map="in_flight"} 2"#,
            r#"inpool_registry_entries{map="waiting"} 3"#,
            r#"inpool_registry_entries{map="deletions"} 4"#,
        ] {
            assert!(samples(&text).contains(&line), "{line} missing in\n{text}");
        }
    }

    #[test]
    fn clones_share_the_registry() {
        let m = Metrics::new();
        let clone = m.clone();
        clone.failure("AllocationFailed");
        m.set_leader(true);
        let text = m.encode();
        assert!(text.contains("inpool_claim_failures_total{reason=\"AllocationFailed\"} 1"));
        assert!(text.contains("\ninpool_leader 1\n"));
    }

    /// The standard families under controller-runtime's and client-go's names and labels, beside
    /// inpool's own (which keep their prefix).
    #[test]
    fn standard_families_carry_controller_runtimes_names_and_labels() {
        let m = Metrics::new();
        let claims = m.controller("ipaddressclaim", 16);
        let began = claims.started();
        claims.finished(began, ReconcileResult::Success);
        let began = claims.started();
        claims.finished(began, ReconcileResult::Error);
        let queue = m.queue("ipaddressclaim");
        queue.depth(3, 7);
        queue.added(2);
        queue.taken(Duration::from_millis(5));
        queue.retried();
        m.rest_client_request("GET", "200", "127.0.0.1:6443", Duration::from_millis(20));
        m.elect_on("inpool-leader");
        m.set_leader(true);
        let text = m.encode();
        let samples = samples(&text);
        for line in [
            "controller_runtime_reconcile_total{controller=\"ipaddressclaim\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"ipaddressclaim\",result=\"error\"} 1",
            "controller_runtime_reconcile_total{controller=\"ipaddressclaim\",result=\"requeue_after\"} 0",
            "controller_runtime_reconcile_errors_total{controller=\"ipaddressclaim\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"ipaddressclaim\"} 2",
            "controller_runtime_active_workers{controller=\"ipaddressclaim\"} 0",
            "controller_runtime_max_concurrent_reconciles{controller=\"ipaddressclaim\"} 16",
            "workqueue_depth{name=\"ipaddressclaim\",controller=\"ipaddressclaim\",priority=\"0\"} 3",
            "workqueue_depth{name=\"ipaddressclaim\",controller=\"ipaddressclaim\",priority=\"-100\"} 7",
            "workqueue_adds_total{name=\"ipaddressclaim\",controller=\"ipaddressclaim\"} 2",
            "workqueue_queue_duration_seconds_count{name=\"ipaddressclaim\",controller=\"ipaddressclaim\"} 1",
            "workqueue_retries_total{name=\"ipaddressclaim\",controller=\"ipaddressclaim\"} 1",
            "rest_client_requests_total{code=\"200\",method=\"GET\",host=\"127.0.0.1:6443\"} 1",
            "rest_client_request_duration_seconds_count{verb=\"GET\",host=\"127.0.0.1:6443\"} 1",
            "leader_election_master_status{name=\"inpool-leader\"} 1",
            "inpool_leader 1",
        ] {
            assert!(samples.contains(&line), "{line} missing in\n{text}");
        }
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_start_time_seconds",
        ] {
            assert!(
                samples.iter().any(|l| l.starts_with(family)),
                "{family} missing in\n{text}"
            );
        }
    }
}
