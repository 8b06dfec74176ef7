//! The audit: the registry must agree with the API server, whatever events inpool missed.
//!
//! Every `--audit-interval` (10 minutes by default), and shortly after any watch that feeds the
//! registry listed again, the audit lists pools, reservations and `IPAddress`es and compares
//! them with the registry ([`Registry::diff`](crate::controllers::state::Registry::diff)). The
//! watches are a little behind a fresh list, so a difference counts only when a second list, taken
//! [`SETTLE`] later, shows the very same difference: then it is drift, which is corrected, logged
//! and counted in `inpool_state_drift_total{kind}`. The allocators are checked against the holds
//! they are made from ([`Registry::recount`](crate::controllers::state::Registry::recount)). In a
//! healthy run the audit finds nothing; the test suites assert that.
//!
//! It also collects **stray reservations**: a reservation older than
//! `--stray-reservation-age` whose claim is gone (or is another claim of the same name: the UID
//! differs), or whose claim holds a different address. A process killed between creating a
//! reservation and its `IPAddress`, or two processes racing for one claim, leave such
//! reservations; each holds an address that no claim will ever use. Each one is confirmed
//! against the API server (never the cache alone) and deleted with its UID and resourceVersion
//! as preconditions, so a reservation that changed meanwhile is left alone.
//!
//! It never deletes a reservation while a live `IPAddress` holds the same address in the same
//! pool, whatever became of its claim: the reservation is what keeps the address unique between
//! processes.
//!
//! It releases **orphaned addresses that someone deletes**: an `IPAddress` of one of inpool's
//! pools that is being deleted, still carries inpool's finalizer, and whose claim is gone
//! (confirmed live), so that no claim's release will ever let go of it. inpool never deletes an
//! orphan by itself: `clusterctl move` leaves one on the source for each moved claim on a
//! `GlobalInClusterIPPool` (the global pool stays there, so the garbage collector only drops the
//! claim from the address's owners), and the moved machine still uses that address; freeing it
//! on the source could hand it out twice. The operator deletes it once the address is really
//! free; inpool then releases it, and its reservation becomes a stray.
//!
//! And it lets go of memory kept for objects that are gone: pools no longer referred to, claims
//! that no longer wait, the records of own writes and status-write times.
use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::{Resource, ResourceExt};

use crate::api::ObjectKey;
use crate::api::{ADDRESS_FINALIZER, IPAddress, IPAddressClaim, PoolKey};
use crate::controllers::runtime::error::Error;
use crate::controllers::runtime::finalizers::{Outcome, remove_address_protection};
use crate::controllers::runtime::{Context, scoped};
use crate::controllers::sources::pool_kinds::{EachKind, PoolLanes, PoolObject};
use crate::controllers::state::facts::{address_hold, address_key, pool_state};
use crate::controllers::state::reservation::{IPAddressReservation, hold_of, records_claim};
use crate::controllers::state::{Change, ListedHolds, Registry};

/// How long the watches get to catch up with a list before a difference counts as drift.
pub const SETTLE: Duration = Duration::from_secs(5);

/// After a re-list, the audit waits this long (other watches may be re-listing too).
const AFTER_RELIST: Duration = Duration::from_secs(2);

/// Runs audits until the future is dropped.
pub async fn run(ctx: Arc<Context>) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(ctx.settings.audit_interval) => {}
            () = ctx.stores.relisted.notified() => tokio::time::sleep(AFTER_RELIST).await,
        }
        match audit(&ctx).await {
            Ok(found) => {
                ctx.metrics.audit_completed();
                if found.is_clean() {
                    tracing::debug!("audit: the registry agrees with the API server");
                } else {
                    tracing::warn!(
                        drift = found.drift,
                        strays = found.strays,
                        orphans = found.orphans,
                        "audit: corrected drift, collected stray reservations, released orphaned addresses"
                    );
                }
            }
            Err(e) => {
                ctx.metrics.reconcile_error("audit", e.metric_label());
                tracing::warn!(error = %e, "audit failed; trying again at the next interval");
            }
        }
    }
}

/// What one audit found and fixed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub drift: usize,
    pub strays: usize,
    pub orphans: usize,
}

impl Found {
    pub fn is_clean(&self) -> bool {
        *self == Found::default()
    }
}

/// One audit: compare, correct, collect strays, let go of memory.
pub async fn audit(ctx: &Context) -> Result<Found, Error> {
    let mut found = Found::default();
    let first = Snapshot::take(ctx).await?;
    let snapshot = if first.differences.is_empty() {
        first
    } else {
        tokio::time::sleep(SETTLE).await;
        let second = Snapshot::take(ctx).await?;
        for drift in first
            .differences
            .into_iter()
            .filter(|c| second.differences.contains(c))
        {
            tracing::warn!(kind = drift.kind(), change = ?drift, "state drift: the registry disagreed with the API server; corrected");
            ctx.metrics.state_drift(drift.kind());
            ctx.apply(drift);
            found.drift += 1;
        }
        second
    };
    for pool in ctx.update_registry(Registry::recount) {
        tracing::warn!(%pool, "state drift: the pool's allocator disagreed with its holds; rebuilt");
        ctx.metrics.state_drift("allocator");
        found.drift += 1;
    }
    found.orphans = release_deleted_orphans(ctx, &snapshot).await;
    found.strays = collect_strays(ctx, &snapshot).await?;
    forget_what_is_gone(ctx);
    Ok(found)
}

/// Fresh lists of what the watches feeding the registry see (same scopes), compared with the
/// registry page by page as they arrive, so that only one page of [`PAGE`] objects is in memory
/// with what the comparison keeps: the differences, the keys listed, and whole objects only for
/// the few the audit may act on (two whole lists of `IPAddress`es and reservations were over
/// 100 MiB at 10,000 claims; lists of their facts, compared once complete, still
/// lifted an audit 18 MiB above the resting process at 30,000).
struct Snapshot {
    /// What would make the registry agree with the lists ([`Registry::diff`] of each).
    ///
    /// [`Registry::diff`]: crate::controllers::state::Registry::diff
    differences: Vec<Change>,
    /// inpool's `IPAddress`es that are being deleted: the orphans among them are released.
    deleting: Vec<IPAddress>,
    /// Reservations of this process's claims that may be stray: not released, old enough, and
    /// no live `IPAddress` holds their address in their pool (in a healthy run, none).
    unheld: Vec<IPAddressReservation>,
}

/// Objects per list request: the API server's own default page for clients that page.
const PAGE: u32 = 500;

/// Lists every object of `api`, handing each page to `each` as it arrives.
async fn for_each_page<K>(api: &Api<K>, mut each: impl FnMut(Vec<K>)) -> Result<(), Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        each(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(()),
        }
    }
}

impl Snapshot {
    async fn take(ctx: &Context) -> Result<Snapshot, Error> {
        let (client, settings) = (&ctx.client, &ctx.settings);
        let mut differences = Vec::new();
        // A kind this run does not serve (no CRD, no RBAC) is neither watched nor listed.
        let mut pools = ListedPools(Vec::new());
        PoolLanes::each_served(client, settings, &ctx.served, &mut pools).await?;
        for listed in pools.0 {
            differences.extend(ctx.registry().diff(listed));
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
        differences.extend(ctx.registry().address_differences(addresses));

        let now = Timestamp::now();
        let min_age = settings.stray_reservation_age;
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
                    && old_enough(&r, now, min_age)
                    && !hold
                        .as_ref()
                        .is_some_and(|h| held.contains(&digest(&h.pool, h.ip)));
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
        differences.extend(ctx.registry().reservation_differences(reservations));

        Ok(Snapshot {
            differences,
            deleting,
            unheld,
        })
    }
}

/// A fresh list of every served pool kind, one `PoolsListed` change per kind, as a re-list of
/// its watch tells the registry.
struct ListedPools(Vec<Change>);

impl EachKind for ListedPools {
    type Error = Error;

    async fn visit<P: PoolObject>(&mut self, api: Api<P>) -> Result<(), Error> {
        let mut pools = Vec::new();
        for_each_page(&api, |page: Vec<P>| {
            pools.extend(page.iter().map(|p| (p.key(), pool_state(p))));
        })
        .await?;
        self.0.push(Change::PoolsListed(P::KIND, pools));
        Ok(())
    }
}

/// Releases the orphaned addresses that someone deletes (see the module docs); returns how many.
/// A failure on one is logged and counted, and the others go on.
async fn release_deleted_orphans(ctx: &Context, snapshot: &Snapshot) -> usize {
    let mut released = 0;
    for address in &snapshot.deleting {
        let key = address_key(address);
        let claim = ObjectKey::new(&key.namespace, &address.spec.claim_ref.name);
        if ctx.stores.claim(&claim).is_some() {
            continue; // the claim's own release lets go of it
        }
        match release_deleted_orphan(ctx, address, &key, &claim).await {
            Ok(true) => released += 1,
            Ok(false) => {}
            Err(e) => {
                ctx.metrics.reconcile_error("audit", e.metric_label());
                tracing::warn!(ipaddress = %key, error = %e, "could not release an orphaned IPAddress; trying again at the next audit");
            }
        }
    }
    released
}

async fn release_deleted_orphan(
    ctx: &Context,
    address: &IPAddress,
    key: &ObjectKey,
    claim: &ObjectKey,
) -> Result<bool, Error> {
    let claims: Api<IPAddressClaim> = ctx.namespaced(&claim.namespace);
    if claims.get_opt(&claim.name).await?.is_some() {
        return Ok(false);
    }
    let addresses: Api<IPAddress> = ctx.namespaced(&key.namespace);
    match remove_address_protection(&addresses, address).await {
        // Gone already: someone else let it go.
        Ok(Outcome::Gone) => Ok(false),
        Ok(Outcome::Written(_) | Outcome::Unchanged) => {
            tracing::info!(
                address = %address.spec.address,
                ipaddress = %key,
                %claim,
                pool = %address.spec.pool_ref.name,
                "released an orphaned IPAddress that was being deleted: its claim is gone"
            );
            ctx.metrics.orphan_address_released();
            Ok(true)
        }
        // Changed since it was listed (the patch carries its resourceVersion).
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the stray reservations (see the module docs); returns how many.
async fn collect_strays(ctx: &Context, snapshot: &Snapshot) -> Result<usize, Error> {
    let mut collected = 0;
    for reservation in &snapshot.unheld {
        let claim = ObjectKey::new(
            &reservation.spec.claim_namespace,
            &reservation.spec.claim_name,
        );
        if !looks_stray(ctx, reservation, &claim) || !is_stray(ctx, reservation, &claim).await? {
            continue;
        }
        let api: Api<IPAddressReservation> = Api::all(ctx.client.clone());
        let preconditions = DeleteParams {
            preconditions: Some(Preconditions {
                uid: reservation.uid(),
                resource_version: reservation.resource_version(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(&reservation.name_any(), &preconditions).await {
            Ok(_) => {
                tracing::info!(
                    reservation = %reservation.name_any(),
                    address = %reservation.spec.address,
                    %claim,
                    "deleted a stray reservation: its claim is gone or holds another address"
                );
                ctx.metrics.stray_reservation_collected();
                collected += 1;
            }
            // Gone already, or changed since it was listed: not ours to delete now.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(collected)
}

fn old_enough(object: &impl Resource, now: Timestamp, min_age: Duration) -> bool {
    object
        .meta()
        .creation_timestamp
        .as_ref()
        .is_some_and(|created| {
            now.duration_since(created.0)
                .try_into()
                .is_ok_and(|age: Duration| age >= min_age)
        })
}

/// The cheap test, from the caches: might this reservation be stray?
fn looks_stray(ctx: &Context, reservation: &IPAddressReservation, claim: &ObjectKey) -> bool {
    match ctx.stores.claim(claim) {
        // Not in this process's cache: gone, or outside its watch filter. Ask the API server.
        None => true,
        Some(cached) => {
            let address = ctx
                .registry()
                .address_of(claim)
                .map(|hold| hold.ip.to_string());
            !records_claim(
                reservation,
                cached.namespace(),
                cached.name(),
                cached.uid().as_deref(),
            ) || holds_another_address(reservation, address.as_deref())
        }
    }
}

/// The authoritative test, against the API server.
async fn is_stray(
    ctx: &Context,
    reservation: &IPAddressReservation,
    claim: &ObjectKey,
) -> Result<bool, Error> {
    let claims: Api<IPAddressClaim> = ctx.namespaced(&claim.namespace);
    let Some(live) = claims.get_opt(&claim.name).await? else {
        return Ok(true);
    };
    if !records_claim(
        reservation,
        &claim.namespace,
        &claim.name,
        live.uid().as_deref(),
    ) {
        return Ok(true);
    }
    let addresses: Api<IPAddress> = ctx.namespaced(&claim.namespace);
    let address = addresses
        .get_opt(&claim.name)
        .await?
        .filter(|a| a.meta().deletion_timestamp.is_none());
    Ok(holds_another_address(
        reservation,
        address.as_ref().map(|a| a.spec.address.as_str()),
    ))
}

/// The claim's `IPAddress`, which gives `address` if it exists, holds a different address than
/// the reservation.
fn holds_another_address(reservation: &IPAddressReservation, address: Option<&str>) -> bool {
    let reserved = reservation.spec.address.parse::<IpAddr>().ok();
    address.is_some_and(|a| a.parse::<IpAddr>().ok() != reserved)
}

fn forget_what_is_gone(ctx: &Context) {
    let live = |key: &ObjectKey| ctx.stores.claim(key).is_some();
    let known_pools = ctx.update_registry(|registry| {
        registry.prune_waiting_everywhere(live);
        registry.collect_garbage();
        registry.pool_keys()
    });
    ctx.own_writes().retain(live);
    ctx.pool_writes
        .lock()
        .expect("pool writes lock")
        .retain(|pool, _| known_pools.contains(pool));
    drop(known_pools);
    crate::api::Name::forget_unused();
}
