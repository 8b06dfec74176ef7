//! Allocation: which claim gets which address next, in order of creation, and the allocations
//! in flight until their reservation or `IPAddress` is known.
use std::net::IpAddr;

use super::{Registry, Unready};
use crate::api::{ObjectKey, PoolKey, Scope};

/// A claim's place in a pool's queue: creation time (RFC 3339 text sorts chronologically as the
/// API server writes it, to the second), then namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueuedClaim {
    pub created: String,
    pub claim: ObjectKey,
}

/// What the reconciler learns from [`Registry::try_allocate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Create the reservation and the `IPAddress` for this address; it is held in flight until
    /// [`Registry::finish`] is called.
    Allocate(IpAddr),
    /// An `IPAddress` for this claim is already known (another process realised it): adopt it
    /// instead; the claim is not queued.
    AlreadyHeld,
    /// No address for this claim now; `total` is the pool's size, `ahead` the claims before it.
    Exhausted {
        total: u128,
        ahead: usize,
    },
    NotReady(Unready),
}

impl Registry {
    /// Decides whether `claim` gets an address now. A claim never overtakes an older waiting
    /// claim of the same pool: it is served only if the free addresses suffice for every claim
    /// queued before it. On `Allocate` the address is held in flight until [`Registry::finish`].
    pub fn try_allocate(&mut self, pool: &PoolKey, claim: QueuedClaim) -> Decision {
        if self.addresses.contains_key(&claim.claim) {
            return Decision::AlreadyHeld;
        }
        self.dirty.insert(pool.clone());
        let entry = self.pool_entry(pool);
        entry.waiting.insert(claim.clone());
        let Some(Ok(allocator)) = &mut entry.state else {
            let unready = match &entry.state {
                Some(Err(unready)) => unready.clone(),
                _ => Unready::Missing,
            };
            return Decision::NotReady(unready);
        };
        let counts = allocator.counts();
        let free = usize::try_from(counts.free).unwrap_or(usize::MAX);
        let ahead = entry.waiting.range(..&claim).take(free).count();
        if ahead >= free {
            return Decision::Exhausted {
                total: counts.total,
                ahead: entry.waiting.range(..&claim).count(),
            };
        }
        match allocator.allocate_lowest() {
            Some(ip) => {
                entry.in_flight.insert(ip);
                entry.waiting.remove(&claim);
                Decision::Allocate(ip)
            }
            None => Decision::Exhausted {
                total: counts.total,
                ahead,
            },
        }
    }

    /// Drops queued claims that no longer exist (deleted without a final reconcile, e.g. when
    /// someone else removed the finalizer), so that they cannot hold up the queue.
    pub fn prune_waiting(&mut self, pool: &PoolKey, is_live: impl Fn(&ObjectKey) -> bool) {
        if let Some(entry) = self.pools.get_mut(pool) {
            entry.waiting.retain(|q| is_live(&q.claim));
        }
    }

    /// [`Registry::prune_waiting`] in every pool.
    pub fn prune_waiting_everywhere(&mut self, is_live: impl Fn(&ObjectKey) -> bool) {
        for entry in self.pools.values_mut() {
            entry.waiting.retain(|q| is_live(&q.claim));
        }
    }

    /// Holds a specific address in flight for a claim (adoption, crash recovery).
    pub fn hold_in_flight(&mut self, pool: &PoolKey, claim: &ObjectKey, ip: IpAddr) {
        self.dirty.insert(pool.clone());
        let entry = self.pool_entry(pool);
        entry.waiting.retain(|q| &q.claim != claim);
        if let Some(allocator) = entry.allocator() {
            allocator.mark_used(ip);
        }
        entry.in_flight.insert(ip);
    }

    /// Ends an in-flight allocation: the address stays used only while a record (a reservation
    /// or an `IPAddress`, applied as a [`Change`](super::Change) by whoever learnt of it) holds it, so nothing
    /// can keep an address used that no object holds. Returns the claims to wake when it became
    /// free.
    pub fn finish(&mut self, pool: &PoolKey, ip: IpAddr) -> Vec<ObjectKey> {
        self.dirty.insert(pool.clone());
        let entry = self.pool_entry(pool);
        entry.in_flight.remove(&ip);
        let unit = entry.unit(ip);
        if entry.holds.contains_key(&unit) || entry.unit_in_flight(unit) {
            return Vec::new();
        }
        if entry.allocator().is_some_and(|a| a.release(unit)) {
            entry.wakeups()
        } else {
            Vec::new()
        }
    }

    /// The claim no longer waits in this pool (deleted, paused, adopted elsewhere).
    pub fn forget_claim(&mut self, pool: &PoolKey, claim: &ObjectKey) {
        if let Some(entry) = self.pools.get_mut(pool) {
            let before = entry.waiting.len();
            entry.waiting.retain(|q| &q.claim != claim);
            if entry.waiting.len() != before {
                self.dirty.insert(pool.clone());
            }
        }
    }

    /// The scope a new reservation for `ip` from `pool` is named in: the cluster scope when the
    /// address of a namespaced pool also lies in a global pool, so that the API server keeps it
    /// unique across both; otherwise the pool's own scope.
    pub fn reservation_scope(&self, pool: &PoolKey, ip: IpAddr) -> Scope {
        let in_global_pool = self.pools.iter().any(|(key, entry)| {
            !key.kind.is_namespaced() && entry.range().is_some_and(|r| r.contains(ip))
        });
        if in_global_pool {
            Scope::Cluster
        } else {
            pool.scope()
        }
    }
}
