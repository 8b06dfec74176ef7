//! Allocation: which claim gets which address next, in order of creation, and the allocations
//! in flight until their reservation or `IPAddress` is known.
use std::net::IpAddr;

use super::pool_entry::PoolEntry;
use super::{HoldRecord, Holder, Registry, Unready};
use crate::api::{ObjectKey, PoolKey, Scope};

/// A claim's place in a pool's queue: creation time (RFC 3339 text sorts chronologically as the
/// API server writes it, to the second), then namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueuedClaim {
    pub created: String,
    pub claim: ObjectKey,
}

/// An address held in flight for one claim's allocation: no other claim gets it until the hold
/// ends, and the hold must end whatever the allocation's steps do, or the address stays taken
/// with no object holding it. The registry hands one out with every allocation it starts, and
/// takes it back in [`Registry::finish`], the one way to end the hold: it cannot be copied, and
/// the compiler warns where one is dropped unused.
#[must_use = "the address stays taken until the hold is given back to `Registry::finish`"]
#[derive(Debug, PartialEq, Eq)]
pub struct InFlight {
    pool: PoolKey,
    ip: IpAddr,
}

impl InFlight {
    /// The address held.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// The hold of `ip` in `pool` that a test started through the registry.
    #[cfg(test)]
    pub(crate) fn of(pool: &PoolKey, ip: IpAddr) -> InFlight {
        InFlight {
            pool: pool.clone(),
            ip,
        }
    }
}

/// How a live claim without an `IPAddress` gets one.
#[derive(Debug, PartialEq, Eq)]
pub enum Allocation {
    /// The claim already holds this reservation (a crash between the two creates, or its
    /// `IPAddress` was deleted): check that it still exists and is the claim's, then create the
    /// `IPAddress` for it, with the address `held` in flight meanwhile.
    Recover { reservation: String, held: InFlight },
    /// Reserve the address `held` in flight, in this scope, then create the `IPAddress`.
    Reserve { held: InFlight, scope: Scope },
    /// Another process realised the claim meanwhile: adopt its `IPAddress`.
    Adopt,
    /// No address for it now: the pool's `total`, and the claims waiting before it.
    Exhausted { total: u128, ahead: usize },
    /// The pool cannot hand out addresses.
    NotReady(Unready),
    /// The claim's pre-allocated address cannot be its now; it is woken when that may change.
    PreAllocationConflict {
        ip: IpAddr,
        conflict: super::PreAllocationConflict,
    },
}

/// The address `claim`, queued in `entry`, gets now, with its length, or why it gets none: the
/// pool is not ready, or the claims queued before it take every free address. The address is
/// taken from the allocator; the caller takes the claim out of the queue and holds it in flight.
fn next_turn(entry: &mut PoolEntry, claim: &QueuedClaim) -> Result<(IpAddr, u8), Allocation> {
    let Some(Ok(allocator)) = &mut entry.state else {
        let unready = match &entry.state {
            Some(Err(unready)) => unready.clone(),
            _ => Unready::Missing,
        };
        return Err(Allocation::NotReady(unready));
    };
    let counts = allocator.counts();
    let free = usize::try_from(counts.free).unwrap_or(usize::MAX);
    let ahead = entry.waiting.range(..claim).take(free).count();
    if ahead >= free {
        return Err(Allocation::Exhausted {
            total: counts.total,
            ahead: entry.waiting.range(..claim).count(),
        });
    }
    let Some(ip) = allocator.allocate_next() else {
        return Err(Allocation::Exhausted {
            total: counts.total,
            ahead,
        });
    };
    Ok((ip, allocator.unit_length()))
}

impl Registry {
    /// Decides whether `claim` gets an address now. A claim never overtakes an older waiting
    /// claim of the same pool: it is served only if the free addresses suffice for every claim
    /// queued before it. On `Reserve` the address is held in flight until [`Registry::finish`] takes
    /// its [`InFlight`] back.
    /// (`Recover` is the planner's: it looks at the claim's reservations first.)
    pub fn try_allocate(&mut self, pool: &PoolKey, claim: QueuedClaim) -> Allocation {
        if self.addresses.contains_key(&claim.claim) {
            return Allocation::Adopt;
        }
        if let Some(ip) = self
            .pools
            .get(pool)
            .and_then(|entry| entry.pre_allocations.of(&claim.claim))
        {
            return self.try_pre_allocated(pool, &claim.claim, ip);
        }
        self.dirty.insert(pool.clone());
        let entry = self.pool_entry(pool);
        let joined = entry.enqueue(claim.clone());
        let turn = next_turn(entry, &claim);
        let left = match turn {
            Ok(_) => entry.unqueue(&claim),
            Err(_) => 0,
        };
        self.waiting_claims = self.waiting_claims + joined - left;
        let (ip, length) = match turn {
            Ok(turn) => turn,
            Err(refused) => return refused,
        };
        let scope = self.reservation_scope(pool, ip);
        let held = self.start_in_flight(HoldRecord {
            pool: pool.clone(),
            ip,
            length,
            holder: Holder::Claim(claim.claim),
            scope: scope.clone(),
        });
        Allocation::Reserve { held, scope }
    }

    /// Holds an allocation in flight in every pool it touches, as a record would: an overlapping
    /// pool of another unit size must not hand out the same space meanwhile, and only the
    /// registry stands between them (their reservations have different names).
    pub(super) fn start_in_flight(&mut self, record: HoldRecord) -> InFlight {
        let held = InFlight {
            pool: record.pool.clone(),
            ip: record.ip,
        };
        self.hold_record(&record);
        self.in_flight.push(record);
        held
    }

    /// Drops queued claims that no longer exist (deleted without a final reconcile, e.g. when
    /// someone else removed the finalizer), so that they cannot hold up the queue.
    pub fn prune_waiting(&mut self, pool: &PoolKey, is_live: impl Fn(&ObjectKey) -> bool) {
        if let Some(entry) = self.pools.get_mut(pool) {
            self.waiting_claims -= entry.unqueue_where(|claim| !is_live(claim));
        }
    }

    /// [`Registry::prune_waiting`] in every pool.
    pub fn prune_waiting_everywhere(&mut self, is_live: impl Fn(&ObjectKey) -> bool) {
        for entry in self.pools.values_mut() {
            self.waiting_claims -= entry.unqueue_where(|claim| !is_live(claim));
        }
    }

    /// Holds a specific address in flight for a claim (adoption, crash recovery): one unit of
    /// the pool (one address while the pool is not ready).
    pub fn hold_in_flight(&mut self, pool: &PoolKey, claim: &ObjectKey, ip: IpAddr) -> InFlight {
        self.dirty.insert(pool.clone());
        self.hold_for(pool, claim, ip, pool.scope())
    }

    /// Takes `claim` out of `pool`'s queue and holds `ip` in flight for it, to be reserved in
    /// `scope`: one unit of the pool (one address while the pool is not ready).
    pub(super) fn hold_for(
        &mut self,
        pool: &PoolKey,
        claim: &ObjectKey,
        ip: IpAddr,
        scope: Scope,
    ) -> InFlight {
        let entry = self.pool_entry(pool);
        let left = entry.unqueue_where(|queued| queued == claim);
        let length = entry
            .unit_length()
            .unwrap_or_else(|| HoldRecord::address_length(ip));
        self.waiting_claims -= left;
        self.start_in_flight(HoldRecord {
            pool: pool.clone(),
            ip,
            length,
            holder: Holder::Claim(claim.clone()),
            scope,
        })
    }

    /// Ends an in-flight allocation: the address stays used only while a record (a reservation
    /// or an `IPAddress`, applied as a [`Change`](super::Change) by whoever learnt of it) holds it,
    /// so nothing can keep an address used that no object holds. Returns the claims to wake where
    /// it became free.
    pub fn finish(&mut self, held: InFlight) -> Vec<ObjectKey> {
        let InFlight { pool, ip } = held;
        self.dirty.insert(pool.clone());
        let Some(index) = self
            .in_flight
            .iter()
            .position(|r| r.pool == pool && r.ip == ip)
        else {
            return Vec::new();
        };
        let record = self.in_flight.swap_remove(index);
        self.release_record(&record)
    }

    /// The claim no longer waits in this pool (deleted, paused, adopted elsewhere).
    pub fn forget_claim(&mut self, pool: &PoolKey, claim: &ObjectKey) {
        if let Some(entry) = self.pools.get_mut(pool) {
            let left = entry.unqueue_where(|queued| queued == claim);
            if left > 0 {
                self.waiting_claims -= left;
                self.dirty.insert(pool.clone());
            }
        }
    }

    /// The scope a new reservation for `ip` from `pool` is named in: the cluster scope when the
    /// address of a namespaced pool also lies in a global pool, so that the API server keeps it
    /// unique across both; otherwise the pool's own scope.
    pub fn reservation_scope(&self, pool: &PoolKey, ip: IpAddr) -> Scope {
        let in_global_pool = self
            .by_range
            .containing(ip)
            .iter()
            .any(|key| !key.kind.is_namespaced());
        if in_global_pool {
            Scope::Cluster
        } else {
            pool.scope()
        }
    }
}
