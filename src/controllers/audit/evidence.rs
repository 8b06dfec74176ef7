//! The evidence of stray reservations, gathered as the registry learns holds: which pools to
//! check, and which claims to wake (see the audit's module doc). The shared context asks for a
//! check here ([`StrayChecks`]); the audit performs it.
use std::collections::HashSet;

use crate::api::{ObjectKey, PoolKey};
use crate::controllers::sources::watch::Stores;
use crate::controllers::state::{Registry, facts};

/// Pools in which a stray reservation may hold an address: evidence of one appeared, or a claim
/// was told the pool is exhausted. The audit's
/// `collect_strays_on_evidence` looks at them at once.
#[derive(Default)]
pub struct StrayChecks {
    pools: std::sync::Mutex<HashSet<PoolKey>>,
    pub(super) requested: tokio::sync::Notify,
}

impl StrayChecks {
    /// Asks for the reservations of `pool` that no `IPAddress` holds to be settled soon.
    pub fn request(&self, pool: &PoolKey) {
        let added = self
            .pools
            .lock()
            .expect("stray checks lock")
            .insert(pool.clone());
        if added {
            self.requested.notify_one();
        }
    }

    pub(super) fn take(&self) -> HashSet<PoolKey> {
        std::mem::take(&mut *self.pools.lock().expect("stray checks lock"))
    }
}

/// The registry learnt a hold of `claim`: if it shows the claim with a reservation of another
/// address than its `IPAddress` (one of them a stray), asks for a stray check of that reservation's
/// pool; if it shows a reservation for a claim that waits in its pool's queue here without an
/// `IPAddress` (another process reserved for it, and may have died before its `IPAddress`), wakes
/// the claim, which recovers the reservation.
pub(crate) fn look_for_strays(
    stores: &Stores,
    registry: &Registry,
    claim: &ObjectKey,
) -> StrayEvidence {
    let mut evidence = StrayEvidence::default();
    let reservations = registry.reservations_of(claim);
    if reservations.is_empty() {
        return evidence;
    }
    match registry.address_of(claim) {
        Some(address) => evidence.pools.extend(
            reservations
                .into_iter()
                .filter(|(_, r)| (&r.pool, r.ip) != (&address.pool, address.ip))
                .map(|(_, r)| r.pool),
        ),
        None => {
            if let Some(cached) = stores.claim(claim) {
                let queued = facts::queued(cached.creation_timestamp(), claim);
                evidence.wake = reservations
                    .iter()
                    .any(|(_, r)| registry.is_waiting(&r.pool, &queued));
            }
        }
    }
    evidence
}

/// What [`look_for_strays`] found: the pools to check for strays, and whether to wake the claim.
#[derive(Default)]
pub(crate) struct StrayEvidence {
    pub pools: Vec<PoolKey>,
    pub wake: bool,
}
