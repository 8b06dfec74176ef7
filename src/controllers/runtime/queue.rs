//! The controllers' work queue: which objects wait for a reconcile, in what order, and which are
//! being reconciled. It does no I/O and takes the time as an argument, so it is tested without a
//! runtime (kube-runtime's `scheduler.rs` habit). Keyed by what each controller keys its objects
//! by: an [`ObjectKey`] for claims, a [`PoolKey`](crate::api::PoolKey) for pools, a name for
//! reservations.
//!
//! - an object is reconciled by one reconcile at a time: a request for an object being
//!   reconciled waits for that reconcile to end, then runs once more;
//! - requests for one object merge into one, and the earliest wins;
//! - urgent requests run before routine ones (a realised claim that only needs confirming);
//! - once nothing waits or runs, its tables give their memory back: a start schedules every
//!   object at once (every pool, every claim), and tables grown for that would otherwise stay at
//!   that size for the life of the process (kube-runtime's scheduler keeps its own, about 700
//!   bytes per pool: [performance.md](../../../docs/performance.md#many-pools)).
//!
//! It also keeps what client-go's work queue measures: how many requests were added (a request
//! merged into a waiting one adds nothing), how long each waited and ran, the depth by
//! priority, and the reconciles in progress ([`crate::telemetry::QueueMetrics`]).
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::ObjectKey;

/// How soon an object is to be reconciled, of the requests due now (only the claims' requests
/// are ever routine).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// Before any routine request.
    Urgent,
    /// A realised claim the watch brings: it only needs confirming.
    Routine,
}

/// The objects waiting for a reconcile, and the ones being reconciled.
pub struct WorkQueue<K = ObjectKey> {
    /// Due now and urgent, in the order they were asked for.
    urgent: VecDeque<K>,
    /// Due now and routine, in the order they were asked for.
    routine: VecDeque<K>,
    /// The objects due now, with the queue each one is to be taken from (a routine request made
    /// urgent stays in the routine queue too, and is passed over there).
    is_due: HashMap<K, Urgency>,
    /// Due later, by time.
    later: BTreeSet<(Instant, K)>,
    /// When each member of `later` is due.
    due_at: HashMap<K, Instant>,
    /// Being reconciled.
    running: HashSet<K>,
    /// Asked for while being reconciled: due again (urgent) once that reconcile ends.
    again: HashSet<K>,
    /// Requests added since the last [`WorkQueue::stamp`], to be stamped with the time.
    fresh: Vec<K>,
    /// When each waiting request (due now, or again) was added.
    waiting_since: HashMap<K, Instant>,
    /// When each running reconcile started.
    running_since: HashMap<K, Instant>,
    /// How many of `is_due` are urgent.
    urgent_due: usize,
}

/// Entries an empty table may keep: below this, freeing it would only be allocated again by the
/// next request.
const KEPT_CAPACITY: usize = 32;

/// A request taken to be reconciled.
#[derive(Debug, PartialEq, Eq)]
pub struct Started<K = ObjectKey> {
    pub key: K,
    /// How long it waited since it was added (zero if it was never stamped).
    pub waited: Duration,
}

impl<K> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            urgent: VecDeque::new(),
            routine: VecDeque::new(),
            is_due: HashMap::new(),
            later: BTreeSet::new(),
            due_at: HashMap::new(),
            running: HashSet::new(),
            again: HashSet::new(),
            fresh: Vec::new(),
            waiting_since: HashMap::new(),
            running_since: HashMap::new(),
            urgent_due: 0,
        }
    }
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    /// Asks for a reconcile of `key` as soon as possible.
    pub fn now(&mut self, key: K) {
        self.now_as(key, Urgency::Urgent);
    }

    /// Asks for a reconcile of `key` as soon as possible, after every urgent one if `urgency` is
    /// routine.
    pub fn now_as(&mut self, key: K, urgency: Urgency) {
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
    pub fn at(&mut self, key: K, at: Instant) {
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

    /// When the next object due later is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.later.first().map(|(at, _)| *at)
    }

    /// Makes the objects due by `now` due now.
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

    /// The requests due now, urgent and routine (a request asked for while its object is being
    /// reconciled counts as urgent: it runs at once after).
    pub fn depth(&self) -> (usize, usize) {
        let urgent = self.urgent_due + self.again.len();
        (urgent, self.is_due.len() - self.urgent_due)
    }

    /// The reconciles in progress at `now`: their time so far, summed, and the longest.
    pub fn in_progress(&self, now: Instant) -> (Duration, Duration) {
        unfinished(self.running_since.values(), now)
    }

    /// The next object to reconcile, urgent ones first, marked as running at `now`; objects
    /// being reconciled wait.
    pub fn start(&mut self, now: Instant) -> Option<Started<K>> {
        loop {
            let (key, taken_from) = match self.urgent.pop_front() {
                Some(key) => (key, Urgency::Urgent),
                None => match self.routine.pop_front() {
                    Some(key) => (key, Urgency::Routine),
                    None => {
                        self.trim();
                        return None;
                    }
                },
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
    pub fn finish(&mut self, key: K, requeue_after: Option<Duration>, now: Instant) -> Duration {
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
        self.trim();
        ran
    }

    /// Gives back the memory of every table left empty (see the module): a table that grew past
    /// [`KEPT_CAPACITY`] and holds nothing now is freed, and grows again from nothing if asked.
    fn trim(&mut self) {
        fn map<K2, V>(table: &mut HashMap<K2, V>) {
            if table.is_empty() && table.capacity() > KEPT_CAPACITY {
                *table = HashMap::new();
            }
        }
        fn set<K2>(table: &mut HashSet<K2>) {
            if table.is_empty() && table.capacity() > KEPT_CAPACITY {
                *table = HashSet::new();
            }
        }
        fn deque<K2>(queue: &mut VecDeque<K2>) {
            if queue.is_empty() && queue.capacity() > KEPT_CAPACITY {
                *queue = VecDeque::new();
            }
        }
        map(&mut self.is_due);
        map(&mut self.due_at);
        map(&mut self.waiting_since);
        map(&mut self.running_since);
        set(&mut self.running);
        set(&mut self.again);
        deque(&mut self.urgent);
        deque(&mut self.routine);
        if self.fresh.is_empty() && self.fresh.capacity() > KEPT_CAPACITY {
            self.fresh = Vec::new();
        }
    }

    /// The bytes of the queue's tables beyond its struct, as they are allocated now (their
    /// capacity, not their length): what [`WorkQueue::trim`] gives back.
    #[cfg(test)]
    fn allocated(&self) -> usize {
        use std::mem::size_of;
        let entry = size_of::<K>();
        self.is_due.capacity() * (entry + size_of::<Urgency>())
            + self.due_at.capacity() * (entry + size_of::<Instant>())
            + self.waiting_since.capacity() * (entry + size_of::<Instant>())
            + self.running_since.capacity() * (entry + size_of::<Instant>())
            + (self.running.capacity() + self.again.capacity()) * entry
            + (self.urgent.capacity() + self.routine.capacity() + self.fresh.capacity()) * entry
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
    fn debounced_wakes_merge_into_one_reconcile_even_while_one_runs() {
        let mut queue = WorkQueue::default();
        let t0 = Instant::now();
        let debounce = Duration::from_secs(1);
        queue.now(key("a"));
        assert_eq!(started(&mut queue), ["a"]);
        // Three steps of a claim wake the pool while its reconcile runs, each a debounce ahead.
        for step in 0..3 {
            queue.at(key("a"), t0 + Duration::from_millis(100 * step) + debounce);
        }
        queue.finish(key("a"), Some(Duration::from_secs(300)), t0 + debounce / 2);
        assert!(
            started(&mut queue).is_empty(),
            "not at once: the wakes wait"
        );
        assert_eq!(
            queue.next_due(),
            Some(t0 + debounce),
            "the first wake's time"
        );
        queue.promote(t0 + debounce);
        assert_eq!(started(&mut queue), ["a"], "one reconcile for the three");
        queue.finish(key("a"), None, t0 + debounce);
        assert_eq!(queue.next_due(), None);
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
    fn a_burst_gives_its_memory_back_once_it_is_served() {
        let mut queue = WorkQueue::default();
        let t0 = Instant::now();
        for n in 0..1_000 {
            queue.now(key(&format!("p{n}")));
        }
        queue.stamp(t0);
        while let Some(started) = queue.start(t0) {
            queue.finish(started.key, None, t0);
        }
        assert_eq!(queue.running(), 0);
        let left = queue.allocated();
        assert!(
            left <= 10 * KEPT_CAPACITY * std::mem::size_of::<ObjectKey>() * 2,
            "{left} bytes kept after 1,000 requests were served"
        );

        for n in 0..1_000 {
            queue.at(key(&format!("p{n}")), t0 + Duration::from_secs(1));
        }
        assert!(queue.allocated() > left, "requests due later are kept");
        queue.promote(t0 + Duration::from_secs(1));
        queue.stamp(t0);
        while let Some(started) = queue.start(t0) {
            queue.finish(started.key, None, t0);
        }
        assert!(queue.allocated() <= left);
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
