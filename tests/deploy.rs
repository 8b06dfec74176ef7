//! inpool's shipping parts on the test control plane: the rendered `config/` (clusterctl's
//! `ipam-components.yaml`) is current, follows the clusterctl contract and applies with
//! server-side apply; the ServiceAccount's effective permissions are exactly the listed ones;
//! the `inpool` binary, running as that ServiceAccount, serves `/healthz`, `/readyz` and
//! OpenMetrics `/metrics` and exits 0 on SIGTERM; it realises and releases real claims without a
//! single forbidden request, and its per-pool gauges equal the pools' `status.ipAddresses`; with
//! leader election, exactly one of two instances leads and the other takes over within the
//! lease duration; and the work run under [`inpool::leader::run_as_leader`] never runs in two
//! instances at once and stops when the lease is lost.

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::discovery::{Scope, pinned_kind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use inpool::cli::LeaseSettings;
use inpool::leader::run_as_leader;
use inpool::telemetry::HealthState;

const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";
const PROVIDER: &str = "ipam-inpool";
const SYSTEM_NAMESPACE: &str = "inpool-system";
const SERVICE_ACCOUNT: &str = "inpool-controller-manager";
const FIELD_MANAGER: &str = "inpool-deploy-test";

/// The ServiceAccount's permissions everywhere (ClusterRole `inpool-manager-role`):
/// (API group, resource[/subresource], verbs). Mirrors `config/rbac/role.yaml`.
const CLUSTER_PERMISSIONS: &[(&str, &str, &[&str])] = &[
    (
        "ipam.cluster.x-k8s.io",
        "ipaddressclaims",
        &["get", "list", "watch", "patch", "update"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "ipaddressclaims/status",
        &["get", "patch", "update"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "ipaddressclaims/finalizers",
        &["update"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "ipaddresses",
        &[
            "create", "delete", "get", "list", "watch", "patch", "update",
        ],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "inclusterippools",
        &["get", "list", "watch", "patch", "update"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "globalinclusterippools",
        &["get", "list", "watch", "patch", "update"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "inclusterippools/status",
        &["get", "patch", "update"],
    ),
    (
        "ipam.cluster.x-k8s.io",
        "globalinclusterippools/status",
        &["get", "patch", "update"],
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
    ("cluster.x-k8s.io", "clusters", &["get", "list", "watch"]),
    ("events.k8s.io", "events", &["create", "patch"]),
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
    ("", "", "secrets", "get"),
    ("", "", "pods", "list"),
    ("", "", "configmaps", "create"),
    ("", "ipam.cluster.x-k8s.io", "ipaddressclaims", "delete"),
    ("", "ipam.cluster.x-k8s.io", "ipaddressclaims", "create"),
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
    ("default", "coordination.k8s.io", "leases", "create"),
    (SYSTEM_NAMESPACE, "coordination.k8s.io", "leases", "delete"),
    (SYSTEM_NAMESPACE, "coordination.k8s.io", "leases", "list"),
    (SYSTEM_NAMESPACE, "coordination.k8s.io", "leases", "update"),
    (
        "",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "get",
    ),
    ("", "rbac.authorization.k8s.io", "clusterroles", "escalate"),
];

fn service_account_user() -> String {
    format!("system:serviceaccount:{SYSTEM_NAMESPACE}:{SERVICE_ACCOUNT}")
}

fn service_account_groups() -> [String; 3] {
    [
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{SYSTEM_NAMESPACE}"),
        "system:authenticated".to_string(),
    ]
}

async fn service_account_client() -> Client {
    let groups = service_account_groups();
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    support::env()
        .client_as(&service_account_user(), &groups)
        .await
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn components_path() -> PathBuf {
    repo_root().join("config/clusterctl/ipam-components.yaml")
}

fn parse_documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("valid YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The objects of the committed `ipam-components.yaml`.
fn components() -> Vec<Value> {
    let text = std::fs::read_to_string(components_path()).expect("ipam-components.yaml");
    parse_documents(&text)
}

fn kind(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

fn find<'a>(objects: &'a [Value], kind_: &str, name_: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| kind(o) == kind_ && name(o) == name_)
        .unwrap_or_else(|| panic!("no {kind_} {name_} in ipam-components.yaml"))
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `timeout`.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ------------------------------------------------------------------------------------------
// The rendered configuration
// ------------------------------------------------------------------------------------------

#[test]
fn committed_components_file_is_the_rendering_of_config() {
    let output = Command::new(env!("CARGO_BIN_EXE_render-config"))
        .arg("--check")
        .output()
        .expect("run render-config");
    assert!(
        output.status.success(),
        "config/clusterctl/ipam-components.yaml is stale: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn every_crd_in_crds_is_listed_in_config_crd() {
    let text = std::fs::read_to_string(repo_root().join("config/crd/kustomization.yaml")).unwrap();
    let kustomization: Value = serde_saphyr::from_str(&text).unwrap();
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir(repo_root().join("crds"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml"))
        .map(|f| format!("../../crds/{f}"))
        .collect();
    assert_eq!(
        listed, on_disk,
        "config/crd/kustomization.yaml must list every file of crds/"
    );
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
        if !file.starts_with(repo_root().join("crds")) {
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
    assert!(args.contains(&"--leader-elect"), "{args:?}");
    assert!(args.contains(&"--log-format=json"), "{args:?}");
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

    // RBAC: no wildcards anywhere.
    for object in objects
        .iter()
        .filter(|o| matches!(kind(o), "ClusterRole" | "Role"))
    {
        for rule in object["rules"].as_array().unwrap() {
            for key in ["apiGroups", "resources", "verbs"] {
                for value in rule[key].as_array().unwrap() {
                    assert_ne!(value, "*", "wildcard in {} {}", kind(object), name(object));
                }
            }
        }
    }

    // clusterctl metadata for contract v1beta2.
    let metadata: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo_root().join("config/clusterctl/metadata.yaml")).unwrap(),
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

/// Numbers compared by value (`0` and `0.0` are the same schema bound).
fn normalise_numbers(value: &mut Value) {
    match value {
        Value::Number(n) => {
            *value = json!(n.as_f64().unwrap_or_default());
        }
        Value::Array(items) => items.iter_mut().for_each(normalise_numbers),
        Value::Object(map) => map.values_mut().for_each(normalise_numbers),
        _ => {}
    }
}

#[test]
fn rendering_agrees_with_kustomize_when_kubectl_is_installed() {
    let output = Command::new("kubectl")
        .args(["kustomize", "--load-restrictor", "LoadRestrictionsNone"])
        .arg(repo_root().join("config/default"))
        .output();
    let output = match output {
        Ok(output) if output.status.success() => output,
        Ok(output) => panic!(
            "kubectl kustomize failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(_) => {
            eprintln!("kubectl not installed: skipping the comparison with real kustomize");
            return;
        }
    };
    let mut theirs = parse_documents(&String::from_utf8_lossy(&output.stdout));
    let mut ours = components();
    theirs.iter_mut().for_each(normalise_numbers);
    ours.iter_mut().for_each(normalise_numbers);
    assert_eq!(ours.len(), theirs.len());
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!(a, b, "{} {} differs from kustomize's", kind(a), name(a));
    }
}

// ------------------------------------------------------------------------------------------
// On the control plane
// ------------------------------------------------------------------------------------------

/// Applies every rendered object with server-side apply (once per test binary).
async fn ensure_applied() {
    static APPLIED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    APPLIED
        .get_or_init(|| async {
            let client = support::env().client().await;
            apply_all(&client, &components()).await;
        })
        .await;
}

async fn apply_all(client: &Client, objects: &[Value]) {
    for object in objects {
        let (api_version, kind_) = (object["apiVersion"].as_str().unwrap(), kind(object));
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind_);
        let (resource, capabilities) = pinned_kind(client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("discovering {kind_}: {e}"));
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                object["metadata"]["namespace"].as_str().expect("namespace"),
                &resource,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        api.patch(
            name(object),
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("server-side apply of {kind_} {}: {e}", name(object)));
    }
}

#[tokio::test]
async fn components_apply_with_server_side_apply() {
    ensure_applied().await;
    let client = support::env().client().await;
    let objects = components();
    // Applying again is a no-op, not a conflict.
    apply_all(&client, &objects).await;
    for object in &objects {
        let api_version = object["apiVersion"].as_str().unwrap();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let (resource, capabilities) = pinned_kind(
            &client,
            &GroupVersionKind::gvk(group, version, kind(object)),
        )
        .await
        .unwrap();
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => Api::namespaced_with(client.clone(), SYSTEM_NAMESPACE, &resource),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
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

/// (group, resource, verb) triples a subject may use in `namespace`, by SelfSubjectRulesReview.
async fn rules(client: &Client, namespace: &str) -> BTreeSet<(String, String, String)> {
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
    let mut triples = BTreeSet::new();
    for rule in status.resource_rules {
        assert!(
            rule.resource_names.as_ref().is_none_or(|n| n.is_empty()),
            "unexpected resourceNames rule {rule:?}"
        );
        for group in rule.api_groups.unwrap_or_default() {
            for resource in rule.resources.clone().unwrap_or_default() {
                for verb in &rule.verbs {
                    triples.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    triples
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
// The binary
// ------------------------------------------------------------------------------------------

/// A kubeconfig for the test control plane that impersonates inpool's ServiceAccount, so that
/// the binary runs with exactly the permissions of `config/rbac`.
fn service_account_kubeconfig() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let admin = std::fs::read_to_string(support::env().kubeconfig()).expect("kubeconfig");
        let mut config: Value = serde_saphyr::from_str(&admin).expect("kubeconfig YAML");
        for user in config["users"].as_array_mut().expect("users") {
            user["user"]["as"] = json!(service_account_user());
            user["user"]["as-groups"] = json!(service_account_groups());
        }
        let path = support::env()
            .kubeconfig()
            .with_file_name(format!("inpool-sa-{}.kubeconfig", std::process::id()));
        // JSON is YAML: kube reads it as a kubeconfig.
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        path
    })
    .clone()
}

/// Tests that run `inpool` processes take turns. Every such process runs the controllers
/// cluster-wide (as deployed), so processes of concurrent tests would all act on one test's
/// pools and claims: one test's observations (logs, gauges, which process wrote what) would
/// depend on the others. Two controllers at once on the same claims are tested in
/// `tests/claims.rs`.
async fn one_inpool_test_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// A running `inpool` process with its JSON log lines collected.
struct Inpool {
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    addr: SocketAddr,
}

impl Inpool {
    fn start(kubeconfig: &Path, extra: &[&str]) -> Inpool {
        let mut child = Command::new(env!("CARGO_BIN_EXE_inpool"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "--metrics-bind-address=127.0.0.1:0",
                "--health-bind-address=127.0.0.1:0",
                "--log-format=json",
                "--log-level=info",
            ])
            .args(extra)
            .env_remove("POD_NAMESPACE")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start inpool");
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Ok(entry) = serde_json::from_str::<Value>(&line)
                        && entry["message"]
                            .as_str()
                            .is_some_and(|m| m.starts_with("HTTP server listening"))
                        && let Some(addr) = entry["addr"].as_str().and_then(|a| a.parse().ok())
                    {
                        let _ = tx.send(addr);
                    }
                    logs.lock().unwrap().push(line);
                }
            });
        }
        let addr: SocketAddr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "inpool did not start its HTTP server; logs:\n{}",
                    logs.lock().unwrap().join("\n")
                );
            }
        };
        Inpool { child, logs, addr }
    }

    fn logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// Sends SIGTERM; returns the exit code once the process ended (or None after 20 s).
    fn terminate(&mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    async fn get(&self, path: &str) -> Option<HttpResponse> {
        http_get(self.addr, path).await
    }

    /// The `inpool_leader` gauge, if the endpoint answers.
    async fn leader(&self) -> Option<bool> {
        let response = self.get("/metrics").await?;
        response
            .body
            .lines()
            .find_map(|l| l.strip_prefix("inpool_leader "))
            .map(|v| v.trim() == "1")
    }
}

impl Drop for Inpool {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

struct HttpResponse {
    status: u16,
    content_type: Option<String>,
    body: String,
}

/// A minimal HTTP/1.1 GET (no client library needed for three fixed endpoints).
async fn http_get(addr: SocketAddr, path: &str) -> Option<HttpResponse> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        let mut lines = head.lines();
        let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let content_type = lines.find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        });
        Some(HttpResponse {
            status,
            content_type,
            body: body.to_string(),
        })
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    )
}

#[tokio::test]
async fn the_binary_serves_health_and_metrics_and_exits_0_on_sigterm() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let lease = unique("serve");
    let mut inpool = Inpool::start(
        &service_account_kubeconfig(),
        &[
            "--leader-elect",
            "--leader-election-namespace",
            SYSTEM_NAMESPACE,
            "--leader-election-lease-name",
            &lease,
            "--leader-election-lease-duration=6s",
        ],
    );

    let health = inpool.get("/healthz").await.expect("/healthz answers");
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));

    // It becomes leader (as the ServiceAccount: the lease RBAC is enough).
    eventually("inpool to lead", Duration::from_secs(30), || async {
        inpool.leader().await.filter(|l| *l)
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(support::env().client().await, SYSTEM_NAMESPACE);
    let holder = leases
        .get(&lease)
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity;
    assert!(holder.is_some_and(|h| !h.is_empty()));

    let metrics = inpool.get("/metrics").await.expect("/metrics answers");
    assert_eq!(metrics.status, 200);
    assert_eq!(
        metrics.content_type.as_deref(),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(metrics.body.ends_with("# EOF\n"), "{}", metrics.body);
    assert!(
        metrics.body.contains("# TYPE inpool_leader gauge"),
        "{}",
        metrics.body
    );
    assert!(
        metrics.body.contains("inpool_build_info{version="),
        "{}",
        metrics.body
    );

    // Ready once the controllers' caches synced: every list and watch they need is allowed
    // to the ServiceAccount.
    eventually("/readyz to answer 200", Duration::from_secs(30), || async {
        inpool.get("/readyz").await.filter(|r| r.status == 200)
    })
    .await;
    assert!(
        !inpool.logs().to_lowercase().contains("forbidden"),
        "an API request was forbidden to the ServiceAccount:\n{}",
        inpool.logs()
    );

    let code = inpool.terminate();
    assert_eq!(code, Some(0), "exit status; logs:\n{}", inpool.logs());
    let logs = inpool.logs();
    assert!(logs.contains("shutdown requested"), "{logs}");
    assert!(logs.contains("leader election lease released"), "{logs}");
    // Released: nobody holds the lease any more.
    let spec = leases.get(&lease).await.unwrap().spec.unwrap_or_default();
    assert_eq!(spec.holder_identity, None);
}

#[tokio::test]
async fn without_leader_election_it_leads_at_once_and_exits_0_on_sigint() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let mut inpool = Inpool::start(&service_account_kubeconfig(), &[]);
    eventually("inpool_leader 1", Duration::from_secs(10), || async {
        inpool.leader().await.filter(|l| *l)
    })
    .await;
    eventually("/readyz to answer 200", Duration::from_secs(30), || async {
        inpool.get("/readyz").await.filter(|r| r.status == 200)
    })
    .await;
    let _ = Command::new("kill")
        .args(["-INT", &inpool.child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Ok(Some(status)) = inpool.child.try_wait() {
            break status.code();
        }
        assert!(Instant::now() < deadline, "inpool ignored SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(0), "logs:\n{}", inpool.logs());
    assert!(
        inpool.logs().contains("\"signal\":\"SIGINT\""),
        "{}",
        inpool.logs()
    );
}

#[test]
fn an_unusable_kubeconfig_is_a_clear_error_and_exit_1() {
    let output = Command::new(env!("CARGO_BIN_EXE_inpool"))
        .args([
            "--kubeconfig=/nonexistent/kubeconfig",
            "--metrics-bind-address=127.0.0.1:0",
            "--health-bind-address=127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run inpool");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
}

#[tokio::test]
async fn of_two_instances_one_leads_and_the_other_takes_over_within_the_lease_duration() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    const LEASE_SECONDS: u64 = 6;
    let lease = unique("failover");
    let duration = format!("--leader-election-lease-duration={LEASE_SECONDS}s");
    let args = |identity: &'static str| {
        vec![
            "--leader-elect".to_string(),
            format!("--leader-election-namespace={SYSTEM_NAMESPACE}"),
            format!("--leader-election-lease-name={lease}"),
            duration.clone(),
            format!("--identity={identity}"),
        ]
    };
    let kubeconfig = service_account_kubeconfig();
    let a_args = args("inpool-a");
    let b_args = args("inpool-b");
    let mut a = Inpool::start(
        &kubeconfig,
        &a_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let mut b = Inpool::start(
        &kubeconfig,
        &b_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let leases: Api<Lease> = Api::namespaced(support::env().client().await, SYSTEM_NAMESPACE);

    // Exactly one leads, and it is the lease's holder; it stays so for over a lease duration.
    let first = eventually("one instance to lead", Duration::from_secs(30), || async {
        match (a.leader().await, b.leader().await) {
            (Some(true), Some(false)) => Some("inpool-a"),
            (Some(false), Some(true)) => Some("inpool-b"),
            (Some(true), Some(true)) => panic!("both instances lead"),
            _ => None,
        }
    })
    .await;
    let observe_until = Instant::now() + Duration::from_secs(LEASE_SECONDS + 2);
    while Instant::now() < observe_until {
        let (la, lb) = (a.leader().await, b.leader().await);
        assert_ne!((la, lb), (Some(true), Some(true)), "both instances lead");
        assert_eq!(
            la,
            Some(first == "inpool-a"),
            "the leader changed without cause"
        );
        assert_eq!(
            lb,
            Some(first == "inpool-b"),
            "the leader changed without cause"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let holder = leases
        .get(&lease)
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity;
    assert_eq!(holder.as_deref(), Some(first));

    // Stop the leader; the other takes over within the lease duration (a released lease is
    // taken as soon as the standby sees it free).
    let (leader, standby) = if first == "inpool-a" {
        (&mut a, &b)
    } else {
        (&mut b, &a)
    };
    let stopped_at = Instant::now();
    assert_eq!(leader.terminate(), Some(0), "logs:\n{}", leader.logs());
    eventually(
        "the standby to take over",
        Duration::from_secs(LEASE_SECONDS + 10),
        || async { standby.leader().await.filter(|l| *l) },
    )
    .await;
    let takeover = stopped_at.elapsed();
    eprintln!("takeover {takeover:?} after SIGTERM to the leader (lease {LEASE_SECONDS}s)");
    assert!(
        takeover < Duration::from_secs(LEASE_SECONDS),
        "takeover took {takeover:?} for a {LEASE_SECONDS}s lease"
    );
    let second = if first == "inpool-a" {
        "inpool-b"
    } else {
        "inpool-a"
    };
    let holder = leases
        .get(&lease)
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity;
    assert_eq!(holder.as_deref(), Some(second));
}

#[tokio::test]
async fn a_killed_leader_is_replaced_once_its_lease_expires() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    const LEASE_SECONDS: u64 = 6;
    let lease = unique("killed");
    let args = |identity: &str| {
        vec![
            "--leader-elect".to_string(),
            format!("--leader-election-namespace={SYSTEM_NAMESPACE}"),
            format!("--leader-election-lease-name={lease}"),
            format!("--leader-election-lease-duration={LEASE_SECONDS}s"),
            format!("--identity={identity}"),
        ]
    };
    let kubeconfig = service_account_kubeconfig();
    let first_args = args("first");
    let mut first = Inpool::start(
        &kubeconfig,
        &first_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    eventually("the first to lead", Duration::from_secs(30), || async {
        first.leader().await.filter(|l| *l)
    })
    .await;
    let second_args = args("second");
    let second = Inpool::start(
        &kubeconfig,
        &second_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    eventually(
        "the second to be a standby",
        Duration::from_secs(30),
        || async { second.leader().await.filter(|l| !*l) },
    )
    .await;

    // SIGKILL: no release. The standby must wait for the hold to expire (at most one lease
    // duration after the last renewal, plus kube-lease-manager's random back-off of up to 1 s).
    let leases: Api<Lease> = Api::namespaced(support::env().client().await, SYSTEM_NAMESPACE);
    let killed_at = Instant::now();
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let spec = leases.get(&lease).await.unwrap().spec.unwrap();
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some("first"),
        "not released"
    );
    eventually(
        "the standby to take over",
        Duration::from_secs(LEASE_SECONDS + 10),
        || async { second.leader().await.filter(|l| *l) },
    )
    .await;
    let takeover = killed_at.elapsed();
    eprintln!("takeover {takeover:?} after SIGKILL to the leader (lease {LEASE_SECONDS}s)");
    assert!(
        takeover <= Duration::from_secs(LEASE_SECONDS + 2),
        "takeover took {takeover:?} for a {LEASE_SECONDS}s lease"
    );
    let holder = leases
        .get(&lease)
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity;
    assert_eq!(holder.as_deref(), Some("second"));
}

// ------------------------------------------------------------------------------------------
// run_as_leader in process: the work never runs twice at once, and stops when the lease goes
// ------------------------------------------------------------------------------------------

/// Intervals during which each instance's work future was alive.
#[derive(Default)]
struct Journal {
    intervals: Mutex<Vec<(String, Instant, Option<Instant>)>>,
}

/// Records the end of a work interval when the work future is dropped (the only way
/// `run_as_leader` stops it).
struct EndOnDrop {
    journal: Arc<Journal>,
    index: usize,
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.journal.intervals.lock().unwrap()[self.index].2 = Some(Instant::now());
    }
}

/// The work: record the interval, and write a ConfigMap every 100 ms for as long as it runs.
fn writer(
    journal: Arc<Journal>,
    client: Client,
    namespace: String,
    identity: &'static str,
) -> impl FnMut() -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>
{
    move || {
        let journal = journal.clone();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        Box::pin(async move {
            let index = {
                let mut intervals = journal.intervals.lock().unwrap();
                intervals.push((identity.to_string(), Instant::now(), None));
                intervals.len() - 1
            };
            let _end = EndOnDrop { journal, index };
            let mut n = 0u64;
            loop {
                n += 1;
                let cm = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": { "name": "written-by-the-leader" },
                    "data": { "writer": identity, "n": n.to_string() },
                });
                api.patch(
                    "written-by-the-leader",
                    &PatchParams::apply(identity).force(),
                    &Patch::Apply(&cm),
                )
                .await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }
}

fn assert_no_overlap(journal: &Journal) {
    let intervals = journal.intervals.lock().unwrap();
    for (i, (who_a, start_a, end_a)) in intervals.iter().enumerate() {
        for (who_b, start_b, end_b) in intervals.iter().skip(i + 1) {
            let end_a = end_a.unwrap_or_else(Instant::now);
            let end_b = end_b.unwrap_or_else(Instant::now);
            assert!(
                end_a <= *start_b || end_b <= *start_a,
                "{who_a} and {who_b} worked at the same time"
            );
        }
    }
}

#[tokio::test]
async fn run_as_leader_never_runs_the_work_twice_and_stops_it_when_the_lease_is_lost() {
    let (client, namespace) = support::env().namespace().await;
    let lease_name = "in-process";
    let settings = |identity: &str| LeaseSettings {
        namespace: namespace.clone(),
        name: lease_name.to_string(),
        identity: identity.to_string(),
        duration: Duration::from_secs(6),
    };
    let journal = Arc::new(Journal::default());
    let (stop_a, stopped_a) = tokio::sync::oneshot::channel::<()>();
    let (stop_b, stopped_b) = tokio::sync::oneshot::channel::<()>();
    let health_a = HealthState::new();
    let health_b = HealthState::new();
    let a = tokio::spawn(run_as_leader(
        client.clone(),
        settings("a"),
        health_a.clone(),
        writer(journal.clone(), client.clone(), namespace.clone(), "a"),
        async move {
            let _ = stopped_a.await;
        },
    ));
    // Let `a` take the lease first.
    eventually("a to lead", Duration::from_secs(20), || async {
        health_a.is_leading().then_some(())
    })
    .await;
    let b = tokio::spawn(run_as_leader(
        client.clone(),
        settings("b"),
        health_b.clone(),
        writer(journal.clone(), client.clone(), namespace.clone(), "b"),
        async move {
            let _ = stopped_b.await;
        },
    ));
    eventually(
        "b to know it is a standby",
        Duration::from_secs(20),
        || async { health_b.leader_state_known().then_some(()) },
    )
    .await;
    assert!(!health_b.is_leading());

    // Someone else takes the lease (as if a's renewals had stopped and it had expired): a must
    // stop working before its hold would have expired, without being told.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let stolen_at = Instant::now();
    let now = k8s_openapi::jiff::Timestamp::now();
    leases
        .patch(
            lease_name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": {
                "holderIdentity": "thief",
                "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now),
                "leaseDurationSeconds": 8,
            }})),
        )
        .await
        .unwrap();
    eventually("a to stop working", Duration::from_secs(10), || async {
        (!health_a.is_leading()).then_some(())
    })
    .await;
    let a_stopped = stolen_at.elapsed();
    assert!(
        a_stopped < Duration::from_secs(6),
        "a worked {a_stopped:?} after losing the lease"
    );
    {
        let intervals = journal.intervals.lock().unwrap();
        assert!(
            intervals.iter().all(|(_, _, end)| end.is_some()),
            "a's work still alive"
        );
    }
    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let written = cm_api.get("written-by-the-leader").await.unwrap();
    let n_at_stop = written.data.unwrap()["n"].clone();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let written = cm_api.get("written-by-the-leader").await.unwrap();
    assert_eq!(
        written.data.unwrap()["n"],
        n_at_stop,
        "a kept writing after it stopped"
    );

    // The thief's hold expires; one of a and b takes over (never both), then a shuts down and
    // the lease ends with b.
    eventually("a or b to lead again", Duration::from_secs(20), || async {
        (health_a.is_leading() || health_b.is_leading()).then_some(())
    })
    .await;
    assert!(!(health_a.is_leading() && health_b.is_leading()));
    stop_a.send(()).unwrap();
    a.await.unwrap().expect("a ends cleanly");
    eventually("b to lead", Duration::from_secs(20), || async {
        health_b.is_leading().then_some(())
    })
    .await;
    let written = eventually("b to write", Duration::from_secs(5), || async {
        let cm = cm_api.get("written-by-the-leader").await.ok()?;
        let data = cm.data?;
        (data["writer"] == "b").then_some(data)
    })
    .await;
    assert_eq!(written["writer"], "b");
    stop_b.send(()).unwrap();
    b.await.unwrap().expect("b ends cleanly");

    assert_no_overlap(&journal);
    let intervals = journal.intervals.lock().unwrap();
    assert!(intervals.len() >= 2, "{} work intervals", intervals.len());
    assert!(intervals.iter().all(|(_, _, end)| end.is_some()));
}

// ------------------------------------------------------------------------------------------
// The binary as its ServiceAccount, on real pools and claims
// ------------------------------------------------------------------------------------------

use std::collections::BTreeMap;

use inpool::api::reservation::IPAddressReservation;
use inpool::api::{GlobalInClusterIPPool, IPAddress, IPAddressClaim, InClusterIPPool};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams};

const IPAM_GROUP: &str = "ipam.cluster.x-k8s.io";

fn typed<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("a valid object")
}

/// An `IPAddressClaim` of Cluster `cluster` for the pool `(kind, name)`.
fn claim_object(name: &str, cluster: &str, kind_: &str, pool: &str) -> IPAddressClaim {
    typed(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
        "metadata": { "name": name },
        "spec": {
            "clusterName": cluster,
            "poolRef": { "apiGroup": IPAM_GROUP, "kind": kind_, "name": pool }
        }
    }))
}

/// (status, reason) of a claim's Ready condition.
fn ready_reason(claim: &IPAddressClaim) -> Option<(String, String)> {
    let ready = claim.conditions().iter().find(|c| c.type_ == "Ready")?;
    Some((ready.status.clone(), ready.reason.clone()))
}

/// Claim name → (Ready status, reason) for every claim of the namespace.
async fn claim_states(claims: &Api<IPAddressClaim>) -> BTreeMap<String, (String, String)> {
    claims
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|c| Some((c.name_any(), ready_reason(c)?)))
        .collect()
}

/// Claim name → address, from the live `IPAddress`es of a namespace.
async fn held_addresses(addresses: &Api<IPAddress>) -> BTreeMap<String, String> {
    addresses
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
        .map(|a| (a.spec.claim_ref.name.clone(), a.spec.address.clone()))
        .collect()
}

/// Address → claim name of the reservations held for claims of `namespace`.
async fn reservations_of(client: &Client, namespace: &str) -> BTreeMap<String, String> {
    Api::<IPAddressReservation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.spec.claim_namespace == namespace)
        .map(|r| (r.spec.address.clone(), r.spec.claim_name.clone()))
        .collect()
}

async fn create_cluster(client: &Client, namespace: &str, name: &str) {
    let clusters: Api<inpool::api::Cluster> = Api::namespaced(client.clone(), namespace);
    clusters
        .create(
            &PostParams::default(),
            &typed(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": { "name": name }, "spec": { "paused": false }
            })),
        )
        .await
        .unwrap();
}

fn assert_nothing_forbidden(inpool: &Inpool) {
    let logs = inpool.logs();
    assert!(
        !logs.to_lowercase().contains("forbidden"),
        "an API request was forbidden to the ServiceAccount:\n{logs}"
    );
}

/// Runs the `inpool` binary as its ServiceAccount (exactly the permissions of `config/rbac`,
/// cluster-wide as deployed) against real pools and claims: claims are realised, a deleted claim
/// releases its address and reservation to the oldest waiting claim, Events are recorded, a
/// pool is protected while in use and let go after, and nothing is ever forbidden. A missing
/// rule in `config/rbac/role.yaml` makes one of these steps fail.
#[tokio::test]
async fn as_its_service_account_inpool_realises_and_releases_claims() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let (client, ns) = support::env().namespace().await;
    let mut inpool = Inpool::start(&service_account_kubeconfig(), &[]);
    eventually("/readyz to answer 200", Duration::from_secs(30), || async {
        inpool.get("/readyz").await.filter(|r| r.status == 200)
    })
    .await;

    create_cluster(&client, &ns, "workload").await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    pools
        .create(
            &PostParams::default(),
            &typed(json!({
                "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
                "metadata": { "name": "pool" },
                "spec": { "addresses": ["10.77.0.10-10.77.0.11"], "prefix": 24, "gateway": "10.77.0.1" }
            })),
        )
        .await
        .unwrap();
    let global_name = unique("sa-v6");
    let global_pools: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    global_pools
        .create(
            &PostParams::default(),
            &typed(json!({
                "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "GlobalInClusterIPPool",
                "metadata": { "name": global_name },
                "spec": { "addresses": ["2001:db8:77::10-2001:db8:77::1f"], "prefix": 64 }
            })),
        )
        .await
        .unwrap();
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    for name in ["first", "second"] {
        claims
            .create(
                &PostParams::default(),
                &claim_object(name, "workload", "InClusterIPPool", "pool"),
            )
            .await
            .unwrap();
    }
    claims
        .create(
            &PostParams::default(),
            &claim_object("v6", "workload", "GlobalInClusterIPPool", &global_name),
        )
        .await
        .unwrap();
    // Creation timestamps have one-second resolution: the waiting claim is unambiguously last.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    claims
        .create(
            &PostParams::default(),
            &claim_object("waiting", "workload", "InClusterIPPool", "pool"),
        )
        .await
        .unwrap();

    let allocated = || ("True".to_string(), "AddressAllocated".to_string());
    let exhausted = || ("False".to_string(), "PoolExhausted".to_string());
    let expected = BTreeMap::from([
        ("first".to_string(), allocated()),
        ("second".to_string(), allocated()),
        ("v6".to_string(), allocated()),
        ("waiting".to_string(), exhausted()),
    ]);
    eventually(
        "three claims realised, one PoolExhausted",
        Duration::from_secs(60),
        || async { (claim_states(&claims).await == expected).then_some(()) },
    )
    .await;
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), &ns);
    let held = held_addresses(&addresses).await;
    assert_eq!(held.len(), 3, "{held:?}");
    assert_eq!(held["v6"], "2001:db8:77::10");
    let reserved = reservations_of(&client, &ns).await;
    for (claim, address) in &held {
        assert_eq!(reserved.get(address), Some(claim), "{reserved:?}");
    }
    // Events were recorded (events.k8s.io create/patch).
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    eventually(
        "AddressAllocated and PoolExhausted events",
        Duration::from_secs(30),
        || async {
            let reasons: BTreeSet<String> = events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|e| e.reason)
                .collect();
            (reasons.contains("AddressAllocated") && reasons.contains("PoolExhausted"))
                .then_some(())
        },
    )
    .await;

    // Deleting a realised claim releases its address (IPAddress and reservation) to the waiting
    // claim.
    let released = held["first"].clone();
    claims
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the claim to be gone", Duration::from_secs(30), || async {
        claims
            .get_opt("first")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    eventually(
        "the waiting claim to get the released address",
        Duration::from_secs(30),
        || async {
            let states = claim_states(&claims).await;
            (states.get("waiting") == Some(&allocated())).then_some(())
        },
    )
    .await;
    let held = held_addresses(&addresses).await;
    assert_eq!(held.get("first"), None);
    assert_eq!(held.get("waiting"), Some(&released));
    let reserved = reservations_of(&client, &ns).await;
    assert_eq!(reserved.get(&released).map(String::as_str), Some("waiting"));
    assert!(!reserved.values().any(|c| c == "first"), "{reserved:?}");

    // A pool in use is protected (ProtectPool) and let go once its claims are gone.
    let pool = pools.get("pool").await.unwrap();
    assert!(
        pool.finalizers()
            .contains(&"ipam.cluster.x-k8s.io/ProtectPool".to_string()),
        "{:?}",
        pool.finalizers()
    );
    pools
        .delete("pool", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        pools.get_opt("pool").await.unwrap().is_some(),
        "a pool in use is not deleted"
    );
    for name in ["second", "waiting", "v6"] {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    eventually(
        "the pool to be deleted once unused",
        Duration::from_secs(30),
        || async { pools.get_opt("pool").await.unwrap().is_none().then_some(()) },
    )
    .await;
    eventually(
        "every address and reservation released",
        Duration::from_secs(30),
        || async {
            (held_addresses(&addresses).await.is_empty()
                && reservations_of(&client, &ns).await.is_empty())
            .then_some(())
        },
    )
    .await;
    global_pools
        .delete(&global_name, &DeleteParams::default())
        .await
        .unwrap();

    assert_nothing_forbidden(&inpool);
    assert_eq!(inpool.terminate(), Some(0), "logs:\n{}", inpool.logs());
    assert_nothing_forbidden(&inpool);
}

/// The `inpool_pool_*` gauges of one pool, by metric name, from an OpenMetrics text.
fn pool_gauges(text: &str, kind_: &str, namespace: &str, name_: &str) -> BTreeMap<String, i64> {
    let line = regex::Regex::new(r"^(inpool_pool_[a-z_]+)\{([^}]*)\} (\S+)$").unwrap();
    let label = regex::Regex::new(r#"(\w+)="([^"]*)""#).unwrap();
    let mut gauges = BTreeMap::new();
    for l in text.lines() {
        let Some(c) = line.captures(l) else { continue };
        let labels: BTreeMap<&str, &str> = label
            .captures_iter(c.get(2).unwrap().as_str())
            .map(|l| (l.get(1).unwrap().as_str(), l.get(2).unwrap().as_str()))
            .collect();
        if labels.get("pool_kind") == Some(&kind_)
            && labels.get("pool_namespace") == Some(&namespace)
            && labels.get("pool_name") == Some(&name_)
            && let Ok(value) = c[3].parse()
        {
            gauges.insert(c[1].to_string(), value);
        }
    }
    gauges
}

/// The gauges a pool's `status.ipAddresses` implies, plus the waiting claims.
fn gauges_of(status: &inpool::api::IPAddressesStatus, waiting: i64) -> BTreeMap<String, i64> {
    BTreeMap::from([
        ("inpool_pool_size".to_string(), status.total),
        ("inpool_pool_used".to_string(), status.used),
        ("inpool_pool_free".to_string(), status.free),
        ("inpool_pool_out_of_range".to_string(), status.out_of_range),
        ("inpool_pool_waiting_claims".to_string(), waiting),
    ])
}

/// `/metrics` of a running `inpool` (as its ServiceAccount): the per-pool gauges equal the pool's
/// `status.ipAddresses` (and the waiting claims), follow a growth of the pool, and go when the
/// pool goes.
#[tokio::test]
async fn per_pool_gauges_match_the_pool_status() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let (client, ns) = support::env().namespace().await;
    let inpool = Inpool::start(&service_account_kubeconfig(), &[]);
    create_cluster(&client, &ns, "workload").await;
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    pools
        .create(
            &PostParams::default(),
            &typed(json!({
                "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
                "metadata": { "name": "gauged" },
                "spec": { "addresses": ["10.78.0.10-10.78.0.13"], "prefix": 24 }
            })),
        )
        .await
        .unwrap();
    let global_name = unique("gauged-v6");
    let global_pools: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    global_pools
        .create(
            &PostParams::default(),
            &typed(json!({
                "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "GlobalInClusterIPPool",
                "metadata": { "name": global_name },
                "spec": { "addresses": ["2001:db8:78::/120"], "prefix": 64 }
            })),
        )
        .await
        .unwrap();
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    for i in 0..5 {
        claims
            .create(
                &PostParams::default(),
                &claim_object(&format!("m-{i}"), "workload", "InClusterIPPool", "gauged"),
            )
            .await
            .unwrap();
    }
    claims
        .create(
            &PostParams::default(),
            &claim_object("v6", "workload", "GlobalInClusterIPPool", &global_name),
        )
        .await
        .unwrap();

    // Polls until the pool's status has the expected counts and the gauges equal them.
    let observe = || async {
        let pool = pools.get("gauged").await.ok();
        let status = pool.and_then(|p| p.status?.ip_addresses);
        let global = global_pools.get(&global_name).await.ok();
        let global_status = global.and_then(|p| p.status?.ip_addresses);
        let metrics = inpool
            .get("/metrics")
            .await
            .map(|r| r.body)
            .unwrap_or_default();
        let ours = pool_gauges(&metrics, "InClusterIPPool", &ns, "gauged");
        let theirs = pool_gauges(&metrics, "GlobalInClusterIPPool", "", &global_name);
        (status, global_status, ours, theirs)
    };
    let wait_for_match = |what: &'static str, expected: (i64, i64, i64, i64), waiting: i64| {
        let observe = &observe;
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let observed = observe().await;
                let (status, global_status, ours, theirs) = &observed;
                if let (Some(status), Some(global_status)) = (status, global_status)
                    && (status.total, status.used, status.free, status.out_of_range) == expected
                    && *ours == gauges_of(status, waiting)
                    && *theirs == gauges_of(global_status, 0)
                    && (global_status.total, global_status.used) == (255, 1)
                {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for {what}: pool status, global pool status, pool gauges, \
                     global pool gauges: {observed:#?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // 4 addresses, 5 claims: 4 used, none free, one waiting. The IPv6 /120 without its
    // subnet-router anycast address: 255, one used.
    wait_for_match(
        "gauges equal to the status (4 used, 1 waiting)",
        (4, 4, 0, 0),
        1,
    )
    .await;

    // Grown to 6 addresses: the waiting claim is realised, one address stays free.
    pools
        .patch(
            "gauged",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "addresses": ["10.78.0.10-10.78.0.15"] } })),
        )
        .await
        .unwrap();
    wait_for_match(
        "gauges equal to the status after growth (5 used, 1 free)",
        (6, 5, 1, 0),
        0,
    )
    .await;

    // The pool goes (after its claims): so do its gauges.
    for i in 0..5 {
        claims
            .delete(&format!("m-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    pools
        .delete("gauged", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the deleted pool's gauges to go",
        Duration::from_secs(60),
        || async {
            let metrics = inpool.get("/metrics").await?.body;
            pool_gauges(&metrics, "InClusterIPPool", &ns, "gauged")
                .is_empty()
                .then_some(())
        },
    )
    .await;
    assert_nothing_forbidden(&inpool);
}
