//! Drift: fresh lists of what the watches feeding the registry see, compared with the registry
//! page by page, as the differences that would make it agree (each with the record the registry
//! kept). The audit confirms a difference with a second list before it corrects it.
use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use super::pages::for_each_page;
use crate::api::kinds::WithPoolType;
use crate::api::{ADDRESS_FINALIZER, IPAddress, IPPool, PoolKey, PoolKind};
use crate::controllers::context::Context;
use crate::controllers::runtime::error::Error;
use crate::controllers::runtime::scoped;
use crate::controllers::sources::pool_kinds::watched;
use crate::controllers::state::facts::{address_hold, address_key, pool_state};
use crate::controllers::state::reservation::{IPAddressReservation, hold_of};
use crate::controllers::state::{Change, HoldRecord, ListedHolds, Registry};
use crate::settings::Settings;

/// Fresh lists of what the watches feeding the registry see (same scopes), compared with the
/// registry page by page as they arrive, so that only one page of [`PAGE`](super::pages::PAGE) objects is in memory
/// with what the comparison keeps: the differences, the keys listed, and whole objects only for
/// the few the audit may act on (two whole lists of `IPAddress`es and reservations were over
/// 100 MiB at 10,000 claims; lists of their facts, compared once complete, still
/// lifted an audit 18 MiB above the resting process at 30,000).
pub(super) struct Snapshot {
    /// What would make the registry agree with the lists ([`Registry::diff`] of each).
    ///
    /// [`Registry::diff`]: crate::controllers::state::Registry::diff
    pub(super) differences: Vec<Difference>,
    /// inpool's `IPAddress`es that are being deleted: the orphans among them are released.
    pub(super) deleting: Vec<IPAddress>,
    /// Reservations of this process's claims that may be stray: not released, no live
    /// `IPAddress` holds their address in their pool, and this process is not between their two
    /// creates (in a healthy run, none but another process's between its two).
    pub(super) unheld: Vec<IPAddressReservation>,
}

impl Snapshot {
    pub(super) async fn take(ctx: &Context) -> Result<Snapshot, Error> {
        let (client, settings) = (&ctx.client, &ctx.settings);
        let mut differences = Vec::new();
        // A kind this run does not serve (no CRD, no RBAC) is neither watched nor listed.
        for kind in PoolKind::ALL
            .into_iter()
            .filter(|kind| ctx.served.serves(*kind))
        {
            let listed = kind
                .with_type(ListPools {
                    client: client.clone(),
                    settings: settings.clone(),
                })
                .await?;
            differences.extend(Difference::of(&ctx.registry(), |registry| {
                registry.diff(listed)
            }));
        }

        // Addresses first: a reservation is a stray suspect only if no live one holds its address.
        // What live `IPAddress`es hold is kept as digests of pool and address, with keys new to
        // each audit: a collision could only spare a stray until a later audit, never make a
        // held reservation look stray.
        let digests = RandomState::new();
        let digest = |pool: &PoolKey, ip: IpAddr| digests.hash_one((pool, ip));
        let mut held: HashSet<u64> = HashSet::new();
        let mut deleting = Vec::new();
        let mut addresses = ListedHolds::default();
        let api = scoped::<IPAddress>(client, settings);
        for_each_page(&api, |page| {
            let mut facts = Vec::with_capacity(page.len());
            for address in page {
                let Some(hold) = address_hold(&address) else {
                    continue;
                };
                let live = address.meta().deletion_timestamp.is_none();
                if live {
                    held.insert(digest(&hold.pool, hold.ip));
                }
                facts.push((address_key(&address), hold));
                if !live && address.finalizers().iter().any(|f| f == ADDRESS_FINALIZER) {
                    deleting.push(address);
                }
            }
            ctx.registry().compare_addresses(facts, &mut addresses);
        })
        .await?;
        differences.extend(Difference::of(&ctx.registry(), |registry| {
            registry.address_differences(addresses)
        }));

        let mut unheld = Vec::new();
        let mut reservations = ListedHolds::default();
        let api = Api::<IPAddressReservation>::all(client.clone());
        for_each_page(&api, |page| {
            let mut facts = Vec::with_capacity(page.len());
            for r in page {
                let hold = hold_of(&r);
                // Another process's claims (a namespace split) are not ours to judge, nor to keep.
                let suspect = !r.is_released()
                    && settings
                        .namespace
                        .as_ref()
                        .is_none_or(|ns| *ns == r.spec.claim_namespace)
                    && !hold.as_ref().is_some_and(|h| {
                        held.contains(&digest(&h.pool, h.ip))
                            || ctx.registry().is_in_flight(&h.pool, h.ip)
                    });
                if let Some(hold) = hold {
                    facts.push((r.name_any(), hold));
                }
                if suspect {
                    unheld.push(r);
                }
            }
            ctx.registry()
                .compare_reservations(facts, &mut reservations);
        })
        .await?;
        differences.extend(Difference::of(&ctx.registry(), |registry| {
            registry.reservation_differences(reservations)
        }));

        Ok(Snapshot {
            differences,
            deleting,
            unheld,
        })
    }
}

/// A change that would make the registry agree with a list, and the record the registry kept
/// of its object when they were compared.
#[derive(Debug, PartialEq)]
pub(super) struct Difference {
    pub(super) change: Change,
    pub(super) kept: Option<HoldRecord>,
}

impl Difference {
    /// The changes `diff` finds, each with the record the registry keeps of its object.
    fn of(registry: &Registry, diff: impl FnOnce(&Registry) -> Vec<Change>) -> Vec<Difference> {
        diff(registry)
            .into_iter()
            .map(|change| Difference {
                kept: registry.record_of(&change).cloned(),
                change,
            })
            .collect()
    }
}

/// A fresh list of one pool kind, as one `PoolsListed` change, as a re-list of its watch tells
/// the registry.
struct ListPools {
    client: kube::Client,
    settings: Settings,
}

impl WithPoolType for ListPools {
    type Output = BoxFuture<'static, Result<Change, Error>>;

    fn with<P: IPPool>(self) -> Self::Output {
        async move {
            let mut pools = Vec::new();
            for_each_page(
                &watched::<P>(&self.client, &self.settings),
                |page: Vec<P>| {
                    pools.extend(page.iter().map(|p| (p.key(), pool_state(p))));
                },
            )
            .await?;
            Ok(Change::PoolsListed(P::KIND, pools))
        }
        .boxed()
    }
}
