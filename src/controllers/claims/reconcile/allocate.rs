//! Allocation: recover a reservation the claim already holds, or reserve an address, then create
//! the claim's `IPAddress` for it. What the API server answers about a hold (a reservation
//! created or found taken, an `IPAddress`) is learnt by the registry before the watch brings it.
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use super::Placing;
use super::conditions::{create_failed, fail, ready};
use crate::allocator::canonical;
use crate::api::{
    ADDRESS_FINALIZER, CLUSTER_NAME_LABEL, IPAM_GROUP, IPAddress, IPAddressClaim,
    IPAddressClaimReference, IPAddressSpec, REASON_POOL_NOT_READY,
};
use crate::api::{PoolKey, Scope};
use crate::controllers::claims::cached_claim::CachedClaim;
use crate::controllers::context::{Context, Learning};
use crate::controllers::runtime::controller::Action;
use crate::controllers::runtime::error::Error;
use crate::controllers::runtime::{create_params, delete_if_present};
use crate::controllers::state::facts::{address_hold, address_key};
use crate::controllers::state::reservation::{
    IPAddressReservation, hold_of, new_reservation, records_claim,
};
use crate::controllers::state::{Change, HoldRecord};

/// Whether a reservation the registry says the claim holds still exists on the API server and
/// records this claim, and no other claim of the same name (a claim deleted and created again has
/// a new UID). The cache may be behind: a crash, or an `IPAddress` deleted under the claim, is
/// recovered only from a reservation that is really there.
pub(super) async fn is_claims_reservation(
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

impl Placing<'_> {
    /// Makes the API server record `ip` as held for the claim (the reservation object). Returns
    /// the reservation's name, or `None` when the address turned out taken: its holder is learnt,
    /// so the next plan picks another.
    pub(super) async fn reserve(&self, ip: IpAddr, scope: &Scope) -> Result<Option<String>, Error> {
        let (name, created) = self.create_reservation(ip, scope).await;
        match created {
            Ok(()) => Ok(Some(name)),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                // Taken by a holder the watch has not shown yet: learn it now, so that the
                // address stays used exactly as long as that holder exists.
                self.learn_holder(&name).await?;
                Ok(None)
            }
            Err(e) => {
                let object = format!("IPAddressReservation {name} for {ip}");
                Err(create_failed(self.claim, self.ctx, object, e).await)
            }
        }
    }

    /// Creates the reservation of `ip` for the claim, in `scope`, and learns it once created.
    /// Returns its name and the API server's answer; what to make of a refusal is the caller's.
    pub(super) async fn create_reservation(
        &self,
        ip: IpAddr,
        scope: &Scope,
    ) -> (String, Result<(), kube::Error>) {
        let length = held_length(self.ctx, self.pool, ip);
        let reservation = new_reservation(scope, self.pool, self.key, self.claim.uid(), ip, length);
        let name = reservation.name_any();
        let reservations: Api<IPAddressReservation> = Api::all(self.ctx.client.clone());
        let created = reservations.create(&create_params(), &reservation).await;
        if let Ok(created) = &created {
            learn_reservation(&self.learning, created);
        }
        (name, created.map(drop))
    }

    /// The reservation `name` that a create met (`409`), learnt: its holder may not have reached
    /// the watch yet. `None` when it is gone again.
    pub(super) async fn learn_holder(
        &self,
        name: &str,
    ) -> Result<Option<IPAddressReservation>, Error> {
        let reservations: Api<IPAddressReservation> = Api::all(self.ctx.client.clone());
        let live = reservations.get_opt(name).await?;
        if let Some(live) = &live {
            learn_reservation(&self.learning, live);
        }
        Ok(live)
    }

    pub(super) async fn create_address(
        &self,
        ip: IpAddr,
        reservation: &str,
    ) -> Result<Action, Error> {
        let Self {
            claim,
            key,
            pool,
            ctx,
            ..
        } = *self;
        let learning = &self.learning;
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
}

/// Applies a reservation this reconcile has just read or written, before its watch event comes
/// (the event is then a no-op): an address is marked used only through such a record.
pub(super) fn learn_reservation(learning: &Learning<'_>, reservation: &IPAddressReservation) {
    if let Some(hold) = hold_of(reservation) {
        learning.learn(Change::Reservation(reservation.name_any(), hold));
    }
}

/// The same for an `IPAddress`.
pub(super) fn learn_address(learning: &Learning<'_>, address: &IPAddress) {
    if let Some(hold) = address_hold(address) {
        learning.learn(Change::Address(address_key(address), hold));
    }
}

pub(super) async fn release_reservation(ctx: &Context, name: &str) -> Result<(), Error> {
    let reservations: Api<IPAddressReservation> = Api::all(ctx.client.clone());
    Ok(delete_if_present(&reservations, name).await?)
}

pub(super) fn build_address(
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
pub(super) fn is_same_address(existing: &IPAddress, sent: &IPAddress) -> bool {
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

pub(super) fn pool_uid(ctx: &Context, pool: &PoolKey) -> Option<String> {
    ctx.stores.pool(pool)?.uid().map(str::to_string)
}

/// The prefix length of what a claim of `pool` holds from `ip` on: its sub-prefix in a prefix
/// pool, else the address.
pub(super) fn held_length(ctx: &Context, pool: &PoolKey, ip: IpAddr) -> u8 {
    pool.kind
        .is_prefix()
        .then(|| allocation_length(ctx, pool))
        .flatten()
        .unwrap_or_else(|| HoldRecord::address_length(ip))
}

/// A prefix pool's `allocationPrefixLength`: the validated one of a ready pool, else the cached
/// object's (a paused or deleting pool keeps its spec); `None` when the pool is not known or the
/// length is out of range.
pub(super) fn allocation_length(ctx: &Context, pool: &PoolKey) -> Option<u8> {
    if let Some((length, _)) = ctx.registry().network(pool) {
        return Some(length);
    }
    ctx.stores
        .pool(pool)?
        .allocation_length()
        .and_then(|length| u8::try_from(length).ok())
        .filter(|length| (1..=128).contains(length))
}
#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::api::IPPoolReference;
    use crate::api::conditions::now;

    /// An `IPAddress` named `x` of prefix pool `p` holding `text`/`prefix`.
    pub(in crate::controllers::claims::reconcile) fn address(text: &str, prefix: i32) -> IPAddress {
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
