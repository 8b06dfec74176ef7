//! [`run`]: the wiring of the watches, the feed, the reconcilers and the audit around one
//! [`Context`], for as long as this process leads.
use std::sync::Arc;

use futures::channel::mpsc;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};

use super::claims::cache::{CacheWriter, ClaimCache};
use super::context::Context;
use super::runtime::controller::Controller;
use super::sources::{claim_watch, served, watch};
use super::{audit, claims, feed, pools};
use crate::settings::Settings;
use crate::telemetry::{HealthState, Metrics};

/// Runs the controllers and the watches that feed them until the future is dropped (for example
/// when the leader lease is lost) or a task fails. One watch per kind: the claims' here, driven by
/// the claim controller; the others in `watch::start`, shared with the pool and reuse-grace
/// controllers.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Metrics,
    health: HealthState,
) -> anyhow::Result<()> {
    let (wake_tx, wake_rx) = mpsc::unbounded();
    let claim_cache = ClaimCache::default();
    let claim_writer = CacheWriter::new(claim_cache.clone());
    let claims = claim_watch::open(&client, &settings);
    // A prefix kind without its CRD or RBAC is skipped, not watched in vain (see `served`).
    let served = served::discover(&client, &settings, &metrics).await?;
    let (stores, feeds, subscriptions) = watch::start(&client, &settings, claim_cache, &served);
    let ctx = Arc::new(Context::new(
        client, settings, metrics, stores, served, wake_tx,
    ));
    // The feed is part of this future, not a detached task: when the future is dropped (lease
    // lost), the watches and the registry go with it.
    let feeding = feed::feed(ctx.clone(), feeds);
    let started = std::time::Instant::now();
    let controlling = async {
        // Allocating before every held address is known could pick one that is taken. The
        // claim watch opens only now too (see [`controller`]).
        ctx.stores.wait_until_ready().await?;
        // Nothing is allocated before the first look for another provider's Lease.
        let looking = look_for_lease(&ctx).await;
        health.set_caches_synced(true);
        tracing::info!(
            seconds = started.elapsed().as_secs_f64(),
            "pools, Clusters, reservations and IPAddresses listed"
        );
        let claims = claims::controller::claim_controller(claims, claim_writer, &ctx)
            .reconcile_on(wake_rx)
            .concurrency(ctx.settings.concurrency)
            .run(
                claims::reconcile::reconcile,
                claims::reconcile::error_policy,
                ctx.clone(),
            );
        // The pool and reuse-grace controllers share the feed's watches (see `watch`).
        let pools = pools::run(subscriptions.pools, &ctx);
        let (released, requests) = subscriptions
            .released
            .requests(|reservation| reservation.name_any());
        let released = Controller::new("ipaddressreservation", requests, move |name: &String| {
            released.get(&ObjectRef::new(name))
        })
        .run(
            pools::reuse_grace::reconcile,
            pools::reuse_grace::error_policy,
            ctx.clone(),
        );
        let audits = audit::run(ctx.clone());
        let lease_looks = async {
            if looking {
                follow_lease(ctx.clone()).await;
            }
        };
        futures::join!(claims, pools, released, audits, lease_looks);
        anyhow::Ok(())
    };
    tokio::select! {
        result = controlling => result,
        result = feeding => result.and(Err(anyhow::anyhow!("the watch streams ended"))),
    }
}

/// Looks for the reference provider's Lease once, and wakes the claims that wait for an address
/// when it is gone; returns whether to follow it (no when this process may not list Leases).
async fn look_for_lease(ctx: &Context) -> bool {
    let look = ctx.writers.look_for_lease(&ctx.client, &ctx.metrics).await;
    if look.opened {
        ctx.wake(
            ctx.stores
                .claims
                .keys_where(|c| c.address_ref().is_none() && !c.is_deleting()),
        );
    }
    look.keep_looking
}

/// Follows the reference provider's Lease from the first look on, waking the claims that wait
/// for an address whenever it is gone or expired, until the run ends.
async fn follow_lease(ctx: Arc<Context>) {
    let wake = || {
        ctx.wake(
            ctx.stores
                .claims
                .keys_where(|c| c.address_ref().is_none() && !c.is_deleting()),
        );
    };
    ctx.writers
        .follow_lease(&ctx.client, &ctx.metrics, wake)
        .await;
}
