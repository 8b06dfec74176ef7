//! inpool's API on a real API server (the test control plane of `inpool_testenv::support`): the
//! pool CRDs accept the valid corpus and refuse the invalid one with the expected messages; objects
//! written from the Rust types are accepted by CAPI's own CRDs; inpool's status writes leave
//! what others wrote alone.

use crate::corpus;

use inpool::api::conditions::{ConditionStatus, DesiredCondition, LegacyCondition, now};
use inpool::api::pool::{MAX_ADDRESS_ENTRIES, MAX_ADDRESS_TEXT};
use inpool::api::{
    Cluster, ClusterSpec, GlobalInClusterIPPool, IPAddress, IPAddressClaim,
    IPAddressClaimReference, IPAddressClaimStatus, IPAddressSpec, IPAddressesStatus,
    IPPoolReference, InClusterIPPool, InClusterIPPoolStatus, claim_status_patch,
    claim_status_with_ready, pool_status_patch,
};
use inpool_testenv::{common, support};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use common::{claim, of_cluster};

const MANAGER: &str = "inpool";

/// A dynamic API for a corpus object's kind (namespaced kinds in `ns`).
fn api_for(client: &Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    match kind {
        "InClusterIPPool" => Api::namespaced_with(
            client.clone(),
            ns,
            &ApiResource::erase::<InClusterIPPool>(&()),
        ),
        "GlobalInClusterIPPool" => Api::all_with(
            client.clone(),
            &ApiResource::erase::<GlobalInClusterIPPool>(&()),
        ),
        other => panic!("unexpected kind {other}"),
    }
}

async fn create_raw(
    api: &Api<DynamicObject>,
    object: &Value,
) -> Result<DynamicObject, kube::Error> {
    let obj: DynamicObject = serde_json::from_value(object.clone()).expect("corpus object");
    api.create(&PostParams::default(), &obj).await
}

async fn delete_global(client: &Client, name: &str) {
    let api: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
}

#[tokio::test]
async fn pool_crds_are_installed_with_move_hierarchy_label() {
    let client = support::env().client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for name in [
        "inclusterippools.ipam.cluster.x-k8s.io",
        "globalinclusterippools.ipam.cluster.x-k8s.io",
    ] {
        let crd = crds.get(name).await.unwrap();
        assert_eq!(
            crd.labels()
                .get("clusterctl.cluster.x-k8s.io/move-hierarchy")
                .map(String::as_str),
            Some(""),
            "{name}"
        );
    }
}

/// What kubectl's discovery reads from the API server: `kubectl get cluster-api` and `kubectl
/// get ipam` expand to the resources of that category, and short names resolve.
#[tokio::test]
async fn discovery_serves_the_short_names_and_categories() {
    let client = support::env().client().await;
    let mut served = Vec::new();
    for group_version in ["ipam.cluster.x-k8s.io/v1alpha2", "ipam.inpool.dev/v1alpha1"] {
        let request = http::Request::get(format!("/apis/{group_version}"))
            .body(Vec::new())
            .unwrap();
        let list: k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList =
            client.request(request).await.unwrap();
        for resource in list.resources {
            if resource.name.contains('/') {
                continue;
            }
            served.push((
                resource.name,
                resource.short_names.unwrap_or_default().join(","),
                resource.categories.unwrap_or_default().join(","),
            ));
        }
    }
    served.sort();
    let expected = [
        ("globalinclusterippools", "gicipp", "cluster-api,ipam"),
        ("globalinclusterprefixpools", "gicpp", "cluster-api,ipam"),
        ("inclusterippools", "icipp", "cluster-api,ipam"),
        ("inclusterprefixpools", "icpp", "cluster-api,ipam"),
        ("ipaddressreservations", "ipres", "inpool"),
    ];
    let served: Vec<(&str, &str, &str)> = served
        .iter()
        .map(|(n, s, c)| (n.as_str(), s.as_str(), c.as_str()))
        .collect();
    assert_eq!(served, expected);
}

#[tokio::test]
async fn valid_corpus_is_accepted_unchanged() {
    let (client, ns) = support::env().namespace().await;
    let mut failures = vec![];
    for case in corpus::valid() {
        let api = api_for(&client, case.kind(), &ns);
        match create_raw(&api, &case.object).await {
            Err(e) => failures.push(format!("{}: refused: {e}", case.name)),
            Ok(created) => {
                // Nothing pruned or defaulted: the spec reads back as written.
                let spec = &created.data["spec"];
                if *spec != case.object["spec"] {
                    failures.push(format!(
                        "{}: spec changed: {spec} vs {}",
                        case.name, case.object["spec"]
                    ));
                }
                // The status, written through the subresource by SSA, reads back too.
                if let Some(status) = case.object.get("status") {
                    let status: InClusterIPPoolStatus =
                        serde_json::from_value(status.clone()).unwrap();
                    let body = match case.kind() {
                        "InClusterIPPool" => pool_status_patch::<InClusterIPPool>(&status),
                        _ => pool_status_patch::<GlobalInClusterIPPool>(&status),
                    };
                    match api
                        .patch_status(
                            case.object_name(),
                            &PatchParams::apply(MANAGER).force(),
                            &Patch::Apply(&body),
                        )
                        .await
                    {
                        Err(e) => failures.push(format!("{}: status refused: {e}", case.name)),
                        Ok(o) if o.data["status"] != case.object["status"] => {
                            failures.push(format!(
                                "{}: status changed: {} vs {}",
                                case.name, o.data["status"], case.object["status"]
                            ))
                        }
                        Ok(_) => {}
                    }
                }
                // And the typed API reads it without loss.
                let typed = match case.kind() {
                    "InClusterIPPool" => {
                        let api: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
                        serde_json::to_value(api.get(case.object_name()).await.unwrap()).unwrap()
                    }
                    _ => {
                        let api: Api<GlobalInClusterIPPool> = Api::all(client.clone());
                        serde_json::to_value(api.get(case.object_name()).await.unwrap()).unwrap()
                    }
                };
                if typed["spec"] != case.object["spec"] {
                    failures.push(format!(
                        "{}: typed read differs: {}",
                        case.name, typed["spec"]
                    ));
                }
            }
        }
        if case.kind() == "GlobalInClusterIPPool" {
            delete_global(&client, case.object_name()).await;
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test]
async fn invalid_corpus_is_refused_with_the_expected_message() {
    let (client, ns) = support::env().namespace().await;
    let cases = corpus::invalid();
    assert!(cases.len() >= 30);
    let mut failures = vec![];
    for case in &cases {
        let api = api_for(&client, case.kind(), &ns);
        match create_raw(&api, &case.object).await {
            Ok(_) => {
                failures.push(format!("{}: accepted", case.name));
                if case.kind() == "GlobalInClusterIPPool" {
                    delete_global(&client, case.object_name()).await;
                }
            }
            Err(kube::Error::Api(status)) => {
                let message = common::refusal(&status.message);
                if status.code != 422 {
                    failures.push(format!("{}: code {} ({message})", case.name, status.code));
                }
                for expect in &case.expect {
                    if !message.contains(&common::refusal(expect)) {
                        failures.push(format!(
                            "{}: message lacks {expect:?}:\n    {message}",
                            case.name
                        ));
                    }
                }
                // No rule may fail with an evaluation error instead of its message.
                if message.contains("evaluation error") || message.contains("no such overload") {
                    failures.push(format!("{}: CEL error: {message}", case.name));
                }
            }
            Err(e) => failures.push(format!("{}: unexpected error {e}", case.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The largest pools the CRD allows pass the API server's runtime CEL budget; one entry more
/// is refused by the schema.
#[tokio::test]
async fn largest_pools_fit_the_cel_budget() {
    let (client, ns) = support::env().namespace().await;
    let api: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    // Worst case for the rules: IPv6 ranges written out in full (the most text per entry).
    let range = |i: usize| {
        format!(
            "2001:0db8:0000:0000:0000:0000:{i:04x}:0000-2001:0db8:0000:0000:0000:0000:{i:04x}:00ff"
        )
    };
    assert!(range(1).len() <= MAX_ADDRESS_TEXT);
    let addresses: Vec<String> = (0..MAX_ADDRESS_ENTRIES).map(range).collect();
    let excluded: Vec<String> = (0..MAX_ADDRESS_ENTRIES)
        .map(|i| range(i).replace("00ff", "000f"))
        .collect();
    let mut spec = inpool::api::InClusterIPPoolSpec::new(addresses.clone(), 64);
    spec.gateway = Some("2001:db8::1".into());
    spec.excluded_addresses = Some(excluded);
    let pool = InClusterIPPool::new("largest", spec.clone());
    api.create(&PostParams::default(), &pool)
        .await
        .unwrap_or_else(|e| panic!("a pool of {MAX_ADDRESS_ENTRIES} IPv6 ranges is refused: {e}"));

    // IPv4 worst case too.
    let v4: Vec<String> = (0..MAX_ADDRESS_ENTRIES)
        .map(|i| {
            format!(
                "10.{}.{}.1-10.{}.{}.200",
                i / 256,
                i % 256,
                i / 256,
                i % 256
            )
        })
        .collect();
    let pool4 = InClusterIPPool::new("largest-v4", inpool::api::InClusterIPPoolSpec::new(v4, 8));
    api.create(&PostParams::default(), &pool4)
        .await
        .unwrap_or_else(|e| panic!("a pool of {MAX_ADDRESS_ENTRIES} IPv4 ranges is refused: {e}"));

    let mut too_many = addresses;
    too_many.push("2001:db8::1".into());
    let pool = InClusterIPPool::new(
        "too-many",
        inpool::api::InClusterIPPoolSpec::new(too_many, 64),
    );
    let err = api.create(&PostParams::default(), &pool).await.unwrap_err();
    assert!(
        err.to_string().contains("spec.addresses: Too many"),
        "{err}"
    );
}

fn pool_ref() -> IPPoolReference {
    IPPoolReference::new("ipam.cluster.x-k8s.io", "InClusterIPPool", "pool")
}

#[tokio::test]
async fn objects_written_from_rust_are_accepted_by_capi_crds() {
    let (client, ns) = support::env().namespace().await;

    // Cluster: inpool only reads it, but the type must match CAPI's schema.
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
    let mut spec = ClusterSpec {
        paused: Some(true),
        ..Default::default()
    };
    spec.other.insert(
        "clusterNetwork".into(),
        json!({"pods": {"cidrBlocks": ["192.168.0.0/16"]}}),
    );
    let cluster = clusters
        .create(&PostParams::default(), &Cluster::new("demo", spec.clone()))
        .await
        .expect("Cluster accepted by CAPI's CRD");
    assert_eq!(cluster.spec, spec, "Cluster read back without loss");
    assert!(cluster.is_paused());

    // Claim without the optional fields, then with them.
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    let minimal = claim("minimal", "pool");
    let created = claims
        .create(&PostParams::default(), &minimal)
        .await
        .expect("minimal claim");
    assert_eq!(created.spec, minimal.spec);
    assert!(created.status.is_none());

    let full = of_cluster(claim("full", "pool"), "demo");
    let created = claims
        .create(&PostParams::default(), &full)
        .await
        .expect("claim");
    assert_eq!(created.spec, full.spec);

    // Status written from the Rust types, through the status subresource.
    for (status, reason, addr) in [
        (ConditionStatus::Unknown, "Allocating", None),
        (ConditionStatus::False, "PoolExhausted", None),
        (ConditionStatus::False, "AllocationFailed", None),
        (ConditionStatus::True, "AddressAllocated", Some("full")),
    ] {
        let current = claims.get("full").await.unwrap();
        let desired = DesiredCondition::new("Ready", status, reason, format!("step {reason}"))
            .observed_generation(current.metadata.generation);
        let st = claim_status_with_ready(&current, desired, addr, now());
        let back = apply_claim_status(&claims, "full", &st).await;
        let back_status = back.status.expect("status");
        assert_eq!(back_status.conditions, st.conditions);
        assert_eq!(back_status.legacy_conditions(), st.legacy_conditions());
        assert_eq!(back_status.address_ref, st.address_ref);
    }

    // Addresses: IPv4 without gateway, IPv6 with.
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    for (name, address, prefix, gateway) in [
        ("full", "10.0.0.5", 24, None),
        ("v6", "2001:db8::5", 64, Some("2001:db8::1")),
    ] {
        let a = IPAddress::new(
            name,
            IPAddressSpec {
                address: address.into(),
                claim_ref: IPAddressClaimReference {
                    name: "full".into(),
                },
                gateway: gateway.map(Into::into),
                pool_ref: pool_ref(),
                prefix,
            },
        );
        let created = addresses
            .create(&PostParams::default(), &a)
            .await
            .expect("IPAddress");
        assert_eq!(created.spec, a.spec);
        let raw = serde_json::to_value(&created).unwrap();
        assert_eq!(raw["spec"].get("gateway").is_some(), gateway.is_some());
    }
}

/// The claim's `Ready` condition; panics without one.
fn ready_condition(claim: &IPAddressClaim) -> &Condition {
    claim
        .conditions()
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition")
}

/// The claim's legacy (`status.deprecated.v1beta1`) conditions; panics without them.
fn legacy_conditions(claim: &IPAddressClaim) -> &[LegacyCondition] {
    claim
        .status
        .as_ref()
        .and_then(|s| s.legacy_conditions())
        .expect("legacy conditions")
}

/// Applies `status` to the claim `name` as inpool does: server-side apply of its fields as
/// its field manager, forced (the legacy list is atomic); returns the claim.
async fn apply_claim_status(
    claims: &Api<IPAddressClaim>,
    name: &str,
    status: &IPAddressClaimStatus,
) -> IPAddressClaim {
    claims
        .patch_status(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(claim_status_patch(status)),
        )
        .await
        .unwrap_or_else(|e| panic!("inpool's status of claim {name} refused: {e}"))
}

/// Applies `body` to the status of claim `shared` as another controller does: as its own field
/// manager, not forced.
async fn apply_other_status(
    claims: &Api<IPAddressClaim>,
    body: &Value,
) -> Result<IPAddressClaim, kube::Error> {
    claims
        .patch_status(
            "shared",
            &PatchParams::apply("other-controller"),
            &Patch::Apply(body),
        )
        .await
}

#[tokio::test]
async fn status_patch_keeps_what_others_wrote() {
    let (client, ns) = support::env().namespace().await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);

    // Someone else (the infrastructure provider) owns the claim: labels, annotations, an owner
    // reference, its finalizer, and the cluster-name label.
    let owner_cm: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let owner = owner_cm
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some("machine".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let consumer_claim = json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddressClaim",
        "metadata": {
            "name": "shared",
            "labels": {"cluster.x-k8s.io/cluster-name": "demo", "consumer/label": "x"},
            "annotations": {"consumer/annotation": "y"},
            "finalizers": ["consumer.example.com/ip-claim-protection"],
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "machine",
                "uid": owner.uid().unwrap(), "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {"clusterName": "demo", "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"}}
    });
    claims
        .patch(
            "shared",
            &PatchParams::apply("consumer"),
            &Patch::Apply(&consumer_claim),
        )
        .await
        .expect("consumer creates the claim");

    // Another controller writes conditions of its own, in both lists.
    let other_status = json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddressClaim",
        "status": {
            "conditions": [{
                "type": "ConsumerSeen", "status": "True", "reason": "Seen", "message": "seen by the consumer",
                "lastTransitionTime": "2026-01-01T00:00:00Z"
            }],
            "deprecated": {"v1beta1": {"conditions": [{
                "type": "ConsumerSeen", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]}}
        }
    });
    apply_other_status(&claims, &other_status)
        .await
        .expect("other controller writes status");

    // inpool writes its status through its own typed view (which knows none of the above).
    let before = claims.get("shared").await.unwrap();
    let t0 = now();
    let st = claim_status_with_ready(
        &before,
        DesiredCondition::new("Ready", ConditionStatus::True, "AddressAllocated", "")
            .observed_generation(before.metadata.generation),
        Some("shared"),
        t0.clone(),
    );
    apply_claim_status(&claims, "shared", &st).await;

    let check = |after: &IPAddressClaim| {
        assert_eq!(
            after.labels().get("consumer/label").map(String::as_str),
            Some("x")
        );
        assert_eq!(
            after
                .labels()
                .get("cluster.x-k8s.io/cluster-name")
                .map(String::as_str),
            Some("demo")
        );
        assert_eq!(
            after
                .annotations()
                .get("consumer/annotation")
                .map(String::as_str),
            Some("y")
        );
        assert_eq!(
            after.finalizers(),
            ["consumer.example.com/ip-claim-protection"]
        );
        let refs: &[OwnerReference] = after.owner_references();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].controller, Some(true));
        let types: Vec<&str> = after
            .conditions()
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert!(
            types.contains(&"ConsumerSeen") && types.contains(&"Ready"),
            "{types:?}"
        );
        let legacy: Vec<&LegacyCondition> = legacy_conditions(after).iter().collect();
        assert!(
            legacy.iter().any(|c| c.type_ == "ConsumerSeen"),
            "{legacy:?}"
        );
        assert!(legacy.iter().any(|c| c.type_ == "Ready"), "{legacy:?}");
    };
    let after = claims.get("shared").await.unwrap();
    check(&after);
    let ready = ready_condition(&after).clone();
    assert_eq!(ready.last_transition_time, t0);
    assert_eq!(after.address_ref(), Some("shared"));

    // Same status again later: lastTransitionTime is kept. Then a flip: it moves, addressRef
    // goes away, and everything of the others is still there.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let st = claim_status_with_ready(
        &after,
        DesiredCondition::new("Ready", ConditionStatus::True, "AddressAllocated", "")
            .observed_generation(after.metadata.generation),
        Some("shared"),
        now(),
    );
    let again = apply_claim_status(&claims, "shared", &st).await;
    let ready_again = ready_condition(&again);
    assert_eq!(ready_again.last_transition_time, t0);

    let st = claim_status_with_ready(
        &again,
        DesiredCondition::new(
            "Ready",
            ConditionStatus::False,
            "PoolNotReady",
            "pool pool not found",
        )
        .observed_generation(again.metadata.generation),
        None,
        now(),
    );
    let flipped = apply_claim_status(&claims, "shared", &st).await;
    check(&flipped);
    let ready = ready_condition(&flipped);
    assert_eq!(ready.status, "False");
    assert_ne!(ready.last_transition_time, t0);
    assert!(
        flipped.status.as_ref().unwrap().address_ref.is_none(),
        "addressRef released"
    );
    let legacy_ready = legacy_conditions(&flipped)
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .clone();
    assert_eq!(legacy_ready.severity.as_deref(), Some("Warning"));

    // Finally the other controller can still apply its own metav1 conditions: they are a
    // list-map, so each manager owns only its entries and nothing conflicts. (The legacy list
    // is atomic in CAPI's schema: whoever applied it last owns all of it, so another manager
    // must merge it as inpool does, or force.)
    let other_conditions_only = json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddressClaim",
        "status": {"conditions": other_status["status"]["conditions"].clone()}
    });
    apply_other_status(&claims, &other_conditions_only)
        .await
        .expect("other controller can still write its conditions");
    let last = claims.get("shared").await.unwrap();
    assert!(last.conditions().iter().any(|c| c.type_ == "Ready"));
}

#[tokio::test]
async fn pool_status_patch_keeps_foreign_conditions() {
    let (client, ns) = support::env().namespace().await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let pool = InClusterIPPool::new(
        "p",
        inpool::api::InClusterIPPoolSpec::new(["10.0.0.0/24"], 24),
    );
    pools.create(&PostParams::default(), &pool).await.unwrap();
    let foreign = json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "status": {"conditions": [{"type": "Audited", "status": "True", "reason": "Ok", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    });
    pools
        .patch_status("p", &PatchParams::apply("auditor"), &Patch::Apply(&foreign))
        .await
        .unwrap();
    let mut conditions = vec![];
    inpool::api::set_condition(
        &mut conditions,
        DesiredCondition::new("Ready", ConditionStatus::True, "PoolValid", "")
            .observed_generation(Some(1)),
    );
    let status = InClusterIPPoolStatus {
        ip_addresses: Some(IPAddressesStatus {
            total: 256,
            used: 0,
            free: 256,
            out_of_range: 0,
        }),
        conditions: Some(conditions),
        carved_prefixes: None,
    };
    let back = pools
        .patch_status(
            "p",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(pool_status_patch::<InClusterIPPool>(&status)),
        )
        .await
        .unwrap();
    let st = back.status.unwrap();
    assert_eq!(st.ip_addresses, status.ip_addresses);
    let types: Vec<String> = st
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert_eq!(types, ["Audited", "Ready"]);
}

/// A small deterministic generator (xorshift), so that failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn u128(&mut self) -> u128 {
        ((self.next() as u128) << 64) | self.next() as u128
    }
}

/// Texts of one IPv6 address in the notations Go's `netip.ParseAddr` (and CEL's `isIP`) accept.
fn ipv6_texts(v: u128) -> Vec<String> {
    let addr = std::net::Ipv6Addr::from(v);
    let g = addr.segments();
    let full = g
        .iter()
        .map(|x| format!("{x:04x}"))
        .collect::<Vec<_>>()
        .join(":");
    let short = g
        .iter()
        .map(|x| format!("{x:X}"))
        .collect::<Vec<_>>()
        .join(":");
    let o = addr.octets();
    let dotted = format!(
        "{}:{}.{}.{}.{}",
        g[..6]
            .iter()
            .map(|x| format!("{x:x}"))
            .collect::<Vec<_>>()
            .join(":"),
        o[12],
        o[13],
        o[14],
        o[15]
    );
    vec![addr.to_string(), full, short, dotted]
}

/// The ranges the entry rule accepts are exactly those with first <= last (numerically), for
/// every notation: checked on random IPv4 and IPv6 pairs, many sharing long prefixes, against
/// the server's verdict per entry.
#[tokio::test]
async fn range_order_rule_matches_numeric_order() {
    let (client, ns) = support::env().namespace().await;
    let api: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    let mut batches: Vec<(Vec<String>, Vec<bool>, i32)> = vec![];
    // IPv6: a random first address; the last one equal, or differing from some random bit on.
    for _ in 0..4 {
        let (mut entries, mut valid) = (vec![], vec![]);
        while entries.len() < 150 {
            let a = rng.u128();
            // Keep clear of ::ffff:0:0/96 (IPv4-mapped; refused by the CEL IP library).
            if (a >> 32) == 0xffff {
                continue;
            }
            let bit = rng.next() % 129;
            let b = if bit == 128 {
                a
            } else {
                a ^ (rng.u128() >> bit)
            };
            if (b >> 32) == 0xffff {
                continue;
            }
            let ta = ipv6_texts(a);
            let tb = ipv6_texts(b);
            let text = format!(
                "{}-{}",
                ta[(rng.next() % 4) as usize],
                tb[(rng.next() % 4) as usize]
            );
            assert!(text.len() <= MAX_ADDRESS_TEXT, "{text}");
            entries.push(text);
            valid.push(a <= b);
        }
        batches.push((entries, valid, 1));
    }
    // IPv4.
    let (mut entries, mut valid) = (vec![], vec![]);
    for _ in 0..200 {
        let a = rng.next() as u32;
        let bit = rng.next() % 33;
        let b = if bit == 32 {
            a
        } else {
            a ^ ((rng.next() as u32) >> bit)
        };
        entries.push(format!(
            "{}-{}",
            std::net::Ipv4Addr::from(a),
            std::net::Ipv4Addr::from(b)
        ));
        valid.push(a <= b);
    }
    batches.push((entries, valid, 1));

    let mut failures = vec![];
    for (n, (entries, valid, prefix)) in batches.into_iter().enumerate() {
        let name = format!("order-{n}");
        let pool = InClusterIPPool::new(
            &name,
            inpool::api::InClusterIPPoolSpec::new(entries.clone(), prefix),
        );
        let refused: std::collections::BTreeSet<usize> =
            match api.create(&PostParams::default(), &pool).await {
                Ok(_) => Default::default(),
                Err(kube::Error::Api(status)) => status
                    .message
                    .match_indices("spec.addresses[")
                    .filter_map(|(i, _)| {
                        let rest = &status.message[i + "spec.addresses[".len()..];
                        rest[..rest.find(']')?].parse().ok()
                    })
                    .collect(),
                Err(e) => panic!("{e}"),
            };
        for (i, (entry, ok)) in entries.iter().zip(&valid).enumerate() {
            if *ok == refused.contains(&i) {
                failures.push(format!(
                    "{entry}: expected {}",
                    if *ok { "accepted" } else { "refused" }
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The local-use-only CAPI CRDs (`config/local-capi/`, for a demo without Cluster API) install
/// on a control plane of their own and take the objects inpool writes.
#[tokio::test]
async fn local_capi_crds_install_and_take_inpool_objects() {
    let dir = std::env::temp_dir().join(format!("inpool-local-capi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let root = support::repo_root();
    let mut files: Vec<std::path::PathBuf> = ["crds", "config/local-capi"]
        .iter()
        .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    let plane = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || support::ControlPlane::start_with_crds(&dir, true, &files)
    })
    .await
    .unwrap()
    .expect("a control plane with the local CAPI CRDs");
    let client = plane.client().await;

    let ns = "default";
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), ns);
    let mut spec = ClusterSpec {
        paused: Some(false),
        ..Default::default()
    };
    spec.other.insert(
        "controlPlaneRef".into(),
        json!({"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "demo"}),
    );
    let c = clusters
        .create(&PostParams::default(), &Cluster::new("demo", spec.clone()))
        .await
        .expect("Cluster");
    assert_eq!(c.spec, spec, "unknown Cluster fields are preserved");

    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), ns);
    let claim = of_cluster(claim("c", "pool"), "demo");
    let created = claims
        .create(&PostParams::default(), &claim)
        .await
        .expect("claim");
    let st = claim_status_with_ready(
        &created,
        DesiredCondition::new("Ready", ConditionStatus::True, "AddressAllocated", ""),
        Some("c"),
        now(),
    );
    let back = claims
        .patch_status(
            "c",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(claim_status_patch(&st)),
        )
        .await
        .expect("claim status");
    assert_eq!(back.status.unwrap().address_ref, st.address_ref);

    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), ns);
    let a = IPAddress::new(
        "c",
        IPAddressSpec {
            address: "10.0.0.5".into(),
            claim_ref: IPAddressClaimReference { name: "c".into() },
            gateway: Some("10.0.0.1".into()),
            pool_ref: pool_ref(),
            prefix: 24,
        },
    );
    let created = addresses
        .create(&PostParams::default(), &a)
        .await
        .expect("IPAddress");
    assert_eq!(created.spec, a.spec);
    // The local CRDs hold CAPI's constraints too, e.g. a claim status must not be empty.
    let err = claims
        .patch_status(
            "c",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"addressRef": null, "conditions": null, "deprecated": null}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("status"), "{err}");
    drop(plane);
}
