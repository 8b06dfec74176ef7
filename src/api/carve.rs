//! The claims a pool carved from a parent makes on that parent (`spec.parentPool`): claim `i`
//! of pool `web` is named `<short name>-web-i` after the pool's kind (`icipp-web-0` for an
//! `InClusterIPPool`, `gicipp-`, `icpp-`, `gicpp-` for the others), in the pool's namespace or
//! its `spec.parentPool.claimNamespace`. No short name is the start of another, so a name leads
//! back to one kind.
//!
//! The name is the whole link between a claim and the pool it carves for: the claim cache keeps
//! no owner references (see `controllers::claims::cached_claim`), and a name computed from the
//! pool is found again after a restart, without a list. A claim of that name made by someone
//! else on the same parent is taken as the pool's; docs/pools.md reserves the names.
use super::{ObjectKey, PoolKey, PoolKind};

/// The prefix of the names of `kind`'s claims on a parent: the kind's short name.
fn prefix(kind: PoolKind) -> &'static str {
    match kind {
        PoolKind::InCluster => "icipp-",
        PoolKind::Global => "gicipp-",
        PoolKind::InClusterPrefix => "icpp-",
        PoolKind::GlobalPrefix => "gicpp-",
    }
}

/// What one sub-prefix carved for a pool of `kind` is to it: a subnet of an IP pool, a prefix
/// of a prefix pool (for messages).
pub fn carved_noun(kind: PoolKind) -> &'static str {
    if kind.is_prefix() { "prefix" } else { "subnet" }
}

/// The name of claim `index` of `pool` on its parent.
pub fn carve_claim_name(pool: &PoolKey, index: usize) -> String {
    format!("{}{}-{index}", prefix(pool.kind), pool.name)
}

/// The pool that `claim` carves for, and its index, if its name is one [`carve_claim_name`]
/// makes: a namespaced pool in the claim's namespace, or a global one.
pub fn carving_pool(claim: &ObjectKey) -> Option<(PoolKey, usize)> {
    let name: &str = &claim.name;
    for kind in PoolKind::ALL {
        let Some(rest) = name.strip_prefix(prefix(kind)) else {
            continue;
        };
        let (pool, index) = rest.rsplit_once('-')?;
        if pool.is_empty() || index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let index: usize = index.parse().ok()?;
        let key = PoolKey::of_kind(kind, Some(&claim.namespace), pool)?;
        return Some((key, index));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_name_leads_back_to_its_pool_and_index() {
        let pool = PoolKey::in_cluster("ns", "web-a");
        let name = carve_claim_name(&pool, 3);
        assert_eq!(name, "icipp-web-a-3");
        assert_eq!(carving_pool(&ObjectKey::new("ns", &name)), Some((pool, 3)));
        let global = PoolKey::of_kind(PoolKind::Global, None, "nodes").unwrap();
        let name = carve_claim_name(&global, 0);
        assert_eq!(name, "gicipp-nodes-0");
        assert_eq!(
            carving_pool(&ObjectKey::new("carving", &name)),
            Some((global, 0))
        );
        for (kind, expected) in [
            (PoolKind::InClusterPrefix, "icpp-p-1"),
            (PoolKind::GlobalPrefix, "gicpp-p-1"),
        ] {
            let pool = PoolKey::of_kind(kind, Some("ns"), "p").unwrap();
            let name = carve_claim_name(&pool, 1);
            assert_eq!(name, expected);
            assert_eq!(carving_pool(&ObjectKey::new("ns", &name)), Some((pool, 1)));
        }
        for other in [
            "web-0",
            "icipp-web",
            "icipp--0",
            "icipp-web-x",
            "icipp-web-",
            "icpp-",
        ] {
            assert_eq!(carving_pool(&ObjectKey::new("ns", other)), None, "{other}");
        }
    }
}
