//! The controllers' shared [`Context`]: the registry and the stores the watches keep, and the
//! mailboxes one controller leaves for another (claims to wake, pools whose status to write,
//! pools to check for stray reservations). Every reconciler runs with it; it knows no
//! reconciler, so that the rooms above it (`claims`, `pools`, `audit`) and the wiring ([`run`])
//! can import it without a circle.
//!
//! [`run`]: super::run
use std::future::Future;
use std::sync::Mutex;

use futures::channel::mpsc;
use kube::api::Api;
use kube::{Client, Resource};

use super::audit::evidence::{StrayChecks, look_for_strays};
use super::claims::own_writes::OwnWrites;
use super::pools::pacing::StatusPacing;
use super::runtime::{ControllerContext, MANAGER, error, events};
use super::sources::{served, watch, writers};
use super::state::{Change, InFlight, Registry, Ticket, Unready};
use crate::api::{ObjectKey, PoolKey};
use crate::settings::Settings;
use crate::telemetry::Metrics;

/// Shared state of the controllers.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub(crate) registry: Mutex<Registry>,
    pub stores: watch::Stores,
    pub events: events::Events,
    pub metrics: Metrics,
    pub(crate) wake: mpsc::UnboundedSender<ObjectKey>,
    /// When each pool's status may be written next (see [`StatusPacing`]).
    pub pool_writes: Mutex<StatusPacing>,
    /// Claim versions our own writes replaced (never held across an await).
    pub own_writes: Mutex<OwnWrites>,
    /// Failures in a row per object, for the backoff.
    pub retries: error::Retries,
    /// The pool kinds this run watches (see [`served`]).
    pub served: served::ServedKinds,
    /// Pools where a stray reservation may hold an address (see [`audit`]).
    pub strays: StrayChecks,
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
    /// The context of one run: an empty registry beside the `stores` the watches keep, the pool
    /// kinds `served`, and `wake` for the claims to reconcile.
    pub fn new(
        client: Client,
        settings: Settings,
        metrics: Metrics,
        stores: watch::Stores,
        served: served::ServedKinds,
        wake: mpsc::UnboundedSender<ObjectKey>,
    ) -> Context {
        Context {
            events: events::Events::new(client.clone(), MANAGER),
            client,
            writers: writers::Writers::new(settings.ignore_reference_provider_lease),
            settings,
            registry: Mutex::new(Registry::default()),
            stores,
            metrics,
            wake,
            pool_writes: Mutex::default(),
            own_writes: Mutex::default(),
            retries: error::Retries::default(),
            served,
            strays: StrayChecks::default(),
        }
    }

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

    /// Runs `step` with the address `held` in flight (the planner put it there), then ends the
    /// hold, however `step` ended: from then on the address stays used only while a reservation
    /// or an `IPAddress` holds it, and the claims its release can serve are woken. Every
    /// allocation the planner starts hands its [`InFlight`] here, so none stays in flight on an
    /// early return or an error. (A reconcile is dropped unfinished only when the whole run ends,
    /// and the registry with it.)
    pub async fn in_flight<T>(&self, held: InFlight, step: impl Future<Output = T>) -> T {
        let result = step.await;
        let woken = self.update_registry(|registry| registry.finish(held));
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
                .map(|claim| (claim, look_for_strays(&self.stores, registry, claim)));
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

impl ControllerContext for Context {
    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn retries(&self) -> &error::Retries {
        &self.retries
    }
}
