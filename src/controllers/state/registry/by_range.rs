//! Pools by address range: which pools a block of addresses meets, without visiting every pool.
//!
//! A hold, an allocation in flight, a pool's overlap condition and a reservation's scope all ask
//! which pools contain some addresses. Asking every pool costs O(pools) per claim, so O(pools ×
//! claims) over a fleet of small pools; this index answers in O(log S + found), where S is the
//! number of segments below (about one per pool range when pools do not overlap).
//!
//! Each family's address line is cut, where any pool's range begins or ends, into disjoint
//! segments, and each segment lists the pools whose range contains all of it. Addresses no pool
//! contains have no segment. Adjacent segments with the same pools are merged again when a pool
//! goes, so the index stays as small as the ranges it describes.
use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::allocator::{AddrRange, AddressSet, Family};
use crate::api::PoolKey;

#[derive(Default)]
pub(super) struct PoolsByRange {
    v4: BTreeMap<u128, Segment>,
    v6: BTreeMap<u128, Segment>,
}

/// The addresses from its key (the first) to `last`, and the pools containing all of them,
/// sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Segment {
    last: u128,
    pools: Vec<PoolKey>,
}

/// Adds a pool to, or takes it out of, the addresses from `first` to `last` of one line.
type Edit = fn(&mut BTreeMap<u128, Segment>, u128, u128, &PoolKey);

fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl PoolsByRange {
    fn line(&self, family: Family) -> &BTreeMap<u128, Segment> {
        match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        }
    }

    fn line_mut(&mut self, family: Family) -> &mut BTreeMap<u128, Segment> {
        match family {
            Family::V4 => &mut self.v4,
            Family::V6 => &mut self.v6,
        }
    }

    /// Records that `pool`'s range is `range`.
    pub(super) fn insert(&mut self, pool: &PoolKey, range: &AddressSet) {
        self.edit(pool, range, add);
    }

    /// Forgets that `pool`'s range is `range` (what [`PoolsByRange::insert`] was given).
    pub(super) fn remove(&mut self, pool: &PoolKey, range: &AddressSet) {
        self.edit(pool, range, take_out);
    }

    fn edit(&mut self, pool: &PoolKey, range: &AddressSet, edit: Edit) {
        let line = self.line_mut(range.family());
        for interval in range.ranges() {
            let (first, last) = (bits(interval.first()), bits(interval.last()));
            edit(line, first, last, pool);
            merge_around(line, first, last);
        }
    }

    /// The pools whose range shares an address with `range`, each once, sorted.
    pub(super) fn meeting(&self, range: AddrRange) -> Vec<PoolKey> {
        let mut found = Vec::new();
        self.collect(range, &mut found);
        found.sort();
        found.dedup();
        found
    }

    /// The pools whose range shares an address with `set`, each once, sorted.
    pub(super) fn meeting_set(&self, set: &AddressSet) -> Vec<PoolKey> {
        let mut found = Vec::new();
        for range in set.ranges() {
            self.collect(range, &mut found);
        }
        found.sort();
        found.dedup();
        found
    }

    /// The pools whose range contains `ip`.
    pub(super) fn containing(&self, ip: IpAddr) -> &[PoolKey] {
        let at = bits(ip);
        match self
            .line(crate::allocator::Family::of(ip))
            .range(..=at)
            .next_back()
        {
            Some((_, segment)) if segment.last >= at => &segment.pools,
            _ => &[],
        }
    }

    fn collect(&self, range: AddrRange, found: &mut Vec<PoolKey>) {
        let (first, last) = (bits(range.first()), bits(range.last()));
        let line = self.line(range.family());
        if let Some((_, before)) = line.range(..first).next_back()
            && before.last >= first
        {
            found.extend(before.pools.iter().cloned());
        }
        for (_, segment) in line.range(first..=last) {
            found.extend(segment.pools.iter().cloned());
        }
    }

    /// How many segments the index holds (for tests: it must not grow with churn).
    #[cfg(test)]
    pub(super) fn segments(&self) -> usize {
        self.v4.len() + self.v6.len()
    }
}

/// Makes `at` the first address of a segment if a segment covers it.
fn split_at(line: &mut BTreeMap<u128, Segment>, at: u128) {
    let Some((_, segment)) = line.range_mut(..at).next_back() else {
        return;
    };
    if segment.last < at {
        return;
    }
    let tail = Segment {
        last: segment.last,
        pools: segment.pools.clone(),
    };
    segment.last = at - 1;
    line.insert(at, tail);
}

/// Adds `pool` to every address from `first` to `last`.
fn add(line: &mut BTreeMap<u128, Segment>, first: u128, last: u128, pool: &PoolKey) {
    split_at(line, first);
    if let Some(after) = last.checked_add(1) {
        split_at(line, after);
    }
    let starts: Vec<u128> = line.range(first..=last).map(|(start, _)| *start).collect();
    // The next address not yet covered; `None` once the family's last address is covered.
    let mut next = Some(first);
    for start in starts {
        if let Some(gap) = next.filter(|gap| *gap < start) {
            line.insert(
                gap,
                Segment {
                    last: start - 1,
                    pools: vec![pool.clone()],
                },
            );
        }
        let segment = line.get_mut(&start).expect("a start just listed");
        if let Err(at) = segment.pools.binary_search(pool) {
            segment.pools.insert(at, pool.clone());
        }
        next = segment.last.checked_add(1);
    }
    if let Some(gap) = next.filter(|gap| *gap <= last) {
        line.insert(
            gap,
            Segment {
                last,
                pools: vec![pool.clone()],
            },
        );
    }
}

/// Takes `pool` out of every address from `first` to `last`.
fn take_out(line: &mut BTreeMap<u128, Segment>, first: u128, last: u128, pool: &PoolKey) {
    split_at(line, first);
    if let Some(after) = last.checked_add(1) {
        split_at(line, after);
    }
    let starts: Vec<u128> = line.range(first..=last).map(|(start, _)| *start).collect();
    for start in starts {
        let segment = line.get_mut(&start).expect("a start just listed");
        if let Ok(at) = segment.pools.binary_search(pool) {
            segment.pools.remove(at);
        }
        if segment.pools.is_empty() {
            line.remove(&start);
        }
    }
}

/// Merges adjacent segments with the same pools from the segment before `first` to the one
/// after `last`: the only places [`add`] and [`take_out`] may have cut.
fn merge_around(line: &mut BTreeMap<u128, Segment>, first: u128, last: u128) {
    let from = line
        .range(..first)
        .next_back()
        .map_or(first, |(start, _)| *start);
    let to = last.saturating_add(1);
    let starts: Vec<u128> = line.range(from..=to).map(|(start, _)| *start).collect();
    let Some((&head, rest)) = starts.split_first() else {
        return;
    };
    let mut kept = head;
    for &start in rest {
        let joins = {
            let (previous, next) = (&line[&kept], &line[&start]);
            previous.last.checked_add(1) == Some(start) && previous.pools == next.pools
        };
        if joins {
            let next = line.remove(&start).expect("a start just listed");
            line.get_mut(&kept).expect("a start just listed").last = next.last;
        } else {
            kept = start;
        }
    }
}
