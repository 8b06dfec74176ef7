//! The API server and inpool agree on every pool spec: generated specs, valid and invalid and
//! near the edges, are sent to the real API server (a dry-run create, so the CRD's CEL rules judge
//! them) and to inpool's parser (what a pool's `Ready` condition reports). Each spec the API
//! server accepts, inpool accepts; each it refuses comes with a message that names a field of
//! `spec`. The other way round, a spec the parser accepts may be refused by the API server only
//! where docs/pools.md says the CRD is the stricter (none today).
//!
//! - IP pools (`InClusterIPPool`; the global kind has the same spec and rules): prefix lengths 0,
//!   1, 31, 32, 33; network and broadcast addresses; ranges reversed or spanning the subnet's
//!   end; gateways inside, outside, of the other family or not an address; text that is almost
//!   an address.
//! - Prefix pools (`InClusterPrefixPool`, likewise), IPv6 and IPv4: prefixes of every length
//!   near the allocation length, aligned or with host bits set, of the other family,
//!   IPv4-mapped, zoned or not a CIDR; allocation lengths 0 to 129, and the IPv6 default on IPv4
//!   prefixes; gateways inside, outside or of the other family; exclusions of every form.
//!
//! proptest shrinks a disagreement to its smallest spec before the test fails with it.

use std::sync::{Arc, Mutex};

use inpool::allocator::{PoolSpecInput, PrefixPoolSpecInput};
use inpool::api::{InClusterIPPoolSpec, InClusterPrefixPoolSpec};
use inpool_testenv::support;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};

/// Addresses near the edges of 10.0.0.0/24 and its neighbours, and texts that are almost one.
fn address() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(vec![0u8, 1, 2, 5, 127, 128, 254, 255])
            .prop_map(|host| format!("10.0.0.{host}")),
        1 => prop::sample::select(vec![0u8, 1, 255]).prop_map(|host| format!("10.0.1.{host}")),
        1 => prop::sample::select(vec![
            "10.0.0.256", "10.0.0.01", " 10.0.0.1", "10.0.0", "", "fd00::1", "::ffff:10.0.0.1",
            "10.0.0.1%eth0",
        ])
        .prop_map(str::to_string),
    ]
}

/// An `addresses` entry: an address, a CIDR, or a `first-last` range (perhaps reversed).
fn entry() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => address(),
        2 => (address(), prop::sample::select(vec![0u8, 1, 8, 24, 25, 30, 31, 32, 33]))
            .prop_map(|(a, len)| format!("{a}/{len}")),
        3 => (address(), address()).prop_map(|(a, b)| format!("{a}-{b}")),
        2 => Just("10.0.0.10-10.0.0.20".to_string()),
    ]
}

/// An address of 10.0.0.0/`prefix` near its edges: its first, second, middle, second last and
/// last (for prefixes 8 to 32).
fn inside(prefix: i64) -> impl Strategy<Value = String> {
    let size: u32 = 1 << (32 - prefix.clamp(8, 32));
    let last = size - 1;
    prop::sample::select(vec![0, 1.min(last), size / 2, last.saturating_sub(1), last])
        .prop_map(|offset| std::net::Ipv4Addr::from(0x0a00_0000u32 + offset).to_string())
}

/// An `addresses` entry inside 10.0.0.0/`prefix`: an address or a range of two.
fn entry_inside(prefix: i64) -> impl Strategy<Value = String> {
    prop_oneof![
        inside(prefix),
        (inside(prefix), inside(prefix)).prop_map(|(a, b)| format!("{a}-{b}")),
    ]
}

/// An IP pool's spec, as JSON: a prefix, then entries mostly inside its subnet and some of any
/// kind, a gateway inside or of any kind, perhaps exclusions.
fn spec() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => Just(24i64),
        3 => prop::sample::select(vec![8i64, 16, 30, 31, 32]),
        1 => prop::sample::select(vec![0i64, 1, 23, 25, 33, 64]),
    ]
    .prop_flat_map(|prefix| {
        (
            Just(prefix),
            prop::collection::vec(prop_oneof![3 => entry_inside(prefix), 1 => entry()], 0..4),
            prop::option::of(prop_oneof![2 => inside(prefix), 1 => address()]),
            prop::collection::vec(entry(), 0..2),
            any::<bool>(),
        )
    })
    .prop_map(|(prefix, addresses, gateway, excluded, reserved)| {
        let mut spec = json!({"addresses": addresses, "prefix": prefix});
        if let Some(gateway) = gateway {
            spec["gateway"] = json!(gateway);
        }
        if !excluded.is_empty() {
            spec["excludedAddresses"] = json!(excluded);
        }
        if reserved {
            spec["allocateReservedIPAddresses"] = json!(true);
        }
        spec
    })
}

/// What a prefix pool's spec of one family is generated from.
struct PrefixPieces {
    /// Aligned CIDRs near each other: mostly valid entries.
    aligned: &'static [&'static str],
    /// Addresses, with host bits or without, and lengths near the edges, to make CIDRs of.
    addresses: &'static [&'static str],
    lengths: &'static [u8],
    /// Text that is almost an entry, or one of the other family.
    almost: &'static [&'static str],
    /// `excludedPrefixes` entries beside the forms above: addresses and ranges.
    excluded: &'static [&'static str],
    /// Allocation lengths that fit the family, and some at or past its edges.
    lengths_that_fit: &'static [i64],
    edge_lengths: &'static [i64],
    gateways: &'static [&'static str],
}

/// IPv6, as the reference's prefix pools: fd00::/48's neighbourhood, lengths 0, 1, 127, 128, 129.
const IPV6: PrefixPieces = PrefixPieces {
    aligned: &[
        "fd00::/48",
        "fd00:0:0:1::/64",
        "fd00::/56",
        "2001:db8::/32",
        "fd00:1::/48",
    ],
    addresses: &["fd00::", "fd00:0:0:1::", "fd00::1", "2001:db8::"],
    lengths: &[0, 1, 16, 47, 48, 56, 63, 64, 65, 127, 128, 129],
    almost: &[
        "fd00::",
        "10.0.0.0/8",
        "::ffff:10.0.0.0/104",
        "fd00::/048",
        "fe80::%eth0/64",
        " fd00::/48",
        "fd00::-fd00::ffff",
        "",
        "fd00::/",
    ],
    excluded: &[
        "fd00::5",
        "fd00::-fd00::ffff",
        "fd00:0:0:1::-fd00::",
        "10.0.0.1",
        "::ffff:10.0.0.1",
    ],
    lengths_that_fit: &[64, 56, 128],
    edge_lengths: &[0, 1, 24, 32, 47, 48, 65, 96, 129],
    gateways: &[
        "fd00::1",
        "fd00::",
        "2001:db8::1",
        "10.0.0.1",
        "",
        "fe80::1%eth0",
        "::ffff:10.0.0.1",
    ],
};

/// IPv4, which inpool adds: 10.0.0.0/16's neighbourhood, lengths 0, 1, 31, 32, 33, and the IPv6
/// default (64) when the length is left out.
const IPV4: PrefixPieces = PrefixPieces {
    aligned: &[
        "10.0.0.0/16",
        "10.0.0.0/24",
        "10.0.1.0/24",
        "10.0.0.64/26",
        "192.168.0.0/22",
    ],
    addresses: &["10.0.0.0", "10.0.1.0", "10.0.0.64", "10.0.0.1"],
    lengths: &[0, 1, 8, 16, 24, 25, 26, 31, 32, 33],
    almost: &[
        "10.0.0.0",
        "fd00::/48",
        "10.0.0.0/024",
        "010.0.0.0/16",
        "10.0.0.0-10.0.0.255",
        "10.0.0.0/",
        " 10.0.0.0/24",
    ],
    excluded: &[
        "10.0.0.5",
        "10.0.0.0-10.0.0.63",
        "10.0.1.0-10.0.0.0",
        "fd00::1",
        "::ffff:10.0.0.1",
    ],
    lengths_that_fit: &[24, 26, 32],
    edge_lengths: &[0, 1, 16, 25, 33, 64, 128],
    gateways: &[
        "10.0.0.1",
        "10.0.0.0",
        "192.168.0.1",
        "fd00::1",
        "",
        "10.0.0.256",
    ],
};

/// A prefix pool's entry: mostly an aligned CIDR, else a CIDR near the edges (host bits set,
/// lengths at the family's ends) or text that is almost one.
fn prefix(pieces: &'static PrefixPieces) -> impl Strategy<Value = String> {
    let texts = |list: &'static [&'static str]| {
        prop::sample::select(list.to_vec()).prop_map(str::to_string)
    };
    prop_oneof![
        6 => texts(pieces.aligned),
        3 => (
            prop::sample::select(pieces.addresses.to_vec()),
            prop::sample::select(pieces.lengths.to_vec()),
        )
            .prop_map(|(a, len)| format!("{a}/{len}")),
        1 => texts(pieces.almost),
    ]
}

/// A prefix pool's `excludedPrefixes` entry: an address, a CIDR or a range.
fn excluded_prefix(pieces: &'static PrefixPieces) -> impl Strategy<Value = String> {
    prop_oneof![
        2 => prefix(pieces),
        1 => prop::sample::select(pieces.excluded.to_vec()).prop_map(str::to_string),
    ]
}

/// A prefix pool's spec, as JSON: one to three prefixes of one family but for some noise (IPv6,
/// as the reference's, or IPv4, which inpool adds), an allocation length (mostly one that fits
/// the family, or left to its default of 64), perhaps a gateway and exclusions.
fn prefix_spec() -> impl Strategy<Value = Value> {
    prop_oneof![prefix_spec_of(&IPV6), prefix_spec_of(&IPV4)]
}

/// A prefix pool's spec from the pieces of one family.
fn prefix_spec_of(pieces: &'static PrefixPieces) -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(prefix(pieces), 1..3),
        prop_oneof![
            3 => prop::option::of(prop::sample::select(pieces.lengths_that_fit.to_vec())),
            1 => prop::sample::select(pieces.edge_lengths.to_vec()).prop_map(Some),
        ],
        prop_oneof![
            3 => Just(None),
            1 => prop::sample::select(pieces.gateways.to_vec()).prop_map(Some),
        ],
        prop::collection::vec(excluded_prefix(pieces), 0..2),
    )
        .prop_map(|(prefixes, length, gateway, excluded)| {
            let mut spec = json!({ "prefixes": prefixes });
            if let Some(length) = length {
                spec["allocationPrefixLength"] = json!(length);
            }
            if let Some(gateway) = gateway {
                spec["gateway"] = json!(gateway);
            }
            if !excluded.is_empty() {
                spec["excludedPrefixes"] = json!(excluded);
            }
            spec
        })
}

/// The API server's verdict on `spec` for a pool of `kind`: `Ok` or the message of its refusal.
async fn api_server_verdict(
    pools: &Api<DynamicObject>,
    kind: &str,
    spec: &Value,
) -> Result<(), String> {
    let pool: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2",
        "kind": kind,
        "metadata": {"name": "agreement"},
        "spec": spec,
    }))
    .expect("a pool object");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match pools.create(&dry_run, &pool).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 422 => Err(status.message),
        Err(e) => panic!("the API server did not judge the spec: {e}"),
    }
}

/// inpool's verdict on an IP pool's `spec`: `Ok` or the errors its pool condition would report.
fn ip_pool_verdict(spec: &Value) -> Result<(), String> {
    let spec: InClusterIPPoolSpec =
        serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}"))?;
    PoolSpecInput::from(&spec)
        .parse()
        .map(drop)
        .map_err(|e| e.to_string())
}

/// inpool's verdict on a prefix pool's `spec`.
fn prefix_pool_verdict(spec: &Value) -> Result<(), String> {
    let spec: InClusterPrefixPoolSpec =
        serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}"))?;
    PrefixPoolSpecInput::from(&spec)
        .parse()
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Sends 400 specs of `strategy` to the API server (as pools of `kind`) and to `parser`, and
/// fails at the first disagreement, shrunk; also when the generator reaches only one side.
async fn agree(
    kind: &str,
    strategy: impl Strategy<Value = Value>,
    parser: fn(&Value) -> Result<(), String>,
) {
    let env = support::env();
    let (client, ns) = env.namespace().await;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "ipam.cluster.x-k8s.io",
        "v1alpha2",
        kind,
    ));
    let pools: Api<DynamicObject> = Api::namespaced_with(client, &ns, &resource);
    let judged = Arc::new(Mutex::new((0usize, 0usize)));
    let mut runner = TestRunner::new(Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    });
    let handle = tokio::runtime::Handle::current();
    let result = tokio::task::block_in_place(|| {
        runner.run(&strategy, |spec| {
            let server = handle.block_on(api_server_verdict(&pools, kind, &spec));
            let inpool = parser(&spec);
            {
                let mut judged = judged.lock().unwrap();
                if server.is_ok() {
                    judged.0 += 1;
                } else {
                    judged.1 += 1;
                }
            }
            match (&server, &inpool) {
                (Ok(()), Err(why)) => Err(TestCaseError::fail(format!(
                    "the API server accepts {spec}, inpool refuses it: {why}"
                ))),
                (Err(message), Ok(())) => Err(TestCaseError::fail(format!(
                    "the API server refuses {spec} ({message}), inpool accepts it"
                ))),
                (Err(message), Err(_)) if !message.contains("spec.") => Err(TestCaseError::fail(
                    format!("the refusal of {spec} names no field of spec: {message}"),
                )),
                _ => Ok(()),
            }
        })
    });
    let (accepted, refused) = *judged.lock().unwrap();
    eprintln!("{kind}: judged {accepted} specs accepted and {refused} refused by both");
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        accepted >= 20 && refused >= 20,
        "the generator reaches both sides: {accepted} accepted, {refused} refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_and_inpool_agree_on_generated_ip_pool_specs() {
    agree("InClusterIPPool", spec(), ip_pool_verdict).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_and_inpool_agree_on_generated_prefix_pool_specs() {
    agree("InClusterPrefixPool", prefix_spec(), prefix_pool_verdict).await;
}
