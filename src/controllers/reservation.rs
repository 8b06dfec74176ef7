//! Reservations: how the API server, not a cache, guarantees that no address is handed out
//! twice, even by two inpool processes at once.
//!
//! Before it creates an `IPAddress`, inpool creates a cluster-scoped `IPAddressReservation`
//! whose *name* is the address and its uniqueness scope, e.g. `10-0-0-5.ns.default` for a
//! namespaced pool in `default`, `2001-0db8-0000-0000-0000-0000-0000-0005.cluster` for a global
//! pool. The API server refuses a second object of the same name (`AlreadyExists`), so only one
//! claim can ever hold an address within a scope, and overlapping pools of one scope share it.
//! The reservation also records the claim, so that a crash between the two creates is recovered
//! by reusing the reservation instead of allocating again.
use std::net::IpAddr;

pub use crate::api::reservation::{IPAddressReservation, IPAddressReservationSpec};

use super::registry::{HoldRecord, ObjectKey, PoolKey, PoolKind, Scope};

/// The reservation's name: the address (IPv4 as `10-0-0-5`, IPv6 as eight 4-digit hex groups)
/// and the scope (`.ns.<namespace>` or `.cluster`). Both parts are unambiguous: a namespace is a
/// DNS label, so `ns.<namespace>` never equals `cluster`.
pub fn reservation_name(scope: &Scope, ip: IpAddr) -> String {
    let address = match ip {
        IpAddr::V4(v4) => v4.octets().map(|o| o.to_string()).join("-"),
        IpAddr::V6(v6) => v6.segments().map(|s| format!("{s:04x}")).join("-"),
    };
    match scope {
        Scope::Namespace(ns) => format!("{address}.ns.{ns}"),
        Scope::Cluster => format!("{address}.cluster"),
    }
}

pub fn new_reservation(
    scope: &Scope,
    pool: &PoolKey,
    claim: &ObjectKey,
    ip: IpAddr,
) -> IPAddressReservation {
    let mut reservation = IPAddressReservation::new(
        &reservation_name(scope, ip),
        IPAddressReservationSpec {
            address: crate::allocator::canonical(ip),
            pool_kind: pool_kind_name(pool.kind).to_string(),
            pool_namespace: pool.namespace.clone(),
            pool_name: pool.name.clone(),
            claim_namespace: claim.namespace.clone(),
            claim_name: claim.name.clone(),
        },
    );
    reservation.metadata.labels = Some(
        [(
            "app.kubernetes.io/managed-by".to_string(),
            "inpool".to_string(),
        )]
        .into(),
    );
    reservation
}

pub fn pool_kind_name(kind: PoolKind) -> &'static str {
    match kind {
        PoolKind::InCluster => crate::api::IN_CLUSTER_IP_POOL_KIND,
        PoolKind::Global => crate::api::GLOBAL_IN_CLUSTER_IP_POOL_KIND,
    }
}

/// What a reservation holds, or `None` when it cannot be read (never inpool's own objects).
pub fn hold_of(reservation: &IPAddressReservation) -> Option<HoldRecord> {
    let spec = &reservation.spec;
    let pool = match spec.pool_kind.as_str() {
        k if k == crate::api::IN_CLUSTER_IP_POOL_KIND => {
            PoolKey::in_cluster(spec.pool_namespace.as_deref()?, &spec.pool_name)
        }
        k if k == crate::api::GLOBAL_IN_CLUSTER_IP_POOL_KIND => PoolKey::global(&spec.pool_name),
        _ => return None,
    };
    let name = reservation.metadata.name.as_deref()?;
    let scope = match name.rsplit_once(".ns.") {
        Some((_, namespace)) => Scope::Namespace(namespace.to_string()),
        None => Scope::Cluster,
    };
    Some(HoldRecord {
        pool,
        ip: spec.address.parse().ok()?,
        claim: ObjectKey::new(&spec.claim_namespace, &spec.claim_name),
        scope,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_encode_address_and_scope() {
        let ns = Scope::Namespace("default".into());
        assert_eq!(
            reservation_name(&ns, "10.0.0.5".parse().unwrap()),
            "10-0-0-5.ns.default"
        );
        assert_eq!(
            reservation_name(&Scope::Cluster, "2001:db8::5".parse().unwrap()),
            "2001-0db8-0000-0000-0000-0000-0000-0005.cluster"
        );
    }

    #[test]
    fn a_reservation_reads_back_as_the_hold_it_records() {
        let pool = PoolKey::in_cluster("ns", "pool");
        let claim = ObjectKey::new("ns", "claim");
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let scope = pool.scope();
        let hold = hold_of(&new_reservation(&scope, &pool, &claim, ip)).unwrap();
        assert_eq!(
            hold,
            HoldRecord {
                pool,
                ip,
                claim,
                scope
            }
        );
    }
}
