//! What the tests with a real infrastructure provider (`tests/capv/`, `tests/capm3/`) share: a
//! [`ConsumerSite`] (one CAPI Cluster of the provider in a test's namespace, its Machines, the
//! claims the provider creates for them and the waits on them), reading the provider's
//! conditions, waiting on a pool's count of used addresses, and printing what `kubectl get` shows.

use std::path::Path;
use std::time::Duration;

use inpool::api::{
    AdditionalSubnet, GlobalInClusterIPPool, IPAddress, IPAddressClaim, InClusterIPPool,
    PreAllocation,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::controller::{RunningController, start_controller};
use super::objects::{create, global_pool, pool, typed, unique};
use super::packaging::api_of;
use super::wait::{wait_explained, wait_for, wait_gone};
use crate::support::TestEnv;

/// How long a provider may take to do its part: CAPV to clone, configure and power on a VM and
/// report back, CAPM3 to associate a host, create and fill claims and render the network data
/// (seconds by hand; both requeue slowly while they wait, every 30 s for CAPM3, and tests run
/// side by side).
pub const PROVISIONING: Duration = Duration::from_secs(180);

/// What the shared part of a [`ConsumerSite`] needs to know of the infrastructure provider.
pub struct Consumer {
    /// What messages call it (`CAPV`); its field manager is `inpool-<name, lower case>-test`.
    pub name: &'static str,
    /// The bed it runs in (`support::capv_env`).
    pub env: fn() -> &'static TestEnv,
    /// The kind of its object that owns the claims it creates (`VSphereVM`), also the first
    /// kind [`ConsumerSite::show_kubectl_get`] shows.
    pub claim_owner: &'static str,
    /// Its finalizer on the claims it creates.
    pub claim_finalizer: &'static str,
}

impl Consumer {
    /// One test's bed: a namespace of its own with an inpool controller for it (kept running
    /// while the returned controller lives), `pools` created there, and a site in it whose
    /// infrastructure cluster is `infrastructure_cluster` (see [`ConsumerSite::new`]).
    pub async fn bed(
        &'static self,
        pools: &[InClusterIPPool],
        infrastructure_cluster: Value,
    ) -> (RunningController, Api<InClusterIPPool>, ConsumerSite) {
        let (client, ns) = (self.env)().namespace().await;
        let inpool = start_controller(&client, &ns);
        let api: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
        for pool in pools {
            create(&api, pool).await;
        }
        let site = ConsumerSite::new(self, &client, &ns, infrastructure_cluster).await;
        (inpool, api, site)
    }
}

/// The pool `v6` of the consumers' dual-stack tests: fd00:10::10-fd00:10::20/64 with gateway
/// fd00:10::1.
pub fn v6_pool() -> InClusterIPPool {
    pool("v6", &["fd00:10::10-fd00:10::20"], 64, Some("fd00:10::1"))
}

/// The pool `spanning` of the consumers' pre-allocation tests: its own subnet holds one address,
/// 10.40.0.10/24 (gateway 10.40.0.1), pre-allocated to the claim `pre_allocated_to`, and a second
/// subnet holds 10.41.0.10-10.41.0.20/26 (gateway 10.41.0.1). The pre-allocated address counts as
/// used, so any other claim lands in the second subnet whatever the order the claims come in:
/// the setup is deterministic without exhausting anything by hand.
pub fn spanning_pool(pre_allocated_to: &str) -> InClusterIPPool {
    let mut spanning = pool("spanning", &["10.40.0.10"], 24, Some("10.40.0.1"));
    spanning.spec.pre_allocations = Some(vec![PreAllocation::new(pre_allocated_to, "10.40.0.10")]);
    spanning.spec.additional_subnets = Some(vec![AdditionalSubnet::new(
        ["10.41.0.10-10.41.0.20"],
        26,
        Some("10.41.0.1"),
    )]);
    spanning
}

/// One CAPI Cluster of a [`Consumer`] in a test's namespace.
pub struct ConsumerSite {
    pub consumer: &'static Consumer,
    pub client: Client,
    pub ns: String,
    /// The infrastructure cluster's and the `Cluster`'s name.
    pub cluster: String,
}

impl ConsumerSite {
    /// Applies `infrastructure_cluster` (the provider's cluster object: apiVersion, kind and
    /// spec; its name is the site's) and a `Cluster` pointing at it.
    pub async fn new(
        consumer: &'static Consumer,
        client: &Client,
        ns: &str,
        mut infrastructure_cluster: Value,
    ) -> ConsumerSite {
        let site = ConsumerSite {
            consumer,
            client: client.clone(),
            ns: ns.to_string(),
            cluster: "c1".to_string(),
        };
        infrastructure_cluster["metadata"] = json!({"name": site.cluster});
        let infrastructure_ref = site.reference_to(&infrastructure_cluster);
        site.apply(infrastructure_cluster).await;
        site.apply(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": site.cluster},
            "spec": {"infrastructureRef": infrastructure_ref},
        }))
        .await;
        site
    }

    /// A reference to `object` as CAPI's v1beta2 objects name an infrastructure object: its API
    /// group, kind and name.
    fn reference_to(&self, object: &Value) -> Value {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let group = api_version.split_once('/').map_or("", |(group, _)| group);
        json!({"apiGroup": group, "kind": object["kind"], "name": object["metadata"]["name"]})
    }

    /// The labels that tie an object to the site's Cluster.
    pub fn labels(&self) -> Value {
        json!({"cluster.x-k8s.io/cluster-name": self.cluster})
    }

    /// Server-side applies `object` in the site's namespace as the provider's test field manager
    /// (see [`apply_as`]).
    pub async fn apply(&self, object: Value) {
        let manager = format!("inpool-{}-test", self.consumer.name.to_lowercase());
        apply_as(&self.client, &self.ns, &manager, object).await;
    }

    /// A Machine `name` with its bootstrap data given by hand (no bootstrap provider needed) on
    /// `infrastructure_machine` (the provider's machine object: apiVersion, kind and spec; it is
    /// named `name` and labelled with the cluster), as a MachineDeployment makes one.
    pub async fn machine(&self, name: &str, mut infrastructure_machine: Value) {
        let labels = self.labels();
        self.apply(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-bootstrap"), "labels": labels},
            "stringData": {"format": "cloud-config", "value": "#cloud-config\n"},
        }))
        .await;
        infrastructure_machine["metadata"] = json!({"name": name, "labels": labels});
        let infrastructure_ref = self.reference_to(&infrastructure_machine);
        self.apply(infrastructure_machine).await;
        self.apply(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "clusterName": self.cluster, "version": "v1.33.0",
                "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                "infrastructureRef": infrastructure_ref,
            },
        }))
        .await;
    }

    /// CAPI's Machines (`cluster.x-k8s.io/v1beta2`) of the site's namespace.
    pub fn machines(&self) -> Api<DynamicObject> {
        let machine = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
        Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &ApiResource::from_gvk(&machine),
        )
    }

    pub fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn claims(&self) -> Api<IPAddressClaim> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn addresses(&self) -> Api<IPAddress> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Waits until the provider has created the claim `name` and returns it, after checking that
    /// it is the provider's: owned by its object `owner` (of the consumer's claim owner kind),
    /// holding its finalizer, and labelled with the cluster name (the provider copies it from
    /// its own object: the claim's only link to the Cluster).
    pub async fn claim_created(&self, name: &str, owner: &str) -> IPAddressClaim {
        let Consumer {
            name: provider,
            claim_owner,
            claim_finalizer,
            ..
        } = self.consumer;
        let claims = self.claims();
        let claim = self
            .eventually(
                &format!("{provider} to create claim {}/{name}", self.ns),
                PROVISIONING,
                || async { claims.get_opt(name).await.unwrap() },
            )
            .await;
        let owned_by = claim
            .owner_references()
            .iter()
            .find(|o| o.kind == *claim_owner)
            .unwrap_or_else(|| panic!("claim {name} has no {claim_owner} owner: {claim:?}"));
        assert_eq!(owned_by.name, owner, "claim {name}'s owner");
        assert!(
            claim.finalizers().iter().any(|f| f == claim_finalizer),
            "claim {name} lacks {provider}'s finalizer: {:?}",
            claim.finalizers()
        );
        assert_eq!(
            claim.labels().get("cluster.x-k8s.io/cluster-name"),
            Some(&self.cluster),
            "{provider} copies the cluster-name label"
        );
        claim
    }

    /// A `GlobalInClusterIPPool` of the test's own, named `<consumer>-global-…`:
    /// 10.30.0.10-10.30.0.12/24 with gateway 10.30.0.1; returns its API and its name (see
    /// [`ConsumerSite::delete_global_pool`]).
    pub async fn create_global_pool(&self) -> (Api<GlobalInClusterIPPool>, String) {
        let pools: Api<GlobalInClusterIPPool> = Api::all(self.client.clone());
        let name = unique(&format!("{}-global", self.consumer.name.to_lowercase()));
        let mut global = global_pool(&name, &["10.30.0.10-10.30.0.12"], 24);
        global.spec.gateway = Some("10.30.0.1".into());
        create(&pools, &global).await;
        (pools, name)
    }

    /// Waits until the global pool `name` counts no address used, then deletes it: a global
    /// pool outlives the test's namespace.
    pub async fn delete_global_pool(&self, pools: &Api<GlobalInClusterIPPool>, name: &str) {
        wait_pool_used(pools, name, 0).await;
        pools
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting GlobalInClusterIPPool {name}: {e}"));
    }

    /// Deletes the Machine `name` and waits until the provider's claims `claims` are gone (the
    /// provider or the garbage collector deletes them, the provider's finalizer done) and with
    /// them inpool's addresses. What else the provider releases is the caller's to wait for.
    pub async fn delete_machine_and_claims(&self, name: &str, claims: &[&str]) {
        self.machines()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting Machine {name}: {e}"));
        for claim in claims {
            wait_gone(&self.claims(), claim, PROVISIONING).await;
            wait_gone(&self.addresses(), claim, Duration::from_secs(60)).await;
        }
    }

    /// [`wait_for`], failing with the end of the logs of the provider, CAPI core and whatever
    /// else runs in the provider's bed: what the provider did not do is explained there.
    pub async fn eventually<T, F, Fut>(&self, what: &str, timeout: Duration, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        wait_explained(what, timeout, check, || (self.consumer.env)().log_tails()).await
    }

    /// Prints what `kubectl get <claim owners>,ipaddressclaims,ipaddresses` shows in the site's
    /// namespace (docs/contract.md's "Tested with" screen comes from CAPV's).
    pub fn show_kubectl_get(&self) {
        let owners = format!("{}s", self.consumer.claim_owner.to_lowercase());
        print_kubectl_get(
            (self.consumer.env)().kubeconfig(),
            &format!(
                "{owners},ipaddressclaims.ipam.cluster.x-k8s.io,ipaddresses.ipam.cluster.x-k8s.io"
            ),
            &format!("{owners},ipaddressclaims,ipaddresses"),
            &self.ns,
        );
    }
}

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
