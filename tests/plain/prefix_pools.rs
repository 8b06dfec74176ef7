//! Prefix pools (`InClusterPrefixPool`, `GlobalInClusterPrefixPool`) on the real API server: the
//! reference's examples are accepted (and defaulted as by the reference), IPv4 prefixes too (the
//! reference's are IPv6 only), and every rule of the reference's webhook that one object can
//! decide refuses with a message naming the field, as CEL rules in inpool's CRDs, with the rules
//! of one family per pool. Then claims on them, served by an in-process controller: the
//! reference's allocations, exhaustion, growth, release, exclusion, deletion protection, the
//! global kind across namespaces and two controllers at once. Every controller test ends with the
//! audit's drift guard (`common::RunningController`).

use std::collections::BTreeSet;
use std::time::Duration;

use inpool::api::{
    GlobalInClusterPrefixPool, GlobalInClusterPrefixPoolSpec, IPAddress, IPAddressClaim,
    IPAddressesStatus, InClusterIPPoolStatus, InClusterPrefixPool, InClusterPrefixPoolSpec,
};
use inpool_testenv::{common, support};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use common::*;

fn pool(name: &str, spec: Value) -> InClusterPrefixPool {
    serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterPrefixPool",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn untyped(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterPrefixPool",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn the_references_examples_are_accepted_and_the_length_defaults_to_64() {
    let (client, ns) = support::env().namespace().await;
    let pools: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), &ns);
    let accepted = [
        ("quarter", json!({"prefixes": ["fd00::/62"]})),
        (
            "by-56",
            json!({"prefixes": ["fd06::/48"], "allocationPrefixLength": 56}),
        ),
        (
            "two",
            json!({"prefixes": ["fd00:0:0:1::/64", "fd10::/48"], "gateway": "fd00::1"}),
        ),
        (
            "excluding",
            json!({
                "prefixes": ["fd20::/48"],
                "excludedPrefixes": ["fd20::1", "fd20:0:0:2::/64", "fd20:0:0:5::-fd20:0:0:7::ffff"],
            }),
        ),
        (
            "single",
            json!({"prefixes": ["fd30::/64"], "allocationPrefixLength": 64}),
        ),
        (
            "hosts",
            json!({"prefixes": ["2001:db8::/120"], "allocationPrefixLength": 128}),
        ),
    ];
    for (name, spec) in accepted {
        let created = pools
            .create(&PostParams::default(), &pool(name, spec.clone()))
            .await
            .unwrap_or_else(|e| panic!("{name} ({spec}) refused: {e}"));
        let expected = spec["allocationPrefixLength"].as_i64().unwrap_or(64) as i32;
        assert_eq!(
            created.spec.allocation_prefix_length,
            Some(expected),
            "{name}"
        );
        assert_eq!(created.spec.allocation_length(), expected);
    }

    // The global kind: cluster-scoped, same spec and rules.
    let global: Api<GlobalInClusterPrefixPool> = Api::all(client.clone());
    let name = format!("{ns}-global");
    let created = global
        .create(
            &PostParams::default(),
            &GlobalInClusterPrefixPool::new(
                &name,
                GlobalInClusterPrefixPoolSpec(InClusterPrefixPoolSpec::new(["fd40::/48"])),
            ),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.namespace, None);
    assert_eq!(created.spec.allocation_length(), 64);
    // IPv4 prefixes, which the reference refuses, with an IPv4 length and gateway.
    let mut v4 = InClusterPrefixPoolSpec::new(["10.0.0.0/8"]);
    v4.allocation_prefix_length = Some(26);
    v4.gateway = Some("10.0.0.1".into());
    v4.excluded_prefixes = Some(vec!["10.0.0.0-10.0.0.63".into()]);
    let created = global
        .create(
            &PostParams::default(),
            &GlobalInClusterPrefixPool::new(
                &format!("{name}-v4"),
                GlobalInClusterPrefixPoolSpec(v4.clone()),
            ),
        )
        .await
        .expect("an IPv4 global prefix pool");
    assert_eq!(created.spec.0, v4);
    global.delete(&name, &Default::default()).await.unwrap();
    global
        .delete(&format!("{name}-v4"), &Default::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn what_the_references_webhook_refuses_is_refused_with_a_message_naming_the_field() {
    let (client, ns) = support::env().namespace().await;
    // Untyped: some of these specs are not even representable in the Rust type.
    let pools: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::erase::<InClusterPrefixPool>(&()),
    );
    let refused = [
        (json!({}), "spec.prefixes: Required value"),
        (
            json!({"prefixes": []}),
            "spec.prefixes: Invalid value: at least one CIDR is required",
        ),
        (
            json!({"prefixes": ["10.0.0.0/24"]}),
            "spec.allocationPrefixLength: Invalid value: 64 is longer than 32, the longest IPv4 sub-prefix (64 is the default, for IPv6 prefixes: set it for IPv4 ones, such as 26)",
        ),
        (
            json!({"prefixes": ["10.0.0.0/24"], "allocationPrefixLength": 33}),
            "spec.allocationPrefixLength: Invalid value: 33 is longer than 32, the longest IPv4 sub-prefix",
        ),
        (
            json!({"prefixes": ["fd00::/48", "10.0.0.0/24"]}),
            "spec.prefixes: Invalid value: 10.0.0.0/24 is IPv4 but the first entry fd00::/48 is IPv6: a pool holds prefixes of one family",
        ),
        (
            json!({"prefixes": ["10.0.0.0/16", "fd00::/48"], "allocationPrefixLength": 24}),
            "spec.prefixes: Invalid value: fd00::/48 is IPv6 but the first entry 10.0.0.0/16 is IPv4: a pool holds prefixes of one family",
        ),
        (
            json!({"prefixes": ["fd00::"]}),
            "spec.prefixes[0]: Invalid value: \"fd00::\": must be a CIDR",
        ),
        (
            json!({"prefixes": ["fd00::/48", "nonsense"]}),
            "spec.prefixes[1]: Invalid value: \"nonsense\": must be a CIDR",
        ),
        (
            json!({"prefixes": ["10.0.0.1/24"], "allocationPrefixLength": 26}),
            "spec.prefixes[0]: Invalid value: \"10.0.0.1/24\": must be network-aligned",
        ),
        (
            json!({"prefixes": ["10.0.0.0/28"], "allocationPrefixLength": 26}),
            "spec.prefixes: Invalid value: 10.0.0.0/28 is longer than spec.allocationPrefixLength (26)",
        ),
        (
            json!({"prefixes": ["fd00::1/48"]}),
            "spec.prefixes[0]: Invalid value: \"fd00::1/48\": must be network-aligned",
        ),
        (
            json!({"prefixes": ["fd00::/72"]}),
            "spec.prefixes: Invalid value: fd00::/72 is longer than spec.allocationPrefixLength (64)",
        ),
        (
            json!({"prefixes": ["fd00::/48", "fd01::/60"], "allocationPrefixLength": 56}),
            "spec.prefixes: Invalid value: fd01::/60 is longer than spec.allocationPrefixLength (56)",
        ),
        (
            json!({"prefixes": ["fd00::/48"], "allocationPrefixLength": 0}),
            "spec.allocationPrefixLength",
        ),
        (
            json!({"prefixes": ["fd00::/48"], "allocationPrefixLength": 129}),
            "spec.allocationPrefixLength",
        ),
        (
            json!({"prefixes": ["fd00::/48"], "gateway": "10.0.0.1"}),
            "spec.gateway: Invalid value: 10.0.0.1 is IPv4 but spec.prefixes is IPv6",
        ),
        (
            json!({"prefixes": ["10.0.0.0/16"], "allocationPrefixLength": 24, "gateway": "fd00::1"}),
            "spec.gateway: Invalid value: fd00::1 is IPv6 but spec.prefixes is IPv4",
        ),
        (
            json!({"prefixes": ["fd00::/48"], "gateway": "fd00::/64"}),
            "spec.gateway: Invalid value: \"fd00::/64\": must be an IP address",
        ),
        (
            json!({"prefixes": ["fd00::/48"], "excludedPrefixes": ["10.0.0.1"]}),
            "spec.excludedPrefixes: Invalid value: 10.0.0.1 is IPv4 but spec.prefixes is IPv6",
        ),
        (
            json!({"prefixes": ["fd00::/48"], "excludedPrefixes": ["fd00::9-fd00::1"]}),
            "spec.excludedPrefixes[0]: Invalid value: \"fd00::9-fd00::1\": must be an IP address, a CIDR or a first-last range",
        ),
    ];
    for (i, (spec, message)) in refused.into_iter().enumerate() {
        let error = pools
            .create(
                &PostParams::default(),
                &untyped(&format!("bad-{i}"), spec.clone()),
            )
            .await
            .expect_err(&format!("{spec} must be refused"));
        assert!(
            refusal(&error).contains(&refusal(&message)),
            "{spec}: wanted {message:?} in {error}"
        );
    }
}

#[tokio::test]
async fn the_allocation_length_never_changes_but_the_rest_may() {
    let (client, ns) = support::env().namespace().await;
    let pools: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), &ns);
    pools
        .create(
            &PostParams::default(),
            &pool("p", json!({"prefixes": ["fd00::/48"]})),
        )
        .await
        .unwrap();
    let change = |spec: Value| Patch::Merge(json!({ "spec": spec }));
    let error = pools
        .patch(
            "p",
            &PatchParams::default(),
            &change(json!({"allocationPrefixLength": 56})),
        )
        .await
        .expect_err("a new allocation length");
    let message = refusal(&error);
    let expected = "spec.allocationPrefixLength: Invalid value: 56: must stay 64 (it is immutable)";
    assert!(message.contains(&refusal(&expected)), "{message}");
    // Growing the pool, excluding and a gateway are fine.
    let grown = pools
        .patch(
            "p",
            &PatchParams::default(),
            &change(json!({
                "prefixes": ["fd00::/48", "fd01::/48"],
                "excludedPrefixes": ["fd00::/64"],
                "gateway": "fd00::1",
            })),
        )
        .await
        .unwrap();
    assert_eq!(grown.spec.prefixes.len(), 2);
    assert_eq!(grown.spec.allocation_length(), 64);
}

/// `status.ipAddresses` as (total, used, free, outOfRange).
fn counts(status: Option<&InClusterIPPoolStatus>) -> Option<(i64, i64, i64, i64)> {
    let IPAddressesStatus {
        total,
        used,
        free,
        out_of_range,
    } = status?.ip_addresses?;
    Some((total, used, free, out_of_range))
}

/// The status of `type_` in the pool's conditions, with its message.
fn pool_condition(status: Option<&InClusterIPPoolStatus>, type_: &str) -> Option<(String, String)> {
    pool_status_condition(status, type_).map(|c| (c.status.clone(), c.message.clone()))
}

/// Waits until the namespaced prefix pool `name` reports these counts.
async fn wait_pool_counts(
    pools: &Api<InClusterPrefixPool>,
    name: &str,
    want: (i64, i64, i64, i64),
) {
    wait_for(
        &format!("prefix pool {name} to count {want:?}"),
        Duration::from_secs(60),
        || async {
            let pool = pools.get(name).await.ok()?;
            (counts(pool.status.as_ref()) == Some(want)).then_some(())
        },
    )
    .await;
}

/// Creates claim `name` on prefix pool `pool`, waits until it is realised and returns its
/// `IPAddress`.
async fn realise(client: &kube::Client, ns: &str, claim: IPAddressClaim) -> IPAddress {
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    let name = kube::ResourceExt::name_any(&claim);
    create(&claims, &claim).await;
    wait_reason(&claims, &name, "AddressAllocated").await;
    Api::<IPAddress>::namespaced(client.clone(), ns)
        .get(&name)
        .await
        .unwrap()
}

#[tokio::test]
async fn claims_get_the_references_sub_prefixes_in_address_order() {
    // One namespace per example: namespaced pools of one namespace that overlap share holds.
    let examples = [
        (
            json!({"prefixes": ["fd00::/62"], "gateway": "fd00::1"}),
            ["fd00::", "fd00:0:0:1::"],
            64,
            (4, 2, 2, 0),
        ),
        (
            json!({"prefixes": ["fd06::/48"], "allocationPrefixLength": 56}),
            ["fd06::", "fd06:0:0:100::"],
            56,
            (256, 2, 254, 0),
        ),
        (
            json!({"prefixes": ["fd10::/48", "fd00:0:0:1::/64"]}),
            ["fd00:0:0:1::", "fd10::"],
            64,
            (65537, 2, 65535, 0),
        ),
        // IPv4, which the reference's prefix pools refuse: /26s of a /24.
        (
            json!({"prefixes": ["10.1.0.0/24"], "allocationPrefixLength": 26, "gateway": "10.1.0.1"}),
            ["10.1.0.0", "10.1.0.64"],
            26,
            (4, 2, 2, 0),
        ),
    ];
    for (spec, expected, length, pool_counts) in examples {
        let (client, ns) = support::env().namespace().await;
        let _controller = start_controller(&client, &ns);
        let pools: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), &ns);
        create(&pools, &pool("v6", spec.clone())).await;
        for (i, want) in expected.iter().enumerate() {
            // One after the other: the second claim is served after the first holds its own.
            let address = realise(&client, &ns, prefix_claim(&format!("m{i}"), "v6")).await;
            assert_eq!(address.spec.address, *want, "{spec}: claim m{i}");
            assert_eq!(address.spec.prefix, length, "{spec}");
            assert_eq!(
                address.spec.gateway,
                spec["gateway"].as_str().map(str::to_string)
            );
            assert_eq!(address.spec.pool_ref.kind, "InClusterPrefixPool");
            let owners: Vec<String> = address
                .metadata
                .owner_references
                .iter()
                .flatten()
                .map(|o| o.kind.clone())
                .collect();
            assert_eq!(owners, ["IPAddressClaim", "InClusterPrefixPool"]);
        }
        wait_pool_counts(&pools, "v6", pool_counts).await;
        // Reservations are named by the sub-prefix's first address and the namespace.
        let reserved: BTreeSet<String> = reservations_of(&client, &ns).await.into_keys().collect();
        assert_eq!(
            reserved,
            expected.iter().map(|s| s.to_string()).collect(),
            "{spec}"
        );
        let status = pools.get("v6").await.unwrap().status;
        assert_eq!(
            pool_condition(status.as_ref(), "Ready").map(|c| c.0),
            Some("True".to_string())
        );
    }
}

#[tokio::test]
async fn an_existing_ip_address_is_adopted_only_as_an_aligned_sub_prefix_of_the_pools_length() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("v6", json!({"prefixes": ["fd20::/48"]}))).await;
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    // What each claim's IPAddress holds before the claim is reconciled: the whole /48, a
    // misaligned /64, an IPv4 address, and one the reference could have written.
    let existing = [
        ("wide", "fd20::", 48, false),
        ("odd", "fd20::5", 64, false),
        ("v4", "10.0.0.0", 64, false),
        ("fits", "fd20:0:0:7::", 64, true),
    ];
    for (name, address, prefix, _) in existing {
        let object: IPAddress = typed(json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
            "metadata": {"name": name},
            "spec": {
                "address": address, "prefix": prefix,
                "claimRef": {"name": name},
                "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterPrefixPool", "name": "v6"},
            },
        }));
        create(&addresses, &object).await;
        create(&claims, &prefix_claim(name, "v6")).await;
    }
    for (name, address, prefix, fits) in existing {
        if fits {
            let claim = wait_reason(&claims, name, "AddressAllocated").await;
            assert_eq!(
                ready_message(&claim),
                format!("sub-prefix {address}/{prefix} allocated")
            );
            continue;
        }
        let claim = wait_reason(&claims, name, "AllocationFailed").await;
        assert_eq!(
            ready_message(&claim),
            format!(
                "IPAddress {ns}/{name} holds {address}/{prefix}, not a /64 sub-prefix of \
                 InClusterPrefixPool {ns}/v6 (allocationPrefixLength 64); delete it or the claim"
            )
        );
    }
    // Only the sub-prefix that fits is reserved, by its first address.
    let reserved: BTreeSet<String> = reservations_of(&client, &ns).await.into_keys().collect();
    assert_eq!(reserved, BTreeSet::from(["fd20:0:0:7::".to_string()]));
}

#[tokio::test]
async fn an_exhausted_pool_serves_its_waiting_claims_on_release_and_on_growth() {
    let (client, ns) = support::env().namespace().await;
    let controller = start_controller(&client, &ns);
    let pools: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("single", json!({"prefixes": ["fd30::/64"]}))).await;
    let holder = realise(&client, &ns, prefix_claim("holder", "single")).await;
    assert_eq!(holder.spec.address, "fd30::");

    create(&claims, &prefix_claim("waiter", "single")).await;
    let waiting = wait_reason(&claims, "waiter", "PoolExhausted").await;
    let (status, _, address_ref) = ready_of(&waiting).unwrap();
    assert_eq!((status.as_str(), address_ref), ("False", None));
    let message = ready_message(&waiting);
    assert!(
        message.contains("has no free sub-prefix: all 1 of its sub-prefixes are in use")
            && message.contains("spec.prefixes"),
        "{message}"
    );
    wait_pool_counts(&pools, "single", (1, 1, 0, 0)).await;
    let status = pools.get("single").await.unwrap().status;
    assert_eq!(
        pool_condition(status.as_ref(), "AddressesAvailable").map(|c| c.0),
        Some("False".to_string())
    );

    // Release: the waiting claim gets the freed sub-prefix.
    claims
        .delete("holder", &DeleteParams::default())
        .await
        .unwrap();
    wait_reason(&claims, "waiter", "AddressAllocated").await;
    assert_eq!(
        addresses_by_claim(&client, &ns)
            .await
            .get("waiter")
            .map(String::as_str),
        Some("fd30::")
    );

    // Growth: a new waiting claim is served from the added prefix.
    create(&claims, &prefix_claim("grower", "single")).await;
    wait_reason(&claims, "grower", "PoolExhausted").await;
    merge_patch(
        &pools,
        "single",
        json!({"spec": {"prefixes": ["fd30::/64", "fd30:0:0:1::/64"]}}),
    )
    .await;
    wait_reason(&claims, "grower", "AddressAllocated").await;
    // The pool's gauges, labelled by its kind, count sub-prefixes.
    let labels =
        format!(r#"{{pool_kind="InClusterPrefixPool",pool_namespace="{ns}",pool_name="single"}}"#);
    wait_for("the pool's gauges", Duration::from_secs(30), || async {
        let metrics = controller.metrics();
        (sample(&metrics, &format!("inpool_pool_size{labels}")) == Some(2.0)
            && sample(&metrics, &format!("inpool_pool_used{labels}")) == Some(2.0))
        .then_some(())
    })
    .await;
    assert_eq!(
        addresses_by_claim(&client, &ns)
            .await
            .get("grower")
            .map(String::as_str),
        Some("fd30:0:0:1::")
    );
    wait_pool_counts(&pools, "single", (2, 2, 0, 0)).await;
}

#[tokio::test]
async fn an_excluded_sub_prefix_in_use_is_out_of_range_and_the_pool_is_protected_while_used() {
    let (client, ns) = support::env().namespace().await;
    let _controller = start_controller(&client, &ns);
    let pools: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("shrink", json!({"prefixes": ["fd40::/62"]}))).await;
    realise(&client, &ns, prefix_claim("a", "shrink")).await;
    let b = realise(&client, &ns, prefix_claim("b", "shrink")).await;
    assert_eq!(b.spec.address, "fd40:0:0:1::");

    // One address of b's sub-prefix is excluded: the whole sub-prefix is no longer allocatable.
    merge_patch(
        &pools,
        "shrink",
        json!({"spec": {"excludedPrefixes": ["fd40:0:0:1::5"]}}),
    )
    .await;
    wait_pool_counts(&pools, "shrink", (3, 2, 2, 1)).await;
    let status = pools.get("shrink").await.unwrap().status;
    let (in_range, message) = pool_condition(status.as_ref(), "AddressesInRange").unwrap();
    assert_eq!(in_range, "False");
    assert!(
        message.contains("fd40:0:0:1::/64 (claim")
            && message.contains("overlapped by spec.excludedPrefixes"),
        "{message}"
    );
    // b keeps it; a new claim never gets it.
    let c = realise(&client, &ns, prefix_claim("c", "shrink")).await;
    assert_eq!(c.spec.address, "fd40:0:0:2::");

    // ProtectPool holds the pool's deletion while claims hold sub-prefixes of it.
    pools
        .delete("shrink", &DeleteParams::default())
        .await
        .unwrap();
    // The controller writes the deleting pool's status (Ready=False, Deleting) only after
    // deciding to keep ProtectPool: wait for that, then check the finalizer.
    let deleting = wait_for(
        "the deleting pool shrink to report Ready=False (being deleted)",
        Duration::from_secs(60),
        || async {
            let pool = pools.get("shrink").await.ok()?;
            let (ready, message) = pool_condition(pool.status.as_ref(), "Ready")?;
            (ready == "False" && message.starts_with("being deleted")).then_some(pool)
        },
    )
    .await;
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert!(
        deleting
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "ipam.cluster.x-k8s.io/ProtectPool")
    );
    for name in ["a", "b", "c"] {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    wait_gone(&pools, "shrink", Duration::from_secs(60)).await;
}

#[tokio::test]
async fn a_global_prefix_pool_serves_every_namespace_and_two_controllers_never_share_a_sub_prefix()
{
    let (client, first) = support::env().namespace().await;
    let (_, second) = support::env().namespace().await;
    // One controller per namespace: both serve the global pool at once.
    let _a = start_controller(&client, &first);
    let _b = start_controller(&client, &second);
    let global: Api<GlobalInClusterPrefixPool> = Api::all(client.clone());
    let name = format!("{first}-v6");
    create(
        &global,
        &GlobalInClusterPrefixPool::new(
            &name,
            GlobalInClusterPrefixPoolSpec(InClusterPrefixPoolSpec::new(["fd50::/62"])),
        ),
    )
    .await;
    for ns in [&first, &second] {
        let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
        for i in 0..3 {
            create(&claims, &global_prefix_claim(&format!("m{i}"), &name)).await;
        }
    }
    // Four sub-prefixes for six claims: four realised, two waiting, none shared.
    wait_for(
        "four realised claims and two waiting, across both namespaces",
        Duration::from_secs(90),
        || async {
            let mut seen = Vec::new();
            for ns in [&first, &second] {
                let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
                seen.extend(reasons(&claims).await.into_values());
            }
            let allocated = seen.iter().filter(|r| *r == "AddressAllocated").count();
            let exhausted = seen.iter().filter(|r| *r == "PoolExhausted").count();
            (allocated == 4 && exhausted == 2).then_some(())
        },
    )
    .await;
    let mut held = Vec::new();
    for ns in [&first, &second] {
        held.extend(addresses_by_claim(&client, ns).await.into_values());
    }
    held.sort();
    assert_eq!(
        held,
        ["fd50:0:0:1::", "fd50:0:0:2::", "fd50:0:0:3::", "fd50::"],
        "every sub-prefix once"
    );
    wait_for(
        "the global pool's counts",
        Duration::from_secs(60),
        || async {
            let pool = global.get(&name).await.ok()?;
            (counts(pool.status.as_ref()) == Some((4, 4, 0, 0))).then_some(())
        },
    )
    .await;
    for ns in [&first, &second] {
        let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
        claims
            .delete_collection(&DeleteParams::default(), &Default::default())
            .await
            .unwrap();
    }
    global
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&global, &name, Duration::from_secs(60)).await;
}

#[tokio::test]
async fn a_paused_prefix_pool_holds_its_claims_until_unpaused() {
    let (client, ns) = support::env().namespace().await;
    let controller = start_controller(&client, &ns);
    let pools: Api<InClusterPrefixPool> = Api::namespaced(client.clone(), &ns);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("open", json!({"prefixes": ["fd60::/64"]}))).await;
    let mut frozen = pool("frozen", json!({"prefixes": ["fd61::/64"]}));
    frozen.metadata.annotations = Some([("cluster.x-k8s.io/paused".into(), String::new())].into());
    create(&pools, &frozen).await;
    create(&claims, &prefix_claim("held", "frozen")).await;
    // The held claim is the namespace's only claim: a claim reconcile is its reconcile (the
    // paused pool's path has no await after the count, so it is done once counted).
    wait_for(
        "the controller to reconcile the held claim",
        Duration::from_secs(60),
        || async {
            let reconciles = sample(
                &controller.metrics(),
                "inpool_reconciles_total{controller=\"claim\"}",
            )?;
            (reconciles >= 1.0).then_some(())
        },
    )
    .await;
    // Then another claim, realised: whatever the held claim's reconcile wrote has landed.
    realise(&client, &ns, prefix_claim("witness", "open")).await;
    let held = claims.get("held").await.unwrap();
    assert!(held.status.is_none(), "no change at all while paused");
    assert!(
        held.metadata.finalizers.is_none(),
        "no finalizer while paused"
    );

    merge_patch(
        &pools,
        "frozen",
        json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": null}}}),
    )
    .await;
    wait_reason(&claims, "held", "AddressAllocated").await;
    assert_eq!(
        addresses_by_claim(&client, &ns)
            .await
            .get("held")
            .map(String::as_str),
        Some("fd61::")
    );
}
