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

use kube::ResourceExt;

use k8s_openapi::jiff::Timestamp;

pub use crate::api::reservation::{
    IPAddressReservation, IPAddressReservationSpec, RELEASED_LABEL, REUSABLE_AFTER_ANNOTATION,
};

use crate::api::Name;
use crate::api::{ObjectKey, PoolKey, PoolKind, Scope};
use crate::controllers::state::{HoldRecord, Holder};

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

/// A reservation of `ip` in `scope` for the claim `claim` (with its UID: a claim deleted and
/// created again under the same name is another claim); in a prefix pool, of the sub-prefix of
/// `length` from `ip` on.
pub fn new_reservation(
    scope: &Scope,
    pool: &PoolKey,
    claim: &ObjectKey,
    claim_uid: Option<String>,
    ip: IpAddr,
    length: u8,
) -> IPAddressReservation {
    let mut reservation = IPAddressReservation::new(
        &reservation_name(scope, ip),
        IPAddressReservationSpec {
            address: crate::allocator::canonical(ip),
            pool_kind: pool.kind.name().to_string(),
            pool_namespace: pool.namespace.as_deref().map(str::to_string),
            pool_name: pool.name.to_string(),
            claim_namespace: claim.namespace.to_string(),
            claim_name: claim.name.to_string(),
            claim_uid,
            prefix_length: (length < HoldRecord::address_length(ip)).then_some(i32::from(length)),
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

/// Whether the reservation was made for this claim: same namespace and name, and the same UID
/// when it records one (a claim deleted and created again under the same name is another claim;
/// reservations made by builds before the first release, v0.1.0, record no UID).
pub fn records_claim(
    reservation: &IPAddressReservation,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> bool {
    let spec = &reservation.spec;
    spec.claim_name == name
        && spec.claim_namespace == namespace
        && spec
            .claim_uid
            .as_deref()
            .is_none_or(|recorded| uid == Some(recorded))
}

/// The prefix length of the block an object holds from `ip` on: `prefix` when it is one for the
/// address's family, else the address alone.
pub fn held_length(ip: IpAddr, prefix: Option<i32>) -> u8 {
    let address = HoldRecord::address_length(ip);
    prefix
        .and_then(|p| u8::try_from(p).ok())
        .filter(|p| *p <= address)
        .unwrap_or(address)
}

/// `reservation` made a released one, reusable after `until`, as [`release_patch`] makes one.
pub fn released(mut reservation: IPAddressReservation, until: Timestamp) -> IPAddressReservation {
    reservation
        .labels_mut()
        .insert(RELEASED_LABEL.to_string(), "true".to_string());
    reservation
        .annotations_mut()
        .insert(REUSABLE_AFTER_ANNOTATION.to_string(), until.to_string());
    reservation
}

/// The merge patch that turns a claim's reservation into a released one, reusable after `until`.
pub fn release_patch(until: Timestamp) -> serde_json::Value {
    serde_json::json!({ "metadata": {
        "labels": { RELEASED_LABEL: "true" },
        "annotations": { REUSABLE_AFTER_ANNOTATION: until.to_string() },
    }})
}

/// What a reservation holds, or `None` when it cannot be read (never inpool's own objects).
pub fn hold_of(reservation: &IPAddressReservation) -> Option<HoldRecord> {
    let spec = &reservation.spec;
    let pool = PoolKey::of_kind(
        PoolKind::from_name(&spec.pool_kind)?,
        spec.pool_namespace.as_deref(),
        &spec.pool_name,
    )?;
    let name = reservation.metadata.name.as_deref()?;
    let scope = match name.rsplit_once(".ns.") {
        Some((_, namespace)) => Scope::Namespace(Name::new(namespace)),
        None => Scope::Cluster,
    };
    let ip: IpAddr = spec.address.parse().ok()?;
    Some(HoldRecord {
        pool,
        ip,
        length: held_length(ip, spec.prefix_length),
        holder: if reservation.is_released() {
            Holder::Released
        } else {
            Holder::Claim(ObjectKey::new(&spec.claim_namespace, &spec.claim_name))
        },
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
    fn a_released_reservation_holds_its_address_for_no_claim_until_it_is_reusable() {
        let pool = PoolKey::in_cluster("ns", "pool");
        let claim = ObjectKey::new("ns", "claim");
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let mut reservation = new_reservation(&pool.scope(), &pool, &claim, None, ip, 32);
        assert!(!reservation.is_released());
        let until: Timestamp = "2026-11-30T12:00:05Z".parse().unwrap();
        let patch = release_patch(until);
        let labels = &patch["metadata"]["labels"];
        let annotations = &patch["metadata"]["annotations"];
        reservation.labels_mut().insert(
            RELEASED_LABEL.into(),
            labels[RELEASED_LABEL].as_str().unwrap().into(),
        );
        reservation.annotations_mut().insert(
            REUSABLE_AFTER_ANNOTATION.into(),
            annotations[REUSABLE_AFTER_ANNOTATION]
                .as_str()
                .unwrap()
                .into(),
        );
        assert!(reservation.is_released());
        assert_eq!(reservation.reusable_after(), Some(until));
        let created_released = released(
            new_reservation(&pool.scope(), &pool, &claim, None, ip, 32),
            until,
        );
        assert_eq!(
            created_released.metadata, reservation.metadata,
            "created released, a reservation is what the release patch makes of one"
        );
        let hold = hold_of(&reservation).unwrap();
        assert_eq!((hold.ip, hold.pool), (ip, pool));
        assert_eq!(hold.holder, Holder::Released);

        reservation
            .annotations_mut()
            .insert(REUSABLE_AFTER_ANNOTATION.into(), "soon".into());
        assert_eq!(reservation.reusable_after(), None, "unreadable: due now");
    }

    #[test]
    fn a_reservation_reads_back_as_the_hold_it_records() {
        let pool = PoolKey::in_cluster("ns", "pool");
        let claim = ObjectKey::new("ns", "claim");
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let scope = pool.scope();
        let hold = hold_of(&new_reservation(
            &scope,
            &pool,
            &claim,
            Some("uid-1".into()),
            ip,
            32,
        ))
        .unwrap();
        assert_eq!(
            hold,
            HoldRecord {
                pool,
                ip,
                length: 32,
                holder: Holder::Claim(claim),
                scope
            }
        );
    }

    #[test]
    fn a_reservation_records_the_claim_of_its_name_and_uid() {
        let pool = PoolKey::in_cluster("ns", "pool");
        let key = ObjectKey::new("ns", "claim");
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let with_uid = new_reservation(&pool.scope(), &pool, &key, Some("uid-1".into()), ip, 32);
        let without_uid = new_reservation(&pool.scope(), &pool, &key, None, ip, 32);
        assert!(records_claim(&with_uid, "ns", "claim", Some("uid-1")));
        assert!(
            records_claim(&without_uid, "ns", "claim", Some("uid-1")),
            "reservations made before v0.1.0 record no UID"
        );
        assert!(
            !records_claim(&with_uid, "ns", "claim", Some("uid-2")),
            "created again under the same name"
        );
        assert!(!records_claim(
            &with_uid,
            "other-ns",
            "claim",
            Some("uid-1")
        ));
        let other = new_reservation(
            &pool.scope(),
            &pool,
            &ObjectKey::new("ns", "other"),
            None,
            ip,
            32,
        );
        assert!(!records_claim(&other, "ns", "claim", Some("uid-1")));
    }
}
