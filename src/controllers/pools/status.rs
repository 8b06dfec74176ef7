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
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};

use crate::allocator::canonical;
use crate::api::ObjectKey;
use crate::api::PoolKey;
use crate::api::conditions::now;
use crate::api::{
    ConditionStatus, DesiredCondition, IPAddressesStatus, InClusterIPPoolStatus, POOL_FINALIZER,
    READY_CONDITION, REASON_POOL_EXHAUSTED, pool_status_patch,
};
use crate::controllers::runtime::controller::{Action, Controller, Requests};
use crate::controllers::runtime::error::{self, Error};
use crate::controllers::runtime::events::EventType;
use crate::controllers::runtime::{Context, MANAGER, delete_if_present, finalizers};
use crate::controllers::sources::pool_cache::{PoolView, StatusSeen};
use crate::controllers::sources::pool_kinds::{LaneInput, PoolObject};
use crate::controllers::sources::writers::{Foreign, foreign_message};
use crate::controllers::state::reservation::IPAddressReservation;
use crate::controllers::state::{Holder, PreAllocationState, Unready};

/// The shortest time between two status writes of one pool: a burst of allocations in one pool
/// costs one write a second, never one per address.
pub const MIN_STATUS_INTERVAL: Duration = Duration::from_secs(1);

/// How long a pool woken by the registry waits before its reconcile, gathering the other wakes
/// of the same claim's steps: one reconcile per claim, not one per step, when claims reach
/// thousands of pools a few at a time. As long as [`MIN_STATUS_INTERVAL`], so a pool's first
/// status after a change lags by at most that again; a change of the pool object itself is
/// reconciled at once.
pub const WAKE_DEBOUNCE: Duration = Duration::from_secs(1);

/// While at most this many pools have changed within the last [`MAX_LAG`] (the pools active
/// lately), each writes at once (after its [`MIN_STATUS_INTERVAL`]): a few pools (every test,
/// most installations) are never held back. Counting the pools that changed lately, not those
/// with a write pending, matters: claims reaching 200 pools one after the other keep only one or
/// two writes pending at any moment, and would each pay for a write.
pub const FEW_POOLS: usize = 10;

/// A pool whose counts moved by at least this many claims since its status writes at once
/// (after its [`MIN_STATUS_INTERVAL`]): its own claims pay for the write, so these writes cost
/// at most 1/25 = 0.04 of a write per claim, however many pools there are and however slowly the
/// API server realises claims.
pub const CLAIMS_PER_WRITE: u64 = 25;

/// Otherwise (more than [`FEW_POOLS`] active, fewer than [`CLAIMS_PER_WRITE`] claims
/// unpublished) a pool's status waits until its first unpublished change is this old. Each pool
/// is then written at most once per this lag for claims that did not pay for a write themselves,
/// so those writes scale with the pools, not with the claims or with wall time spent busy.
pub const MAX_LAG: Duration = Duration::from_secs(300);

/// The most writes per second of pools whose [`MAX_LAG`] has run out, over all pools: pools due
/// at the same time (a start, a bulk of claims over 1,000 pools) take turns, first due first.
/// Their lag is then at most the pools due divided by this rate, if that exceeds [`MAX_LAG`].
pub const LAGGED_WRITES_PER_SECOND: u32 = 5;

/// When each pool's status may be written: the pools with a status to write (due), since when,
/// the turns of those that waited out [`MAX_LAG`], and how many pools are active lately.
#[derive(Default)]
pub struct StatusPacing {
    pools: HashMap<PoolKey, Pacing>,
    /// How many pools became due within the last [`MAX_LAG`]: exact when one becomes active,
    /// recounted from `pools` at most once a second to let the others age out.
    active: usize,
    counted: Option<Instant>,
    /// The first instant not yet given as a turn.
    next_turn: Option<Instant>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Pacing {
    /// The pool's status was last written then.
    written: Option<Instant>,
    /// The pool's status has differed from what it should be since then.
    due_since: Option<Instant>,
    /// The pool last became due then (whether written since or not).
    became_due: Option<Instant>,
    /// The pool writes then, its lag run out; no other pool was given that instant.
    turn: Option<Instant>,
}

impl Pacing {
    fn is_active(&self, now: Instant) -> bool {
        self.became_due
            .is_some_and(|at| now.saturating_duration_since(at) < MAX_LAG)
    }

    /// Decides nothing any more at `now`: nothing due, no longer active, and written long enough
    /// ago that its [`MIN_STATUS_INTERVAL`] is over. A pool without an entry is paced exactly as
    /// one with an idle entry, so idle entries are dropped: a pool costs the pacing nothing once
    /// its status has settled.
    fn is_idle(&self, now: Instant) -> bool {
        self.due_since.is_none()
            && self.turn.is_none()
            && !self.is_active(now)
            && self
                .written
                .is_none_or(|at| now.saturating_duration_since(at) >= MIN_STATUS_INTERVAL)
    }
}

impl StatusPacing {
    /// A pool's status differs from what it should be, by `changes` claims (counted in its
    /// addresses used and total; `u64::MAX` when it has no counts yet or a condition turned): how
    /// long it must wait before writing, if at all. A pool that must wait keeps its place until it
    /// writes.
    pub fn ask(&mut self, pool: &PoolKey, changes: u64, now: Instant) -> Option<Duration> {
        let active = self.active_pools(now);
        let pacing = self.pools.entry(pool.clone()).or_default();
        let mut newly_active = false;
        if pacing.due_since.is_none() {
            newly_active = !pacing.is_active(now);
            pacing.due_since = Some(now);
            pacing.became_due = Some(now);
        }
        let active = active + usize::from(newly_active);
        self.active = active;
        let earliest = pacing
            .written
            .map_or(now, |at| (at + MIN_STATUS_INTERVAL).max(now));
        let at = if active <= FEW_POOLS || changes >= CLAIMS_PER_WRITE {
            earliest
        } else if let Some(turn) = pacing.turn {
            turn.max(earliest)
        } else {
            let lag_out = pacing.due_since.map_or(now, |since| since + MAX_LAG);
            let turn = lag_out.max(earliest).max(self.next_turn.unwrap_or(now));
            self.next_turn = Some(turn + Duration::from_secs(1) / LAGGED_WRITES_PER_SECOND);
            pacing.turn = Some(turn);
            turn
        };
        at.checked_duration_since(now).filter(|d| !d.is_zero())
    }

    /// The pools active lately (see [`FEW_POOLS`]), recounted at most once a second.
    fn active_pools(&mut self, now: Instant) -> usize {
        let stale = self
            .counted
            .is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_secs(1));
        if stale {
            self.forget_idle(now);
            self.active = self.pools.values().filter(|p| p.is_active(now)).count();
            self.counted = Some(now);
        }
        self.active
    }

    /// Drops the entries that decide nothing any more ([`Pacing::is_idle`]), and the table's
    /// room they took once it is mostly empty.
    fn forget_idle(&mut self, now: Instant) {
        self.pools.retain(|_, pacing| !pacing.is_idle(now));
        if self.pools.capacity() > 2 * self.pools.len() + 32 {
            self.pools.shrink_to_fit();
        }
    }

    /// The pool's status was written at `now`.
    pub fn written(&mut self, pool: &PoolKey, now: Instant) {
        self.settled(pool);
        self.pools.entry(pool.clone()).or_default().written = Some(now);
    }

    /// The pool's status is what it should be.
    pub fn settled(&mut self, pool: &PoolKey) {
        if let Some(pacing) = self.pools.get_mut(pool)
            && pacing.due_since.take().is_some()
        {
            pacing.turn = None;
        }
    }

    /// Forgets the pools `known` does not hold, and the pools whose status settled long enough
    /// ago (at `now`) that their entry decides nothing.
    pub fn retain(&mut self, known: &std::collections::HashSet<PoolKey>, now: Instant) {
        self.pools.retain(|pool, _| known.contains(pool));
        self.forget_idle(now);
        self.counted = None;
    }
}

/// `True` while the pool has a free address; `False`/`PoolExhausted` when it has none.
pub const ADDRESSES_AVAILABLE_CONDITION: &str = "AddressesAvailable";
/// `True` when the pool shares addresses with another pool that claims of one namespace can
/// reach; the message names the pools and the first shared range.
pub const OVERLAP_CONDITION: &str = "Overlap";
/// `False` when allocated addresses lie outside `spec.addresses` (after a shrink); the message
/// names them and their claims.
pub const ADDRESSES_IN_RANGE_CONDITION: &str = "AddressesInRange";

/// `True` while `IPAddress`es of the pool were created by another writer since inpool started
/// (another IPAM provider allocates from it); the message names them and their field managers.
pub const FOREIGN_ADDRESSES_CONDITION: &str = "ForeignAddresses";
/// What became of the pool's `spec.preAllocations` (present only on a pool with entries).
pub const PRE_ALLOCATIONS_CONDITION: &str = "PreAllocations";

/// Every condition inpool writes on a pool: the pool cache keeps only these of a pool's status
/// ([`StatusSeen`]), and a status written carries only these (another writer's stay theirs).
pub const POOL_CONDITIONS: [&str; 6] = [
    READY_CONDITION,
    ADDRESSES_AVAILABLE_CONDITION,
    OVERLAP_CONDITION,
    ADDRESSES_IN_RANGE_CONDITION,
    PRE_ALLOCATIONS_CONDITION,
    FOREIGN_ADDRESSES_CONDITION,
];

/// How many out-of-range addresses or overlapping pools a message lists.
const LISTED: usize = 10;

/// The pool controller of kind `P`, fed by the kind's watch (the pools it added, changed or
/// listed) and by the registry (wakes: pools whose status may have changed), reading the kind's
/// pool cache. Runs until the run ends.
pub async fn run<P: PoolObject>(ctx: &Arc<Context>, input: LaneInput<P>) {
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
pub async fn reconcile<P: PoolObject>(
    pool: Arc<PoolView>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    ctx.metrics.reconcile("pool");
    let result = reconcile_pool::<P>(&pool, &ctx).await;
    error::settle_named("pool", pool.key().object_name(), &ctx, result)
}

async fn reconcile_pool<P: PoolObject>(pool: &PoolView, ctx: &Context) -> Result<Action, Error> {
    let key = pool.key();
    if pool.is_paused() {
        return Ok(Action::await_change());
    }
    let api = P::api(ctx.client.clone(), key);
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
    let status = desired_status(pool, ctx);
    publish_metrics(ctx, key, status.ip_addresses.as_ref());
    if !changed(pool.status(), &status) {
        pacing(ctx).settled(key);
        return Ok(Action::await_change());
    }
    // A condition that turns (another status or reason) is news, not a count: it goes at once.
    let changes = if condition_turned(pool.status(), &status) {
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
    Ok(Action::await_change())
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
async fn set_finalizer<P: PoolObject>(
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

/// The status the pool should have now.
pub fn desired_status(pool: &PoolView, ctx: &Context) -> InClusterIPPoolStatus {
    let key = pool.key();
    let registry = ctx.registry();
    let counts = registry.counts(key);
    let waiting = registry.waiting(key);
    let overlaps = registry.overlaps(key);
    let out_of_range = registry.out_of_range(key);
    let sub_prefix_length = registry
        .network(key)
        .filter(|_| key.kind.is_prefix())
        .map(|(length, _)| length);
    let pre_allocations = registry.pre_allocation_report(key);
    drop(registry);
    let foreign = ctx.writers.foreign_in(key);

    let generation = pool.generation();
    let (_, units) = units(key);
    let mut desired = vec![ready_condition(pool, out_of_range.len())];
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
        desired.push(in_range_condition(key, sub_prefix_length, &out_of_range));
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

fn ready_condition(pool: &PoolView, out_of_range: usize) -> DesiredCondition {
    let key = pool.key();
    match pool.readiness() {
        Ok(()) => condition(
            READY_CONDITION,
            ConditionStatus::True,
            "Ready",
            format!("the spec is valid; {} are handed out", units(key).1),
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
    sub_prefix_length: Option<u8>,
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
    // A sub-prefix is named by its first address and the allocation length; an IPv4 record in a
    // prefix pool (no sub-prefix of it) by its address alone.
    let listed: Vec<String> = out_of_range
        .iter()
        .take(LISTED)
        .map(|(ip, holder)| {
            let length = match sub_prefix_length {
                Some(l) if ip.is_ipv6() => format!("/{l}"),
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
    current.counts != desired.ip_addresses
        || !desired
            .conditions
            .iter()
            .flatten()
            .all(|want| current.carries(want))
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

    fn pool(i: usize) -> PoolKey {
        PoolKey::in_cluster("ns", &format!("p{i}"))
    }

    /// Makes pools `range` due at `now`, each with one claim unpublished, each written at once.
    fn due_and_written(pacing: &mut StatusPacing, range: std::ops::Range<usize>, now: Instant) {
        for i in range {
            assert_eq!(pacing.ask(&pool(i), 1, now), None, "pool {i}");
            pacing.written(&pool(i), now);
        }
    }

    #[test]
    fn a_few_pools_write_at_once_each_at_most_once_a_second() {
        let start = Instant::now();
        let mut pacing = StatusPacing::default();
        due_and_written(&mut pacing, 0..FEW_POOLS, start);
        let soon = start + Duration::from_millis(300);
        assert_eq!(
            pacing.ask(&pool(0), 1, soon),
            Some(MIN_STATUS_INTERVAL - Duration::from_millis(300))
        );
        assert_eq!(pacing.ask(&pool(0), 1, start + MIN_STATUS_INTERVAL), None);
    }

    #[test]
    fn among_many_pools_due_a_status_waits_for_its_claims_or_its_lag() {
        let start = Instant::now();
        let mut pacing = StatusPacing::default();
        // Many pools due, none written: each waits out the lag from when it became due.
        for i in 0..20 {
            pacing.ask(&pool(i), 1, start);
        }
        let later = start + Duration::from_secs(10);
        assert_eq!(pacing.ask(&pool(20), 1, later), Some(MAX_LAG));
        // It keeps its place, whatever else asks.
        assert_eq!(
            pacing.ask(&pool(20), 3, later + Duration::from_secs(100)),
            Some(MAX_LAG - Duration::from_secs(100))
        );
        assert_eq!(pacing.ask(&pool(20), 3, later + MAX_LAG), None);
        // Enough claims pay for a write at once.
        assert_eq!(pacing.ask(&pool(21), CLAIMS_PER_WRITE, later), None);
        pacing.written(&pool(21), later);
        // ... but not twice within a second.
        assert_eq!(
            pacing.ask(&pool(21), CLAIMS_PER_WRITE, later),
            Some(MIN_STATUS_INTERVAL)
        );
        // A pool with no counts yet writes at once.
        assert_eq!(pacing.ask(&pool(22), u64::MAX, later), None);
    }

    #[test]
    fn pools_whose_lag_runs_out_together_take_turns_at_a_bounded_rate() {
        let spacing = Duration::from_secs(1) / LAGGED_WRITES_PER_SECOND;
        let start = Instant::now();
        let mut pacing = StatusPacing::default();
        let waits: Vec<Option<Duration>> = (0..FEW_POOLS + 3)
            .map(|i| pacing.ask(&pool(i), 1, start))
            .collect();
        assert!(waits[..FEW_POOLS].iter().all(Option::is_none));
        assert_eq!(
            waits[FEW_POOLS..],
            [
                Some(MAX_LAG),
                Some(MAX_LAG + spacing),
                Some(MAX_LAG + spacing * 2)
            ]
        );
        // A pool due later than those turns waits its own lag only.
        let later = start + Duration::from_secs(60);
        assert_eq!(pacing.ask(&pool(50), 1, later), Some(MAX_LAG));
    }

    #[test]
    fn once_the_pools_active_lately_age_out_a_pool_writes_at_once() {
        let start = Instant::now();
        let mut pacing = StatusPacing::default();
        // Claims that reach many pools one after the other: each written at once while few are
        // active, then held back though only one write is ever pending.
        due_and_written(&mut pacing, 0..FEW_POOLS, start);
        assert!(pacing.ask(&pool(FEW_POOLS), 1, start).is_some());
        // Settled pools stay active for the lag, then age out.
        pacing.settled(&pool(FEW_POOLS));
        let later = start + MAX_LAG + Duration::from_secs(1);
        assert_eq!(pacing.ask(&pool(99), 1, later), None);
        // Pools that are gone no longer count.
        let mut pacing = StatusPacing::default();
        for i in 0..=FEW_POOLS {
            pacing.ask(&pool(i), 1, start);
        }
        assert!(pacing.ask(&pool(99), 1, start).is_some());
        let known = (0..3).map(pool).collect();
        pacing.retain(&known, start);
        assert_eq!(pacing.ask(&pool(200), 1, start), None);
    }

    #[test]
    fn a_pool_whose_status_settled_long_ago_costs_the_pacing_nothing() {
        let start = Instant::now();
        let mut pacing = StatusPacing::default();
        let paid_and_written = |pacing: &mut StatusPacing, range: std::ops::Range<usize>, now| {
            for i in range {
                assert_eq!(pacing.ask(&pool(i), CLAIMS_PER_WRITE, now), None);
                pacing.written(&pool(i), now);
            }
        };
        paid_and_written(&mut pacing, 0..1_000, start);
        assert!(pacing.ask(&pool(1_000), 1, start).is_some(), "held back");
        assert_eq!(pacing.pools.len(), 1_001);
        // One pool still due, the others settled: once their lag is over, only it is kept.
        let later = start + MAX_LAG + Duration::from_secs(1);
        assert_eq!(pacing.ask(&pool(1_000), 1, later), None);
        assert_eq!(pacing.pools.len(), 1);
        assert!(
            pacing.pools.capacity() < 100,
            "the table gave its room back"
        );
        pacing.written(&pool(1_000), later);
        // The audit's pass forgets them too, with nothing asked.
        paid_and_written(&mut pacing, 0..100, later);
        let known = (0..=1_000).map(pool).collect();
        pacing.retain(&known, later + MAX_LAG + Duration::from_secs(1));
        assert!(pacing.pools.is_empty());
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
        };
        let seen = |used, total| StatusSeen::of(&status(used, total));
        assert_eq!(claims_changed(Some(&seen(3, 10)), &status(7, 10)), 4);
        assert_eq!(claims_changed(Some(&seen(7, 10)), &status(3, 12)), 6);
        assert_eq!(claims_changed(None, &status(0, 10)), u64::MAX);
        let no_counts = InClusterIPPoolStatus {
            ip_addresses: None,
            conditions: None,
        };
        assert_eq!(
            claims_changed(Some(&StatusSeen::of(&no_counts)), &no_counts),
            0
        );
    }

    #[test]
    fn an_out_of_range_row_carries_the_allocation_length_only_for_an_ipv6_sub_prefix() {
        let key = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "p").unwrap();
        let held = [
            (
                "fd40:0:0:1::".parse().unwrap(),
                Holder::Claim(ObjectKey::new("ns", "b")),
            ),
            (
                "10.0.0.1".parse().unwrap(),
                Holder::Claim(ObjectKey::new("ns", "v4")),
            ),
        ];
        let condition = in_range_condition(&key, Some(64), &held);
        assert!(
            condition
                .message
                .contains("fd40:0:0:1::/64 (claim ns/b), 10.0.0.1 (claim ns/v4)"),
            "{}",
            condition.message
        );
    }
}
