//! What the tests with a real infrastructure provider (`tests/capv/`, `tests/capm3/`) share:
//! applying what a user writes, reading the provider's conditions, waiting on a pool's count of
//! used addresses, and printing what `kubectl get` shows.

use std::path::Path;
use std::time::Duration;

use inpool::api::IPAddress;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::objects::typed;
use super::packaging::api_of;
use super::wait::wait_for;

/// Server-side applies `object` (any kind, found by discovery) in namespace `ns` as field
/// manager `manager`, taking over fields another manager set; panics naming the object if the
/// API server refuses it.
pub async fn apply_as(client: &Client, ns: &str, manager: &str, object: Value) {
    let api = api_of(client, &object, ns).await;
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    let object: DynamicObject = typed(object);
    api.patch(
        &object.name_any(),
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {kind} {}: {e}", object.name_any()));
}

/// A CAPI `Machine` (`cluster.x-k8s.io/v1beta2`) of `cluster`, named `name` with `labels`, on the
/// infrastructure machine of the same name (`kind` of `group`), as a MachineDeployment makes one.
pub fn machine(cluster: &str, name: &str, labels: &Value, group: &str, kind: &str) -> Value {
    serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "clusterName": cluster, "version": "v1.33.0",
            "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
            "infrastructureRef": {"apiGroup": group, "kind": kind, "name": name},
        },
    })
}

/// CAPI's Machines (`cluster.x-k8s.io/v1beta2`) of namespace `ns`.
pub fn capi_machines(client: &Client, ns: &str) -> Api<DynamicObject> {
    let machine = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&machine))
}

/// The condition `type_` in the list at `path` (a JSON pointer) of `object`.
pub fn condition_at<'a>(object: &'a DynamicObject, path: &str, type_: &str) -> Option<&'a Value> {
    object
        .data
        .pointer(path)?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// An `IPAddress` as `address/prefix`.
pub fn cidr_of(address: &IPAddress) -> String {
    format!("{}/{}", address.spec.address, address.spec.prefix)
}

/// Waits until the pool `name`'s status counts `used` addresses.
pub async fn wait_pool_used<K>(pools: &Api<K>, name: &str, used: i64)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + serde::Serialize,
{
    wait_for(
        &format!("pool {name} to count {used} used"),
        Duration::from_secs(60),
        || async {
            let pool = serde_json::to_value(pools.get(name).await.ok()?).ok()?;
            (pool["status"]["ipAddresses"]["used"] == used).then_some(())
        },
    )
    .await;
}

/// Prints, past libtest's capture, what `kubectl get <resources>` shows in `ns` (the docs' screens
/// come from here), headed by `$ kubectl get <shown>`; prints nothing when kubectl is missing.
pub fn print_kubectl_get(kubeconfig: &Path, resources: &str, shown: &str, ns: &str) {
    if let Ok(output) = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["get", resources, "-n", ns])
        .output()
    {
        crate::say(&format!(
            "$ kubectl get {shown}\n{}",
            String::from_utf8_lossy(&output.stdout)
        ));
    }
}
