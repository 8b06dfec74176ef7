//! Pure tests of inpool's API types and generated CRDs (no API server):
//! corpus round trips, acceptance of the valid corpus by the reference provider's schema,
//! serialisation rules of the CAPI kinds, the status helpers, structural CRDs, the local CAPI
//! CRDs against CAPI's own (from its Go module), and `crds/` being up to date.
//!
//! The comparisons with the reference provider read its own CRDs, `config/crd/bases/` of its Go
//! module v1.1.0 in the Go module cache (`support::reference_crd_dir`).

use crate::corpus;

use std::collections::BTreeSet;
use std::path::Path;

use inpool::api::conditions::{ConditionStatus, DesiredCondition, LegacyCondition};
use inpool::api::crds::{
    generated_files, local_capi_crds, pool_crds, prefix_pool_crds, stale_files,
};
use inpool::api::{
    GlobalInClusterIPPool, IPAddress, IPAddressClaim, IPAddressClaimReference, IPAddressClaimSpec,
    IPAddressClaimStatus, IPAddressSpec, IPPoolReference, InClusterIPPool, InClusterIPPoolSpec,
    claim_status_patch, claim_status_with_ready,
};
use inpool_testenv::{repo_root, support};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use serde_json::{Value, json};

fn t(secs: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
}

/// The openAPIV3Schema of `version` in a CRD (as JSON).
fn version_schema(crd: &Value, version: &str) -> Value {
    crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == version)
        .unwrap_or_else(|| panic!("no version {version}"))["schema"]["openAPIV3Schema"]
        .clone()
}

fn version_of<'a>(crd: &'a Value, version: &str) -> &'a Value {
    crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == version)
        .unwrap_or_else(|| panic!("no version {version}"))
}

fn read_yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// A small OpenAPI v3 (structural schema) validator: what the API server checks besides CEL.

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn validate(schema: &Value, v: &Value, path: &str, errs: &mut Vec<String>) {
    if let Some(ty) = schema["type"].as_str() {
        let actual = json_type(v);
        let ok = actual == ty || (ty == "number" && actual == "integer");
        if !ok {
            errs.push(format!("{path}: is {actual}, schema says {ty}"));
            return;
        }
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(v)
    {
        errs.push(format!("{path}: {v} not in enum {values:?}"));
    }
    match v {
        Value::Object(map) => {
            let props = schema["properties"].as_object();
            let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
            for (k, child) in map {
                // The server itself validates the root's apiVersion, kind and metadata.
                if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                    continue;
                }
                match props.and_then(|p| p.get(k)) {
                    Some(s) => validate(s, child, &format!("{path}.{k}"), errs),
                    None if preserve => {}
                    None => errs.push(format!(
                        "{path}.{k}: unknown field (the server would prune it)"
                    )),
                }
            }
            for r in schema["required"].as_array().into_iter().flatten() {
                if !map.contains_key(r.as_str().unwrap()) {
                    errs.push(format!("{path}.{}: required", r.as_str().unwrap()));
                }
            }
            if let Some(min) = schema["minProperties"].as_u64()
                && (map.len() as u64) < min
            {
                errs.push(format!("{path}: fewer than {min} properties"));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                validate(&schema["items"], item, &format!("{path}[{i}]"), errs);
            }
            if let Some(max) = schema["maxItems"].as_u64()
                && items.len() as u64 > max
            {
                errs.push(format!("{path}: more than {max} items"));
            }
            if let Some(min) = schema["minItems"].as_u64()
                && (items.len() as u64) < min
            {
                errs.push(format!("{path}: fewer than {min} items"));
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = schema["maxLength"].as_u64()
                && len > max
            {
                errs.push(format!("{path}: longer than {max}"));
            }
            if let Some(min) = schema["minLength"].as_u64()
                && len < min
            {
                errs.push(format!("{path}: shorter than {min}"));
            }
            if let Some(p) = schema["pattern"].as_str()
                && !regex::Regex::new(p).unwrap().is_match(s)
            {
                errs.push(format!("{path}: {s:?} does not match {p}"));
            }
            if schema["format"] == "date-time" && s.parse::<k8s_openapi::jiff::Timestamp>().is_err()
            {
                errs.push(format!("{path}: {s:?} is not a date-time"));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap();
            if let Some(max) = schema["maximum"].as_f64()
                && x > max
            {
                errs.push(format!("{path}: {x} > {max}"));
            }
            if let Some(min) = schema["minimum"].as_f64()
                && x < min
            {
                errs.push(format!("{path}: {x} < {min}"));
            }
            if schema["format"] == "int32" && (x < i32::MIN as f64 || x > i32::MAX as f64) {
                errs.push(format!("{path}: {x} is not an int32"));
            }
        }
        _ => {}
    }
}

fn errors_against(schema: &Value, v: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    validate(schema, v, "", &mut errs);
    errs
}

fn reference_pool_schema(reference: &Path, kind: &str) -> Value {
    let file = match kind {
        "InClusterIPPool" => "ipam.cluster.x-k8s.io_inclusterippools.yaml",
        "GlobalInClusterIPPool" => "ipam.cluster.x-k8s.io_globalinclusterippools.yaml",
        other => panic!("unexpected kind {other}"),
    };
    version_schema(&read_yaml(&reference.join(file)), "v1alpha2")
}

fn our_pool_schema(kind: &str) -> Value {
    let crd = pool_crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap();
    version_schema(&serde_json::to_value(crd).unwrap(), "v1alpha2")
}

/// One of CAPI's CRDs, from the Cluster API Go module the tests build CAPI from.
fn capi_crd(file: &str) -> Value {
    read_yaml(&inpool_testenv::capi::crd_dir().unwrap().join(file))
}

// ---------------------------------------------------------------------------------------------
// Corpora

#[test]
fn valid_corpus_is_accepted_by_the_reference_schema() {
    let reference = support::reference_crd_dir();
    let cases = corpus::valid();
    assert!(cases.len() >= 20, "valid corpus too small: {}", cases.len());
    for case in &cases {
        // `status.conditions` is inpool's addition to the reference's status (the reference's
        // schema would prune it); everything else must be the reference's.
        let mut object = case.object.clone();
        if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut) {
            status.remove("conditions");
        }
        let errs = errors_against(&reference_pool_schema(&reference, case.kind()), &object);
        assert!(
            errs.is_empty(),
            "{}: refused by the reference schema: {errs:?}",
            case.name
        );
    }
}

#[test]
fn valid_corpus_is_accepted_by_our_schema_without_pruning() {
    for case in corpus::valid() {
        let errs = errors_against(&our_pool_schema(case.kind()), &case.object);
        assert!(
            errs.is_empty(),
            "{}: refused by inpool's schema: {errs:?}",
            case.name
        );
    }
}

#[test]
fn valid_corpus_round_trips_through_the_rust_types() {
    let mut kinds = BTreeSet::new();
    for case in corpus::valid() {
        kinds.insert(case.kind().to_string());
        let back = match case.kind() {
            "InClusterIPPool" => {
                let pool: InClusterIPPool = serde_json::from_value(case.object.clone())
                    .unwrap_or_else(|e| panic!("{}: {e}", case.name));
                serde_json::to_value(&pool).unwrap()
            }
            "GlobalInClusterIPPool" => {
                let pool: GlobalInClusterIPPool = serde_json::from_value(case.object.clone())
                    .unwrap_or_else(|e| panic!("{}: {e}", case.name));
                // Both kinds expose the same spec.
                let _: &InClusterIPPoolSpec = &pool.spec;
                serde_json::to_value(&pool).unwrap()
            }
            other => panic!("{}: unexpected kind {other}", case.name),
        };
        assert_eq!(
            back, case.object,
            "{}: lost or changed in a round trip",
            case.name
        );
    }
    assert_eq!(kinds.len(), 2, "the valid corpus must cover both kinds");
}

#[test]
fn invalid_corpus_is_large_enough_and_states_expectations() {
    let cases = corpus::invalid();
    assert!(
        cases.len() >= 30,
        "invalid corpus has {} cases, want >= 30",
        cases.len()
    );
    let mut kinds = BTreeSet::new();
    for case in &cases {
        assert!(
            !case.expect.is_empty(),
            "{}: no `# expect:` line",
            case.name
        );
        for e in &case.expect {
            assert!(
                e.starts_with("spec."),
                "{}: expectation must name the field: {e}",
                case.name
            );
        }
        kinds.insert(case.kind().to_string());
    }
    assert_eq!(kinds.len(), 2, "the invalid corpus must cover both kinds");

    // Every CEL rule of the CRD is exercised by at least one case: each rule's refusal contains
    // one of these texts (the field's path, as the API server writes it, then the message).
    let all_expectations: Vec<&String> = cases.iter().flat_map(|c| &c.expect).collect();
    for needle in [
        "spec.addresses[0]: Invalid value: \"10.0.0.300\": must be an IP address", // entry parses
        "spec.excludedAddresses[0]: Invalid value: \"10.0.0.x\": must be", // excluded entry parses
        "spec.addresses: Invalid value: at least one address",             // not empty
        "is IPv6 but the first entry",                                     // one family (v4 pool)
        "is IPv4 but the first entry",                                     // one family (v6 pool)
        "spec.prefix: Invalid value: 0: must be at least 1",               // prefix >= 1
        "is longer than 32, the longest prefix of an IPv4 pool",           // IPv4 prefix
        "subnet (spec.prefix) of",                                         // inside the subnet
        "spec.gateway: Invalid value: \"10.0.0.256\": must be an IP address", // gateway parses
        "but spec.addresses is IPv4", // gateway / excluded family
        "spec.gateway: Invalid value: 10.0.0.1 is IPv4 but spec.addresses is IPv6",
        "spec.excludedAddresses: Invalid value: 2001:db8::5 is IPv6", // excluded family
        // Each rule about an entry of spec.additionalSubnets:
        "spec.additionalSubnets[0].addresses[0]: Invalid value: \"10.2.0.x\": must be", // entry parses
        "spec.additionalSubnets[0].addresses: Invalid value: at least one",             // not empty
        "spec.additionalSubnets[0].addresses: Invalid value: 2001:db8::1 is IPv6 but the first entry", // one family
        "spec.additionalSubnets[0].prefix: Invalid value: 33 is longer than 32", // IPv4 prefix
        "subnet (spec.additionalSubnets.prefix) of", // inside the subnet
        "spec.additionalSubnets[0].gateway: Invalid value: \"10.2.0.256\": must be", // gateway parses
        "spec.additionalSubnets[0].gateway: Invalid value: 2001:db8::1 is IPv6", // gateway family
        "spec.additionalSubnets[0].gateway: Invalid value: 10.1.0.1 is not inside", // gateway inside
        "spec.additionalSubnets: Invalid value: 2001:db8::10 is IPv6 but spec.addresses", // subnets' family
        "overlaps the subnet of spec.addresses or of another entry", // subnets disjoint
    ] {
        assert!(
            all_expectations.iter().any(|e| e.contains(needle)),
            "no invalid case exercises {needle:?}"
        );
    }
}

#[test]
fn invalid_corpus_still_parses_as_objects() {
    // The invalid objects are well-formed YAML objects of our kinds (the server, not the
    // parser, must refuse them).
    for case in corpus::invalid() {
        assert_eq!(
            case.object["apiVersion"], "ipam.cluster.x-k8s.io/v1alpha2",
            "{}",
            case.name
        );
        assert!(!case.object_name().is_empty(), "{}", case.name);
    }
}

// ---------------------------------------------------------------------------------------------
// CAPI kinds: serialisation rules

fn claim(name: &str) -> IPAddressClaim {
    let mut c = IPAddressClaim::new(
        name,
        IPAddressClaimSpec {
            cluster_name: None,
            pool_ref: IPPoolReference::new("ipam.cluster.x-k8s.io", "InClusterIPPool", "pool"),
        },
    );
    c.metadata.namespace = Some("default".into());
    c
}

#[test]
fn optional_strings_are_omitted_not_empty() {
    let c = serde_json::to_value(claim("c1")).unwrap();
    assert!(c["spec"].get("clusterName").is_none(), "{c}");
    assert!(c.get("status").is_none(), "{c}");

    let a = IPAddress::new(
        "a1",
        IPAddressSpec {
            address: "10.0.0.5".into(),
            claim_ref: IPAddressClaimReference { name: "c1".into() },
            gateway: None,
            pool_ref: IPPoolReference::new("ipam.cluster.x-k8s.io", "InClusterIPPool", "pool"),
            prefix: 24,
        },
    );
    let v = serde_json::to_value(&a).unwrap();
    assert!(v["spec"].get("gateway").is_none(), "{v}");
    assert!(v.get("status").is_none(), "{v}");
    assert_eq!(v["apiVersion"], "ipam.cluster.x-k8s.io/v1beta2");
    assert_eq!(v["kind"], "IPAddress");
}

#[test]
fn claim_status_is_never_empty() {
    let mut c = claim("c2");
    c.set_status(IPAddressClaimStatus::default());
    assert!(c.status.is_none());
    assert!(serde_json::to_value(&c).unwrap().get("status").is_none());

    // Empty nested parts are omitted too.
    let mut s = IPAddressClaimStatus::default();
    s.set_legacy_conditions(Some(vec![]));
    s.set_legacy_conditions(None);
    assert!(s.is_empty());
    assert_eq!(serde_json::to_value(&s).unwrap(), json!({}));
    c.set_status(s.clone());
    assert!(c.status.is_none());

    let patch = claim_status_patch(&s);
    assert_eq!(
        patch,
        json!({"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim"})
    );
}

#[test]
fn claim_round_trips_with_every_field() {
    let v = json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddressClaim",
        "metadata": {
            "name": "vm-0-0",
            "namespace": "default",
            "labels": {"cluster.x-k8s.io/cluster-name": "demo"},
            "finalizers": ["ipam.cluster.x-k8s.io/ReleaseAddress"]
        },
        "spec": {
            "clusterName": "demo",
            "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"}
        },
        "status": {
            "addressRef": {"name": "vm-0-0"},
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "AddressAllocated", "message": "",
                "lastTransitionTime": "2026-01-02T03:04:05Z", "observedGeneration": 1
            }],
            "deprecated": {"v1beta1": {"conditions": [{
                "type": "Ready", "status": "True", "lastTransitionTime": "2026-01-02T03:04:05Z"
            }]}}
        }
    });
    let c: IPAddressClaim = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(c.cluster_name(), Some("demo"));
    assert_eq!(serde_json::to_value(&c).unwrap(), v);
    // and it is what CAPI's schema accepts
    let schema = version_schema(
        &capi_crd("ipam.cluster.x-k8s.io_ipaddressclaims.yaml"),
        "v1beta2",
    );
    assert_eq!(errors_against(&schema, &v), Vec::<String>::new());
}

#[test]
fn cluster_round_trips_unknown_fields() {
    let v = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {
            "paused": true,
            "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "demo"}
        },
        "status": {"phase": "Provisioned", "initialization": {"infrastructureProvisioned": true}}
    });
    let c: inpool::api::Cluster = serde_json::from_value(v.clone()).unwrap();
    assert!(c.is_paused());
    assert_eq!(serde_json::to_value(&c).unwrap(), v);
}

#[test]
fn objects_written_from_rust_match_capi_schemas() {
    let mut c = claim("c3");
    c.spec.cluster_name = Some("demo".into());
    let status = claim_status_with_ready(
        &c,
        DesiredCondition::new(
            "Ready",
            ConditionStatus::False,
            "PoolExhausted",
            "pool p has no free address (254 of 254 used)",
        )
        .observed_generation(Some(1)),
        None,
        t(100),
    );
    c.set_status(status);
    let claim_schema = version_schema(
        &capi_crd("ipam.cluster.x-k8s.io_ipaddressclaims.yaml"),
        "v1beta2",
    );
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(
        errors_against(&claim_schema, &v),
        Vec::<String>::new(),
        "{v}"
    );

    let a = IPAddress::new(
        "c3",
        IPAddressSpec {
            address: "2001:db8::5".into(),
            claim_ref: IPAddressClaimReference { name: "c3".into() },
            gateway: Some("2001:db8::1".into()),
            pool_ref: IPPoolReference::new(
                "ipam.cluster.x-k8s.io",
                "GlobalInClusterIPPool",
                "pool",
            ),
            prefix: 64,
        },
    );
    let addr_schema = version_schema(
        &capi_crd("ipam.cluster.x-k8s.io_ipaddresses.yaml"),
        "v1beta2",
    );
    let v = serde_json::to_value(&a).unwrap();
    assert_eq!(
        errors_against(&addr_schema, &v),
        Vec::<String>::new(),
        "{v}"
    );
}

#[test]
fn claim_status_with_ready_keeps_time_and_other_legacy_entries() {
    let mut c = claim("c4");
    let other_legacy = LegacyCondition {
        type_: "InfraReady".into(),
        status: "True".into(),
        severity: None,
        last_transition_time: t(1),
        reason: None,
        message: None,
    };
    let other = Condition {
        type_: "Other".into(),
        status: "True".into(),
        reason: "Fine".into(),
        message: String::new(),
        observed_generation: None,
        last_transition_time: t(1),
    };
    let mut s = IPAddressClaimStatus {
        conditions: Some(vec![other]),
        ..Default::default()
    };
    s.set_legacy_conditions(Some(vec![other_legacy.clone()]));
    c.set_status(s);

    let ready = |st, reason: &str| {
        DesiredCondition::new("Ready", st, reason, "").observed_generation(Some(2))
    };
    let s1 = claim_status_with_ready(
        &c,
        ready(ConditionStatus::True, "AddressAllocated"),
        Some("c4"),
        t(10),
    );
    let conds = s1.conditions.clone().unwrap();
    assert_eq!(conds.len(), 1, "only inpool's condition is applied");
    assert_eq!(conds[0].type_, "Ready");
    assert_eq!(conds[0].observed_generation, Some(2));
    assert_eq!(conds[0].last_transition_time, t(10));
    let legacy = s1.legacy_conditions().unwrap();
    assert_eq!(
        legacy[0], other_legacy,
        "other legacy entries kept, in place"
    );
    assert_eq!(legacy[1].type_, "Ready");
    assert_eq!(legacy[1].severity, None);
    assert_eq!(s1.address_ref.as_ref().unwrap().name, "c4");

    // Pretend the server merged it; same status later: the time is kept.
    let mut merged = c.status.clone().unwrap();
    merged.conditions.as_mut().unwrap().extend(conds);
    merged.set_legacy_conditions(Some(legacy.clone()));
    merged.address_ref = s1.address_ref.clone();
    c.status = Some(merged);
    let s2 = claim_status_with_ready(
        &c,
        ready(ConditionStatus::True, "AddressAllocated"),
        Some("c4"),
        t(20),
    );
    assert_eq!(
        s2.conditions.as_ref().unwrap()[0].last_transition_time,
        t(10)
    );
    // A flip moves it, and the legacy mirror gets a severity.
    let s3 = claim_status_with_ready(
        &c,
        ready(ConditionStatus::False, "AllocationFailed"),
        None,
        t(30),
    );
    assert_eq!(
        s3.conditions.as_ref().unwrap()[0].last_transition_time,
        t(30)
    );
    assert_eq!(
        s3.legacy_conditions().unwrap()[1].severity.as_deref(),
        Some("Error")
    );
    assert!(s3.address_ref.is_none());
    let body = claim_status_patch(&s3);
    assert!(body["status"].get("addressRef").is_none());
    assert_eq!(body["kind"], "IPAddressClaim");
}

// ---------------------------------------------------------------------------------------------
// Generated CRDs

fn check_structural(schema: &Value, path: &str, problems: &mut Vec<String>) {
    let obj = schema.as_object().expect("schema is an object");
    let exempt = schema["x-kubernetes-preserve-unknown-fields"] == true
        || schema["x-kubernetes-int-or-string"] == true;
    if !obj.contains_key("type") && !exempt {
        problems.push(format!("{path}: no type"));
    }
    for key in [
        "$ref",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "additionalItems",
        "definitions",
        "$defs",
    ] {
        if obj.contains_key(key) {
            problems.push(format!("{path}: has {key}"));
        }
    }
    if obj.contains_key("additionalProperties") && obj.contains_key("properties") {
        problems.push(format!("{path}: both properties and additionalProperties"));
    }
    if let Some(props) = schema["properties"].as_object() {
        for (k, v) in props {
            check_structural(v, &format!("{path}.{k}"), problems);
        }
    }
    if let Some(items) = schema.get("items") {
        check_structural(items, &format!("{path}[]"), problems);
    }
    if let Some(ap) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        check_structural(ap, &format!("{path}{{}}"), problems);
    }
}

#[test]
fn generated_crds_are_structural() {
    for crd in pool_crds()
        .into_iter()
        .chain(prefix_pool_crds())
        .chain(local_capi_crds())
    {
        let v = serde_json::to_value(&crd).unwrap();
        for version in v["spec"]["versions"].as_array().unwrap() {
            let mut problems = vec![];
            check_structural(&version["schema"]["openAPIV3Schema"], "", &mut problems);
            assert!(problems.is_empty(), "{}: {problems:?}", crd.name_any());
        }
    }
}

/// Short names and categories: `kubectl get ipam` lists the pools, `kubectl get cluster-api`
/// lists no reservation (one exists per held address), and no short name is taken by Cluster
/// API's kinds or by another name of inpool's.
#[test]
fn short_names_and_categories_collide_with_nothing() {
    let names = |crd: &Value| crd["spec"]["names"].clone();
    let ours: Vec<Value> = generated_files()
        .iter()
        .filter(|f| f.path.starts_with("crds/") && f.path != "crds/kustomization.yaml")
        .map(|f| names(&serde_saphyr::from_str::<Value>(&f.content).unwrap()))
        .collect();
    let short: Vec<(&str, &str)> = ours
        .iter()
        .map(|n| {
            (
                n["kind"].as_str().unwrap(),
                n["shortNames"][0].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        short,
        [
            ("InClusterIPPool", "icipp"),
            ("GlobalInClusterIPPool", "gicipp"),
            ("InClusterPrefixPool", "icpp"),
            ("GlobalInClusterPrefixPool", "gicpp"),
            ("IPAddressReservation", "ipres"),
        ]
    );
    for n in &ours {
        let expected = if n["kind"] == "IPAddressReservation" {
            json!(["inpool"])
        } else {
            json!(["cluster-api", "ipam"])
        };
        assert_eq!(n["categories"], expected, "{}", n["kind"]);
    }
    // Every name kubectl resolves, ours and Cluster API's (its CRDs from the Go module).
    let crd_dir = inpool_testenv::capi::crd_dir().unwrap();
    let capi: Vec<Value> = inpool_testenv::yaml_files(&crd_dir)
        .iter()
        .map(|file| names(&read_yaml(file)))
        .collect();
    assert!(
        capi.len() > 5,
        "Cluster API's CRDs in {}",
        crd_dir.display()
    );
    let mut taken: Vec<String> = Vec::new();
    for n in capi.iter().chain(&ours) {
        for key in ["plural", "singular"] {
            taken.extend(n[key].as_str().map(str::to_string));
        }
        taken.extend(
            n["shortNames"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| s.as_str().unwrap().to_string()),
        );
    }
    let unique: BTreeSet<&String> = taken.iter().collect();
    assert_eq!(
        unique.len(),
        taken.len(),
        "a name is taken twice: {taken:?}"
    );
}

#[test]
fn pool_crds_match_the_reference_names_and_fields() {
    let reference_dir = support::reference_crd_dir();
    for (ours, file) in pool_crds().into_iter().zip([
        "ipam.cluster.x-k8s.io_inclusterippools.yaml",
        "ipam.cluster.x-k8s.io_globalinclusterippools.yaml",
    ]) {
        let reference = read_yaml(&reference_dir.join(file));
        let ours = serde_json::to_value(&ours).unwrap();
        let ours_v = assert_named_and_served_as_the_reference(&ours, &reference);
        assert!(
            ours["metadata"]["labels"]
                .get("cluster.x-k8s.io/provider")
                .is_none()
        );
        // The reference's columns in its order, then the pool's Ready condition and its age.
        let cols: Vec<&str> = ours_v["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c.get("priority").is_none())
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(cols, ["Addresses", "Total", "Free", "Used", "Ready", "Age"]);
        let reference_cols: Vec<&str> =
            version_of(&reference, "v1alpha2")["additionalPrinterColumns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap())
                .collect();
        assert_eq!(cols[..reference_cols.len()], reference_cols);

        // Every field of the reference is there, with the same type; the status counters are
        // the same; the spec requires the same fields but `addresses` and `prefix`, which a pool
        // carved from a parent leaves out (a CEL rule requires them without `parentPool`, and
        // every reference manifest has both; docs/pools.md, "Pools carved from a parent").
        let diffs = reference_field_diffs(&reference, &ours);
        let carved_exception = r#"spec: required {"addresses", "prefix"} vs ours {}"#;
        assert_eq!(diffs, [carved_exception], "{diffs:#?}");
    }
}

/// Every property of the reference exists in ours with the same type, format and
/// required-ness, and no stricter bounds than the reference's except where documented.
#[test]
fn prefix_pool_crds_match_the_reference_names_and_fields() {
    let reference_dir = support::reference_crd_dir();
    for (ours, file) in prefix_pool_crds().into_iter().zip([
        "ipam.cluster.x-k8s.io_inclusterprefixpools.yaml",
        "ipam.cluster.x-k8s.io_globalinclusterprefixpools.yaml",
    ]) {
        let reference = read_yaml(&reference_dir.join(file));
        let ours = serde_json::to_value(&ours).unwrap();
        let name = ours["metadata"]["name"].as_str().unwrap().to_string();
        let ours_v = assert_named_and_served_as_the_reference(&ours, &reference);
        // The reference's printer columns first, in its order; inpool adds Ready and Age.
        let columns = |v: &Value| -> Vec<(String, String)> {
            v["additionalPrinterColumns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_string(),
                        c["jsonPath"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        };
        let reference_columns = columns(version_of(&reference, "v1alpha2"));
        let our_columns = columns(ours_v);
        assert_eq!(
            our_columns[..reference_columns.len()],
            reference_columns[..]
        );
        let rs = version_schema(&reference, "v1alpha2");
        let os = version_schema(&ours, "v1alpha2");
        assert_eq!(
            os["properties"]["spec"]["properties"]["allocationPrefixLength"]["default"],
            rs["properties"]["spec"]["properties"]["allocationPrefixLength"]["default"],
            "{name}: the default allocation length"
        );
        // The same exception as the IP pools': `prefixes` is required unless `parentPool` is
        // set (a CEL rule; every reference manifest has it).
        let diffs = reference_field_diffs(&reference, &ours);
        let carved_exception = r#"spec: required {"prefixes"} vs ours {}"#;
        assert_eq!(diffs, [carved_exception], "{name}: {diffs:#?}");
    }
}

/// Asserts that our pool CRD `ours` has the reference CRD's name, group, scope and names (inpool
/// adds the `ipam` category and a short name, see
/// `short_names_and_categories_collide_with_nothing`), the move-hierarchy label, and a served,
/// stored `v1alpha2` with a status subresource; returns that version.
fn assert_named_and_served_as_the_reference<'a>(ours: &'a Value, reference: &Value) -> &'a Value {
    let name = &ours["metadata"]["name"];
    assert_eq!(*name, reference["metadata"]["name"]);
    assert_eq!(ours["spec"]["group"], reference["spec"]["group"], "{name}");
    assert_eq!(ours["spec"]["scope"], reference["spec"]["scope"], "{name}");
    for key in ["kind", "plural", "singular"] {
        assert_eq!(
            ours["spec"]["names"][key], reference["spec"]["names"][key],
            "{name}: names.{key}"
        );
    }
    assert_eq!(
        reference["spec"]["names"]["categories"],
        json!(["cluster-api"])
    );
    assert_eq!(
        ours["metadata"]["labels"]["clusterctl.cluster.x-k8s.io/move-hierarchy"],
        ""
    );
    let ours_v = version_of(ours, "v1alpha2");
    assert_eq!(ours_v["served"], true, "{name}");
    assert_eq!(ours_v["storage"], true, "{name}");
    assert_eq!(ours_v["subresources"], json!({"status": {}}), "{name}");
    ours_v
}

/// Where the `v1alpha2` spec and status schemas of our CRD `ours` fall short of the reference
/// CRD's (see [`compare_reference_fields`]).
fn reference_field_diffs(reference: &Value, ours: &Value) -> Vec<String> {
    let rs = version_schema(reference, "v1alpha2");
    let os = version_schema(ours, "v1alpha2");
    let mut diffs = vec![];
    for part in ["spec", "status"] {
        compare_reference_fields(
            &rs["properties"][part],
            &os["properties"][part],
            part,
            &mut diffs,
        );
    }
    diffs
}

/// The properties a schema node requires.
fn required_of(schema: &Value) -> BTreeSet<String> {
    schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn compare_reference_fields(reference: &Value, ours: &Value, path: &str, diffs: &mut Vec<String>) {
    for key in ["type", "format"] {
        if reference[key] != ours[key] {
            diffs.push(format!(
                "{path}: {key} {} vs ours {}",
                reference[key], ours[key]
            ));
        }
    }
    for key in ["minimum", "maximum"] {
        if reference[key].as_f64() != ours[key].as_f64() {
            diffs.push(format!(
                "{path}: {key} {} vs ours {}",
                reference[key], ours[key]
            ));
        }
    }
    if required_of(reference) != required_of(ours) {
        diffs.push(format!(
            "{path}: required {:?} vs ours {:?}",
            required_of(reference),
            required_of(ours)
        ));
    }
    if let Some(props) = reference["properties"].as_object() {
        for (k, rv) in props {
            match ours["properties"].get(k) {
                None => diffs.push(format!("{path}.{k}: missing in ours")),
                Some(ov) => compare_reference_fields(rv, ov, &format!("{path}.{k}"), diffs),
            }
        }
    }
    if reference.get("items").is_some() {
        compare_reference_fields(
            &reference["items"],
            &ours["items"],
            &format!("{path}[]"),
            diffs,
        );
    }
}

/// Compares every property we define with the fixture's at the same path; returns how many
/// schema nodes were compared.
fn compare_with_fixture(
    ours: &Value,
    fixture: &Value,
    path: &str,
    diffs: &mut Vec<String>,
) -> usize {
    let mut visited = 1;
    const KEYS: [&str; 14] = [
        "type",
        "format",
        "pattern",
        "minLength",
        "maxLength",
        "enum",
        "minProperties",
        "maxProperties",
        "minItems",
        "maxItems",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-int-or-string",
    ];
    for key in KEYS {
        if ours.get(key) != fixture.get(key) {
            diffs.push(format!(
                "{path}: {key} ours {:?} vs CAPI {:?}",
                ours.get(key),
                fixture.get(key)
            ));
        }
    }
    for key in ["minimum", "maximum"] {
        if ours[key].as_f64() != fixture[key].as_f64() {
            diffs.push(format!(
                "{path}: {key} ours {} vs CAPI {}",
                ours[key], fixture[key]
            ));
        }
    }
    let ours_props: BTreeSet<String> = ours["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    // Required-ness of the properties we define must match (the fixture may require fields
    // we do not describe only where we preserve unknown fields).
    let ours_req = required_of(ours);
    let fixture_req: BTreeSet<String> = required_of(fixture)
        .into_iter()
        .filter(|r| ours_props.contains(r))
        .collect();
    if ours_req != fixture_req {
        diffs.push(format!(
            "{path}: required ours {ours_req:?} vs CAPI {fixture_req:?}"
        ));
    }
    if ours["x-kubernetes-preserve-unknown-fields"] != true {
        let fixture_props: BTreeSet<String> = fixture["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        if !path.is_empty() && fixture_props != ours_props {
            diffs.push(format!(
                "{path}: properties ours {ours_props:?} vs CAPI {fixture_props:?}"
            ));
        }
    }
    for k in &ours_props {
        match fixture["properties"].get(k) {
            None if path.is_empty() => {}
            None => diffs.push(format!("{path}.{k}: not in CAPI's schema")),
            Some(fv) => {
                visited +=
                    compare_with_fixture(&ours["properties"][k], fv, &format!("{path}.{k}"), diffs)
            }
        }
    }
    if let Some(items) = ours.get("items") {
        visited += compare_with_fixture(items, &fixture["items"], &format!("{path}[]"), diffs);
    }
    visited
}

#[test]
fn local_capi_crds_match_capis_own() {
    let files = [
        "ipam.cluster.x-k8s.io_ipaddressclaims.yaml",
        "ipam.cluster.x-k8s.io_ipaddresses.yaml",
        "cluster.x-k8s.io_clusters.yaml",
    ];
    for (ours, file) in local_capi_crds().into_iter().zip(files) {
        let fixture = capi_crd(file);
        let ours = serde_json::to_value(&ours).unwrap();
        let name = ours["metadata"]["name"].as_str().unwrap().to_string();
        assert_eq!(ours["metadata"]["name"], fixture["metadata"]["name"]);
        assert_eq!(
            ours["metadata"]["annotations"]["inpool.dev/local-use-only"], "true",
            "{name}"
        );
        assert_eq!(ours["spec"]["group"], fixture["spec"]["group"], "{name}");
        assert_eq!(ours["spec"]["scope"], fixture["spec"]["scope"], "{name}");
        for key in ["kind", "plural", "singular", "categories", "shortNames"] {
            assert_eq!(
                ours["spec"]["names"][key], fixture["spec"]["names"][key],
                "{name}: names.{key}"
            );
        }
        let versions = ours["spec"]["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1, "{name}: v1beta2 only");
        let ov = &versions[0];
        assert_eq!(ov["name"], "v1beta2");
        let fv = version_of(&fixture, "v1beta2");
        // Status subresource exactly where CAPI has one.
        assert_eq!(
            ov["subresources"].get("status").is_some(),
            fv["subresources"].get("status").is_some(),
            "{name}: status subresource"
        );
        if name != "clusters.cluster.x-k8s.io" {
            assert_eq!(
                ov["additionalPrinterColumns"], fv["additionalPrinterColumns"],
                "{name}: printer columns"
            );
        }
        let mut diffs = vec![];
        let visited = compare_with_fixture(
            &ov["schema"]["openAPIV3Schema"],
            &fv["schema"]["openAPIV3Schema"],
            "",
            &mut diffs,
        );
        // claim: spec + status = 28 nodes; address: 11; cluster (the part inpool reads): 14.
        let at_least = match name.as_str() {
            "ipaddressclaims.ipam.cluster.x-k8s.io" => 28,
            "ipaddresses.ipam.cluster.x-k8s.io" => 11,
            _ => 14,
        };
        assert!(
            visited >= at_least,
            "{name}: only {visited} schema nodes compared"
        );
        assert!(diffs.is_empty(), "{name}: {diffs:#?}");
    }
}

#[test]
fn generated_files_say_they_are_generated() {
    for f in generated_files() {
        assert!(f.content.starts_with("# "), "{}", f.path);
        assert!(f.content.contains("cargo run --bin crdgen"), "{}", f.path);
        if f.path.starts_with("config/local-capi/") {
            assert!(f.content.starts_with("# LOCAL USE ONLY"), "{}", f.path);
        }
        // The YAML reads back to the same CRD (the kustomization beside them lists them).
        let back: Value =
            serde_saphyr::from_str(&f.content).unwrap_or_else(|e| panic!("{}: {e}", f.path));
        if f.path == "crds/kustomization.yaml" {
            assert_eq!(back["kind"], "Kustomization");
            continue;
        }
        let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_json::from_value(back).unwrap();
        // (Files of other modules only need to parse; the pool and local CAPI CRDs must read
        // back exactly.)
        if let Some(expected) = pool_crds()
            .into_iter()
            .chain(local_capi_crds())
            .find(|c| c.metadata.name == crd.metadata.name)
        {
            assert_eq!(crd, expected, "{}", f.path);
        }
    }
}

#[test]
fn generated_crds_are_up_to_date() {
    let stale = stale_files(&repo_root());
    assert!(
        stale.is_empty(),
        "stale generated files {stale:?}: run `cargo run --bin crdgen` and commit the result"
    );
}
