//! The gate's caches: decisions kept for a time, keyed by SHA-256 digests of everything that
//! decides (so a key is 32 bytes whatever the token or path), and bounded: a full cache gives up
//! its expired entries, then denials, then allows, soonest to expire first.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::UserInfo;

/// A cache key: a SHA-256 digest, the same size whatever it digests.
pub(super) type Digest = [u8; 32];

/// Feeds length-prefixed fields into SHA-256, so that different field lists never digest alike.
struct KeyBuilder(ring::digest::Context);

impl KeyBuilder {
    fn new(kind: &str) -> KeyBuilder {
        let mut builder = KeyBuilder(ring::digest::Context::new(&ring::digest::SHA256));
        builder.field(kind.as_bytes());
        builder
    }

    fn field(&mut self, bytes: &[u8]) -> &mut KeyBuilder {
        self.0.update(&(bytes.len() as u64).to_be_bytes());
        self.0.update(bytes);
        self
    }

    fn optional(&mut self, text: Option<&str>) -> &mut KeyBuilder {
        match text {
            None => self.field(b"-"),
            Some(text) => self.field(b"+").field(text.as_bytes()),
        }
    }

    fn finish(self) -> Digest {
        let mut key = [0; 32];
        key.copy_from_slice(self.0.finish().as_ref());
        key
    }
}

/// The authentication cache's key of `token`.
pub(super) fn token_key(token: &str) -> Digest {
    let mut key = KeyBuilder::new("token");
    key.field(token.as_bytes());
    key.finish()
}

/// The authorization cache's key of `user` (all of it: name, uid, groups, extra) on `verb path`.
pub(super) fn access_key(user: &UserInfo, verb: &str, path: &str) -> Digest {
    let mut key = KeyBuilder::new("access");
    key.optional(user.username.as_deref())
        .optional(user.uid.as_deref());
    let groups = user.groups.as_deref().unwrap_or_default();
    key.field(&(groups.len() as u64).to_be_bytes());
    for group in groups {
        key.field(group.as_bytes());
    }
    let extra = user.extra.as_ref();
    key.field(&(extra.map_or(0, |e| e.len()) as u64).to_be_bytes());
    for (name, values) in extra.into_iter().flatten() {
        key.field(name.as_bytes())
            .field(&(values.len() as u64).to_be_bytes());
        for value in values {
            key.field(value.as_bytes());
        }
    }
    key.field(verb.as_bytes()).field(path.as_bytes());
    key.finish()
}

/// Which entries a full cache gives up first: denials before allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Keep {
    Denial,
    Allow,
}

struct Entry<V> {
    value: V,
    keep: Keep,
    expires: Instant,
}

/// A map of at most `capacity` entries that expire.
pub(super) struct TtlCache<V> {
    entries: HashMap<Digest, Entry<V>>,
    capacity: usize,
}

impl<V: Clone> TtlCache<V> {
    pub(super) fn new(capacity: usize) -> TtlCache<V> {
        TtlCache {
            entries: HashMap::new(),
            capacity,
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The value of `key` if it has not expired at `now`.
    pub(super) fn get(&self, key: &Digest, now: Instant) -> Option<V> {
        self.entries
            .get(key)
            .filter(|entry| entry.expires > now)
            .map(|entry| entry.value.clone())
    }

    /// Keeps `value` under `key` for `ttl`. When full: drops the expired entries, then, while
    /// still full, the denial soonest to expire, then the allow soonest to expire.
    pub(super) fn insert(
        &mut self,
        key: Digest,
        value: V,
        keep: Keep,
        ttl: Duration,
        now: Instant,
    ) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            self.entries.retain(|_, entry| entry.expires > now);
            while self.entries.len() >= self.capacity {
                let victim = self
                    .entries
                    .iter()
                    .min_by_key(|(_, entry)| (entry.keep, entry.expires))
                    .map(|(key, _)| *key);
                match victim {
                    Some(victim) => self.entries.remove(&victim),
                    None => break,
                };
            }
        }
        let expires = now + ttl;
        self.entries.insert(
            key,
            Entry {
                value,
                keep,
                expires,
            },
        );
    }
}

/// The decisions kept: who a token is (`None`: no one), whether a user may `verb path`.
pub(super) struct Caches {
    pub(super) tokens: TtlCache<Option<UserInfo>>,
    pub(super) access: TtlCache<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_keys_are_digests_of_everything_that_decides() {
        let user = |name: &str, groups: &[&str]| UserInfo {
            username: Some(name.to_string()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            ..UserInfo::default()
        };
        let reader = user("reader", &["a", "b"]);
        let key = access_key(&reader, "get", "/metrics");
        assert_eq!(key, access_key(&reader.clone(), "get", "/metrics"));
        for other in [
            access_key(&reader, "post", "/metrics"),
            access_key(&reader, "get", "/metrics/"),
            access_key(&user("reader", &["ab"]), "get", "/metrics"),
            access_key(&user("reader", &["a"]), "get", "/metrics"),
            access_key(&user("reade", &["a", "b"]), "get", "/metrics"),
            access_key(
                &UserInfo {
                    uid: Some("1".to_string()),
                    ..reader.clone()
                },
                "get",
                "/metrics",
            ),
            // Fields run together differently: length-prefixed, they differ.
            access_key(&reader, "ge", "t/metrics"),
        ] {
            assert_ne!(key, other);
        }
        assert_ne!(token_key("reader"), token_key("other"));
        // Same size whatever the input.
        assert_eq!(token_key(&"x".repeat(1 << 16)).len(), 32);
    }

    #[test]
    fn a_full_cache_drops_expired_entries_then_denials_then_allows() {
        let t0 = Instant::now();
        let key = |i: u8| [i; 32];
        let second = Duration::from_secs(1);
        let mut cache = TtlCache::new(3);
        cache.insert(key(1), "allow, 5 s", Keep::Allow, second * 5, t0);
        cache.insert(key(2), "denial, 10 s", Keep::Denial, second * 10, t0);
        cache.insert(key(3), "denial, 20 s", Keep::Denial, second * 20, t0);
        // Expired first, allow or not.
        let t6 = t0 + second * 6;
        assert_eq!(cache.get(&key(1), t6), None);
        cache.insert(key(4), "allow, 100 s", Keep::Allow, second * 100, t6);
        assert_eq!(cache.len(), 3);
        assert!(!cache.entries.contains_key(&key(1)));
        // Then the denial soonest to expire, though the allow expires sooner still.
        cache.insert(key(5), "allow, 1 s", Keep::Allow, second, t6);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&key(2), t6), None);
        assert_eq!(cache.get(&key(3), t6), Some("denial, 20 s"));
        cache.insert(key(6), "allow, 50 s", Keep::Allow, second * 50, t6);
        assert_eq!(cache.get(&key(3), t6), None, "the last denial goes");
        // Only allows left: the one soonest to expire goes.
        cache.insert(key(7), "denial, 10 s", Keep::Denial, second * 10, t6);
        assert_eq!(cache.get(&key(5), t6), None);
        let mut kept: Vec<_> = cache.entries.values().map(|e| e.value).collect();
        kept.sort();
        assert_eq!(kept, ["allow, 100 s", "allow, 50 s", "denial, 10 s"]);
        // Replacing a key never evicts.
        cache.insert(key(7), "allow, 10 s", Keep::Allow, second * 10, t6);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&key(4), t6), Some("allow, 100 s"));
    }
}
