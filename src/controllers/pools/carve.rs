//! Pools carved from a parent (`spec.parentPool`): the pool controller's part for an IP pool that
//! names a prefix pool as its parent.
//!
//! The pool holds `subPrefixes` sub-prefixes of the parent through ordinary claims on it, named
//! by [`crate::api::carve`] and owned by the pool, so that a sub-prefix gets what any claim gets:
//! a reservation that makes the API server refuse a second holder, adoption after a restart, the
//! audit, and a `Ready` condition that says why it waits. Each reconcile of the pool:
//!
//! 1. creates the claims it lacks (an existing one of that name is taken as it is);
//! 2. deletes the ones it owns beyond `subPrefixes` or on a parent it no longer names; the claim
//!    controller releases such a claim only once the pool neither hands out nor holds an address
//!    in its sub-prefix (see [`crate::controllers::state::Registry::holds_within`]);
//! 3. returns the sub-prefixes of its claims that are realised, wanted and not being deleted:
//!    `status.carvedPrefixes`, which the pool's parsed spec reads back as its subnets
//!    ([`crate::controllers::state::facts::parse_pool`]).
//!
//! Everything is read from the caches and the registry, and every write is idempotent: after a
//! crash between any two steps the next reconcile finds what the cluster holds and goes on. A
//! pool being deleted makes no claims; once it is gone, the garbage collector deletes its claims
//! (their owner is gone) and the claim controller releases their sub-prefixes.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::api::carve::carve_claim_name;
use crate::api::{
    CarvedPrefix, IPAM_GROUP, IPAddressClaim, IPAddressClaimSpec, IPPoolReference,
    MAX_ADDITIONAL_SUBNETS, ObjectKey, POOL_VERSION, PoolKey,
};
use crate::controllers::context::Context;
use crate::controllers::runtime::delete_if_present;
use crate::controllers::runtime::error::Error;
use crate::controllers::sources::pool_cache::{Carving, PoolView};

/// Brings the pool's claims on its parent to what `carving` asks and returns the sub-prefixes
/// they hold, in claim order, for `status.carvedPrefixes`.
pub async fn carve(
    pool: &PoolView,
    carving: &Carving,
    ctx: &Context,
) -> Result<Vec<CarvedPrefix>, Error> {
    let key = pool.key();
    let claims: Api<IPAddressClaim> = ctx.namespaced(&carving.claim_namespace);
    let wanted = if pool.is_deleting() { 0 } else { carving.count };
    let mut carved = Vec::new();
    for index in 0..MAX_ADDITIONAL_SUBNETS {
        let Some(name) = carve_claim_name(key, index) else {
            return Ok(carved);
        };
        let claim_key = ObjectKey::new(&carving.claim_namespace, &name);
        let Some(claim) = ctx.stores.claim(&claim_key) else {
            if index < wanted {
                create_claim(&claims, pool, carving, &name).await?;
            }
            continue;
        };
        if claim.is_deleting() {
            // Deleted (by hand, or below): its sub-prefix is dropped, so that no new address
            // comes from it, and a new claim is made once it is gone.
            continue;
        }
        if index >= wanted || claim.pool() != &carving.parent {
            // Beyond `subPrefixes`, or on a parent the pool no longer names: let it go (it is
            // released once no address of the pool is left in it).
            delete_if_owned(&claims, &name, pool).await?;
            continue;
        }
        let held = ctx.registry().address_of(&claim_key).cloned();
        if let Some(held) = held.filter(|held| held.pool == carving.parent) {
            carved.push(CarvedPrefix {
                claim_name: name,
                prefix: format!("{}/{}", held.ip, held.length),
            });
        }
    }
    Ok(carved)
}

/// Deletes claim `name` if the pool owns it: the names are the pool's, but a claim someone else
/// made under one is not deleted. Read afresh, as the claim cache keeps no owners.
async fn delete_if_owned(
    claims: &Api<IPAddressClaim>,
    name: &str,
    pool: &PoolView,
) -> Result<(), Error> {
    let owned = claims.get_opt(name).await?.is_some_and(|claim| {
        claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|owner| Some(owner.uid.as_str()) == pool.uid())
    });
    if owned {
        delete_if_present(claims, name).await?;
    }
    Ok(())
}

/// Creates claim `name` on the parent, owned by the pool; one that exists already is left as it
/// is (the cache had not seen it yet).
async fn create_claim(
    claims: &Api<IPAddressClaim>,
    pool: &PoolView,
    carving: &Carving,
    name: &str,
) -> Result<(), Error> {
    let claim = IPAddressClaim {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(carving.claim_namespace.clone()),
            owner_references: Some(vec![owner(pool)]),
            ..ObjectMeta::default()
        },
        spec: IPAddressClaimSpec {
            cluster_name: None,
            pool_ref: pool_ref(&carving.parent),
        },
        status: None,
    };
    match claims.create(&PostParams::default(), &claim).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The pool as its claims' owner: their controller, so that they go with it.
fn owner(pool: &PoolView) -> OwnerReference {
    OwnerReference {
        api_version: format!("{IPAM_GROUP}/{POOL_VERSION}"),
        kind: pool.key().kind.name().to_string(),
        name: pool.key().name.to_string(),
        uid: pool.uid().unwrap_or_default().to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn pool_ref(parent: &PoolKey) -> IPPoolReference {
    IPPoolReference::new(IPAM_GROUP, parent.kind.name(), parent.name.to_string())
}
