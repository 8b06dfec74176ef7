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
