//! One row each: a pool's (counts from its status, else counted here from its spec and the
//! `IPAddress`es; its waiting and realised claims; its conditions) and a claim's (its `Ready`
//! condition, its address, its place in its pool's queue, as inpool's registry orders it).
use std::collections::BTreeMap;
use std::net::IpAddr;

use kube::ResourceExt;
use serde::Serialize;

use crate::allocator::{AnyAllocator, ParsedSpec};
use crate::api::ObjectKey;
use crate::api::{
    IPAM_GROUP, IPAddress, IPAddressClaim, IPPool, IPPoolReference, PoolKey, READY_CONDITION,
    REASON_ADDRESS_ALLOCATED, REASON_POOL_EXHAUSTED, find_condition,
};
use crate::controllers::state::QueuedClaim;
use crate::controllers::state::Unready;
use crate::controllers::state::facts;

/// One pool, as `kubectl inpool pools` shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    pub kind: &'static str,
    pub namespace: Option<String>,
    pub name: String,
    /// `Kind/name` of the prefix pool it is carved from (`spec.parentPool`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
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
/// Each waiting claim's place in its pool's queue, as inpool's registry orders it
/// ([`facts::queued`]): (namespace, name) → position from 1.
pub(super) fn queue_positions(claims: &[IPAddressClaim]) -> BTreeMap<(String, String), usize> {
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

pub(super) fn claim_row(
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
pub(super) fn pool_row<P: IPPool>(
    pool: &P,
    addresses: &[IPAddress],
    claims: &[IPAddressClaim],
) -> PoolRow {
    let kind = P::KIND.name();
    let namespace = pool.namespace();
    let name = pool.name_any();
    let names_pool = |pool_ref: &IPPoolReference, object_namespace: Option<String>| {
        pool_ref.api_group == IPAM_GROUP
            && pool_ref.kind == kind
            && pool_ref.name == name
            && (namespace.is_none() || object_namespace == namespace)
    };
    let parsed = facts::parse_pool(pool.spec_of(), pool.pool_status(), namespace.as_deref());
    let family = match &parsed {
        Ok(ParsedSpec::Addresses(p)) => match p.networks().len() {
            1 => p.family().to_string(),
            subnets => format!("{} ({subnets} subnets)", p.family()),
        },
        // A prefix pool: its family, in sub-prefixes of its allocation length.
        Ok(ParsedSpec::Prefixes(p)) => format!("{}/{}", p.family(), p.allocation_prefix_length()),
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
                Err(Unready::Carving(parent)) => Err(format!(
                    "no {} yet: waits for a sub-prefix of {parent}",
                    crate::api::carve::carved_noun(P::KIND)
                )),
                Err(Unready::Invalid(errors)) => Err(format!("invalid spec: {errors}")),
                Err(other) => Err(format!("{other:?}")),
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
    let parent = pool
        .spec_of()
        .parent_pool()
        .map(|parent| format!("{}/{}", parent.pool_ref.kind, parent.pool_ref.name));
    PoolRow {
        kind,
        namespace,
        name,
        parent,
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
