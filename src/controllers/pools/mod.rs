//! Pools: what inpool writes about each pool.
//!
//! - [`status`]: counts and conditions from the registry, deletion protection, and the per-pool
//!   metrics;
//! - [`carve`]: the claims a pool carved from a parent holds on it, and the sub-prefixes they
//!   realised;
//! - [`pacing`]: when each pool's status may be written;
//! - [`reuse_grace`]: frees a released claim's address once its pool's reuse grace period is
//!   over.
pub(crate) mod carve;
pub(crate) mod pacing;
pub(crate) mod reuse_grace;
pub(crate) mod status;

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::api::IPPool;
use crate::api::kinds::WithPoolType;
use crate::controllers::context::Context;
use crate::controllers::sources::pool_kinds::{LaneInput, PoolInputs};

/// Runs the pool controller of every served kind until the run ends.
pub async fn run(inputs: PoolInputs, ctx: &Arc<Context>) {
    let controllers = inputs
        .into_iter()
        .filter(|input| input.served)
        .map(|input| {
            input.kind.with_type(PoolController {
                ctx: ctx.clone(),
                input,
            })
        });
    futures::future::join_all(controllers).await;
}

/// The pool controller of one kind, with the kind's type.
struct PoolController {
    ctx: Arc<Context>,
    input: LaneInput,
}

impl WithPoolType for PoolController {
    type Output = BoxFuture<'static, ()>;

    fn with<P: IPPool>(self) -> Self::Output {
        async move { status::run::<P>(&self.ctx, self.input).await }.boxed()
    }
}
