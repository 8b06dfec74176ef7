//! The pools' `addressReuseGracePeriodSeconds`: a released claim's reservation stays (labelled
//! released, with the time its address becomes reusable) while the claim itself finishes
//! deleting at once; this controller deletes it when that time comes, and the reservation watch
//! then frees the address and wakes the claims waiting for it. It watches only released
//! reservations, and after a restart the initial list finds them again.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};

use crate::controllers::context::Context;
use crate::controllers::runtime::controller::Action;
use crate::controllers::runtime::error::{self, Error};
use crate::controllers::state::reservation::IPAddressReservation;

#[tracing::instrument(skip_all, fields(reservation = %reservation.name_any()))]
pub async fn reconcile(
    reservation: Arc<IPAddressReservation>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let result = free_when_due(&reservation, &ctx).await;
    error::settle("reuse-grace", &*reservation, &ctx, result)
}

async fn free_when_due(reservation: &IPAddressReservation, ctx: &Context) -> Result<Action, Error> {
    let name = reservation.name_any();
    let until = reservation.reusable_after();
    if let Some(wait) = time_left(until, Timestamp::now()) {
        return Ok(Action::requeue(wait));
    }
    if until.is_none() {
        tracing::warn!(reservation = %name, "released reservation has no readable reusable-after time; freeing its address now");
    }
    let api: Api<IPAddressReservation> = Api::all(ctx.client.clone());
    // Only this released reservation: once it is gone, a claim may reserve the address under the
    // same name at once, and a late second reconcile from the cache must not delete that one.
    let this_one = DeleteParams {
        preconditions: Some(Preconditions {
            uid: reservation.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &this_one).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            return Ok(Action::await_change());
        }
        Err(e) => return Err(e.into()),
    }
    tracing::info!(reservation = %name, address = %reservation.spec.address, "reuse grace period over; address freed");
    Ok(Action::await_change())
}

pub fn error_policy(
    reservation: Arc<IPAddressReservation>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    error::error_policy("reuse-grace", &*reservation, error, &ctx)
}

/// How long until `until`, or `None` when it is due (or unknown: never hold an address forever).
fn time_left(until: Option<Timestamp>, now: Timestamp) -> Option<Duration> {
    let left = until?.duration_since(now);
    (left.is_positive()).then(|| Duration::try_from(left).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_address_waits_until_its_time_and_an_unknown_time_is_due_now() {
        let now: Timestamp = "2026-11-30T12:00:00Z".parse().unwrap();
        let later: Timestamp = "2026-11-30T12:00:30Z".parse().unwrap();
        assert_eq!(time_left(Some(later), now), Some(Duration::from_secs(30)));
        assert_eq!(time_left(Some(now), now), None);
        assert_eq!(time_left(Some(now), later), None);
        assert_eq!(time_left(None, now), None);
    }
}
