//! Pools carved from a parent (`spec.parentPool`): the pool controller's part for a pool (of any
//! kind) that names a prefix pool as its parent.
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
//! The pool is reconciled again when the `IPAddress` of one of its claims comes or goes (the
//! registry marks it, see [`crate::api::carve::carving_pool`]), and after [`RECHECK`] while a
//! claim it wants is missing from the cache or being deleted: no event of its own is sure to
//! follow those.
//!
//! Everything is read from the caches and the registry, and every write is idempotent: after a
//! crash between any two steps the next reconcile finds what the cluster holds and goes on. A
//! pool being deleted makes no claims; once it is gone, the garbage collector deletes its claims
//! (their owner is gone) and the claim controller releases their sub-prefixes.
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use crate::api::carve::carve_claim_name;
use crate::api::{
    CarvedPrefix, IPAM_GROUP, IPAddressClaim, IPAddressClaimSpec, IPPoolReference,
    MAX_ADDITIONAL_SUBNETS, ObjectKey, POOL_VERSION, PoolKey, WATCH_FILTER_LABEL,
};
use crate::controllers::context::Context;
use crate::controllers::runtime::delete_if_present;
use crate::controllers::runtime::error::Error;
use crate::controllers::sources::pool_cache::{Carving, PoolView};

/// What [`carve`] found: the sub-prefixes the pool's claims hold, in claim order, for
/// `status.carvedPrefixes`, and whether a claim it wants is not there yet or still going.
pub struct Carved {
    pub prefixes: Vec<CarvedPrefix>,
    /// A wanted claim is missing from the cache (just created, or the cache is behind) or being
    /// deleted (a new one is made once it is gone). No event of the pool's own follows either
    /// for sure, so the pool looks again after [`RECHECK`].
    pub settling: bool,
}

/// Why the pool's claims on its parent would be out of this run's view, if they would: in a
/// namespace other than the one it serves (`--namespace`). None is made then, and the pool's
/// Ready condition says so.
pub fn out_of_view(carving: &Carving, ctx: &Context) -> Option<String> {
    let served = ctx.settings.namespace.as_deref()?;
    (carving.claim_namespace != served).then(|| {
        format!(
            "its claims on the parent would be in namespace {}, which this inpool does not serve (--namespace {served}): make spec.parentPool.claimNamespace {served}",
            carving.claim_namespace
        )
    })
}

/// How soon a pool whose claims on its parent are [`Carved::settling`] looks again.
pub const RECHECK: Duration = Duration::from_secs(2);

/// Brings the pool's claims on its parent to what `carving` asks and returns what they hold.
pub async fn carve(pool: &PoolView, carving: &Carving, ctx: &Context) -> Result<Carved, Error> {
    let key = pool.key();
    let claims: Api<IPAddressClaim> = ctx.namespaced(&carving.claim_namespace);
    let wanted = if pool.is_deleting() { 0 } else { carving.count };
    let mut carved = Carved {
        prefixes: Vec::new(),
        settling: false,
    };
    if out_of_view(carving, ctx).is_some() {
        return Ok(carved);
    }
    for index in 0..MAX_ADDITIONAL_SUBNETS {
        let name = carve_claim_name(key, index);
        let claim_key = ObjectKey::new(&carving.claim_namespace, &name);
        let Some(claim) = ctx.stores.claim(&claim_key) else {
            if index < wanted {
                // Made now, or already there: the cache shows it soon, unless it lacks the
                // watch filter's label (made before the run had a filter), which it is given.
                // A claim of that name someone else made is not touched, and not waited for.
                carved.settling |= match create_claim(&claims, pool, carving, &name, ctx).await? {
                    Created::Now => true,
                    Created::Before => label_if_owned(&claims, &name, pool, ctx).await?,
                };
            }
            continue;
        };
        if claim.is_deleting() {
            // Deleted (by hand, or below): its sub-prefix is dropped, so that no new address
            // comes from it, and a new claim is made once it is gone.
            carved.settling |= index < wanted;
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
            carved.prefixes.push(CarvedPrefix {
                claim_name: name,
                prefix: format!("{}/{}", held.ip, held.length),
            });
        }
    }
    Ok(carved)
}

/// Whether the pool owns `claim`: the names are the pool's, but a claim someone else made under
/// one is not the pool's to change. Read afresh, as the claim cache keeps no owners.
fn owns(pool: &PoolView, claim: &IPAddressClaim) -> bool {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| Some(owner.uid.as_str()) == pool.uid())
}

/// Deletes claim `name` if the pool owns it.
async fn delete_if_owned(
    claims: &Api<IPAddressClaim>,
    name: &str,
    pool: &PoolView,
) -> Result<(), Error> {
    if claims.get_opt(name).await?.is_some_and(|c| owns(pool, &c)) {
        delete_if_present(claims, name).await?;
    }
    Ok(())
}

/// Gives claim `name`, if the pool owns it, the label of the run's `--watch-filter` when it
/// lacks it; returns whether the claim is the pool's (and so will be seen).
async fn label_if_owned(
    claims: &Api<IPAddressClaim>,
    name: &str,
    pool: &PoolView,
    ctx: &Context,
) -> Result<bool, Error> {
    let Some(claim) = claims.get_opt(name).await?.filter(|c| owns(pool, c)) else {
        return Ok(false);
    };
    if let Some(value) = &ctx.settings.watch_filter
        && claim.labels().get(WATCH_FILTER_LABEL) != Some(value)
    {
        let patch = serde_json::json!({"metadata": {"labels": {WATCH_FILTER_LABEL: value}}});
        claims
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(true)
}

/// Whether [`create_claim`] made the claim or found it there.
enum Created {
    Now,
    Before,
}

/// Creates claim `name` on the parent, owned by the pool, with the label of the run's
/// `--watch-filter` if it has one (else the claim watch would never see it); one that exists
/// already is left as it is.
async fn create_claim(
    claims: &Api<IPAddressClaim>,
    pool: &PoolView,
    carving: &Carving,
    name: &str,
    ctx: &Context,
) -> Result<Created, Error> {
    let labels = ctx
        .settings
        .watch_filter
        .as_ref()
        .map(|value| [(WATCH_FILTER_LABEL.to_string(), value.clone())].into());
    let claim = IPAddressClaim {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(carving.claim_namespace.clone()),
            owner_references: Some(vec![owner(pool)]),
            labels,
            ..ObjectMeta::default()
        },
        spec: IPAddressClaimSpec {
            cluster_name: None,
            pool_ref: pool_ref(&carving.parent),
        },
        status: None,
    };
    match claims.create(&PostParams::default(), &claim).await {
        Ok(_) => Ok(Created::Now),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Created::Before),
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
