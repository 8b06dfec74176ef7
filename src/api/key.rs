//! Identities shared by every layer: which pool ([`PoolKey`]), of which kind ([`PoolKind`]), and
//! where its addresses must be unique ([`Scope`]). The controllers key their state by it, the
//! metrics derive their labels from it, and every pool kind produces it ([`super::IPPool::key`]).
use super::{IPAM_GROUP, IPPoolReference};

/// Which pool: kind, namespace (`None` for global pools) and name. The names are [`Name`]s:
/// every hold of a pool carries its key, so at 100,000 claims a copy of the strings per hold
/// would be megabytes of the same few names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub kind: PoolKind,
    pub namespace: Option<Name>,
    pub name: Name,
}

/// A pool's, a namespace's, a claim's or a Cluster's name, shared: [`Name::new`] gives the one
/// copy of each distinct name, and cloning it copies a pointer. The registry and the claim cache
/// refer to each claim from several places (memory per claim); a name nothing refers to
/// any more (a claim deleted since) is let go by [`Name::forget_unused`], which the audit calls.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(std::sync::Arc<str>);

static NAMES: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashSet<std::sync::Arc<str>>>,
> = std::sync::LazyLock::new(Default::default);

impl Name {
    pub fn new(name: &str) -> Name {
        let mut names = NAMES.lock().expect("names lock");
        match names.get(name) {
            Some(shared) => Name(shared.clone()),
            None => {
                let shared: std::sync::Arc<str> = name.into();
                names.insert(shared.clone());
                Name(shared)
            }
        }
    }

    /// The shared copy of `name` when there is one; never adds one. A name some key still holds
    /// is always there ([`Name::forget_unused`] keeps it).
    pub fn existing(name: &str) -> Option<Name> {
        let names = NAMES.lock().expect("names lock");
        names.get(name).map(|shared| Name(shared.clone()))
    }

    /// Lets go of the names nothing but the table refers to.
    pub fn forget_unused() {
        NAMES
            .lock()
            .expect("names lock")
            .retain(|name| std::sync::Arc::strong_count(name) > 1);
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for Name {
    fn from(name: &str) -> Name {
        Name::new(name)
    }
}

/// The pool kinds inpool serves: IP pools hand out addresses, prefix pools IPv6 sub-prefixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    InCluster,
    Global,
    InClusterPrefix,
    GlobalPrefix,
}

impl PoolKind {
    /// Every kind, in the order the watches are opened (its type: [`PoolKind::with_type`]).
    pub const ALL: [PoolKind; 4] = [
        PoolKind::InCluster,
        PoolKind::Global,
        PoolKind::InClusterPrefix,
        PoolKind::GlobalPrefix,
    ];

    /// The kind a name means, if it is one of inpool's.
    pub fn from_name(name: &str) -> Option<PoolKind> {
        PoolKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// Whether pools of this kind live in a namespace (and serve only its claims).
    pub fn is_namespaced(self) -> bool {
        matches!(self, PoolKind::InCluster | PoolKind::InClusterPrefix)
    }

    /// Whether pools of this kind hand out IPv6 sub-prefixes rather than addresses.
    pub fn is_prefix(self) -> bool {
        matches!(self, PoolKind::InClusterPrefix | PoolKind::GlobalPrefix)
    }
}

impl PoolKey {
    pub fn in_cluster(namespace: &str, name: &str) -> PoolKey {
        PoolKey {
            kind: PoolKind::InCluster,
            namespace: Some(Name::new(namespace)),
            name: Name::new(name),
        }
    }

    pub fn global(name: &str) -> PoolKey {
        PoolKey {
            kind: PoolKind::Global,
            namespace: None,
            name: Name::new(name),
        }
    }

    /// A pool of any kind; `namespace` is kept only for namespaced kinds. `None` for a
    /// namespaced kind without a namespace (a reference that cannot be resolved).
    pub fn of_kind(kind: PoolKind, namespace: Option<&str>, name: &str) -> Option<PoolKey> {
        let namespace = if kind.is_namespaced() {
            Some(Name::new(namespace?))
        } else {
            None
        };
        Some(PoolKey {
            kind,
            namespace,
            name: Name::new(name),
        })
    }

    /// The pool a claim's or an `IPAddress`'s reference names (references carry no namespace:
    /// a namespaced pool is in the referrer's), when it is one of inpool's kinds; claims of other
    /// providers are never touched.
    pub fn from_ref(pool_ref: &IPPoolReference, namespace: &str) -> Option<PoolKey> {
        if pool_ref.api_group != IPAM_GROUP {
            return None;
        }
        PoolKey::of_kind(
            PoolKind::from_name(&pool_ref.kind)?,
            Some(namespace),
            &pool_ref.name,
        )
    }

    /// `namespace/name`, or `name` for a global pool: how the logs and the retry backoff name
    /// an object, whatever its kind.
    pub fn object_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.to_string(),
        }
    }

    /// The uniqueness scope of the pool's addresses (see [`Scope`]).
    pub fn scope(&self) -> Scope {
        match &self.namespace {
            Some(ns) => Scope::Namespace(ns.clone()),
            None => Scope::Cluster,
        }
    }
}

impl std::fmt::Display for PoolKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind.name(), self.name),
            None => write!(f, "{} {}", self.kind.name(), self.name),
        }
    }
}

/// Where an address must be unique: within one namespace for namespaced pools (two namespaces
/// may reuse the same private range), across the cluster for global pools.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    Namespace(Name),
    Cluster,
}

/// A namespaced object's identity.
///
/// Both names are interned ([`Name`]): the registry refers to each claim from up to four places
/// (its reservation's and its `IPAddress`'s records, and the keys of both), and every claim of a
/// namespace shares one copy of its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: Name,
    pub name: Name,
}

impl ObjectKey {
    pub fn new(namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: Name::new(namespace),
            name: Name::new(name),
        }
    }
}

impl ObjectKey {
    /// The key of `namespace`/`name` when both names are interned; `None`, interning nothing,
    /// when either is not, and then no map holds that key. For looking up an object that is
    /// usually not kept (another provider's claim), without keeping its names.
    pub fn existing(namespace: &str, name: &str) -> Option<ObjectKey> {
        Some(ObjectKey {
            namespace: Name::existing(namespace)?,
            name: Name::existing(name)?,
        })
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interned(name: &str) -> bool {
        NAMES.lock().expect("names lock").contains(name)
    }

    #[test]
    fn a_name_is_stored_once_and_let_go_when_no_key_uses_it() {
        let kept = PoolKey::in_cluster("name-test-ns", "name-test-kept");
        let again = Name::new("name-test-kept");
        assert!(std::sync::Arc::ptr_eq(&kept.name.0, &again.0));
        drop(again);
        drop(Name::new("name-test-dropped"));
        assert!(interned("name-test-dropped"));
        Name::forget_unused();
        assert!(!interned("name-test-dropped"));
        assert!(interned("name-test-kept") && interned("name-test-ns"));
        assert_eq!(&*kept.name, "name-test-kept");
    }

    #[test]
    fn looking_up_an_existing_key_interns_nothing() {
        let kept = ObjectKey::new("existing-test-ns", "existing-test-kept");
        assert_eq!(
            ObjectKey::existing("existing-test-ns", "existing-test-kept"),
            Some(kept)
        );
        assert_eq!(
            ObjectKey::existing("existing-test-ns", "existing-test-never"),
            None
        );
        assert_eq!(
            ObjectKey::existing("existing-test-other", "existing-test-kept"),
            None
        );
        assert!(!interned("existing-test-never") && !interned("existing-test-other"));
    }

    #[test]
    fn every_kind_reads_back_from_its_name_and_keeps_a_namespace_only_when_namespaced() {
        for kind in PoolKind::ALL {
            assert_eq!(PoolKind::from_name(kind.name()), Some(kind));
            let key = PoolKey::of_kind(kind, Some("ns"), "p").unwrap();
            assert_eq!(key.namespace.is_some(), kind.is_namespaced(), "{kind:?}");
            assert_eq!(
                PoolKey::of_kind(kind, None, "p").is_some(),
                !kind.is_namespaced(),
                "{kind:?} without a namespace"
            );
        }
        assert_eq!(PoolKind::from_name("IPPool"), None);
        let prefix_ref = IPPoolReference::new(IPAM_GROUP, "InClusterPrefixPool", "v6");
        assert_eq!(
            PoolKey::from_ref(&prefix_ref, "team-a").map(|k| k.scope()),
            Some(Scope::Namespace("team-a".into()))
        );
    }
}
