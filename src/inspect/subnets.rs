//! The subnets of a pool that spans several (`spec.additionalSubnets`): which one an address
//! lies in, and how many of each one's addresses are in use, as `kubectl inpool` names them.
use std::collections::HashSet;
use std::net::IpAddr;

use crate::allocator::{AddressSet, ParsedPool, subnet_field};

/// The subnet of `pool` that `ip` lies in, as `kubectl inpool` names it when the pool spans
/// several: `spec.additionalSubnets[0] (10.41.0.0/26, gateway 10.41.0.1)`, the pool's own
/// subnet as `spec.addresses (…)`. `None` for a pool of one subnet (its fields say it all), or an
/// address in none of the subnets.
pub fn subnet_named(pool: &ParsedPool, ip: IpAddr) -> Option<String> {
    if pool.networks().len() < 2 {
        return None;
    }
    let index = pool.subnet_index_of(ip)?;
    Some(describe_subnet(pool, index))
}

/// `spec.additionalSubnets[0] (10.41.0.0/26, gateway 10.41.0.1)`; a subnet carved from the
/// pool's parent as its entry of `status.carvedPrefixes`.
fn describe_subnet(pool: &ParsedPool, index: usize) -> String {
    let network = &pool.networks()[index];
    let gateway = network
        .gateway
        .map_or("no gateway".to_string(), |g| format!("gateway {g}"));
    let field = match pool.carved().iter().position(|c| *c == network.subnet) {
        Some(carved) => format!("status.carvedPrefixes[{carved}]"),
        None => subnet_field(index),
    };
    format!("{field} ({}, {gateway})", network.subnet)
}

/// Each subnet of a pool that spans several, with how many of its addresses are in use:
/// `spec.additionalSubnets[0] (10.41.0.0/26, gateway 10.41.0.1): 2 of 11 in use`. An address
/// is in use when `used` holds it (held by any `IPAddress`, or pre-allocated). `None` for a pool
/// of one subnet.
pub fn subnet_counts(pool: &ParsedPool, used: &HashSet<IpAddr>) -> Option<String> {
    if pool.networks().len() < 2 {
        return None;
    }
    let family = pool.family();
    let counts: Vec<String> = pool
        .networks()
        .iter()
        .enumerate()
        .map(|(index, network)| {
            let range = network.subnet.range();
            let handed_out = AddressSet::from_ranges(family, [range])
                .map(|subnet| pool.allocatable().intersection(&subnet))
                .unwrap_or_else(|_| AddressSet::empty(family));
            let in_use = used.iter().filter(|ip| handed_out.contains(**ip)).count();
            format!(
                "{}: {in_use} of {} in use",
                describe_subnet(pool, index),
                handed_out.len()
            )
        })
        .collect();
    Some(counts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `100.96.32.1-2/22` (gateway .254) and `100.90.254.1-2/23` (gateway .254), with an entry
    /// for `vm` at 100.90.254.2.
    fn two_subnets() -> ParsedPool {
        crate::allocator::PoolSpecInput {
            addresses: vec!["100.96.32.1-100.96.32.2".into()],
            prefix: 22,
            gateway: Some("100.96.32.254".into()),
            additional_subnets: vec![crate::allocator::SubnetInput {
                addresses: vec!["100.90.254.1-100.90.254.2".into()],
                prefix: 23,
                gateway: Some("100.90.254.254".into()),
            }],
            pre_allocations: vec![crate::allocator::PreAllocationInput {
                claim_name: "vm".into(),
                address: "100.90.254.2".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
        .parse()
        .expect("valid spec")
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_address_of_a_pool_of_several_subnets_is_named_by_its_subnet() {
        let pool = two_subnets();
        assert_eq!(
            subnet_named(&pool, ip("100.90.254.1")).as_deref(),
            Some("spec.additionalSubnets[0] (100.90.254.0/23, gateway 100.90.254.254)")
        );
        assert_eq!(
            subnet_named(&pool, ip("100.96.32.2")).as_deref(),
            Some("spec.addresses (100.96.32.0/22, gateway 100.96.32.254)")
        );
        assert_eq!(subnet_named(&pool, ip("10.0.0.1")), None, "in no subnet");
        let single = crate::allocator::PoolSpecInput {
            addresses: vec!["10.0.0.10".into()],
            prefix: 24,
            ..Default::default()
        }
        .parse()
        .unwrap();
        assert_eq!(
            subnet_named(&single, ip("10.0.0.10")),
            None,
            "one subnet: the flat fields say it all"
        );
        assert_eq!(subnet_counts(&single, &HashSet::new()), None);
    }

    #[test]
    fn a_subnet_carved_from_a_parent_is_named_by_its_entry_of_the_status() {
        let spec: crate::api::InClusterIPPoolSpec = serde_json::from_value(serde_json::json!({
            "parentPool": {"poolRef": {"apiGroup": "ipam.cluster.x-k8s.io",
                "kind": "InClusterPrefixPool", "name": "nodes"}, "subPrefixes": 2},
        }))
        .unwrap();
        let status: crate::api::InClusterIPPoolStatus = serde_json::from_value(serde_json::json!({
            "carvedPrefixes": [
                {"claimName": "icipp-a-0", "prefix": "10.20.0.0/26"},
                {"claimName": "icipp-a-1", "prefix": "10.20.0.128/26"},
            ],
        }))
        .unwrap();
        let Ok(crate::allocator::ParsedSpec::Addresses(pool)) = crate::controllers::parse_pool(
            crate::api::PoolSpecRef::Addresses(&spec),
            Some(&status),
            Some("ns"),
        ) else {
            panic!("a pool with two carved subnets");
        };
        assert_eq!(
            subnet_named(&pool, ip("10.20.0.130")).as_deref(),
            Some("status.carvedPrefixes[1] (10.20.0.128/26, gateway 10.20.0.129)")
        );
        assert_eq!(
            subnet_counts(&pool, &[ip("10.20.0.2")].into()).as_deref(),
            Some(
                "status.carvedPrefixes[0] (10.20.0.0/26, gateway 10.20.0.1): 1 of 61 in use; \
                 status.carvedPrefixes[1] (10.20.0.128/26, gateway 10.20.0.129): 0 of 61 in use"
            )
        );
    }

    #[test]
    fn the_counts_of_each_subnet_add_held_and_pre_allocated_addresses() {
        let pool = two_subnets();
        // Held: 100.96.32.1 and one address outside the pool; pre-allocated: 100.90.254.2.
        let used: HashSet<IpAddr> = [ip("100.96.32.1"), ip("10.0.0.1"), ip("100.90.254.2")].into();
        assert_eq!(
            subnet_counts(&pool, &used).as_deref(),
            Some(
                "spec.addresses (100.96.32.0/22, gateway 100.96.32.254): 1 of 2 in use; \
                 spec.additionalSubnets[0] (100.90.254.0/23, gateway 100.90.254.254): 1 of 2 in use"
            )
        );
    }
}
