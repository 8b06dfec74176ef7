//! Memory per claim: the live heap bytes each structure inpool keeps for one realised
//! claim, measured with a counting global allocator over 10,000 claims as the API server serves
//! them (an infrastructure provider's claim with its owner reference, labels and finalizers, the
//! status inpool wrote, and the managed fields of three writers).
//!
//! Run: `cargo bench --bench memory` (`INPOOL_BENCH_CLAIMS=30000` for another count: hash tables
//! double as they grow, so the bytes per claim depend on where the count falls between two
//! doublings). It prints one line per structure and the sum, in bytes and in live allocations
//! (each costs the allocator's header and size-class rounding on top); the scale
//! harness measures the whole process (docs/performance.md). No timing, and nothing here
//! decides a test: the figures are for comparing a change before and after.
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use inpool::api::reservation::IPAddressReservation;
use inpool::api::{IPAddress, IPAddressClaim, InClusterIPPool};
use inpool::controllers::footprint::{self, RegistryFootprint};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

#[path = "common/counting_allocator.rs"]
mod counting_allocator;
use counting_allocator::{live_allocations, live_bytes};

const NAMESPACE: &str = "fleet-edge-042";
const POOL: &str = "edge-pool";

fn ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + 10 + i as u32))
}

fn machine(i: usize) -> String {
    format!("edge-cluster-md-0-7f9c6b5d4-x{i:05}")
}

fn managed_field(manager: &str, operation: &str, subresource: Option<&str>) -> Value {
    json!({
        "manager": manager, "operation": operation, "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1",
        "subresource": subresource,
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:cluster.x-k8s.io/cluster-name": {}},
            "f:ownerReferences": {".": {}, "k:{\"uid\":\"0b5c7a52-3f7e-4c59-9a1e-5e1c7f8f2d11\"}": {}}},
            "f:spec": {".": {}, "f:poolRef": {".": {}, "f:apiGroup": {}, "f:kind": {}, "f:name": {}}}}
    })
}

/// A realised claim as an infrastructure provider makes it and inpool leaves it.
fn claim(i: usize) -> IPAddressClaim {
    let name = format!("{}-0-0", machine(i));
    let message = format!(
        "address {} allocated from InClusterIPPool {NAMESPACE}/{POOL}",
        ip(i)
    );
    serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
        "metadata": {
            "name": name, "namespace": NAMESPACE,
            "uid": format!("6f1c2b9e-0d4a-4b8e-9c3f-{i:012}"), "resourceVersion": format!("{}", 100_000 + i),
            "generation": 1, "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {"cluster.x-k8s.io/cluster-name": "edge-cluster"},
            "finalizers": ["ipam.cluster.x-k8s.io/ReleaseAddress"],
            "ownerReferences": [{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "VSphereVM", "name": machine(i), "uid": "0b5c7a52-3f7e-4c59-9a1e-5e1c7f8f2d11",
                "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [managed_field("manager", "Update", None),
                managed_field("inpool", "Update", None), managed_field("inpool", "Apply", Some("status"))]
        },
        "spec": {"poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": POOL}},
        "status": {
            "addressRef": {"name": name},
            "conditions": [{"type": "Ready", "status": "True", "reason": "AddressAllocated",
                "message": message, "lastTransitionTime": "2026-11-30T10:00:01Z", "observedGeneration": 1}],
            "deprecated": {"v1beta1": {"conditions": [{"type": "Ready", "status": "True",
                "lastTransitionTime": "2026-11-30T10:00:01Z"}]}}
        }
    }))
    .expect("a valid claim")
}

/// The same claim as another provider (metal3) realised it: its pool kind is not inpool's.
fn of_another_provider(claim: &IPAddressClaim) -> IPAddressClaim {
    let mut claim = claim.clone();
    claim.spec.pool_ref.api_group = "ipam.metal3.io".into();
    claim.spec.pool_ref.kind = "IPPool".into();
    claim.metadata.finalizers = Some(vec!["ipam.metal3.io/ipaddressclaim".into()]);
    claim
}

fn address(i: usize) -> IPAddress {
    serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
        "metadata": {"name": format!("{}-0-0", machine(i)), "namespace": NAMESPACE},
        "spec": {"address": ip(i).to_string(), "prefix": 16, "gateway": "10.0.0.1",
            "claimRef": {"name": format!("{}-0-0", machine(i))},
            "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": POOL}}
    }))
    .expect("a valid IPAddress")
}

fn reservation(i: usize) -> IPAddressReservation {
    serde_json::from_value(json!({
        "apiVersion": "ipam.inpool.dev/v1alpha1", "kind": "IPAddressReservation",
        "metadata": {"name": format!("{}.ns.{NAMESPACE}", ip(i))},
        "spec": {"address": ip(i).to_string(), "poolKind": "InClusterIPPool",
            "poolNamespace": NAMESPACE, "poolName": POOL,
            "claimNamespace": NAMESPACE, "claimName": format!("{}-0-0", machine(i)),
            "claimUID": format!("6f1c2b9e-0d4a-4b8e-9c3f-{i:012}")}
    }))
    .expect("a valid reservation")
}

/// Claims measured: `INPOOL_BENCH_CLAIMS`, else 10,000.
fn claims_count() -> usize {
    std::env::var("INPOOL_BENCH_CLAIMS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}

/// Live heap bytes and allocations per claim.
#[derive(Clone, Copy)]
struct PerClaim {
    bytes: f64,
    allocations: f64,
}

impl std::ops::Add for PerClaim {
    type Output = PerClaim;
    fn add(self, other: PerClaim) -> PerClaim {
        PerClaim {
            bytes: self.bytes + other.bytes,
            allocations: self.allocations + other.allocations,
        }
    }
}

/// What `keep` leaves behind per claim, building from objects made outside it.
fn per_claim<T>(claims: usize, keep: impl FnOnce() -> T) -> (PerClaim, T) {
    let (bytes, allocations) = (live_bytes(), live_allocations());
    let kept = keep();
    let per = |after: isize, before: isize| (after - before) as f64 / claims as f64;
    (
        PerClaim {
            bytes: per(live_bytes(), bytes),
            allocations: per(live_allocations(), allocations),
        },
        kept,
    )
}

fn main() {
    let count = claims_count();
    let pool: InClusterIPPool = serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": {"addresses": ["10.0.0.10-10.0.255.250"], "prefix": 16, "gateway": "10.0.0.1"}
    }))
    .expect("a valid pool");
    let mut lines = Vec::new();

    let claims: Vec<IPAddressClaim> = (0..count).map(claim).collect();
    let (whole, whole_store) = per_claim(count, || {
        let mut writer = Writer::<IPAddressClaim>::default();
        writer.apply_watcher_event(&Event::Init);
        for c in &claims {
            let mut c = c.clone();
            c.metadata.managed_fields = None;
            writer.apply_watcher_event(&Event::InitApply(c));
        }
        writer.apply_watcher_event(&Event::InitDone);
        writer
    });
    drop(whole_store);
    let (cached, cache) = per_claim(count, || footprint::claim_cache(&claims));
    lines.push((
        "claim cache, whole objects without managed fields (for scale)",
        whole,
    ));
    lines.push(("claim cache (CachedClaim by ObjectKey)", cached));
    let foreign: Vec<IPAddressClaim> = claims.iter().map(of_another_provider).collect();
    drop(claims);
    let (foreign_kept, foreign_cache) = per_claim(count, || footprint::claim_cache(&foreign));
    assert!(foreign_cache.is_empty(), "a foreign claim was cached");
    drop(foreign);

    let addresses: Vec<IPAddress> = (0..count).map(address).collect();
    let reservations: Vec<IPAddressReservation> = (0..count).map(reservation).collect();
    let mut registry = RegistryFootprint::with_pool(&pool);
    let (held, registry) = per_claim(count, || {
        let recorded = registry.hold(&reservations, &addresses);
        assert_eq!(recorded, 2 * count, "every reservation and IPAddress holds");
        registry
    });
    lines.push(("registry: a reservation and an IPAddress per claim", held));

    let width = lines
        .iter()
        .map(|(l, _)| l.len())
        .max()
        .unwrap_or(0)
        .max(39);
    println!("live heap per claim, over {count} claims: bytes, allocations");
    let total = cached + held;
    for (label, per) in lines.iter().chain([
        &("kept per claim (claim cache + registry)", total),
        &(
            "kept per claim of another provider's pool (metal3)",
            foreign_kept,
        ),
    ]) {
        println!(
            "  {label:<width$}  {:>7.0}  {:>5.1}",
            per.bytes, per.allocations
        );
    }
    black_box((cache, registry, foreign_cache));
    pools_section();
}

/// Pools measured: `INPOOL_BENCH_POOLS`, else 1,000.
fn pools_count() -> usize {
    std::env::var("INPOOL_BENCH_POOLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000)
}

/// Pool `j` of a fleet: one namespace each, a /64 each, applied with kubectl (its last applied
/// manifest in an annotation), its status as inpool writes it, and the managed fields of the
/// two writers, as the API server serves it.
fn fleet_pool(j: usize) -> InClusterIPPool {
    let condition = |type_: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": "2026-11-30T10:00:01Z", "observedGeneration": 1})
    };
    let (name, namespace) = (format!("pool-{j:04}"), format!("fleet-edge-{j:04}"));
    let spec = json!({"addresses": [format!("fd00:0:0:{j:x}::/64")], "prefix": 64});
    let last_applied = json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "metadata": {"annotations": {}, "name": name, "namespace": namespace}, "spec": spec});
    let managed = |manager: &str, operation: &str, subresource: Option<&str>, fields: Value| {
        json!({"manager": manager, "operation": operation, "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2",
            "time": "2026-11-30T10:00:01Z", "fieldsType": "FieldsV1", "subresource": subresource,
            "fieldsV1": fields})
    };
    serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "metadata": {"name": name, "namespace": namespace,
            "uid": format!("7e1c2b9e-0d4a-4b8e-9c3f-{j:012}"), "resourceVersion": format!("{}", 200_000 + j),
            "generation": 1, "creationTimestamp": "2026-11-30T10:00:00Z",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": format!("{last_applied}\n")},
            "finalizers": ["ipam.cluster.x-k8s.io/ProtectPool"],
            "managedFields": [
                managed("kubectl-client-side-apply", "Update", None, json!({"f:metadata": {"f:annotations": {".": {},
                    "f:kubectl.kubernetes.io/last-applied-configuration": {}}}, "f:spec": {".": {}, "f:addresses": {}, "f:prefix": {}}})),
                managed("inpool", "Update", None, json!({"f:metadata": {"f:finalizers": {".": {},
                    "v:\"ipam.cluster.x-k8s.io/ProtectPool\"": {}}}})),
                managed("inpool", "Apply", Some("status"), json!({"f:status": {"f:conditions": {}, "f:ipAddresses": {
                    "f:free": {}, "f:outOfRange": {}, "f:total": {}, "f:used": {}}}}))]},
        "spec": spec,
        "status": {"ipAddresses": {"total": i64::MAX, "used": 10, "free": i64::MAX, "outOfRange": 0},
            "conditions": [
                condition("Ready", "Ready", "the spec is valid; addresses are handed out"),
                condition("AddressesAvailable", "AddressesAvailable", "18446744073709551606 of 18446744073709551616 addresses are free"),
                condition("Overlap", "NoOverlap", "no other pool reachable from the same claims shares an address"),
                condition("AddressesInRange", "AllAddressesInRange", ""),
                condition("ForeignAddresses", "NoForeignAddresses", "no IPAddress of the pool was created by another writer since inpool started")]}
    }))
    .expect("a valid pool")
}

/// Live heap per pool of what inpool keeps for each pool it serves, over a fleet of small pools.
fn pools_section() {
    let count = pools_count();
    let pools: Vec<InClusterIPPool> = (0..count).map(fleet_pool).collect();
    let (store, kept_store) = per_claim(count, || footprint::pool_cache(&pools));
    assert_eq!(kept_store.len(), count, "a view of every pool");
    let (registry, kept_registry) = per_claim(count, || RegistryFootprint::with_pools(&pools));
    let (metrics, kept_metrics) = per_claim(count, || footprint::pool_metrics(&pools));
    let (served, kept_served) = per_claim(count, || {
        let mut registry = RegistryFootprint::with_pools(&pools);
        registry.serve_one_claim_each(&pools);
        registry
    });
    let lines = [
        ("pool cache (a view of each pool)", store),
        ("registry (entry, allocator, index)", registry),
        ("metrics (a pool's series)", metrics),
    ];
    println!("live heap per pool, over {count} pools: bytes, allocations");
    let total = lines.iter().fold(
        PerClaim {
            bytes: 0.0,
            allocations: 0.0,
        },
        |sum, (_, per)| sum + *per,
    );
    let served = ("registry once each pool served a claim", served);
    for (label, per) in lines.iter().chain([&("kept per pool", total), &served]) {
        println!(
            "  {label:<39}  {:>7.0}  {:>5.1}",
            per.bytes, per.allocations
        );
    }
    black_box((kept_store, kept_registry, kept_metrics, kept_served));
}
