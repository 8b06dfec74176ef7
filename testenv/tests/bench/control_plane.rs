//! The test control plane itself behaves like a real cluster: CRD schemas and the status
//! subresource, garbage collection, finalizers, namespace deletion, RBAC, and restarts that
//! keep etcd's data.

use std::time::Duration;

use inpool_testenv::{common, support};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use common::{wait_for, wait_gone};

fn claims_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("ipam.cluster.x-k8s.io", "v1beta2", "IPAddressClaim");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

fn claim(name: &str, pool_ref: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddressClaim",
        "metadata": { "name": name },
        "spec": { "poolRef": pool_ref },
    }))
    .expect("claim literal")
}

fn valid_pool_ref() -> Value {
    json!({ "apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool" })
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn claim_status_goes_through_the_status_subresource() {
    let (client, ns) = support::env().namespace().await;
    let claims = claims_api(&client, &ns);
    claims
        .create(&PostParams::default(), &claim("c1", valid_pool_ref()))
        .await
        .expect("a valid v1beta2 claim is accepted");

    let status = json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddressClaim",
        "status": { "addressRef": { "name": "c1" } },
    });
    claims
        .patch_status("c1", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status patch");
    let read = claims.get("c1").await.unwrap();
    assert_eq!(read.data["status"]["addressRef"]["name"], "c1");

    // Through the main resource, status changes are ignored.
    let spec_side = json!({ "status": { "addressRef": { "name": "other" } } });
    claims
        .patch("c1", &PatchParams::default(), &Patch::Merge(&spec_side))
        .await
        .unwrap();
    let read = claims.get("c1").await.unwrap();
    assert_eq!(read.data["status"]["addressRef"]["name"], "c1");
}

#[tokio::test]
async fn invalid_claims_are_rejected_by_the_schema() {
    let (client, ns) = support::env().namespace().await;
    let claims = claims_api(&client, &ns);

    let no_kind = claim(
        "no-kind",
        json!({ "apiGroup": "ipam.cluster.x-k8s.io", "name": "pool" }),
    );
    let status = api_error(claims.create(&PostParams::default(), &no_kind).await);
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("spec.poolRef.kind"),
        "message names the field: {}",
        status.message
    );

    claims
        .create(
            &PostParams::default(),
            &claim("empty-status", valid_pool_ref()),
        )
        .await
        .unwrap();
    let mut with_empty_status = claims.get("empty-status").await.unwrap();
    with_empty_status.data["status"] = json!({});
    let status = api_error(
        claims
            .replace_status("empty-status", &PostParams::default(), &with_empty_status)
            .await,
    );
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.message.contains("status"), "{}", status.message);
}

#[tokio::test]
async fn owned_objects_are_garbage_collected() {
    let (client, ns) = support::env().namespace().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let claims = claims_api(&client, &ns);
    let owner = maps
        .create(&PostParams::default(), &config_map("machine"))
        .await
        .unwrap();
    let mut owned = claim("owned", valid_pool_ref());
    owned.metadata.owner_references = Some(vec![owner_ref(&owner)]);
    claims.create(&PostParams::default(), &owned).await.unwrap();

    maps.delete("machine", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&claims, "owned", Duration::from_secs(60)).await;
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let (client, ns) = support::env().namespace().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let claims = claims_api(&client, &ns);
    let owner = maps
        .create(&PostParams::default(), &config_map("machine"))
        .await
        .unwrap();
    let mut dependent = claim("dependent", valid_pool_ref());
    let mut reference = owner_ref(&owner);
    reference.block_owner_deletion = Some(true);
    dependent.metadata.owner_references = Some(vec![reference]);
    dependent.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    claims
        .create(&PostParams::default(), &dependent)
        .await
        .unwrap();

    maps.delete("machine", &DeleteParams::foreground())
        .await
        .unwrap();
    // The dependent is being deleted but held by its finalizer, so the owner must wait.
    wait_for(
        "the dependent to be marked for deletion",
        Duration::from_secs(60),
        || async {
            claims
                .get("dependent")
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
                .then_some(())
        },
    )
    .await;
    let owner_now = maps.get("machine").await.expect("owner still present");
    assert!(
        owner_now
            .finalizers()
            .iter()
            .any(|f| f == "foregroundDeletion")
    );

    release_finalizers(&claims, "dependent").await;
    wait_gone(&maps, "machine", Duration::from_secs(60)).await;
}

#[tokio::test]
async fn a_finalizer_holds_deletion_until_removed() {
    let (client, ns) = support::env().namespace().await;
    let claims = claims_api(&client, &ns);
    let mut held = claim("held", valid_pool_ref());
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    claims.create(&PostParams::default(), &held).await.unwrap();

    claims
        .delete("held", &DeleteParams::default())
        .await
        .unwrap();
    let still_there = claims.get("held").await.expect("held by its finalizer");
    assert!(still_there.metadata.deletion_timestamp.is_some());

    release_finalizers(&claims, "held").await;
    wait_gone(&claims, "held", Duration::from_secs(10)).await;
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_objects() {
    let (client, ns) = support::env().namespace().await;
    let claims = claims_api(&client, &ns);
    claims
        .create(&PostParams::default(), &claim("c", valid_pool_ref()))
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&namespaces, &ns, Duration::from_secs(60)).await;
}

#[tokio::test]
async fn rbac_refuses_a_user_without_rights() {
    let env = support::env();
    let (admin, ns) = env.namespace().await;
    let nobody = env.client_as("nobody", &["system:authenticated"]).await;

    let status = api_error(claims_api(&nobody, &ns).list(&Default::default()).await);
    assert_eq!(status.code, 403, "{status:?}");
    claims_api(&admin, &ns)
        .list(&Default::default())
        .await
        .expect("the admin may list claims");
}

#[tokio::test]
async fn a_restart_on_the_same_data_dir_keeps_the_objects() {
    let data_dir = std::env::temp_dir().join(format!("inpool-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);

    let plane = support::ControlPlane::start(&data_dir, false).expect("first start");
    let client = plane.client().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = maps
        .create(&PostParams::default(), &config_map("survivor"))
        .await
        .unwrap();
    assert_eq!(plane.terminate(), Some(0), "SIGTERM gives a clean exit");

    let plane = support::ControlPlane::start(&data_dir, true).expect("restart");
    let client = plane.client().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let read = maps
        .get("survivor")
        .await
        .expect("object survives a restart");
    assert_eq!(read.uid(), created.uid());
    drop(plane);
    assert!(
        !data_dir.exists(),
        "an ephemeral instance removes its data dir"
    );
}

#[test]
fn a_missing_go_toolchain_is_named() {
    let error = support::check_go_toolchain("/nonexistent").unwrap_err();
    assert!(error.contains("Go toolchain"), "{error}");
    assert!(error.contains("1.26"), "{error}");
    let version = support::check_go_toolchain(&std::env::var("PATH").unwrap()).unwrap();
    assert!(version.starts_with("go version"), "{version}");
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn owner_ref(owner: &ConfigMap) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.name_any(),
        uid: owner.uid().expect("created object has a uid"),
        ..Default::default()
    }
}

async fn release_finalizers(api: &Api<DynamicObject>, name: &str) {
    let patch = json!({ "metadata": { "finalizers": null } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}
