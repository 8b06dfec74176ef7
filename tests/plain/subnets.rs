//! Pools that span subnets (`spec.additionalSubnets`) on the real control plane: claims are
//! realised subnet by subnet in the order written, each `IPAddress` carrying the prefix and
//! gateway of the subnet its address came from; the status counts and the pool's gauges add up
//! across subnets; a two-subnet pool exhausted and then grown serves the claim that waited; a
//! pre-allocation may name an address of any subnet; a subnet overlapping another pool shares its
//! addresses through the same holds as any overlapping pool; and the largest list of subnets fits
//! the CEL budget. The CEL rules on each subnet are in the invalid corpus
//! (`tests/data/pools/invalid/*subnet*`).

use std::collections::BTreeSet;
use std::time::Duration;

use inpool::api::{
    AdditionalSubnet, GlobalInClusterIPPool, IPAddress, IPAddressClaim, IPAddressesStatus,
    InClusterIPPool, MAX_ADDITIONAL_SUBNETS, MAX_SUBNET_ADDRESS_ENTRIES, PreAllocation,
};
use inpool_testenv::{common, support};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use common::*;

/// The pool's status counts: (total, used, free, outOfRange).
async fn wait_counts<K>(pools: &Api<K>, name: &str, want: (i64, i64, i64, i64))
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + HasPoolStatus,
{
    wait_for(
        &format!("pool {name} to count {want:?}"),
        Duration::from_secs(60),
        || async {
            let pool = pools.get(name).await.ok()?;
            let IPAddressesStatus {
                total,
                used,
                free,
                out_of_range,
            } = pool.counts()?;
            ((total, used, free, out_of_range) == want).then_some(())
        },
    )
    .await;
}

trait HasPoolStatus {
    fn counts(&self) -> Option<IPAddressesStatus>;
}

impl HasPoolStatus for InClusterIPPool {
    fn counts(&self) -> Option<IPAddressesStatus> {
        self.status.as_ref()?.ip_addresses
    }
}

impl HasPoolStatus for GlobalInClusterIPPool {
    fn counts(&self) -> Option<IPAddressesStatus> {
        self.status.as_ref()?.ip_addresses
    }
}

/// The `IPAddress` of a claim: (address, prefix, gateway).
async fn address_of(addresses: &Api<IPAddress>, claim: &str) -> (String, i32, Option<String>) {
    let address = addresses.get(claim).await.unwrap();
    (
        address.spec.address,
        address.spec.prefix,
        address.spec.gateway,
    )
}

/// Waits until the gauges of pool `p` read (size, used, free).
async fn wait_gauges(controller: &RunningController, ns: &str, want: (f64, f64, f64)) {
    let labels = format!(r#"{{pool_kind="InClusterIPPool",pool_namespace="{ns}",pool_name="p"}}"#);
    wait_for(
        &format!("the gauges of pool p to read {want:?}"),
        Duration::from_secs(30),
        || async {
            let metrics = controller.metrics();
            let gauge = |name: &str| sample(&metrics, &format!("inpool_pool_{name}{labels}"));
            ((gauge("size"), gauge("used"), gauge("free"))
                == (Some(want.0), Some(want.1), Some(want.2)))
                .then_some(())
        },
    )
    .await;
}

fn network(address: &str, prefix: i32, gateway: &str) -> (String, i32, Option<String>) {
    (address.to_string(), prefix, Some(gateway.to_string()))
}

#[tokio::test]
async fn claims_take_the_prefix_and_gateway_of_their_subnet_and_an_exhausted_pool_grows() {
    let (client, ns) = support::env().namespace().await;
    let controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);

    // The issue's shape: a /22 and a /23, each with its own gateway. The additional subnet is
    // written second but numerically lower: addresses still come from the pool's own first.
    let mut spec = pool("p", &["100.96.32.1-100.96.32.2"], 22, Some("100.96.32.254")).spec;
    spec.additional_subnets = Some(vec![AdditionalSubnet::new(
        ["100.90.254.1-100.90.254.2"],
        23,
        Some("100.90.254.254"),
    )]);
    create(&pools, &InClusterIPPool::new("p", spec)).await;
    wait_counts(&pools, "p", (4, 0, 4, 0)).await;

    for i in 0..4 {
        let name = format!("c{i}");
        create(&claims, &claim(&name, "p")).await;
        wait_reason(&claims, &name, "AddressAllocated").await;
    }
    for (claim, address, prefix, gateway) in [
        ("c0", "100.96.32.1", 22, "100.96.32.254"),
        ("c1", "100.96.32.2", 22, "100.96.32.254"),
        ("c2", "100.90.254.1", 23, "100.90.254.254"),
        ("c3", "100.90.254.2", 23, "100.90.254.254"),
    ] {
        assert_eq!(
            address_of(&addresses, claim).await,
            network(address, prefix, gateway),
            "claim {claim}"
        );
    }
    wait_counts(&pools, "p", (4, 4, 0, 0)).await;
    wait_gauges(&controller, &ns, (4.0, 4.0, 0.0)).await;

    // kubectl inpool: the pool says it spans two subnets; a claim and the holder of an address
    // show the prefix (and gateway) of the subnet it came from.
    let snapshot = inpool::inspect::Snapshot::fetch(&client, Some(&ns))
        .await
        .unwrap();
    let row = snapshot.pools.iter().find(|p| p.name == "p").unwrap();
    assert_eq!(row.family, "IPv4 (2 subnets)");
    let c2 = snapshot.claims.iter().find(|c| c.name == "c2").unwrap();
    assert_eq!(c2.address.as_deref(), Some("100.90.254.1/23"));
    let holders = inpool::inspect::who_has(&client, "100.90.254.1".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(
        holders
            .iter()
            .map(|h| (h.claim.as_str(), h.prefix, h.gateway.as_deref()))
            .collect::<Vec<_>>(),
        [("c2", Some(23), Some("100.90.254.254"))]
    );

    // Exhausted: the next claim waits, and is served once a third subnet is added.
    create(&claims, &claim("c4", "p")).await;
    wait_reason(&claims, "c4", "PoolExhausted").await;
    let second = json!({"addresses": ["100.90.254.1-100.90.254.2"], "prefix": 23, "gateway": "100.90.254.254"});
    let set_subnets = |subnets: serde_json::Value| {
        let pools = pools.clone();
        async move {
            let patch = json!({"spec": {"additionalSubnets": subnets}});
            pools
                .patch("p", &PatchParams::default(), &Patch::Merge(patch))
                .await
        }
    };
    let refused = set_subnets(json!([second, {"addresses": ["fd00::1"], "prefix": 64}])).await;
    let message = refusal(&refused.expect_err("a subnet of the other family"));
    assert!(
        message.contains(
            "spec.additionalSubnets: Invalid value: fd00::1 is IPv6 but spec.addresses is IPv4"
        ),
        "{message}"
    );
    set_subnets(
        json!([second, {"addresses": ["192.168.7.0/30"], "prefix": 24, "gateway": "192.168.7.1"}]),
    )
    .await
    .unwrap();
    wait_reason(&claims, "c4", "AddressAllocated").await;
    // 192.168.7.0 is the network address and .1 the gateway: .2 is the first handed out.
    assert_eq!(
        address_of(&addresses, "c4").await,
        network("192.168.7.2", 24, "192.168.7.1")
    );
    wait_counts(&pools, "p", (6, 5, 1, 0)).await;
    wait_gauges(&controller, &ns, (6.0, 5.0, 1.0)).await;

    // A released address of the pool's own subnet is the next one handed out, before the free
    // address of the third subnet.
    delete_and_wait_gone(&claims, "c1").await;
    wait_counts(&pools, "p", (6, 4, 2, 0)).await;
    create(&claims, &claim("c5", "p")).await;
    wait_reason(&claims, "c5", "AddressAllocated").await;
    assert_eq!(
        address_of(&addresses, "c5").await,
        network("100.96.32.2", 22, "100.96.32.254")
    );
}

#[tokio::test]
async fn a_pre_allocation_in_another_subnet_of_a_global_pool_carries_that_subnets_gateway() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let globals: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    let name = unique("subnets");
    let mut global = global_pool(&name, &["10.70.0.10-10.70.0.19"], 24);
    global.spec.gateway = Some("10.70.0.1".into());
    global.spec.additional_subnets = Some(vec![AdditionalSubnet::new(
        ["10.71.0.0/28"],
        28,
        Some("10.71.0.14"),
    )]);
    global.spec.pre_allocations = Some(vec![PreAllocation::in_namespace(
        ns.as_str(),
        "vm-0-0-0",
        "10.71.0.5",
    )]);
    create(&globals, &global).await;
    // 10 + 16 - network - broadcast - gateway = 23; the pre-allocated address counts as used.
    wait_counts(&globals, &name, (23, 1, 22, 0)).await;

    create(&claims, &global_claim("vm-0-0-0", &name)).await;
    create(&claims, &global_claim("other", &name)).await;
    wait_reason(&claims, "vm-0-0-0", "AddressAllocated").await;
    wait_reason(&claims, "other", "AddressAllocated").await;
    assert_eq!(
        address_of(&addresses, "vm-0-0-0").await,
        network("10.71.0.5", 28, "10.71.0.14")
    );
    assert_eq!(
        address_of(&addresses, "other").await,
        network("10.70.0.10", 24, "10.70.0.1")
    );
    wait_counts(&globals, &name, (23, 2, 21, 0)).await;

    for claim in ["vm-0-0-0", "other"] {
        delete_and_wait_gone(&claims, claim).await;
    }
    globals
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_subnet_overlapping_another_pool_never_hands_out_its_addresses_twice() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);

    // `flat` holds 10.63.0.10-11; `spanning`'s second subnet covers 10.63.0.10-12.
    create(
        &pools,
        &pool("flat", &["10.63.0.10-10.63.0.11"], 24, Some("10.63.0.1")),
    )
    .await;
    let mut spanning = pool("spanning", &["10.64.0.10"], 24, Some("10.64.0.1"));
    spanning.spec.additional_subnets = Some(vec![AdditionalSubnet::new(
        ["10.63.0.10-10.63.0.12"],
        24,
        Some("10.63.0.1"),
    )]);
    create(&pools, &spanning).await;

    create(&claims, &claim("a0", "flat")).await;
    wait_reason(&claims, "a0", "AddressAllocated").await;
    for name in ["b0", "b1", "b2"] {
        create(&claims, &claim(name, "spanning")).await;
        wait_reason(&claims, name, "AddressAllocated").await;
    }
    create(&claims, &claim("a1", "flat")).await;
    wait_reason(&claims, "a1", "PoolExhausted").await;

    let held = addresses_by_claim(&client, &ns).await;
    assert_eq!(held.get("a0").map(String::as_str), Some("10.63.0.10"));
    assert_eq!(held.get("b0").map(String::as_str), Some("10.64.0.10"));
    assert_eq!(held.get("b1").map(String::as_str), Some("10.63.0.11"));
    assert_eq!(held.get("b2").map(String::as_str), Some("10.63.0.12"));
    let unique: BTreeSet<&String> = held.values().collect();
    assert_eq!(unique.len(), held.len(), "an address held twice: {held:?}");
    // Each pool counts what the other holds in its range as used.
    wait_counts(&pools, "flat", (2, 2, 0, 0)).await;
    wait_counts(&pools, "spanning", (4, 4, 0, 0)).await;

    // Releasing b1 serves the claim waiting in `flat`.
    claims.delete("b1", &DeleteParams::default()).await.unwrap();
    wait_reason(&claims, "a1", "AddressAllocated").await;
    assert_eq!(
        addresses_by_claim(&client, &ns)
            .await
            .get("a1")
            .map(String::as_str),
        Some("10.63.0.11")
    );
}

/// The largest `additionalSubnets` the CRD allows (every subnet full of IPv6 ranges written out
/// in full, the costliest text for the rules) passes the API server's runtime CEL budget; one
/// subnet more is refused by the schema.
#[tokio::test]
async fn the_largest_list_of_subnets_fits_and_one_more_is_refused() {
    let (client, ns) = support::env().namespace().await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let subnet = |i: usize| {
        let range = |j: usize| {
            format!(
                "2001:0db8:0000:{i:04x}:0000:0000:{j:04x}:0000-2001:0db8:0000:{i:04x}:0000:0000:{j:04x}:00ff"
            )
        };
        let gateway = format!("2001:0db8:0000:{i:04x}:0000:0000:0000:0001");
        AdditionalSubnet::new(
            (1..=MAX_SUBNET_ADDRESS_ENTRIES).map(range),
            64,
            Some(&gateway),
        )
    };
    let mut largest = pool("largest", &["2001:db8::10"], 64, Some("2001:db8::1"));
    largest.spec.additional_subnets = Some((1..=MAX_ADDITIONAL_SUBNETS).map(subnet).collect());
    pools
        .create(&PostParams::default(), &largest)
        .await
        .unwrap_or_else(|e| panic!("{MAX_ADDITIONAL_SUBNETS} full subnets are refused: {e}"));

    let mut too_many = largest.clone();
    too_many.metadata.name = Some("too-many".into());
    if let Some(subnets) = too_many.spec.additional_subnets.as_mut() {
        subnets.push(subnet(MAX_ADDITIONAL_SUBNETS + 1));
    }
    let err = pools
        .create(&PostParams::default(), &too_many)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("spec.additionalSubnets: Too many"),
        "{err}"
    );
}
