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
//!
//! One concern per file: [`lifecycle`] (pause and Cluster gates, the claim's finalizer),
//! [`allocate`] (recover or reserve an address, then create its `IPAddress`),
//! [`adopt`](mod@adopt) (an existing `IPAddress`), [`release`](mod@release) (a deleted claim),
//! [`conditions`] (`Ready` and the Events that go with it). This file runs them in order; what
//! they hold is called from this folder only.
mod adopt;
mod allocate;
mod conditions;
mod lifecycle;
mod release;

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;

use crate::api::{
    IPAddress, REASON_ALLOCATION_FAILED, REASON_POOL_EXHAUSTED, REASON_POOL_NOT_READY,
};
use crate::api::{ObjectKey, PoolKey};
use crate::controllers::claims::cached_claim::CachedClaim;
use crate::controllers::claims::messages::{
    exhausted_message, not_ready_message, pre_allocation_conflict_message,
};
use crate::controllers::context::{Context, Learning};
use crate::controllers::runtime::controller::Action;
use crate::controllers::runtime::error::{Error, retry_delay, settle_named};
use crate::controllers::runtime::events::EventType;
use crate::controllers::state::Allocation;
use crate::controllers::state::facts::{self};
use crate::controllers::state::plan::{self, Step};
use adopt::adopt;
use allocate::is_claims_reservation;
use conditions::{fail, publish, ready};
use lifecycle::{Gate, ensure_finalizer, forget, gate, is_live, pool_paused};
use release::release;

/// What the writes of one claim's allocation share: the claim, its key and pool, the
/// controller's context, and the registry learning what the API server answers them.
struct Placing<'a> {
    claim: &'a CachedClaim,
    key: &'a ObjectKey,
    pool: &'a PoolKey,
    ctx: &'a Context,
    learning: Learning<'a>,
}

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
    let placing = Placing {
        claim,
        key,
        pool,
        ctx,
        learning: ctx.learning(),
    };
    let addresses: Api<IPAddress> = ctx.namespaced(&key.namespace);
    if let Some(existing) = addresses.get_opt(&key.name).await? {
        return adopt(&placing, &existing).await;
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
                        placing.create_address(ip, &reservation).await.map(Some)
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
                        let Some(reservation) = placing.reserve(ip, &scope).await? else {
                            return Ok(None);
                        };
                        placing.create_address(ip, &reservation).await.map(Some)
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

#[cfg(test)]
mod tests;
