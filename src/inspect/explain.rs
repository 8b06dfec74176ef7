//! [`why`] a claim waits, from the API alone: its `Ready` condition, its pool (paused, unusable,
//! full, and the claim's place in its queue), its Cluster's pause, its own pause, and its
//! pre-allocated address.
use std::collections::HashSet;
use std::net::IpAddr;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::rows::{ClaimRow, PoolRow};
use super::snapshot::Snapshot;
use super::subnets::{subnet_counts, subnet_named};
use crate::allocator::{ParsedPool, ParsedSpec};
use crate::api::kinds::WithPoolType;
use crate::api::{
    Cluster, IPAddress, IPAddressClaim, IPPool, InClusterIPPoolSpec, PAUSED_ANNOTATION, PoolKey,
    PoolSpecRef,
};
use crate::controllers::parse_pool;

/// What a claim is waiting for, from the API alone.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Why {
    pub claim: ClaimRow,
    /// The pool the claim names, if it exists.
    pub pool: Option<PoolRow>,
    /// `true` when the pool carries the paused annotation.
    pub pool_paused: bool,
    /// The address the pool's `spec.preAllocations` names for the claim, if any.
    pub pre_allocated: Option<String>,
    /// When the pool spans several subnets: the subnet of the address the claim holds (else of
    /// its pre-allocated address), see [`subnet_named`].
    pub subnet: Option<String>,
    /// The claim's Cluster, if it names one: (name, exists, paused).
    pub cluster: Option<(String, bool, bool)>,
    /// `true` when the claim carries the paused annotation.
    pub claim_paused: bool,
    /// What to look at, in order.
    pub findings: Vec<String>,
}

/// Explains one claim: its `Ready` condition, its pool, its Cluster's pause, its queue place.
pub async fn why(client: &Client, namespace: &str, name: &str) -> anyhow::Result<Why> {
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), namespace);
    let claim = claims
        .get_opt(name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("IPAddressClaim {namespace}/{name} not found"))?;
    let snapshot = Snapshot::fetch(client, Some(namespace)).await?;
    let row = snapshot
        .claims
        .iter()
        .find(|c| c.name == name)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("IPAddressClaim {namespace}/{name} vanished"))?;
    let pool_ref = &claim.spec.pool_ref;
    let pool = snapshot
        .pools
        .iter()
        .find(|p| {
            p.kind == pool_ref.kind
                && p.name == pool_ref.name
                && (p.namespace.is_none() || p.namespace.as_deref() == Some(namespace))
        })
        .cloned();
    let served = PoolKey::from_ref(pool_ref, namespace);
    let name = &pool_ref.name;
    let fetched = match &served {
        Some(key) => {
            key.kind
                .with_type(PoolOfKind {
                    client: client.clone(),
                    namespace: namespace.to_string(),
                    name: name.clone(),
                })
                .await?
        }
        None => None,
    };
    let pool_paused = fetched.as_ref().is_some_and(|pool| pool.paused);
    let cluster = match claim.cluster_name() {
        None => None,
        Some(cluster_name) => {
            let found = Api::<Cluster>::namespaced(client.clone(), namespace)
                .get_opt(cluster_name)
                .await?;
            let paused = found
                .as_ref()
                .is_some_and(|c| c.is_paused() || c.annotations().contains_key(PAUSED_ANNOTATION));
            Some((cluster_name.to_string(), found.is_some(), paused))
        }
    };
    let claim_paused = claim.annotations().contains_key(PAUSED_ANNOTATION);
    let ours = served.is_some();
    let entry_of = |spec: &InClusterIPPoolSpec, claim_namespace: &str| {
        spec.pre_allocations
            .iter()
            .flatten()
            .find(|e| e.claim_name == claim.name_any() && e.claim_namespace == claim_namespace)
            .map(|e| e.address.clone())
    };
    // An IP pool's spec, and the namespace its entries give their claims: a namespaced pool's
    // entries leave it out, a global pool's name the claim's.
    let (ip_pool, parsed) = match fetched.and_then(|pool| pool.ip_spec) {
        Some((spec, parsed)) => {
            let namespaced = served.as_ref().is_some_and(|key| key.kind.is_namespaced());
            (
                Some((spec, if namespaced { "" } else { namespace })),
                parsed,
            )
        }
        None => (None, None),
    };
    let pre_allocated = ip_pool
        .as_ref()
        .and_then(|(spec, claim_namespace)| entry_of(spec, claim_namespace));
    let held_ip = row
        .address
        .as_deref()
        .and_then(|a| a.split('/').next())
        .and_then(|a| a.parse::<IpAddr>().ok());
    let subnet = parsed.as_ref().and_then(|parsed| {
        let ip = held_ip.or_else(|| pre_allocated.as_deref()?.parse().ok())?;
        subnet_named(parsed, ip)
    });

    let mut findings = Vec::new();
    if !ours {
        findings.push(format!(
            "the claim names a {} of group {}, which inpool does not serve: another provider's claim",
            pool_ref.kind, pool_ref.api_group
        ));
    }
    if claim_paused {
        findings.push(format!(
            "the claim carries {PAUSED_ANNOTATION}: inpool leaves it alone until it is removed"
        ));
    }
    if let Some((cluster_name, exists, paused)) = &cluster {
        if !exists {
            findings.push(format!(
                "its Cluster {cluster_name} does not exist in {namespace}: inpool waits for it"
            ));
        } else if *paused {
            findings.push(format!(
                "its Cluster {cluster_name} is paused (spec.paused or {PAUSED_ANNOTATION})"
            ));
        }
    }
    match &pool {
        None if ours => findings.push(format!(
            "its pool {} {} does not exist",
            pool_ref.kind, pool_ref.name
        )),
        Some(p) => {
            if pool_paused {
                findings.push(format!(
                    "its pool {} carries {PAUSED_ANNOTATION}",
                    pool_ref.name
                ));
            }
            if let Some(problem) = &p.problem {
                findings.push(format!("its pool {} is not usable: {problem}", p.name));
            }
            if row.is_waiting() {
                findings.push(format!(
                    "its pool has {} free and {} claims waiting; this claim is number {} in the queue",
                    p.free.map_or("?".into(), |f| f.to_string()),
                    p.waiting,
                    row.position.map_or("?".into(), |n| n.to_string()),
                ));
                if let Some(parsed) = parsed.as_ref().filter(|p| p.networks().len() > 1) {
                    let used = addresses_in_use(client, parsed).await?;
                    if let Some(counts) = subnet_counts(parsed, &used) {
                        findings.push(format!("its pool's subnets: {counts}"));
                    }
                }
            }
        }
        None => {}
    }
    if let Some(entry) = &pre_allocated {
        let held = row
            .address
            .as_deref()
            .map(|a| a.split('/').next().unwrap_or(a));
        let same = |held: &str| held.parse::<IpAddr>().ok() == entry.parse::<IpAddr>().ok();
        match held {
            Some(held) if !same(held) => findings.push(format!(
                "its pool's spec.preAllocations names {entry} for it, but it holds {held}: the entry changed after the address was allocated; the claim keeps {held} until it is released"
            )),
            Some(_) => {}
            None => findings.push(format!(
                "its pool's spec.preAllocations names {entry}{} for it, and no other claim gets that address; now: {}: {}",
                subnet.as_ref().map_or(String::new(), |s| format!(" (of {s})")),
                row.reason,
                row.message
            )),
        }
    }
    if row.ready == "-"
        && ours
        && !claim_paused
        && !cluster.as_ref().is_some_and(|c| c.2)
        && !pool_paused
    {
        findings.push("inpool has not written a Ready condition yet: is it running?".into());
    }
    if findings.is_empty() {
        findings.push(match row.ready.as_str() {
            "True" => format!(
                "nothing: the claim holds {}{}{}",
                row.address.clone().unwrap_or_default(),
                subnet
                    .as_ref()
                    .map_or(String::new(), |s| format!(" from its pool's subnet {s}")),
                if pre_allocated.is_some() {
                    ", as its pool's spec.preAllocations names"
                } else {
                    ""
                }
            ),
            _ => format!("{}: {}", row.reason, row.message),
        });
    }
    Ok(Why {
        claim: row,
        pool,
        pool_paused,
        pre_allocated,
        subnet,
        cluster,
        claim_paused,
        findings,
    })
}

/// The addresses in use in `pool`'s range: held by an `IPAddress` of any namespace (of this pool
/// or an overlapping one, as inpool counts them), or pre-allocated by its spec.
async fn addresses_in_use(client: &Client, pool: &ParsedPool) -> anyhow::Result<HashSet<IpAddr>> {
    let addresses = Api::<IPAddress>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    Ok(addresses
        .iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
        .filter_map(|a| a.spec.address.parse::<IpAddr>().ok())
        .chain(pool.pre_allocations().iter().map(|entry| entry.ip))
        .filter(|ip| pool.allocatable().contains(*ip))
        .collect())
}

/// What [`why`] reads of the claim's pool: whether it is paused, and an IP pool's spec, with
/// how inpool reads it (with the subnets carved from a parent; `None` when it hands out nothing).
struct FetchedPool {
    paused: bool,
    ip_spec: Option<(InClusterIPPoolSpec, Option<ParsedPool>)>,
}

/// The pool `name` of one kind, as a claim of `namespace` names it (`None`: it does not exist).
struct PoolOfKind {
    client: Client,
    namespace: String,
    name: String,
}

impl WithPoolType for PoolOfKind {
    type Output = BoxFuture<'static, kube::Result<Option<FetchedPool>>>;

    fn with<P: IPPool>(self) -> Self::Output {
        async move {
            let pool = P::api(self.client, Some(&self.namespace))
                .get_opt(&self.name)
                .await?;
            Ok(pool.map(|pool| {
                let parsed = parse_pool(
                    pool.spec_of(),
                    pool.pool_status(),
                    pool.meta().namespace.as_deref(),
                );
                FetchedPool {
                    paused: pool.annotations().contains_key(PAUSED_ANNOTATION),
                    ip_spec: match (pool.spec_of(), parsed) {
                        (PoolSpecRef::Addresses(spec), Ok(ParsedSpec::Addresses(parsed))) => {
                            Some((spec.clone(), Some(parsed)))
                        }
                        (PoolSpecRef::Addresses(spec), _) => Some((spec.clone(), None)),
                        (PoolSpecRef::Prefixes(_), _) => None,
                    },
                }
            }))
        }
        .boxed()
    }
}
