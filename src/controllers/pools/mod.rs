//! Pools: what inpool writes about each pool.
//!
//! - [`status`]: counts and conditions from the registry, deletion protection, and the per-pool
//!   metrics;
//! - [`pacing`]: when each pool's status may be written;
//! - [`reuse_grace`]: frees a released claim's address once its pool's reuse grace period is
//!   over.
pub(crate) mod pacing;
pub(crate) mod reuse_grace;
pub(crate) mod status;

use std::sync::Arc;

use crate::controllers::context::Context;
use crate::controllers::sources::pool_kinds::{LaneInput, PoolInputs, PoolObject};

/// Runs the pool controller of every served kind until the run ends.
pub async fn run(inputs: PoolInputs, ctx: &Arc<Context>) {
    async fn one<P: PoolObject>(ctx: &Arc<Context>, input: LaneInput<P>) {
        if input.served {
            status::run(ctx, input).await;
        }
    }
    futures::join!(
        one(ctx, inputs.in_cluster),
        one(ctx, inputs.global),
        one(ctx, inputs.in_cluster_prefix),
        one(ctx, inputs.global_prefix),
    );
}
