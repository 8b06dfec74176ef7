//! The controllers' runtime: the shared [`Context`], [`run`] (the wiring of watches, reconcilers
//! and the audit), and the pieces every reconciler uses.
//!
//! - [`controller`]: the controllers' loop, with [`queue`], its work queue: the claims', each pool
//!   kind's and the released reservations' (see [`controller`] for why not kube-runtime's
//!   `Controller`);
//! - [`error`]: the controllers' error type, backoff, and where failures are logged and counted;
//! - [`events`]: Kubernetes Events, written as kube-runtime's recorder writes them;
//! - [`finalizers`]: adding and removing a finalizer, for every writer.
pub(crate) mod controller;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod finalizers;
pub(crate) mod queue;

use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use futures::channel::mpsc;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};

use self::controller::Controller;
use super::claims::cache::{CacheWriter, ClaimCache};
use super::claims::cached_claim::WatchedClaim;
use super::claims::own_writes::OwnWrites;
use super::sources::{served, watch, writers};
use super::state::{Change, Registry, Ticket, Unready};
use super::{audit, claims, pools};
use crate::api::{ObjectKey, PoolKey};
use crate::cli::Settings;
use crate::telemetry::{HealthState, Metrics};

/// Field manager of every write inpool makes, creates included: an object's `managedFields` then
/// tell inpool's writes from any other writer's (see `sources::writers`). The name of the binary,
/// as controller-runtime derives a provider's manager from it.
pub const MANAGER: &str = "inpool";

/// Parameters of every create inpool makes: its field manager, [`MANAGER`].
pub fn create_params() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(MANAGER.into()),
        ..kube::api::PostParams::default()
    }
}

/// Parameters of every merge or JSON patch inpool makes: its field manager, [`MANAGER`]
/// (server-side applies use `PatchParams::apply(MANAGER)`).
pub fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(MANAGER.into()),
        ..kube::api::PatchParams::default()
    }
}

/// Shared state of the controllers.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    registry: Mutex<Registry>,
    pub stores: watch::Stores,
    pub events: events::Events,
    pub metrics: Metrics,
    wake: mpsc::UnboundedSender<ObjectKey>,
    /// When each pool's status may be written next (see `pools::status::StatusPacing`).
    pub pool_writes: Mutex<pools::status::StatusPacing>,
    /// Claim versions our own writes replaced (never held across an await).
    pub own_writes: Mutex<OwnWrites>,
    /// Failures in a row per object, for the backoff.
    pub retries: error::Retries,
    /// The pool kinds this run watches (see [`served`]).
    pub served: served::ServedKinds,
    /// Pools where a stray reservation may hold an address (see [`audit`]).
    pub strays: audit::StrayChecks,
    /// Other writers on the pools: foreign `IPAddress`es, the reference provider's Lease.
    pub writers: writers::Writers,
}

/// A reconcile's ticket for what it learns from its own requests (see [`Context::learning`]).
pub struct Learning<'a> {
    ctx: &'a Context,
    ticket: Ticket,
}

impl Learning<'_> {
    /// Applies an object this reconcile has just read or written, before its watch event comes
    /// (the event is then a no-op), unless its deletion was applied meanwhile.
    pub fn learn(&self, change: Change) {
        let ticket = self.ticket;
        self.ctx.apply_if(change, |registry, change| {
            !registry.is_stale(change, ticket)
        });
    }
}

impl Drop for Learning<'_> {
    fn drop(&mut self) {
        let ticket = self.ticket;
        self.ctx
            .update_registry(|registry| registry.close_ticket(ticket));
    }
}

/// The registry, locked for reading: [`Context::update_registry`] is the only way to change it.
pub(crate) struct RegistryRead<'a>(std::sync::MutexGuard<'a, Registry>);

impl std::ops::Deref for RegistryRead<'_> {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        &self.0
    }
}

impl Context {
    /// Locks the registry for reading (never held across an await).
    pub fn registry(&self) -> RegistryRead<'_> {
        RegistryRead(self.registry.lock().expect("registry lock"))
    }

    /// Changes the registry, then asks for the status of every pool the change may have altered
    /// (the registry marks them dirty). The lock is released before anything is sent.
    pub fn update_registry<T>(&self, change: impl FnOnce(&mut Registry) -> T) -> T {
        let (result, dirty) = {
            let mut registry = self.registry.lock().expect("registry lock");
            let result = change(&mut registry);
            (result, registry.take_dirty())
        };
        for pool in dirty {
            self.wake_pool(&pool);
        }
        result
    }

    /// Runs `step` with `ip` held in flight in `pool` (the planner put it there), then ends the
    /// hold, however `step` ended: from then on the address stays used only while a reservation
    /// or an `IPAddress` holds it, and the claims its release can serve are woken. Every
    /// allocation the planner starts ends here, so none stays in flight on an early return or
    /// an error. (A reconcile is dropped unfinished only when the whole run ends, and the
    /// registry with it.)
    pub async fn in_flight<T>(
        &self,
        pool: &PoolKey,
        ip: IpAddr,
        step: impl Future<Output = T>,
    ) -> T {
        let result = step.await;
        let woken = self.update_registry(|registry| registry.finish(pool, ip));
        self.wake(woken);
        result
    }

    /// Locks the record of our own claim writes (never held across an await).
    pub fn own_writes(&self) -> std::sync::MutexGuard<'_, OwnWrites> {
        self.own_writes.lock().expect("own-writes lock")
    }

    /// Opens a ticket for the objects a reconcile is about to read or write and apply to the
    /// registry ([`Learning::learn`]); closed when dropped.
    pub fn learning(&self) -> Learning<'_> {
        let ticket = self.update_registry(Registry::open_ticket);
        Learning { ctx: self, ticket }
    }

    /// Applies one change to the registry and wakes the claims it concerns; a pool that was
    /// paused and no longer is wakes its claims, which were not queued while it was paused and so
    /// are found in the claim store.
    pub fn apply(&self, change: Change) {
        self.apply_if(change, |_, _| true);
    }

    /// [`Context::apply`], if `condition` holds of the registry and the change, under the same
    /// lock; returns whether it held.
    pub fn apply_if(
        &self,
        change: Change,
        condition: impl FnOnce(&Registry, &Change) -> bool,
    ) -> bool {
        let learnt = match &change {
            Change::Address(_, record) | Change::Reservation(_, record) => {
                record.holder.claim().cloned()
            }
            _ => None,
        };
        let applied = self.update_registry(|registry| {
            if !condition(registry, &change) {
                return None;
            }
            let unpaused = match &change {
                Change::Pool(key, parsed) if !matches!(parsed, Err(Unready::Paused)) => {
                    registry.is_paused(key).then(|| key.clone())
                }
                Change::PoolGone(key) => registry.is_paused(key).then(|| key.clone()),
                _ => None,
            };
            let mut woken = registry.apply(change);
            if let Some(pool) = unpaused {
                woken.extend(self.stores.claims_of_pool(&pool));
            }
            let strays = learnt
                .as_ref()
                .map(|claim| (claim, audit::look_for_strays(self, registry, claim)));
            Some((woken, strays))
        });
        let Some((woken, strays)) = applied else {
            return false;
        };
        // A deleting claim waits for nothing and has nothing to heal: its own release deletes its
        // IPAddress and reservations, and waking it for that would run the release again (one more
        // finalizer patch and Event per claim, measured by the scale harness).
        let deleting =
            |claim: &ObjectKey| self.stores.claim(claim).is_some_and(|c| c.is_deleting());
        self.wake(woken.into_iter().filter(|claim| !deleting(claim)));
        if let Some((claim, evidence)) = strays {
            for pool in &evidence.pools {
                self.strays.request(pool);
            }
            if evidence.wake {
                self.wake([claim.clone()]);
            }
        }
        true
    }

    /// Asks for a pool's status to be brought up to date.
    pub fn wake_pool(&self, pool: &PoolKey) {
        self.stores.pools.wake(pool);
    }

    /// Asks for claims to be reconciled (capacity appeared, a Cluster changed, ...).
    pub fn wake(&self, claims: impl IntoIterator<Item = ObjectKey>) {
        for claim in claims {
            // A closed channel means the run is ending.
            let _ = self.wake.unbounded_send(claim);
        }
    }

    /// An `Api` for a namespaced kind, in the given namespace.
    pub fn namespaced<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), namespace)
    }
}

/// Watcher configuration for namespaced objects that follow the provider's label filter.
fn filtered(settings: &Settings) -> watcher::Config {
    let config = watch::watch_config();
    match &settings.watch_filter {
        Some(value) => config.labels(&format!("{}={value}", crate::api::WATCH_FILTER_LABEL)),
        None => config,
    }
}

/// Deletes `name`; an object that is already gone is what was wanted.
pub async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &kube::api::DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

pub(crate) fn scoped<K>(client: &Client, settings: &Settings) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    api_in(client, settings.namespace.as_deref())
}

/// The API of a namespaced kind in `namespace`, or in every namespace.
pub fn api_in<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the controllers and the watches that feed them until the future is dropped (for example
/// when the leader lease is lost) or a task fails. One watch per kind: the claims' here, driven by
/// the claim controller; the others in `watch::start`, shared with the pool and reuse-grace
/// controllers.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Metrics,
    health: HealthState,
) -> anyhow::Result<()> {
    let (wake_tx, wake_rx) = mpsc::unbounded();
    let claim_cache = ClaimCache::default();
    let claim_writer = CacheWriter::new(claim_cache.clone());
    let claims = watcher::watcher(
        // Read as the cache keeps them: each object is cut down as it is deserialised.
        scoped::<WatchedClaim>(&client, &settings),
        filtered(&settings),
    )
    .default_backoff();
    // A prefix kind without its CRD or RBAC is skipped, not watched in vain (see `served`).
    let served = served::discover(&client, &settings, &metrics).await?;
    let (stores, feeds, subscriptions) = watch::start(&client, &settings, claim_cache, &served);
    let ctx = Arc::new(Context {
        events: events::Events::new(client.clone(), MANAGER),
        client: client.clone(),
        settings: settings.clone(),
        registry: Mutex::new(Registry::default()),
        stores,
        metrics,
        wake: wake_tx,
        pool_writes: Mutex::default(),
        own_writes: Mutex::default(),
        retries: error::Retries::default(),
        served,
        strays: audit::StrayChecks::default(),
        writers: writers::Writers::new(settings.ignore_reference_provider_lease),
    });
    // The feed is part of this future, not a detached task: when the future is dropped (lease
    // lost), the watches and the registry go with it.
    let feeding = watch::feed(ctx.clone(), feeds);
    let started = std::time::Instant::now();
    let controlling = async {
        // Allocating before every held address is known could pick one that is taken. The
        // claim watch opens only now too (see [`controller`]).
        ctx.stores.wait_until_ready().await?;
        // Nothing is allocated before the first look for another provider's Lease.
        let looking = writers::look_for_lease(&ctx).await;
        health.set_caches_synced(true);
        tracing::info!(
            seconds = started.elapsed().as_secs_f64(),
            "pools, Clusters, reservations and IPAddresses listed"
        );
        let claims = controller::claim_controller(claims, claim_writer, &ctx)
            .reconcile_on(wake_rx)
            .concurrency(ctx.settings.concurrency)
            .run(
                claims::reconcile::reconcile,
                claims::reconcile::error_policy,
                ctx.clone(),
            );
        // The pool and reuse-grace controllers share the feed's watches (see `watch`).
        let pools = subscriptions.pools.run(&ctx);
        let (released, requests) = subscriptions
            .released
            .requests(|reservation| reservation.name_any());
        let released = Controller::new("ipaddressreservation", requests, move |name: &String| {
            released.get(&ObjectRef::new(name))
        })
        .run(
            pools::reuse_grace::reconcile,
            pools::reuse_grace::error_policy,
            ctx.clone(),
        );
        let audits = audit::run(ctx.clone());
        let lease_looks = async {
            if looking {
                writers::keep_looking_for_lease(ctx.clone()).await;
            }
        };
        futures::join!(claims, pools, released, audits, lease_looks);
        anyhow::Ok(())
    };
    tokio::select! {
        result = controlling => result,
        result = feeding => result.and(Err(anyhow::anyhow!("the watch streams ended"))),
    }
}
