//! Finalizers, added and removed one at a time, as every writer of inpool's does it.
//!
//! The rule is kube-runtime's `finalizer` helper's: the whole finalizer list is written back with
//! a precondition, so that another writer's finalizer is never lost. kube's helper guards with a
//! JSON-patch `test` of the list; here the guard is the resourceVersion the list was read at,
//! which also fits the claim cache, whose claims are not kube `Resource`s. kube's helper also
//! runs the reconcile inside it; inpool's writers add and remove at different steps of their own
//! lifecycles, so this helper only writes.
use kube::ResourceExt;
use kube::api::{Api, Patch};

use super::patch_params;
use crate::api::{ADDRESS_FINALIZER, IPAddress};
use serde_json::json;

/// What [`set`] did.
pub(crate) enum Outcome<K> {
    /// The object as written.
    Written(K),
    /// The finalizer was already as asked: nothing was written.
    Unchanged,
    /// Removing: the object is gone, and its finalizers with it.
    Gone,
}

/// Makes `finalizer` present on (or absent from) the object `name`, whose finalizers were
/// `current` at `resource_version`. A write against a changed object fails with a conflict
/// (409): read it again and retry.
pub(crate) async fn set<K>(
    api: &Api<K>,
    name: &str,
    current: &[String],
    resource_version: Option<&str>,
    finalizer: &str,
    present: bool,
) -> Result<Outcome<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if current.iter().any(|f| f == finalizer) == present {
        return Ok(Outcome::Unchanged);
    }
    let mut finalizers: Vec<&str> = current
        .iter()
        .map(String::as_str)
        .filter(|f| *f != finalizer)
        .collect();
    if present {
        finalizers.push(finalizer);
    }
    let patch = json!({ "metadata": {
        "finalizers": finalizers,
        "resourceVersion": resource_version,
    }});
    match api
        .patch(name, &patch_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(written) => Ok(Outcome::Written(written)),
        Err(kube::Error::Api(status)) if status.code == 404 && !present => Ok(Outcome::Gone),
        Err(e) => Err(e),
    }
}

/// Removes inpool's finalizer from `address`, if it has it, with its resourceVersion as a
/// precondition (a changed object answers 409).
pub(crate) async fn remove_address_protection(
    addresses: &Api<IPAddress>,
    address: &IPAddress,
) -> Result<Outcome<IPAddress>, kube::Error> {
    set(
        addresses,
        &address.name_any(),
        address.finalizers(),
        address.resource_version().as_deref(),
        ADDRESS_FINALIZER,
        false,
    )
    .await
}
