//! inpool's packaging on the test control plane: the rendered components
//! (`config/clusterctl/ipam-components.yaml`), applied with server-side apply, and the
//! ServiceAccount they grant inpool's permissions to.

use std::path::{Path, PathBuf};

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::Client;
use kube::api::{
    Api, DeleteParams, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::discovery::{Scope, pinned_kind};
use serde_json::{Value, json};

use super::wait::wait_for;
use crate::support;

pub const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";
pub const PROVIDER: &str = "ipam-inpool";
pub const SYSTEM_NAMESPACE: &str = "inpool-system";
pub const SERVICE_ACCOUNT: &str = "inpool-controller-manager";

pub fn components_path() -> PathBuf {
    support::repo_root().join("config/clusterctl/ipam-components.yaml")
}

/// The documents of a YAML stream, empty ones left out.
pub fn parse_documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("valid YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The objects of the committed `ipam-components.yaml`.
pub fn components() -> Vec<Value> {
    let text = std::fs::read_to_string(components_path()).expect("ipam-components.yaml");
    parse_documents(&text)
}

pub fn kind(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

pub fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// A dynamic API for the kind of `object` (found by discovery), in `namespace` if the kind is
/// namespaced.
pub async fn api_of(client: &Client, object: &Value, namespace: &str) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind(object));
    let (resource, capabilities) = pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("discovering {}: {e}", kind(object)));
    match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    }
}

/// Server-side apply of every object with `params`; stops at the first object the API server
/// refuses.
pub async fn apply_objects(
    client: &Client,
    objects: &[Value],
    params: &PatchParams,
) -> Result<(), String> {
    for object in objects {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        api_of(client, object, namespace)
            .await
            .patch(name(object), params, &Patch::Apply(object))
            .await
            .map_err(|e| {
                format!(
                    "server-side apply of {} {}: {e}",
                    kind(object),
                    name(object)
                )
            })?;
    }
    Ok(())
}

/// Applies every rendered object with server-side apply to the shared control plane (once per
/// test binary): the CRDs, the namespace, the ServiceAccount and its RBAC.
pub async fn ensure_applied() {
    static APPLIED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    APPLIED
        .get_or_init(|| async {
            let client = support::env().client().await;
            let params = PatchParams::apply(FIELD_MANAGER);
            apply_objects(&client, &components(), &params)
                .await
                .unwrap();
        })
        .await;
}

/// The field manager of the tests' server-side applies.
pub const FIELD_MANAGER: &str = "inpool-deploy-test";

/// The ClusterRole allowing `get` on `/metrics` (`config/rbac/metrics_reader_role.yaml`).
pub const METRICS_READER_ROLE: &str = "inpool-metrics-reader";

/// The user name of ServiceAccount `namespace/name`.
pub fn service_account_user_of(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The groups of a ServiceAccount of `namespace`.
pub fn service_account_groups_of(namespace: &str) -> [String; 3] {
    [
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".to_string(),
    ]
}

pub fn service_account_user() -> String {
    service_account_user_of(SYSTEM_NAMESPACE, SERVICE_ACCOUNT)
}

pub fn service_account_groups() -> [String; 3] {
    service_account_groups_of(SYSTEM_NAMESPACE)
}

/// Binds ServiceAccount `namespace/account` to [`METRICS_READER_ROLE`] with ClusterRoleBinding
/// `binding`, as a user binds their Prometheus.
pub async fn bind_metrics_reader(client: &Client, binding: &str, namespace: &str, account: &str) {
    let object = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(binding.to_string()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "ClusterRole".to_string(),
            name: METRICS_READER_ROLE.to_string(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_string(),
            name: account.to_string(),
            namespace: Some(namespace.to_string()),
            ..Subject::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating ClusterRoleBinding {binding}: {e}"));
    wait_until_allowed_to_get_metrics(client, namespace, account).await;
}

/// Waits until a SubjectAccessReview allows ServiceAccount `namespace/account` `get /metrics`:
/// a new binding reaches the API server's RBAC authorizer through its informers, so for a moment
/// after the create it may still be denied.
pub async fn wait_until_allowed_to_get_metrics(client: &Client, namespace: &str, account: &str) {
    let user = service_account_user_of(namespace, account);
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.clone()),
            groups: Some(service_account_groups_of(namespace).to_vec()),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some("/metrics".to_string()),
                verb: Some("get".to_string()),
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let reviews = Api::<SubjectAccessReview>::all(client.clone());
    wait_for(
        &format!("{user} to be allowed get /metrics"),
        Duration::from_secs(30),
        || async {
            let answer = reviews.create(&PostParams::default(), &review).await.ok()?;
            answer.status.filter(|s| s.allowed).map(|_| ())
        },
    )
    .await;
}

/// Deletes the ClusterRoleBinding `binding` of [`bind_metrics_reader`].
pub async fn unbind_metrics_reader(client: &Client, binding: &str) {
    Api::<ClusterRoleBinding>::all(client.clone())
        .delete(binding, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting ClusterRoleBinding {binding}: {e}"));
}

/// A client of the shared control plane that impersonates inpool's ServiceAccount.
pub async fn service_account_client() -> Client {
    let groups = service_account_groups();
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    support::env()
        .client_as(&service_account_user(), &groups)
        .await
}

/// A kubeconfig beside `admin` (a control plane's admin kubeconfig) that impersonates inpool's
/// ServiceAccount, so that the binary runs with exactly the permissions of `config/rbac`.
pub fn service_account_kubeconfig(admin: &Path) -> PathBuf {
    service_account_kubeconfig_of(admin, SYSTEM_NAMESPACE, SERVICE_ACCOUNT)
}

/// A kubeconfig beside `admin` that impersonates ServiceAccount `namespace/name`, named after it.
pub fn service_account_kubeconfig_of(admin: &Path, namespace: &str, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(admin).expect("kubeconfig");
    let mut config: Value = serde_saphyr::from_str(&text).expect("kubeconfig YAML");
    for user in config["users"].as_array_mut().expect("users") {
        user["user"]["as"] = json!(service_account_user_of(namespace, name));
        user["user"]["as-groups"] = json!(service_account_groups_of(namespace));
    }
    let path = admin.with_file_name(format!("{namespace}-{name}.kubeconfig"));
    // Written whole, then renamed: a test that reads it meanwhile never sees half a file.
    let partial = admin.with_file_name(format!(
        "{namespace}-{name}.kubeconfig.{:?}",
        std::thread::current().id()
    ));
    // JSON is YAML: kube reads it as a kubeconfig.
    std::fs::write(&partial, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    std::fs::rename(&partial, &path).unwrap();
    path
}

/// Tests that run `inpool` processes against the shared control plane take turns. Every such
/// process runs the controllers cluster-wide (as deployed), so processes of concurrent tests
/// would all act on one test's pools and claims: one test's observations (logs, gauges, which
/// process wrote what) would depend on the others. Two controllers at once on the same claims
/// are tested in `tests/capi/claims.rs`.
pub async fn one_inpool_test_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}
