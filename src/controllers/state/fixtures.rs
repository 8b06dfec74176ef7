//! Builders the state's unit tests share: claims of namespace `ns`, pool `ns/p`, records of one
//! address each.
use std::net::IpAddr;

use super::{HoldRecord, Holder, QueuedClaim};
use crate::api::{ObjectKey, PoolKey};

pub(crate) fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

pub(crate) fn pool() -> PoolKey {
    PoolKey::in_cluster("ns", "p")
}

pub(crate) fn claim(name: &str) -> ObjectKey {
    ObjectKey::new("ns", name)
}

/// Claim `name`, created at `created` (the queue's order), waiting.
pub(crate) fn queued(created: &str, name: &str) -> QueuedClaim {
    QueuedClaim {
        created: created.into(),
        claim: claim(name),
    }
}

/// A record of `pool` holding `address` for claim `name`.
pub(crate) fn hold_in(pool: &PoolKey, name: &str, address: &str) -> HoldRecord {
    HoldRecord {
        pool: pool.clone(),
        ip: ip(address),
        length: HoldRecord::address_length(ip(address)),
        holder: Holder::Claim(claim(name)),
        scope: pool.scope(),
    }
}

/// A record of [`pool`] holding `address` for claim `name`.
pub(crate) fn hold(name: &str, address: &str) -> HoldRecord {
    hold_in(&pool(), name, address)
}
