//! How a fresh list differs from the registry: a re-list applies the difference, and the audit
//! compares page by page through the same functions.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{Change, HoldRecord, Registry, SpecFingerprint, Unready};
use crate::allocator::ParsedSpec;
use crate::api::{ObjectKey, PoolKey};

impl Registry {
    /// The changes that would make the registry agree with a fresh list (a `*Listed` change);
    /// empty for any other change, and when they already agree.
    pub fn diff(&self, listed: Change) -> Vec<Change> {
        match listed {
            Change::PoolsListed(kind, pools) => {
                let listed: HashMap<&PoolKey, &Result<ParsedSpec, Unready>> =
                    pools.iter().map(|(k, v)| (k, v)).collect();
                let gone = self
                    .pools
                    .iter()
                    .filter(|(key, entry)| {
                        key.kind == kind && !listed.contains_key(key) && entry.exists()
                    })
                    .map(|(key, _)| Change::PoolGone(key.clone()));
                let changed = pools
                    .iter()
                    .filter(|(key, parsed)| {
                        self.pools.get(key).and_then(|e| e.spec)
                            != Some(SpecFingerprint::of(parsed))
                    })
                    .map(|(key, parsed)| Change::Pool(key.clone(), parsed.clone()));
                sorted(gone.chain(changed))
            }
            Change::ReservationsListed(list) => {
                let mut compared = ListedHolds::default();
                self.compare_reservations(list, &mut compared);
                self.reservation_differences(compared)
            }
            Change::AddressesListed(list) => {
                let mut compared = ListedHolds::default();
                self.compare_addresses(list, &mut compared);
                self.address_differences(compared)
            }
            _ => Vec::new(),
        }
    }

    /// Compares one page of a fresh list of reservations; see [`ListedHolds`].
    pub fn compare_reservations(
        &self,
        page: Vec<(String, HoldRecord)>,
        compared: &mut ListedHolds<Arc<str>>,
    ) {
        let page = page.into_iter().map(|(name, record)| (name.into(), record));
        compared.compare(&self.reservations, page, |name, record| {
            Change::Reservation(name.to_string(), record)
        });
    }

    /// Compares one page of a fresh list of `IPAddress`es; see [`ListedHolds`].
    pub fn compare_addresses(
        &self,
        page: Vec<(ObjectKey, HoldRecord)>,
        compared: &mut ListedHolds<ObjectKey>,
    ) {
        compared.compare(&self.addresses, page, Change::Address);
    }

    /// What a whole list of reservations, compared page by page, differs by: as
    /// [`Registry::diff`] of the `ReservationsListed` change.
    pub fn reservation_differences(&self, compared: ListedHolds<Arc<str>>) -> Vec<Change> {
        compared.differences(&self.reservations, |name| {
            Change::ReservationGone(name.to_string())
        })
    }

    /// What a whole list of `IPAddress`es, compared page by page, differs by: as
    /// [`Registry::diff`] of the `AddressesListed` change.
    pub fn address_differences(&self, compared: ListedHolds<ObjectKey>) -> Vec<Change> {
        compared.differences(&self.addresses, |key| Change::AddressGone(key.clone()))
    }
}

/// A fresh list of reservations or `IPAddress`es being compared with the registry a page at a
/// time, so that only one page of the list is in memory (the audit's lists): the
/// records a page has anew or otherwise are kept as changes, and only the keys of the rest.
/// Once every page is compared, the registry's records the list lacked are removals. The
/// registry may change between pages (the watches go on); so it may between a list and its
/// comparison, and the audit counts only a difference a second list confirms.
pub struct ListedHolds<K> {
    listed: HashSet<K>,
    changed: Vec<Change>,
}

impl<K> Default for ListedHolds<K> {
    fn default() -> Self {
        ListedHolds {
            listed: HashSet::new(),
            changed: Vec::new(),
        }
    }
}

impl<K: Clone + Eq + std::hash::Hash> ListedHolds<K> {
    fn compare(
        &mut self,
        current: &HashMap<K, HoldRecord>,
        page: impl IntoIterator<Item = (K, HoldRecord)>,
        changed: impl Fn(K, HoldRecord) -> Change,
    ) {
        for (key, record) in page {
            if current.get(&key) != Some(&record) {
                self.changed.push(changed(key.clone(), record));
            }
            self.listed.insert(key);
        }
    }

    /// Removals for records the list lacked, then additions and changes for records it had anew.
    fn differences(
        self,
        current: &HashMap<K, HoldRecord>,
        gone: impl Fn(&K) -> Change,
    ) -> Vec<Change> {
        let listed = self.listed;
        sorted(
            current
                .keys()
                .filter(|k| !listed.contains(*k))
                .map(gone)
                .chain(self.changed),
        )
    }
}

/// A deterministic order, so that two diffs of the same lists compare equal: removals first,
/// then by the object each change is about.
fn sorted(changes: impl IntoIterator<Item = Change>) -> Vec<Change> {
    let mut changes: Vec<Change> = changes.into_iter().collect();
    changes.sort_by(|a, b| (!a.is_removal(), a.subject()).cmp(&(!b.is_removal(), b.subject())));
    changes
}
