//! The feed: what the watches of `sources` saw, applied to the shared [`Context`]. A watch hands
//! on its kind's [`Update`] ([`Seen`]); here it becomes the [`Change`] the registry is told (a
//! fresh list as the corrections it differs by), and each kind's extras: a pool's view goes into
//! its pool cache first, Clusters' pauses into their own record, who wrote each `IPAddress` into
//! the foreign-address record. Then the claims a change can serve are woken, the pool
//! controllers told which pools changed, and the reuse-grace controller handed the released
//! reservations: all of it only once the registry has the change, so that a controller woken by
//! an update reads a registry that already knows it.
use std::sync::Arc;

use futures::StreamExt;

use super::claims::cache::ClaimCache;
use super::context::Context;
use super::runtime::error;
use super::sources::pool_cache::PoolView;
use super::sources::watch::{AddressFacts, Feeds, PoolFacts, Seen, Update};
use super::sources::writers::Creator;
use super::state::{Change, HoldRecord};
use crate::api::{ObjectKey, PoolKind};

/// Applies every update the watches see. Runs until a watch fails for good (the default backoff
/// retries transient errors).
pub async fn feed(ctx: Arc<Context>, Feeds(mut feeds): Feeds) -> anyhow::Result<()> {
    while let Some(seen) = feeds.next().await {
        match seen {
            Ok(seen) => apply(&ctx, seen),
            Err(e) => {
                ctx.stores.interruptions.record();
                error::watch_failed(&ctx, "feed", &e);
            }
        }
    }
    Ok(())
}

fn apply(ctx: &Context, seen: Seen) {
    match seen {
        Seen::Clusters(update) => {
            let (seen, complete) = cluster_pauses(update);
            let woken = ctx
                .stores
                .cluster_pauses
                .update(seen, complete)
                .iter()
                .flat_map(|c| claims_of_cluster(&ctx.stores.claims, c))
                .collect::<Vec<_>>();
            ctx.wake(woken);
        }
        Seen::Pools { kind, update } => {
            let (views, change, relisted) = pool_change(kind, update);
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
            apply_to_registry(ctx, change, relisted);
            // Listed once the registry has the list too: the claims wait for both.
            if listed {
                cache.mark_listed();
            }
            pools.changed(kind, changed);
        }
        Seen::Reservations { update, released } => {
            let (change, relisted) = RESERVATION_CHANGES.of(update);
            apply_to_registry(ctx, change, relisted);
            for reservation in released {
                // The controller is gone only when the whole run is ending.
                let _ = ctx.stores.released.unbounded_send(reservation);
            }
        }
        Seen::Addresses(update) => {
            let (holds, creators) = split_creators(update);
            let (change, relisted) = ADDRESS_CHANGES.of(holds);
            apply_to_registry(ctx, change, relisted);
            ctx.writers
                .observe(&ctx.stores, &ctx.metrics, &ctx.events, creators);
        }
    }
}

/// Applies a change; a whole list (`relisted` when it is not the watch's first) as the
/// corrections the registry differs from it by.
fn apply_to_registry(ctx: &Context, change: Change, relisted: bool) {
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

/// The pool cache's and the registry's changes for a pool update, and whether it is a re-list.
fn pool_change(kind: PoolKind, update: Update<PoolFacts>) -> (Update<Arc<PoolView>>, Change, bool) {
    match update {
        Update::Applied((key, state, view)) => {
            (Update::Applied(view), Change::Pool(key, state), false)
        }
        Update::Deleted((key, _, view)) => (Update::Deleted(view), Change::PoolGone(key), false),
        Update::Listed { items, first } => {
            let (states, views) = items
                .into_iter()
                .map(|(key, state, view)| ((key, state), view))
                .unzip();
            (
                Update::Listed {
                    items: views,
                    first,
                },
                Change::PoolsListed(kind, states),
                !first,
            )
        }
    }
}

/// The Clusters a Clusters' update tells of, each with whether it is paused (`None`: deleted),
/// and whether they are all of them (a list).
fn cluster_pauses(update: Update<(ObjectKey, bool)>) -> (Vec<(ObjectKey, Option<bool>)>, bool) {
    match update {
        Update::Applied((key, paused)) => (vec![(key, Some(paused))], false),
        Update::Deleted((key, _)) => (vec![(key, None)], false),
        Update::Listed { items, .. } => (
            items
                .into_iter()
                .map(|(key, paused)| (key, Some(paused)))
                .collect(),
            true,
        ),
    }
}

/// Who wrote each `IPAddress` an update names, when that was not inpool.
type AddressCreators = Update<(ObjectKey, Option<Creator>)>;

/// An `IPAddress` update as what it holds, and who wrote the objects it names.
fn split_creators(
    update: Update<AddressFacts>,
) -> (Update<(ObjectKey, Option<HoldRecord>)>, AddressCreators) {
    match update {
        Update::Applied((key, hold, creator)) => (
            Update::Applied((key.clone(), hold)),
            Update::Applied((key, creator)),
        ),
        Update::Deleted((key, hold, creator)) => (
            Update::Deleted((key.clone(), hold)),
            Update::Deleted((key, creator)),
        ),
        Update::Listed { items, first } => {
            let (holds, creators) = items
                .into_iter()
                .map(|(key, hold, creator)| ((key.clone(), hold), (key, creator)))
                .unzip();
            (
                Update::Listed {
                    items: holds,
                    first,
                },
                Update::Listed {
                    items: creators,
                    first,
                },
            )
        }
    }
}

/// The registry changes for objects keyed by `K` that may hold an address (a reservation, an
/// `IPAddress`): `held` for one that holds, `gone` for one that holds nothing or is deleted,
/// `listed` for a whole list of those that hold.
struct HoldChanges<K> {
    held: fn(K, HoldRecord) -> Change,
    gone: fn(K) -> Change,
    listed: fn(Vec<(K, HoldRecord)>) -> Change,
}

/// Reservations, by name.
const RESERVATION_CHANGES: HoldChanges<String> = HoldChanges {
    held: Change::Reservation,
    gone: Change::ReservationGone,
    listed: Change::ReservationsListed,
};

/// `IPAddress`es, by namespace/name.
const ADDRESS_CHANGES: HoldChanges<ObjectKey> = HoldChanges {
    held: Change::Address,
    gone: Change::AddressGone,
    listed: Change::AddressesListed,
};

impl<K> HoldChanges<K> {
    /// The registry change for `update`, and whether it is a re-list.
    fn of(&self, update: Update<(K, Option<HoldRecord>)>) -> (Change, bool) {
        let HoldChanges { held, gone, listed } = self;
        match update {
            Update::Applied((key, Some(hold))) => (held(key, hold), false),
            Update::Applied((key, None)) | Update::Deleted((key, _)) => (gone(key), false),
            Update::Listed { items, first } => (
                listed(
                    items
                        .into_iter()
                        .filter_map(|(key, hold)| Some((key, hold?)))
                        .collect(),
                ),
                !first,
            ),
        }
    }
}
