//! Memory: lets go of what is kept for objects that are gone (pools no longer referred to,
//! claims that no longer wait, records of own writes and of status-write times). What a live
//! claim or a known pool may still need is kept.
use std::collections::HashSet;

use crate::api::ObjectKey;
use crate::api::PoolKey;
use crate::controllers::context::Context;

pub(super) fn forget_what_is_gone(ctx: &Context) {
    let live = |key: &ObjectKey| ctx.stores.claim(key).is_some();
    let known_pools: HashSet<PoolKey> = ctx.update_registry(|registry| {
        registry.prune_waiting_everywhere(live);
        registry.collect_garbage();
        registry.pool_keys().into_iter().collect()
    });
    ctx.own_writes().retain(live);
    ctx.pool_writes
        .lock()
        .expect("pool writes lock")
        .retain(&known_pools, std::time::Instant::now());
    drop(known_pools);
    crate::api::Name::forget_unused();
}
