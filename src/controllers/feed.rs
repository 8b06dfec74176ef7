//! The feed: what the watches of `sources` saw, applied to the shared [`Context`]. Each pool
//! kind's views go into its pool cache, every hold and pool into the registry (a fresh list as
//! the corrections it differs by), Clusters' pauses into their own map; then the claims a change
//! can serve are woken, and the pool controllers told which pools changed.
use std::sync::Arc;

use futures::StreamExt;

use super::claims::cache::ClaimCache;
use super::context::Context;
use super::runtime::error;
use super::sources::watch::{Fed, Feeds, Handed, Update};
use super::state::Change;
use crate::api::ObjectKey;

/// Applies every change to the registry and wakes the claims it can serve. Runs until a watch
/// fails for good (the default backoff retries transient errors).
pub async fn feed(ctx: Arc<Context>, Feeds(mut feeds): Feeds) -> anyhow::Result<()> {
    while let Some(handed) = feeds.next().await {
        match handed {
            Ok(Handed { fed, triggers }) => {
                apply(&ctx, fed);
                if let Some(send) = triggers {
                    send();
                }
            }
            Err(e) => {
                ctx.stores.interruptions.record();
                error::watch_failed(&ctx, "feed", &e);
            }
        }
    }
    Ok(())
}

fn apply(ctx: &Context, fed: Fed) {
    let (change, relisted) = match fed {
        Fed::Clusters { seen, complete } => {
            let woken = ctx
                .stores
                .cluster_pauses
                .update(seen, complete)
                .iter()
                .flat_map(|c| claims_of_cluster(&ctx.stores.claims, c))
                .collect::<Vec<_>>();
            ctx.wake(woken);
            return;
        }
        Fed::Registry { change, relisted } => (change, relisted),
        Fed::Pools {
            kind,
            views,
            change,
            relisted,
        } => {
            // The views first: a claim the registry change wakes reads the pool's view.
            let pools = &ctx.stores.pools;
            let cache = pools.cache(kind);
            let (changed, listed) = match views {
                Update::Applied(view) => {
                    let key = view.key().clone();
                    cache.applied(view);
                    (vec![key], false)
                }
                Update::Deleted(view) => {
                    cache.deleted(view.key());
                    (Vec::new(), false)
                }
                Update::Listed { items, .. } => {
                    let keys = items.iter().map(|view| view.key().clone()).collect();
                    cache.replace(items);
                    (keys, true)
                }
            };
            apply(ctx, Fed::Registry { change, relisted });
            // Listed once the registry has the list too: the claims wait for both.
            if listed {
                cache.mark_listed();
            }
            pools.changed(kind, changed);
            return;
        }
        Fed::Addresses {
            change,
            relisted,
            creators,
        } => {
            apply(ctx, Fed::Registry { change, relisted });
            ctx.writers
                .observe(&ctx.stores, &ctx.metrics, &ctx.events, creators);
            return;
        }
    };
    let listed = match &change {
        Change::ReservationsListed(_) => Some(&ctx.stores.holds_listed.reservations),
        Change::AddressesListed(_) => Some(&ctx.stores.holds_listed.addresses),
        Change::PoolsListed(..) => None,
        _ => {
            ctx.apply(change);
            return;
        }
    };
    let kind = change.kind();
    let corrections = ctx.registry().diff(change);
    if relisted {
        tracing::info!(
            kind,
            corrections = corrections.len(),
            "re-listed after a gap in the watch; applied what the fresh list differs by"
        );
    } else {
        tracing::debug!(kind, objects = corrections.len(), "first list applied");
    }
    for correction in corrections {
        ctx.apply(correction);
    }
    if let Some(latch) = listed {
        ctx.stores.holds_listed.open(latch);
    }
    if relisted {
        ctx.stores.relisted.notify_one();
    }
}

fn claims_of_cluster(claims: &ClaimCache, cluster: &ObjectKey) -> Vec<ObjectKey> {
    claims.keys_where(|c| {
        c.namespace() == &*cluster.namespace && c.cluster_name() == Some(&*cluster.name)
    })
}
