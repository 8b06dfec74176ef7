//! When each pool's status may be written: at most once per [`MIN_STATUS_INTERVAL`] per pool,
//! and, while more than [`FEW_POOLS`] pools have changed within the last [`MAX_LAG`], once
//! [`CLAIMS_PER_WRITE`] claims moved its counts or once its oldest unpublished change is
//! [`MAX_LAG`] old ([`StatusPacing`]). Pure bookkeeping: the pool status controller asks it, and
//! the audit prunes it.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::api::PoolKey;

/// The shortest time between two status writes of one pool: a burst of allocations in one pool
/// costs one write a second, never one per address.
pub const MIN_STATUS_INTERVAL: Duration = Duration::from_secs(1);

/// How long a pool woken by the registry waits before its reconcile, gathering the other wakes
/// of the same claim's steps: one reconcile per claim, not one per step, when claims reach
/// thousands of pools a few at a time. As long as [`MIN_STATUS_INTERVAL`], so a pool's first
/// status after a change lags by at most that again; a change of the pool object itself is
/// reconciled at once.
pub const WAKE_DEBOUNCE: Duration = Duration::from_secs(1);

/// While at most this many pools have changed within the last [`MAX_LAG`] (the pools active
/// lately), each writes at once (after its [`MIN_STATUS_INTERVAL`]): a few pools (every test,
/// most installations) are never held back. Counting the pools that changed lately, not those
/// with a write pending, matters: claims reaching 200 pools one after the other keep only one or
/// two writes pending at any moment, and would each pay for a write.
pub const FEW_POOLS: usize = 10;

/// A pool whose counts moved by at least this many claims since its status writes at once
/// (after its [`MIN_STATUS_INTERVAL`]): its own claims pay for the write, so these writes cost
/// at most 1/25 = 0.04 of a write per claim, however many pools there are and however slowly the
/// API server realises claims.
pub const CLAIMS_PER_WRITE: u64 = 25;

/// Otherwise (more than [`FEW_POOLS`] active, fewer than [`CLAIMS_PER_WRITE`] claims
/// unpublished) a pool's status waits until its first unpublished change is this old. Each pool
/// is then written at most once per this lag for claims that did not pay for a write themselves,
/// so those writes scale with the pools, not with the claims or with wall time spent busy.
pub const MAX_LAG: Duration = Duration::from_secs(300);

/// The most writes per second of pools whose [`MAX_LAG`] has run out, over all pools: pools due
/// at the same time (a start, a bulk of claims over 1,000 pools) take turns, first due first.
/// Their lag is then at most the pools due divided by this rate, if that exceeds [`MAX_LAG`].
pub const LAGGED_WRITES_PER_SECOND: u32 = 5;

/// When each pool's status may be written: the pools with a status to write (due), since when,
/// the turns of those that waited out [`MAX_LAG`], and how many pools are active lately.
#[derive(Default)]
pub struct StatusPacing {
    pools: HashMap<PoolKey, Pacing>,
    /// How many pools became due within the last [`MAX_LAG`]: exact when one becomes active,
    /// recounted from `pools` at most once a second to let the others age out.
    active: usize,
    counted: Option<Instant>,
    /// The first instant not yet given as a turn.
    next_turn: Option<Instant>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Pacing {
    /// The pool's status was last written then.
    written: Option<Instant>,
    /// The pool's status has differed from what it should be since then.
    due_since: Option<Instant>,
    /// The pool last became due then (whether written since or not).
    became_due: Option<Instant>,
    /// The pool writes then, its lag run out; no other pool was given that instant.
    turn: Option<Instant>,
}

impl Pacing {
    fn is_active(&self, now: Instant) -> bool {
        self.became_due
            .is_some_and(|at| now.saturating_duration_since(at) < MAX_LAG)
    }

    /// Decides nothing any more at `now`: nothing due, no longer active, and written long enough
    /// ago that its [`MIN_STATUS_INTERVAL`] is over. A pool without an entry is paced exactly as
    /// one with an idle entry, so idle entries are dropped: a pool costs the pacing nothing once
    /// its status has settled.
    fn is_idle(&self, now: Instant) -> bool {
        self.due_since.is_none()
            && self.turn.is_none()
            && !self.is_active(now)
            && self
                .written
                .is_none_or(|at| now.saturating_duration_since(at) >= MIN_STATUS_INTERVAL)
    }
}

impl StatusPacing {
    /// A pool's status differs from what it should be, by `changes` claims (counted in its
    /// addresses used and total; `u64::MAX` when it has no counts yet or a condition turned): how
    /// long it must wait before writing, if at all. A pool that must wait keeps its place until it
    /// writes.
    pub fn ask(&mut self, pool: &PoolKey, changes: u64, now: Instant) -> Option<Duration> {
        let active = self.active_pools(now);
        let pacing = self.pools.entry(pool.clone()).or_default();
        let mut newly_active = false;
        if pacing.due_since.is_none() {
            newly_active = !pacing.is_active(now);
            pacing.due_since = Some(now);
            pacing.became_due = Some(now);
        }
        let active = active + usize::from(newly_active);
        self.active = active;
        let earliest = pacing
            .written
            .map_or(now, |at| (at + MIN_STATUS_INTERVAL).max(now));
        let at = if active <= FEW_POOLS || changes >= CLAIMS_PER_WRITE {
            earliest
        } else if let Some(turn) = pacing.turn {
            turn.max(earliest)
        } else {
            let lag_out = pacing.due_since.map_or(now, |since| since + MAX_LAG);
            let turn = lag_out.max(earliest).max(self.next_turn.unwrap_or(now));
            self.next_turn = Some(turn + Duration::from_secs(1) / LAGGED_WRITES_PER_SECOND);
            pacing.turn = Some(turn);
            turn
        };
        at.checked_duration_since(now).filter(|d| !d.is_zero())
    }

    /// The pools active lately (see [`FEW_POOLS`]), recounted at most once a second.
    fn active_pools(&mut self, now: Instant) -> usize {
        let stale = self
            .counted
            .is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_secs(1));
        if stale {
            self.forget_idle(now);
            self.active = self.pools.values().filter(|p| p.is_active(now)).count();
            self.counted = Some(now);
        }
        self.active
    }

    /// Drops the entries that decide nothing any more ([`Pacing::is_idle`]), and the table's
    /// room they took once it is mostly empty.
    fn forget_idle(&mut self, now: Instant) {
        self.pools.retain(|_, pacing| !pacing.is_idle(now));
        if self.pools.capacity() > 2 * self.pools.len() + 32 {
            self.pools.shrink_to_fit();
        }
    }

    /// The pool's status was written at `now`.
    pub fn written(&mut self, pool: &PoolKey, now: Instant) {
        self.settled(pool);
        self.pools.entry(pool.clone()).or_default().written = Some(now);
    }

    /// The pool's status is what it should be.
    pub fn settled(&mut self, pool: &PoolKey) {
        if let Some(pacing) = self.pools.get_mut(pool)
            && pacing.due_since.take().is_some()
        {
            pacing.turn = None;
        }
    }

    /// Forgets the pools `known` does not hold, and the pools whose status settled long enough
    /// ago (at `now`) that their entry decides nothing.
    pub fn retain(&mut self, known: &std::collections::HashSet<PoolKey>, now: Instant) {
        self.pools.retain(|pool, _| known.contains(pool));
        self.forget_idle(now);
        self.counted = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(i: usize) -> PoolKey {
        PoolKey::in_cluster("ns", &format!("p{i}"))
    }

    /// Makes pools `range` due at `now`, each with one claim unpublished, each written at once.
    fn due_and_written(pacing: &mut StatusPacing, range: std::ops::Range<usize>, now: Instant) {
        for i in range {
            assert_eq!(pacing.ask(&pool(i), 1, now), None, "pool {i}");
            pacing.written(&pool(i), now);
        }
    }

    #[test]
    fn a_few_pools_write_at_once_each_at_most_once_a_second() {
        let start = Instant::now();
        let mut pacing = StatusPacing::default();
        due_and_written(&mut pacing, 0..FEW_POOLS, start);
        let soon = start + Duration::from_millis(300);
        assert_eq!(
            pacing.ask(&pool(0), 1, soon),
            Some(MIN_STATUS_INTERVAL - Duration::from_millis(300))
        );
        assert_eq!(pacing.ask(&pool(0), 1, start + MIN_STATUS_INTERVAL), None);
    }

    #[test]
    fn among_many_pools_due_a_status_waits_for_its_claims_or_its_lag() {
        let start = Instant::now();
        let mut pacing = StatusPacing::default();
        // Many pools due, none written: each waits out the lag from when it became due.
        for i in 0..20 {
            pacing.ask(&pool(i), 1, start);
        }
        let later = start + Duration::from_secs(10);
        assert_eq!(pacing.ask(&pool(20), 1, later), Some(MAX_LAG));
        // It keeps its place, whatever else asks.
        assert_eq!(
            pacing.ask(&pool(20), 3, later + Duration::from_secs(100)),
            Some(MAX_LAG - Duration::from_secs(100))
        );
        assert_eq!(pacing.ask(&pool(20), 3, later + MAX_LAG), None);
        // Enough claims pay for a write at once.
        assert_eq!(pacing.ask(&pool(21), CLAIMS_PER_WRITE, later), None);
        pacing.written(&pool(21), later);
        // ... but not twice within a second.
        assert_eq!(
            pacing.ask(&pool(21), CLAIMS_PER_WRITE, later),
            Some(MIN_STATUS_INTERVAL)
        );
        // A pool with no counts yet writes at once.
        assert_eq!(pacing.ask(&pool(22), u64::MAX, later), None);
    }

    #[test]
    fn pools_whose_lag_runs_out_together_take_turns_at_a_bounded_rate() {
        let spacing = Duration::from_secs(1) / LAGGED_WRITES_PER_SECOND;
        let start = Instant::now();
        let mut pacing = StatusPacing::default();
        let waits: Vec<Option<Duration>> = (0..FEW_POOLS + 3)
            .map(|i| pacing.ask(&pool(i), 1, start))
            .collect();
        assert!(waits[..FEW_POOLS].iter().all(Option::is_none));
        assert_eq!(
            waits[FEW_POOLS..],
            [
                Some(MAX_LAG),
                Some(MAX_LAG + spacing),
                Some(MAX_LAG + spacing * 2)
            ]
        );
        // A pool due later than those turns waits its own lag only.
        let later = start + Duration::from_secs(60);
        assert_eq!(pacing.ask(&pool(50), 1, later), Some(MAX_LAG));
    }

    #[test]
    fn once_the_pools_active_lately_age_out_a_pool_writes_at_once() {
        let start = Instant::now();
        let mut pacing = StatusPacing::default();
        // Claims that reach many pools one after the other: each written at once while few are
        // active, then held back though only one write is ever pending.
        due_and_written(&mut pacing, 0..FEW_POOLS, start);
        assert!(pacing.ask(&pool(FEW_POOLS), 1, start).is_some());
        // Settled pools stay active for the lag, then age out.
        pacing.settled(&pool(FEW_POOLS));
        let later = start + MAX_LAG + Duration::from_secs(1);
        assert_eq!(pacing.ask(&pool(99), 1, later), None);
        // Pools that are gone no longer count.
        let mut pacing = StatusPacing::default();
        for i in 0..=FEW_POOLS {
            pacing.ask(&pool(i), 1, start);
        }
        assert!(pacing.ask(&pool(99), 1, start).is_some());
        let known = (0..3).map(pool).collect();
        pacing.retain(&known, start);
        assert_eq!(pacing.ask(&pool(200), 1, start), None);
    }

    #[test]
    fn a_pool_whose_status_settled_long_ago_costs_the_pacing_nothing() {
        let start = Instant::now();
        let mut pacing = StatusPacing::default();
        let paid_and_written = |pacing: &mut StatusPacing, range: std::ops::Range<usize>, now| {
            for i in range {
                assert_eq!(pacing.ask(&pool(i), CLAIMS_PER_WRITE, now), None);
                pacing.written(&pool(i), now);
            }
        };
        paid_and_written(&mut pacing, 0..1_000, start);
        assert!(pacing.ask(&pool(1_000), 1, start).is_some(), "held back");
        assert_eq!(pacing.pools.len(), 1_001);
        // One pool still due, the others settled: once their lag is over, only it is kept.
        let later = start + MAX_LAG + Duration::from_secs(1);
        assert_eq!(pacing.ask(&pool(1_000), 1, later), None);
        assert_eq!(pacing.pools.len(), 1);
        assert!(
            pacing.pools.capacity() < 100,
            "the table gave its room back"
        );
        pacing.written(&pool(1_000), later);
        // The audit's pass forgets them too, with nothing asked.
        paid_and_written(&mut pacing, 0..100, later);
        let known = (0..=1_000).map(pool).collect();
        pacing.retain(&known, later + MAX_LAG + Duration::from_secs(1));
        assert!(pacing.pools.is_empty());
    }
}
