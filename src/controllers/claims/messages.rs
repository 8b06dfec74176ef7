//! What a claim's `Ready` condition and Events say about its pool: which unit it holds (an
//! address, or a sub-prefix of a prefix pool) and, when it waits, why and what frees or adds
//! room.
use std::net::IpAddr;

use crate::allocator::canonical;
use crate::api::{ObjectKey, PoolKey};
use crate::controllers::state::{PreAllocationConflict, Unready};

/// What a claim of `pool` holds, in messages: "address 10.0.0.2", or in a prefix pool of
/// allocation length `length` "sub-prefix fd00::/64".
pub(crate) fn unit_text(pool: &PoolKey, ip: IpAddr, length: Option<u8>) -> String {
    match (pool.kind.is_prefix(), length) {
        (false, _) => format!("address {}", canonical(ip)),
        (true, Some(length)) => format!("sub-prefix {}/{length}", canonical(ip)),
        (true, None) => format!("sub-prefix {}", canonical(ip)),
    }
}

/// What a claim of `pool` holds, without saying which.
pub(crate) fn unit_noun(pool: &PoolKey) -> &'static str {
    if pool.kind.is_prefix() {
        "sub-prefix"
    } else {
        "address"
    }
}

/// Why a claim waits in an exhausted pool, and what frees or adds room.
pub(crate) fn exhausted_message(pool: &PoolKey, total: u128) -> String {
    if pool.kind.is_prefix() {
        format!(
            "{pool} has no free sub-prefix: all {total} of its sub-prefixes are in use. Add a prefix \
             to spec.prefixes (or remove an entry of spec.excludedPrefixes), or delete a claim of \
             the pool; the claim gets the next sub-prefix that is released or added, in order of \
             creation."
        )
    } else {
        format!(
            "{pool} has no free address: all {total} of its addresses are in use. The claim gets \
             the next address that is released or added, in order of creation."
        )
    }
}

/// Why a claim does not get the address its pool's `spec.preAllocations` entry names: the entry,
/// the address and what stands in the way (the holder, when one holds it).
pub(crate) fn pre_allocation_conflict_message(
    pool: &PoolKey,
    claim: &ObjectKey,
    ip: IpAddr,
    conflict: &PreAllocationConflict,
) -> String {
    format!(
        "the spec.preAllocations entry of {pool} for claim {claim} names address {}, but {conflict}; \
         the claim gets the address as soon as that changes",
        canonical(ip)
    )
}

/// Why a claim waits for a pool that cannot hand out anything now.
pub(crate) fn not_ready_message(pool: &PoolKey, unready: &Unready) -> String {
    match unready {
        Unready::Missing => {
            format!("{pool} does not exist; the claim is realised once it is created")
        }
        Unready::Invalid(errors) => format!("{pool} has an invalid spec: {errors}"),
        Unready::Deleting if pool.kind.is_prefix() => {
            format!("{pool} is being deleted and hands out no new sub-prefixes")
        }
        Unready::Deleting => format!("{pool} is being deleted and hands out no new addresses"),
        Unready::Paused => format!("{pool} is paused"),
        Unready::Carving(parent) => format!(
            "{pool} has no {} yet: it waits for a sub-prefix of {parent} (its Ready condition says why); the claim is realised once it has one",
            crate::api::carve::carved_noun(pool.kind)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PoolKind;

    #[test]
    fn a_prefix_pools_messages_speak_of_sub_prefixes_an_ip_pools_of_addresses() {
        let v6 = PoolKey::of_kind(PoolKind::InClusterPrefix, Some("ns"), "p").unwrap();
        let v4 = PoolKey::in_cluster("ns", "p");
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(unit_text(&v4, ip("10.0.0.2"), Some(24)), "address 10.0.0.2");
        assert_eq!(
            unit_text(&v6, ip("fd00::"), Some(64)),
            "sub-prefix fd00::/64"
        );
        assert_eq!(unit_noun(&v4), "address");
        assert_eq!(unit_noun(&v6), "sub-prefix");
        assert_eq!(
            not_ready_message(&v6, &Unready::Deleting),
            "InClusterPrefixPool ns/p is being deleted and hands out no new sub-prefixes"
        );
        assert_eq!(
            not_ready_message(&v4, &Unready::Deleting),
            "InClusterIPPool ns/p is being deleted and hands out no new addresses"
        );
    }
}
