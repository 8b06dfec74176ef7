//! The controllers' runtime: the pieces every reconciler uses, and nothing that knows a
//! reconciler. It imports no room of `controllers`; a reconciler's context gives it what it
//! needs through [`ControllerContext`].
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

use kube::api::Api;
use kube::{Client, Resource};

use crate::settings::Settings;
use crate::telemetry::Metrics;

/// What the runtime needs of the context a controller runs with: where failures are counted,
/// and the backoff of the objects that fail.
pub(crate) trait ControllerContext {
    fn metrics(&self) -> &Metrics;
    fn retries(&self) -> &error::Retries;
}

impl<C: ControllerContext + ?Sized> ControllerContext for std::sync::Arc<C> {
    fn metrics(&self) -> &Metrics {
        (**self).metrics()
    }

    fn retries(&self) -> &error::Retries {
        (**self).retries()
    }
}

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
