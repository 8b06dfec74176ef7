//! Identities shared by every layer: which pool ([`PoolKey`]), of which kind ([`PoolKind`]), and
//! where its addresses must be unique ([`Scope`]). The controllers key their state by it, the
//! metrics derive their labels from it, and every pool kind produces it ([`super::IPPool::key`]).
use super::{
    GLOBAL_IN_CLUSTER_IP_POOL_KIND, GLOBAL_IN_CLUSTER_PREFIX_POOL_KIND, IN_CLUSTER_IP_POOL_KIND,
    IN_CLUSTER_PREFIX_POOL_KIND, IPAM_GROUP, IPPoolReference,
};

/// Which pool: kind, namespace (`None` for global pools) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub kind: PoolKind,
    pub namespace: Option<String>,
    pub name: String,
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
    /// Every kind, in the order the watches are opened.
    pub const ALL: [PoolKind; 4] = [
        PoolKind::InCluster,
        PoolKind::Global,
        PoolKind::InClusterPrefix,
        PoolKind::GlobalPrefix,
    ];

    /// The kind's name, as in `spec.poolRef.kind`.
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::InCluster => IN_CLUSTER_IP_POOL_KIND,
            PoolKind::Global => GLOBAL_IN_CLUSTER_IP_POOL_KIND,
            PoolKind::InClusterPrefix => IN_CLUSTER_PREFIX_POOL_KIND,
            PoolKind::GlobalPrefix => GLOBAL_IN_CLUSTER_PREFIX_POOL_KIND,
        }
    }

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
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        }
    }

    pub fn global(name: &str) -> PoolKey {
        PoolKey {
            kind: PoolKind::Global,
            namespace: None,
            name: name.to_string(),
        }
    }

    /// A pool of any kind; `namespace` is kept only for namespaced kinds. `None` for a
    /// namespaced kind without a namespace (a reference that cannot be resolved).
    pub fn of_kind(kind: PoolKind, namespace: Option<&str>, name: &str) -> Option<PoolKey> {
        let namespace = if kind.is_namespaced() {
            Some(namespace?.to_string())
        } else {
            None
        };
        Some(PoolKey {
            kind,
            namespace,
            name: name.to_string(),
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
    Namespace(String),
    Cluster,
}

#[cfg(test)]
mod tests {
    use super::*;

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
