//! What the memory benchmark (`benches/memory.rs`) measures: the structures inpool keeps for its
//! claims, built from API objects the way the watches build them. The handles are opaque: the
//! benchmark counts the heap they own, and nothing outside the controllers reads them.
use std::sync::Arc;

use kube::runtime::watcher::Event;

use super::claims::cache::{CacheWriter, ClaimCache};
use super::claims::cached_claim::WatchedClaim;
use super::sources::pool_cache::{PoolCache, PoolView};
use super::state::facts::{address_hold, address_key, pool_state};
use super::state::reservation::hold_of;
use super::state::{Allocation, Change, QueuedClaim, Registry};
use crate::api::reservation::IPAddressReservation;
use crate::api::{IPAddress, IPAddressClaim, InClusterIPPool, ObjectKey, PoolKey};

/// The claim cache after the claim watch listed `claims`.
pub struct ClaimCacheFootprint(ClaimCache);

/// The claim cache as the claim watch leaves it once it has listed `claims`.
pub fn claim_cache(claims: &[IPAddressClaim]) -> ClaimCacheFootprint {
    let cache = ClaimCache::default();
    let mut writer = CacheWriter::new(cache.clone());
    writer.apply(Event::Init);
    for claim in claims {
        writer.apply(Event::InitApply(WatchedClaim::from(claim.clone())));
    }
    writer.apply(Event::InitDone);
    ClaimCacheFootprint(cache)
}

impl ClaimCacheFootprint {
    /// How many claims the cache holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The pool cache after the pool watch listed `pools`.
pub struct PoolCacheFootprint(PoolCache);

/// The pool cache as the pool watch leaves it once it has listed `pools`: a view of each.
pub fn pool_cache(pools: &[InClusterIPPool]) -> PoolCacheFootprint {
    let cache = PoolCache::default();
    cache.replace(
        pools
            .iter()
            .map(|pool| Arc::new(PoolView::of(pool, &pool_state(pool)))),
    );
    PoolCacheFootprint(cache)
}

impl PoolCacheFootprint {
    /// How many pools the cache holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }
}

/// The registry with one pool, and what it holds in it.
pub struct RegistryFootprint(Registry);

impl RegistryFootprint {
    /// A registry that knows `pool` (namespaced) and nothing held in it.
    pub fn with_pool(pool: &InClusterIPPool) -> RegistryFootprint {
        let mut registry = Registry::default();
        let key = PoolKey::in_cluster(
            pool.metadata.namespace.as_deref().unwrap_or_default(),
            pool.metadata.name.as_deref().unwrap_or_default(),
        );
        registry.apply(Change::Pool(key, pool_state(pool)));
        RegistryFootprint(registry)
    }

    /// A registry that knows every pool of `pools` (namespaced) and nothing held in them.
    pub fn with_pools(pools: &[InClusterIPPool]) -> RegistryFootprint {
        let mut registry = Registry::default();
        for pool in pools {
            let key = PoolKey::in_cluster(
                pool.metadata.namespace.as_deref().unwrap_or_default(),
                pool.metadata.name.as_deref().unwrap_or_default(),
            );
            registry.apply(Change::Pool(key, pool_state(pool)));
        }
        RegistryFootprint(registry)
    }

    /// Serves one claim in each pool of `pools` as the claim controller does: queued, given an
    /// address, and the address let go again. What an entry keeps once its claims have come and
    /// gone.
    pub fn serve_one_claim_each(&mut self, pools: &[InClusterIPPool]) {
        for pool in pools {
            let namespace = pool.metadata.namespace.as_deref().unwrap_or_default();
            let key =
                PoolKey::in_cluster(namespace, pool.metadata.name.as_deref().unwrap_or_default());
            let claim = QueuedClaim {
                created: "2026-11-30T10:00:00Z".into(),
                claim: ObjectKey::new(namespace, "claim"),
            };
            if let Allocation::Reserve { held, .. } = self.0.try_allocate(&key, claim) {
                self.0.finish(held);
            }
        }
    }

    /// Records the holds of `reservations` and `addresses` as the watches do; returns how many
    /// it recorded (objects that hold nothing inpool can read are skipped, as the watches skip
    /// them).
    pub fn hold(
        &mut self,
        reservations: &[IPAddressReservation],
        addresses: &[IPAddress],
    ) -> usize {
        let mut recorded = 0;
        for reservation in reservations {
            if let (Some(name), Some(hold)) = (&reservation.metadata.name, hold_of(reservation)) {
                self.0.apply(Change::Reservation(name.clone(), hold));
                recorded += 1;
            }
        }
        for address in addresses {
            if let Some(hold) = address_hold(address) {
                self.0.apply(Change::Address(address_key(address), hold));
                recorded += 1;
            }
        }
        recorded
    }

    /// Takes back what [`RegistryFootprint::hold`] recorded, as the watches do when the objects
    /// are deleted.
    pub fn let_go(&mut self, reservations: &[IPAddressReservation], addresses: &[IPAddress]) {
        for name in reservations.iter().filter_map(|r| r.metadata.name.clone()) {
            self.0.apply(Change::ReservationGone(name));
        }
        for address in addresses {
            self.0.apply(Change::AddressGone(address_key(address)));
        }
    }
}

/// The metrics of `pools` as the pool controller and the claims leave them: each pool's capacity
/// gauges, its waiting claims, and an allocation and a release counted.
pub fn pool_metrics(pools: &[InClusterIPPool]) -> crate::telemetry::Metrics {
    let metrics = crate::telemetry::Metrics::new();
    for pool in pools {
        let key = PoolKey::in_cluster(
            pool.metadata.namespace.as_deref().unwrap_or_default(),
            pool.metadata.name.as_deref().unwrap_or_default(),
        );
        metrics.pool_capacity(&key, 1 << 20, 10, (1 << 20) - 10, 0);
        metrics.pool_waiting_claims(&key, 0);
        metrics.allocation(&key);
        metrics.release(&key);
    }
    metrics
}
