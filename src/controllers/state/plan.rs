//! The claim planner: what a claim needs next, decided from the registry alone, under one lock,
//! with no API call. The claim reconciler ([`crate::controllers::claims::reconcile`]) asks,
//! performs the step against the API server, reports the outcome back to the registry, and asks
//! again when a step did not settle the claim (an address taken meanwhile, a reservation that
//! turned out stale).
//!
//! For a live claim, once its lifecycle gates (pause, Cluster, finalizer) are passed:
//!
//! 1. [`plan`]: is it realised already ([`Step::Ready`])? If not, look for an `IPAddress` with
//!    its name first ([`Step::LookUp`]): the cache may not show one that another process or a
//!    person created, and that one must be adopted, never a second address allocated.
//! 2. No `IPAddress` exists: [`plan_allocation`] re-uses a reservation the claim already holds
//!    ([`Allocation::Recover`]), else picks the lowest free address in its turn
//!    ([`Allocation::Reserve`]), or says why it must wait ([`Allocation::Exhausted`],
//!    [`Allocation::NotReady`]).
//!
//! For a deleting claim, [`release`] lists the reservations to let go.
use std::net::IpAddr;

use crate::api::{ObjectKey, PoolKey};
use crate::controllers::state::Allocation;
use crate::controllers::state::{QueuedClaim, Registry};

/// What a live claim needs first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Its `IPAddress` and the reservation of the same address are known: it is realised.
    Ready(IpAddr),
    /// Look for an `IPAddress` with the claim's name (adopt it if there is one), then allocate.
    LookUp,
}

/// Step 1 for a live claim of `pool`.
pub fn plan(registry: &Registry, claim: &ObjectKey, pool: &PoolKey) -> Step {
    let realised = registry
        .address_of(claim)
        .filter(|address| &address.pool == pool)
        .map(|address| address.ip)
        .filter(|ip| {
            registry
                .reservations_of(claim)
                .iter()
                .any(|(_, reservation)| reservation.ip == *ip)
        });
    match realised {
        Some(ip) => Step::Ready(ip),
        None => Step::LookUp,
    }
}

/// Step 2: no `IPAddress` exists for the claim. `rejected` names reservations found stale since
/// the last plan (they are not recovered again); `is_live` tells which queued claims still exist
/// (one that vanished without a final reconcile must not hold up the queue).
pub fn plan_allocation(
    registry: &mut Registry,
    claim: &QueuedClaim,
    pool: &PoolKey,
    rejected: &[String],
    is_live: impl Fn(&ObjectKey) -> bool,
) -> Allocation {
    let recoverable = registry
        .reservations_of(&claim.claim)
        .into_iter()
        .find(|(name, hold)| &hold.pool == pool && !rejected.contains(name));
    if let Some((reservation, hold)) = recoverable {
        let held = registry.hold_in_flight(pool, &claim.claim, hold.ip);
        return Allocation::Recover { reservation, held };
    }
    match registry.try_allocate(pool, claim.clone()) {
        Allocation::Exhausted { .. } => {
            registry.prune_waiting(pool, is_live);
            registry.try_allocate(pool, claim.clone())
        }
        allocation => allocation,
    }
}

/// The reservations a deleting claim lets go of.
pub fn release(registry: &mut Registry, claim: &ObjectKey, pool: &PoolKey) -> Vec<String> {
    registry.forget_claim(pool, claim);
    registry
        .reservations_of(claim)
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::{ParsedSpec, PoolSpecInput};
    use crate::api::Scope;
    use crate::controllers::state::fixtures::{claim, hold_in as hold, ip, pool, queued};
    use crate::controllers::state::{Change, InFlight, Unready};

    /// A registry with pool `ns/p` of the given addresses.
    fn registry_with(addresses: &[&str]) -> Registry {
        let mut registry = Registry::default();
        let parsed = PoolSpecInput {
            addresses: addresses.iter().map(|s| s.to_string()).collect(),
            prefix: 24,
            ..Default::default()
        }
        .parse()
        .unwrap();
        registry.apply(Change::Pool(pool(), Ok(ParsedSpec::Addresses(parsed))));
        registry
    }

    /// The step that reserves `address` of the pool, in the pool's own scope.
    fn reserve(address: &str) -> Allocation {
        Allocation::Reserve {
            held: InFlight::of(&pool(), ip(address)),
            scope: pool().scope(),
        }
    }

    fn everyone_lives(_: &ObjectKey) -> bool {
        true
    }

    /// The allocation step of the pool for claim `name`, queued at `created`, with no reservation
    /// rejected and every claim alive.
    fn plan_step(r: &mut Registry, created: &str, name: &str) -> Allocation {
        plan_allocation(r, &queued(created, name), &pool(), &[], everyone_lives)
    }

    #[test]
    fn a_claim_with_its_address_and_reservation_is_ready() {
        let mut r = registry_with(&["10.0.0.10-10.0.0.11"]);
        r.apply(Change::Reservation(
            "res".into(),
            hold(&pool(), "a", "10.0.0.10"),
        ));
        assert_eq!(
            plan(&r, &claim("a"), &pool()),
            Step::LookUp,
            "no IPAddress yet"
        );
        r.apply(Change::Address(claim("a"), hold(&pool(), "a", "10.0.0.10")));
        assert_eq!(plan(&r, &claim("a"), &pool()), Step::Ready(ip("10.0.0.10")));
        assert_eq!(
            plan(&r, &claim("a"), &PoolKey::global("p")),
            Step::LookUp,
            "an address of another pool is not this claim's"
        );
    }

    #[test]
    fn an_ipaddress_without_its_reservation_is_looked_up_to_reserve_it_again() {
        let mut r = registry_with(&["10.0.0.10-10.0.0.11"]);
        r.apply(Change::Address(claim("a"), hold(&pool(), "a", "10.0.0.10")));
        assert_eq!(plan(&r, &claim("a"), &pool()), Step::LookUp);
    }

    #[test]
    fn a_claim_with_nothing_reserves_the_lowest_free_address() {
        let mut r = registry_with(&["10.0.0.10-10.0.0.11"]);
        let step = plan_step(&mut r, "t1", "a");
        assert_eq!(step, reserve("10.0.0.10"));
        assert_eq!(r.free(&pool()), 1, "held in flight");
    }

    #[test]
    fn an_address_inside_a_global_pool_is_reserved_in_the_cluster_scope() {
        let mut r = registry_with(&["10.0.0.10-10.0.0.11"]);
        let global = PoolSpecInput {
            addresses: vec!["10.0.0.0/24".into()],
            prefix: 24,
            ..Default::default()
        }
        .parse()
        .unwrap();
        r.apply(Change::Pool(
            PoolKey::global("g"),
            Ok(ParsedSpec::Addresses(global)),
        ));
        let step = plan_step(&mut r, "t1", "a");
        assert_eq!(
            step,
            Allocation::Reserve {
                held: InFlight::of(&pool(), ip("10.0.0.10")),
                scope: Scope::Cluster
            }
        );
    }

    #[test]
    fn a_reservation_of_the_claim_is_recovered_unless_rejected() {
        let mut r = registry_with(&["10.0.0.10-10.0.0.12"]);
        r.apply(Change::Reservation(
            "res".into(),
            hold(&pool(), "a", "10.0.0.11"),
        ));
        let step = plan_step(&mut r, "t1", "a");
        assert_eq!(
            step,
            Allocation::Recover {
                reservation: "res".into(),
                held: InFlight::of(&pool(), ip("10.0.0.11"))
            }
        );
        r.finish(InFlight::of(&pool(), ip("10.0.0.11")));
        let step = plan_allocation(
            &mut r,
            &queued("t1", "a"),
            &pool(),
            &["res".to_string()],
            everyone_lives,
        );
        assert_eq!(
            step,
            reserve("10.0.0.10"),
            "a stale reservation is not tried again"
        );
    }

    #[test]
    fn a_claim_realised_by_another_process_is_adopted() {
        let mut r = registry_with(&["10.0.0.10"]);
        r.apply(Change::Address(claim("a"), hold(&pool(), "a", "10.0.0.10")));
        let step = plan_step(&mut r, "t1", "a");
        assert_eq!(step, Allocation::Adopt);
    }

    #[test]
    fn a_full_pool_makes_claims_wait_in_order_and_vanished_claims_do_not_hold_the_queue() {
        let mut r = registry_with(&["10.0.0.10"]);
        r.apply(Change::Reservation(
            "res".into(),
            hold(&pool(), "x", "10.0.0.10"),
        ));
        let first = plan_step(&mut r, "t1", "a");
        assert_eq!(first, Allocation::Exhausted { total: 1, ahead: 0 });
        let second = plan_step(&mut r, "t2", "b");
        assert_eq!(second, Allocation::Exhausted { total: 1, ahead: 1 });
        r.apply(Change::ReservationGone("res".into()));
        let only_b_lives = |c: &ObjectKey| &*c.name == "b";
        let step = plan_allocation(&mut r, &queued("t2", "b"), &pool(), &[], only_b_lives);
        assert_eq!(
            step,
            reserve("10.0.0.10"),
            "a, deleted without a final reconcile, no longer waits before b"
        );
    }

    #[test]
    fn a_pool_that_cannot_hand_out_addresses_says_why() {
        let mut r = Registry::default();
        let missing = plan_step(&mut r, "t1", "a");
        assert_eq!(missing, Allocation::NotReady(Unready::Missing));
        for unready in [
            Unready::Paused,
            Unready::Deleting,
            Unready::Invalid("addresses[0]: bad".into()),
        ] {
            r.apply(Change::Pool(pool(), Err(unready.clone())));
            let step = plan_step(&mut r, "t1", "a");
            assert_eq!(step, Allocation::NotReady(unready));
        }
    }

    #[test]
    fn a_released_claim_lets_go_of_every_reservation_and_its_place_in_the_queue() {
        let mut r = registry_with(&["10.0.0.10"]);
        r.apply(Change::Reservation(
            "one".into(),
            hold(&pool(), "a", "10.0.0.10"),
        ));
        r.apply(Change::Reservation(
            "two".into(),
            hold(&pool(), "a", "10.0.0.99"),
        ));
        let mut names = release(&mut r, &claim("a"), &pool());
        names.sort();
        assert_eq!(names, vec!["one".to_string(), "two".to_string()]);
        assert_eq!(r.waiting(&pool()), 0);
    }
}
