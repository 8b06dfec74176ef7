//! The claim runtime's work queue: which claims wait for a reconcile, in what order, and which
//! are being reconciled. It does no I/O and takes the time as an argument, so it is tested
//! without a runtime (kube-runtime's `scheduler.rs` habit).
//!
//! - a claim is reconciled by one reconcile at a time: a request for a claim being reconciled
//!   waits for that reconcile to end, then runs once more;
//! - requests for one claim merge into one, and the earliest wins;
//! - urgent requests run before routine ones (a realised claim that only needs confirming).
//!
//! It also keeps what client-go's work queue measures: how many requests were added (a request
//! merged into a waiting one adds nothing), how long each waited and ran, the depth by
//! priority, and the reconciles in progress ([`crate::telemetry::QueueMetrics`]).
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::api::ObjectKey;

/// How soon a claim is to be reconciled, of the requests due now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// Before any routine request.
    Urgent,
    /// A realised claim the watch brings: it only needs confirming.
    Routine,
}

/// The claims waiting for a reconcile, and the ones being reconciled.
#[derive(Default)]
pub struct WorkQueue {
    /// Due now and urgent, in the order they were asked for.
    urgent: VecDeque<ObjectKey>,
    /// Due now and routine, in the order they were asked for.
    routine: VecDeque<ObjectKey>,
    /// The claims due now, with the queue each one is to be taken from (a routine request made
    /// urgent stays in the routine queue too, and is passed over there).
    is_due: HashMap<ObjectKey, Urgency>,
    /// Due later, by time.
    later: BTreeSet<(Instant, ObjectKey)>,
    /// When each member of `later` is due.
    due_at: HashMap<ObjectKey, Instant>,
    /// Being reconciled.
    running: HashSet<ObjectKey>,
    /// Asked for while being reconciled: due again (urgent) once that reconcile ends.
    again: HashSet<ObjectKey>,
    /// Requests added since the last [`WorkQueue::stamp`], to be stamped with the time.
    fresh: Vec<ObjectKey>,
    /// When each waiting request (due now, or again) was added.
    waiting_since: HashMap<ObjectKey, Instant>,
    /// When each running reconcile started.
    running_since: HashMap<ObjectKey, Instant>,
    /// How many of `is_due` are urgent.
    urgent_due: usize,
}

/// A request taken to be reconciled.
#[derive(Debug, PartialEq, Eq)]
pub struct Started {
    pub key: ObjectKey,
    /// How long it waited since it was added (zero if it was never stamped).
    pub waited: Duration,
}

impl WorkQueue {
    /// Asks for a reconcile of `key` as soon as possible.
    pub fn now(&mut self, key: ObjectKey) {
        self.now_as(key, Urgency::Urgent);
    }

    /// Asks for a reconcile of `key` as soon as possible, after every urgent one if `urgency` is
    /// routine.
    pub fn now_as(&mut self, key: ObjectKey, urgency: Urgency) {
        if self.running.contains(&key) {
            if self.again.insert(key.clone()) {
                self.fresh.push(key);
            }
            return;
        }
        if let Some(at) = self.due_at.remove(&key) {
            self.later.remove(&(at, key.clone()));
        }
        match self.is_due.get(&key) {
            Some(Urgency::Urgent) => {}
            Some(Urgency::Routine) if urgency == Urgency::Routine => {}
            waiting => {
                if waiting.is_none() {
                    self.fresh.push(key.clone());
                }
                if urgency == Urgency::Urgent {
                    self.urgent_due += 1;
                }
                self.is_due.insert(key.clone(), urgency);
                match urgency {
                    Urgency::Urgent => self.urgent.push_back(key),
                    Urgency::Routine => self.routine.push_back(key),
                }
            }
        }
    }

    /// Asks for a reconcile of `key` at `at`, unless one is asked for earlier.
    pub fn at(&mut self, key: ObjectKey, at: Instant) {
        if self.is_due.contains_key(&key) {
            return;
        }
        if let Some(&earlier) = self.due_at.get(&key) {
            if earlier <= at {
                return;
            }
            self.later.remove(&(earlier, key.clone()));
        }
        self.due_at.insert(key.clone(), at);
        self.later.insert((at, key));
    }

    /// When the next claim due later is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.later.first().map(|(at, _)| *at)
    }

    /// Makes the claims due by `now` due now.
    pub fn promote(&mut self, now: Instant) {
        while self.later.first().is_some_and(|(at, _)| *at <= now) {
            let (_, key) = self.later.pop_first().expect("a first entry");
            self.due_at.remove(&key);
            self.now(key);
        }
    }

    /// Stamps the requests added since the last call with `now`; returns how many there were.
    pub fn stamp(&mut self, now: Instant) -> u64 {
        let added = self.fresh.len() as u64;
        for key in self.fresh.drain(..) {
            self.waiting_since.entry(key).or_insert(now);
        }
        added
    }

    /// The requests due now, urgent and routine (a request asked for while its claim is being
    /// reconciled counts as urgent: it runs at once after).
    pub fn depth(&self) -> (usize, usize) {
        let urgent = self.urgent_due + self.again.len();
        (urgent, self.is_due.len() - self.urgent_due)
    }

    /// The reconciles in progress at `now`: their time so far, summed, and the longest.
    pub fn in_progress(&self, now: Instant) -> (Duration, Duration) {
        unfinished(self.running_since.values(), now)
    }

    /// The next claim to reconcile, urgent ones first, marked as running at `now`; claims
    /// being reconciled wait.
    pub fn start(&mut self, now: Instant) -> Option<Started> {
        loop {
            let (key, taken_from) = match self.urgent.pop_front() {
                Some(key) => (key, Urgency::Urgent),
                None => (self.routine.pop_front()?, Urgency::Routine),
            };
            // Passed over: made urgent since, and taken from the urgent queue (or to be).
            if self.is_due.get(&key) != Some(&taken_from) {
                continue;
            }
            self.is_due.remove(&key);
            if taken_from == Urgency::Urgent {
                self.urgent_due -= 1;
            }
            if self.running.contains(&key) {
                self.again.insert(key);
                continue;
            }
            let waited = self
                .waiting_since
                .remove(&key)
                .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
            self.running.insert(key.clone());
            self.running_since.insert(key.clone(), now);
            return Some(Started { key, waited });
        }
    }

    /// Ends the reconcile of `key`; `requeue_after` is what it asked for. Returns how long it
    /// ran.
    pub fn finish(
        &mut self,
        key: ObjectKey,
        requeue_after: Option<Duration>,
        now: Instant,
    ) -> Duration {
        self.running.remove(&key);
        let ran = self
            .running_since
            .remove(&key)
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        if self.again.remove(&key) {
            // Asked for while it ran: due now, as added then (not a new add; `waiting_since`
            // keeps that time).
            let fresh = self.fresh.len();
            self.now(key);
            self.fresh.truncate(fresh);
        } else if let Some(delay) = requeue_after {
            // A delay too long for the clock means not in this process's life: a year will do.
            let at = now
                .checked_add(delay)
                .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600));
            self.at(key, at);
        }
        ran
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }
}

/// Of reconciles running since `since`, at `now`: their time so far, summed, and the longest
/// (client-go's `unfinished_work_seconds` and `longest_running_processor_seconds`).
pub fn unfinished<'a>(
    since: impl Iterator<Item = &'a Instant>,
    now: Instant,
) -> (Duration, Duration) {
    since
        .map(|since| now.saturating_duration_since(*since))
        .fold((Duration::ZERO, Duration::ZERO), |(sum, longest), d| {
            (sum + d, longest.max(d))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("ns", name)
    }

    fn started(queue: &mut WorkQueue) -> Vec<String> {
        let now = Instant::now();
        std::iter::from_fn(|| queue.start(now))
            .map(|s| s.key.name.to_string())
            .collect()
    }

    #[test]
    fn requests_for_one_claim_merge_and_keep_their_order() {
        let mut queue = WorkQueue::default();
        for name in ["a", "b", "a", "c", "b"] {
            queue.now(key(name));
        }
        assert_eq!(started(&mut queue), ["a", "b", "c"]);
        assert_eq!(queue.running(), 3);
    }

    #[test]
    fn a_claim_asked_for_while_reconciled_runs_once_more_after() {
        let mut queue = WorkQueue::default();
        let t0 = Instant::now();
        queue.now(key("a"));
        assert_eq!(started(&mut queue), ["a"]);
        queue.now(key("a"));
        queue.now(key("a"));
        assert!(started(&mut queue).is_empty(), "never twice at once");
        queue.finish(key("a"), Some(Duration::from_secs(60)), t0);
        assert_eq!(started(&mut queue), ["a"], "once, at once, not in a minute");
        queue.finish(key("a"), None, t0);
        assert!(started(&mut queue).is_empty());
        assert_eq!(queue.next_due(), None);
    }

    #[test]
    fn the_earliest_request_wins_and_a_request_now_replaces_a_later_one() {
        let mut queue = WorkQueue::default();
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        queue.at(key("a"), t0 + 10 * second);
        queue.at(key("a"), t0 + 2 * second);
        queue.at(key("a"), t0 + 5 * second);
        assert_eq!(queue.next_due(), Some(t0 + 2 * second));
        queue.promote(t0 + second);
        assert!(started(&mut queue).is_empty());
        queue.promote(t0 + 2 * second);
        assert_eq!(started(&mut queue), ["a"]);
        assert_eq!(queue.next_due(), None);

        queue.finish(key("a"), Some(10 * second), t0);
        queue.now(key("a"));
        assert_eq!(queue.next_due(), None, "the later request is replaced");
        assert_eq!(started(&mut queue), ["a"]);
    }

    #[test]
    fn a_requeue_too_long_for_the_clock_is_kept_for_later() {
        let mut queue = WorkQueue::default();
        let t0 = Instant::now();
        queue.now(key("a"));
        started(&mut queue);
        queue.finish(key("a"), Some(Duration::MAX), t0);
        assert!(queue.next_due().is_some_and(|at| at > t0));
    }

    #[test]
    fn routine_requests_wait_behind_urgent_ones_unless_made_urgent() {
        let mut queue = WorkQueue::default();
        for name in ["r1", "r2", "r3"] {
            queue.now_as(key(name), Urgency::Routine);
        }
        queue.now_as(key("u1"), Urgency::Urgent);
        queue.now_as(key("r2"), Urgency::Urgent);
        queue.now_as(key("r2"), Urgency::Routine);
        queue.now_as(key("u1"), Urgency::Routine);
        assert_eq!(started(&mut queue), ["u1", "r2", "r1", "r3"]);
        assert!(queue.is_due.is_empty() && queue.urgent.is_empty() && queue.routine.is_empty());
    }

    #[test]
    fn a_requeue_runs_when_due() {
        let mut queue = WorkQueue::default();
        let t0 = Instant::now();
        queue.now(key("a"));
        started(&mut queue);
        queue.finish(key("a"), Some(Duration::from_millis(200)), t0);
        assert!(started(&mut queue).is_empty());
        queue.promote(t0 + Duration::from_millis(200));
        assert_eq!(started(&mut queue), ["a"]);
    }

    #[test]
    fn it_measures_what_client_gos_work_queue_measures() {
        let mut queue = WorkQueue::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        queue.now(key("a"));
        queue.now(key("a"));
        queue.now_as(key("b"), Urgency::Routine);
        assert_eq!(queue.stamp(t0), 2, "a merged request adds nothing");
        assert_eq!(queue.depth(), (1, 1));

        let a = queue.start(t0 + ms(30)).unwrap();
        assert_eq!((a.key.name.as_ref(), a.waited), ("a", ms(30)));
        assert_eq!(queue.depth(), (0, 1));
        queue.now(key("a"));
        assert_eq!(
            queue.stamp(t0 + ms(40)),
            1,
            "asked for while running: one add"
        );
        assert_eq!(queue.depth(), (1, 1));
        assert_eq!(queue.in_progress(t0 + ms(50)), (ms(20), ms(20)));

        assert_eq!(queue.finish(key("a"), None, t0 + ms(70)), ms(40));
        assert_eq!(queue.stamp(t0 + ms(70)), 0, "its return is not a new add");
        assert_eq!(queue.depth(), (1, 1));
        let again = queue.start(t0 + ms(100)).unwrap();
        assert_eq!(again.waited, ms(60), "waited since it was asked for");
        let b = queue.start(t0 + ms(100)).unwrap();
        assert_eq!(b.waited, ms(100));
        assert_eq!(queue.depth(), (0, 0));
        assert_eq!(queue.in_progress(t0 + ms(110)), (ms(20), ms(10)));
    }
}
