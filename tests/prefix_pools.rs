//! Prefix pools (`InClusterPrefixPool`, `GlobalInClusterPrefixPool`) on the real API server: the
//! reference's examples are accepted (and defaulted as by the reference), and every rule of the
//! reference's webhook that one object can decide refuses with a message naming the field, as CEL
//! rules in inpool's CRDs.

mod support;

use inpool::api::{
    GlobalInClusterPrefixPool, GlobalInClusterPrefixPoolSpec, InClusterPrefixPool,
    InClusterPrefixPoolSpec,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

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
    let refused = global
        .create(
            &PostParams::default(),
            &GlobalInClusterPrefixPool::new(
                &format!("{name}-v4"),
                GlobalInClusterPrefixPoolSpec(InClusterPrefixPoolSpec::new(["10.0.0.0/8"])),
            ),
        )
        .await
        .expect_err("an IPv4 prefix in a global prefix pool");
    assert!(
        refused.to_string().contains("is not an IPv6 CIDR"),
        "{refused}"
    );
    global.delete(&name, &Default::default()).await.unwrap();
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
            "spec.prefixes: at least one IPv6 CIDR is required",
        ),
        (
            json!({"prefixes": ["10.0.0.0/24"]}),
            "spec.prefixes: \"10.0.0.0/24\" is not an IPv6 CIDR",
        ),
        (
            json!({"prefixes": ["fd00::"]}),
            "spec.prefixes: \"fd00::\" is not an IPv6 CIDR",
        ),
        (
            json!({"prefixes": ["fd00::/48", "nonsense"]}),
            "spec.prefixes: \"nonsense\" is not an IPv6 CIDR",
        ),
        (
            json!({"prefixes": ["fd00::1/48"]}),
            "spec.prefixes: \"fd00::1/48\" is not network-aligned",
        ),
        (
            json!({"prefixes": ["fd00::/72"]}),
            "spec.prefixes: fd00::/72 is longer than spec.allocationPrefixLength (64)",
        ),
        (
            json!({"prefixes": ["fd00::/48", "fd01::/60"], "allocationPrefixLength": 56}),
            "spec.prefixes: fd01::/60 is longer than spec.allocationPrefixLength (56)",
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
            "spec.gateway: \"10.0.0.1\" is not an IPv6 address",
        ),
        (
            json!({"prefixes": ["fd00::/48"], "gateway": "fd00::/64"}),
            "spec.gateway: \"fd00::/64\" is not an IPv6 address",
        ),
        (
            json!({"prefixes": ["fd00::/48"], "excludedPrefixes": ["10.0.0.1"]}),
            "spec.excludedPrefixes: \"10.0.0.1\" is not an IPv6 address, CIDR or first-last range",
        ),
        (
            json!({"prefixes": ["fd00::/48"], "excludedPrefixes": ["fd00::9-fd00::1"]}),
            "spec.excludedPrefixes: \"fd00::9-fd00::1\" is not an IPv6 address, CIDR or first-last range",
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
            error.to_string().contains(message),
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
    assert!(
        error
            .to_string()
            .contains("spec.allocationPrefixLength is immutable: it was 64, not 56"),
        "{error}"
    );
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
