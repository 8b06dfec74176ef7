//! Finalizers, added and removed one at a time, as every writer of inpool's does it.
//!
//! The rule is kube-runtime's `finalizer` helper's: the whole finalizer list is written back with
//! a precondition, so that another writer's finalizer is never lost. kube's helper guards with a
//! JSON-patch `test` of the list; here the guard is the resourceVersion the list was read at,
//! which also fits the claim cache, whose claims are not kube `Resource`s. kube's helper also
//! runs the reconcile inside it; inpool's writers add and remove at different steps of their own
//! lifecycles, so this helper only writes.
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// Makes `finalizer` present on (or absent from) the object `name`, whose finalizers were
/// `current` at `resource_version`. Returns the object as written, or `None` when nothing had
/// to change or, when removing, the object is already gone. A write against a changed object
/// fails with a conflict (409): read it again and retry.
pub(crate) async fn set<K>(
    api: &Api<K>,
    name: &str,
    current: &[String],
    resource_version: Option<&str>,
    finalizer: &str,
    present: bool,
) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if current.iter().any(|f| f == finalizer) == present {
        return Ok(None);
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
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(written) => Ok(Some(written)),
        Err(kube::Error::Api(status)) if status.code == 404 && !present => Ok(None),
        Err(e) => Err(e),
    }
}
