//! The claim's lifecycle around its allocation: the pause and Cluster gates, whether the claim
//! is still live, and the claim's finalizer. It decides nothing about addresses.

use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use crate::api::{CLAIM_FINALIZER, IPAddressClaim, PAUSED_ANNOTATION};
use crate::api::{ObjectKey, PoolKey};
use crate::controllers::claims::cached_claim::CachedClaim;
use crate::controllers::context::Context;
use crate::controllers::runtime::error::Error;
use crate::controllers::runtime::finalizers;

pub(super) enum Gate {
    Open,
    Paused,
    ClusterMissing(String),
}

/// Pause rules: the claim's or its Cluster's paused annotation, or `spec.paused`. A claim names
/// no Cluster → not paused. A named Cluster that does not exist blocks live claims only.
pub(super) fn gate(claim: &CachedClaim, ctx: &Context) -> Gate {
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

/// Whether the claim exists on the API server, not deleting, with the cached object's UID.
pub(super) async fn is_live(claim: &CachedClaim, ctx: &Context) -> Result<bool, Error> {
    let claims: Api<IPAddressClaim> = ctx.namespaced(claim.namespace());
    Ok(claims
        .get_opt(claim.name())
        .await?
        .is_some_and(|live| live.uid() == claim.uid() && live.meta().deletion_timestamp.is_none()))
}

pub(super) fn pool_paused(ctx: &Context, pool: &PoolKey) -> bool {
    ctx.stores.pool(pool).is_some_and(|p| p.is_paused())
}

pub(super) fn forget(ctx: &Context, pool: &PoolKey, key: &ObjectKey) {
    ctx.update_registry(|registry| registry.forget_claim(pool, key));
}

pub(super) async fn ensure_finalizer(claim: &CachedClaim, ctx: &Context) -> Result<(), Error> {
    // Read on every reconcile: only a claim without it pays for the finalizer list.
    if claim.has_finalizer(CLAIM_FINALIZER) {
        return Ok(());
    }
    set_claim_finalizer(claim, ctx, true).await
}

pub(super) async fn remove_finalizer(claim: &CachedClaim, ctx: &Context) -> Result<(), Error> {
    set_claim_finalizer(claim, ctx, false).await
}

pub(super) async fn set_claim_finalizer(
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
pub(super) fn note_own_write(ctx: &Context, claim: &CachedClaim, written: &IPAddressClaim) {
    ctx.own_writes().record(
        claim.key(),
        claim.resource_version().as_deref(),
        written.resource_version().as_deref(),
    );
}
