//! Which cached versions of a claim inpool's own writes have already replaced.
//!
//! A claim's reconcile patches its finalizer and then applies its status. The watch event of the
//! finalizer patch queues a second reconcile, and that one often starts before the watch has
//! delivered the status write: from the cache it looks as if the claim had no `Ready` yet, so it
//! would write the same status again and publish the same Event again (about one claim in ten
//! at 2,000 claims, measured by the scale harness). The resourceVersions a write replaced tell
//! that the cached object is behind; the watch event of that write brings the next reconcile.
//! Only equality of resourceVersions is used, never their order (the API treats them as opaque).
use std::collections::{HashMap, HashSet};

use crate::api::ObjectKey;

#[derive(Debug, Default)]
pub struct OwnWrites(HashMap<ObjectKey, Versions>);

#[derive(Debug, Default)]
struct Versions {
    /// Versions older than one of our writes.
    replaced: HashSet<String>,
    /// The version our last write produced.
    latest: String,
}

impl OwnWrites {
    /// Our write turned the claim from version `read` (what the write was computed from) into
    /// version `written`.
    pub fn record(&mut self, key: &ObjectKey, read: Option<&str>, written: Option<&str>) {
        let Some(written) = written else {
            return;
        };
        let versions = self.0.entry(key.clone()).or_default();
        if let Some(read) = read {
            versions.replaced.insert(read.to_string());
        }
        let previous = std::mem::replace(&mut versions.latest, written.to_string());
        if !previous.is_empty() && previous != written {
            versions.replaced.insert(previous);
        }
        versions.replaced.remove(written);
    }

    /// Whether the cached version `cached` is one our own writes have replaced. Any other version
    /// means the cache has caught up (or someone else wrote since): the record is dropped.
    pub fn is_behind(&mut self, key: &ObjectKey, cached: Option<&str>) -> bool {
        let behind = match (self.0.get(key), cached) {
            (Some(versions), Some(cached)) => versions.replaced.contains(cached),
            _ => false,
        };
        if !behind {
            self.0.remove(key);
        }
        behind
    }

    /// The claim is gone (its last finalizer was removed).
    pub fn forget(&mut self, key: &ObjectKey) {
        self.0.remove(key);
    }

    /// Keeps the records of the claims that still exist.
    pub fn retain(&mut self, exists: impl Fn(&ObjectKey) -> bool) {
        self.0.retain(|key, _| exists(key));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ObjectKey {
        ObjectKey::new("ns", "claim")
    }

    #[test]
    fn versions_a_reconcile_wrote_over_are_behind_until_the_cache_shows_the_last_write() {
        let mut writes = OwnWrites::default();
        // finalizer patch 10 → 11, then status apply computed from 10 gives 12
        writes.record(&key(), Some("10"), Some("11"));
        writes.record(&key(), Some("10"), Some("12"));
        assert!(writes.is_behind(&key(), Some("10")));
        assert!(writes.is_behind(&key(), Some("11")));
        assert!(!writes.is_behind(&key(), Some("12")));
        assert!(writes.is_empty(), "caught up: nothing kept");
        assert!(
            !writes.is_behind(&key(), Some("11")),
            "forgotten once caught up"
        );
    }

    #[test]
    fn a_version_written_by_someone_else_is_not_behind() {
        let mut writes = OwnWrites::default();
        writes.record(&key(), Some("10"), Some("11"));
        assert!(!writes.is_behind(&key(), Some("15")));
        assert!(writes.is_empty());
    }

    #[test]
    fn claims_without_own_writes_are_never_behind() {
        let mut writes = OwnWrites::default();
        assert!(!writes.is_behind(&key(), Some("10")));
        writes.record(&key(), Some("10"), None);
        assert!(
            !writes.is_behind(&key(), Some("10")),
            "a write without a version records nothing"
        );
        writes.record(&ObjectKey::new("ns", "other"), Some("10"), Some("11"));
        assert!(
            !writes.is_behind(&key(), Some("10")),
            "records are per claim"
        );
        assert_eq!(writes.len(), 1);
    }

    #[test]
    fn forget_drops_the_record() {
        let mut writes = OwnWrites::default();
        writes.record(&key(), Some("10"), Some("11"));
        writes.forget(&key());
        assert!(!writes.is_behind(&key(), Some("10")));
    }
}
