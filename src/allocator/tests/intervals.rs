use crate::allocator::intervals::IntervalMap;

fn contents(map: &IntervalMap) -> Vec<(u128, u128)> {
    map.iter().collect()
}

#[test]
fn remove_splits_and_insert_merges() {
    let mut map = IntervalMap::from_sorted([(10, 20)]);
    assert!(map.remove(15));
    assert!(!map.remove(15));
    assert_eq!(contents(&map), [(10, 14), (16, 20)]);
    assert!(map.remove(10));
    assert!(map.remove(20));
    assert_eq!(contents(&map), [(11, 14), (16, 19)]);
    assert!(map.insert(15));
    assert!(!map.insert(15));
    assert_eq!(contents(&map), [(11, 19)]);
    assert!(map.insert(21));
    assert_eq!(contents(&map), [(11, 19), (21, 21)]);
    assert!(map.insert(20));
    assert_eq!(contents(&map), [(11, 21)]);
}

#[test]
fn extremes_do_not_overflow() {
    let mut map = IntervalMap::from_sorted([(0, u128::MAX)]);
    assert!(map.remove(0));
    assert!(map.remove(u128::MAX));
    assert_eq!(contents(&map), [(1, u128::MAX - 1)]);
    assert!(map.insert(u128::MAX));
    assert!(map.insert(0));
    assert_eq!(contents(&map), [(0, u128::MAX)]);
    assert_eq!(map.pop_first(), Some(0));
    assert_eq!(map.first_at_or_after(0), Some(1));
    assert_eq!(map.first_at_or_after(u128::MAX), Some(u128::MAX));
}

#[test]
fn pop_first_and_lookups() {
    let mut map = IntervalMap::from_sorted([(1, 2), (5, 5)]);
    assert_eq!(map.first_at_or_after(3), Some(5));
    assert_eq!(map.first_at_or_after(6), None);
    assert_eq!(map.pop_first(), Some(1));
    assert_eq!(map.pop_first(), Some(2));
    assert_eq!(map.pop_first(), Some(5));
    assert_eq!(map.pop_first(), None);
    assert_eq!(map.first(), None);
}

/// The intervals of a set of values, lowest first.
fn intervals_of(values: &std::collections::BTreeSet<u128>) -> Vec<(u128, u128)> {
    let mut intervals: Vec<(u128, u128)> = Vec::new();
    for &value in values {
        match intervals.last_mut() {
            Some((_, last)) if *last + 1 == value => *last = value,
            _ => intervals.push((value, value)),
        }
    }
    intervals
}

proptest::proptest! {
    /// Whatever the count of intervals (the map moves between its vector and its B-tree on the
    /// way up and down), it answers as the set of values it stands for.
    #[test]
    fn answers_as_the_set_of_its_values(
        start in proptest::collection::btree_set(0u128..96, 0..96),
        steps in proptest::collection::vec((0u8..3, 0u128..100), 1..200),
    ) {
        let mut model = start;
        let mut map = IntervalMap::from_sorted(intervals_of(&model));
        for (operation, value) in steps {
            match operation {
                0 => proptest::prop_assert_eq!(map.insert(value), model.insert(value)),
                1 => proptest::prop_assert_eq!(map.remove(value), model.remove(&value)),
                _ => proptest::prop_assert_eq!(map.pop_first(), model.pop_first()),
            }
            let intervals = intervals_of(&model);
            proptest::prop_assert_eq!(contents(&map), intervals.clone());
            proptest::prop_assert_eq!(map.interval_count(), intervals.len());
            proptest::prop_assert_eq!(map.first(), model.first().copied());
            proptest::prop_assert_eq!(map.contains(value), model.contains(&value));
            proptest::prop_assert_eq!(
                map.first_at_or_after(value),
                model.range(value..).next().copied()
            );
        }
    }
}
