//! Who holds an address ([`who_has`]): the `IPAddress`es and reservations of it or of a
//! sub-prefix containing it, and the IP pools' `spec.preAllocations` entries naming it; and,
//! for the demo, what the IP pools' pre-allocations and additional subnets did.
use std::collections::BTreeMap;
use std::net::IpAddr;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::subnets::subnet_named;
use crate::allocator::{ParsedPool, ParsedSpec};
use crate::api::kinds::WithPoolType;
use crate::api::{IPAddress, IPPool, InClusterIPPoolSpec, PoolKind, PoolSpecRef};
use crate::controllers::parse_pool;
use crate::controllers::state::facts;
use crate::controllers::state::reservation::{IPAddressReservation, hold_of};

/// One holder of an address: an `IPAddress` (with its claim) and/or the reservation that makes it
/// unique.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// The address held: the one asked about, or the first address of a sub-prefix that
    /// contains it.
    pub address: String,
    /// `Kind/name` of the pool.
    pub pool: String,
    /// The claim's namespace.
    pub namespace: String,
    pub claim: String,
    /// The `IPAddress` object's name, if one exists.
    pub ip_address: Option<String>,
    /// The `IPAddress`'s prefix length and gateway (on a row without one, those of the
    /// address's subnet in the pool's spec).
    pub prefix: Option<i32>,
    pub gateway: Option<String>,
    /// The subnet of the pool the address lies in, when the pool spans several
    /// (`spec.additionalSubnets`): see [`subnet_named`].
    pub subnet: Option<String>,
    /// When the `IPAddress` (else the reservation) was created.
    pub since: Option<String>,
    /// The reservation's name, if one exists.
    pub reservation: Option<String>,
    /// The reservation is kept after release until this time (the pool's reuse grace period).
    pub released_until: Option<String>,
    /// The pool's `spec.preAllocations` names this address for this claim (a row with no
    /// `IPAddress` and no reservation: the claim has not taken it yet, and no other claim can).
    pub pre_allocated: bool,
}

/// One IP pool of either kind, as `who-has` needs it.
struct IpPoolSpec {
    /// `Kind/name`, as a [`Holder`] names its pool.
    pool: String,
    /// The pool's namespace; `None` for a global pool.
    namespace: Option<String>,
    spec: InClusterIPPoolSpec,
    /// The spec as inpool reads it, with the subnets carved from a parent
    /// (`status.carvedPrefixes`); `None` when it cannot hand out addresses.
    parsed: Option<ParsedPool>,
}

impl IpPoolSpec {
    /// Whether this is the pool `pool` (`Kind/name`) as a claim of `claim_namespace` names it.
    fn is(&self, pool: &str, claim_namespace: &str) -> bool {
        self.pool == pool
            && self
                .namespace
                .as_deref()
                .is_none_or(|namespace| namespace == claim_namespace)
    }

    /// Every `spec.preAllocations` entry that names `address`: (claim namespace, claim name).
    fn pre_allocations_of(&self, address: IpAddr) -> Vec<(String, String)> {
        self.spec
            .pre_allocations
            .iter()
            .flatten()
            .filter(|entry| entry.address.parse::<IpAddr>().ok() == Some(address))
            .map(|entry| {
                let claim_namespace = self
                    .namespace
                    .clone()
                    .unwrap_or_else(|| entry.claim_namespace.clone());
                (claim_namespace, entry.claim_name.clone())
            })
            .collect()
    }
}

/// Every IP pool, of every IP pool kind.
async fn ip_pools(client: &Client) -> anyhow::Result<Vec<IpPoolSpec>> {
    let mut pools = Vec::new();
    for kind in PoolKind::ALL.into_iter().filter(|kind| !kind.is_prefix()) {
        pools.extend(kind.with_type(IpPoolsOfKind(client.clone())).await?);
    }
    Ok(pools)
}

/// The pools of one IP pool kind, everywhere.
struct IpPoolsOfKind(Client);

impl WithPoolType for IpPoolsOfKind {
    type Output = BoxFuture<'static, anyhow::Result<Vec<IpPoolSpec>>>;

    fn with<P: IPPool>(self) -> Self::Output {
        async move {
            let pools = P::api(self.0, None).list(&ListParams::default()).await?;
            Ok(pools
                .items
                .into_iter()
                .filter_map(|pool| {
                    let PoolSpecRef::Addresses(spec) = pool.spec_of() else {
                        return None;
                    };
                    let namespace = pool.namespace();
                    let parsed =
                        parse_pool(pool.spec_of(), pool.pool_status(), namespace.as_deref());
                    Some(IpPoolSpec {
                        pool: format!("{}/{}", P::KIND.name(), pool.name_any()),
                        namespace,
                        spec: spec.clone(),
                        parsed: match parsed {
                            Ok(ParsedSpec::Addresses(parsed)) => Some(parsed),
                            _ => None,
                        },
                    })
                })
                .collect())
        }
        .boxed()
    }
}

/// Who holds `address`: every `IPAddress` with that address (in any namespace) and every
/// reservation of it, joined by claim, and every claim an IP pool's `spec.preAllocations`
/// names it for.
pub async fn who_has(client: &Client, address: IpAddr) -> anyhow::Result<Vec<Holder>> {
    let lp = ListParams::default();
    let addresses = Api::<IPAddress>::all(client.clone()).list(&lp).await?.items;
    let reservations = Api::<IPAddressReservation>::all(client.clone())
        .list(&lp)
        .await?
        .items;
    let pools = ip_pools(client).await?;
    let mut holders: BTreeMap<(String, String, String), Holder> = BTreeMap::new();
    // An address is held by the `IPAddress` or reservation of its own, or of a sub-prefix that
    // contains it (a prefix pool's, which may overlap an IP pool).
    for a in addresses
        .iter()
        .filter(|a| facts::address_hold(a).is_some_and(|hold| hold.block().contains(address)))
    {
        let namespace = a.namespace().unwrap_or_default();
        let pool = format!("{}/{}", a.spec.pool_ref.kind, a.spec.pool_ref.name);
        holders.insert(
            (
                namespace.clone(),
                a.spec.claim_ref.name.clone(),
                pool.clone(),
            ),
            Holder {
                address: a.spec.address.clone(),
                pool,
                namespace,
                claim: a.spec.claim_ref.name.clone(),
                ip_address: Some(a.name_any()),
                prefix: Some(a.spec.prefix),
                gateway: a.spec.gateway.clone(),
                subnet: None,
                since: a.creation_timestamp().map(|t| t.0.to_string()),
                reservation: None,
                released_until: None,
                pre_allocated: false,
            },
        );
    }
    for r in reservations
        .iter()
        .filter(|r| hold_of(r).is_some_and(|hold| hold.block().contains(address)))
    {
        let pool = format!("{}/{}", r.spec.pool_kind, r.spec.pool_name);
        let holder = holders
            .entry((
                r.spec.claim_namespace.clone(),
                r.spec.claim_name.clone(),
                pool.clone(),
            ))
            .or_insert_with(|| Holder {
                address: r.spec.address.clone(),
                pool,
                namespace: r.spec.claim_namespace.clone(),
                claim: r.spec.claim_name.clone(),
                ip_address: None,
                prefix: None,
                gateway: None,
                subnet: None,
                since: r.creation_timestamp().map(|t| t.0.to_string()),
                reservation: None,
                released_until: None,
                pre_allocated: false,
            });
        holder.reservation = Some(r.name_any());
        if r.is_released() {
            holder.released_until = r.reusable_after().map(|t| t.to_string());
        }
    }
    for pool in &pools {
        for (namespace, claim) in pool.pre_allocations_of(address) {
            holders
                .entry((namespace.clone(), claim.clone(), pool.pool.clone()))
                .or_insert_with(|| Holder {
                    address: address.to_string(),
                    pool: pool.pool.clone(),
                    namespace,
                    claim,
                    ip_address: None,
                    prefix: None,
                    gateway: None,
                    subnet: None,
                    since: None,
                    reservation: None,
                    released_until: None,
                    pre_allocated: true,
                })
                .pre_allocated = true;
        }
    }
    // The subnet, from the pool's spec and carved subnets as they are now; a row without an `IPAddress` (a
    // pre-allocation not yet taken) gets the prefix and gateway its address will carry.
    for holder in holders.values_mut() {
        let Some(parsed) = pools
            .iter()
            .find(|p| p.is(&holder.pool, &holder.namespace))
            .and_then(|p| p.parsed.as_ref())
        else {
            continue;
        };
        let ip = holder.address.parse().unwrap_or(address);
        holder.subnet = subnet_named(parsed, ip);
        if holder.ip_address.is_none() && parsed.subnet_index_of(ip).is_some() {
            let network = parsed.network_of(ip);
            holder.prefix = Some(i32::from(network.subnet.prefix()));
            holder.gateway = network.gateway.map(|g| g.to_string());
        }
    }
    Ok(holders.into_values().collect())
}

/// What the IP pools' additions did, one sentence each: for every `spec.preAllocations` entry,
/// what its claim holds; for every address handed out of an additional subnet, its prefix and
/// gateway as the `IPAddress` carries them and the subnet they come from. The demo shows them.
pub async fn pre_allocations_and_subnets(client: &Client) -> anyhow::Result<Vec<String>> {
    let pools = ip_pools(client).await?;
    let addresses = Api::<IPAddress>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let network = |a: &IPAddress| {
        let gateway = a
            .spec
            .gateway
            .as_deref()
            .map_or("no gateway".to_string(), |g| format!("gateway {g}"));
        format!("{}/{}, {gateway}", a.spec.address, a.spec.prefix)
    };
    let mut lines = Vec::new();
    for pool in &pools {
        let Some(parsed) = &pool.parsed else {
            continue;
        };
        let named = match &pool.namespace {
            Some(namespace) => format!("{} in {namespace}", pool.pool),
            None => pool.pool.clone(),
        };
        let of_pool: Vec<&IPAddress> = addresses
            .iter()
            .filter(|a| {
                let claim_namespace = a.namespace().unwrap_or_default();
                pool.is(
                    &format!("{}/{}", a.spec.pool_ref.kind, a.spec.pool_ref.name),
                    &claim_namespace,
                )
            })
            .collect();
        for entry in pool.spec.pre_allocations.iter().flatten() {
            let namespace = pool
                .namespace
                .clone()
                .unwrap_or_else(|| entry.claim_namespace.clone());
            let held = of_pool.iter().find(|a| {
                a.spec.claim_ref.name == entry.claim_name
                    && a.namespace().as_deref() == Some(namespace.as_str())
            });
            lines.push(format!(
                "pre-allocation: {named} names {} for claim {namespace}/{}, {}",
                entry.address,
                entry.claim_name,
                held.map_or("which holds nothing yet".to_string(), |a| format!(
                    "which holds {}",
                    network(a)
                ))
            ));
        }
        for a in &of_pool {
            let Ok(ip) = a.spec.address.parse::<IpAddr>() else {
                continue;
            };
            if parsed.subnet_index_of(ip).is_some_and(|index| index > 0)
                && let Some(subnet) = subnet_named(parsed, ip)
            {
                lines.push(format!(
                    "subnet: claim {}/{} holds {} from {subnet} of {named}",
                    a.namespace().unwrap_or_default(),
                    a.spec.claim_ref.name,
                    network(a)
                ));
            }
        }
    }
    Ok(lines)
}
