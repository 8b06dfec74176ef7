//! Objects the claim reconciler learns from its own reads and writes, against the deletions the
//! watches applied while those requests were on the way.
//!
//! The reconciler applies an object it has just created or read (a `GET` after a conflict) before
//! its watch event comes, so that an address stays used exactly as long as its holder exists.
//! Such an answer can be older than the registry: the object may have been deleted after the
//! API server answered, and its deletion event applied before the answer is. Applied then, the
//! answer would bring back a record of an object that is gone, and the address would stay used
//! until the audit noticed (state drift). So a reconcile opens a [`Ticket`] before its requests,
//! every deletion the registry applies while a ticket is open is remembered with its sequence
//! number, and an answer is applied only if its object was not deleted after its ticket was
//! opened. Skipping an answer is always safe: the watch delivers the object if it exists, and
//! until then the reservation it holds makes a second claim's create fail again.
//!
//! Memory: a deletion is remembered only while a ticket older than it is open, so what is kept
//! is bounded by the deletions applied during the longest reconcile in progress.
use std::collections::{BTreeMap, HashMap, VecDeque};

use super::change::Subject;
use super::{Change, ObjectKey};

/// A reconcile's place in the sequence of deletions, opened before its first request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a ticket must be closed, or the deletions it keeps are never forgotten"]
pub struct Ticket(u64);

/// An object that can be learnt: a reservation by name, an `IPAddress` by namespace/name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Learnt {
    Reservation(String),
    Address(ObjectKey),
}

impl Learnt {
    fn of(change: &Change) -> Option<Learnt> {
        match change.subject() {
            Subject::Reservation(name) => Some(Learnt::Reservation(name.to_string())),
            Subject::Address(key) => Some(Learnt::Address(key.clone())),
            _ => None,
        }
    }
}

/// The deletions applied while tickets are open.
#[derive(Default)]
pub(super) struct Deletions {
    /// Number of the last deletion remembered.
    last: u64,
    /// Open tickets by number, with how many share it.
    open: BTreeMap<u64, usize>,
    /// The last deletion of each object, by number.
    deleted: HashMap<Learnt, u64>,
    /// The same, in order, to forget the old ones.
    order: VecDeque<(u64, Learnt)>,
}

impl Deletions {
    pub(super) fn open(&mut self) -> Ticket {
        *self.open.entry(self.last).or_default() += 1;
        Ticket(self.last)
    }

    pub(super) fn close(&mut self, ticket: Ticket) {
        if let Some(count) = self.open.get_mut(&ticket.0) {
            *count -= 1;
            if *count == 0 {
                self.open.remove(&ticket.0);
            }
        }
        // A deletion numbered at or below every open ticket can no longer make an answer stale.
        let oldest = self.open.keys().next().copied().unwrap_or(self.last);
        while let Some((number, _)) = self.order.front()
            && *number <= oldest
        {
            let (number, object) = self.order.pop_front().expect("front exists");
            if self.deleted.get(&object) == Some(&number) {
                self.deleted.remove(&object);
            }
        }
    }

    /// Remembers a removal the registry applies, while a ticket is open.
    pub(super) fn record(&mut self, change: &Change) {
        if self.open.is_empty() || !change.is_removal() {
            return;
        }
        let Some(object) = Learnt::of(change) else {
            return;
        };
        self.last += 1;
        self.deleted.insert(object.clone(), self.last);
        self.order.push_back((self.last, object));
    }

    /// Whether `change`, an answer read or written since `ticket` was opened, may be older than a
    /// deletion of its object the registry has applied.
    pub(super) fn is_stale(&self, change: &Change, ticket: Ticket) -> bool {
        Learnt::of(change)
            .and_then(|object| self.deleted.get(&object))
            .is_some_and(|deleted| *deleted > ticket.0)
    }

    /// How many deletions are remembered (the registry-size gauge).
    pub(super) fn len(&self) -> usize {
        self.deleted.len()
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::super::{Allocation, HoldRecord, Holder, InFlight, QueuedClaim, Registry};
    use crate::allocator::{ParsedSpec, PoolSpecInput};
    use crate::api::ObjectKey;

    use super::*;
    use crate::controllers::state::fixtures::pool;

    /// A registry with one pool of one address, 10.0.0.10.
    fn one_address() -> Registry {
        let spec = PoolSpecInput {
            addresses: vec!["10.0.0.10".into()],
            prefix: 24,
            ..Default::default()
        };
        let mut registry = Registry::default();
        registry.set_pool(
            &pool(),
            Ok(ParsedSpec::Addresses(spec.parse().expect("valid spec"))),
        );
        registry
    }

    fn held_by(claim: &str) -> HoldRecord {
        let ip: IpAddr = "10.0.0.10".parse().unwrap();
        HoldRecord {
            pool: pool(),
            ip,
            length: HoldRecord::address_length(ip),
            holder: Holder::Claim(ObjectKey::new("ns", claim)),
            scope: pool().scope(),
        }
    }

    /// Applies `change` as the reconciler's learning does: unless it is stale.
    fn learn(registry: &mut Registry, change: Change, ticket: Ticket) -> Option<Vec<ObjectKey>> {
        (!registry.is_stale(&change, ticket)).then(|| registry.apply(change))
    }

    fn reservation(claim: &str) -> Change {
        Change::Reservation("10-0-0-10".into(), held_by(claim))
    }

    fn is_free(registry: &mut Registry) -> bool {
        let queued = QueuedClaim {
            created: "t9".into(),
            claim: ObjectKey::new("ns", "probe"),
        };
        let free = matches!(
            registry.try_allocate(&pool(), queued),
            Allocation::Reserve { .. }
        );
        if free {
            registry.finish(InFlight::of(&pool(), "10.0.0.10".parse().unwrap()));
        }
        free
    }

    #[test]
    fn an_answer_older_than_a_deletion_the_watch_applied_is_not_learnt() {
        let mut r = one_address();
        // A reconcile reads the reservation (409 on its create, then a GET) ...
        let ticket = r.open_ticket();
        // ... while the watch shows the reservation, then its deletion.
        r.apply(reservation("a"));
        r.apply(Change::ReservationGone("10-0-0-10".into()));
        // The GET's answer arrives last: the object it shows is gone.
        assert_eq!(learn(&mut r, reservation("a"), ticket), None);
        assert!(
            is_free(&mut r),
            "the address of a deleted reservation is free"
        );
        r.close_ticket(ticket);
        assert_eq!(r.sizes().deletions, 0, "nothing remembered once closed");
    }

    #[test]
    fn an_answer_about_an_object_deleted_before_the_ticket_is_learnt() {
        let mut r = one_address();
        let older = r.open_ticket();
        r.apply(reservation("a"));
        r.apply(Change::ReservationGone("10-0-0-10".into()));
        // Read after the deletion was applied: the object it shows is a new one of that name.
        let ticket = r.open_ticket();
        assert!(learn(&mut r, reservation("b"), ticket).is_some());
        assert!(!is_free(&mut r));
        // The older ticket, whose requests started before the deletion, must not learn it.
        assert_eq!(
            learn(
                &mut r,
                Change::Address(ObjectKey::new("ns", "x"), held_by("x")),
                older
            ),
            Some(Vec::new())
        );
        assert_eq!(learn(&mut r, reservation("a"), older), None);
        r.close_ticket(older);
        r.close_ticket(ticket);
    }

    #[test]
    fn the_record_kept_is_the_one_of_the_object_a_change_is_about() {
        let mut r = one_address();
        let gone = Change::ReservationGone("10-0-0-10".into());
        assert_eq!(r.record_of(&gone), None);
        r.apply(reservation("a"));
        assert_eq!(r.record_of(&gone), Some(&held_by("a")));
        // The same name, made again for another claim: another record.
        r.apply(reservation("b"));
        assert_eq!(r.record_of(&reservation("a")), Some(&held_by("b")));
        let address = Change::AddressGone(ObjectKey::new("ns", "a"));
        assert_eq!(r.record_of(&address), None);
        r.apply(Change::Address(ObjectKey::new("ns", "a"), held_by("a")));
        assert_eq!(r.record_of(&address), Some(&held_by("a")));
    }

    #[test]
    fn deletions_are_remembered_only_while_an_older_ticket_is_open() {
        let mut r = one_address();
        r.apply(reservation("a"));
        r.apply(Change::ReservationGone("10-0-0-10".into()));
        assert_eq!(
            r.sizes().deletions,
            0,
            "no ticket open: nothing to remember"
        );

        let first = r.open_ticket();
        r.apply(Change::AddressGone(ObjectKey::new("ns", "a")));
        let second = r.open_ticket();
        r.apply(Change::AddressGone(ObjectKey::new("ns", "b")));
        assert_eq!(r.sizes().deletions, 2);
        // The first ticket closed: the deletion before the second one can no longer matter.
        r.close_ticket(first);
        assert_eq!(r.sizes().deletions, 1);
        let address = |name| Change::Address(ObjectKey::new("ns", name), held_by(name));
        assert!(learn(&mut r, address("a"), second).is_some());
        r.apply(Change::AddressGone(ObjectKey::new("ns", "a")));
        assert_eq!(learn(&mut r, address("b"), second), None);
        r.close_ticket(second);
        assert_eq!(r.sizes().deletions, 0);
    }
}
