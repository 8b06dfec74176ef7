//! Read-only views of inpool's pools and claims, built from the API alone (no access to a running
//! inpool): the demo's live picture and the `kubectl inpool` plugin (`src/bin/kubectl-inpool.rs`)
//! share them.
//!
//! - [`Snapshot`]: every pool (counts, waiting claims, conditions) and every claim (Ready, reason,
//!   message, address, place in its pool's queue), cluster-wide or in one namespace.
//! - [`who_has`]: which claim, `IPAddress` and reservation hold an address.
//! - [`why`]: what a claim is waiting for: its condition, its pool, its Cluster's pause.
//!
//! A waiting claim's place in the queue is computed as inpool's registry orders it: by creation
//! time, then namespace and name (first come, first served).

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::allocator::{
    AddressSet, AnyAllocator, Family, Network, ParsedPool, ParsedSpec, PoolSpecInput, subnet_field,
};
use crate::api::ObjectKey;
use crate::api::{
    Cluster, GlobalInClusterIPPool, GlobalInClusterPrefixPool, IPAM_GROUP, IPAddress,
    IPAddressClaim, IPPool, IPPoolReference, InClusterIPPool, InClusterIPPoolSpec,
    InClusterPrefixPool, PAUSED_ANNOTATION, PoolKey, PoolKind, READY_CONDITION,
    REASON_ADDRESS_ALLOCATED, REASON_POOL_EXHAUSTED, find_condition,
};
use crate::controllers::runtime::api_in;
use crate::controllers::state::QueuedClaim;
use crate::controllers::state::facts;
use crate::controllers::state::reservation::{IPAddressReservation, hold_of};

/// One pool, as `kubectl inpool pools` shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    pub kind: &'static str,
    pub namespace: Option<String>,
    pub name: String,
    pub family: String,
    pub total: Option<i64>,
    pub used: Option<i64>,
    pub free: Option<i64>,
    /// Where the counts come from: the pool's `status` (written by inpool), or counted here from
    /// the spec and the `IPAddress`es when inpool has not written a status yet.
    pub counts_from: &'static str,
    /// Why the counts are missing (an invalid spec).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Claims of the pool waiting for an address (`PoolExhausted`).
    pub waiting: usize,
    /// Claims of the pool that hold an address (`Ready=True`).
    pub realised: usize,
    /// The pool's conditions, `Type=True` or `Type=False (Reason)`.
    pub conditions: String,
}

/// One claim, as `kubectl inpool claims` shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRow {
    pub namespace: String,
    pub name: String,
    /// `Kind/name` of the pool it names.
    pub pool: String,
    pub ready: String,
    pub reason: String,
    pub message: String,
    /// `address/prefix` of its `IPAddress`, when it has one.
    pub address: Option<String>,
    /// Its place in its pool's queue (1 is served first), while it waits.
    pub position: Option<usize>,
}

impl ClaimRow {
    pub fn is_waiting(&self) -> bool {
        self.reason == REASON_POOL_EXHAUSTED
    }
}

/// The objects of a pool kind, or none with a note when the kind is not served (404) or the
/// caller may not list it (403).
async fn list_or_note<K>(
    api: Api<K>,
    lp: &ListParams,
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(lp).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => {
            notes.push(unlisted_note(&K::kind(&()), status.code));
            Ok(Vec::new())
        }
        Err(e) => Err(e.into()),
    }
}

/// The note for a pool kind that could not be listed (`code` 404 or 403).
fn unlisted_note(kind: &str, code: u16) -> String {
    if code == 404 {
        format!(
            "{kind}s are not shown: the API server does not serve the kind (its CRD is not installed)"
        )
    } else {
        format!("{kind}s are not shown: you may not list them (403 Forbidden)")
    }
}

/// Pools and claims at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    pub pools: Vec<PoolRow>,
    pub claims: Vec<ClaimRow>,
    /// What could not be read and was taken as empty (a prefix pool kind whose CRD is not
    /// installed, or that the caller may not list), one sentence each.
    pub notes: Vec<String>,
}

impl Snapshot {
    /// Reads pools, claims and `IPAddress`es: everywhere, or in `namespace` (its namespaced
    /// pools, and the global pools its claims may use).
    pub async fn fetch(client: &Client, namespace: Option<&str>) -> anyhow::Result<Snapshot> {
        let lp = ListParams::default();
        let pools = api_in::<InClusterIPPool>(client, namespace)
            .list(&lp)
            .await?;
        let global_pools = Api::<GlobalInClusterIPPool>::all(client.clone())
            .list(&lp)
            .await?;
        // The prefix kinds came later: a cluster without their CRDs (or a caller without their
        // RBAC) still gets its IP pools, with a note.
        let mut notes = Vec::new();
        let prefix_pools = list_or_note(
            api_in::<InClusterPrefixPool>(client, namespace),
            &lp,
            &mut notes,
        )
        .await?;
        let global_prefix_pools = list_or_note(
            Api::<GlobalInClusterPrefixPool>::all(client.clone()),
            &lp,
            &mut notes,
        )
        .await?;
        // A global pool's queue spans namespaces: it is counted from every claim when the caller
        // may read them all, and the namespace's claims are then taken from that one list; else
        // both come from the namespace's claims.
        let everywhere = Api::<IPAddressClaim>::all(client.clone()).list(&lp).await;
        let (claims, everywhere) = match (namespace, everywhere) {
            (None, everywhere) => (everywhere?.items, None),
            (Some(ns), Ok(everywhere)) => {
                let here = everywhere
                    .items
                    .iter()
                    .filter(|c| c.namespace().as_deref() == Some(ns))
                    .cloned()
                    .collect();
                (here, Some(everywhere.items))
            }
            (Some(_), Err(_)) => (
                api_in::<IPAddressClaim>(client, namespace)
                    .list(&lp)
                    .await?
                    .items,
                None,
            ),
        };
        let queued = everywhere.as_deref().unwrap_or(&claims);
        let addresses = api_in::<IPAddress>(client, namespace)
            .list(&lp)
            .await?
            .items;

        let positions = queue_positions(queued);
        let mut claim_rows: Vec<ClaimRow> = claims
            .iter()
            .map(|claim| claim_row(claim, &addresses, &positions))
            .collect();
        claim_rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

        // A namespaced pool's rows count the namespace's claims, a global pool's every claim.
        let mut pool_rows = Vec::new();
        for pool in &pools.items {
            pool_rows.push(pool_row(pool, &addresses, &claims));
        }
        for pool in &prefix_pools {
            pool_rows.push(pool_row(pool, &addresses, &claims));
        }
        for pool in &global_pools.items {
            pool_rows.push(pool_row(pool, &addresses, queued));
        }
        for pool in &global_prefix_pools {
            pool_rows.push(pool_row(pool, &addresses, queued));
        }
        Ok(Snapshot {
            pools: pool_rows,
            claims: claim_rows,
            notes,
        })
    }

    /// Every claim has a Ready condition, each is realised or waiting for an address, and the
    /// pools' counts agree with the claims.
    pub fn settled(&self) -> bool {
        !self.claims.is_empty()
            && self.claims.iter().all(|c| {
                c.reason == REASON_ADDRESS_ALLOCATED
                    || (c.ready == "False" && c.reason == REASON_POOL_EXHAUSTED)
            })
            && self.pools_agree()
    }

    /// Every claim is Ready and the pools' counts agree with the claims.
    pub fn all_ready(&self) -> bool {
        !self.claims.is_empty()
            && self
                .claims
                .iter()
                .all(|c| c.ready == "True" && c.reason == REASON_ADDRESS_ALLOCATED)
            && self.pools_agree()
    }

    /// Each pool counts as used exactly the addresses of its realised claims (its status, written
    /// by inpool's pool controller, may lag a moment behind the claims).
    pub fn pools_agree(&self) -> bool {
        self.pools.iter().all(|p| match p.used {
            Some(used) => usize::try_from(used).is_ok_and(|u| u == p.realised),
            None => true,
        })
    }

    /// (claims Ready, claims PoolExhausted)
    pub fn tally(&self) -> (usize, usize) {
        let ready = self.claims.iter().filter(|c| c.ready == "True").count();
        let exhausted = self.claims.iter().filter(|c| c.is_waiting()).count();
        (ready, exhausted)
    }

    /// The pools as a table.
    pub fn pools_table(&self) -> String {
        let dash = |n: Option<i64>| n.map_or("-".to_string(), |n| n.to_string());
        let rows: Vec<Vec<String>> = self
            .pools
            .iter()
            .map(|p| {
                let conditions = match &p.problem {
                    Some(problem) => format!("{} ({problem})", p.conditions),
                    None => p.conditions.clone(),
                };
                vec![
                    p.kind.to_string(),
                    p.namespace.clone().unwrap_or_else(|| "-".into()),
                    p.name.clone(),
                    p.family.clone(),
                    dash(p.total),
                    dash(p.used),
                    dash(p.free),
                    p.waiting.to_string(),
                    p.counts_from.to_string(),
                    conditions,
                ]
            })
            .collect();
        table(
            &[
                "KIND",
                "NAMESPACE",
                "NAME",
                "FAMILY",
                "TOTAL",
                "USED",
                "FREE",
                "WAITING",
                "COUNTS FROM",
                "CONDITIONS",
            ],
            &rows,
        )
    }

    /// The claims as a table; with `messages`, the waiting position and the condition's message
    /// too.
    pub fn claims_table(&self, claims: &[&ClaimRow], messages: bool) -> String {
        let rows: Vec<Vec<String>> = claims
            .iter()
            .map(|c| {
                let mut row = vec![
                    c.namespace.clone(),
                    c.name.clone(),
                    c.pool.clone(),
                    c.ready.clone(),
                    c.reason.clone(),
                    c.address.clone().unwrap_or_else(|| "-".into()),
                ];
                if messages {
                    row.push(c.position.map_or("-".into(), |p| p.to_string()));
                    row.push(c.message.clone());
                }
                row
            })
            .collect();
        let mut headers = vec!["NAMESPACE", "NAME", "POOL", "READY", "REASON", "ADDRESS"];
        if messages {
            headers.extend(["POSITION", "MESSAGE"]);
        }
        table(&headers, &rows)
    }

    /// The demo's picture: pools, then claims.
    pub fn render(&self) -> String {
        let mut out = String::from("POOLS\n");
        out.push_str(&self.pools_table());
        out.push('\n');
        let (ready, exhausted) = self.tally();
        out.push_str(&format!(
            "CLAIMS ({} in all: {ready} Ready, {exhausted} PoolExhausted)\n",
            self.claims.len()
        ));
        let all: Vec<&ClaimRow> = self.claims.iter().collect();
        out.push_str(&self.claims_table(&all, false));
        out
    }
}

/// Each waiting claim's place in its pool's queue, as inpool's registry orders it
/// ([`facts::queued`]): (namespace, name) → position from 1.
fn queue_positions(claims: &[IPAddressClaim]) -> BTreeMap<(String, String), usize> {
    let mut queues: BTreeMap<PoolKey, Vec<QueuedClaim>> = BTreeMap::new();
    for claim in claims.iter().filter(|c| is_waiting(c)) {
        let key = ObjectKey::new(&claim.namespace().unwrap_or_default(), &claim.name_any());
        if let Some(pool) = PoolKey::from_ref(&claim.spec.pool_ref, &key.namespace) {
            queues
                .entry(pool)
                .or_default()
                .push(facts::queued(claim.creation_timestamp().as_ref(), &key));
        }
    }
    let mut positions = BTreeMap::new();
    for mut queue in queues.into_values() {
        queue.sort();
        for (i, queued) in queue.into_iter().enumerate() {
            positions.insert(
                (
                    queued.claim.namespace.to_string(),
                    queued.claim.name.to_string(),
                ),
                i + 1,
            );
        }
    }
    positions
}

/// The claim waits for an address (`PoolExhausted`) and is not being deleted.
fn is_waiting(claim: &IPAddressClaim) -> bool {
    claim.metadata.deletion_timestamp.is_none()
        && find_condition(claim.conditions(), READY_CONDITION)
            .is_some_and(|c| c.reason == REASON_POOL_EXHAUSTED)
}

fn claim_row(
    claim: &IPAddressClaim,
    addresses: &[IPAddress],
    positions: &BTreeMap<(String, String), usize>,
) -> ClaimRow {
    let namespace = claim.namespace().unwrap_or_default();
    let ready = find_condition(claim.conditions(), READY_CONDITION);
    let address = claim.address_ref().map(|name| {
        addresses
            .iter()
            .find(|a| a.namespace().as_deref() == Some(namespace.as_str()) && a.name_any() == name)
            .map(|a| format!("{}/{}", a.spec.address, a.spec.prefix))
            .unwrap_or_else(|| format!("{name}?"))
    });
    let pool_ref = &claim.spec.pool_ref;
    let position = positions
        .get(&(namespace.clone(), claim.name_any()))
        .copied();
    ClaimRow {
        name: claim.name_any(),
        pool: format!("{}/{}", pool_ref.kind, pool_ref.name),
        ready: ready.map_or("-".to_string(), |c| c.status.clone()),
        reason: ready.map_or("-".to_string(), |c| c.reason.clone()),
        message: ready.map_or(String::new(), |c| c.message.clone()),
        address,
        position,
        namespace,
    }
}

/// A pool's row: counts from `status.ipAddresses` when the pool controller has written them,
/// else counted here from the spec and the `IPAddress`es that name the pool.
fn pool_row<P: IPPool>(pool: &P, addresses: &[IPAddress], claims: &[IPAddressClaim]) -> PoolRow {
    let kind = P::KIND.name();
    let namespace = pool.namespace();
    let name = pool.name_any();
    let names_pool = |pool_ref: &IPPoolReference, object_namespace: Option<String>| {
        pool_ref.api_group == IPAM_GROUP
            && pool_ref.kind == kind
            && pool_ref.name == name
            && (namespace.is_none() || object_namespace == namespace)
    };
    let parsed = facts::parse_spec(pool.spec_of());
    let family = match &parsed {
        Ok(ParsedSpec::Addresses(p)) => {
            let family = if p.family() == Family::V4 {
                "IPv4"
            } else {
                "IPv6"
            };
            match p.networks().len() {
                1 => family.to_string(),
                subnets => format!("{family} ({subnets} subnets)"),
            }
        }
        // A prefix pool: IPv6, in sub-prefixes of its allocation length.
        Ok(ParsedSpec::Prefixes(p)) => format!("IPv6/{}", p.allocation_prefix_length()),
        Err(_) => "?".to_string(),
    };
    let status = pool.pool_status();
    let (counts, counts_from) = match status.and_then(|s| s.ip_addresses) {
        Some(c) => (Ok((c.total, c.used, c.free)), "status"),
        None => {
            let counted = match parsed {
                Ok(parsed) => {
                    let mut allocator = AnyAllocator::new(parsed);
                    for a in addresses {
                        if names_pool(&a.spec.pool_ref, a.namespace())
                            && a.metadata.deletion_timestamp.is_none()
                            && let Ok(ip) = a.spec.address.parse::<IpAddr>()
                        {
                            allocator.mark_used(ip);
                        }
                    }
                    let c = allocator.counts().to_status();
                    Ok((c.total, c.used, c.free))
                }
                Err(e) => Err(format!("invalid spec: {e}")),
            };
            (counted, "IPAddresses")
        }
    };
    let of_pool: Vec<&IPAddressClaim> = claims
        .iter()
        .filter(|c| names_pool(&c.spec.pool_ref, c.namespace()))
        .collect();
    let waiting = of_pool.iter().filter(|c| is_waiting(c)).count();
    let ready_reasons: Vec<(String, String)> = of_pool
        .iter()
        .filter_map(|c| {
            let ready = find_condition(c.conditions(), READY_CONDITION)?;
            Some((ready.status.clone(), ready.reason.clone()))
        })
        .collect();
    let realised = ready_reasons
        .iter()
        .filter(|(status, reason)| status == "True" && reason == REASON_ADDRESS_ALLOCATED)
        .count();
    let conditions = status
        .and_then(|s| s.conditions.as_ref())
        .filter(|c| !c.is_empty())
        .map(|list| {
            list.iter()
                .map(|c| {
                    if c.status == "True" {
                        format!("{}=True", c.type_)
                    } else {
                        format!("{}={} ({})", c.type_, c.status, c.reason)
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|| "(none yet)".to_string());
    let (total, used, free, problem) = match counts {
        Ok((total, used, free)) => (Some(total), Some(used), Some(free), None),
        Err(problem) => (None, None, None, Some(problem)),
    };
    PoolRow {
        kind,
        namespace,
        name,
        family,
        total,
        used,
        free,
        counts_from,
        problem,
        waiting,
        realised,
        conditions,
    }
}

/// Plain-text columns, left-aligned, two spaces apart.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        text.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    if rows.is_empty() {
        out.push_str("(none)\n");
    }
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

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

/// Every IP pool of both kinds.
async fn ip_pools(client: &Client) -> anyhow::Result<Vec<IpPoolSpec>> {
    let lp = ListParams::default();
    let namespaced = Api::<InClusterIPPool>::all(client.clone())
        .list(&lp)
        .await?;
    let global = Api::<GlobalInClusterIPPool>::all(client.clone())
        .list(&lp)
        .await?;
    Ok(namespaced
        .items
        .into_iter()
        .map(|pool| IpPoolSpec {
            pool: format!("InClusterIPPool/{}", pool.name_any()),
            namespace: pool.namespace(),
            spec: pool.spec,
        })
        .chain(global.items.into_iter().map(|pool| IpPoolSpec {
            pool: format!("GlobalInClusterIPPool/{}", pool.name_any()),
            namespace: None,
            spec: pool.spec.0,
        }))
        .collect())
}

/// The subnet of `pool` that `ip` lies in, as `kubectl inpool` names it when the pool spans
/// several: `spec.additionalSubnets[0] (10.41.0.0/26, gateway 10.41.0.1)`, the pool's own
/// subnet as `spec.addresses (…)`. `None` for a pool of one subnet (its fields say it all), or an
/// address in none of the subnets.
pub fn subnet_named(pool: &ParsedPool, ip: IpAddr) -> Option<String> {
    if pool.networks().len() < 2 {
        return None;
    }
    let index = pool.subnet_index_of(ip)?;
    Some(describe_subnet(index, &pool.networks()[index]))
}

/// `spec.additionalSubnets[0] (10.41.0.0/26, gateway 10.41.0.1)`.
fn describe_subnet(index: usize, network: &Network) -> String {
    let gateway = network
        .gateway
        .map_or("no gateway".to_string(), |g| format!("gateway {g}"));
    format!("{} ({}, {gateway})", subnet_field(index), network.subnet)
}

/// Each subnet of a pool that spans several, with how many of its addresses are in use:
/// `spec.additionalSubnets[0] (10.41.0.0/26, gateway 10.41.0.1): 2 of 11 in use`. An address
/// is in use when `used` holds it (held by any `IPAddress`, or pre-allocated). `None` for a pool
/// of one subnet.
pub fn subnet_counts(pool: &ParsedPool, used: &HashSet<IpAddr>) -> Option<String> {
    if pool.networks().len() < 2 {
        return None;
    }
    let family = pool.family();
    let counts: Vec<String> = pool
        .networks()
        .iter()
        .enumerate()
        .map(|(index, network)| {
            let range = network.subnet.range();
            let handed_out = AddressSet::from_ranges(family, [range])
                .map(|subnet| pool.allocatable().intersection(&subnet))
                .unwrap_or_else(|_| AddressSet::empty(family));
            let in_use = used.iter().filter(|ip| handed_out.contains(**ip)).count();
            format!(
                "{}: {in_use} of {} in use",
                describe_subnet(index, network),
                handed_out.len()
            )
        })
        .collect();
    Some(counts.join("; "))
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
    // The subnet, from the pool's spec as it is now; a row without an `IPAddress` (a
    // pre-allocation not yet taken) gets the prefix and gateway its address will carry.
    for holder in holders.values_mut() {
        let Some(parsed) = pools
            .iter()
            .find(|p| p.is(&holder.pool, &holder.namespace))
            .and_then(|p| PoolSpecInput::from(&p.spec).parse().ok())
        else {
            continue;
        };
        let ip = holder.address.parse().unwrap_or(address);
        holder.subnet = subnet_named(&parsed, ip);
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
        let Ok(parsed) = PoolSpecInput::from(&pool.spec).parse() else {
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
                && let Some(subnet) = subnet_named(&parsed, ip)
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
    let pool_paused = match served.as_ref().map(|key| key.kind) {
        Some(PoolKind::InCluster) => {
            is_paused(api_in::<InClusterIPPool>(client, Some(namespace)), name).await?
        }
        Some(PoolKind::Global) => {
            is_paused(Api::<GlobalInClusterIPPool>::all(client.clone()), name).await?
        }
        Some(PoolKind::InClusterPrefix) => {
            is_paused(api_in::<InClusterPrefixPool>(client, Some(namespace)), name).await?
        }
        Some(PoolKind::GlobalPrefix) => {
            is_paused(Api::<GlobalInClusterPrefixPool>::all(client.clone()), name).await?
        }
        None => false,
    };
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
    let entry_of = |spec: &crate::api::InClusterIPPoolSpec, claim_namespace: &str| {
        spec.pre_allocations
            .iter()
            .flatten()
            .find(|e| e.claim_name == claim.name_any() && e.claim_namespace == claim_namespace)
            .map(|e| e.address.clone())
    };
    // An IP pool's spec, and the namespace its entries give their claims.
    let ip_pool = match served.as_ref().map(|key| key.kind) {
        Some(PoolKind::InCluster) => api_in::<InClusterIPPool>(client, Some(namespace))
            .get_opt(name)
            .await?
            .map(|p| (p.spec, "")),
        Some(PoolKind::Global) => Api::<GlobalInClusterIPPool>::all(client.clone())
            .get_opt(name)
            .await?
            .map(|p| (p.spec.0, namespace)),
        _ => None,
    };
    let pre_allocated = ip_pool
        .as_ref()
        .and_then(|(spec, claim_namespace)| entry_of(spec, claim_namespace));
    let parsed = ip_pool
        .as_ref()
        .and_then(|(spec, _)| PoolSpecInput::from(spec).parse().ok());
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

/// Whether the pool `name` exists and carries the paused annotation.
async fn is_paused<K>(api: Api<K>, name: &str) -> kube::Result<bool>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .get_opt(name)
        .await?
        .is_some_and(|p| p.annotations().contains_key(PAUSED_ANNOTATION)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_kind_that_cannot_be_listed_gets_a_note_saying_why() {
        assert_eq!(
            unlisted_note("InClusterPrefixPool", 404),
            "InClusterPrefixPools are not shown: the API server does not serve the kind (its CRD is not installed)"
        );
        assert!(unlisted_note("GlobalInClusterPrefixPool", 403).contains("403 Forbidden"));
    }

    /// `100.96.32.1-2/22` (gateway .254) and `100.90.254.1-2/23` (gateway .254), with an entry
    /// for `vm` at 100.90.254.2.
    fn two_subnets() -> ParsedPool {
        crate::allocator::PoolSpecInput {
            addresses: vec!["100.96.32.1-100.96.32.2".into()],
            prefix: 22,
            gateway: Some("100.96.32.254".into()),
            additional_subnets: vec![crate::allocator::SubnetInput {
                addresses: vec!["100.90.254.1-100.90.254.2".into()],
                prefix: 23,
                gateway: Some("100.90.254.254".into()),
            }],
            pre_allocations: vec![crate::allocator::PreAllocationInput {
                claim_name: "vm".into(),
                address: "100.90.254.2".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
        .parse()
        .expect("valid spec")
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_address_of_a_pool_of_several_subnets_is_named_by_its_subnet() {
        let pool = two_subnets();
        assert_eq!(
            subnet_named(&pool, ip("100.90.254.1")).as_deref(),
            Some("spec.additionalSubnets[0] (100.90.254.0/23, gateway 100.90.254.254)")
        );
        assert_eq!(
            subnet_named(&pool, ip("100.96.32.2")).as_deref(),
            Some("spec.addresses (100.96.32.0/22, gateway 100.96.32.254)")
        );
        assert_eq!(subnet_named(&pool, ip("10.0.0.1")), None, "in no subnet");
        let single = crate::allocator::PoolSpecInput {
            addresses: vec!["10.0.0.10".into()],
            prefix: 24,
            ..Default::default()
        }
        .parse()
        .unwrap();
        assert_eq!(
            subnet_named(&single, ip("10.0.0.10")),
            None,
            "one subnet: the flat fields say it all"
        );
        assert_eq!(subnet_counts(&single, &HashSet::new()), None);
    }

    #[test]
    fn the_counts_of_each_subnet_add_held_and_pre_allocated_addresses() {
        let pool = two_subnets();
        // Held: 100.96.32.1 and one address outside the pool; pre-allocated: 100.90.254.2.
        let used: HashSet<IpAddr> = [ip("100.96.32.1"), ip("10.0.0.1"), ip("100.90.254.2")].into();
        assert_eq!(
            subnet_counts(&pool, &used).as_deref(),
            Some(
                "spec.addresses (100.96.32.0/22, gateway 100.96.32.254): 1 of 2 in use; \
                 spec.additionalSubnets[0] (100.90.254.0/23, gateway 100.90.254.254): 1 of 2 in use"
            )
        );
    }

    #[test]
    fn tables_align_their_columns() {
        let text = table(
            &["A", "LONGER"],
            &[
                vec!["wide cell".into(), "x".into()],
                vec!["y".into(), "z".into()],
            ],
        );
        assert_eq!(text, "A          LONGER\nwide cell  x\ny          z\n");
    }
}
