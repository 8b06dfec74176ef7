//! What the claim says: its `Ready` condition (and `addressRef`), written only when it would
//! change, and the Events and metrics that go with a change of reason.
use std::net::IpAddr;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams};

use super::allocate::allocation_length;
use super::lifecycle::note_own_write;
use crate::api::PoolKey;
use crate::api::{
    ConditionStatus, DesiredCondition, IPAddressClaim, READY_CONDITION, REASON_ADDRESS_ALLOCATED,
    REASON_ALLOCATION_FAILED, claim_status_patch, conditions::now,
};
use crate::controllers::claims::cached_claim::CachedClaim;
use crate::controllers::claims::messages::unit_text;
use crate::controllers::context::Context;
use crate::controllers::runtime::MANAGER;
use crate::controllers::runtime::controller::Action;
use crate::controllers::runtime::error::Error;
use crate::controllers::runtime::events::EventType;

/// Creating `object` (what it is, its name and address) failed: the claim says so
/// (`Ready=False`, `AllocationFailed`, with the API server's answer) before the reconcile fails
/// and is retried. Returns the error the reconcile fails with.
pub(super) async fn create_failed(
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

/// Sets `Ready=False` with `reason` and waits for a change (no retry: an event will come).
pub(super) async fn fail(
    claim: &CachedClaim,
    ctx: &Context,
    reason: &str,
    message: String,
) -> Result<Action, Error> {
    set_ready(claim, ctx, ConditionStatus::False, reason, message, None).await?;
    if let Some((pool, _)) = crate::api::carve::carving_pool(claim.key()) {
        // The pool this claim carves for says in its Ready condition why it waits.
        ctx.update_registry(|registry| registry.touch(&pool));
    }
    Ok(Action::await_change())
}

pub(super) async fn ready(
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

/// Writes `Ready` (and `addressRef`) only when they would change: no write, and no Event, per
/// retry. `lastTransitionTime` moves only when the status flips.
pub(super) async fn set_ready(
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

pub(super) async fn publish(
    ctx: &Context,
    claim: &CachedClaim,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let reference: ObjectReference = claim.object_reference();
    if let Err(e) = ctx.events.publish(reference, type_, reason, note).await {
        tracing::debug!(error = %e, "could not publish an event");
    }
}
