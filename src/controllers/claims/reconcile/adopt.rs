//! Adoption: an `IPAddress` with the claim's name exists already (a lost answer, `clusterctl
//! move`, migration from the reference provider); it becomes the claim's when it is for the same
//! pool and claim, and its reservation is made or found.
use std::net::IpAddr;
use std::time::Duration;

use super::Placing;
use super::allocate::{allocation_length, learn_address};
use super::conditions::{fail, ready, set_ready};
use crate::allocator::{Family, Subnet};
use crate::api::{ConditionStatus, IPAddress, REASON_ALLOCATION_FAILED, REASON_POOL_NOT_READY};
use crate::api::{ObjectKey, PoolKey};
use crate::controllers::claims::cached_claim::CachedClaim;
use crate::controllers::claims::messages::not_ready_message;
use crate::controllers::runtime::controller::Action;
use crate::controllers::runtime::error::Error;
use crate::controllers::state::Unready;

/// An `IPAddress` with the claim's name exists: it is the claim's address (idempotency,
/// `clusterctl move`, migration from the reference provider) when it is for the same pool.
pub(super) async fn adopt(placing: &Placing<'_>, existing: &IPAddress) -> Result<Action, Error> {
    let Placing {
        claim,
        key,
        pool,
        ctx,
        ..
    } = *placing;
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
        let family = ctx.registry().family(pool);
        if let Some(message) = misfit_sub_prefix(key, pool, existing, ip, (family, length)) {
            return fail(claim, ctx, REASON_ALLOCATION_FAILED, message).await;
        }
    }
    let scope = ctx.registry().reservation_scope(pool, ip);
    let (name, created) = placing.create_reservation(ip, &scope).await;
    let holder = match created {
        Ok(()) => None,
        Err(kube::Error::Api(status)) if status.code == 409 => placing
            .learn_holder(&name)
            .await?
            .map(|r| ObjectKey::new(&r.spec.claim_namespace, &r.spec.claim_name))
            .filter(|holder| holder != key),
        Err(e) => return Err(e.into()),
    };
    learn_address(&placing.learning, existing);
    if let Some(holder) = holder {
        let message = format!(
            "IPAddress {key} holds {ip}, but that address is reserved for claim {holder}; one of the two must go"
        );
        return fail(claim, ctx, REASON_ALLOCATION_FAILED, message).await;
    }
    ready(claim, ctx, pool, ip).await
}

/// Why an existing `IPAddress` cannot be adopted as a sub-prefix of a prefix pool of `length`
/// and `family` (when the pool is ready and so its family known): it must hold a network of
/// exactly that length and family (as inpool and the reference write them), or the registry and
/// the reservation would disagree with what the `IPAddress` says it holds.
pub(super) fn misfit_sub_prefix(
    key: &ObjectKey,
    pool: &PoolKey,
    existing: &IPAddress,
    ip: IpAddr,
    (family, length): (Option<Family>, u8),
) -> Option<String> {
    let fits = family.is_none_or(|family| family == Family::of(ip))
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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PoolKind;
    use crate::controllers::claims::reconcile::allocate::tests::address;

    fn misfit(text: &str, prefix: i32) -> Option<String> {
        let pool = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "p").unwrap();
        let ip: IpAddr = text.parse().unwrap();
        misfit_sub_prefix(
            &ObjectKey::new("ns", "x"),
            &pool,
            &address(text, prefix),
            ip,
            (Some(Family::V6), 64),
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
}
