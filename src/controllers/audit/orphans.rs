//! Orphaned addresses that someone deletes: an `IPAddress` of inpool's, being deleted, whose
//! claim is gone (confirmed live) loses inpool's finalizer. inpool never deletes one by itself.

use kube::api::Api;

use super::drift::Snapshot;
use crate::api::ObjectKey;
use crate::api::{IPAddress, IPAddressClaim};
use crate::controllers::context::Context;
use crate::controllers::runtime::error::Error;
use crate::controllers::runtime::finalizers::{Outcome, remove_address_protection};
use crate::controllers::state::facts::address_key;

/// Releases the orphaned addresses that someone deletes (see the audit's module docs); returns how many.
/// A failure on one is logged and counted, and the others go on.
pub(super) async fn release_deleted_orphans(ctx: &Context, snapshot: &Snapshot) -> usize {
    let mut released = 0;
    for address in &snapshot.deleting {
        let key = address_key(address);
        let claim = ObjectKey::new(&key.namespace, &address.spec.claim_ref.name);
        if ctx.stores.claim(&claim).is_some() {
            continue; // the claim's own release lets go of it
        }
        match release_deleted_orphan(ctx, address, &key, &claim).await {
            Ok(true) => released += 1,
            Ok(false) => {}
            Err(e) => {
                ctx.metrics.reconcile_error("audit", e.metric_label());
                tracing::warn!(ipaddress = %key, error = %e, "could not release an orphaned IPAddress; trying again at the next audit");
            }
        }
    }
    released
}

pub(super) async fn release_deleted_orphan(
    ctx: &Context,
    address: &IPAddress,
    key: &ObjectKey,
    claim: &ObjectKey,
) -> Result<bool, Error> {
    let claims: Api<IPAddressClaim> = ctx.namespaced(&claim.namespace);
    if claims.get_opt(&claim.name).await?.is_some() {
        return Ok(false);
    }
    let addresses: Api<IPAddress> = ctx.namespaced(&key.namespace);
    match remove_address_protection(&addresses, address).await {
        // Gone already: someone else let it go.
        Ok(Outcome::Gone) => Ok(false),
        Ok(Outcome::Written(_) | Outcome::Unchanged) => {
            tracing::info!(
                address = %address.spec.address,
                ipaddress = %key,
                %claim,
                pool = %address.spec.pool_ref.name,
                "released an orphaned IPAddress that was being deleted: its claim is gone"
            );
            ctx.metrics.orphan_address_released();
            Ok(true)
        }
        // Changed since it was listed (the patch carries its resourceVersion).
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}
