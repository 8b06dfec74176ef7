//! The claims a pool carved from a parent makes on that parent (`spec.parentPool`): claim `i`
//! of pool `web` is named `icipp-web-i` (`gicipp-web-i` for a `GlobalInClusterIPPool`, the
//! kinds' short names), in the pool's namespace or its `spec.parentPool.claimNamespace`.
//!
//! The name is the whole link between a claim and the pool it carves for: the claim cache keeps
//! no owner references (see `controllers::claims::cached_claim`), and a name computed from the
//! pool is found again after a restart, without a list. A claim of that name made by someone
//! else on the same parent is taken as the pool's; docs/pools.md reserves the names.
use super::{ObjectKey, PoolKey, PoolKind};

/// The prefix of the names of `kind`'s claims on a parent; `None` for a prefix pool kind.
fn prefix(kind: PoolKind) -> Option<&'static str> {
    match kind {
        PoolKind::InCluster => Some("icipp-"),
        PoolKind::Global => Some("gicipp-"),
        PoolKind::InClusterPrefix | PoolKind::GlobalPrefix => None,
    }
}

/// The name of claim `index` of `pool` on its parent (`None` for a prefix pool kind).
pub fn carve_claim_name(pool: &PoolKey, index: usize) -> Option<String> {
    Some(format!("{}{}-{index}", prefix(pool.kind)?, pool.name))
}

/// The pool that `claim` carves for, and its index, if its name is one [`carve_claim_name`]
/// makes: a namespaced pool in the claim's namespace, or a global one.
pub fn carving_pool(claim: &ObjectKey) -> Option<(PoolKey, usize)> {
    let name: &str = &claim.name;
    for kind in [PoolKind::InCluster, PoolKind::Global] {
        let Some(rest) = prefix(kind).and_then(|p| name.strip_prefix(p)) else {
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
        let name = carve_claim_name(&pool, 3).unwrap();
        assert_eq!(name, "icipp-web-a-3");
        assert_eq!(carving_pool(&ObjectKey::new("ns", &name)), Some((pool, 3)));
        let global = PoolKey::of_kind(PoolKind::Global, None, "nodes").unwrap();
        let name = carve_claim_name(&global, 0).unwrap();
        assert_eq!(name, "gicipp-nodes-0");
        assert_eq!(
            carving_pool(&ObjectKey::new("carving", &name)),
            Some((global, 0))
        );
        for other in [
            "web-0",
            "icipp-web",
            "icipp--0",
            "icipp-web-x",
            "icipp-web-",
        ] {
            assert_eq!(carving_pool(&ObjectKey::new("ns", other)), None, "{other}");
        }
        let prefix_pool = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "p").unwrap();
        assert_eq!(carve_claim_name(&prefix_pool, 0), None);
    }
}
