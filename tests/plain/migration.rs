//! Migration from the reference in-cluster IPAM provider, and upgrade, on a control plane shaped
//! like a management cluster that ran the reference provider:
//!
//! - its pool CRDs (`config/crd/bases/` of its Go module v1.1.0: v1alpha1 and v1alpha2, storage v1alpha2)
//!   with the conversion webhook its kustomize patches add, and its mutating and validating
//!   webhook configurations for pools (whose service is gone once it is scaled down);
//! - its prefix pool CRDs (the same folder, v1alpha2 only);
//! - pools, claims and addresses as it leaves them (IP pools and a prefix pool, whose claim's
//!   `IPAddress` holds a sub-prefix's first address and the allocation length): pools with its
//!   `ProtectPool` finalizer and its counts but no conditions; claims with `ReleaseAddress` and
//!   `status.addressRef`; `IPAddress`es with `ProtectAddress`, owner references and the
//!   cluster-name label; no reservations.
//!
//! The steps of docs/migration.md are then followed: the webhook configurations are removed (while
//! they exist every pool write fails); inpool's rendered components are applied with server-side
//! apply and `--force-conflicts`, taking over the pool CRDs (refused while `v1alpha1` is among
//! the CRD's stored versions, accepted once it is not); the reference's conversion webhook,
//! which the takeover leaves on the CRDs, is removed; and the `inpool` binary runs as its
//! ServiceAccount. Every claim keeps its address (the same `IPAddress` object, untouched), every
//! adopted address gets a reservation, and a new claim gets a free address.
//!
//! A reference manifest (the example of the reference's README, its YAML bytes sent unchanged)
//! is created under the reference's CRD before the takeover and again under inpool's after it:
//! both are accepted, both store exactly the manifest's spec, and inpool counts both alike. Then
//! the adopted reference pool is edited to use inpool's additions (`spec.preAllocations`,
//! `spec.additionalSubnets`): the adopted addresses stay where they are, a pre-allocated claim
//! gets its entry's address, an entry naming an address the reference had given another claim
//! fails its claim with `AllocationFailed` naming the holder, and moving that entry to the new
//! subnet realises the claim with that subnet's prefix and gateway.
//!
//! Then an upgrade: inpool stops, the components are applied again and inpool starts again (a
//! newer build is the same binary here): nothing changes, the pool using the additions included.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use inpool::api::reservation::IPAddressReservation;
use inpool::api::{
    GlobalInClusterIPPool, GlobalInClusterPrefixPool, IPAddress, IPAddressClaim, InClusterIPPool,
};
use inpool_testenv::{common, support};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use common::{
    GROUP, Inpool, apply_objects, claim, components, create, global_prefix_claim, merge_patch,
    of_cluster, ready_message, ready_of, reservations_of, service_account_kubeconfig, typed,
    wait_for, wait_reason,
};

const NS: &str = "workloads";
const REFERENCE_NAMESPACE: &str = "capi-ipam-in-cluster-system";
const VALIDATING_WEBHOOKS: &str = "capi-ipam-in-cluster-validating-webhook-configuration";
const MUTATING_WEBHOOKS: &str = "capi-ipam-in-cluster-mutating-webhook-configuration";
/// cert-manager's CA-injection annotation, on CRDs whose conversion webhook it serves.
const CA_INJECTION: &str = "cert-manager.io/inject-ca-from";
const CA_INJECTION_FROM: &str = "capi-ipam-in-cluster-system/capi-ipam-in-cluster-serving-cert";
/// The label clusterctl puts on every object of the reference provider.
const REFERENCE_LABEL: &str = "cluster.x-k8s.io/provider=ipam-in-cluster";
const POOL_CRDS: [&str; 2] = [
    "inclusterippools.ipam.cluster.x-k8s.io",
    "globalinclusterippools.ipam.cluster.x-k8s.io",
];
/// The reference's prefix pool CRDs: v1alpha2 only, no conversion webhook.
const PREFIX_POOL_CRDS: [&str; 2] = [
    "inclusterprefixpools.ipam.cluster.x-k8s.io",
    "globalinclusterprefixpools.ipam.cluster.x-k8s.io",
];
/// The addresses the reference provider handed out: not what inpool would pick first (it
/// picks the lowest free address, 10.20.0.10), so a re-allocation could not go unnoticed.
const ADOPTED: [(&str, &str); 5] = [
    ("m-0", "10.20.0.13"),
    ("m-1", "10.20.0.11"),
    ("m-2", "10.20.0.17"),
    ("m-v6", "2001:db8:20::15"),
    // A sub-prefix of the prefix pool `ref-prefix` (fd20::/48 by 64), by its first address: not
    // the lowest, fd20::.
    ("m-p6", "fd20:0:0:3::"),
];
/// The claims of the walkthrough: the adopted ones, one new claim on each of two pools, and the
/// two claims the edited reference pool pre-allocates.
const CLAIMS: u64 = ADOPTED.len() as u64 + 4;
/// The example of the reference provider's README, as its bytes: a manifest written for the
/// reference, never edited for inpool.
const REFERENCE_MANIFEST: &str = include_str!("../data/pools/valid/ipv4-reference-readme.yaml");
/// Where the reference manifest is created again after the takeover.
const NS_AFTER_TAKEOVER: &str = "workloads-after";

// ------------------------------------------------------------------------------------------
// What the reference provider leaves behind
// ------------------------------------------------------------------------------------------

/// CAPI's CRDs and the reference provider's pool CRDs, each from its Go module.
fn reference_crd_files() -> Vec<PathBuf> {
    let mut files = inpool_testenv::capi::contract_crd_files().expect("CAPI's CRDs");
    files.extend(inpool_testenv::yaml_files(&support::reference_crd_dir()));
    assert_eq!(files.len(), 7, "CAPI and reference CRDs: {files:?}");
    files
}

/// What the reference's kustomize configuration adds to its pool CRDs and installs beside them:
/// a conversion webhook, and mutating and validating webhooks for pools, all served by
/// `capi-ipam-in-cluster-webhook-service` (written as `kubectl apply` or clusterctl would, not by
/// server-side apply).
async fn install_reference_webhooks(client: &Client) {
    let service = |path: &str| {
        json!({ "service": {
            "namespace": REFERENCE_NAMESPACE,
            "name": "capi-ipam-in-cluster-webhook-service",
            "path": path,
        }})
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in POOL_CRDS {
        crds.patch(
            crd,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": { "annotations": { CA_INJECTION: CA_INJECTION_FROM } },
                "spec": { "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": service("/convert"),
                    "conversionReviewVersions": ["v1"],
                },
            }}})),
        )
        .await
        .expect("the reference's conversion webhook on its CRD");
    }
    let webhook = |name: &str, path: &str, resource: &str, operations: &[&str]| {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1", "v1beta1"],
            "clientConfig": service(path),
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "rules": [{
                "apiGroups": [GROUP], "apiVersions": ["v1alpha2"],
                "operations": operations, "resources": [resource],
            }],
        })
    };
    // A configuration of `kind` named `name`: for each pool kind, the webhook
    // `<prefix>.<pool kind>.ipam.cluster.x-k8s.io` at `/<verb>-ipam-cluster-x-k8s-io-v1alpha2-<pool
    // kind>`, as the reference's kustomize configuration names them.
    let configuration = |kind: &str, name: &str, prefix: &str, verb: &str, operations: &[&str]| {
        let webhooks: Vec<Value> = ["inclusterippool", "globalinclusterippool"]
            .iter()
            .map(|pool| {
                webhook(
                    &format!("{prefix}.{pool}.ipam.cluster.x-k8s.io"),
                    &format!("/{verb}-ipam-cluster-x-k8s-io-v1alpha2-{pool}"),
                    &format!("{pool}s"),
                    operations,
                )
            })
            .collect();
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": { "name": name,
                          "labels": { "cluster.x-k8s.io/provider": "ipam-in-cluster" } },
            "webhooks": webhooks,
        })
    };
    let mutating: MutatingWebhookConfiguration = typed(configuration(
        "MutatingWebhookConfiguration",
        MUTATING_WEBHOOKS,
        "default",
        "mutate",
        &["CREATE", "UPDATE"],
    ));
    create(&Api::all(client.clone()), &mutating).await;
    let validating: ValidatingWebhookConfiguration = typed(configuration(
        "ValidatingWebhookConfiguration",
        VALIDATING_WEBHOOKS,
        "validation",
        "validate",
        &["CREATE", "UPDATE", "DELETE"],
    ));
    create(&Api::all(client.clone()), &validating).await;
}

/// Pools, claims and addresses exactly as the reference provider leaves them.
async fn create_reference_objects(client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [NS, REFERENCE_NAMESPACE] {
        namespaces
            .create(
                &PostParams::default(),
                &typed(
                    json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns } }),
                ),
            )
            .await
            .unwrap();
    }
    let clusters: Api<inpool::api::Cluster> = Api::namespaced(client.clone(), NS);
    clusters
        .create(
            &PostParams::default(),
            &typed(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": { "name": "prod" }, "spec": { "paused": false }
            })),
        )
        .await
        .unwrap();

    // Pools: the reference's ProtectPool finalizer and its counts, no conditions.
    let spec =
        json!({ "addresses": ["10.20.0.10-10.20.0.19"], "prefix": 24, "gateway": "10.20.0.1" });
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), NS);
    let pool = create_reference_pool(&pools, "ref-pool", spec, [10, 3, 7]).await;
    let spec = json!({ "addresses": ["2001:db8:20::10-2001:db8:20::1f"], "prefix": 64, "gateway": "2001:db8:20::1" });
    let global_pools: Api<GlobalInClusterIPPool> = Api::all(client.clone());
    let global = create_reference_pool(&global_pools, "ref-v6", spec, [16, 1, 15]).await;
    let spec =
        json!({ "prefixes": ["fd20::/48"], "allocationPrefixLength": 64, "gateway": "fd20::1" });
    let prefix_pools: Api<GlobalInClusterPrefixPool> = Api::all(client.clone());
    let prefix_pool =
        create_reference_pool(&prefix_pools, "ref-prefix", spec, [65536, 1, 65535]).await;

    create_manifest(client, NS, REFERENCE_MANIFEST)
        .await
        .expect("the reference's CRD takes its own README's manifest");

    // Claims and their addresses (a prefix pool's: the sub-prefix's first address, the
    // allocation length, the pool's gateway).
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), NS);
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), NS);
    for (name, address) in ADOPTED {
        let ReferencePool {
            kind,
            name: pool_name,
            uid: pool_uid,
            prefix,
            gateway,
        } = match name {
            "m-p6" => &prefix_pool,
            "m-v6" => &global,
            _ => &pool,
        };
        // The claim and its address: the reference's finalizer on each, the cluster's label.
        let metadata = |finalizer: &str| {
            json!({ "name": name, "finalizers": [finalizer],
                    "labels": { "cluster.x-k8s.io/cluster-name": "prod" } })
        };
        let claim = create(
            &claims,
            &typed(json!({
                "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
                "metadata": metadata("ipam.cluster.x-k8s.io/ReleaseAddress"),
                "spec": {
                    "clusterName": "prod",
                    "poolRef": { "apiGroup": GROUP, "kind": kind, "name": pool_name }
                }
            })),
        )
        .await;
        claims
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": { "addressRef": { "name": name } } })),
            )
            .await
            .unwrap();
        let mut address_metadata = metadata("ipam.cluster.x-k8s.io/ProtectAddress");
        address_metadata["ownerReferences"] = json!([
            { "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
              "name": name, "uid": claim.uid().unwrap(),
              "controller": true, "blockOwnerDeletion": true },
            { "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": kind,
              "name": pool_name, "uid": pool_uid,
              "controller": false, "blockOwnerDeletion": true },
        ]);
        create(
            &addresses,
            &typed(json!({
                "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
                "metadata": address_metadata,
                "spec": {
                    "address": address, "prefix": prefix, "gateway": gateway,
                    "claimRef": { "name": name },
                    "poolRef": { "apiGroup": GROUP, "kind": kind, "name": pool_name }
                }
            })),
        )
        .await;
    }
}

/// Creates the `InClusterIPPool` of a YAML manifest in `ns`, sending the manifest's bytes as they
/// are (`Content-Type: application/yaml`), so that nothing on the client side re-encodes them.
async fn create_manifest(client: &Client, ns: &str, manifest: &str) -> Result<(), kube::Error> {
    let request = http::Request::post(format!(
        "/apis/{GROUP}/v1alpha2/namespaces/{ns}/inclusterippools"
    ))
    .header(http::header::CONTENT_TYPE, "application/yaml")
    .body(manifest.as_bytes().to_vec())
    .expect("a request");
    client.request_text(request).await.map(drop)
}

/// The reference manifest's object, as JSON.
fn manifest_object() -> Value {
    serde_saphyr::from_str(REFERENCE_MANIFEST).expect("the reference manifest is YAML")
}

/// What the reference's `IPAddress`es of a pool name and hold: the pool's kind, name and uid, and
/// an address's prefix (the pool's, or a prefix pool's allocation length) and gateway.
struct ReferencePool {
    kind: String,
    name: String,
    uid: String,
    prefix: i64,
    gateway: String,
}

/// A pool `name` of `spec` as the reference leaves it (v1alpha2): with its `ProtectPool`
/// finalizer, and its counts (`[total, used, free]`) in the status, no conditions.
async fn create_reference_pool<K>(
    api: &Api<K>,
    name: &str,
    spec: Value,
    [total, used, free]: [i64; 3],
) -> ReferencePool
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let object = json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": K::kind(&()),
        "metadata": { "name": name, "finalizers": ["ipam.cluster.x-k8s.io/ProtectPool"] },
        "spec": spec,
    });
    let created = api
        .create(&PostParams::default(), &typed(object))
        .await
        .unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "ipAddresses":
            { "total": total, "used": used, "free": free, "outOfRange": 0 } } })),
    )
    .await
    .unwrap();
    ReferencePool {
        kind: K::kind(&()).to_string(),
        name: name.to_string(),
        uid: created.uid().unwrap(),
        prefix: spec["prefix"]
            .as_i64()
            .or(spec["allocationPrefixLength"].as_i64())
            .unwrap(),
        gateway: spec["gateway"].as_str().unwrap().to_string(),
    }
}

// ------------------------------------------------------------------------------------------
// inpool's side
// ------------------------------------------------------------------------------------------

/// `kubectl apply --server-side --force-conflicts -f config/clusterctl/ipam-components.yaml`:
/// server-side apply of every object with kubectl's field manager, taking over fields that
/// other managers own. Stops at the first object the API server refuses.
async fn apply_components(client: &Client) -> Result<(), String> {
    apply_objects(
        client,
        &components(),
        &PatchParams::apply("kubectl").force(),
    )
    .await
}

async fn wait_established(client: &Client, name: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_for(
        &format!("CRD {name} established"),
        Duration::from_secs(30),
        || async {
            let crd = crds.get(name).await.ok()?;
            crd.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        },
    )
    .await;
}

/// inpool as its ServiceAccount, on every namespace.
fn start_inpool(kubeconfig: &Path) -> Inpool {
    Inpool::start(env!("CARGO_BIN_EXE_inpool"), "inpool", kubeconfig, &[])
}

/// `inpool_reconciles_total{controller="claim"}`.
async fn claim_reconciles(inpool: &Inpool) -> Option<u64> {
    let n = inpool
        .sample(r#"inpool_reconciles_total{controller="claim"}"#)
        .await?;
    Some(n as u64)
}

/// The migration and upgrade commands of docs/migration.md and docs/install.md. Each runs as the
/// literal `kubectl` command when kubectl is installed, and as the same API requests otherwise
/// (kubectl is not a prerequisite of the tests).
struct Steps {
    client: Client,
    kubeconfig: PathBuf,
    kubectl: bool,
}

impl Steps {
    fn new(client: &Client, kubeconfig: &Path) -> Steps {
        let kubectl = Command::new("kubectl")
            .args(["version", "--client"])
            .output()
            .is_ok_and(|o| o.status.success());
        eprintln!(
            "migration steps run {}",
            if kubectl {
                "as kubectl commands"
            } else {
                "as API requests (kubectl is not installed)"
            }
        );
        Steps {
            client: client.clone(),
            kubeconfig: kubeconfig.to_path_buf(),
            kubectl,
        }
    }

    /// `kubectl ARGS` against the control plane: its output, or its output as an error.
    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let output = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("run kubectl");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!("$ kubectl {}\n{text}", args.join(" "));
        if output.status.success() {
            Ok(text)
        } else {
            Err(text)
        }
    }

    /// `kubectl delete validatingwebhookconfigurations,mutatingwebhookconfigurations
    /// -l cluster.x-k8s.io/provider=ipam-in-cluster`
    async fn remove_reference_webhooks(&self) {
        if self.kubectl {
            self.kubectl(&[
                "delete",
                "validatingwebhookconfigurations,mutatingwebhookconfigurations",
                "-l",
                REFERENCE_LABEL,
            ])
            .unwrap();
            return;
        }
        let reference = ListParams::default().labels(REFERENCE_LABEL);
        Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
            .delete_collection(&DeleteParams::default(), &reference)
            .await
            .unwrap();
        Api::<MutatingWebhookConfiguration>::all(self.client.clone())
            .delete_collection(&DeleteParams::default(), &reference)
            .await
            .unwrap();
    }

    /// `kubectl apply --server-side --force-conflicts -f config/clusterctl/ipam-components.yaml`
    async fn apply_components(&self) -> Result<(), String> {
        if self.kubectl {
            let path = support::repo_root().join("config/clusterctl/ipam-components.yaml");
            return self
                .kubectl(&[
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "-f",
                    path.to_str().unwrap(),
                ])
                .map(|_| ());
        }
        apply_components(&self.client).await
    }

    /// `kubectl patch crd NAME --subresource=status --type=merge
    /// -p '{"status":{"storedVersions":["v1alpha2"]}}'`
    async fn trim_stored_versions(&self, crd: &str) {
        let patch = r#"{"status":{"storedVersions":["v1alpha2"]}}"#;
        self.patch_crd(crd, Some("status"), patch).await;
    }

    /// `kubectl patch crd NAME --type=merge -p '{"metadata":{"annotations":
    /// {"cert-manager.io/inject-ca-from":null}},"spec":{"conversion":{"strategy":"None",
    /// "webhook":null}}}'`
    async fn remove_reference_conversion(&self, crd: &str) {
        self.patch_crd(crd, None, REMOVE_CONVERSION).await;
    }

    /// `kubectl patch crd NAME [--subresource=SUBRESOURCE] --type=merge -p PATCH`
    async fn patch_crd(&self, crd: &str, subresource: Option<&str>, patch: &str) {
        if self.kubectl {
            let subresource = subresource.map(|s| format!("--subresource={s}"));
            let mut args = vec!["patch", "crd", crd];
            args.extend(subresource.as_deref());
            args.extend(["--type=merge", "-p", patch]);
            self.kubectl(&args).unwrap();
            return;
        }
        let crds = Api::<CustomResourceDefinition>::all(self.client.clone());
        let patch = Patch::Merge(serde_json::from_str::<Value>(patch).unwrap());
        match subresource {
            None => crds.patch(crd, &PatchParams::default(), &patch).await,
            Some(subresource) => {
                crds.patch_subresource(subresource, crd, &PatchParams::default(), &patch)
                    .await
            }
        }
        .unwrap();
    }
}

/// The patch of docs/migration.md that removes the reference's conversion webhook from a pool CRD.
const REMOVE_CONVERSION: &str = r#"{"metadata":{"annotations":{"cert-manager.io/inject-ca-from":null}},"spec":{"conversion":{"strategy":"None","webhook":null}}}"#;

// ------------------------------------------------------------------------------------------
// Observations
// ------------------------------------------------------------------------------------------

/// name → (uid, resourceVersion, address) of every `IPAddress` in the namespace.
async fn addresses(client: &Client) -> BTreeMap<String, (String, String, String)> {
    Api::<IPAddress>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|a| {
            (
                a.name_any(),
                (
                    a.uid().unwrap_or_default(),
                    a.resource_version().unwrap_or_default(),
                    a.spec.address.clone(),
                ),
            )
        })
        .collect()
}

/// name → resourceVersion of every object `api` lists.
async fn versions<K>(api: Api<K>) -> BTreeMap<String, String>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| {
            (
                o.meta().name.clone().unwrap_or_default(),
                o.meta().resource_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Everything inpool could have written: claims, addresses, reservations, pools.
async fn state(client: &Client) -> Vec<BTreeMap<String, String>> {
    vec![
        versions(Api::<IPAddressClaim>::namespaced(client.clone(), NS)).await,
        versions(Api::<IPAddress>::namespaced(client.clone(), NS)).await,
        versions(Api::<IPAddressReservation>::all(client.clone())).await,
        versions(Api::<InClusterIPPool>::namespaced(client.clone(), NS)).await,
        versions(Api::<GlobalInClusterIPPool>::all(client.clone())).await,
        versions(Api::<GlobalInClusterPrefixPool>::all(client.clone())).await,
    ]
}

/// Waits until inpool's status of the pool `name` counts `[total, used, free]` (addresses, or
/// sub-prefixes of a prefix pool) and, if `ready`, has `Ready=True`; returns the pool.
async fn wait_pool_status<K>(api: &Api<K>, name: &str, counts: [i64; 3], ready: bool) -> K
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("inpool's status of pool {name} to count {counts:?}, ready: {ready}");
    wait_for(&what, Duration::from_secs(30), || async {
        let pool = api.get(name).await.ok()?;
        let status = serde_json::to_value(&pool).ok()?["status"].take();
        let is_ready = status["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let read = ["total", "used", "free"].map(|count| &status["ipAddresses"][count]);
        (read == counts.map(|n| json!(n)).each_ref() && (is_ready || !ready)).then_some(pool)
    })
    .await
}

/// Asserts that CRD `crd` carries inpool's provider label: inpool's components took it over.
fn assert_taken_over(crd: &CustomResourceDefinition) {
    assert_eq!(
        crd.labels()
            .get("cluster.x-k8s.io/provider")
            .map(String::as_str),
        Some("ipam-inpool"),
        "{}",
        crd.name_any()
    );
}

// ------------------------------------------------------------------------------------------
// The walkthrough
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn pools_claims_and_addresses_of_the_reference_provider_are_adopted_without_reallocation() {
    let crds = reference_crd_files();
    let data_dir = std::env::temp_dir().join(format!("inpool-migration-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let plane = support::ControlPlane::start_with_crds(&data_dir, true, &crds)
        .expect("control plane with the reference provider's CRDs");
    let client = plane.client().await;

    // The reference provider's installation and what it leaves behind.
    create_reference_objects(&client).await;
    install_reference_webhooks(&client).await;
    let before = addresses(&client).await;
    assert_eq!(before.len(), ADOPTED.len());

    // Its webhooks block every pool write once its Deployment is scaled down: the reason the
    // docs/migration.md removes them.
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), NS);
    let blocked = pools
        .patch(
            "ref-pool",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "touched": "yes" } } })),
        )
        .await
        .expect_err("a pool write while the reference's webhooks are installed");
    assert!(
        blocked.to_string().contains("webhook"),
        "refused by the webhook: {blocked}"
    );

    // Migration, as docs/migration.md says: remove the webhook configurations, then apply inpool's
    // components with server-side apply, taking over the pool CRDs.
    let steps = Steps::new(&client, &plane.kubeconfig);
    steps.remove_reference_webhooks().await;
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone());
    assert!(
        validating
            .get_opt(VALIDATING_WEBHOOKS)
            .await
            .unwrap()
            .is_none()
    );
    assert!(mutating.get_opt(MUTATING_WEBHOOKS).await.unwrap().is_none());

    // A cluster whose pools were once stored as v1alpha1 (an early reference release) cannot
    // take inpool's CRDs, which serve v1alpha2 only: the API server refuses to drop a version
    // that may still be stored. Once every pool is stored as v1alpha2 (here they always were),
    // `status.storedVersions` is trimmed and the apply goes through.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch_status(
        POOL_CRDS[0],
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "storedVersions": ["v1alpha1", "v1alpha2"] } })),
    )
    .await
    .unwrap();
    let refused = steps
        .apply_components()
        .await
        .expect_err("inpool's CRD while v1alpha1 is a stored version");
    assert!(
        refused.contains("storedVersions") && refused.contains("v1alpha1"),
        "{refused}"
    );
    steps.trim_stored_versions(POOL_CRDS[0]).await;
    steps.apply_components().await.unwrap();

    // The takeover: inpool's schema and labels, v1alpha2 only; the reference's conversion
    // webhook is left behind (no applied field covers it) and is removed by hand, so that no
    // request can ever be sent to the deleted webhook service.
    for name in POOL_CRDS {
        let crd = crds.get(name).await.unwrap();
        let versions: Vec<(String, bool, bool)> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.clone(), v.served, v.storage))
            .collect();
        assert_eq!(versions, [("v1alpha2".to_string(), true, true)], "{name}");
        assert_taken_over(&crd);
        assert_eq!(
            crd.spec.conversion.as_ref().map(|c| c.strategy.as_str()),
            Some("Webhook"),
            "{name}: the reference's conversion webhook outlives the takeover"
        );
        assert!(crd.annotations().contains_key(CA_INJECTION), "{name}");
        steps.remove_reference_conversion(name).await;
        let crd = crds.get(name).await.unwrap();
        let conversion = crd.spec.conversion.clone().unwrap();
        assert_eq!(conversion.strategy, "None", "{name}");
        assert!(conversion.webhook.is_none(), "{name}");
        assert!(!crd.annotations().contains_key(CA_INJECTION), "{name}");
    }
    // The prefix pool CRDs are taken over the same way (nothing to remove: no conversion).
    for name in PREFIX_POOL_CRDS {
        let crd = crds.get(name).await.unwrap();
        assert_taken_over(&crd);
    }
    wait_established(&client, "ipaddressreservations.ipam.inpool.dev").await;
    for name in POOL_CRDS.into_iter().chain(PREFIX_POOL_CRDS) {
        wait_established(&client, name).await;
    }

    // inpool as its ServiceAccount.
    let kubeconfig = service_account_kubeconfig(&plane.kubeconfig);
    let mut inpool = start_inpool(&kubeconfig);
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), NS);
    for (name, _) in ADOPTED {
        let claim = wait_reason(&claims, name, "AddressAllocated").await;
        let (status, _, address_ref) = ready_of(&claim).unwrap();
        assert_eq!(status, "True", "claim {name}");
        assert_eq!(
            address_ref.as_deref(),
            Some(name),
            "claim {name} lost its addressRef"
        );
    }
    // The same IPAddress objects, untouched: no re-allocation.
    assert_eq!(addresses(&client).await, before, "the addresses changed");
    for (name, address) in ADOPTED {
        assert_eq!(before[name].2, address);
    }
    // Each adopted address is now reserved for its claim (the API server enforces uniqueness
    // from now on).
    let reserved = wait_for(
        "a reservation for every adopted address",
        Duration::from_secs(30),
        || async {
            let reserved = reservations_of(&client, NS).await;
            ADOPTED
                .iter()
                .all(|(claim, address)| reserved.get(*address).is_some_and(|c| c == claim))
                .then_some(reserved)
        },
    )
    .await;
    assert_eq!(reserved.len(), ADOPTED.len(), "{reserved:?}");
    // The pools: inpool's counts and conditions, the ProtectPool finalizer kept.
    let pool = wait_pool_status(&pools, "ref-pool", [10, 3, 7], true).await;
    assert!(
        pool.finalizers()
            .contains(&"ipam.cluster.x-k8s.io/ProtectPool".to_string())
    );

    // A new claim gets a free address, not one of the adopted ones: the lowest free.
    create(&claims, &of_cluster(claim("m-new", "ref-pool"), "prod")).await;
    wait_for("the new claim Ready", Duration::from_secs(30), || async {
        let claim = claims.get("m-new").await.ok()?;
        let (status, _, _) = ready_of(&claim)?;
        (status == "True").then_some(())
    })
    .await;
    let now = addresses(&client).await;
    assert_eq!(now["m-new"].2, "10.20.0.10", "{now:?}");
    for (name, _) in ADOPTED {
        assert_eq!(now[name], before[name], "{name} changed");
    }
    wait_pool_status(&pools, "ref-pool", [10, 4, 6], false).await;

    // The reference manifest, created under the reference's CRD, reads back under inpool's with
    // exactly the manifest's spec; the same bytes are accepted again under inpool's CRD, store
    // the same spec, and inpool counts both pools alike (1 + 9 + 16 addresses, none in use).
    let written = manifest_object();
    let sample = written["metadata"]["name"].as_str().unwrap();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &typed(json!({ "apiVersion": "v1", "kind": "Namespace",
                           "metadata": { "name": NS_AFTER_TAKEOVER } })),
        )
        .await
        .unwrap();
    create_manifest(&client, NS_AFTER_TAKEOVER, REFERENCE_MANIFEST)
        .await
        .expect("inpool's CRD takes the reference's manifest unchanged");
    for ns in [NS, NS_AFTER_TAKEOVER] {
        let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), ns);
        let stored = serde_json::to_value(pools.get(sample).await.unwrap()).unwrap();
        assert_eq!(
            stored["spec"], written["spec"],
            "{ns}/{sample}: the stored spec is the manifest's"
        );
        wait_pool_status(&pools, sample, [26, 0, 26], false).await;
    }

    // The adopted reference pool, edited to use inpool's additions: a second subnet, a claim
    // pre-allocated a free address, and one pre-allocated the address the reference gave m-0.
    let edited = |clash: &str| {
        json!({ "spec": {
            "additionalSubnets": [
                { "addresses": ["10.21.0.10-10.21.0.19"], "prefix": 25, "gateway": "10.21.0.1" }
            ],
            "preAllocations": [
                { "claimName": "m-pre", "address": "10.20.0.19" },
                { "claimName": "m-clash", "address": clash },
            ],
        }})
    };
    merge_patch(&pools, "ref-pool", edited("10.20.0.13")).await;
    create(&claims, &of_cluster(claim("m-pre", "ref-pool"), "prod")).await;
    create(&claims, &of_cluster(claim("m-clash", "ref-pool"), "prod")).await;
    wait_reason(&claims, "m-pre", "AddressAllocated").await;
    let clash = wait_reason(&claims, "m-clash", "AllocationFailed").await;
    let message = ready_message(&clash);
    for part in [
        "spec.preAllocations entry",
        "m-clash",
        "10.20.0.13",
        &format!("held by claim {NS}/m-0"),
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    let now = addresses(&client).await;
    assert_eq!(now["m-pre"].2, "10.20.0.19", "{now:?}");
    assert!(!now.contains_key("m-clash"), "{now:?}");
    for (name, _) in ADOPTED {
        assert_eq!(
            now[name], before[name],
            "{name} moved when its pool was edited"
        );
    }
    // The entry moved to the second subnet: the claim is realised there, with its prefix and
    // gateway.
    merge_patch(&pools, "ref-pool", edited("10.21.0.15")).await;
    wait_reason(&claims, "m-clash", "AddressAllocated").await;
    let realised = Api::<IPAddress>::namespaced(client.clone(), NS)
        .get("m-clash")
        .await
        .unwrap();
    assert_eq!(
        (
            realised.spec.address.as_str(),
            realised.spec.prefix,
            realised.spec.gateway.as_deref()
        ),
        ("10.21.0.15", 25, Some("10.21.0.1"))
    );
    for (name, _) in ADOPTED {
        assert_eq!(addresses(&client).await[name], before[name], "{name} moved");
    }
    // Counts across both subnets: 10 + 10 addresses; the adopted three, m-new and the two
    // pre-allocated ones used.
    wait_pool_status(&pools, "ref-pool", [20, 6, 14], false).await;

    // The prefix pool: inpool's counts and conditions in sub-prefixes, and a new claim gets the
    // lowest free sub-prefix, not the adopted one.
    let prefix_pools: Api<GlobalInClusterPrefixPool> = Api::all(client.clone());
    let prefix_pool = wait_pool_status(&prefix_pools, "ref-prefix", [65536, 1, 65535], true).await;
    assert!(
        prefix_pool
            .finalizers()
            .contains(&"ipam.cluster.x-k8s.io/ProtectPool".to_string())
    );
    create(
        &claims,
        &of_cluster(global_prefix_claim("m-new6", "ref-prefix"), "prod"),
    )
    .await;
    wait_reason(&claims, "m-new6", "AddressAllocated").await;
    let now = addresses(&client).await;
    assert_eq!(now["m-new6"].2, "fd20::", "{now:?}");
    assert_eq!(
        now["m-p6"], before["m-p6"],
        "the adopted sub-prefix changed"
    );
    inpool.assert_nothing_forbidden();

    // Upgrade: stop inpool, apply the (new) components, start the (new) binary. Nothing inpool
    // owns is written again: every claim, address, reservation and pool keeps its
    // resourceVersion.
    let settled = wait_for(
        "every claim reconciled",
        Duration::from_secs(10),
        || async { claim_reconciles(&inpool).await.filter(|n| *n >= CLAIMS) },
    )
    .await;
    assert!(settled >= CLAIMS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_upgrade = state(&client).await;
    assert_eq!(inpool.terminate(), Some(0), "logs:\n{}", inpool.logs());
    inpool.assert_nothing_forbidden();
    steps.apply_components().await.unwrap();
    let mut upgraded = start_inpool(&kubeconfig);
    wait_for(
        "the upgraded inpool to reconcile every claim",
        Duration::from_secs(60),
        || async { claim_reconciles(&upgraded).await.filter(|n| *n >= CLAIMS) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_upgrade = state(&client).await;
    let kinds = [
        "claims",
        "IPAddresses",
        "reservations",
        "pools",
        "global pools",
        "global prefix pools",
    ];
    for (i, kind) in kinds.iter().enumerate() {
        assert_eq!(
            after_upgrade[i], before_upgrade[i],
            "{kind} were written again after the upgrade"
        );
    }
    for (name, _) in ADOPTED {
        let claim = claims.get(name).await.unwrap();
        assert_eq!(
            ready_of(&claim),
            Some((
                "True".to_string(),
                "AddressAllocated".to_string(),
                Some(name.to_string())
            ))
        );
    }
    upgraded.assert_nothing_forbidden();
    assert_eq!(upgraded.terminate(), Some(0), "logs:\n{}", upgraded.logs());
    drop(plane);
}
