//! The scale harness's engine: the floor (an ideal provider that only writes), the provider
//! scenarios (N claims in M pools against a provider process; M pools carved from one parent
//! against M with their subnets in their specs: [`Carving`]), the Ready trackers (watches, not
//! polling), and the end-of-run correctness check. Used by `src/bin/scale/` (the full run)
//! and `tests/scale/main.rs` (N = 200, correctness only).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt;
use inpool::api::reservation::{IPAddressReservation, IPAddressReservationSpec};
use inpool::api::{
    ADDRESS_FINALIZER, CLAIM_FINALIZER, ConditionStatus, DesiredCondition, GlobalInClusterIPPool,
    GlobalInClusterIPPoolSpec, IPAM_GROUP, IPAddress, IPAddressClaim, IPAddressClaimReference,
    IPAddressClaimSpec, IPAddressSpec, IPPool, IPPoolReference, InClusterIPPool,
    InClusterIPPoolSpec, InClusterPrefixPool, InClusterPrefixPoolSpec, MAX_PRE_ALLOCATIONS,
    POOL_VERSION, ParentPool, PoolKind, PreAllocation, READY_CONDITION, REASON_ADDRESS_ALLOCATED,
    claim_status_patch, claim_status_with_ready,
};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;

use super::apimetrics::{self, RequestCounts, RequestDelta};
use super::atsize;
use super::process::{self, ProviderProcess, ProviderSpec};

/// Label on every claim a scenario creates (the canary claim has none).
pub const CLAIM_LABEL: &str = "scale.inpool.dev/claim";
/// Label on the floor's reservations, so that one request deletes them.
pub const FLOOR_LABEL: &str = "scale.inpool.dev/floor";
/// Annotation that stands in for a finalizer in the floor (same write, no cleanup needed).
const FINALIZER_STAND_IN: &str = "scale.inpool.dev/finalizer";
/// Field manager of the floor's status applies: the same as inpool's.
const MANAGER: &str = "inpool";
/// Group and kind the floor's claims name: no provider handles them.
const FLOOR_POOL_GROUP: &str = "floor.scale.inpool.dev";
const FLOOR_POOL_KIND: &str = "FloorPool";

/// The floor, in words (also written into the JSON report).
pub const FLOOR_DEFINITION: &str = "Floor: the same run with an ideal provider inside the \
harness that never reads and never waits: as soon as the create of claim i returns, it makes \
the 4 writes inpool needs to realise a claim — merge-patch the claim's metadata (with the \
resourceVersion precondition), create the IPAddressReservation, create the IPAddress (same \
owner references), server-side-apply the claim's status (Ready=True, addressRef, built by \
inpool's own code) — one after another for each claim, 16 claims at a time, while the claims \
themselves are created 16 at a time: 5 writes per claim in all, no read, no watch, no cache, \
no Event. The two finalizers (claim, IPAddress) are written as annotations of the same size, so \
that the floor's objects can be deleted without 2 more writes per claim; the API server does the \
same work for either. Time runs from the first create to the last Ready seen by the same watch.";

/// One scenario: `pools` pools of `claims_per_pool` claims each, created concurrently.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// `single` or `multi`, used in names and the report.
    pub name: String,
    pub namespace: String,
    pub pools: usize,
    pub claims_per_pool: usize,
    /// Claims created at once by the harness (and `{concurrency}` in the provider command).
    pub concurrency: usize,
    /// Longest wait for all claims to be Ready, and for the release.
    pub timeout: Duration,
    /// Before each measured phase, wait until the API server is quiet (leftover work of the
    /// previous phase is not measured). Timing runs want it; a correctness run need not.
    pub settle: bool,
    /// `Some(length)`: the pools are `InClusterPrefixPool`s, each a /48 handing out sub-prefixes
    /// of this length; `None`: `InClusterIPPool`s (see [`pool_net`]).
    pub sub_prefixes: Option<u8>,
    /// The scenarios at size, run once the claims are Ready (single pool only).
    pub at_size: atsize::Plan,
    /// `Some(n)`: the pools are `GlobalInClusterIPPool`s shared by claims in `n` namespaces
    /// (`{namespace}-00`, …; claim `i` goes to pool `i mod pools` in namespace
    /// `(i / pools) mod n`, so each pool serves every namespace), and the provider watches every
    /// namespace. `None`: pools and claims in `namespace`.
    pub shared_by_namespaces: Option<usize>,
    /// Claims the pool names in `spec.preAllocations` (one namespaced IP pool only; 0: none).
    /// They are spread over the claims and their addresses over the pool (see
    /// [`Scenario::pre_allocated`]); the claims are created in the usual order.
    pub pre_allocations: usize,
    /// `Some(_)`: one side of the carved-pools comparison (see [`Carving`]). `None`: the pools
    /// are made before the provider starts, each with its subnet in its spec ([`pool_net`]).
    pub carving: Option<Carving>,
}

/// The carved-pools comparison: namespaced `InClusterIPPool`s of one IPv4 /26
/// ([`CARVED_LENGTH`]) each, whose two sides differ only in how a pool gets its /26. On both, the
/// pools are made once the clock runs (as the claims, `concurrency` at a time) and the claims
/// are created once every pool is `Ready`: a pool's carving is part of what is measured, and no
/// claim waits on a pool that is not ready yet (which would cost it a status write and an Event
/// of its own, neither of them the carving's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carving {
    /// Pool `j`'s /26 written in its spec (`10.0.0.0/26` + `j`, see [`Scenario::net`]), with the
    /// gateway a carved pool gets (its network address + 1).
    Literal,
    /// Every pool names one `InClusterPrefixPool`, [`PARENT`] (all of [`PARENT_PREFIX`], handing
    /// out /26s, made before the provider starts), in `spec.parentPool` with 1 sub-prefix.
    FromParent,
}

/// The parent of the carved pools: its name and prefix, and the length it hands out.
pub const PARENT: &str = "parent";
pub const PARENT_PREFIX: &str = "10.0.0.0/8";
pub const CARVED_LENGTH: u8 = 26;
/// Addresses a claim may get in a /26: 64 less the network, broadcast and gateway addresses.
const CARVED_HOSTS: usize = 61;

impl Scenario {
    pub fn total(&self) -> usize {
        self.pools * self.claims_per_pool
    }

    /// The kind of the scenario's pools, as its claims name it.
    fn pool_kind(&self) -> &'static str {
        match (self.sub_prefixes, self.shared_by_namespaces) {
            (Some(_), _) => PoolKind::InClusterPrefix.name(),
            (None, Some(_)) => PoolKind::Global.name(),
            (None, None) => PoolKind::InCluster.name(),
        }
    }

    /// The namespaces the scenario's claims are in.
    pub fn claim_namespaces(&self) -> Vec<String> {
        match self.shared_by_namespaces {
            None => vec![self.namespace.clone()],
            Some(n) => (0..n)
                .map(|k| format!("{}-{k:02}", self.namespace))
                .collect(),
        }
    }

    /// The namespace the provider is limited to: `""` (every namespace) when the claims are
    /// spread over namespaces.
    fn provider_namespace(&self) -> &str {
        match self.shared_by_namespaces {
            None => &self.namespace,
            Some(_) => "",
        }
    }

    /// `1 pool`, `10 pools`, `200 global pools`, `1000 pools (carved)`.
    fn pools_text(&self) -> String {
        match (self.shared_by_namespaces, self.carving) {
            (Some(_), _) => format!("{} global pools", self.pools),
            (None, Some(Carving::Literal)) => {
                format!("{} (/{CARVED_LENGTH} in spec)", pools_text(self.pools))
            }
            (None, Some(Carving::FromParent)) => format!("{} (carved)", pools_text(self.pools)),
            (None, None) => pools_text(self.pools),
        }
    }

    /// What pool `j` hands out from: its subnet, for a prefix pool the /48 `fd01:j::/48`, and
    /// for the carved-pools comparison the `j`-th /26 of `10.0.0.0/8` (what a pool carved from
    /// the parent gets is read from its status instead: [`carved_nets`]).
    fn net(&self, j: usize) -> IpNet {
        match (self.sub_prefixes, self.carving) {
            (Some(_), _) => IpNet::new(
                IpAddr::V6(Ipv6Addr::new(0xfd01, j as u16, 0, 0, 0, 0, 0, 0)),
                48,
            )
            .expect("valid /48"),
            (None, Some(_)) => IpNet::new(
                IpAddr::V4(Ipv4Addr::from(
                    u32::from(Ipv4Addr::new(10, 0, 0, 0)) + ((j as u32) << (32 - CARVED_LENGTH)),
                )),
                CARVED_LENGTH,
            )
            .expect("valid /26"),
            (None, None) => pool_net(j, self.pools, self.claims_per_pool),
        }
    }

    /// The claims the pool pre-allocates, by index in creation order, with their addresses:
    /// every `(total / pre_allocations)`-th claim, and addresses spaced evenly across the pool
    /// (never the lowest ones only), so that first-fit claims and pre-allocated ones interleave
    /// in the pool as they would in a real one.
    pub fn pre_allocated(&self) -> Vec<(usize, IpAddr)> {
        let (total, n) = (self.total(), self.pre_allocations);
        if n == 0 {
            return Vec::new();
        }
        let net = self.net(0);
        let hosts = match net {
            IpNet::V4(v4) => (1usize << (32 - v4.prefix_len())) - 2,
            IpNet::V6(_) => 1 << 16,
        };
        let spacing = (hosts / n).max(1);
        (0..n)
            .map(|k| (k * total / n, nth_host(&net, k * spacing + spacing / 2)))
            .collect()
    }

    /// Why the scenario cannot run as written, if it cannot.
    fn refuse(&self) -> Option<String> {
        if self.carving.is_some() {
            let namespaced_ip_pools = self.sub_prefixes.is_none()
                && self.shared_by_namespaces.is_none()
                && self.pre_allocations == 0;
            if !namespaced_ip_pools {
                return Some(
                    "carved pools are namespaced IP pools, without pre-allocations".into(),
                );
            }
            // The literal /26s are those of 10.0.0.0/8, as the carved ones.
            if self.pools > 1 << (CARVED_LENGTH - 8) || self.claims_per_pool > CARVED_HOSTS {
                return Some(format!(
                    "carved pools: at most {} pools of at most {CARVED_HOSTS} claims (a /{CARVED_LENGTH} each)",
                    1 << (CARVED_LENGTH - 8)
                ));
            }
        }
        let one_ip_pool =
            self.pools == 1 && self.sub_prefixes.is_none() && self.shared_by_namespaces.is_none();
        if self.pre_allocations > 0 && !one_ip_pool {
            return Some("pre-allocations are for the single-pool IP scenario only".into());
        }
        if self.pre_allocations > self.total().min(MAX_PRE_ALLOCATIONS) {
            return Some(format!(
                "{} pre-allocations: at most one per claim and {MAX_PRE_ALLOCATIONS} per pool",
                self.pre_allocations
            ));
        }
        None
    }

    /// Creates pool `j` of the scenario.
    async fn create_pool(&self, client: &Client, ns: &str, j: usize) -> anyhow::Result<IpNet> {
        self.post_pool(client, ns, j)
            .await
            .with_context(|| format!("creating pool {}", pool_name(j)))
    }

    /// Creates pool `j` of the scenario: the API's answer, to retry on.
    async fn post_pool(&self, client: &Client, ns: &str, j: usize) -> Result<IpNet, kube::Error> {
        let net = self.net(j);
        let created = match self.sub_prefixes {
            Some(length) => {
                let mut spec = InClusterPrefixPoolSpec::new([net.to_string()]);
                spec.allocation_prefix_length = Some(i32::from(length));
                Api::<InClusterPrefixPool>::namespaced(client.clone(), ns)
                    .create(
                        &PostParams::default(),
                        &InClusterPrefixPool::new(&pool_name(j), spec),
                    )
                    .await
                    .map(drop)
            }
            None if self.shared_by_namespaces.is_some() => {
                Api::<GlobalInClusterIPPool>::all(client.clone())
                    .create(
                        &PostParams::default(),
                        &GlobalInClusterIPPool::new(
                            &pool_name(j),
                            GlobalInClusterIPPoolSpec(pool_object(&pool_name(j), &net).spec),
                        ),
                    )
                    .await
                    .map(drop)
            }
            None if self.carving == Some(Carving::FromParent) => {
                let mut spec = InClusterIPPoolSpec::new(Vec::<String>::new(), 0);
                spec.parent_pool = Some(ParentPool {
                    pool_ref: IPPoolReference::new(
                        IPAM_GROUP,
                        PoolKind::InClusterPrefix.name(),
                        PARENT,
                    ),
                    sub_prefixes: Some(1),
                    claim_namespace: String::new(),
                });
                Api::<InClusterIPPool>::namespaced(client.clone(), ns)
                    .create(
                        &PostParams::default(),
                        &InClusterIPPool::new(&pool_name(j), spec),
                    )
                    .await
                    .map(drop)
            }
            None => {
                let mut pool = pool_object(&pool_name(j), &net);
                if self.carving == Some(Carving::Literal) {
                    pool.spec.gateway = Some(nth_host(&net, 0).to_string());
                }
                if self.pre_allocations > 0 {
                    pool.spec.pre_allocations = Some(
                        self.pre_allocated()
                            .into_iter()
                            .map(|(i, ip)| PreAllocation::new(self.claim(i).0, ip.to_string()))
                            .collect(),
                    );
                }
                Api::<InClusterIPPool>::namespaced(client.clone(), ns)
                    .create(&PostParams::default(), &pool)
                    .await
                    .map(drop)
            }
        };
        created?;
        Ok(net)
    }

    /// Claim `i` (in creation order): name, pool index and namespace (an index into
    /// [`Scenario::claim_namespaces`]). Pools are interleaved; names are unique across namespaces.
    fn claim(&self, i: usize) -> (String, usize, usize) {
        if self.pools == 1 {
            (format!("c-{i:06}"), 0, 0)
        } else {
            let pool = i % self.pools;
            let namespace = self
                .shared_by_namespaces
                .map_or(0, |n| (i / self.pools) % n.max(1));
            (
                format!("c-p{pool:03}-{:06}", i / self.pools),
                pool,
                namespace,
            )
        }
    }
}

/// Name and subnet of pool `j` of a scenario with `per_pool` claims per pool: IPv4 `10.j.0.0/16`
/// when it fits, else IPv6 `fd00:0:0:j::/64`.
pub fn pool_net(j: usize, pools: usize, per_pool: usize) -> IpNet {
    if pools <= 250 && per_pool <= 65_000 {
        IpNet::new(IpAddr::V4(Ipv4Addr::new(10, j as u8, 0, 0)), 16).expect("valid /16")
    } else {
        IpNet::new(
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, j as u16, 0, 0, 0, 0)),
            64,
        )
        .expect("valid /64")
    }
}

/// `1 pool`, `10 pools`.
pub fn pools_text(pools: usize) -> String {
    if pools == 1 {
        "1 pool".into()
    } else {
        format!("{pools} pools")
    }
}

pub(crate) fn pool_name(j: usize) -> String {
    format!("pool-{j:03}")
}

/// The `i`-th host of a subnet (`network + 1 + i`): what a lowest-free allocator hands out.
fn nth_host(net: &IpNet, i: usize) -> IpAddr {
    match net.network() {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) + 1 + i as u32)),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) + 1 + i as u128)),
    }
}

/// inpool's reservation naming (`10-0-0-5.ns.default`).
fn reservation_name(ip: IpAddr, namespace: &str) -> String {
    let address = match ip {
        IpAddr::V4(v4) => v4.octets().map(|o| o.to_string()).join("-"),
        IpAddr::V6(v6) => v6.segments().map(|s| format!("{s:04x}")).join("-"),
    };
    format!("{address}.ns.{namespace}")
}

// ---------------------------------------------------------------------------------------------
// Results

/// Claim-to-Ready latency, from the moment the harness's create returned to the moment its watch
/// saw `Ready=True` with an `addressRef`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub(crate) fn of(mut samples: Vec<Duration>) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort();
        let pick = |q: f64| {
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            samples[rank - 1].as_secs_f64() * 1000.0
        };
        Latency {
            p50_ms: pick(0.50),
            p90_ms: pick(0.90),
            p99_ms: pick(0.99),
            max_ms: pick(1.0),
        }
    }
}

/// What the run found at the end.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Correctness {
    pub ok: bool,
    pub claims: usize,
    pub claims_ready: usize,
    pub addresses: usize,
    pub distinct_addresses: usize,
    /// `IPAddressReservation`s of the scenario's namespace (inpool only).
    pub reservations: Option<usize>,
    /// `IPAddress`es whose claim does not exist.
    pub orphan_addresses: usize,
    /// Pre-allocated claims that hold exactly their entry's address.
    pub pre_allocations_honoured: usize,
    /// The carved-pools comparison: the pools whose /26 overlaps no other pool's and, when
    /// carved, lies inside the parent and is held from it by exactly one `IPAddress` of the
    /// parent (`None` for other scenarios).
    pub pool_subnets_apart: Option<usize>,
    /// After deleting every claim: what was left of them.
    pub left_after_release: Option<Leftovers>,
    /// The first problems found (empty when `ok`).
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Leftovers {
    pub claims: usize,
    pub addresses: usize,
    pub reservations: usize,
}

/// Release: every claim of the scenario deleted at once (one `deletecollection`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Release {
    pub seconds: f64,
    pub claims_per_second: f64,
    pub writes_per_claim: f64,
    pub writes_per_claim_by_resource: BTreeMap<String, f64>,
    /// Milliseconds per claim the API server spent serving the writes of each kind (the
    /// harness's deletes included, under `claims`).
    pub write_ms_per_claim_by_resource: BTreeMap<String, f64>,
}

/// One measured run: the floor, or a provider on one scenario.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Run {
    pub label: String,
    /// `floor` or the provider's name.
    pub provider: String,
    pub scenario: String,
    pub pools: usize,
    pub claims: usize,
    pub concurrency: usize,
    /// From the first create to the last `Ready=True` seen.
    pub seconds_to_all_ready: f64,
    /// From the first create until every pool's `status.ipAddresses.used` counted its claims
    /// (inpool only; `None` if not within [`STATUS_WAIT`] beyond its pacing's bound). The
    /// writes, CPU and memory of the run are counted up to then, so that pool status writes the
    /// pacing held back are counted too.
    pub seconds_to_pool_status: Option<f64>,
    /// From the first create until every pool of the scenario was `Ready=True` (the
    /// carved-pools comparison only, whose pools are made once the clock runs).
    pub seconds_to_pools_ready: Option<f64>,
    /// How long the harness took to create all claims (and the pools made once the clock runs).
    pub seconds_to_create: f64,
    pub claims_per_second: f64,
    /// This run's claims/s against the floor's claims/s (1.0 = as fast as the floor; 2.0 = twice
    /// as slow).
    pub ratio_to_floor: Option<f64>,
    pub latency: Latency,
    /// Writes per claim the API server counted, not counting the harness's claim creates.
    pub writes_per_claim: f64,
    pub writes_per_claim_by_resource: BTreeMap<String, f64>,
    /// Milliseconds per claim the API server spent serving the writes of each kind (the
    /// harness's claim creates included, under `claims`): what each kind of write costs it.
    pub write_ms_per_claim_by_resource: BTreeMap<String, f64>,
    /// Writes per claim the API server refused (4xx: conflicts, AlreadyExists).
    pub refused_writes_per_claim: f64,
    /// `GET`s per claim (reads that bypass a cache).
    pub gets_per_claim: f64,
    /// Every request series that changed during the run.
    pub requests: Vec<RequestDelta>,
    /// Reconciles per claim, from the provider's own metrics (inpool only).
    pub reconciles_per_claim: Option<f64>,
    pub reconcile_errors: Option<f64>,
    /// Requests the provider was answered `429` (its `rest_client_requests_total{code="429"}`:
    /// API Priority and Fairness, with `--priority-level-shares`), inpool only.
    pub throttled_requests: Option<f64>,
    /// Provider CPU seconds between the first create and the last Ready.
    pub provider_cpu_seconds: Option<f64>,
    /// Provider CPU seconds between the first create and every pool's status counting its
    /// claims (inpool only: `seconds_to_pool_status`): the claim path and the status writes the
    /// pacing held back.
    pub provider_cpu_seconds_to_pool_status: Option<f64>,
    /// Provider resident memory once ready, before the first claim is created (its base: the
    /// canary's claim and the pools only), MiB.
    pub provider_base_rss_mib: Option<f64>,
    /// Provider peak resident memory (VmHWM) at the last Ready, MiB.
    pub provider_peak_rss_mib: Option<f64>,
    /// Provider resident memory at the last Ready, MiB.
    pub provider_rss_mib: Option<f64>,
    /// Provider peak resident memory after the release phase too, MiB.
    pub provider_peak_rss_mib_with_release: Option<f64>,
    /// Provider CPU seconds from the first create to the end of the release phase.
    pub provider_cpu_seconds_with_release: Option<f64>,
    /// CPU seconds of the control plane (etcd, API server, controller manager) in the same span.
    pub control_plane_cpu_seconds: Option<f64>,
    /// The control plane's peak memory since it started, at the last Ready (earlier phases of the
    /// run included: a high-water mark does not go down).
    pub control_plane_peaks: Option<process::PlanePeaks>,
    /// The same after the release phase.
    pub control_plane_peaks_with_release: Option<process::PlanePeaks>,
    /// CPU seconds of the harness itself in the same span (it shares the machine).
    pub harness_cpu_seconds: Option<f64>,
    /// Load average (1 min) before and after.
    pub load_before: Option<f64>,
    pub load_after: Option<f64>,
    /// Requests the harness had to retry (429, 5xx, transport errors).
    pub harness_retries: u64,
    pub release: Option<Release>,
    pub correctness: Option<Correctness>,
    pub provider_command: Option<String>,
    /// The scenarios at size (restart, idle, trickle), when run.
    pub at_size: Option<atsize::AtSize>,
}

// ---------------------------------------------------------------------------------------------
// Ready tracker

#[derive(Default)]
struct TrackState {
    synced: bool,
    /// First time each claim was seen Ready=True with an addressRef.
    ready: HashMap<String, Instant>,
    /// Last Ready reason seen per claim that is not Ready (for a timeout report).
    waiting: HashMap<String, String>,
    /// When each claim's deletion was seen.
    deleted: HashMap<String, Instant>,
    watch_errors: u64,
}

/// Longest wait for the initial list of a watch of the harness.
const LIST_TIMEOUT: Duration = Duration::from_secs(600);

/// Waits until a tracker's watch of `what`s has listed (`synced`), [`LIST_TIMEOUT`] at most.
async fn until_listed(what: &str, synced: impl Fn() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + LIST_TIMEOUT;
    while !synced() {
        if Instant::now() > deadline {
            bail!("the {what} watch did not list within {LIST_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Watches the labelled claims of a namespace and records when each becomes Ready.
pub struct ReadyTracker {
    state: Arc<Mutex<TrackState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ReadyTracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `IPAddress` a realised claim names: `status.addressRef` set, and `Ready=True` unless the
/// claim has no `Ready` condition at all (the reference provider sets none; inpool and the floor
/// set both in one write, so for them it is the moment `Ready` turns `True`).
pub(crate) fn ready_ref(claim: &IPAddressClaim) -> Option<&str> {
    let ready = claim
        .conditions()
        .iter()
        .find(|c| c.type_ == READY_CONDITION)
        .is_none_or(|c| c.status == "True");
    let address_ref = claim.address_ref().filter(|n| !n.is_empty());
    address_ref.filter(|_| ready)
}

fn ready_reason(claim: &IPAddressClaim) -> String {
    claim
        .conditions()
        .iter()
        .find(|c| c.type_ == READY_CONDITION)
        .map(|c| format!("{}/{}", c.status, c.reason))
        .unwrap_or_else(|| "no Ready condition".into())
}

impl ReadyTracker {
    /// Starts the watch of the scenario's claims and waits for its initial list.
    pub async fn start(client: &Client, namespace: &str) -> anyhow::Result<ReadyTracker> {
        Self::start_labelled(client, namespace, &format!("{CLAIM_LABEL}=true")).await
    }

    /// Starts the watch of the claims matching a label selector and waits for its initial list.
    pub async fn start_labelled(
        client: &Client,
        namespace: &str,
        selector: &str,
    ) -> anyhow::Result<ReadyTracker> {
        Self::watch(Api::namespaced(client.clone(), namespace), selector).await
    }

    /// Starts the watch of the scenario's claims, in every namespace they are in.
    async fn start_for(client: &Client, scenario: &Scenario) -> anyhow::Result<ReadyTracker> {
        let selector = format!("{CLAIM_LABEL}=true");
        match scenario.shared_by_namespaces {
            None => Self::start_labelled(client, &scenario.namespace, &selector).await,
            Some(_) => Self::watch(Api::all(client.clone()), &selector).await,
        }
    }

    /// Starts a watch of the claims `api` reaches (one namespace or all) that match a label
    /// selector, and waits for its initial list.
    async fn watch(api: Api<IPAddressClaim>, selector: &str) -> anyhow::Result<ReadyTracker> {
        let state = Arc::new(Mutex::new(TrackState::default()));
        let task = {
            let state = state.clone();
            let config = watcher::Config::default().labels(selector);
            tokio::spawn(async move {
                let mut events = watcher::watcher(api, config).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    let now = Instant::now();
                    let mut state = state.lock().expect("tracker lock");
                    match event {
                        Ok(Event::Apply(claim)) | Ok(Event::InitApply(claim)) => {
                            let name = claim.name_any();
                            if ready_ref(&claim).is_some() {
                                state.waiting.remove(&name);
                                state.ready.entry(name).or_insert(now);
                            } else if !state.ready.contains_key(&name) {
                                state.waiting.insert(name, ready_reason(&claim));
                            }
                        }
                        Ok(Event::Delete(claim)) => {
                            state.deleted.insert(claim.name_any(), now);
                        }
                        Ok(Event::InitDone) => state.synced = true,
                        Ok(_) => {}
                        Err(_) => state.watch_errors += 1,
                    }
                }
            })
        };
        let tracker = ReadyTracker { state, task };
        // The list of 100,000 claims takes a minute or more on a loaded machine.
        until_listed("claim", || {
            tracker.state.lock().expect("tracker lock").synced
        })
        .await?;
        Ok(tracker)
    }

    pub fn ready_count(&self) -> usize {
        self.state.lock().expect("tracker lock").ready.len()
    }

    pub fn deleted_count(&self) -> usize {
        self.state.lock().expect("tracker lock").deleted.len()
    }

    pub fn last_deleted(&self) -> Option<Instant> {
        self.state
            .lock()
            .expect("tracker lock")
            .deleted
            .values()
            .max()
            .copied()
    }

    pub fn ready_times(&self) -> HashMap<String, Instant> {
        self.state.lock().expect("tracker lock").ready.clone()
    }

    /// Waits until `expected` claims are Ready, printing progress; on timeout, says why not.
    pub async fn wait_all(
        &self,
        t0: Instant,
        expected: usize,
        timeout: Duration,
        what: &str,
        alive: &mut dyn FnMut() -> Option<String>,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        let mut last_print = Instant::now();
        loop {
            let ready = self.ready_count();
            if ready >= expected {
                return Ok(());
            }
            if let Some(why) = alive() {
                bail!("{what}: {ready}/{expected} claims Ready, then {why}");
            }
            if start.elapsed() > timeout {
                let state = self.state.lock().expect("tracker lock");
                let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
                for reason in state.waiting.values() {
                    *reasons.entry(reason.as_str()).or_default() += 1;
                }
                bail!(
                    "{what}: only {ready}/{expected} claims Ready after {timeout:?}; not ready by \
                     reason: {reasons:?}; watch errors: {}",
                    state.watch_errors
                );
            }
            if last_print.elapsed() > Duration::from_secs(10) {
                eprintln!(
                    "  {what}: {ready}/{expected} Ready {:.0} s after the first create",
                    t0.elapsed().as_secs_f64()
                );
                last_print = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Watches the scenario's `InClusterIPPool`s (`pool-…`) of a namespace and records when each is
/// first `Ready=True`: for a pool carved from a parent, once it holds its sub-prefix.
pub struct PoolTracker {
    state: Arc<Mutex<TrackState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PoolTracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn pool_ready(pool: &InClusterIPPool) -> bool {
    pool.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == READY_CONDITION))
        .is_some_and(|c| c.status == "True")
}

impl PoolTracker {
    /// Starts the watch and waits for its initial list.
    async fn start(client: &Client, namespace: &str) -> anyhow::Result<PoolTracker> {
        let api: Api<InClusterIPPool> = Api::namespaced(client.clone(), namespace);
        let state = Arc::new(Mutex::new(TrackState::default()));
        let task = {
            let state = state.clone();
            tokio::spawn(async move {
                let config = watcher::Config::default();
                let mut events = watcher::watcher(api, config).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    let now = Instant::now();
                    let mut state = state.lock().expect("tracker lock");
                    match event {
                        Ok(Event::Apply(pool)) | Ok(Event::InitApply(pool)) => {
                            let name = pool.name_any();
                            if name.starts_with("pool-") && pool_ready(&pool) {
                                state.ready.entry(name).or_insert(now);
                            }
                        }
                        Ok(Event::InitDone) => state.synced = true,
                        Ok(_) => {}
                        Err(_) => state.watch_errors += 1,
                    }
                }
            })
        };
        let tracker = PoolTracker { state, task };
        until_listed("pool", || {
            tracker.state.lock().expect("tracker lock").synced
        })
        .await?;
        Ok(tracker)
    }

    /// When the last pool was first seen Ready (now, if none was).
    fn last_ready(&self) -> Instant {
        let state = self.state.lock().expect("tracker lock");
        state
            .ready
            .values()
            .max()
            .copied()
            .unwrap_or_else(Instant::now)
    }

    /// Waits until `expected` pools are Ready, printing progress.
    async fn wait_all(
        &self,
        t0: Instant,
        expected: usize,
        timeout: Duration,
        what: &str,
        alive: &mut dyn FnMut() -> Option<String>,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        let mut last_print = Instant::now();
        loop {
            let (ready, errors) = {
                let state = self.state.lock().expect("tracker lock");
                (state.ready.len(), state.watch_errors)
            };
            if ready >= expected {
                return Ok(());
            }
            if let Some(why) = alive() {
                bail!("{what}: {ready}/{expected} pools Ready, then {why}");
            }
            if start.elapsed() > timeout {
                bail!(
                    "{what}: only {ready}/{expected} pools Ready after {timeout:?}; watch errors: {errors}"
                );
            }
            if last_print.elapsed() > Duration::from_secs(10) {
                eprintln!(
                    "  {what}: {ready}/{expected} pools Ready {:.0} s after the first create",
                    t0.elapsed().as_secs_f64()
                );
                last_print = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Requests with retries

/// Counts the harness's retried requests.
#[derive(Clone, Default)]
pub struct Retries(Arc<std::sync::atomic::AtomicU64>);

impl Retries {
    fn add(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => matches!(status.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

fn already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}

/// Runs `f` until it succeeds or fails for good (10 attempts on transient errors). A 409 after a
/// retry is reported as `Ok(None)`: the earlier attempt went through.
pub async fn with_retries<T, F, Fut>(
    retries: &Retries,
    what: &str,
    mut f: F,
) -> anyhow::Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 0u32;
    loop {
        match f().await {
            Ok(value) => return Ok(Some(value)),
            Err(e) if attempt > 0 && already_exists(&e) => return Ok(None),
            Err(e) if transient(&e) && attempt < 10 => {
                attempt += 1;
                retries.add();
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
            }
            Err(e) => return Err(anyhow::Error::new(e).context(what.to_string())),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Objects

pub(crate) async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name} (left over from an earlier run?)"))?;
    Ok(())
}

pub(crate) async fn delete_namespace(
    client: &Client,
    name: &str,
    wait: Option<Duration>,
) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    if let Some(timeout) = wait {
        let deadline = Instant::now() + timeout;
        while api.get_opt(name).await?.is_some() {
            if Instant::now() > deadline {
                bail!("namespace {name} still exists after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

/// Creates the carved pools' parent in `ns`: [`PARENT_PREFIX`] handing out /[`CARVED_LENGTH`]s.
async fn create_parent(client: &Client, ns: &str) -> anyhow::Result<()> {
    let mut spec = InClusterPrefixPoolSpec::new([PARENT_PREFIX]);
    spec.allocation_prefix_length = Some(i32::from(CARVED_LENGTH));
    Api::<InClusterPrefixPool>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &InClusterPrefixPool::new(PARENT, spec),
        )
        .await
        .context("creating the parent pool")?;
    Ok(())
}

/// Creates the scenario's pools, `concurrency` at a time (as the claims).
async fn make_pools(client: &Client, scenario: &Scenario, retries: &Retries) -> anyhow::Result<()> {
    let ns = scenario.namespace.as_str();
    futures::stream::iter(0..scenario.pools)
        .map(|j| async move {
            with_retries(retries, &format!("creating pool {}", pool_name(j)), || {
                scenario.post_pool(client, ns, j)
            })
            .await
        })
        .buffer_unordered(scenario.concurrency.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(())
}

/// The sub-prefix each carved pool holds (`status.carvedPrefixes`), by pool index.
async fn carved_nets(client: &Client, scenario: &Scenario) -> anyhow::Result<Vec<IpNet>> {
    let api: Api<InClusterIPPool> = Api::namespaced(client.clone(), &scenario.namespace);
    let pools = list_paged(&api, &ListParams::default()).await?;
    let by_name: HashMap<String, &InClusterIPPool> =
        pools.iter().map(|p| (p.name_any(), p)).collect();
    (0..scenario.pools)
        .map(|j| {
            let name = pool_name(j);
            let carved = by_name
                .get(&name)
                .and_then(|p| p.status.as_ref()?.carved_prefixes.as_ref()?.first());
            let Some(carved) = carved else {
                bail!("pool {name} is Ready with no carved prefix in its status");
            };
            carved
                .prefix
                .parse::<IpNet>()
                .with_context(|| format!("pool {name} carved `{}`", carved.prefix))
        })
        .collect()
}

/// Creates an `InClusterIPPool` of all of `net` in `ns`.
pub(crate) async fn create_ip_pool(
    client: &Client,
    ns: &str,
    name: &str,
    net: &IpNet,
) -> anyhow::Result<()> {
    Api::<InClusterIPPool>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pool_object(name, net))
        .await
        .with_context(|| format!("creating pool {name}"))?;
    Ok(())
}

fn pool_object(name: &str, net: &IpNet) -> InClusterIPPool {
    InClusterIPPool::new(
        name,
        InClusterIPPoolSpec::new([net.to_string()], i32::from(net.prefix_len())),
    )
}

pub fn claim_object(
    name: &str,
    group: &str,
    kind: &str,
    pool: &str,
    labelled: bool,
) -> IPAddressClaim {
    let mut claim = IPAddressClaim::new(
        name,
        IPAddressClaimSpec {
            cluster_name: None,
            pool_ref: IPPoolReference::new(group, kind, pool),
        },
    );
    if labelled {
        claim.metadata.labels = Some([(CLAIM_LABEL.to_string(), "true".to_string())].into());
    }
    claim
}

/// Creates `total` claims, `concurrency` at a time, each in the namespace it names or else in
/// `api`'s; `created(i, claim, at)` is called as each create returns. Returns when all are
/// created.
pub(crate) async fn create_claims(
    api: &Api<IPAddressClaim>,
    total: usize,
    concurrency: usize,
    retries: &Retries,
    object: impl Fn(usize) -> IPAddressClaim,
    mut created: impl FnMut(usize, IPAddressClaim, Instant),
) -> anyhow::Result<()> {
    let object = &object;
    let mut stream = futures::stream::iter(0..total)
        .map(|i| async move {
            let claim = object(i);
            let name = claim.name_any();
            let api = match claim.metadata.namespace.as_deref() {
                Some(ns) => Api::namespaced(api.clone().into_client(), ns),
                None => api.clone(),
            };
            let api = &api;
            let pp = PostParams::default();
            let result = with_retries(retries, &format!("creating claim {name}"), || {
                api.create(&pp, &claim)
            })
            .await;
            let result = match result {
                Ok(Some(claim)) => Ok(claim),
                Ok(None) => api.get(&name).await.map_err(anyhow::Error::new),
                Err(e) => Err(e),
            };
            (i, result, Instant::now())
        })
        .buffer_unordered(concurrency.max(1));
    while let Some((i, result, at)) = stream.next().await {
        created(i, result?, at);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Snapshots

struct Snapshot {
    at: Instant,
    requests: RequestCounts,
    /// The seconds the API server spent serving the requests of each key.
    seconds: RequestCounts,
    provider: Option<process::ProcStat>,
    plane_cpu: Option<f64>,
    harness_cpu: Option<f64>,
}

async fn snapshot(
    client: &Client,
    provider: Option<u32>,
    plane: Option<u32>,
) -> anyhow::Result<Snapshot> {
    let (requests, seconds) = apimetrics::scrape_with_seconds(client).await?;
    Ok(Snapshot {
        at: Instant::now(),
        requests,
        seconds,
        provider: provider.and_then(process::proc_stat),
        plane_cpu: plane.and_then(process::tree_cpu_seconds),
        harness_cpu: process::proc_stat(std::process::id()).map(|s| s.cpu_seconds),
    })
}

pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn per_claim(map: BTreeMap<String, f64>, claims: usize) -> BTreeMap<String, f64> {
    map.into_iter()
        .map(|(k, v)| (k, v / claims.max(1) as f64))
        .collect()
}

/// Fills the timing and request figures of `run`.
#[allow(clippy::too_many_arguments)]
fn measure(
    run: &mut Run,
    t0: Instant,
    created: &[Option<Instant>],
    names: &[String],
    ready: &HashMap<String, Instant>,
    before: &Snapshot,
    after: &Snapshot,
    created_done: Instant,
    harness_pools: usize,
) {
    let claims = names.len();
    let last_ready = names
        .iter()
        .filter_map(|n| ready.get(n))
        .max()
        .copied()
        .unwrap_or(after.at);
    run.seconds_to_all_ready = last_ready.saturating_duration_since(t0).as_secs_f64();
    run.seconds_to_create = created_done.saturating_duration_since(t0).as_secs_f64();
    run.claims_per_second = claims as f64 / run.seconds_to_all_ready.max(1e-9);
    let samples = names
        .iter()
        .zip(created)
        .filter_map(|(n, c)| Some(ready.get(n)?.saturating_duration_since((*c)?)))
        .collect();
    run.latency = Latency::of(samples);

    let delta = after.requests.since(&before.requests);
    // The harness's own claim creates are not the provider's writes.
    let harness_creates = delta
        .count("POST", "ipaddressclaims", "")
        .min(claims as f64);
    // Nor are its creates of the pools it made once the clock ran.
    let harness_pool_creates = delta
        .count("POST", "inclusterippools", "")
        .min(harness_pools as f64);
    let mut buckets = delta.writes_by_bucket();
    for (bucket, harness) in [("claims", harness_creates), ("pools", harness_pool_creates)] {
        if let Some(c) = buckets.get_mut(bucket) {
            *c -= harness;
            if *c <= 0.0 {
                buckets.remove(bucket);
            }
        }
    }
    run.writes_per_claim =
        (delta.writes() - harness_creates - harness_pool_creates) / claims.max(1) as f64;
    run.writes_per_claim_by_resource = per_claim(buckets, claims);
    run.write_ms_per_claim_by_resource = per_claim(
        after
            .seconds
            .since(&before.seconds)
            .writes_by_bucket()
            .into_iter()
            .map(|(k, v)| (k, v * 1000.0))
            .collect(),
        claims,
    );
    run.refused_writes_per_claim = delta.refused_writes() / claims.max(1) as f64;
    run.gets_per_claim = delta.verb("GET") / claims.max(1) as f64;
    run.requests = delta.deltas();
    run.control_plane_cpu_seconds = after.plane_cpu.zip(before.plane_cpu).map(|(a, b)| a - b);
    run.harness_cpu_seconds = after
        .harness_cpu
        .zip(before.harness_cpu)
        .map(|(a, b)| a - b);
}

// ---------------------------------------------------------------------------------------------
// The floor

/// The floor: see [`FLOOR_DEFINITION`]. Runs in its own namespace (deleted afterwards) with no
/// provider running.
pub async fn run_floor(
    client: &Client,
    plane_pid: Option<u32>,
    claims: usize,
    concurrency: usize,
    timeout: Duration,
) -> anyhow::Result<Run> {
    let ns = "scale-floor";
    create_namespace(client, ns).await?;
    let net = pool_net(0, 1, claims);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), ns);
    let pool = pools
        .create(&PostParams::default(), &pool_object("floor", &net))
        .await
        .context("creating the floor's pool object")?;
    let pool_uid = pool.uid().unwrap_or_default();

    let claims_api: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), ns);
    let reservations: Api<IPAddressReservation> = Api::all(client.clone());
    let tracker = ReadyTracker::start(client, ns).await?;
    wait_quiet(client, "floor").await?;
    let retries = Retries::default();
    let names: Vec<String> = (0..claims).map(|i| format!("c-{i:06}")).collect();
    let mut created: Vec<Option<Instant>> = vec![None; claims];
    let load_before = load_average();
    let before = snapshot(client, None, plane_pid).await?;
    eprintln!("floor: {claims} claims, concurrency {concurrency} + {concurrency}");

    let t0 = Instant::now();
    let (tx, rx) = futures::channel::mpsc::unbounded::<(usize, IPAddressClaim)>();
    let creating = {
        let names = &names;
        let created = &mut created;
        let retries = &retries;
        let claims_api = &claims_api;
        async move {
            let result = create_claims(
                claims_api,
                claims,
                concurrency,
                retries,
                |i| claim_object(&names[i], FLOOR_POOL_GROUP, FLOOR_POOL_KIND, "floor", true),
                |i, claim, at| {
                    created[i] = Some(at);
                    let _ = tx.unbounded_send((i, claim));
                },
            )
            .await;
            drop(tx);
            (result, Instant::now())
        }
    };
    let providing = rx
        .map(|(i, claim)| {
            let (claims_api, addresses, reservations, retries, net, pool_uid) = (
                &claims_api,
                &addresses,
                &reservations,
                &retries,
                &net,
                &pool_uid,
            );
            async move {
                ideal_realise(
                    claims_api,
                    addresses,
                    reservations,
                    retries,
                    ns,
                    net,
                    pool_uid,
                    i,
                    &claim,
                )
                .await
            }
        })
        .buffer_unordered(concurrency.max(1))
        .fold(
            Ok(()),
            |acc: anyhow::Result<()>, r| async move { acc.and(r) },
        );
    let ((created_result, created_done), provided) = futures::join!(creating, providing);
    created_result?;
    provided?;
    tracker
        .wait_all(t0, claims, timeout, "floor", &mut || None)
        .await?;
    let after = snapshot(client, None, plane_pid).await?;

    let mut run = Run {
        label: format!("floor, 1 pool × {claims}"),
        provider: "floor".into(),
        scenario: "floor".into(),
        pools: 1,
        claims,
        concurrency,
        load_before,
        load_after: load_average(),
        ..Default::default()
    };
    let ready = tracker.ready_times();
    measure(
        &mut run,
        t0,
        &created,
        &names,
        &ready,
        &before,
        &after,
        created_done,
        0,
    );
    run.harness_retries = retries.get();
    drop(tracker);

    eprintln!(
        "floor: {:.1} s, {:.0} claims/s; cleaning up (not timed)",
        run.seconds_to_all_ready, run.claims_per_second
    );
    cleanup_floor(client, ns, claims).await?;
    Ok(run)
}

/// The four writes of one realised claim, as inpool makes them, without reading anything.
#[allow(clippy::too_many_arguments)]
async fn ideal_realise(
    claims: &Api<IPAddressClaim>,
    addresses: &Api<IPAddress>,
    reservations: &Api<IPAddressReservation>,
    retries: &Retries,
    ns: &str,
    net: &IpNet,
    pool_uid: &str,
    i: usize,
    claim: &IPAddressClaim,
) -> anyhow::Result<()> {
    let name = claim.name_any();
    let ip = nth_host(net, i);

    // 1. The finalizer patch (as inpool's patch_finalizers: merge patch guarded by the
    //    resourceVersion), with the finalizer written as an annotation of the same size.
    let patch = json!({ "metadata": {
        "annotations": { FINALIZER_STAND_IN: CLAIM_FINALIZER },
        "resourceVersion": claim.resource_version(),
    }});
    let (post, merge, patch) = (
        PostParams::default(),
        PatchParams::default(),
        Patch::Merge(&patch),
    );
    with_retries(retries, "floor: claim finalizer", || {
        claims.patch(&name, &merge, &patch)
    })
    .await?;

    // 2. Reservation.
    let mut reservation = IPAddressReservation::new(
        &reservation_name(ip, ns),
        IPAddressReservationSpec {
            address: ip.to_string(),
            pool_kind: PoolKind::InCluster.name().into(),
            pool_namespace: Some(ns.into()),
            pool_name: "floor".into(),
            claim_namespace: ns.into(),
            claim_name: name.clone(),
            claim_uid: None,
            prefix_length: None,
        },
    );
    reservation.metadata.labels = Some(
        [
            (
                "app.kubernetes.io/managed-by".to_string(),
                "inpool".to_string(),
            ),
            (FLOOR_LABEL.to_string(), "true".to_string()),
        ]
        .into(),
    );
    with_retries(retries, "floor: reservation", || {
        reservations.create(&post, &reservation)
    })
    .await?;

    // 3. IPAddress, with inpool's owner references and finalizer.
    let mut address = IPAddress::new(
        &name,
        IPAddressSpec {
            address: ip.to_string(),
            claim_ref: IPAddressClaimReference { name: name.clone() },
            gateway: None,
            pool_ref: claim.spec.pool_ref.clone(),
            prefix: i32::from(net.prefix_len()),
        },
    );
    address.metadata.namespace = Some(ns.into());
    address.metadata.annotations = Some(
        [(
            FINALIZER_STAND_IN.to_string(),
            ADDRESS_FINALIZER.to_string(),
        )]
        .into(),
    );
    address.metadata.owner_references = Some(vec![
        OwnerReference {
            api_version: IPAddressClaim::api_version(&()).into_owned(),
            kind: IPAddressClaim::kind(&()).into_owned(),
            name: name.clone(),
            uid: claim.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
        OwnerReference {
            api_version: format!("{IPAM_GROUP}/{POOL_VERSION}"),
            kind: PoolKind::InCluster.name().into(),
            name: "floor".into(),
            uid: pool_uid.into(),
            controller: Some(false),
            block_owner_deletion: Some(true),
        },
    ]);
    with_retries(retries, "floor: IPAddress", || {
        addresses.create(&post, &address)
    })
    .await?;

    // 4. Status: server-side apply of Ready=True and addressRef, built by inpool's own helpers.
    let desired = DesiredCondition::new(
        READY_CONDITION,
        ConditionStatus::True,
        REASON_ADDRESS_ALLOCATED,
        format!("address {ip} allocated"),
    )
    .observed_generation(claim.metadata.generation);
    let body = claim_status_patch(&claim_status_with_ready(
        claim,
        desired,
        Some(&name),
        inpool::api::conditions::now(),
    ));
    let (apply, body) = (PatchParams::apply(MANAGER).force(), Patch::Apply(&body));
    with_retries(retries, "floor: claim status", || {
        claims.patch_status(&name, &apply, &body)
    })
    .await?;
    Ok(())
}

/// Removes the floor's objects: its reservations (one request) and its namespace, then waits
/// until the API server is quiet again (the garbage collector digests the deletions).
async fn cleanup_floor(client: &Client, ns: &str, claims: usize) -> anyhow::Result<()> {
    let started = Instant::now();
    let reservations: Api<IPAddressReservation> = Api::all(client.clone());
    let dp = DeleteParams::default();
    let lp = ListParams::default().labels(&format!("{FLOOR_LABEL}=true"));
    let retries = Retries::default();
    with_retries(&retries, "deleting the floor's reservations", || {
        reservations.delete_collection(&dp, &lp)
    })
    .await?;
    // 15 minutes, or more with more claims: at 100,000 the namespace took 1,529 s to go (a
    // claim and an `IPAddress` each, about 130 objects a second).
    let limit = Duration::from_secs(900.max(claims as u64 / 40));
    delete_namespace(client, ns, Some(limit)).await?;
    while count(&reservations, &lp).await? > 0 {
        if started.elapsed() > limit {
            bail!(
                "the floor's reservations are still there after {} s",
                limit.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "floor: cleaned up in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Waits until the API server serves fewer than `QUIET_REQUESTS` resource requests in
/// `QUIET_WINDOW` (leftover work, such as the garbage collector digesting a deletion, would
/// otherwise be measured as part of the next phase). Returns the seconds waited.
pub async fn wait_quiet(client: &Client, what: &str) -> anyhow::Result<f64> {
    const QUIET_WINDOW: Duration = Duration::from_secs(3);
    const QUIET_REQUESTS: f64 = 6.0;
    let started = Instant::now();
    let mut last = apimetrics::scrape(client).await?;
    let mut quiet_windows = 0;
    let mut last_print = Instant::now();
    loop {
        tokio::time::sleep(QUIET_WINDOW).await;
        let now = apimetrics::scrape(client).await?;
        let delta = now.since(&last);
        let busy = delta
            .0
            .iter()
            .filter(|(k, _)| !k.resource.is_empty() && k.verb != "WATCH")
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b);
        last = now;
        quiet_windows = if busy < QUIET_REQUESTS {
            quiet_windows + 1
        } else {
            0
        };
        if quiet_windows >= 2 {
            return Ok(started.elapsed().as_secs_f64());
        }
        if started.elapsed() > Duration::from_secs(600) {
            eprintln!(
                "  {what}: the API server is still busy after 600 s ({busy} requests in {QUIET_WINDOW:?}); going on"
            );
            return Ok(started.elapsed().as_secs_f64());
        }
        if last_print.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "  {what}: waiting for the API server to be quiet ({busy} requests in the last {QUIET_WINDOW:?})"
            );
            last_print = Instant::now();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A provider on a scenario

/// Runs `scenario` against a fresh provider process: create pools and a canary claim, start the
/// provider, wait until it realised the canary, then create the claims, wait for all Ready,
/// check, release everything and check again.
pub async fn run_scenario(
    client: &Client,
    kubeconfig: &Path,
    plane_pid: Option<u32>,
    provider: &ProviderSpec,
    scenario: &Scenario,
    log_dir: &Path,
) -> anyhow::Result<Run> {
    if let Some(why) = scenario.refuse() {
        bail!("scenario {}: {why}", scenario.name);
    }
    let ns = scenario.namespace.as_str();
    create_namespace(client, ns).await?;
    if scenario.shared_by_namespaces.is_some() {
        for claim_ns in scenario.claim_namespaces() {
            create_namespace(client, &claim_ns).await?;
        }
    }
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), ns);
    let mut nets = Vec::new();
    match scenario.carving {
        // Made once the clock runs (`measure_scenario`).
        Some(Carving::Literal) => {}
        Some(Carving::FromParent) => create_parent(client, ns).await?,
        None => {
            for j in 0..scenario.pools {
                nets.push(scenario.create_pool(client, ns, j).await?);
            }
        }
    }
    // The canary proves the provider is up and its caches are synced before the clock starts.
    let canary_net: IpNet = "192.168.255.0/24".parse().expect("valid CIDR");
    pools
        .create(&PostParams::default(), &pool_object("canary", &canary_net))
        .await?;
    let claims_api: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    claims_api
        .create(
            &PostParams::default(),
            &claim_object(
                "canary",
                IPAM_GROUP,
                PoolKind::InCluster.name(),
                "canary",
                false,
            ),
        )
        .await?;

    let log = log_dir.join(format!("{}-{}.log", provider.name, scenario.name));
    let mut process = ProviderProcess::start(
        provider,
        kubeconfig,
        scenario.provider_namespace(),
        scenario.concurrency,
        &log,
    )?;
    eprintln!(
        "{} / {}: started `{}` (pid {}, log {})",
        provider.name,
        scenario.name,
        process.command_line,
        process.pid,
        log.display()
    );
    let result = measure_scenario(
        client,
        kubeconfig,
        plane_pid,
        provider,
        scenario,
        &mut process,
        &nets,
        log_dir,
    )
    .await;
    let exit = process.stop().await;
    if result.is_ok() && exit != Some(0) {
        eprintln!("  warning: the provider exited with {exit:?} after SIGTERM");
    }
    // The namespaces go before the next phase starts: their deletion is not the next phase's
    // load. Objects left with finalizers (after a failure) are stripped after 120 s. Kept claims
    // stay with their namespace.
    let mut namespaces = vec![scenario.namespace.clone()];
    if scenario.shared_by_namespaces.is_some() {
        namespaces.extend(scenario.claim_namespaces());
    }
    if scenario.at_size.keep_claims {
        namespaces.clear();
    }
    for ns in &namespaces {
        delete_namespace(client, ns, None).await?;
    }
    let mut deleted = Ok(());
    for ns in &namespaces {
        let mut gone = delete_namespace(client, ns, Some(Duration::from_secs(120))).await;
        if gone.is_err() {
            eprintln!("  namespace {ns} does not go away: removing the finalizers left in it");
            strip_finalizers(client, ns).await?;
            gone = delete_namespace(client, ns, Some(Duration::from_secs(300))).await;
        }
        deleted = deleted.and(gone);
    }
    let run = result?;
    deleted?;
    Ok(run)
}

/// How long [`wait_pool_status`] waits beyond the pool status pacing's own bound (5 minutes, or
/// the pools at 5 a second: `inpool::controllers::pools::status`).
const STATUS_WAIT: Duration = Duration::from_secs(120);

/// Waits until every pool of the scenario counts its claims in `status.ipAddresses.used` (each
/// pool gets `claims_per_pool`; pre-allocated claims are among them), polling every 5 s; returns
/// the seconds since `t0`, or `None` (and says so) if the statuses did not get there within the
/// pacing's bound and [`STATUS_WAIT`].
async fn wait_pool_status(
    client: &Client,
    scenario: &Scenario,
    t0: Instant,
) -> anyhow::Result<Option<f64>> {
    let want = i64::try_from(scenario.claims_per_pool)?;
    let bound = Duration::from_secs(300)
        + Duration::from_secs(1) * u32::try_from(scenario.pools / 5)?
        + STATUS_WAIT;
    let started = Instant::now();
    loop {
        let used = match (scenario.sub_prefixes, scenario.shared_by_namespaces) {
            (Some(_), _) => {
                pools_used(Api::<InClusterPrefixPool>::namespaced(
                    client.clone(),
                    &scenario.namespace,
                ))
                .await?
            }
            (None, Some(_)) => {
                pools_used(Api::<GlobalInClusterIPPool>::all(client.clone())).await?
            }
            (None, None) => {
                pools_used(Api::<InClusterIPPool>::namespaced(
                    client.clone(),
                    &scenario.namespace,
                ))
                .await?
            }
        };
        // The canary's pool is not the scenario's: its count is left out.
        let counted = used
            .iter()
            .filter(|(name, used)| name.starts_with("pool-") && *used == Some(want))
            .count();
        let behind = scenario.pools.saturating_sub(counted);
        if behind == 0 {
            let seconds = t0.elapsed().as_secs_f64();
            eprintln!(
                "  every pool's status counts its claims {seconds:.1} s after the first create"
            );
            return Ok(Some(seconds));
        }
        if started.elapsed() > bound {
            eprintln!(
                "  {behind} of {} pools' status did not count their claims within {:.0} s",
                scenario.pools,
                bound.as_secs_f64()
            );
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Each pool's name and `status.ipAddresses.used`, if its status has counts.
async fn pools_used<P>(api: Api<P>) -> anyhow::Result<Vec<(String, Option<i64>)>>
where
    P: IPPool + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let pools = list_paged(&api, &ListParams::default()).await?;
    Ok(pools
        .iter()
        .map(|p| {
            let used = p.pool_status().and_then(|s| s.ip_addresses.as_ref());
            (p.name_any(), used.map(|counts| counts.used))
        })
        .collect())
}

#[allow(clippy::too_many_arguments)]
async fn measure_scenario(
    client: &Client,
    kubeconfig: &Path,
    plane_pid: Option<u32>,
    provider: &ProviderSpec,
    scenario: &Scenario,
    process: &mut ProviderProcess,
    nets: &[IpNet],
    log_dir: &Path,
) -> anyhow::Result<Run> {
    let ns = scenario.namespace.as_str();
    let total = scenario.total();
    let claims_api: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);

    // Wait for the canary (start-up, initial lists).
    let started = Instant::now();
    loop {
        let canary = claims_api.get("canary").await?;
        if ready_ref(&canary).is_some() {
            break;
        }
        if let Some(why) = process.exited() {
            bail!(
                "the provider exited ({why}) before it realised the canary claim; log:\n{}",
                process.log_tail(30)
            );
        }
        if started.elapsed() > Duration::from_secs(180) {
            bail!(
                "the provider did not realise the canary claim within 180 s ({}); log:\n{}",
                ready_reason(&canary),
                process.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "  canary Ready {:.1} s after the provider started; creating {total} claims in {}",
        started.elapsed().as_secs_f64(),
        scenario.pools_text()
    );

    let tracker = ReadyTracker::start_for(client, scenario).await?;
    let pool_tracker = match scenario.carving {
        Some(_) => Some(PoolTracker::start(client, ns).await?),
        None => None,
    };
    let what = format!("{} / {}", provider.name, scenario.name);
    if scenario.settle {
        wait_quiet(client, &what).await?;
    }
    let retries = Retries::default();
    let specs: Vec<(String, usize, usize)> = (0..total).map(|i| scenario.claim(i)).collect();
    let names: Vec<String> = specs.iter().map(|(n, _, _)| n.clone()).collect();
    let claim_namespaces = scenario.claim_namespaces();
    let namespaced: Vec<(String, String)> = specs
        .iter()
        .map(|(name, _, k)| (claim_namespaces[*k].clone(), name.clone()))
        .collect();
    let mut created: Vec<Option<Instant>> = vec![None; total];
    let load_before = load_average();
    let before = snapshot(client, Some(process.pid), plane_pid).await?;

    let t0 = Instant::now();
    let mut nets = nets.to_vec();
    let mut seconds_to_pools_ready = None;
    if let Some(pool_tracker) = &pool_tracker {
        make_pools(client, scenario, &retries).await?;
        pool_tracker
            .wait_all(t0, scenario.pools, scenario.timeout, &what, &mut || {
                process.exited().map(|why| {
                    format!(
                        "the provider exited ({why}); log:\n{}",
                        process.log_tail(30)
                    )
                })
            })
            .await?;
        seconds_to_pools_ready = Some(
            pool_tracker
                .last_ready()
                .saturating_duration_since(t0)
                .as_secs_f64(),
        );
        nets = match scenario.carving {
            Some(Carving::FromParent) => carved_nets(client, scenario).await?,
            _ => (0..scenario.pools).map(|j| scenario.net(j)).collect(),
        };
        eprintln!(
            "  every pool Ready {:.1} s after the first create; creating the claims",
            seconds_to_pools_ready.unwrap_or_default()
        );
    }
    drop(pool_tracker);
    create_claims(
        &claims_api,
        total,
        scenario.concurrency,
        &retries,
        |i| {
            let (name, pool, k) = &specs[i];
            let mut claim = claim_object(
                name,
                IPAM_GROUP,
                scenario.pool_kind(),
                &pool_name(*pool),
                true,
            );
            claim.metadata.namespace = Some(claim_namespaces[*k].clone());
            claim
        },
        |i, _, at| created[i] = Some(at),
    )
    .await?;
    let created_done = Instant::now();
    tracker
        .wait_all(t0, total, scenario.timeout, &what, &mut || {
            process.exited().map(|why| {
                format!(
                    "the provider exited ({why}); log:\n{}",
                    process.log_tail(30)
                )
            })
        })
        .await?;
    let at_ready = process::proc_stat(process.pid);
    let seconds_to_pool_status = if provider.is_inpool {
        wait_pool_status(client, scenario, t0).await?
    } else {
        None
    };
    let after = snapshot(client, Some(process.pid), plane_pid).await?;
    let provider_page = if provider.is_inpool {
        process::http_get_metrics(process.metrics_addr).await.ok()
    } else {
        None
    };

    let mut run = Run {
        label: format!(
            "{}, {} × {}{}{}{}",
            provider.name,
            scenario.pools_text(),
            scenario.claims_per_pool,
            scenario
                .sub_prefixes
                .map(|length| format!(" /{length}s"))
                .unwrap_or_default(),
            scenario
                .shared_by_namespaces
                .map(|n| format!(", {n} namespaces"))
                .unwrap_or_default(),
            match scenario.pre_allocations {
                0 => String::new(),
                n => format!(", {n} pre-allocated"),
            }
        ),
        provider: provider.name.clone(),
        scenario: scenario.name.clone(),
        pools: scenario.pools,
        claims: total,
        concurrency: scenario.concurrency,
        load_before,
        load_after: load_average(),
        provider_command: Some(process.command_line.clone()),
        seconds_to_pool_status,
        seconds_to_pools_ready,
        ..Default::default()
    };
    let ready = tracker.ready_times();
    drop(tracker);
    measure(
        &mut run,
        t0,
        &created,
        &names,
        &ready,
        &before,
        &after,
        created_done,
        if scenario.carving.is_some() {
            scenario.pools
        } else {
            0
        },
    );
    run.control_plane_peaks = plane_pid.map(process::plane_peaks);
    if let (Some(b), Some(a)) = (before.provider, after.provider) {
        run.provider_cpu_seconds = at_ready.map(|r| r.cpu_seconds - b.cpu_seconds);
        run.provider_cpu_seconds_to_pool_status = seconds_to_pool_status
            .is_some()
            .then_some(a.cpu_seconds - b.cpu_seconds);
        run.provider_base_rss_mib = Some(b.rss_kib as f64 / 1024.0);
        run.provider_peak_rss_mib = Some(a.hwm_kib as f64 / 1024.0);
        run.provider_rss_mib = Some(a.rss_kib as f64 / 1024.0);
    }
    if let Some(page) = &provider_page {
        // Reconciles since start, minus the canary's (a handful): close enough per claim.
        run.reconciles_per_claim =
            process::metric_sum(page, r#"inpool_reconciles_total{controller="claim"}"#)
                .map(|r| r / total as f64);
        run.reconcile_errors = process::metric_sum(page, "inpool_reconcile_errors_total");
        run.throttled_requests = Some(crate::common::rest_client_requests(page, &["code=\"429\""]));
    }
    eprintln!(
        "  all {total} Ready in {:.1} s ({:.0} claims/s); checking",
        run.seconds_to_all_ready, run.claims_per_second
    );
    // A long run may be stopped before its report: its figures so far, one line at each phase.
    eprintln!("  figures: {}", serde_json::to_string(&run)?);

    let restarted = scenario.at_size.restart.is_some();
    if !scenario.at_size.is_empty() {
        run.at_size = Some(
            atsize::run(
                client,
                kubeconfig,
                provider,
                scenario,
                process,
                log_dir,
                &scenario.at_size,
            )
            .await?,
        );
        eprintln!("  at size: {}", serde_json::to_string(&run.at_size)?);
    }

    let mut correctness = check(client, scenario, &nets, provider.is_inpool).await?;
    if scenario.at_size.keep_claims {
        eprintln!("  claims kept (--keep-claims): no release, no tear-down");
    } else {
        let (release, leftovers) = release_all(client, scenario, &namespaced, &retries).await?;
        let left = leftovers.claims + leftovers.addresses + leftovers.reservations;
        if left > 0 {
            correctness.problems.push(format!(
                "after deleting every claim, left behind: {} claims, {} IPAddresses, {} reservations",
                leftovers.claims, leftovers.addresses, leftovers.reservations
            ));
        }
        correctness.left_after_release = Some(leftovers);
        // After a restart the process that released is not the one that realised: no sum.
        if !restarted {
            run.provider_peak_rss_mib_with_release =
                process.stat().map(|s| s.hwm_kib as f64 / 1024.0);
            run.provider_cpu_seconds_with_release = process
                .stat()
                .zip(before.provider)
                .map(|(a, b)| a.cpu_seconds - b.cpu_seconds);
        }
        run.release = release;
        run.control_plane_peaks_with_release = plane_pid.map(process::plane_peaks);
        eprintln!("  release: {}", serde_json::to_string(&run.release)?);
        // The canary and the pools go while the provider still runs, so that it releases their
        // finalizers (inpool protects a pool with `ProtectPool` while it holds addresses).
        if let Some(problem) = tear_down(client, scenario).await? {
            correctness.problems.push(problem);
        }
    }
    correctness.ok = correctness.problems.is_empty();
    run.correctness = Some(correctness);
    run.harness_retries = retries.get();
    Ok(run)
}

/// Deletes the canary claim, then every pool, and waits (60 s, more for carved pools) until they
/// are gone.
async fn tear_down(client: &Client, scenario: &Scenario) -> anyhow::Result<Option<String>> {
    let ns = scenario.namespace.as_str();
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), ns);
    let dp = DeleteParams::default();
    let _ = claims.delete("canary", &dp).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while claims.get_opt("canary").await?.is_some() {
        if Instant::now() > deadline {
            return Ok(Some("the canary claim was not released within 60 s".into()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let prefix_pools: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), ns);
    // A carved pool goes once its sub-prefix is released (the claim on the parent deleted, its
    // reservation and IPAddress with it: about 8 requests), and the parent once the last one
    // is: 1,000 of them took more than 60 s here.
    let deadline = match scenario.carving {
        Some(Carving::FromParent) => {
            Instant::now()
                + Duration::from_secs(60)
                + Duration::from_millis(200) * scenario.pools as u32
        }
        _ => deadline,
    };
    pools
        .delete_collection(&dp, &ListParams::default())
        .await
        .context("deleting the pools")?;
    prefix_pools
        .delete_collection(&dp, &ListParams::default())
        .await
        .context("deleting the prefix pools")?;
    // Global pools by name: other global pools of the control plane are not the scenario's.
    let global_pools: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    let global_names: Vec<String> = match scenario.shared_by_namespaces {
        Some(_) => (0..scenario.pools).map(pool_name).collect(),
        None => Vec::new(),
    };
    for name in &global_names {
        match global_pools.delete(name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(anyhow::Error::new(e).context(format!("deleting pool {name}"))),
        }
    }
    loop {
        let mut left = count(&pools, &ListParams::default()).await?
            + count(&prefix_pools, &ListParams::default()).await?;
        for name in &global_names {
            left += usize::from(global_pools.get_opt(name).await?.is_some());
        }
        if left == 0 {
            return Ok(None);
        }
        if Instant::now() > deadline {
            return Ok(Some(format!(
                "{left} pools still exist 60 s after every claim was deleted and they were \
                 deleted (a finalizer was not released)"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Last resort when a namespace does not go away: drop every finalizer left in it.
async fn strip_finalizers(client: &Client, ns: &str) -> anyhow::Result<()> {
    let unfinalize = json!({ "metadata": { "finalizers": null } });
    let patch = Patch::Merge(&unfinalize);
    let pp = PatchParams::default();
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), ns);
    for p in pools.list_metadata(&ListParams::default()).await?.items {
        let _ = pools.patch(&p.name_any(), &pp, &patch).await;
    }
    let prefix_pools: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), ns);
    for p in prefix_pools
        .list_metadata(&ListParams::default())
        .await?
        .items
    {
        let _ = prefix_pools.patch(&p.name_any(), &pp, &patch).await;
    }
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    for c in claims.list_metadata(&ListParams::default()).await?.items {
        let _ = claims.patch(&c.name_any(), &pp, &patch).await;
    }
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), ns);
    for a in addresses.list_metadata(&ListParams::default()).await?.items {
        let _ = addresses.patch(&a.name_any(), &pp, &patch).await;
    }
    Ok(())
}

/// Lists everything of the scenario and checks the contract's end state.
async fn check(
    client: &Client,
    scenario: &Scenario,
    nets: &[IpNet],
    expect_reservations: bool,
) -> anyhow::Result<Correctness> {
    let namespaces = scenario.claim_namespaces();
    let mut claims = Vec::new();
    let mut addresses = Vec::new();
    for ns in &namespaces {
        let claims_api: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
        let addresses_api: Api<IPAddress> = Api::namespaced(client.clone(), ns);
        claims.extend(
            list_paged(
                &claims_api,
                &ListParams::default().labels(&format!("{CLAIM_LABEL}=true")),
            )
            .await?,
        );
        addresses.extend(list_paged(&addresses_api, &ListParams::default()).await?);
    }
    let mut problems = Vec::new();
    let mut note = |p: String| {
        if problems.len() < 20 {
            problems.push(p);
        }
    };

    let total = scenario.total();
    if claims.len() != total {
        note(format!(
            "{} claims exist, {total} were created",
            claims.len()
        ));
    }
    let by_name: HashMap<String, &IPAddress> =
        addresses.iter().map(|a| (a.name_any(), a)).collect();
    let claim_names: HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
    let mut seen: HashMap<IpAddr, String> = HashMap::new();
    let mut ready = 0;
    let mut claim_ips: HashMap<String, IpAddr> = HashMap::new();
    for claim in &claims {
        let name = claim.name_any();
        let Some(address_ref) = ready_ref(claim) else {
            note(format!(
                "claim {name} is not Ready: {}",
                ready_reason(claim)
            ));
            continue;
        };
        if expect_reservations
            && !claim
                .conditions()
                .iter()
                .any(|c| c.type_ == READY_CONDITION)
        {
            // inpool (the provider that keeps reservations) always says so in a condition.
            note(format!(
                "claim {name} has an addressRef and no Ready condition"
            ));
        }
        ready += 1;
        let Some(address) = by_name.get(address_ref) else {
            note(format!(
                "claim {name}: addressRef {address_ref} does not exist"
            ));
            continue;
        };
        if address.spec.claim_ref.name != name {
            note(format!(
                "IPAddress {address_ref} names claim {}, not {name}",
                address.spec.claim_ref.name
            ));
        }
        if address.spec.pool_ref != claim.spec.pool_ref {
            note(format!(
                "IPAddress {address_ref} is for another pool than claim {name}"
            ));
        }
        let Ok(ip) = address.spec.address.parse::<IpAddr>() else {
            note(format!(
                "IPAddress {address_ref}: `{}` is no IP",
                address.spec.address
            ));
            continue;
        };
        let pool_index = claim
            .spec
            .pool_ref
            .name
            .strip_prefix("pool-")
            .and_then(|j| j.parse::<usize>().ok());
        if !pool_index
            .and_then(|j| nets.get(j))
            .is_some_and(|net| net.contains(&ip))
        {
            note(format!(
                "claim {name} got {ip}, outside its pool {}",
                claim.spec.pool_ref.name
            ));
        }
        if let Some(other) = seen.insert(ip, name.clone()) {
            note(format!("{ip} is held by both {other} and {name}"));
        }
        claim_ips.insert(name, ip);
    }
    let mut pre_allocations_honoured = 0;
    for (i, entry) in scenario.pre_allocated() {
        let name = scenario.claim(i).0;
        match claim_ips.get(&name) {
            Some(ip) if *ip == entry => pre_allocations_honoured += 1,
            held => note(format!(
                "claim {name} holds {held:?}, but the pool pre-allocates {entry} to it"
            )),
        }
    }
    let orphans: Vec<&IPAddress> = addresses
        .iter()
        .filter(|a| is_claims_address(a) && !claim_names.contains(&a.spec.claim_ref.name))
        .collect();
    for orphan in orphans.iter().take(5) {
        note(format!(
            "IPAddress {} has no claim ({})",
            orphan.name_any(),
            orphan.spec.claim_ref.name
        ));
    }
    let scenario_addresses = addresses.iter().filter(|a| is_claims_address(a)).count();
    let pool_subnets_apart = scenario
        .carving
        .map(|carving| check_pool_subnets(scenario, carving, nets, &addresses, &mut note));
    if scenario_addresses != total {
        note(format!(
            "{scenario_addresses} IPAddresses for {total} claims"
        ));
    }

    let reservations = if expect_reservations {
        let mine = reservations_in(client, &namespaces).await?;
        let mine: Vec<&IPAddressReservation> =
            mine.iter().filter(|r| is_claims_reservation(r)).collect();
        if mine.len() != total {
            note(format!("{} reservations for {total} claims", mine.len()));
        }
        for r in &mine {
            let ip = r.spec.address.parse::<IpAddr>().ok();
            if claim_ips.get(&r.spec.claim_name).copied() != ip {
                note(format!(
                    "reservation {} ({}) does not match claim {}'s address",
                    r.name_any(),
                    r.spec.address,
                    r.spec.claim_name
                ));
            }
        }
        Some(mine.len())
    } else {
        None
    };

    Ok(Correctness {
        ok: problems.is_empty(),
        claims: claims.len(),
        claims_ready: ready,
        addresses: scenario_addresses,
        distinct_addresses: seen.len(),
        reservations,
        orphan_addresses: orphans.len(),
        pre_allocations_honoured,
        pool_subnets_apart,
        left_after_release: None,
        problems,
    })
}

/// Whether a pool is the carved pools' parent.
fn is_parent(kind: &str, name: &str) -> bool {
    kind == PoolKind::InClusterPrefix.name() && name == PARENT
}

/// Whether an `IPAddress` is one of a scenario claim's: not the canary's, nor a sub-prefix a
/// carved pool holds from the parent.
fn is_claims_address(address: &IPAddress) -> bool {
    address.name_any() != "canary"
        && !is_parent(&address.spec.pool_ref.kind, &address.spec.pool_ref.name)
}

/// Whether a reservation is one of a scenario claim's (as [`is_claims_address`]).
fn is_claims_reservation(reservation: &IPAddressReservation) -> bool {
    reservation.spec.claim_name != "canary"
        && !is_parent(&reservation.spec.pool_kind, &reservation.spec.pool_name)
}

/// The carved-pools comparison's pools: one subnet each, no two overlapping, and, when carved,
/// each inside the parent and held from it by one of the parent's `IPAddress`es, which hold
/// nothing else. Returns how many pools' subnets passed.
fn check_pool_subnets(
    scenario: &Scenario,
    carving: Carving,
    nets: &[IpNet],
    addresses: &[IPAddress],
    note: &mut dyn FnMut(String),
) -> usize {
    if nets.len() != scenario.pools {
        note(format!(
            "{} subnets for {} pools",
            nets.len(),
            scenario.pools
        ));
    }
    let mut bad: HashSet<IpNet> = HashSet::new();
    let mut sorted = nets.to_vec();
    sorted.sort();
    for pair in sorted.windows(2) {
        if pair[1].network() <= pair[0].broadcast() {
            note(format!(
                "the pools' subnets {} and {} overlap",
                pair[0], pair[1]
            ));
            bad.extend([pair[0], pair[1]]);
        }
    }
    if carving == Carving::FromParent {
        let parent: IpNet = PARENT_PREFIX.parse().expect("valid parent prefix");
        let held: Vec<IpNet> = addresses
            .iter()
            .filter(|a| is_parent(&a.spec.pool_ref.kind, &a.spec.pool_ref.name))
            .filter_map(|a| {
                let prefix = u8::try_from(a.spec.prefix).ok()?;
                IpNet::new(a.spec.address.parse().ok()?, prefix).ok()
            })
            .collect();
        let held_set: HashSet<IpNet> = held.iter().copied().collect();
        if held.len() != nets.len() || held_set.len() != held.len() {
            note(format!(
                "the parent holds {} sub-prefixes ({} distinct) for {} carved pools",
                held.len(),
                held_set.len(),
                nets.len()
            ));
        }
        for net in nets {
            if !parent.contains(net) || !held_set.contains(net) {
                note(format!(
                    "carved {net}: inside {PARENT_PREFIX}: {}; held by the parent: {}",
                    parent.contains(net),
                    held_set.contains(net)
                ));
                bad.insert(*net);
            }
        }
    }
    nets.iter().filter(|net| !bad.contains(net)).count()
}

pub(crate) async fn reservations_of(
    client: &Client,
    ns: &str,
) -> anyhow::Result<Vec<IPAddressReservation>> {
    reservations_in(client, &[ns.to_string()]).await
}

/// The reservations of the claims of these namespaces.
async fn reservations_in(
    client: &Client,
    namespaces: &[String],
) -> anyhow::Result<Vec<IPAddressReservation>> {
    let api: Api<IPAddressReservation> = Api::all(client.clone());
    Ok(list_paged(&api, &ListParams::default())
        .await?
        .into_iter()
        .filter(|r| namespaces.contains(&r.spec.claim_namespace))
        .collect())
}

/// Every object of a kind matching `lp`, in pages of 500 (every list of the scale harness's
/// objects): one list of 100,000 claims was cut off mid-body, and pages keep each request well
/// within the API server's `--request-timeout` (a minute by default).
pub(crate) async fn list_paged<K>(api: &Api<K>, lp: &ListParams) -> anyhow::Result<Vec<K>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut items = Vec::new();
    let mut page = lp.clone().limit(500);
    loop {
        let list = api.list(&page).await?;
        items.extend(list.items);
        match list.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => page = page.continue_token(&token),
            None => return Ok(items),
        }
    }
}

/// Objects of a kind matching `lp`, counted with a one-item page.
async fn count<K>(api: &Api<K>, lp: &ListParams) -> anyhow::Result<usize>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let page = api.list_metadata(&lp.clone().limit(1)).await?;
    Ok(page.items.len() + page.metadata.remaining_item_count.unwrap_or(0).max(0) as usize)
}

/// Deletes every scenario claim, `concurrency` at a time (as the claims were created), and waits
/// until the claims, their IPAddresses and their reservations are gone.
async fn release_all(
    client: &Client,
    scenario: &Scenario,
    names: &[(String, String)],
    retries: &Retries,
) -> anyhow::Result<(Option<Release>, Leftovers)> {
    let total = names.len();
    let namespaces = scenario.claim_namespaces();
    let labelled = ListParams::default().labels(&format!("{CLAIM_LABEL}=true"));
    let count_claims = || async {
        let mut left = 0;
        for ns in &namespaces {
            left += count(
                &Api::<IPAddressClaim>::namespaced(client.clone(), ns),
                &labelled,
            )
            .await?;
        }
        anyhow::Ok(left)
    };
    let tracker = ReadyTracker::start_for(client, scenario).await?;
    if scenario.settle {
        wait_quiet(client, "release").await?;
    }
    let (before, seconds_before) = apimetrics::scrape_with_seconds(client).await?;
    let t0 = Instant::now();
    let dp = DeleteParams::default();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(names)
        .map(|(ns, name)| {
            let claims_api = Api::<IPAddressClaim>::namespaced(client.clone(), ns);
            let dp = &dp;
            async move {
                let claims_api = &claims_api;
                match with_retries(retries, &format!("deleting claim {name}"), || {
                    claims_api.delete(name, dp)
                })
                .await
                {
                    Ok(_) => Ok(()),
                    Err(e)
                        if e.downcast_ref::<kube::Error>()
                            .is_some_and(|k| matches!(k, kube::Error::Api(s) if s.code == 404)) =>
                    {
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(scenario.concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let mut last_print = Instant::now();
    let mut last_count = Instant::now();
    let left_claims = loop {
        if tracker.deleted_count() >= total {
            break 0;
        }
        // A backstop in case the watch restarted and missed deletions.
        if last_count.elapsed() > Duration::from_secs(5) {
            last_count = Instant::now();
            if count_claims().await? == 0 {
                break 0;
            }
        }
        if t0.elapsed() > scenario.timeout {
            break count_claims().await?;
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  release: {}/{total} claims gone {:.0} s after the first delete",
                tracker.deleted_count(),
                t0.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let released_at = tracker.last_deleted().unwrap_or_else(Instant::now);
    drop(tracker);
    // Addresses and reservations go before the claim's finalizer; give a provider that leaves the
    // address to the garbage collector a moment.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (left_addresses, left_reservations) = loop {
        let mut addresses = 0;
        for ns in &namespaces {
            // Whole objects: the parent's `IPAddress`es, which stay, are told by their pool.
            let api = Api::<IPAddress>::namespaced(client.clone(), ns);
            addresses += list_paged(&api, &ListParams::default())
                .await?
                .iter()
                .filter(|a| is_claims_address(a))
                .count();
        }
        let reservations = reservations_in(client, &namespaces)
            .await?
            .iter()
            .filter(|r| is_claims_reservation(r))
            .count();
        if (addresses == 0 && reservations == 0) || Instant::now() > deadline {
            break (addresses, reservations);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let (after, seconds_after) = apimetrics::scrape_with_seconds(client).await?;
    let leftovers = Leftovers {
        claims: left_claims,
        addresses: left_addresses,
        reservations: left_reservations,
    };
    if left_claims > 0 {
        return Ok((None, leftovers));
    }
    let delta = after.since(&before);
    let seconds = released_at.saturating_duration_since(t0).as_secs_f64();
    // The harness's own deletes are not the provider's writes.
    let harness_deletes = delta
        .count("DELETE", "ipaddressclaims", "")
        .min(total as f64);
    let writes = delta.writes() - harness_deletes;
    let mut buckets = delta.writes_by_bucket();
    if let Some(c) = buckets.get_mut("claims") {
        *c -= harness_deletes;
    }
    buckets.retain(|_, v| *v > 0.0);
    Ok((
        Some(Release {
            seconds,
            claims_per_second: total as f64 / seconds.max(1e-9),
            writes_per_claim: writes / total.max(1) as f64,
            writes_per_claim_by_resource: per_claim(buckets, total),
            write_ms_per_claim_by_resource: per_claim(
                seconds_after
                    .since(&seconds_before)
                    .writes_by_bucket()
                    .into_iter()
                    .map(|(k, v)| (k, v * 1000.0))
                    .collect(),
                total,
            ),
        }),
        leftovers,
    ))
}

/// Where the harness writes provider logs and its report by default.
pub fn scale_dir(repo_root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root.join("target"))
        .join("scale")
}
