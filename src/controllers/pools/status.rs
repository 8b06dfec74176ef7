//! The pool status controller: counts and conditions from the registry (no re-listing of
//! addresses), deletion protection, and the metrics gauges of each pool.
//!
//! It is woken for a pool whenever the registry marks it dirty (a hold, an allocation, a queue
//! change, a spec change of an overlapping pool), [`WAKE_DEBOUNCE`] later so that one claim's
//! steps make one reconcile. Status is written only when it changes, at
//! most once per [`MIN_STATUS_INTERVAL`] per pool (a burst of allocations in one pool costs one
//! write a second, never one per address). While more than [`FEW_POOLS`] pools have changed
//! within the last [`MAX_LAG`], a pool writes once [`CLAIMS_PER_WRITE`] claims moved its counts, or once its oldest
//! unpublished change is [`MAX_LAG`] old (see [`StatusPacing`]): status writes scale with the
//! claims realised and the pools, never with wall time, and every pool's status converges within
//! a bounded lag.
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};

use crate::allocator::{Family, canonical};
use crate::api::PoolKey;
use crate::api::conditions::now;
use crate::api::{
    ADDRESSES_AVAILABLE_CONDITION, ADDRESSES_IN_RANGE_CONDITION, FOREIGN_ADDRESSES_CONDITION,
    OVERLAP_CONDITION, PRE_ALLOCATIONS_CONDITION,
};
use crate::api::{CarvedPrefix, IPPool, ObjectKey};
use crate::api::{
    ConditionStatus, DesiredCondition, IPAddressesStatus, InClusterIPPoolStatus, POOL_FINALIZER,
    READY_CONDITION, REASON_POOL_EXHAUSTED, REASON_POOL_NOT_READY, pool_status_patch,
};
use crate::controllers::claims::messages::not_ready_message;
use crate::controllers::context::Context;
use crate::controllers::pools::carve;
use crate::controllers::pools::pacing::{StatusPacing, WAKE_DEBOUNCE};
use crate::controllers::runtime::controller::{Action, Controller, Requests};
use crate::controllers::runtime::error::{self, Error};
use crate::controllers::runtime::events::EventType;
use crate::controllers::runtime::{MANAGER, delete_if_present, finalizers};
use crate::controllers::sources::pool_cache::{PoolView, StatusSeen};
use crate::controllers::sources::pool_kinds::LaneInput;
use crate::controllers::sources::writers::{Foreign, foreign_message};
use crate::controllers::state::reservation::IPAddressReservation;
use crate::controllers::state::{Holder, PreAllocationState, Registry, Unready};

/// How many out-of-range addresses or overlapping pools a message lists.
const LISTED: usize = 10;

/// The pool controller of kind `P`, fed by the kind's watch (the pools it added, changed or
/// listed) and by the registry (wakes: pools whose status may have changed), reading the kind's
/// pool cache. Runs until the run ends.
pub async fn run<P: IPPool>(ctx: &Arc<Context>, input: LaneInput) {
    let LaneInput {
        cache,
        changed,
        wakes,
        ..
    } = input;
    // At most `--concurrency` pool reconciles at once, however many pools there are: each
    // reconcile in progress holds an API connection with its buffers, and with no bound a start
    // with 1,000 pools opened 1,000 of them at once (about 140 KiB of memory per pool, kept).
    Controller::new(
        &P::KIND.name().to_ascii_lowercase(),
        changed.map(Requests::now),
        move |key: &PoolKey| cache.get(key),
    )
    .reconcile_on(wakes)
    .debounce_wakes(WAKE_DEBOUNCE)
    .concurrency(ctx.settings.concurrency)
    .run(reconcile::<P>, error_policy, ctx.clone())
    .await;
}

#[tracing::instrument(skip_all, fields(pool = %pool.key()))]
pub async fn reconcile<P: IPPool>(pool: Arc<PoolView>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconcile("pool");
    let result = reconcile_pool::<P>(&pool, &ctx).await;
    error::settle_named("pool", pool.key().object_name(), &ctx, result)
}

async fn reconcile_pool<P: IPPool>(pool: &PoolView, ctx: &Context) -> Result<Action, Error> {
    let key = pool.key();
    if pool.is_paused() {
        return Ok(Action::await_change());
    }
    let api = P::api(ctx.client.clone(), key.namespace.as_deref());
    let deleting = pool.is_deleting();
    if deleting {
        free_released_addresses(ctx, key).await?;
    }
    if deleting && !ctx.registry().has_own_holds(key) {
        ctx.metrics.forget_pool(key);
        set_finalizer(&api, pool, false).await?;
        return Ok(Action::await_change());
    }
    if !deleting {
        set_finalizer(&api, pool, true).await?;
    }
    publish_pre_allocation_notes(pool, ctx).await;
    let (carved, settled) = match pool.carving() {
        Some(carving) => {
            let carved = carve::carve(pool, carving, ctx).await?;
            (Some(carved.prefixes), !carved.settling)
        }
        None => (None, true),
    };
    let next = match settled {
        true => Action::await_change(),
        false => Action::requeue(carve::RECHECK),
    };
    let status = desired_status(pool, ctx, carved);
    publish_metrics(ctx, key, status.ip_addresses.as_ref());
    if !changed(pool.status(), &status) {
        pacing(ctx).settled(key);
        return Ok(next);
    }
    // A condition that turns (another status or reason) is news, not a count, and so is a
    // sub-prefix carved or let go (the pool's subnets): they go at once.
    let changes =
        if condition_turned(pool.status(), &status) || carved_changed(pool.status(), &status) {
            u64::MAX
        } else {
            claims_changed(pool.status(), &status)
        };
    if let Some(wait) = pacing(ctx).ask(key, changes, Instant::now()) {
        return Ok(Action::requeue(wait));
    }
    api.patch_status(
        &key.name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&pool_status_patch::<P>(&status)),
    )
    .await?;
    pacing(ctx).written(key, Instant::now());
    Ok(next)
}

fn pacing(ctx: &Context) -> std::sync::MutexGuard<'_, StatusPacing> {
    ctx.pool_writes.lock().expect("pool writes lock")
}

pub fn error_policy(pool: Arc<PoolView>, error: &Error, ctx: Arc<Context>) -> Action {
    Action::requeue(error::retry_delay(
        "pool",
        pool.key().object_name(),
        error,
        &ctx,
    ))
}

/// A deleting pool does not wait for the reuse grace period of addresses already released: their
/// reservations go now, so that `ProtectPool` waits only for addresses claims still hold.
async fn free_released_addresses(ctx: &Context, key: &PoolKey) -> Result<(), Error> {
    let released: Vec<String> = ctx
        .registry()
        .reservations_in(key)
        .into_iter()
        .filter(|(_, hold)| hold.holder == Holder::Released)
        .map(|(name, _)| name)
        .collect();
    let api: Api<IPAddressReservation> = Api::all(ctx.client.clone());
    for name in released {
        delete_if_present(&api, &name).await?;
    }
    Ok(())
}

/// Adds or removes `ProtectPool`, guarded by the resourceVersion it was computed from.
async fn set_finalizer<P: IPPool>(
    api: &Api<P>,
    pool: &PoolView,
    present: bool,
) -> Result<(), Error> {
    finalizers::set(
        api,
        &pool.key().name,
        &pool.finalizers(),
        pool.resource_version(),
        POOL_FINALIZER,
        present,
    )
    .await?;
    Ok(())
}

/// The status the pool should have now, with the sub-prefixes it carved (`None` unless it names
/// a parent).
pub fn desired_status(
    pool: &PoolView,
    ctx: &Context,
    carved_prefixes: Option<Vec<CarvedPrefix>>,
) -> InClusterIPPoolStatus {
    let key = pool.key();
    let registry = ctx.registry();
    let counts = registry.counts(key);
    let waiting = registry.waiting(key);
    let overlaps = registry.overlaps(key);
    let out_of_range = registry.out_of_range(key);
    let sub_prefix = registry
        .family(key)
        .zip(registry.network(key))
        .filter(|_| key.kind.is_prefix())
        .map(|(family, (length, _))| (family, length));
    let pre_allocations = registry.pre_allocation_report(key);
    let waits_for_parent = match pool.readiness() {
        Err(Unready::Carving(parent)) => Some(
            pool.carving()
                .and_then(|carving| carve::out_of_view(carving, ctx))
                .unwrap_or_else(|| parent_wait(&registry, parent)),
        ),
        _ => None,
    };
    drop(registry);
    let foreign = ctx.writers.foreign_in(key);

    let generation = pool.generation();
    let (_, units) = units(key);
    let handed_out_from = carved_from(pool, carved_prefixes.as_deref());
    let mut desired = vec![ready_condition(
        pool,
        out_of_range.len(),
        waits_for_parent,
        handed_out_from,
    )];
    if let Some(counts) = &counts {
        desired.push(if counts.free > 0 {
            condition(
                ADDRESSES_AVAILABLE_CONDITION,
                ConditionStatus::True,
                "AddressesAvailable",
                format!("{} of {} {units} are free", counts.free, counts.total),
            )
        } else {
            condition(
                ADDRESSES_AVAILABLE_CONDITION,
                ConditionStatus::False,
                REASON_POOL_EXHAUSTED,
                format!(
                    "all {} {units} are in use; {waiting} claims are waiting for one",
                    counts.total
                ),
            )
        });
        desired.push(overlap_condition(&overlaps));
        desired.push(in_range_condition(key, sub_prefix, &out_of_range));
        if !pre_allocations.is_empty() {
            desired.push(pre_allocations_condition(&pre_allocations));
        }
    }
    desired.push(foreign_condition(&foreign));
    let at = now();
    let conditions = desired
        .into_iter()
        .map(|d| StatusSeen::to_write(pool.status(), d.observed_generation(generation), &at))
        .collect();
    InClusterIPPoolStatus {
        ip_addresses: counts.map(|c| {
            let s = c.to_status();
            IPAddressesStatus {
                total: s.total,
                used: s.used,
                free: s.free,
                out_of_range: s.out_of_range,
            }
        }),
        conditions: Some(conditions),
        carved_prefixes,
    }
}

/// What the pool hands out, singular and plural, for messages.
fn units(key: &PoolKey) -> (&'static str, &'static str) {
    if key.kind.is_prefix() {
        ("sub-prefix", "sub-prefixes")
    } else {
        ("address", "addresses")
    }
}

fn condition(
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: String,
) -> DesiredCondition {
    DesiredCondition::new(type_, status, reason, message)
}

/// Why a pool carved from `parent` has no subnet (prefix) yet: what its claims on the parent wait for.
fn parent_wait(registry: &Registry, parent: &PoolKey) -> String {
    match registry.readiness(parent) {
        Err(Unready::Missing) => format!("{parent} does not exist"),
        Err(unready) => not_ready_message(parent, &unready),
        Ok(()) => match registry.counts(parent) {
            Some(counts) if counts.free == 0 => format!(
                "{parent} has no free sub-prefix: all {} are in use; the pool gets one once the parent grows or releases one",
                counts.total
            ),
            _ => format!("its claims on {parent} are being served"),
        },
    }
}

/// Where a pool carved from a parent hands out from, for its Ready condition:
/// `; carved from InClusterPrefixPool ns/nodes: 10.20.0.0/26, 10.20.0.64/26`. Empty for other
/// pools.
fn carved_from(pool: &PoolView, carved: Option<&[CarvedPrefix]>) -> String {
    match (pool.carving(), carved) {
        (Some(carving), Some(carved)) if !carved.is_empty() => {
            let prefixes: Vec<&str> = carved.iter().map(|c| c.prefix.as_str()).collect();
            format!("; carved from {}: {}", carving.parent, prefixes.join(", "))
        }
        _ => String::new(),
    }
}

fn ready_condition(
    pool: &PoolView,
    out_of_range: usize,
    waits_for_parent: Option<String>,
    handed_out_from: String,
) -> DesiredCondition {
    let key = pool.key();
    match pool.readiness() {
        Err(Unready::Carving(parent)) => condition(
            READY_CONDITION,
            ConditionStatus::False,
            REASON_POOL_NOT_READY,
            format!(
                "{key} has no {} yet: it waits for a sub-prefix of {parent}: {}",
                crate::api::carve::carved_noun(key.kind),
                waits_for_parent.unwrap_or_default()
            ),
        ),
        Ok(()) => condition(
            READY_CONDITION,
            ConditionStatus::True,
            "Ready",
            format!(
                "the spec is valid; {} are handed out{handed_out_from}",
                units(key).1
            ),
        ),
        Err(Unready::Invalid(errors)) => condition(
            READY_CONDITION,
            ConditionStatus::False,
            "InvalidSpec",
            format!("{key} has an invalid spec: {errors}"),
        ),
        Err(Unready::Deleting) => condition(
            READY_CONDITION,
            ConditionStatus::False,
            "Deleting",
            format!(
                "being deleted: no new addresses are handed out; deletion completes once no claim holds an address of the pool{}",
                if out_of_range > 0 {
                    " (including out-of-range ones)"
                } else {
                    ""
                }
            ),
        ),
        Err(Unready::Paused | Unready::Missing) => condition(
            READY_CONDITION,
            ConditionStatus::False,
            "NotReady",
            format!("{key} hands out no addresses now"),
        ),
    }
}

fn overlap_condition(overlaps: &[(PoolKey, crate::allocator::AddrRange)]) -> DesiredCondition {
    if overlaps.is_empty() {
        return condition(
            OVERLAP_CONDITION,
            ConditionStatus::False,
            "NoOverlap",
            "no other pool reachable from the same claims shares an address".to_string(),
        );
    }
    let listed: Vec<String> = overlaps
        .iter()
        .take(LISTED)
        .map(|(other, range)| format!("{other} ({range})"))
        .collect();
    condition(
        OVERLAP_CONDITION,
        ConditionStatus::True,
        "OverlapsOtherPools",
        format!(
            "shares addresses with {}; a shared address is still handed out only once",
            listed.join(", ")
        ),
    )
}

fn foreign_condition(foreign: &[Foreign]) -> DesiredCondition {
    if foreign.is_empty() {
        return condition(
            FOREIGN_ADDRESSES_CONDITION,
            ConditionStatus::False,
            "NoForeignAddresses",
            "no IPAddress of the pool was created by another writer since inpool started"
                .to_string(),
        );
    }
    condition(
        FOREIGN_ADDRESSES_CONDITION,
        ConditionStatus::True,
        "AnotherWriter",
        foreign_message(foreign),
    )
}

fn in_range_condition(
    key: &PoolKey,
    sub_prefix: Option<(Family, u8)>,
    out_of_range: &[(std::net::IpAddr, Holder)],
) -> DesiredCondition {
    if out_of_range.is_empty() {
        return condition(
            ADDRESSES_IN_RANGE_CONDITION,
            ConditionStatus::True,
            "AllAddressesInRange",
            String::new(),
        );
    }
    // A sub-prefix is named by its first address and the allocation length; a record of the
    // other family in a prefix pool (no sub-prefix of it) by its address alone.
    let listed: Vec<String> = out_of_range
        .iter()
        .take(LISTED)
        .map(|(ip, holder)| {
            let length = match sub_prefix {
                Some((family, l)) if Family::of(*ip) == family => format!("/{l}"),
                _ => String::new(),
            };
            format!("{}{length} ({holder})", canonical(*ip))
        })
        .collect();
    let (_, units) = units(key);
    let outside = if key.kind.is_prefix() {
        "outside spec.prefixes or overlapped by spec.excludedPrefixes"
    } else {
        "outside spec.addresses and spec.additionalSubnets"
    };
    condition(
        ADDRESSES_IN_RANGE_CONDITION,
        ConditionStatus::False,
        "AddressesOutOfRange",
        format!(
            "{} allocated {units} are {outside}: {}{}; they stay with their claims until released and are never handed out again",
            out_of_range.len(),
            listed.join(", "),
            if out_of_range.len() > LISTED {
                ", ..."
            } else {
                ""
            }
        ),
    )
}

/// `PreAllocations`: `True` while every entry is realised or waits for its claim; `False` with
/// `PreAllocationDrift` when a claim holds another address than its entry names (the entry was
/// changed or added after the claim was realised; the claim is never moved), else with
/// `PreAllocationConflict` when an entry's address cannot be its claim's now.
fn pre_allocations_condition(
    report: &[(ObjectKey, std::net::IpAddr, PreAllocationState)],
) -> DesiredCondition {
    let realised = report
        .iter()
        .filter(|(_, _, s)| *s == PreAllocationState::Realised)
        .count();
    let drift: Vec<String> = report
        .iter()
        .filter_map(|(claim, ip, state)| match state {
            PreAllocationState::Drift { holds } => Some(format!(
                "claim {claim} holds {} while its entry names {}",
                canonical(*holds),
                canonical(*ip)
            )),
            _ => None,
        })
        .collect();
    let conflicts: Vec<String> = report
        .iter()
        .filter_map(|(claim, ip, state)| match state {
            PreAllocationState::Conflict(conflict) => Some(format!(
                "the entry of claim {claim} names {}, but {conflict}",
                canonical(*ip)
            )),
            _ => None,
        })
        .collect();
    let listed = |items: &[String]| {
        let mut text = items
            .iter()
            .take(LISTED)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if items.len() > LISTED {
            text.push_str("; ...");
        }
        text
    };
    let summary = format!("{realised} of {} entries realised", report.len());
    if !drift.is_empty() {
        condition(
            PRE_ALLOCATIONS_CONDITION,
            ConditionStatus::False,
            "PreAllocationDrift",
            format!(
                "{summary}; {} claims hold another address than their entry names (the entry changed after the address was allocated; a claim is never moved, it keeps its address until released): {}{}",
                drift.len(),
                listed(&drift),
                if conflicts.is_empty() {
                    String::new()
                } else {
                    format!("; conflicts: {}", listed(&conflicts))
                }
            ),
        )
    } else if !conflicts.is_empty() {
        condition(
            PRE_ALLOCATIONS_CONDITION,
            ConditionStatus::False,
            "PreAllocationConflict",
            format!(
                "{summary}; {} entries cannot be realised now: {}",
                conflicts.len(),
                listed(&conflicts)
            ),
        )
    } else {
        condition(
            PRE_ALLOCATIONS_CONDITION,
            ConditionStatus::True,
            "PreAllocationsHonoured",
            format!(
                "{summary}; the others wait for their claims, their addresses kept from every other claim"
            ),
        )
    }
}

/// Publishes the notes about realised claims whose entry changed or went (gathered by the
/// registry when the spec changed) as Warning Events on the pool.
async fn publish_pre_allocation_notes(pool: &PoolView, ctx: &Context) {
    let notes = ctx.update_registry(|registry| registry.take_pre_allocation_notes(pool.key()));
    for note in notes {
        let reference = pool.reference();
        if let Err(e) = ctx
            .events
            .publish(reference, EventType::Warning, "PreAllocationDrift", note)
            .await
        {
            tracing::debug!(error = %e, "could not publish an event");
        }
    }
}

/// Whether writing `desired` would change anything (lastTransitionTime aside).
fn changed(current: Option<&StatusSeen>, desired: &InClusterIPPoolStatus) -> bool {
    let Some(current) = current else {
        return true;
    };
    carved_changed(Some(current), desired)
        || current.counts != desired.ip_addresses
        || !desired
            .conditions
            .iter()
            .flatten()
            .all(|want| current.carries(want))
}

/// Whether the sub-prefixes the pool carved differ from those its status lists.
fn carved_changed(current: Option<&StatusSeen>, desired: &InClusterIPPoolStatus) -> bool {
    current.and_then(|c| c.carved.as_ref()) != desired.carved_prefixes.as_ref()
}

/// Whether a condition the status should carry has another status or reason than the one it
/// carries (or is missing): messages alone (counts in words) do not count.
fn condition_turned(current: Option<&StatusSeen>, desired: &InClusterIPPoolStatus) -> bool {
    desired
        .conditions
        .iter()
        .flatten()
        .any(|want| !current.is_some_and(|c| c.carries_turn(want)))
}

/// By how many claims the pool's counts moved since its status: the addresses used and total
/// that differ (`u64::MAX` when the status has no counts yet, or the pool none any more).
fn claims_changed(current: Option<&StatusSeen>, desired: &InClusterIPPoolStatus) -> u64 {
    let current = current.and_then(|s| s.counts.as_ref());
    match (current, desired.ip_addresses.as_ref()) {
        (Some(have), Some(want)) => {
            let apart = |a: i64, b: i64| a.abs_diff(b);
            apart(have.used, want.used).saturating_add(apart(have.total, want.total))
        }
        (None, None) => 0,
        _ => u64::MAX,
    }
}

fn publish_metrics(ctx: &Context, key: &PoolKey, counts: Option<&IPAddressesStatus>) {
    let clamp = |v: i64| u64::try_from(v).unwrap_or(0);
    if let Some(c) = counts {
        ctx.metrics.pool_capacity(
            key,
            clamp(c.total),
            clamp(c.used),
            clamp(c.free),
            clamp(c.out_of_range),
        );
    }
    let (waiting, sizes) = {
        let registry = ctx.registry();
        (registry.waiting(key), registry.sizes())
    };
    ctx.metrics
        .pool_waiting_claims(key, u64::try_from(waiting).unwrap_or(u64::MAX));
    ctx.metrics.registry_sizes(&sizes);
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    use super::*;
    use crate::api::ObjectKey;
    use crate::api::PoolKind;
    use crate::api::{InClusterIPPool, POOL_FINALIZER};
    use crate::controllers::fixtures::{Expect, Mock, ip_pool, pool_key, reservation, scenario};

    /// A pool new to inpool gets `ProtectPool` (guarded by the version read), then its status:
    /// the counts of what the registry holds, and its conditions; nothing else is sent.
    #[tokio::test]
    async fn a_new_pool_is_protected_then_its_counts_are_written() {
        let mut mock = Mock::new();
        let pool = ip_pool(&["10.0.0.10-10.0.0.11"]);
        mock.pool(&pool);
        mock.learn(&reservation("c1", "10.0.0.10"));
        let view = mock.ctx.stores.pool(&pool_key()).unwrap();
        let path = "/apis/ipam.cluster.x-k8s.io/v1alpha2/namespaces/ns/inclusterippools/p";
        let script = vec![
            Expect::patch(format!("{path}?&fieldManager=inpool"))
                .with("/metadata/resourceVersion", "1")
                .with("/metadata/finalizers", serde_json::json!([POOL_FINALIZER]))
                .answer(&pool),
            Expect::patch(format!("{path}/status?&force=true&fieldManager=inpool"))
                .with("/kind", "InClusterIPPool")
                .with("/status/ipAddresses/total", 2)
                .with("/status/ipAddresses/used", 1)
                .with("/status/ipAddresses/free", 1)
                .with("/status/conditions/0/type", "Ready")
                .with("/status/conditions/0/status", "True")
                .with("/status/conditions/1/type", "AddressesAvailable")
                .with("/status/conditions/1/message", "1 of 2 addresses are free")
                .answer(&pool),
        ];
        let reconciled = reconcile::<InClusterIPPool>(view, mock.ctx.clone());
        let action = scenario(&mut mock.server, reconciled, script).await;
        assert_eq!(action.unwrap(), Action::await_change());
    }

    #[test]
    fn a_condition_turns_on_its_status_or_reason_not_its_message() {
        let with = |status: &str, reason: &str, message: &str| InClusterIPPoolStatus {
            ip_addresses: None,
            conditions: Some(vec![Condition {
                type_: ADDRESSES_AVAILABLE_CONDITION.to_string(),
                status: status.to_string(),
                reason: reason.to_string(),
                message: message.to_string(),
                last_transition_time: now(),
                observed_generation: Some(1),
            }]),
            carved_prefixes: None,
        };
        let free = with("True", "AddressesAvailable", "3 of 10 addresses are free");
        let fewer = with("True", "AddressesAvailable", "2 of 10 addresses are free");
        let none = with(
            "False",
            REASON_POOL_EXHAUSTED,
            "all 10 addresses are in use",
        );
        let seen = StatusSeen::of(&free);
        assert!(!condition_turned(Some(&seen), &fewer));
        assert!(condition_turned(Some(&seen), &none));
        assert!(condition_turned(None, &free));
        assert!(changed(Some(&seen), &fewer));
        assert!(!changed(Some(&seen), &free));
    }

    #[test]
    fn the_claims_a_status_would_publish_count_used_and_total() {
        let status = |used, total| InClusterIPPoolStatus {
            ip_addresses: Some(IPAddressesStatus {
                total,
                used,
                free: total - used,
                out_of_range: 0,
            }),
            conditions: None,
            carved_prefixes: None,
        };
        let seen = |used, total| StatusSeen::of(&status(used, total));
        assert_eq!(claims_changed(Some(&seen(3, 10)), &status(7, 10)), 4);
        assert_eq!(claims_changed(Some(&seen(7, 10)), &status(3, 12)), 6);
        assert_eq!(claims_changed(None, &status(0, 10)), u64::MAX);
        let no_counts = InClusterIPPoolStatus {
            ip_addresses: None,
            conditions: None,
            carved_prefixes: None,
        };
        assert_eq!(
            claims_changed(Some(&StatusSeen::of(&no_counts)), &no_counts),
            0
        );
    }

    #[test]
    fn an_out_of_range_row_carries_the_allocation_length_only_for_a_sub_prefix_of_the_family() {
        let key = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "p").unwrap();
        let held = [
            (
                "fd40:0:0:1::".parse().unwrap(),
                Holder::Claim(ObjectKey::new("ns", "b")),
            ),
            (
                "10.0.0.64".parse().unwrap(),
                Holder::Claim(ObjectKey::new("ns", "v4")),
            ),
        ];
        // In an IPv6 prefix pool, and in an IPv4 one the other way round.
        for (sub_prefix, listed) in [
            (
                (Family::V6, 64),
                "fd40:0:0:1::/64 (claim ns/b), 10.0.0.64 (claim ns/v4)",
            ),
            (
                (Family::V4, 26),
                "fd40:0:0:1:: (claim ns/b), 10.0.0.64/26 (claim ns/v4)",
            ),
        ] {
            let condition = in_range_condition(&key, Some(sub_prefix), &held);
            assert!(condition.message.contains(listed), "{}", condition.message);
        }
    }
}
