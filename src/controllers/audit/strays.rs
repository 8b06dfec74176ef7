//! Stray reservations, collected on evidence: each reservation no live `IPAddress` holds is
//! judged against the API server (never the cache alone): deleted when it can never become an
//! `IPAddress`, recovered by its claim when it may, left alone otherwise. At every audit from its
//! lists, and between audits for the pools [`evidence`](super::evidence) names.
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::{Resource, ResourceExt};

use super::drift::Snapshot;
use crate::api::ObjectKey;
use crate::api::{IPAddress, IPAddressClaim};
use crate::controllers::context::Context;
use crate::controllers::runtime::error::Error;
use crate::controllers::state::HoldRecord;
use crate::controllers::state::facts;
use crate::controllers::state::reservation::{IPAddressReservation, hold_of, records_claim};

/// Settles each reservation of the audit's lists that no live `IPAddress` holds (see the audit's
/// module docs); returns how many were stray and deleted.
pub(super) async fn collect_strays(ctx: &Context, snapshot: &Snapshot) -> Result<usize, Error> {
    let mut collected = 0;
    for reservation in &snapshot.unheld {
        if settle_unheld(ctx, reservation, "audit").await? {
            collected += 1;
        }
    }
    Ok(collected)
}

/// How long a stray check waits after it is asked for: the watches catch up with the writes
/// that made the evidence, and requests for other pools made meanwhile join the same check.
pub(super) const EVIDENCE_SETTLE: Duration = Duration::from_secs(1);

/// Settles the unheld reservations of the pools [`evidence::StrayChecks`](super::evidence::StrayChecks) names, as they are named.
pub(super) async fn collect_strays_on_evidence(ctx: &Context) {
    loop {
        ctx.strays.requested.notified().await;
        tokio::time::sleep(EVIDENCE_SETTLE).await;
        let suspects: Vec<(String, HoldRecord)> = {
            let pools = ctx.strays.take();
            let registry = ctx.registry();
            pools
                .iter()
                .flat_map(|pool| registry.unheld_reservations(pool))
                .filter(|(_, record)| is_ours(ctx, record))
                .collect()
        };
        for (name, _) in suspects {
            let reservations: Api<IPAddressReservation> = Api::all(ctx.client.clone());
            let settled = match reservations.get_opt(&name).await {
                Ok(Some(live)) if !live.is_released() => {
                    settle_unheld(ctx, &live, "evidence").await.map(|_| ())
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e.into()),
            };
            if let Err(e) = settled {
                ctx.metrics.reconcile_error("audit", e.metric_label());
                tracing::warn!(reservation = %name, error = %e, "could not settle a reservation no IPAddress holds; the audit tries again");
            }
        }
    }
}

/// Whether the reservation's claim is one this process may judge (a namespace split leaves
/// another process's claims to it).
pub(super) fn is_ours(ctx: &Context, record: &HoldRecord) -> bool {
    let claim = record.holder.claim();
    ctx.settings
        .namespace
        .as_ref()
        .is_none_or(|ns| claim.is_some_and(|c| *c.namespace == **ns))
}

/// What became of a reservation that no live `IPAddress` holds, as the API server tells it.
pub(super) enum Fate {
    /// It can never become an `IPAddress`: delete it. Says why.
    Stray(&'static str),
    /// Its claim exists without an `IPAddress`: a live writer may be between its two creates, or
    /// the claim may recover it.
    Recoverable,
    /// Its claim's `IPAddress` holds it.
    Held,
}

/// Settles one reservation that no live `IPAddress` holds, found by `found_by` (see the audit's
/// module docs): deletes it if it is stray, wakes its claim if the claim should recover it. Returns
/// whether it was deleted.
pub(super) async fn settle_unheld(
    ctx: &Context,
    reservation: &IPAddressReservation,
    found_by: &'static str,
) -> Result<bool, Error> {
    let claim = ObjectKey::new(
        &reservation.spec.claim_namespace,
        &reservation.spec.claim_name,
    );
    match fate(ctx, reservation, &claim).await? {
        Fate::Stray(why) => delete_stray(ctx, reservation, &claim, why, found_by).await,
        Fate::Recoverable => {
            if should_recover(ctx, reservation, &claim) {
                ctx.wake([claim]);
            }
            Ok(false)
        }
        Fate::Held => Ok(false),
    }
}

/// The authoritative test, against the API server.
pub(super) async fn fate(
    ctx: &Context,
    reservation: &IPAddressReservation,
    claim: &ObjectKey,
) -> Result<Fate, Error> {
    let claims: Api<IPAddressClaim> = ctx.namespaced(&claim.namespace);
    let Some(live) = claims.get_opt(&claim.name).await? else {
        return Ok(Fate::Stray("its claim is gone"));
    };
    if !records_claim(
        reservation,
        &claim.namespace,
        &claim.name,
        live.uid().as_deref(),
    ) {
        return Ok(Fate::Stray(
            "its claim is gone (another claim of the same name exists)",
        ));
    }
    let addresses: Api<IPAddress> = ctx.namespaced(&claim.namespace);
    let address = addresses
        .get_opt(&claim.name)
        .await?
        .filter(|a| a.meta().deletion_timestamp.is_none());
    let reserved = reservation.spec.address.parse::<IpAddr>().ok();
    Ok(match address {
        None => Fate::Recoverable,
        Some(a) if a.spec.address.parse::<IpAddr>().ok() == reserved => Fate::Held,
        Some(_) => Fate::Stray("its claim's IPAddress holds another address"),
    })
}

/// Whether a claim that exists without an `IPAddress` should be woken to recover its
/// reservation: it is served here and waits in its pool's queue (no writer of this process is on
/// it), or the reservation is older than `--stray-reservation-age` (a live writer would have
/// created the `IPAddress` by then).
pub(super) fn should_recover(
    ctx: &Context,
    reservation: &IPAddressReservation,
    claim: &ObjectKey,
) -> bool {
    let Some(cached) = ctx.stores.claim(claim) else {
        return false;
    };
    let waiting = hold_of(reservation).is_some_and(|hold| {
        let queued = facts::queued(cached.creation_timestamp(), claim);
        ctx.registry().is_waiting(&hold.pool, &queued)
    });
    waiting
        || old_enough(
            reservation,
            Timestamp::now(),
            ctx.settings.stray_reservation_age,
        )
}

/// Deletes a stray reservation with its UID and resourceVersion as preconditions; returns
/// whether it was deleted (not if it is gone already or changed since it was read).
pub(super) async fn delete_stray(
    ctx: &Context,
    reservation: &IPAddressReservation,
    claim: &ObjectKey,
    why: &'static str,
    found_by: &'static str,
) -> Result<bool, Error> {
    let api: Api<IPAddressReservation> = Api::all(ctx.client.clone());
    let preconditions = DeleteParams {
        preconditions: Some(Preconditions {
            uid: reservation.uid(),
            resource_version: reservation.resource_version(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(&reservation.name_any(), &preconditions).await {
        Ok(_) => {
            tracing::info!(
                reservation = %reservation.name_any(),
                address = %reservation.spec.address,
                %claim,
                why,
                found_by,
                "deleted a stray reservation"
            );
            ctx.metrics.stray_reservation_collected();
            Ok(true)
        }
        // Gone already, or changed since it was read: not ours to delete now.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

pub(super) fn old_enough(object: &impl Resource, now: Timestamp, min_age: Duration) -> bool {
    object
        .meta()
        .creation_timestamp
        .as_ref()
        .is_some_and(|created| {
            now.duration_since(created.0)
                .try_into()
                .is_ok_and(|age: Duration| age >= min_age)
        })
}
