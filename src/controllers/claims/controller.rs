//! The claim controller: the claim watch, applied to the claim cache, makes its requests; its
//! reconciles read the cache, and none starts before the first list of claims is complete (see
//! `runtime::controller`).
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio::time::Instant;

use super::cache::CacheWriter;
use super::cached_claim::{CachedClaim, WatchedClaim};
use crate::api::ObjectKey;
use crate::controllers::context::Context;
use crate::controllers::runtime::controller::{Controller, Requests};
use crate::controllers::runtime::error;

/// The claim controller's name in the controller-runtime metric families: the lowercase kind it
/// reconciles, as controller-runtime names a controller.
pub const NAME: &str = "ipaddressclaim";

/// The claims' [`Controller`]: the claim watch, applied to the claim cache, makes its requests,
/// and its reconciles read the cache.
pub(crate) fn claim_controller(
    claims: impl Stream<Item = Result<watcher::Event<WatchedClaim>, watcher::Error>>,
    mut writer: CacheWriter,
    ctx: &Arc<Context>,
) -> Controller<
    ObjectKey,
    impl Stream<Item = Requests<ObjectKey>>,
    impl Fn(&ObjectKey) -> Option<Arc<CachedClaim>>,
> {
    let started = Instant::now();
    let watching = ctx.clone();
    let requests = claims.map(move |event| {
        let ctx = &watching;
        let keys = match event {
            Ok(event) => {
                let list_ends = matches!(event, watcher::Event::InitDone);
                let keys = writer.apply(event);
                let watched = ctx.stores.claims.len();
                ctx.metrics.claims_watched(watched);
                if list_ends {
                    tracing::info!(
                        claims = watched,
                        seconds = started.elapsed().as_secs_f64(),
                        "claims listed"
                    );
                }
                keys
            }
            Err(e) => {
                error::watch_failed(&**ctx, "claim", &e);
                Vec::new()
            }
        };
        Requests {
            keys,
            listed: writer.is_listed(),
        }
    });
    let reading = ctx.clone();
    Controller::new(NAME, requests, move |key: &ObjectKey| {
        reading.stores.claims.get(key)
    })
    .waits_for_its_first_list()
}
