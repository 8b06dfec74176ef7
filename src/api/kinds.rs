//! The one table of the pool kinds: each [`PoolKind`] with its Rust type ([`PoolKind::with_type`]).
//! Every other place that needs the four kinds iterates over [`PoolKind::ALL`] and comes here for
//! the type; the kinds' names, plurals, CRDs and APIs come from the types, never from literals.
//!
//! Rust cannot iterate over types, so the table is a `match` that hands the kind's type to a
//! [`WithPoolType`]: a value that says what to do with any pool type. A visitor that runs async
//! work returns a boxed future: the four kinds are visited once per run or per audit, never per
//! claim.
use std::borrow::Cow;
use std::sync::OnceLock;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::{Api, Client, Resource};

use super::{
    GlobalInClusterIPPool, GlobalInClusterPrefixPool, IPPool, InClusterIPPool, InClusterPrefixPool,
    PoolKind,
};

/// What to do with the type of one pool kind (see [`PoolKind::with_type`]).
pub trait WithPoolType {
    type Output;
    fn with<P: IPPool>(self) -> Self::Output;
}

impl PoolKind {
    /// Hands this kind's type to `visitor`: the one place that maps the kinds to their types.
    pub fn with_type<W: WithPoolType>(self, visitor: W) -> W::Output {
        match self {
            PoolKind::InCluster => visitor.with::<InClusterIPPool>(),
            PoolKind::Global => visitor.with::<GlobalInClusterIPPool>(),
            PoolKind::InClusterPrefix => visitor.with::<InClusterPrefixPool>(),
            PoolKind::GlobalPrefix => visitor.with::<GlobalInClusterPrefixPool>(),
        }
    }

    /// The kind's name, as in `spec.poolRef.kind`: the type's `kind`, read once.
    pub fn name(self) -> &'static str {
        static NAMES: OnceLock<[&'static str; PoolKind::ALL.len()]> = OnceLock::new();
        NAMES.get_or_init(|| PoolKind::ALL.map(|kind| kind.with_type(KindName)))[self.index()]
    }

    /// The kind's resource name (`inclusterippools`), as the API server serves it.
    pub fn plural(self) -> String {
        struct Plural;
        impl WithPoolType for Plural {
            type Output = String;
            fn with<P: IPPool>(self) -> String {
                P::plural(&()).into_owned()
            }
        }
        self.with_type(Plural)
    }

    /// The kind's place in [`PoolKind::ALL`].
    pub fn index(self) -> usize {
        PoolKind::ALL
            .iter()
            .position(|kind| *kind == self)
            .expect("every kind is in PoolKind::ALL")
    }
}

/// A type's `kind` as a `'static` string: a derived resource's kind is a literal, borrowed; one
/// that is not is kept for the life of the process (once per kind: [`PoolKind::name`] caches it).
struct KindName;

impl WithPoolType for KindName {
    type Output = &'static str;
    fn with<P: IPPool>(self) -> &'static str {
        match P::kind(&()) {
            Cow::Borrowed(kind) => kind,
            Cow::Owned(kind) => Box::leak(kind.into_boxed_str()),
        }
    }
}

/// How a pool kind's objects are reached: in a namespace (or every namespace), or cluster-wide.
/// Implemented by the two scopes, so that code generic over a pool type gets its `Api`.
pub trait PoolScope {
    /// The `Api` of `K` in `namespace` (`None`: every namespace); a cluster-scoped kind has one.
    fn api<K: Resource<Scope = Self, DynamicType = ()>>(
        client: Client,
        namespace: Option<&str>,
    ) -> Api<K>;
}

impl PoolScope for NamespaceResourceScope {
    fn api<K: Resource<Scope = Self, DynamicType = ()>>(
        client: Client,
        namespace: Option<&str>,
    ) -> Api<K> {
        match namespace {
            Some(namespace) => Api::namespaced(client, namespace),
            None => Api::all(client),
        }
    }
}

impl PoolScope for ClusterResourceScope {
    fn api<K: Resource<Scope = Self, DynamicType = ()>>(
        client: Client,
        _namespace: Option<&str>,
    ) -> Api<K> {
        Api::all(client)
    }
}
