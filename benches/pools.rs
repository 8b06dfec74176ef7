//! The claim path's registry work against the number of pools: what a claim's holds cost when
//! the registry knows 100, 1,000 or 5,000 pools. Each claim is a reservation and an `IPAddress`,
//! recorded as the watches record them and then let go (their deletion): every hold and release
//! looks for the pools the address meets (through an index by range; it used to look at every
//! pool, O(pools) per claim).
//!
//! Run: `cargo bench --bench pools -- --warm-up-time 1 --measurement-time 3`. The pools are
//! `InClusterIPPool`s of one namespace (all reachable together, the most the overlap check can
//! have to consider), each a /64 of its own; the claims are spread over them.
use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};

use criterion::{BatchSize, Criterion, Throughput};
use inpool::api::reservation::IPAddressReservation;
use inpool::api::{IPAddress, InClusterIPPool};
use inpool::controllers::footprint::RegistryFootprint;
use serde_json::json;

const NAMESPACE: &str = "fleet";
const CLAIMS: usize = 1_000;

fn pool_name(j: usize) -> String {
    format!("pool-{j:04}")
}

fn pool(j: usize) -> InClusterIPPool {
    serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "metadata": {"name": pool_name(j), "namespace": NAMESPACE},
        "spec": {"addresses": [format!("fd00:0:0:{j:x}::/64")], "prefix": 64}
    }))
    .expect("a valid pool")
}

/// Claim `i`'s address: the `i / pools`-th host of pool `i % pools`.
fn address_of(i: usize, pools: usize) -> (usize, IpAddr) {
    let j = i % pools;
    let host = (i / pools + 1) as u16;
    let ip = Ipv6Addr::new(0xfd00, 0, 0, j as u16, 0, 0, 0, host);
    (j, IpAddr::V6(ip))
}

fn objects(pools: usize) -> (Vec<IPAddressReservation>, Vec<IPAddress>) {
    (0..CLAIMS)
        .map(|i| {
            let (j, ip) = address_of(i, pools);
            let claim = format!("claim-{i:05}");
            let reservation = serde_json::from_value(json!({
                "apiVersion": "ipam.inpool.dev/v1alpha1", "kind": "IPAddressReservation",
                "metadata": {"name": format!("r-{i:05}.ns.{NAMESPACE}")},
                "spec": {"address": ip.to_string(), "poolKind": "InClusterIPPool",
                    "poolNamespace": NAMESPACE, "poolName": pool_name(j),
                    "claimNamespace": NAMESPACE, "claimName": claim,
                    "claimUID": format!("6f1c2b9e-0d4a-4b8e-9c3f-{i:012}")}
            }))
            .expect("a valid reservation");
            let address = serde_json::from_value(json!({
                "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
                "metadata": {"name": claim, "namespace": NAMESPACE},
                "spec": {"address": ip.to_string(), "prefix": 64,
                    "claimRef": {"name": claim},
                    "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": pool_name(j)}}
            }))
            .expect("a valid IPAddress");
            (reservation, address)
        })
        .unzip()
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("claims_across_pools");
    group.throughput(Throughput::Elements(CLAIMS as u64));
    for pools in [100, 1_000, 5_000] {
        let fleet: Vec<InClusterIPPool> = (0..pools).map(pool).collect();
        let (reservations, addresses) = objects(pools);
        group.bench_function(
            format!("{CLAIMS} claims held and let go, {pools} pools"),
            |b| {
                b.iter_batched_ref(
                    || RegistryFootprint::with_pools(&fleet),
                    |registry| {
                        let held = registry.hold(&reservations, &addresses);
                        assert_eq!(held, 2 * CLAIMS);
                        registry.let_go(&reservations, &addresses);
                        black_box(registry);
                    },
                    BatchSize::LargeInput,
                );
            },
        );
    }
    group.finish();
    criterion.final_summary();
}
