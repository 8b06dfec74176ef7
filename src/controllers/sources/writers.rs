//! Other writers on the pools inpool serves: a second IPAM provider (the reference, left running
//! during a migration or by mistake) allocates without knowing inpool's reservations, so it hands
//! out addresses inpool holds. inpool cannot stop it; it looks for the two signs of one, says so,
//! and never makes it worse.
//!
//! - **Foreign `IPAddress`es.** An `IPAddress` of an inpool pool that inpool did not write and
//!   that is not a leftover to adopt: none of its `managedFields` entries is inpool's (every
//!   write inpool makes carries the field manager [`MANAGER`]), and both created and last written
//!   after this run of the controllers started (what existed before is a migration leftover,
//!   adopted as docs/migration.md describes; `clusterctl move` recreates objects with their
//!   `managedFields`, times included, so a moved leftover stays one). Its address is held like
//!   any other (the registry counts every `IPAddress` of a pool); the pool gets
//!   `ForeignAddresses=True` naming it and its manager, a Warning Event, and the gauge
//!   `inpool_foreign_addresses`, until it is gone.
//! - **The reference provider's leader election Lease** ([`REFERENCE_LEASE`], in any namespace):
//!   listed once before the first allocation, then followed with a watch of that name
//!   ([`Writers::follow_lease`]), so that a Lease created, renewed or deleted is seen as it
//!   happens, and one that stops being renewed is seen the moment it expires. The reference
//!   allocates only once it holds its Lease, so inpool stops allocating within a watch event of
//!   that. While one is held and renewed, inpool logs an error naming it and allocates nothing
//!   (claims wait, `Ready=False`/`AllocationFailed` naming the Lease), unless
//!   `--ignore-reference-provider-lease`; claims are woken once it is gone or expired. The look
//!   needs `list` and `watch` on Leases of that name; without them inpool says so once and
//!   allocates.
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::watch::Stores;
use super::watch::Update;
use crate::api::{IPAddress, ObjectKey, PoolKey};
use crate::controllers::runtime::MANAGER;
use crate::controllers::runtime::events::EventType;
use crate::controllers::runtime::events::Events;
use crate::telemetry::Metrics;

/// The name of the reference provider's leader election Lease (cluster-api-ipam-provider-in-cluster,
/// `LeaderElectionID` in its `main.go`), in whatever namespace it is installed.
pub const REFERENCE_LEASE: &str = "7bb7acb4.ipam.cluster.x-k8s.io";

/// How many foreign `IPAddress`es a pool condition names.
const LISTED: usize = 10;

/// Who wrote an `IPAddress` of an inpool pool, when it was not inpool: the facts the address
/// watch keeps of it (nothing for inpool's own objects).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Creator {
    /// The first field manager its `managedFields` name.
    pub manager: String,
    pub created: Option<Timestamp>,
    /// The last write its `managedFields` record (`None` when they record no time).
    pub written: Option<Timestamp>,
    pub pool: PoolKey,
    pub address: String,
}

/// The writer of `address` when it is not inpool; `None` when inpool wrote any of it, when it
/// records no field manager (nothing to tell), or when its pool is not one of inpool's kinds.
pub fn creator(address: &IPAddress) -> Option<Creator> {
    let fields = address.managed_fields();
    let managers: Vec<&str> = fields.iter().filter_map(|f| f.manager.as_deref()).collect();
    if managers.is_empty() || managers.contains(&MANAGER) {
        return None;
    }
    let namespace = address.namespace().unwrap_or_default();
    Some(Creator {
        manager: managers[0].to_string(),
        created: address.creation_timestamp().map(|t| t.0),
        written: fields.iter().filter_map(|f| Some(f.time.as_ref()?.0)).max(),
        pool: PoolKey::from_ref(&address.spec.pool_ref, &namespace)?,
        address: address.spec.address.clone(),
    })
}

impl Creator {
    /// Whether it shows a second writer at work since `since`: created after it, and written
    /// after it too (`clusterctl move` creates a copy now whose writes are those of the
    /// original). Both times have whole seconds: an object created in the second the run started
    /// counts as a leftover.
    fn is_foreign(&self, since: Timestamp) -> bool {
        self.created.is_some_and(|created| created > since)
            && self.written.is_none_or(|written| written > since)
    }
}

/// A foreign `IPAddress`, as a pool condition names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Foreign {
    pub key: ObjectKey,
    pub address: String,
    pub manager: String,
}

/// A live Lease of the reference provider, as logs and claim conditions name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveLease {
    /// `namespace/name`.
    pub name: String,
    pub holder: String,
}

impl std::fmt::Display for LiveLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lease {} (held by {})", self.name, self.holder)
    }
}

/// What this run knows of other writers.
pub struct Writers {
    /// When this run of the controllers started, in whole seconds.
    since: Timestamp,
    /// `--ignore-reference-provider-lease`.
    ignore_lease: bool,
    foreign: Mutex<HashMap<ObjectKey, Creator>>,
    lease: Mutex<Option<LiveLease>>,
}

impl Writers {
    /// Starts counting from now: what exists before is a leftover.
    pub fn new(ignore_lease: bool) -> Writers {
        let now = Timestamp::now();
        Writers {
            since: Timestamp::from_second(now.as_second()).unwrap_or(now),
            ignore_lease,
            foreign: Mutex::default(),
            lease: Mutex::default(),
        }
    }

    /// The foreign `IPAddress`es of `pool`, by namespace and name.
    pub fn foreign_in(&self, pool: &PoolKey) -> Vec<Foreign> {
        let mut found: Vec<Foreign> = self
            .foreign
            .lock()
            .expect("foreign addresses lock")
            .iter()
            .filter(|(_, c)| &c.pool == pool)
            .map(|(key, c)| Foreign {
                key: key.clone(),
                address: c.address.clone(),
                manager: c.manager.clone(),
            })
            .collect();
        found.sort_by(|a, b| a.key.cmp(&b.key));
        found
    }

    /// The reference provider's live Lease that holds allocation back, unless overridden.
    pub fn holding_lease(&self) -> Option<LiveLease> {
        if self.ignore_lease {
            return None;
        }
        self.lease.lock().expect("lease lock").clone()
    }

    /// Takes in what the `IPAddress` watch saw of who wrote each object: records the foreign
    /// ones, announces each new one (log, Event on its pool), forgets those gone, and wakes the
    /// pools whose foreign addresses changed.
    pub(crate) fn observe(
        &self,
        stores: &Stores,
        metrics: &Metrics,
        events: &Events,
        update: Update<(ObjectKey, Option<Creator>)>,
    ) {
        let foreign = |creator: Option<Creator>| creator.filter(|c| c.is_foreign(self.since));
        let (added, removed) = {
            let mut known = self.foreign.lock().expect("foreign addresses lock");
            let mut added = Vec::new();
            let mut removed = Vec::new();
            let mut set = |known: &mut HashMap<ObjectKey, Creator>,
                           key: ObjectKey,
                           creator: Option<Creator>| match creator {
                Some(creator) => {
                    if known.insert(key.clone(), creator.clone()).is_none() {
                        added.push((key, creator));
                    }
                }
                None => removed.extend(known.remove(&key)),
            };
            match update {
                Update::Applied((key, creator)) => set(&mut known, key.clone(), foreign(creator)),
                Update::Deleted((key, _)) => set(&mut known, key.clone(), None),
                Update::Listed { items, .. } => {
                    let listed: HashMap<ObjectKey, Creator> = items
                        .into_iter()
                        .filter_map(|(key, creator)| Some((key, foreign(creator)?)))
                        .collect();
                    let gone: Vec<ObjectKey> = known
                        .keys()
                        .filter(|k| !listed.contains_key(*k))
                        .cloned()
                        .collect();
                    for key in gone {
                        set(&mut known, key, None);
                    }
                    for (key, creator) in listed {
                        set(&mut known, key, Some(creator));
                    }
                }
            }
            (added, removed)
        };
        let mut pools: Vec<PoolKey> = added
            .iter()
            .map(|(_, c)| &c.pool)
            .chain(removed.iter().map(|c| &c.pool))
            .cloned()
            .collect();
        pools.sort();
        pools.dedup();
        for pool in &pools {
            let count = self.foreign_in(pool).len();
            metrics.foreign_addresses(pool, count as u64);
            stores.pools.wake(pool);
        }
        for (key, creator) in added {
            announce(stores, events, &key, creator);
        }
    }

    /// Records what the last look found; returns whether allocation was held back and no
    /// longer is.
    fn set_lease(&self, found: Option<LiveLease>) -> bool {
        let mut lease = self.lease.lock().expect("lease lock");
        let change = (lease.clone(), found.clone());
        *lease = found;
        drop(lease);
        let opened = matches!(change, (Some(_), None)) && !self.ignore_lease;
        match change {
            (None, Some(live)) if self.ignore_lease => tracing::error!(
                lease = %live.name,
                holder = %live.holder,
                "another IPAM provider is running: its leader election Lease {live} is held and renewed; it hands out addresses without knowing inpool's reservations. Allocating anyway (--ignore-reference-provider-lease)"
            ),
            (None, Some(live)) => tracing::error!(
                lease = %live.name,
                holder = %live.holder,
                "another IPAM provider is running: its leader election Lease {live} is held and renewed; it hands out addresses without knowing inpool's reservations. inpool allocates nothing until the Lease is gone or expires (stop that provider; --ignore-reference-provider-lease overrides this)"
            ),
            (Some(was), None) => tracing::info!(
                lease = %was.name,
                "the other IPAM provider's Lease {} is gone or expired; allocating",
                was.name
            ),
            _ => {}
        }
        opened
    }
}

/// Logs a foreign `IPAddress` and publishes a Warning Event on its pool.
fn announce(stores: &Stores, events: &Events, key: &ObjectKey, creator: Creator) {
    tracing::warn!(
        pool = %creator.pool,
        object = %key,
        address = %creator.address,
        manager = %creator.manager,
        "an IPAddress of the pool was created by another writer after inpool started: another IPAM provider allocates from it"
    );
    let Some(pool) = stores.pool(&creator.pool) else {
        return;
    };
    let regarding = pool.reference();
    let note = format!(
        "IPAddress {} ({}) was created by field manager {:?}, not inpool, after inpool started: another IPAM provider allocates from this pool. inpool never hands out an address it sees held, but the other provider can hand out addresses inpool holds; stop it",
        key, creator.address, creator.manager
    );
    let events = events.clone();
    tokio::spawn(async move {
        if let Err(e) = events
            .publish(regarding, EventType::Warning, "ForeignAddress", note)
            .await
        {
            tracing::debug!(error = %e, "could not publish an event");
        }
    });
}

/// The condition message naming a pool's foreign `IPAddress`es.
pub fn foreign_message(foreign: &[Foreign]) -> String {
    let listed: Vec<String> = foreign
        .iter()
        .take(LISTED)
        .map(|f| format!("{} {} (field manager {:?})", f.key, f.address, f.manager))
        .collect();
    format!(
        "{} IPAddress{} created by another writer since inpool started: {}{}; another IPAM provider allocates from this pool. inpool never hands out an address it sees held, but the other provider can hand out addresses inpool holds: stop it",
        foreign.len(),
        if foreign.len() == 1 { "" } else { "es" },
        listed.join(", "),
        if foreign.len() > LISTED { ", ..." } else { "" }
    )
}

/// The reference provider's Lease among `leases` that is held and renewed as of `now`.
pub fn live_lease<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    now: Timestamp,
) -> Option<LiveLease> {
    leases.into_iter().find_map(|lease| {
        let (holder, until) = held_until(lease)?;
        (until > now).then(|| LiveLease {
            name: format!(
                "{}/{}",
                lease.namespace().unwrap_or_default(),
                lease.name_any()
            ),
            holder: holder.to_string(),
        })
    })
}

/// A held Lease's holder, and when it expires unless renewed.
fn held_until(lease: &Lease) -> Option<(&str, Timestamp)> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let valid = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds?));
    Some((holder, renewed.checked_add(valid).ok()?))
}

/// How long until the first of the live `leases` expires unless renewed: when to look again
/// without a watch event.
fn next_expiry<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    now: Timestamp,
) -> Option<Duration> {
    leases
        .into_iter()
        .filter_map(|lease| held_until(lease).map(|(_, until)| until))
        .filter(|until| *until > now)
        .min()
        .and_then(|until| Duration::try_from(until.duration_since(now)).ok())
}

/// Whether the watch failed because this process may not list or watch Leases of that name.
fn is_forbidden(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchFailed(e) => {
            matches!(e, kube::Error::Api(status) if status.code == 403)
        }
        watcher::Error::WatchError(status) => status.code == 403,
        _ => false,
    }
}

/// What one look for the reference provider's Lease found.
pub struct LeaseLook {
    /// Allocation was held back by the Lease and no longer is: the waiting claims may go on.
    pub opened: bool,
    /// Whether to look again (no when this process may not list Leases).
    pub keep_looking: bool,
}

impl Writers {
    /// Follows the reference provider's Lease after the first look: a watch of that name in
    /// every namespace, and a timer at the moment the live one expires unless renewed. Calls
    /// `opened` whenever allocation, held back by a live Lease, may go on. Returns when this
    /// process may not watch Leases (it says so) or the watch ends.
    pub async fn follow_lease(&self, client: &Client, metrics: &Metrics, mut opened: impl FnMut()) {
        let api: Api<Lease> = Api::all(client.clone());
        // The watches' server-side timeout, as every watch of inpool's: at the default (290 s) a
        // quiet watch outlived the client's read timeout and failed, with a warning, every 45 s.
        let config = watcher::Config::default()
            .timeout(super::watch::WATCH_TIMEOUT.as_secs() as u32)
            .fields(&format!("metadata.name={REFERENCE_LEASE}"));
        let mut events = std::pin::pin!(watcher(api, config).default_backoff());
        // By namespace; a re-list is gathered aside and replaces it whole.
        let mut leases: BTreeMap<String, Lease> = BTreeMap::new();
        let mut relisted: Option<BTreeMap<String, Lease>> = None;
        loop {
            let expiry = next_expiry(leases.values(), Timestamp::now());
            let expired = async {
                match expiry {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = events.next() => match event {
                    None => return,
                    Some(Ok(watcher::Event::Init)) => relisted = Some(BTreeMap::new()),
                    Some(Ok(watcher::Event::InitApply(lease))) => {
                        if let Some(relisted) = relisted.as_mut() {
                            relisted.insert(lease.namespace().unwrap_or_default(), lease);
                        }
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        leases = relisted.take().unwrap_or_default();
                    }
                    Some(Ok(watcher::Event::Apply(lease))) => {
                        leases.insert(lease.namespace().unwrap_or_default(), lease);
                    }
                    Some(Ok(watcher::Event::Delete(lease))) => {
                        leases.remove(&lease.namespace().unwrap_or_default());
                    }
                    Some(Err(e)) => {
                        if is_forbidden(&e) {
                            tracing::warn!(
                                lease = REFERENCE_LEASE,
                                error = %e,
                                "may not watch Leases of that name: a reference IPAM provider started from now on goes unnoticed (config/rbac grants it)"
                            );
                            return;
                        }
                        tracing::warn!(error = %e, lease = REFERENCE_LEASE, "the watch of the reference provider's Lease failed; it resumes");
                        continue;
                    }
                },
                () = expired => {}
            }
            if relisted.is_some() {
                // Until the re-list is whole, what was known stands.
                continue;
            }
            let found = live_lease(leases.values(), Timestamp::now());
            metrics.reference_provider_lease(found.is_some());
            if self.set_lease(found) {
                opened();
            }
        }
    }

    /// Looks for the reference provider's Lease once, and records what it found.
    pub async fn look_for_lease(&self, client: &Client, metrics: &Metrics) -> LeaseLook {
        let leases: Api<Lease> = Api::all(client.clone());
        // Served from the API server's watch cache: there may be a Lease per node.
        let params = ListParams::default()
            .fields(&format!("metadata.name={REFERENCE_LEASE}"))
            .match_any();
        match leases.list(&params).await {
            Ok(list) => {
                let found = live_lease(&list.items, Timestamp::now());
                metrics.reference_provider_lease(found.is_some());
                LeaseLook {
                    opened: self.set_lease(found),
                    keep_looking: true,
                }
            }
            Err(kube::Error::Api(status)) if status.code == 403 => {
                tracing::warn!(
                    lease = REFERENCE_LEASE,
                    "may not list Leases cluster-wide: cannot tell whether the reference IPAM provider runs beside inpool (config/rbac grants it)"
                );
                LeaseLook {
                    opened: false,
                    keep_looking: false,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, lease = REFERENCE_LEASE, "could not look for the reference provider's Lease");
                LeaseLook {
                    opened: false,
                    keep_looking: true,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, MicroTime, Time};

    fn lease(holder: Option<&str>, renewed: &str, seconds: i32) -> Lease {
        let mut lease = Lease::default();
        lease.metadata.name = Some(REFERENCE_LEASE.into());
        lease.metadata.namespace = Some("capi-ipam-in-cluster-system".into());
        lease.spec = Some(LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: Some(MicroTime(renewed.parse().unwrap())),
            lease_duration_seconds: Some(seconds),
            ..LeaseSpec::default()
        });
        lease
    }

    #[test]
    fn a_lease_is_live_while_held_and_renewed_within_its_duration() {
        let now: Timestamp = "2026-12-03T10:00:00Z".parse().unwrap();
        let renewed = |at| vec![lease(Some("ref-1"), at, 15)];
        assert_eq!(
            live_lease(&renewed("2026-12-03T09:59:50Z"), now),
            Some(LiveLease {
                name: format!("capi-ipam-in-cluster-system/{REFERENCE_LEASE}"),
                holder: "ref-1".into()
            })
        );
        assert_eq!(
            live_lease(&renewed("2026-12-03T09:59:44Z"), now),
            None,
            "expired"
        );
        assert_eq!(
            live_lease(&[lease(Some(""), "2026-12-03T09:59:59Z", 15)], now),
            None,
            "released"
        );
        assert_eq!(
            live_lease(&[lease(None, "2026-12-03T09:59:59Z", 15)], now),
            None
        );
    }

    #[test]
    fn the_next_look_without_an_event_is_when_the_live_lease_expires() {
        let now: Timestamp = "2026-12-03T10:00:00Z".parse().unwrap();
        assert_eq!(
            next_expiry(&[lease(Some("ref-1"), "2026-12-03T09:59:50Z", 15)], now),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            next_expiry(
                &[
                    lease(Some("ref-1"), "2026-12-03T09:59:50Z", 15),
                    lease(Some("ref-2"), "2026-12-03T09:59:58Z", 4),
                ],
                now
            ),
            Some(Duration::from_secs(2)),
            "the first to expire"
        );
        assert_eq!(
            next_expiry(&[lease(Some("ref-1"), "2026-12-03T09:59:40Z", 15)], now),
            None,
            "expired already: nothing to wait for"
        );
        assert_eq!(
            next_expiry(&[lease(Some(""), "2026-12-03T09:59:59Z", 15)], now),
            None,
            "released"
        );
    }

    /// An `IPAddress` created at `created`, written by each manager then.
    fn address(managers: &[&str], created: &str) -> IPAddress {
        moved(managers, created, created)
    }

    /// An `IPAddress` created at `created` whose managers last wrote it at `written`.
    fn moved(managers: &[&str], created: &str, written: &str) -> IPAddress {
        let mut address: IPAddress = serde_json::from_value(serde_json::json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
            "kind": "IPAddress",
            "metadata": {"name": "m-0", "namespace": "ns", "creationTimestamp": created},
            "spec": {
                "address": "10.0.0.5", "prefix": 24, "claimRef": {"name": "m-0"},
                "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "p"}
            }
        }))
        .unwrap();
        *address.managed_fields_mut() = managers
            .iter()
            .map(|m| ManagedFieldsEntry {
                manager: Some(m.to_string()),
                time: Some(Time(written.parse().unwrap())),
                ..ManagedFieldsEntry::default()
            })
            .collect();
        address
    }

    #[test]
    fn an_address_is_foreign_when_another_writer_created_it_after_the_start() {
        let since: Timestamp = "2026-12-03T10:00:00Z".parse().unwrap();
        let after = "2026-12-03T10:00:01Z";
        let foreign = |a: &IPAddress| creator(a).is_some_and(|c| c.is_foreign(since));
        assert!(foreign(&address(&["manager"], after)));
        assert!(!foreign(&address(&["inpool"], after)), "inpool's own");
        assert!(
            !foreign(&address(&["manager", "inpool"], after)),
            "inpool wrote to it"
        );
        assert!(
            !foreign(&address(&["manager"], "2026-12-03T10:00:00Z")),
            "a leftover from before the start"
        );
        assert!(
            !foreign(&moved(&["manager"], after, "2026-12-03T09:00:00Z")),
            "a leftover moved here by clusterctl, its managedFields with it"
        );
        assert!(
            !foreign(&address(&[], after)),
            "no managers: nothing to tell"
        );
        assert_eq!(
            creator(&address(&["manager"], after)).map(|c| (c.manager, c.address)),
            Some(("manager".into(), "10.0.0.5".into()))
        );
    }
}
