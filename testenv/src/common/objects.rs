//! Builders for the objects the tests write, and `create`.

use inpool::api::{
    Cluster, GlobalInClusterIPPool, GlobalInClusterIPPoolSpec, IPAddressClaim, IPAddressClaimSpec,
    IPPoolReference, InClusterIPPool, InClusterIPPoolSpec, InClusterPrefixPool,
};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};

pub const GROUP: &str = "ipam.cluster.x-k8s.io";

pub fn pool(name: &str, addresses: &[&str], prefix: i32, gateway: Option<&str>) -> InClusterIPPool {
    let mut spec = InClusterIPPoolSpec::new(addresses.iter().copied(), prefix);
    spec.gateway = gateway.map(str::to_string);
    InClusterIPPool::new(name, spec)
}

pub fn global_pool(name: &str, addresses: &[&str], prefix: i32) -> GlobalInClusterIPPool {
    GlobalInClusterIPPool::new(
        name,
        GlobalInClusterIPPoolSpec(InClusterIPPoolSpec::new(addresses.iter().copied(), prefix)),
    )
}

/// An `InClusterPrefixPool` `name` handing out sub-prefixes of `length` from `prefixes`: the
/// parent of the pools [`carved_pool`] makes.
pub fn parent_prefix_pool(name: &str, prefixes: &[&str], length: i64) -> InClusterPrefixPool {
    typed(serde_json::json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterPrefixPool",
        "metadata": {"name": name},
        "spec": {"prefixes": prefixes, "allocationPrefixLength": length},
    }))
}

/// The `spec` of a pool carved from the `InClusterPrefixPool` `parent` of its namespace:
/// `sub_prefixes` of it.
pub fn carved_spec(parent: &str, sub_prefixes: i64) -> serde_json::Value {
    serde_json::json!({"parentPool": {
        "poolRef": {"apiGroup": GROUP, "kind": "InClusterPrefixPool", "name": parent},
        "subPrefixes": sub_prefixes,
    }})
}

/// An `InClusterIPPool` `name` carved from the `InClusterPrefixPool` `parent` of its namespace.
pub fn carved_pool(name: &str, parent: &str, sub_prefixes: i64) -> InClusterIPPool {
    typed(serde_json::json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "metadata": {"name": name}, "spec": carved_spec(parent, sub_prefixes),
    }))
}

/// A claim on the `InClusterIPPool` `pool` of its namespace.
pub fn claim(name: &str, pool: &str) -> IPAddressClaim {
    claim_on(name, IPPoolReference::new(GROUP, "InClusterIPPool", pool))
}

/// A claim on the `GlobalInClusterIPPool` `pool`.
pub fn global_claim(name: &str, pool: &str) -> IPAddressClaim {
    claim_on(
        name,
        IPPoolReference::new(GROUP, "GlobalInClusterIPPool", pool),
    )
}

/// A claim on the `InClusterPrefixPool` `pool` of its namespace.
pub fn prefix_claim(name: &str, pool: &str) -> IPAddressClaim {
    claim_on(
        name,
        IPPoolReference::new(GROUP, "InClusterPrefixPool", pool),
    )
}

/// A claim on the `GlobalInClusterPrefixPool` `pool`.
pub fn global_prefix_claim(name: &str, pool: &str) -> IPAddressClaim {
    claim_on(
        name,
        IPPoolReference::new(GROUP, "GlobalInClusterPrefixPool", pool),
    )
}

pub fn claim_on(name: &str, pool_ref: IPPoolReference) -> IPAddressClaim {
    IPAddressClaim::new(
        name,
        IPAddressClaimSpec {
            cluster_name: None,
            pool_ref,
        },
    )
}

/// `claim`, belonging to the Cluster `cluster` (`spec.clusterName`).
pub fn of_cluster(mut claim: IPAddressClaim, cluster: &str) -> IPAddressClaim {
    claim.spec.cluster_name = Some(cluster.to_string());
    claim
}

/// A Cluster that CAPI's webhooks admit (they require a reference to its infrastructure; the
/// referenced object need not exist).
pub fn cluster(name: &str, paused: bool) -> Cluster {
    typed(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {
            "paused": paused,
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                  "kind": "VSphereCluster", "name": name},
        },
    }))
}

/// An object from its JSON literal.
pub fn typed<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).expect("a valid object")
}

/// A name no other test run uses (for cluster-scoped objects such as global pools and leases).
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    )
}

pub async fn create<K>(api: &Api<K>, object: &K) -> K
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.create(&PostParams::default(), object)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", object.name_any()))
}

/// Merge-patches the object `name` with `patch`, as `kubectl patch --type=merge` does (how a
/// user edits a pool); panics naming the object if the API server refuses it.
pub async fn merge_patch<K>(api: &Api<K>, name: &str, patch: serde_json::Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("merge-patching {name}: {e}"))
}

/// Creates `n` claims quickly; names sort in creation order.
pub async fn create_claims(claims: &Api<IPAddressClaim>, pool: &str, n: usize) {
    let mut tasks = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(n.div_ceil(8)) {
        let claims = claims.clone();
        let names: Vec<String> = chunk.iter().map(|i| format!("c-{i:04}")).collect();
        let pool = pool.to_string();
        tasks.push(tokio::spawn(async move {
            for name in names {
                create(&claims, &claim(&name, &pool)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}
