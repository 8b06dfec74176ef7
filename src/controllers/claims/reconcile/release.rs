//! Release: a deleted claim gives its `IPAddress` and reservations back (at once, or kept
//! released for the pool's reuse grace period), then inpool lets go of the claim's finalizer. A
//! paused claim waits; a claim on the move (`clusterctl move`) leaves its address to the target.
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use kube::ResourceExt;
use kube::api::{Api, Patch};

use super::allocate::held_length;
use super::conditions::publish;
use super::lifecycle::{Gate, gate, remove_finalizer};
use crate::allocator::Subnet;
use crate::api::carve::carving_pool;
use crate::api::{CLAIM_FINALIZER, DELETE_FOR_MOVE_ANNOTATION, IPAddress};
use crate::api::{ObjectKey, PoolKey};
use crate::controllers::claims::cached_claim::CachedClaim;
use crate::controllers::claims::messages::unit_noun;
use crate::controllers::context::Context;
use crate::controllers::runtime::controller::Action;
use crate::controllers::runtime::error::Error;
use crate::controllers::runtime::events::EventType;
use crate::controllers::runtime::finalizers;
use crate::controllers::runtime::{create_params, delete_if_present, patch_params};
use crate::controllers::state::plan::{self};
use crate::controllers::state::reservation::{
    IPAddressReservation, new_reservation, release_patch, released,
};

/// How often a deleted claim that carved a sub-prefix looks again whether the pool it carved
/// for has let go of it: a rare wait (a pool shrunk, or such a claim deleted by hand), so a plain
/// requeue.
const CARVED_RECHECK: Duration = Duration::from_secs(2);

/// A claim that carved a sub-prefix for a pool (see [`crate::api::carve`]) is released only once
/// that pool neither hands out nor holds an address in it: until then the sub-prefix stays
/// held, whoever deleted the claim, so that the parent never hands it to another pool while
/// addresses in it are out. `None` when the claim may go.
fn held_for_carving(key: &ObjectKey, pool: &PoolKey, ctx: &Context) -> Option<Action> {
    let (carving_for, _) = carving_pool(key)?;
    let registry = ctx.registry();
    let held = registry.address_of(key).filter(|held| &held.pool == pool)?;
    let block = Subnet::new(held.ip, held.length)?;
    registry
        .holds_within(&carving_for, block)
        .then(|| Action::requeue(CARVED_RECHECK))
}

/// The claim is being deleted: give the address back (unless paused or moving), then let the
/// claim go. A missing Cluster does not block this (it could never be unpaused).
pub(super) async fn release(
    claim: &CachedClaim,
    key: &ObjectKey,
    pool: &PoolKey,
    ctx: &Context,
) -> Result<Action, Error> {
    if let Some(wait) = held_for_carving(key, pool, ctx) {
        return Ok(wait);
    }
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
            let reservations: Api<IPAddressReservation> = Api::all(ctx.client.clone());
            let grace = reuse_grace_period(ctx, pool);
            if let Some(address) = address.filter(|a| *a.spec.claim_ref.name == *key.name) {
                if let Some(grace) = grace {
                    keep_unreserved(claim, key, pool, ctx, &address, &held, grace).await?;
                }
                delete_address(&addresses, &address).await?;
            }
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
pub(super) async fn delete_address(
    addresses: &Api<IPAddress>,
    address: &IPAddress,
) -> Result<(), Error> {
    finalizers::remove_address_protection(addresses, address).await?;
    Ok(delete_if_present(addresses, &address.name_any()).await?)
}

/// The pool's `addressReuseGracePeriodSeconds`, when positive and the pool is live: a pool that
/// is gone or deleting frees addresses at once (its deletion must not wait on them).
pub(super) fn reuse_grace_period(ctx: &Context, pool: &PoolKey) -> Option<Duration> {
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
pub(super) async fn keep_released(
    reservations: &Api<IPAddressReservation>,
    name: &str,
    grace: Duration,
) -> Result<(), Error> {
    let patch = release_patch(reusable_after(grace));
    match reservations
        .patch(name, &patch_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The grace period counts from the release inpool makes: a claim released while inpool was
/// down, or deleted under another provider, keeps its address at least the whole period.
fn reusable_after(grace: Duration) -> Timestamp {
    Timestamp::now()
        .checked_add(grace)
        .unwrap_or(Timestamp::MAX)
}

/// Keeps the address of a released claim's `IPAddress` that no reservation of the claim holds
/// (the claim was deleted, and held in its grace period, by the reference provider before inpool
/// took over): a released reservation is created for it, so that it is kept from every claim for
/// the pool's grace period as an address inpool allocated is. Created before the `IPAddress` is
/// deleted, so that a crash between the two leaves the address held by one or the other; `409`
/// means another holder has the address, which then stays held anyway.
async fn keep_unreserved(
    claim: &CachedClaim,
    key: &ObjectKey,
    pool: &PoolKey,
    ctx: &Context,
    address: &IPAddress,
    held: &[String],
    grace: Duration,
) -> Result<(), Error> {
    let Ok(ip) = address.spec.address.parse::<IpAddr>() else {
        return Ok(());
    };
    let scope = ctx.registry().reservation_scope(pool, ip);
    let length = held_length(ctx, pool, ip);
    let reservation = new_reservation(&scope, pool, key, claim.uid(), ip, length);
    if held.contains(&reservation.name_any()) {
        return Ok(());
    }
    let reservation = released(reservation, reusable_after(grace));
    let reservations: Api<IPAddressReservation> = Api::all(ctx.client.clone());
    match reservations.create(&create_params(), &reservation).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
