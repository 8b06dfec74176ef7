//! The controllers and their wiring.
//!
//! - [`registry`]: the pure in-memory picture of pools, held addresses and waiting claims;
//! - [`watch`]: tasks that feed the registry from pools, reservations and `IPAddress`es, and wake
//!   claims when capacity appears;
//! - [`claim`]: the `IPAddressClaim` reconciler (the IPAM contract and its `Ready` condition);
//! - [`reservation`]: the object whose name makes the API server enforce address uniqueness.
pub mod claim;
pub mod registry;
pub mod reservation;
pub mod watch;

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::channel::mpsc;
use kube::api::Api;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource};

use crate::api::IPAddressClaim;
use crate::cli::Settings;
use crate::telemetry::{HealthState, Metrics};
use registry::Registry;

/// Field manager of every write inpool makes.
pub const MANAGER: &str = "inpool";

/// Shared state of the controllers.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub registry: Mutex<Registry>,
    pub stores: watch::Stores,
    pub recorder: Recorder,
    pub metrics: Metrics,
    wake: mpsc::UnboundedSender<ObjectRef<IPAddressClaim>>,
}

impl Context {
    /// Asks for claims to be reconciled (capacity appeared, a Cluster changed, ...).
    pub fn wake(&self, claims: impl IntoIterator<Item = registry::ObjectKey>) {
        for claim in claims {
            let _ = self
                .wake
                .unbounded_send(ObjectRef::new(&claim.name).within(&claim.namespace));
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
    let config = watcher::Config::default().any_semantic();
    match &settings.watch_filter {
        Some(value) => config.labels(&format!("{}={value}", crate::api::WATCH_FILTER_LABEL)),
        None => config,
    }
}

fn scoped<K>(client: &Client, settings: &Settings) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match &settings.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the claim controller and the watch tasks that feed it until the future is dropped (for
/// example when the leader lease is lost) or a task fails.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Metrics,
    health: HealthState,
) -> anyhow::Result<()> {
    let (wake_tx, wake_rx) = mpsc::unbounded();
    let controller = Controller::new(
        scoped::<IPAddressClaim>(&client, &settings),
        filtered(&settings),
    )
    .with_config(ControllerConfig::default().concurrency(settings.concurrency))
    .reconcile_on(wake_rx);
    let (stores, feeds) = watch::start(&client, &settings, controller.store());
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), Reporter::from(MANAGER)),
        client: client.clone(),
        settings: settings.clone(),
        registry: Mutex::new(Registry::default()),
        stores,
        metrics,
        wake: wake_tx,
    });
    // The feed is part of this future, not a detached task: when the future is dropped (lease
    // lost), the watches and the registry go with it.
    let feeding = watch::feed(ctx.clone(), feeds);
    let controlling = async {
        // Allocating before every held address is known could pick one that is taken.
        ctx.stores.wait_until_ready().await?;
        health.set_caches_synced(true);
        controller
            .run(claim::reconcile, claim::error_policy, ctx.clone())
            .for_each(|_| futures::future::ready(()))
            .await;
        anyhow::Ok(())
    };
    tokio::select! {
        result = controlling => result,
        result = feeding => result.and(Err(anyhow::anyhow!("the watch streams ended"))),
    }
}
