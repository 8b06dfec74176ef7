//! The audit: the registry must agree with the API server, whatever events inpool missed.
//!
//! Every `--audit-interval` (10 minutes by default), and shortly after any watch that feeds the
//! registry listed again, the audit lists pools, reservations and `IPAddress`es and compares
//! them with the registry ([`Registry::diff`](crate::controllers::state::Registry::diff)). The
//! watches are a little behind a fresh list, so a difference counts only when a second list, taken
//! [`SETTLE`] later, shows the very same difference against the very same record of the registry
//! (not another object made since under the same name). It is then corrected (if the registry
//! still keeps that record). It is drift, logged and counted in `inpool_state_drift_total{kind}`,
//! unless a watch of the feed failed within [`WATCH_RECOVERY`] before the first list or since:
//! such a watch misses its kind's changes until it is open again, and the difference is its gap,
//! which the correction closes as the watch's own re-list would (logged, not counted). A watch
//! that stalls without failing is given up by kube-runtime within 35 s (see
//! [`WATCH_TIMEOUT`](crate::controllers::sources::watch::WATCH_TIMEOUT)); an audit in that time
//! counts what it missed as drift. The allocators are checked against the holds
//! they are made from ([`Registry::recount`](crate::controllers::state::Registry::recount)). In a
//! healthy run the audit finds nothing; the test suites assert that.
//!
//! It also collects **stray reservations**, on evidence rather than on age: a reservation no live
//! `IPAddress` holds, whose claim is gone (or is another claim of the same name: the UID differs),
//! or whose claim's `IPAddress` holds a different address, can never become an `IPAddress`; it only
//! keeps an address from every other claim. A process killed between creating a reservation and its
//! `IPAddress`, or two processes racing for one claim, leave such reservations. Each one is
//! confirmed against the API server (never the cache alone) and deleted with its UID and
//! resourceVersion as preconditions, so a reservation that changed meanwhile is left alone. The
//! evidence is looked at as soon as it can appear ([`evidence::StrayChecks`]): when the registry
//! learns an `IPAddress` or reservation of a claim that also has a reservation of another address
//! ([`evidence::look_for_strays`]), and when a claim of a pool is told the pool is exhausted (its
//! free count may be short by a stray's address); and again at every audit, from fresh lists.
//!
//! The one case that needs patience is a reservation whose claim exists and has no `IPAddress`
//! yet: a live writer may be between its two creates. Such a reservation is never deleted; its
//! claim, if this process serves it, is woken to recover it: to create the `IPAddress` of that
//! very address, which is safe beside a live writer doing the same (one create wins, the other
//! adopts it). At once if the claim waits in its pool's queue here (no writer of this process is
//! on it), otherwise once the reservation is older than `--stray-reservation-age`.
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
pub(crate) mod evidence;

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::{Resource, ResourceExt};

use crate::api::kinds::WithPoolType;
use crate::api::{ADDRESS_FINALIZER, IPAddress, IPAddressClaim, PoolKey};
use crate::api::{IPPool, ObjectKey, PoolKind};
use crate::controllers::context::Context;
use crate::controllers::runtime::error::Error;
use crate::controllers::runtime::finalizers::{Outcome, remove_address_protection};
use crate::controllers::runtime::scoped;
use crate::controllers::sources::pool_kinds::watched;
use crate::controllers::state::facts;
use crate::controllers::state::facts::{address_hold, address_key, pool_state};
use crate::controllers::state::reservation::{IPAddressReservation, hold_of, records_claim};
use crate::controllers::state::{Change, HoldRecord, ListedHolds, Registry};
use crate::settings::Settings;

/// How long the watches get to catch up with a list before a difference counts as drift.
pub const SETTLE: Duration = Duration::from_secs(5);

/// How long after a watch of the feed failed a difference may still be that watch's gap:
/// kube-runtime asks a failed watch again after its default backoff, at most 30 s doubled by its
/// jitter, and the events it missed arrive as soon as it is open; plus [`SETTLE`].
pub const WATCH_RECOVERY: Duration = Duration::from_secs(65);

/// After a re-list, the audit waits this long (other watches may be re-listing too).
const AFTER_RELIST: Duration = Duration::from_secs(2);

/// Runs audits, and the stray checks that evidence asks for, until the future is dropped.
pub async fn run(ctx: Arc<Context>) {
    futures::join!(run_audits(&ctx), collect_strays_on_evidence(&ctx));
}

async fn run_audits(ctx: &Context) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(ctx.settings.audit_interval) => {}
            () = ctx.stores.relisted.notified() => tokio::time::sleep(AFTER_RELIST).await,
        }
        match audit(ctx).await {
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
    let started = std::time::Instant::now();
    let first = Snapshot::take(ctx).await?;
    let snapshot = if first.differences.is_empty() {
        first
    } else {
        tokio::time::sleep(SETTLE).await;
        let second = Snapshot::take(ctx).await?;
        // The same difference, with the same record kept: a record the watches replaced between
        // the two lists (an object deleted and made again under the same name) is not drift.
        let (confirmed, passing): (Vec<Difference>, Vec<Difference>) = first
            .differences
            .into_iter()
            .partition(|d| second.differences.contains(d));
        for Difference { change, .. } in passing {
            tracing::debug!(
                kind = change.kind(),
                ?change,
                "audit: a difference the second list did not confirm (the watches were behind)"
            );
        }
        let watches_whole = started
            .checked_sub(WATCH_RECOVERY)
            .is_none_or(|since| ctx.stores.interruptions.none_since(since));
        for Difference { change, kept } in confirmed {
            let kind = change.kind();
            let described = format!("{change:?}");
            // Corrected only while the registry keeps the record both lists were compared with:
            // a watch event applied since has brought it up to date already.
            let corrected = ctx.apply_if(change, |registry, change| {
                registry.record_of(change) == kept.as_ref()
            });
            if corrected && watches_whole {
                tracing::warn!(
                    kind,
                    change = described,
                    ?kept,
                    "state drift: the registry disagreed with the API server; corrected"
                );
                ctx.metrics.state_drift(kind);
                found.drift += 1;
            } else if corrected {
                tracing::info!(
                    kind,
                    change = described,
                    ?kept,
                    "audit: corrected what a failed watch missed (not drift: the watch was catching up)"
                );
            } else {
                tracing::debug!(
                    kind,
                    change = described,
                    "audit: a difference the watches settled before its correction"
                );
            }
        }
        second
    };
    let (before, rebuilt) = ctx.update_registry(|registry| {
        let before: Vec<_> = registry
            .pool_keys()
            .into_iter()
            .map(|pool| {
                let counts = registry.counts(&pool);
                (pool, counts)
            })
            .collect();
        (before, registry.recount())
    });
    for pool in rebuilt {
        let was = before
            .iter()
            .find(|(p, _)| *p == pool)
            .and_then(|(_, c)| *c);
        let now = ctx.registry().counts(&pool);
        tracing::warn!(%pool, ?was, ?now, "state drift: the pool's allocator disagreed with its holds; rebuilt");
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
    differences: Vec<Difference>,
    /// inpool's `IPAddress`es that are being deleted: the orphans among them are released.
    deleting: Vec<IPAddress>,
    /// Reservations of this process's claims that may be stray: not released, no live
    /// `IPAddress` holds their address in their pool, and this process is not between their two
    /// creates (in a healthy run, none but another process's between its two).
    unheld: Vec<IPAddressReservation>,
}

/// Objects per list request: the API server's own default page for clients that page.
const PAGE: u32 = 500;

/// Times each page is asked for before the audit fails: a page that fails on the way (a reset,
/// a `500`, `502` or `504`) is asked again after [`PAGE_RETRY`], doubling. (kube's client
/// already sends a request answered `429` or `503` again, after the `Retry-After` the server
/// gave; once it gives up, so does the audit, rather than ask sooner than the server said.) An
/// audit that failed at its first failed request would, under a sustained error rate, need
/// every one of its requests to succeed: it would hardly ever complete, and what only the audit
/// repairs would wait for the errors to stop.
const PAGE_ATTEMPTS: u32 = 5;
const PAGE_RETRY: Duration = Duration::from_millis(200);

/// Lists every object of `api`, handing each page to `each` as it arrives.
async fn for_each_page<K>(api: &Api<K>, mut each: impl FnMut(Vec<K>)) -> Result<(), Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = list_page(api, &params).await?;
        each(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(()),
        }
    }
}

/// One page, asked for again while it fails on the way (see [`PAGE_ATTEMPTS`]).
async fn list_page<K>(
    api: &Api<K>,
    params: &ListParams,
) -> Result<kube::core::ObjectList<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut delay = PAGE_RETRY;
    for _ in 1..PAGE_ATTEMPTS {
        match api.list(params).await {
            Err(e) if fails_on_the_way(&e) => {
                tracing::debug!(error = %e, ?delay, "audit: a list page failed; asking again");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            answer => return answer,
        }
    }
    api.list(params).await
}

/// Whether a request failed on the way, with no word from the API server on when to ask again:
/// a connection that failed, or a `500`, `502` or `504`.
fn fails_on_the_way(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 500 | 502 | 504),
        _ => true,
    }
}

impl Snapshot {
    async fn take(ctx: &Context) -> Result<Snapshot, Error> {
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
struct Difference {
    change: Change,
    kept: Option<HoldRecord>,
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

/// Settles each reservation of the audit's lists that no live `IPAddress` holds (see the module
/// docs); returns how many were stray and deleted.
async fn collect_strays(ctx: &Context, snapshot: &Snapshot) -> Result<usize, Error> {
    let mut collected = 0;
    for reservation in &snapshot.unheld {
        if settle_unheld(ctx, reservation, "audit").await? {
            collected += 1;
        }
    }
    Ok(collected)
}

/// How long a stray check waits after it is asked for: the watches catch up with the writes
/// that made the evidence, and requests for other pools made meanwhile join the same check.
const EVIDENCE_SETTLE: Duration = Duration::from_secs(1);

/// Settles the unheld reservations of the pools [`evidence::StrayChecks`] names, as they are named.
async fn collect_strays_on_evidence(ctx: &Context) {
    loop {
        ctx.strays.requested.notified().await;
        tokio::time::sleep(EVIDENCE_SETTLE).await;
        let suspects: Vec<(String, HoldRecord)> = {
            let pools = ctx.strays.take();
            let registry = ctx.registry();
            pools
                .iter()
                .flat_map(|pool| registry.unheld_reservations(pool))
                .filter(|(_, record)| is_ours(ctx, record))
                .collect()
        };
        for (name, _) in suspects {
            let reservations: Api<IPAddressReservation> = Api::all(ctx.client.clone());
            let settled = match reservations.get_opt(&name).await {
                Ok(Some(live)) if !live.is_released() => {
                    settle_unheld(ctx, &live, "evidence").await.map(|_| ())
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e.into()),
            };
            if let Err(e) = settled {
                ctx.metrics.reconcile_error("audit", e.metric_label());
                tracing::warn!(reservation = %name, error = %e, "could not settle a reservation no IPAddress holds; the audit tries again");
            }
        }
    }
}

/// Whether the reservation's claim is one this process may judge (a namespace split leaves
/// another process's claims to it).
fn is_ours(ctx: &Context, record: &HoldRecord) -> bool {
    let claim = record.holder.claim();
    ctx.settings
        .namespace
        .as_ref()
        .is_none_or(|ns| claim.is_some_and(|c| *c.namespace == **ns))
}

/// What became of a reservation that no live `IPAddress` holds, as the API server tells it.
enum Fate {
    /// It can never become an `IPAddress`: delete it. Says why.
    Stray(&'static str),
    /// Its claim exists without an `IPAddress`: a live writer may be between its two creates, or
    /// the claim may recover it.
    Recoverable,
    /// Its claim's `IPAddress` holds it.
    Held,
}

/// Settles one reservation that no live `IPAddress` holds, found by `found_by` (see the module
/// docs): deletes it if it is stray, wakes its claim if the claim should recover it. Returns
/// whether it was deleted.
async fn settle_unheld(
    ctx: &Context,
    reservation: &IPAddressReservation,
    found_by: &'static str,
) -> Result<bool, Error> {
    let claim = ObjectKey::new(
        &reservation.spec.claim_namespace,
        &reservation.spec.claim_name,
    );
    match fate(ctx, reservation, &claim).await? {
        Fate::Stray(why) => delete_stray(ctx, reservation, &claim, why, found_by).await,
        Fate::Recoverable => {
            if should_recover(ctx, reservation, &claim) {
                ctx.wake([claim]);
            }
            Ok(false)
        }
        Fate::Held => Ok(false),
    }
}

/// The authoritative test, against the API server.
async fn fate(
    ctx: &Context,
    reservation: &IPAddressReservation,
    claim: &ObjectKey,
) -> Result<Fate, Error> {
    let claims: Api<IPAddressClaim> = ctx.namespaced(&claim.namespace);
    let Some(live) = claims.get_opt(&claim.name).await? else {
        return Ok(Fate::Stray("its claim is gone"));
    };
    if !records_claim(
        reservation,
        &claim.namespace,
        &claim.name,
        live.uid().as_deref(),
    ) {
        return Ok(Fate::Stray(
            "its claim is gone (another claim of the same name exists)",
        ));
    }
    let addresses: Api<IPAddress> = ctx.namespaced(&claim.namespace);
    let address = addresses
        .get_opt(&claim.name)
        .await?
        .filter(|a| a.meta().deletion_timestamp.is_none());
    let reserved = reservation.spec.address.parse::<IpAddr>().ok();
    Ok(match address {
        None => Fate::Recoverable,
        Some(a) if a.spec.address.parse::<IpAddr>().ok() == reserved => Fate::Held,
        Some(_) => Fate::Stray("its claim's IPAddress holds another address"),
    })
}

/// Whether a claim that exists without an `IPAddress` should be woken to recover its
/// reservation: it is served here and waits in its pool's queue (no writer of this process is on
/// it), or the reservation is older than `--stray-reservation-age` (a live writer would have
/// created the `IPAddress` by then).
fn should_recover(ctx: &Context, reservation: &IPAddressReservation, claim: &ObjectKey) -> bool {
    let Some(cached) = ctx.stores.claim(claim) else {
        return false;
    };
    let waiting = hold_of(reservation).is_some_and(|hold| {
        let queued = facts::queued(cached.creation_timestamp(), claim);
        ctx.registry().is_waiting(&hold.pool, &queued)
    });
    waiting
        || old_enough(
            reservation,
            Timestamp::now(),
            ctx.settings.stray_reservation_age,
        )
}

/// Deletes a stray reservation with its UID and resourceVersion as preconditions; returns
/// whether it was deleted (not if it is gone already or changed since it was read).
async fn delete_stray(
    ctx: &Context,
    reservation: &IPAddressReservation,
    claim: &ObjectKey,
    why: &'static str,
    found_by: &'static str,
) -> Result<bool, Error> {
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
                why,
                found_by,
                "deleted a stray reservation"
            );
            ctx.metrics.stray_reservation_collected();
            Ok(true)
        }
        // Gone already, or changed since it was read: not ours to delete now.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
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

fn forget_what_is_gone(ctx: &Context) {
    let live = |key: &ObjectKey| ctx.stores.claim(key).is_some();
    let known_pools: HashSet<PoolKey> = ctx.update_registry(|registry| {
        registry.prune_waiting_everywhere(live);
        registry.collect_garbage();
        registry.pool_keys().into_iter().collect()
    });
    ctx.own_writes().retain(live);
    ctx.pool_writes
        .lock()
        .expect("pool writes lock")
        .retain(&known_pools, std::time::Instant::now());
    drop(known_pools);
    crate::api::Name::forget_unused();
}
