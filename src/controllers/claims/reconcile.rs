//! The `IPAddressClaim` reconciler: the IPAM contract, with a `Ready` condition that tells the
//! truth about every claim (see docs/contract.md).
//!
//! It decides nothing about addresses itself: [`crate::controllers::state::plan`] does, from the
//! registry. It runs the claim's lifecycle and performs each step against the API server:
//!
//! - a live claim: ownership filter → pause and Cluster checks → finalizer (`realise`'s
//!   lifecycle part); then [`plan::plan`] → `Ready`, or a live look-up that adopts an existing
//!   `IPAddress` (`adopt`); else [`plan::plan_allocation`] → recover a reservation
//!   (`is_claims_reservation`), or reserve an address (`reserve`), then `create_address`
//!   and `Ready`; or `Ready=False` with why it waits (`fail`);
//! - a deleted claim (`release`): unless paused or moving, delete its `IPAddress` and let go of
//!   the reservations [`plan::release`] names, then of the claim's finalizer.
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::messages::{
    exhausted_message, not_ready_message, pre_allocation_conflict_message, unit_noun, unit_text,
};
use crate::allocator::{Subnet, canonical};
use crate::api::{
    ADDRESS_FINALIZER, CLAIM_FINALIZER, CLUSTER_NAME_LABEL, ConditionStatus,
    DELETE_FOR_MOVE_ANNOTATION, DesiredCondition, IPAM_GROUP, IPAddress, IPAddressClaim,
    IPAddressClaimReference, IPAddressSpec, PAUSED_ANNOTATION, READY_CONDITION,
    REASON_ADDRESS_ALLOCATED, REASON_ALLOCATION_FAILED, REASON_POOL_EXHAUSTED,
    REASON_POOL_NOT_READY, claim_status_patch, conditions::now,
};
use crate::api::{ObjectKey, PoolKey, Scope};
use crate::controllers::claims::cached_claim::CachedClaim;
use crate::controllers::context::{Context, Learning};
use crate::controllers::runtime::controller::Action;
use crate::controllers::runtime::error::{Error, retry_delay, settle_named};
use crate::controllers::runtime::events::EventType;
use crate::controllers::runtime::finalizers;
use crate::controllers::runtime::{MANAGER, create_params, delete_if_present, patch_params};
use crate::controllers::state::Allocation;
use crate::controllers::state::facts::{self, address_hold, address_key};
use crate::controllers::state::plan::{self, Step};
use crate::controllers::state::reservation::{
    IPAddressReservation, hold_of, new_reservation, records_claim, release_patch,
};
use crate::controllers::state::{Change, HoldRecord, Unready};

/// How often to try the next address when the API server says the chosen one is taken, before
/// giving the watches time to catch up with another process.
const MAX_TAKEN_RETRIES: usize = 16;

#[tracing::instrument(skip_all, fields(claim = claim.name(), namespace = claim.namespace()))]
pub async fn reconcile(claim: Arc<CachedClaim>, ctx: Arc<Context>) -> Result<Action, Error> {
    let pool = claim.pool().clone();
    let key = claim.key().clone();
    if ctx
        .own_writes()
        .is_behind(&key, claim.resource_version().as_deref())
    {
        // The watch event of our own last write is on its way and brings the next reconcile.
        return Ok(Action::await_change());
    }
    ctx.metrics.reconcile("claim");
    let result = if claim.is_deleting() {
        release(&claim, &key, &pool, &ctx).await
    } else {
        realise(&claim, &key, &pool, &ctx).await
    };
    settle_named("claim", key.to_string(), &ctx, result)
}

pub fn error_policy(claim: Arc<CachedClaim>, error: &Error, ctx: Arc<Context>) -> Action {
    Action::requeue(retry_delay("claim", claim.key().to_string(), error, &ctx))
}

enum Gate {
    Open,
    Paused,
    ClusterMissing(String),
}

/// Pause rules: the claim's or its Cluster's paused annotation, or `spec.paused`. A claim names
/// no Cluster → not paused. A named Cluster that does not exist blocks live claims only.
fn gate(claim: &CachedClaim, ctx: &Context) -> Gate {
    if claim.is_paused() {
        return Gate::Paused;
    }
    let Some(name) = claim.cluster_name() else {
        return Gate::Open;
    };
    let reference = ObjectRef::new(name).within(claim.namespace());
    match ctx.stores.clusters.get(&reference) {
        None => Gate::ClusterMissing(name.to_string()),
        Some(cluster)
            if cluster.is_paused() || cluster.annotations().contains_key(PAUSED_ANNOTATION) =>
        {
            Gate::Paused
        }
        Some(_) => Gate::Open,
    }
}

async fn realise(
    claim: &CachedClaim,
    key: &ObjectKey,
    pool: &PoolKey,
    ctx: &Context,
) -> Result<Action, Error> {
    // Lifecycle: pause, Cluster, finalizer.
    match gate(claim, ctx) {
        Gate::Open => {}
        Gate::Paused => {
            forget(ctx, pool, key);
            return Ok(Action::await_change());
        }
        Gate::ClusterMissing(cluster) => {
            forget(ctx, pool, key);
            let note = format!(
                "Cluster {cluster} named by the claim does not exist; no address is allocated until it does"
            );
            publish(ctx, claim, EventType::Warning, "ClusterNotFound", note).await;
            return Ok(Action::await_change());
        }
    }
    if pool_paused(ctx, pool) {
        forget(ctx, pool, key);
        return Ok(Action::await_change());
    }
    ensure_finalizer(claim, ctx).await?;

    // Allocation: plan, act, report; plan again while a step did not settle the claim.
    let step = plan::plan(&ctx.registry(), key, pool);
    if let Step::Ready(ip) = step {
        return ready(claim, ctx, pool, ip).await;
    }
    if claim.address_ref().is_some() && !is_live(claim, ctx).await? {
        // A realised claim whose address vanished is healed only if it still exists: the cache
        // can hold a claim that was removed while the watch was away (finalizers cleared by
        // hand), and allocating for it would create an address no claim will ever release.
        return Ok(Action::await_change());
    }
    let learning = ctx.learning();
    let addresses: Api<IPAddress> = ctx.namespaced(&key.namespace);
    if let Some(existing) = addresses.get_opt(&key.name).await? {
        return adopt(claim, key, pool, ctx, &learning, &existing).await;
    }
    if let Some(lease) = ctx.writers.holding_lease() {
        let message = format!(
            "no address is allocated while another IPAM provider runs: its leader election {lease} is held and renewed, and it would hand out addresses inpool holds; the claim is served once the Lease is gone or expired"
        );
        return fail(claim, ctx, REASON_ALLOCATION_FAILED, message).await;
    }
    let queued = facts::queued(claim.creation_timestamp(), key);
    let mut rejected = Vec::new();
    for _ in 0..MAX_TAKEN_RETRIES {
        let allocation = ctx.update_registry(|registry| {
            plan::plan_allocation(registry, &queued, pool, &rejected, |c| {
                ctx.stores.claim(c).is_some()
            })
        });
        match allocation {
            Allocation::Recover { reservation, held } => {
                let ip = held.ip();
                let realised = ctx
                    .in_flight(held, async {
                        if !is_claims_reservation(claim, ctx, &reservation).await? {
                            return Ok(None);
                        }
                        create_address(claim, key, pool, ctx, &learning, ip, &reservation)
                            .await
                            .map(Some)
                    })
                    .await?;
                match realised {
                    Some(action) => return Ok(action),
                    None => rejected.push(reservation),
                }
            }
            Allocation::Reserve { held, scope } => {
                let ip = held.ip();
                let realised = ctx
                    .in_flight(held, async {
                        let Some(reservation) =
                            reserve(claim, key, pool, ctx, &learning, ip, &scope).await?
                        else {
                            return Ok(None);
                        };
                        create_address(claim, key, pool, ctx, &learning, ip, &reservation)
                            .await
                            .map(Some)
                    })
                    .await?;
                if let Some(action) = realised {
                    return Ok(action);
                }
            }
            Allocation::Adopt => {
                // Another process realised this claim since the look-up: adopt its address.
                return Ok(Action::requeue(Duration::from_millis(100)));
            }
            Allocation::Exhausted { total, .. } => {
                // A stray reservation may be what keeps the claim waiting: look now.
                ctx.strays.request(pool);
                let message = exhausted_message(pool, total);
                return fail(claim, ctx, REASON_POOL_EXHAUSTED, message).await;
            }
            Allocation::NotReady(unready) => {
                let message = not_ready_message(pool, &unready);
                return fail(claim, ctx, REASON_POOL_NOT_READY, message).await;
            }
            Allocation::PreAllocationConflict { ip, conflict } => {
                let message = pre_allocation_conflict_message(pool, key, ip, &conflict);
                return fail(claim, ctx, REASON_ALLOCATION_FAILED, message).await;
            }
        }
    }
    // Another process is allocating from this pool at the same time; its reservations reach
    // this process's watch shortly.
    Ok(Action::requeue(Duration::from_millis(200)))
}

/// Whether the claim exists on the API server, not deleting, with the cached object's UID.
async fn is_live(claim: &CachedClaim, ctx: &Context) -> Result<bool, Error> {
    let claims: Api<IPAddressClaim> = ctx.namespaced(claim.namespace());
    Ok(claims
        .get_opt(claim.name())
        .await?
        .is_some_and(|live| live.uid() == claim.uid() && live.meta().deletion_timestamp.is_none()))
}

/// Whether a reservation the registry says the claim holds still exists on the API server and
/// records this claim, and no other claim of the same name (a claim deleted and created again has
/// a new UID). The cache may be behind: a crash, or an `IPAddress` deleted under the claim, is
/// recovered only from a reservation that is really there.
async fn is_claims_reservation(
    claim: &CachedClaim,
    ctx: &Context,
    name: &str,
) -> Result<bool, Error> {
    let reservations: Api<IPAddressReservation> = Api::all(ctx.client.clone());
    let Some(live) = reservations.get_opt(name).await? else {
        return Ok(false);
    };
    Ok(records_claim(
        &live,
        claim.namespace(),
        claim.name(),
        claim.uid().as_deref(),
    ) && !live.is_released())
}

/// Makes the API server record `ip` as held for the claim (the reservation object). Returns the
/// reservation's name, or `None` when the address turned out taken: its holder is learnt, so the
/// next plan picks another.
async fn reserve(
    claim: &CachedClaim,
    key: &ObjectKey,
    pool: &PoolKey,
    ctx: &Context,
    learning: &Learning<'_>,
    ip: IpAddr,
    scope: &Scope,
) -> Result<Option<String>, Error> {
    let reservations: Api<IPAddressReservation> = Api::all(ctx.client.clone());
    let reservation = new_reservation(
        scope,
        pool,
        key,
        claim.uid(),
        ip,
        held_length(ctx, pool, ip),
    );
    let name = reservation.name_any();
    match reservations.create(&create_params(), &reservation).await {
        Ok(created) => {
            learn_reservation(learning, &created);
            Ok(Some(name))
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            // Taken by a holder the watch has not shown yet: learn it now, so that the address
            // stays used exactly as long as that holder exists.
            if let Some(holder) = reservations.get_opt(&name).await? {
                learn_reservation(learning, &holder);
            }
            Ok(None)
        }
        Err(e) => {
            let object = format!("IPAddressReservation {name} for {ip}");
            Err(create_failed(claim, ctx, object, e).await)
        }
    }
}

/// Creating `object` (what it is, its name and address) failed: the claim says so
/// (`Ready=False`, `AllocationFailed`, with the API server's answer) before the reconcile fails
/// and is retried. Returns the error the reconcile fails with.
async fn create_failed(
    claim: &CachedClaim,
    ctx: &Context,
    object: String,
    error: kube::Error,
) -> Error {
    let message = format!("creating {object} failed: {error}");
    match set_ready(
        claim,
        ctx,
        ConditionStatus::False,
        REASON_ALLOCATION_FAILED,
        message,
        None,
    )
    .await
    {
        Ok(()) => error.into(),
        Err(written) => written,
    }
}

async fn create_address(
    claim: &CachedClaim,
    key: &ObjectKey,
    pool: &PoolKey,
    ctx: &Context,
    learning: &Learning<'_>,
    ip: IpAddr,
    reservation: &str,
) -> Result<Action, Error> {
    let address = match build_address(claim, pool, ctx, ip) {
        Ok(address) => address,
        Err(reason) => {
            release_reservation(ctx, reservation).await?;
            return fail(claim, ctx, REASON_POOL_NOT_READY, reason).await;
        }
    };
    let addresses: Api<IPAddress> = ctx.namespaced(&key.namespace);
    match addresses.create(&create_params(), &address).await {
        Ok(created) => {
            learn_address(learning, &created);
            ctx.metrics.allocation(pool);
            ready(claim, ctx, pool, ip).await
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            // The IPAddress exists. When it is the very one this create sends (its answer was
            // lost after it succeeded, and kube's client sent it again), the claim is realised.
            // Otherwise someone created it meanwhile (another process, or by hand): when it
            // holds the reserved address, the reservation is its own: keep it. Otherwise give
            // ours back. Either way, adopt theirs on the next pass.
            let existing = addresses.get_opt(&key.name).await;
            if let Ok(Some(a)) = &existing
                && is_same_address(a, &address)
            {
                learn_address(learning, a);
                ctx.metrics.allocation(pool);
                return ready(claim, ctx, pool, ip).await;
            }
            let same_address = match &existing {
                Ok(Some(a)) => {
                    learn_address(learning, a);
                    a.spec.address.parse::<IpAddr>().ok() == Some(ip)
                }
                _ => false,
            };
            let released = match (&existing, same_address) {
                (Ok(_), false) => release_reservation(ctx, reservation).await,
                _ => Ok(()),
            };
            existing?;
            released?;
            Ok(Action::requeue(Duration::from_millis(100)))
        }
        Err(e) => {
            // The reservation stays (learnt when it was created): the next reconcile recovers it.
            let object = format!("IPAddress {key} for {ip}");
            Err(create_failed(claim, ctx, object, e).await)
        }
    }
}

/// An `IPAddress` with the claim's name exists: it is the claim's address (idempotency,
/// `clusterctl move`, migration from the reference provider) when it is for the same pool.
async fn adopt(
    claim: &CachedClaim,
    key: &ObjectKey,
    pool: &PoolKey,
    ctx: &Context,
    learning: &Learning<'_>,
    existing: &IPAddress,
) -> Result<Action, Error> {
    let conflict = if existing.spec.pool_ref != CachedClaim::pool_ref(pool) {
        Some(format!(
            "IPAddress {key} already exists for pool {} {}, not for the claimed pool; delete it or the claim",
            existing.spec.pool_ref.kind, existing.spec.pool_ref.name
        ))
    } else if *existing.spec.claim_ref.name != *key.name {
        Some(format!(
            "IPAddress {key} already exists for claim {}; delete it or the claim",
            existing.spec.claim_ref.name
        ))
    } else {
        None
    };
    let ip = match (conflict, existing.spec.address.parse::<IpAddr>()) {
        (Some(message), _) => {
            return fail(claim, ctx, REASON_ALLOCATION_FAILED, message).await;
        }
        (None, Err(_)) => {
            let message = format!(
                "IPAddress {key} has spec.address `{}`, which is not an IP address",
                existing.spec.address
            );
            return fail(claim, ctx, REASON_ALLOCATION_FAILED, message).await;
        }
        (None, Ok(ip)) => ip,
    };
    if pool.kind.is_prefix() {
        let Some(length) = allocation_length(ctx, pool) else {
            // Without the pool's length the sub-prefix cannot be checked: wait for the pool.
            set_ready(
                claim,
                ctx,
                ConditionStatus::False,
                REASON_POOL_NOT_READY,
                not_ready_message(pool, &Unready::Missing),
                None,
            )
            .await?;
            return Ok(Action::requeue(Duration::from_secs(10)));
        };
        if let Some(message) = misfit_sub_prefix(key, pool, existing, ip, length) {
            return fail(claim, ctx, REASON_ALLOCATION_FAILED, message).await;
        }
    }
    let scope = ctx.registry().reservation_scope(pool, ip);
    let reservation = new_reservation(
        &scope,
        pool,
        key,
        claim.uid(),
        ip,
        held_length(ctx, pool, ip),
    );
    let name = reservation.name_any();
    let reservations: Api<IPAddressReservation> = Api::all(ctx.client.clone());
    let holder = match reservations.create(&create_params(), &reservation).await {
        Ok(created) => {
            learn_reservation(learning, &created);
            None
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let live = reservations.get_opt(&name).await?;
            if let Some(live) = &live {
                learn_reservation(learning, live);
            }
            live.map(|r| ObjectKey::new(&r.spec.claim_namespace, &r.spec.claim_name))
                .filter(|holder| holder != key)
        }
        Err(e) => return Err(e.into()),
    };
    learn_address(learning, existing);
    if let Some(holder) = holder {
        let message = format!(
            "IPAddress {key} holds {ip}, but that address is reserved for claim {holder}; one of the two must go"
        );
        return fail(claim, ctx, REASON_ALLOCATION_FAILED, message).await;
    }
    ready(claim, ctx, pool, ip).await
}

/// A prefix pool's `allocationPrefixLength`: the validated one of a ready pool, else the cached
/// object's (a paused or deleting pool keeps its spec); `None` when the pool is not known or the
/// length is out of range.
/// The prefix length of what a claim of `pool` holds from `ip` on: its sub-prefix in a prefix
/// pool, else the address.
fn held_length(ctx: &Context, pool: &PoolKey, ip: IpAddr) -> u8 {
    pool.kind
        .is_prefix()
        .then(|| allocation_length(ctx, pool))
        .flatten()
        .unwrap_or_else(|| HoldRecord::address_length(ip))
}

fn allocation_length(ctx: &Context, pool: &PoolKey) -> Option<u8> {
    if let Some((length, _)) = ctx.registry().network(pool) {
        return Some(length);
    }
    ctx.stores
        .pool(pool)?
        .allocation_length()
        .and_then(|length| u8::try_from(length).ok())
        .filter(|length| (1..=128).contains(length))
}

/// Why an existing `IPAddress` cannot be adopted as a sub-prefix of a prefix pool of `length`:
/// it must hold an IPv6 network of exactly that length (as inpool and the reference write them),
/// or the registry and the reservation would disagree with what the `IPAddress` says it holds.
fn misfit_sub_prefix(
    key: &ObjectKey,
    pool: &PoolKey,
    existing: &IPAddress,
    ip: IpAddr,
    length: u8,
) -> Option<String> {
    let fits = ip.is_ipv6()
        && existing.spec.prefix == i32::from(length)
        && Subnet::new(ip, length).is_some();
    (!fits).then(|| {
        format!(
            "IPAddress {key} holds {}/{}, not a /{length} sub-prefix of {pool} \
             (allocationPrefixLength {length}); delete it or the claim",
            existing.spec.address, existing.spec.prefix
        )
    })
}

/// Sets `Ready=False` with `reason` and waits for a change (no retry: an event will come).
async fn fail(
    claim: &CachedClaim,
    ctx: &Context,
    reason: &str,
    message: String,
) -> Result<Action, Error> {
    set_ready(claim, ctx, ConditionStatus::False, reason, message, None).await?;
    Ok(Action::await_change())
}

async fn ready(
    claim: &CachedClaim,
    ctx: &Context,
    pool: &PoolKey,
    ip: IpAddr,
) -> Result<Action, Error> {
    let pre_allocated = ctx.registry().pre_allocated(pool, claim.key()) == Some(ip);
    let message = format!(
        "{} allocated{}",
        unit_text(pool, ip, allocation_length(ctx, pool)),
        if pre_allocated {
            " (pre-allocated to the claim by the pool's spec.preAllocations)"
        } else {
            ""
        }
    );
    set_ready(
        claim,
        ctx,
        ConditionStatus::True,
        REASON_ADDRESS_ALLOCATED,
        message,
        Some(claim.name()),
    )
    .await?;
    Ok(Action::await_change())
}

/// The claim is being deleted: give the address back (unless paused or moving), then let the
/// claim go. A missing Cluster does not block this (it could never be unpaused).
async fn release(
    claim: &CachedClaim,
    key: &ObjectKey,
    pool: &PoolKey,
    ctx: &Context,
) -> Result<Action, Error> {
    let held = ctx.update_registry(|registry| plan::release(registry, key, pool));
    if !claim.has_finalizer(CLAIM_FINALIZER) {
        return Ok(Action::await_change());
    }
    if let Gate::Paused = gate(claim, ctx) {
        return Ok(Action::await_change());
    }
    let moving = claim.is_moving();
    if !moving {
        let addresses: Api<IPAddress> = ctx.namespaced(&key.namespace);
        let address = addresses.get_opt(&key.name).await?;
        let address_moving = address
            .as_ref()
            .is_some_and(|a| a.annotations().contains_key(DELETE_FOR_MOVE_ANNOTATION));
        if !address_moving {
            if let Some(address) = address.filter(|a| *a.spec.claim_ref.name == *key.name) {
                delete_address(&addresses, &address).await?;
            }
            let reservations: Api<IPAddressReservation> = Api::all(ctx.client.clone());
            let grace = reuse_grace_period(ctx, pool);
            for name in held {
                match grace {
                    Some(grace) => keep_released(&reservations, &name, grace).await?,
                    None => delete_if_present(&reservations, &name).await?,
                }
            }
            ctx.metrics.release(pool);
            publish(
                ctx,
                claim,
                EventType::Normal,
                "AddressReleased",
                format!("released the {} of {key}", unit_noun(pool)),
            )
            .await;
        }
    }
    remove_finalizer(claim, ctx).await?;
    ctx.own_writes().forget(key);
    Ok(Action::await_change())
}

/// Lets go of inpool's finalizer on `address`, then deletes it.
async fn delete_address(addresses: &Api<IPAddress>, address: &IPAddress) -> Result<(), Error> {
    finalizers::remove_address_protection(addresses, address).await?;
    Ok(delete_if_present(addresses, &address.name_any()).await?)
}

/// Applies a reservation this reconcile has just read or written, before its watch event comes
/// (the event is then a no-op): an address is marked used only through such a record.
fn learn_reservation(learning: &Learning<'_>, reservation: &IPAddressReservation) {
    if let Some(hold) = hold_of(reservation) {
        learning.learn(Change::Reservation(reservation.name_any(), hold));
    }
}

/// The same for an `IPAddress`.
fn learn_address(learning: &Learning<'_>, address: &IPAddress) {
    if let Some(hold) = address_hold(address) {
        learning.learn(Change::Address(address_key(address), hold));
    }
}

async fn release_reservation(ctx: &Context, name: &str) -> Result<(), Error> {
    let reservations: Api<IPAddressReservation> = Api::all(ctx.client.clone());
    Ok(delete_if_present(&reservations, name).await?)
}

fn build_address(
    claim: &CachedClaim,
    pool: &PoolKey,
    ctx: &Context,
    ip: IpAddr,
) -> Result<IPAddress, String> {
    let Some((prefix, gateway)) = ctx.registry().network_of(pool, ip) else {
        return Err(format!(
            "{pool} changed while the address was being allocated"
        ));
    };
    let pool_uid = pool_uid(ctx, pool).ok_or_else(|| format!("{pool} does not exist"))?;
    let mut address = IPAddress::new(
        claim.name(),
        IPAddressSpec {
            address: canonical(ip),
            claim_ref: IPAddressClaimReference {
                name: claim.name().to_string(),
            },
            gateway: gateway.map(canonical),
            pool_ref: CachedClaim::pool_ref(pool),
            prefix: i32::from(prefix),
        },
    );
    address.metadata.namespace = Some(claim.namespace().to_string());
    address.metadata.finalizers = Some(vec![ADDRESS_FINALIZER.to_string()]);
    address.metadata.owner_references = Some(vec![
        OwnerReference {
            api_version: IPAddressClaim::api_version(&()).into_owned(),
            kind: IPAddressClaim::kind(&()).into_owned(),
            name: claim.name().to_string(),
            uid: claim.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
        OwnerReference {
            api_version: format!("{IPAM_GROUP}/{}", crate::api::POOL_VERSION),
            kind: pool.kind.name().to_string(),
            name: pool.name.to_string(),
            uid: pool_uid,
            controller: Some(false),
            block_owner_deletion: Some(true),
        },
    ]);
    if let Some(cluster) = claim.cluster_name() {
        address.metadata.labels =
            Some([(CLUSTER_NAME_LABEL.to_string(), cluster.to_string())].into());
    }
    Ok(address)
}

/// Whether `existing` is the IPAddress `sent` describes: the same spec, owned by the same claim
/// (by UID), and not being deleted.
fn is_same_address(existing: &IPAddress, sent: &IPAddress) -> bool {
    fn claim_uid(address: &IPAddress) -> Option<&str> {
        address
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.as_str())
    }
    existing.meta().deletion_timestamp.is_none()
        && existing.spec == sent.spec
        && claim_uid(existing).is_some_and(|uid| claim_uid(sent) == Some(uid))
}

fn pool_uid(ctx: &Context, pool: &PoolKey) -> Option<String> {
    ctx.stores.pool(pool)?.uid().map(str::to_string)
}

/// The pool's `addressReuseGracePeriodSeconds`, when positive and the pool is live: a pool that
/// is gone or deleting frees addresses at once (its deletion must not wait on them).
fn reuse_grace_period(ctx: &Context, pool: &PoolKey) -> Option<Duration> {
    let cached = ctx.stores.pool(pool)?;
    let seconds = (!cached.is_deleting())
        .then_some(cached.reuse_grace_period_seconds())
        .flatten()?;
    u64::try_from(seconds)
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

/// Keeps a released claim's reservation, labelled released, until the grace period is over
/// (see [`reuse_grace`](crate::controllers::pools::reuse_grace)); the address stays held meanwhile.
async fn keep_released(
    reservations: &Api<IPAddressReservation>,
    name: &str,
    grace: Duration,
) -> Result<(), Error> {
    let until = k8s_openapi::jiff::Timestamp::now()
        .checked_add(grace)
        .unwrap_or(k8s_openapi::jiff::Timestamp::MAX);
    let patch = release_patch(until);
    match reservations
        .patch(name, &patch_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn pool_paused(ctx: &Context, pool: &PoolKey) -> bool {
    ctx.stores.pool(pool).is_some_and(|p| p.is_paused())
}

fn forget(ctx: &Context, pool: &PoolKey, key: &ObjectKey) {
    ctx.update_registry(|registry| registry.forget_claim(pool, key));
}

async fn ensure_finalizer(claim: &CachedClaim, ctx: &Context) -> Result<(), Error> {
    // Read on every reconcile: only a claim without it pays for the finalizer list.
    if claim.has_finalizer(CLAIM_FINALIZER) {
        return Ok(());
    }
    set_claim_finalizer(claim, ctx, true).await
}

async fn remove_finalizer(claim: &CachedClaim, ctx: &Context) -> Result<(), Error> {
    set_claim_finalizer(claim, ctx, false).await
}

async fn set_claim_finalizer(
    claim: &CachedClaim,
    ctx: &Context,
    present: bool,
) -> Result<(), Error> {
    let claims: Api<IPAddressClaim> = ctx.namespaced(claim.namespace());
    let version = claim.resource_version();
    let written = finalizers::set(
        &claims,
        claim.name(),
        &claim.finalizers(),
        version.as_deref(),
        CLAIM_FINALIZER,
        present,
    )
    .await?;
    if let finalizers::Outcome::Written(written) = written {
        note_own_write(ctx, claim, &written);
    }
    Ok(())
}

/// Remembers that `written`, our write, replaced the cached `claim` (see
/// [`crate::controllers::claims::own_writes`]).
fn note_own_write(ctx: &Context, claim: &CachedClaim, written: &IPAddressClaim) {
    ctx.own_writes().record(
        claim.key(),
        claim.resource_version().as_deref(),
        written.resource_version().as_deref(),
    );
}

/// Writes `Ready` (and `addressRef`) only when they would change: no write, and no Event, per
/// retry. `lastTransitionTime` moves only when the status flips.
async fn set_ready(
    claim: &CachedClaim,
    ctx: &Context,
    status: ConditionStatus,
    reason: &str,
    message: String,
    address_ref: Option<&str>,
) -> Result<(), Error> {
    let unchanged = claim.ready_says(status, reason, &message)
        && claim.address_ref() == address_ref
        && claim.legacy_mirrors(status, reason);
    if unchanged {
        return Ok(());
    }
    let desired = DesiredCondition::new(READY_CONDITION, status, reason, message.clone())
        .observed_generation(claim.generation());
    let body = claim_status_patch(&claim.status_with_ready(desired, address_ref, now()));
    let claims: Api<IPAddressClaim> = ctx.namespaced(claim.namespace());
    let written = claims
        .patch_status(
            claim.name(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    note_own_write(ctx, claim, &written);

    if claim.ready_reason() != Some(reason) {
        let kind = if status == ConditionStatus::True {
            EventType::Normal
        } else {
            EventType::Warning
        };
        publish(ctx, claim, kind, reason, message).await;
        if status == ConditionStatus::True {
            if let Some(created) = claim.creation_timestamp() {
                let seconds = (now().0 - created.0)
                    .total(k8s_openapi::jiff::Unit::Second)
                    .unwrap_or(0.0);
                ctx.metrics.claim_ready_latency(seconds.max(0.0));
            }
        } else {
            ctx.metrics.failure(reason);
        }
    }
    Ok(())
}

async fn publish(ctx: &Context, claim: &CachedClaim, type_: EventType, reason: &str, note: String) {
    let reference: ObjectReference = claim.object_reference();
    if let Err(e) = ctx.events.publish(reference, type_, reason, note).await {
        tracing::debug!(error = %e, "could not publish an event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{IPPoolReference, PoolKind};

    fn address(text: &str, prefix: i32) -> IPAddress {
        IPAddress::new(
            "x",
            IPAddressSpec {
                address: text.to_string(),
                claim_ref: IPAddressClaimReference {
                    name: "x".to_string(),
                },
                gateway: None,
                pool_ref: IPPoolReference::new(IPAM_GROUP, "InClusterPrefixPool", "p"),
                prefix,
            },
        )
    }

    fn misfit(text: &str, prefix: i32) -> Option<String> {
        let pool = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "p").unwrap();
        let ip: IpAddr = text.parse().unwrap();
        misfit_sub_prefix(
            &ObjectKey::new("ns", "x"),
            &pool,
            &address(text, prefix),
            ip,
            64,
        )
    }

    #[test]
    fn only_an_aligned_ipv6_sub_prefix_of_the_pools_length_is_adopted() {
        assert_eq!(misfit("fd20::", 64), None);
        assert_eq!(misfit("fd20:0:0:7::", 64), None);
        assert_eq!(
            misfit("fd20::", 48).as_deref(),
            Some(
                "IPAddress ns/x holds fd20::/48, not a /64 sub-prefix of InClusterPrefixPool ns/p \
                 (allocationPrefixLength 64); delete it or the claim"
            )
        );
        let misaligned = misfit("fd20::5", 64).expect("misaligned");
        assert!(misaligned.contains("holds fd20::5/64"), "{misaligned}");
        let v4 = misfit("10.0.0.0", 64).expect("IPv4");
        assert!(v4.contains("holds 10.0.0.0/64"), "{v4}");
    }

    fn owned_by(mut address: IPAddress, claim_uid: &str) -> IPAddress {
        address.metadata.owner_references = Some(vec![
            OwnerReference {
                kind: "IPAddressClaim".into(),
                name: "x".into(),
                uid: claim_uid.into(),
                controller: Some(true),
                ..OwnerReference::default()
            },
            OwnerReference {
                kind: "InClusterPrefixPool".into(),
                name: "p".into(),
                uid: "pool-uid".into(),
                controller: Some(false),
                ..OwnerReference::default()
            },
        ]);
        address
    }

    #[test]
    fn only_the_address_a_create_sent_counts_as_its_own_when_it_meets_already_exists() {
        let sent = owned_by(address("fd20::", 64), "claim-uid");
        assert!(is_same_address(&sent, &sent));

        let other_claim = owned_by(address("fd20::", 64), "earlier-claim-uid");
        assert!(
            !is_same_address(&other_claim, &sent),
            "a claim of the same name before"
        );
        let unowned = address("fd20::", 64);
        assert!(!is_same_address(&unowned, &sent), "made by hand");
        assert!(!is_same_address(&sent, &unowned), "no claim to compare");
        let other_address = owned_by(address("fd20:0:0:1::", 64), "claim-uid");
        assert!(!is_same_address(&other_address, &sent), "another address");
        let mut deleting = sent.clone();
        deleting.metadata.deletion_timestamp = Some(now());
        assert!(!is_same_address(&deleting, &sent), "on its way out");
    }
}
