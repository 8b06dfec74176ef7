//! inpool's packaging: the components file (clusterctl's `ipam-components.yaml`, which
//! `tests/offline/kustomize.rs` checks is `kustomize build config/default`) follows the
//! clusterctl contract and applies with server-side apply on the test control plane; the ServiceAccount's effective permissions are exactly the listed
//! ones. The binary itself is tested in `binary`, and running as that ServiceAccount on
//! real claims in `service_account`.

use std::collections::BTreeSet;

use inpool_testenv::{common, support};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use kube::api::{Api, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use common::{
    FIELD_MANAGER, METRICS_READER_ROLE, PROVIDER, PROVIDER_LABEL, SERVICE_ACCOUNT,
    SYSTEM_NAMESPACE, api_of, apply_objects, bind_metrics_reader, components, ensure_applied, kind,
    name, parse_documents, service_account_client, service_account_groups_of,
    service_account_user_of, unbind_metrics_reader, unique,
};

/// The ServiceAccount's permissions everywhere (ClusterRole `inpool-manager-role`):
/// (API group, resource[/subresource], verbs). Mirrors `config/rbac/role.yaml`.
const CLUSTER_PERMISSIONS: &[(&str, &str, &[&str])] = &[
    (
        "ipam.cluster.x-k8s.io",
        "ipaddressclaims",
        &["create", "delete", "get", "list", "watch", "patch"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "ipaddressclaims/status",
        &["patch"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "ipaddressclaims/finalizers",
        &["update"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "ipaddresses",
        &["create", "delete", "get", "list", "watch", "patch"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "inclusterippools",
        &["get", "list", "watch", "patch"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "globalinclusterippools",
        &["get", "list", "watch", "patch"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "inclusterprefixpools",
        &["get", "list", "watch", "patch"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "globalinclusterprefixpools",
        &["get", "list", "watch", "patch"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "inclusterippools/status",
        &["patch"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "globalinclusterippools/status",
        &["patch"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "inclusterprefixpools/status",
        &["patch"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "globalinclusterprefixpools/status",
        &["patch"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "inclusterippools/finalizers",
        &["update"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "globalinclusterippools/finalizers",
        &["update"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "inclusterprefixpools/finalizers",
        &["update"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "globalinclusterprefixpools/finalizers",
        &["update"],
    ),
    ("cluster.x-k8s.io", "clusters", &["get", "list", "watch"]),
    ("events.k8s.io", "events", &["create", "patch"]),
    // The reference IPAM provider's leader election Lease, listed and watched by name in every
    // namespace: only that name (`resourceNames`).
    (
        "coordination.k8s.io",
        "leases[7bb7acb4.ipam.cluster.x-k8s.io]",
        &["list", "watch"],
    ),
    // The secure diagnostics: who is calling /metrics, and may they.
    ("authentication.k8s.io", "tokenreviews", &["create"]),
    ("authorization.k8s.io", "subjectaccessreviews", &["create"]),
    (
        "ipam.inpool.dev",
        "ipaddressreservations",
        &["create", "delete", "get", "list", "patch", "watch"],
    ),
];

/// Permissions in `inpool-system` only (Role `inpool-leader-election-role`).
const SYSTEM_NAMESPACE_PERMISSIONS: &[(&str, &str, &[&str])] =
    &[("coordination.k8s.io", "leases", &["get", "create", "patch"])];

/// (namespace or "" for all, API group, resource[/subresource], verb) that must be denied.
const DENIED: &[(&str, &str, &str, &str)] = &[
    // inpool never replaces an object: `update` only on the finalizers subresources.
    ("", "ipam.cluster.x-k8s.io", "ipaddressclaims", "update"),
    (
        "",
        "ipam.cluster.x-k8s.io",
        "ipaddressclaims/status",
        "update",
    ),
    ("", "ipam.cluster.x-k8s.io", "ipaddresses", "update"),
    ("", "ipam.cluster.x-k8s.io", "inclusterippools", "update"),
    (
        "",
        "ipam.cluster.x-k8s.io",
        "globalinclusterprefixpools/status",
        "update",
    ),
    (
        "",
        "ipam.cluster.x-k8s.io",
        "inclusterippools/status",
        "get",
    ),
    ("", "", "secrets", "get"),
    ("", "", "pods", "list"),
    ("", "", "configmaps", "create"),
    (
        "",
        "ipam.cluster.x-k8s.io",
        "ipaddressclaims",
        "deletecollection",
    ),
    (
        "",
        "ipam.cluster.x-k8s.io",
        "ipaddresses",
        "deletecollection",
    ),
    ("", "ipam.cluster.x-k8s.io", "inclusterippools", "create"),
    ("", "ipam.cluster.x-k8s.io", "inclusterippools", "delete"),
    ("", "cluster.x-k8s.io", "clusters", "patch"),
    ("", "cluster.x-k8s.io", "clusters/status", "patch"),
    ("", "", "events", "create"),
    ("", "coordination.k8s.io", "leases", "get"),
    // Leases by name only: not every Lease, and not another one.
    ("", "coordination.k8s.io", "leases", "list"),
    ("", "coordination.k8s.io", "leases[kube-scheduler]", "list"),
    ("", "coordination.k8s.io", "leases[kube-scheduler]", "watch"),
    ("default", "coordination.k8s.io", "leases", "create"),
    (SYSTEM_NAMESPACE, "coordination.k8s.io", "leases", "delete"),
    ("", "coordination.k8s.io", "leases", "watch"),
    (SYSTEM_NAMESPACE, "coordination.k8s.io", "leases", "update"),
    (
        "",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "get",
    ),
    ("", "rbac.authorization.k8s.io", "clusterroles", "escalate"),
    (
        "",
        "authorization.k8s.io",
        "localsubjectaccessreviews",
        "create",
    ),
    // Something a careless rule could grant: minting tokens for any ServiceAccount.
    ("", "", "serviceaccounts/token", "create"),
];

fn find<'a>(objects: &'a [Value], kind_: &str, name_: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| kind(o) == kind_ && name(o) == name_)
        .unwrap_or_else(|| panic!("no {kind_} {name_} in ipam-components.yaml"))
}

#[test]
fn components_follow_the_clusterctl_contract() {
    let objects = components();
    for object in &objects {
        assert_eq!(
            object["metadata"]["labels"][PROVIDER_LABEL],
            PROVIDER,
            "{} {} lacks the provider label",
            kind(object),
            name(object)
        );
    }
    let namespaces: Vec<&Value> = objects.iter().filter(|o| kind(o) == "Namespace").collect();
    assert_eq!(
        namespaces.len(),
        1,
        "clusterctl wants exactly one Namespace"
    );
    assert_eq!(name(namespaces[0]), SYSTEM_NAMESPACE);
    for object in &objects {
        let namespaced = !matches!(
            kind(object),
            "Namespace" | "CustomResourceDefinition" | "ClusterRole" | "ClusterRoleBinding"
        );
        if namespaced {
            assert_eq!(
                object["metadata"]["namespace"],
                SYSTEM_NAMESPACE,
                "{} {}",
                kind(object),
                name(object)
            );
        }
    }

    // Every CRD of crds/ ships, with its move-hierarchy label.
    let crd_names: BTreeSet<&str> = objects
        .iter()
        .filter(|o| kind(o) == "CustomResourceDefinition")
        .map(name)
        .collect();
    for file in support::crd_files() {
        if !file.starts_with(support::repo_root().join("crds")) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for crd in parse_documents(&text) {
            assert!(crd_names.contains(name(&crd)), "{} not shipped", name(&crd));
        }
    }

    // The Deployment: container `manager`, leader election, hardened, probed, bounded.
    let deployment = find(&objects, "Deployment", "inpool-controller-manager");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], SERVICE_ACCOUNT);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let manager = &containers[0];
    assert_eq!(manager["name"], "manager");
    let args: Vec<&str> = manager["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    // Leader election, JSON logs, and diagnostics over HTTPS with authentication unless the
    // installer sets clusterctl's variables as for Cluster API's own providers.
    assert_eq!(
        args,
        [
            "--leader-elect",
            "--log-format=json",
            "--diagnostics-address=${CAPI_DIAGNOSTICS_ADDRESS:=:8443}",
            "--insecure-diagnostics=${CAPI_INSECURE_DIAGNOSTICS:=false}",
        ]
    );
    let metrics_port = manager["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "metrics")
        .expect("container port `metrics`");
    assert_eq!(metrics_port["containerPort"], 8443);
    let security = &manager["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(manager["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(manager["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(manager["resources"]["requests"]["cpu"].is_string());
    assert!(manager["resources"]["requests"]["memory"].is_string());
    assert!(manager["resources"]["limits"]["memory"].is_string());
    let env: BTreeSet<(&str, &str)> = manager["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["valueFrom"]["fieldRef"]["fieldPath"]
                    .as_str()
                    .unwrap_or(""),
            )
        })
        .collect();
    assert!(
        env.contains(&("POD_NAMESPACE", "metadata.namespace")),
        "{env:?}"
    );
    assert!(env.contains(&("POD_NAME", "metadata.name")), "{env:?}");

    // The metrics Service selects the manager pods.
    let service = find(&objects, "Service", "inpool-controller-manager-metrics");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (k, v) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&pod_labels[k], v, "selector {k}");
    }
    assert_eq!(
        service["spec"]["ports"],
        // Named `metrics` as before HTTPS, so that ServiceMonitors selecting `port: metrics`
        // keep working (with `scheme: https`).
        json!([{
            "name": "metrics",
            "port": 8443,
            "targetPort": "metrics",
            "protocol": "TCP",
            "appProtocol": "https",
        }])
    );

    // RBAC: no wildcards anywhere.
    for object in objects
        .iter()
        .filter(|o| matches!(kind(o), "ClusterRole" | "Role"))
    {
        for rule in object["rules"].as_array().unwrap() {
            for key in ["apiGroups", "resources", "verbs", "nonResourceURLs"] {
                for value in rule[key].as_array().into_iter().flatten() {
                    assert_ne!(value, "*", "wildcard in {} {}", kind(object), name(object));
                }
            }
        }
    }
    // Reading /metrics: exactly `get` on it, bound to no one (the user binds their Prometheus).
    let reader = find(&objects, "ClusterRole", METRICS_READER_ROLE);
    assert_eq!(
        reader["rules"],
        json!([{ "nonResourceURLs": ["/metrics"], "verbs": ["get"] }])
    );
    for binding in objects
        .iter()
        .filter(|o| matches!(kind(o), "ClusterRoleBinding" | "RoleBinding"))
    {
        assert_ne!(
            binding["roleRef"]["name"],
            METRICS_READER_ROLE,
            "{}",
            name(binding)
        );
    }

    // clusterctl metadata for contract v1beta2.
    let metadata: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(support::repo_root().join("config/clusterctl/metadata.yaml"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        metadata["apiVersion"],
        "clusterctl.cluster.x-k8s.io/v1alpha3"
    );
    assert_eq!(metadata["kind"], "Metadata");
    assert_eq!(
        metadata["releaseSeries"],
        json!([{ "major": 0, "minor": 1, "contract": "v1beta2" }])
    );
}

// ------------------------------------------------------------------------------------------
// On the control plane
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn components_apply_with_server_side_apply() {
    ensure_applied().await;
    let client = support::env().client().await;
    let objects = components();
    // Applying again is a no-op, not a conflict.
    apply_objects(&client, &objects, &PatchParams::apply(FIELD_MANAGER))
        .await
        .unwrap();
    for object in &objects {
        let api = api_of(&client, object, SYSTEM_NAMESPACE).await;
        let live = api.get(name(object)).await.unwrap();
        assert_eq!(
            live.labels().get(PROVIDER_LABEL).map(String::as_str),
            Some(PROVIDER),
            "{} {}",
            kind(object),
            name(object)
        );
    }
}

async fn access_allowed(
    client: &Client,
    namespace: &str,
    group: &str,
    resource: &str,
    verb: &str,
) -> bool {
    // `resource[name]`: one object of it.
    let (resource, object) = match resource.strip_suffix(']').and_then(|r| r.split_once('[')) {
        Some((r, name)) => (r, Some(name.to_string())),
        None => (resource, None),
    };
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (resource, None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
                group: Some(group.to_string()),
                resource: Some(resource.to_string()),
                subresource,
                name: object,
                verb: Some(verb.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectAccessReview");
    answer.status.expect("review status").allowed
}

/// What a subject may do in `namespace`, by SelfSubjectRulesReview.
struct Permissions {
    /// (group, resource, verb).
    resources: BTreeSet<(String, String, String)>,
    /// (verb, non-resource URL).
    non_resources: BTreeSet<(String, String)>,
}

async fn permissions(client: &Client, namespace: &str) -> Permissions {
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(namespace.to_string()),
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectRulesReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectRulesReview");
    let status = answer.status.expect("rules status");
    assert!(
        !status.incomplete,
        "incomplete rules review: {:?}",
        status.evaluation_error
    );
    let mut resources = BTreeSet::new();
    for rule in status.resource_rules {
        // A rule limited to some objects names each: `resource[name]`.
        let names = rule.resource_names.clone().unwrap_or_default();
        for group in rule.api_groups.unwrap_or_default() {
            for resource in rule.resources.clone().unwrap_or_default() {
                let limited: Vec<String> = if names.is_empty() {
                    vec![resource.clone()]
                } else {
                    names.iter().map(|n| format!("{resource}[{n}]")).collect()
                };
                for resource in limited {
                    for verb in &rule.verbs {
                        resources.insert((group.clone(), resource.clone(), verb.clone()));
                    }
                }
            }
        }
    }
    let mut non_resources = BTreeSet::new();
    for rule in status.non_resource_rules {
        for url in rule.non_resource_urls.unwrap_or_default() {
            for verb in &rule.verbs {
                non_resources.insert((verb.clone(), url.clone()));
            }
        }
    }
    Permissions {
        resources,
        non_resources,
    }
}

/// (group, resource, verb) triples a subject may use in `namespace`.
async fn rules(client: &Client, namespace: &str) -> BTreeSet<(String, String, String)> {
    permissions(client, namespace).await.resources
}

fn expand(permissions: &[(&str, &str, &[&str])]) -> BTreeSet<(String, String, String)> {
    permissions
        .iter()
        .flat_map(|(group, resource, verbs)| {
            verbs
                .iter()
                .map(move |verb| (group.to_string(), resource.to_string(), verb.to_string()))
        })
        .collect()
}

#[tokio::test]
async fn the_service_account_has_exactly_the_listed_permissions() {
    ensure_applied().await;
    let inpool = service_account_client().await;
    // What any authenticated service account may do (discovery, self-reviews...), to subtract.
    let nobody = support::env()
        .client_as(
            &format!("system:serviceaccount:{SYSTEM_NAMESPACE}:nobody"),
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:inpool-system",
                "system:authenticated",
            ],
        )
        .await;
    let (_, other_namespace) = support::env().namespace().await;

    // Every listed permission is granted: cluster-wide and in an arbitrary namespace.
    for (group, resource, verbs) in CLUSTER_PERMISSIONS {
        for verb in *verbs {
            for namespace in ["", other_namespace.as_str()] {
                assert!(
                    access_allowed(&inpool, namespace, group, resource, verb).await,
                    "denied: {verb} {group}/{resource} in {namespace:?}"
                );
            }
        }
    }
    for (group, resource, verbs) in SYSTEM_NAMESPACE_PERMISSIONS {
        for verb in *verbs {
            assert!(
                access_allowed(&inpool, SYSTEM_NAMESPACE, group, resource, verb).await,
                "denied: {verb} {group}/{resource} in {SYSTEM_NAMESPACE}"
            );
        }
    }
    for (namespace, group, resource, verb) in DENIED {
        assert!(
            !access_allowed(&inpool, namespace, group, resource, verb).await,
            "allowed but must not be: {verb} {group}/{resource} in {namespace:?}"
        );
    }

    // Nothing more: the effective rules, less those of an unbound service account, are exactly
    // the list, in inpool's namespace and in any other.
    let baseline_system = rules(&nobody, SYSTEM_NAMESPACE).await;
    let effective_system: BTreeSet<_> = rules(&inpool, SYSTEM_NAMESPACE)
        .await
        .difference(&baseline_system)
        .cloned()
        .collect();
    let mut expected_system = expand(CLUSTER_PERMISSIONS);
    expected_system.extend(expand(SYSTEM_NAMESPACE_PERMISSIONS));
    assert_same_permissions(&effective_system, &expected_system, SYSTEM_NAMESPACE);

    let baseline_other = rules(&nobody, &other_namespace).await;
    let effective_other: BTreeSet<_> = rules(&inpool, &other_namespace)
        .await
        .difference(&baseline_other)
        .cloned()
        .collect();
    assert_same_permissions(
        &effective_other,
        &expand(CLUSTER_PERMISSIONS),
        &other_namespace,
    );
    // No non-resource URL beyond what every service account has (not even /metrics).
    assert_eq!(
        permissions(&inpool, SYSTEM_NAMESPACE).await.non_resources,
        permissions(&nobody, SYSTEM_NAMESPACE).await.non_resources
    );
}

/// A subject bound to `inpool-metrics-reader` gains exactly `get /metrics` and nothing else.
#[tokio::test]
async fn the_metrics_reader_role_grants_exactly_get_metrics() {
    ensure_applied().await;
    let admin = support::env().client().await;
    let (_, namespace) = support::env().namespace().await;
    let reader_name = "scraper";
    let binding = unique("metrics-reader");
    bind_metrics_reader(&admin, &binding, &namespace, reader_name).await;
    let as_service_account = |name: &'static str| {
        let user = service_account_user_of(&namespace, name);
        let groups = service_account_groups_of(&namespace);
        async move {
            let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
            support::env().client_as(&user, &groups).await
        }
    };
    let reader = permissions(&as_service_account(reader_name).await, &namespace).await;
    let nobody = permissions(&as_service_account("nobody").await, &namespace).await;
    unbind_metrics_reader(&admin, &binding).await;

    let gained: Vec<_> = reader
        .non_resources
        .difference(&nobody.non_resources)
        .collect();
    assert_eq!(
        gained,
        [&("get".to_string(), "/metrics".to_string())],
        "non-resource permissions the ClusterRole {METRICS_READER_ROLE} adds"
    );
    assert_eq!(
        reader.resources, nobody.resources,
        "{METRICS_READER_ROLE} grants resources"
    );
}

/// The ClusterRoles that add pools and claims to Kubernetes' `view`, `edit` and `admin` roles.
const POOLS_VIEW_ROLE: &str = "inpool-pools-view";
const POOLS_EDIT_ROLE: &str = "inpool-pools-edit";

/// A namespace's editor manages the namespaced pools and claims there and reads their
/// `IPAddress`es, and nothing more: no global pool, no `IPAddress` written, no reservation, no
/// other namespace; a viewer reads them. The test control plane runs no kube-controller-manager,
/// which does the aggregation: the users are bound to the two ClusterRoles directly, as
/// aggregation adds their rules to `edit` and `view`; the labels that ask for it are checked.
#[tokio::test]
async fn a_namespace_editor_manages_its_pools_and_claims_and_nothing_more() {
    ensure_applied().await;
    let objects = components();
    for (role, aggregated) in [
        (POOLS_VIEW_ROLE, &["admin", "edit", "view"][..]),
        (POOLS_EDIT_ROLE, &["admin", "edit"][..]),
    ] {
        let labels = &find(&objects, "ClusterRole", role)["metadata"]["labels"];
        for to in aggregated {
            assert_eq!(
                labels[format!("rbac.authorization.k8s.io/aggregate-to-{to}")],
                "true",
                "{role} aggregates to {to}"
            );
        }
    }
    let admin = support::env().client().await;
    let (_, namespace) = support::env().namespace().await;
    let (_, other) = support::env().namespace().await;
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(admin.clone(), &namespace);
    for (user, roles) in [
        ("pool-editor", &[POOLS_VIEW_ROLE, POOLS_EDIT_ROLE][..]),
        ("pool-viewer", &[POOLS_VIEW_ROLE][..]),
    ] {
        for role in roles {
            let binding: k8s_openapi::api::rbac::v1::RoleBinding = common::typed(json!({
                "metadata": {"name": format!("{user}-{role}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                    "name": user}],
            }));
            bindings
                .create(&PostParams::default(), &binding)
                .await
                .expect("a RoleBinding");
        }
    }
    let groups = ["system:authenticated"];
    let editor = support::env().client_as("pool-editor", &groups).await;
    let viewer = support::env().client_as("pool-viewer", &groups).await;
    let nobody = support::env().client_as("nobody", &groups).await;
    let baseline = rules(&nobody, &namespace).await;
    let gained = |granted: BTreeSet<(String, String, String)>| -> BTreeSet<_> {
        granted.difference(&baseline).cloned().collect()
    };
    const READ: &[&str] = &["get", "list", "watch"];
    const READ_WRITE: &[&str] = &[
        "get",
        "list",
        "watch",
        "create",
        "delete",
        "deletecollection",
        "patch",
        "update",
    ];
    let group = "ipam.cluster.x-k8s.io";
    assert_same_permissions(
        &gained(rules(&editor, &namespace).await),
        &expand(&[
            (group, "inclusterippools", READ_WRITE),
            (group, "inclusterprefixpools", READ_WRITE),
            (group, "ipaddressclaims", READ_WRITE),
            (group, "ipaddresses", READ),
        ]),
        &namespace,
    );
    assert_same_permissions(
        &gained(rules(&viewer, &namespace).await),
        &expand(&[
            (group, "inclusterippools", READ),
            (group, "inclusterprefixpools", READ),
            (group, "ipaddressclaims", READ),
            (group, "ipaddresses", READ),
        ]),
        &namespace,
    );
    assert_same_permissions(
        &gained(rules(&editor, &other).await),
        &BTreeSet::new(),
        &other,
    );
    // What the rules review cannot show, asked one by one.
    for (scope, resource_group, resource) in [
        ("", group, "globalinclusterippools"),
        ("", group, "globalinclusterprefixpools"),
        ("", "ipam.inpool.dev", "ipaddressreservations"),
        (namespace.as_str(), group, "ipaddresses"),
        (namespace.as_str(), group, "inclusterippools/status"),
        (namespace.as_str(), group, "ipaddressclaims/status"),
        (other.as_str(), group, "inclusterippools"),
    ] {
        assert!(
            !access_allowed(&editor, scope, resource_group, resource, "create").await
                && !access_allowed(&editor, scope, resource_group, resource, "patch").await,
            "the editor may write {resource} in {scope:?}"
        );
    }
    assert!(access_allowed(&editor, &namespace, group, "inclusterippools", "create").await);
    for binding in bindings
        .list(&Default::default())
        .await
        .expect("listing the RoleBindings")
        .items
    {
        let _ = bindings
            .delete(&binding.name_any(), &Default::default())
            .await;
    }
}

fn assert_same_permissions(
    effective: &BTreeSet<(String, String, String)>,
    expected: &BTreeSet<(String, String, String)>,
    namespace: &str,
) {
    let extra: Vec<_> = effective.difference(expected).collect();
    let missing: Vec<_> = expected.difference(effective).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "in namespace {namespace}: granted but not listed (group, resource, verb): {extra:?}; \
         listed but not granted: {missing:?}"
    );
}

// ------------------------------------------------------------------------------------------
