//! inpool and the real reference provider, cluster-api-ipam-provider-in-cluster v1.1.0 (and
//! v1.0.3 for the migration) built from the Go module proxy, on one control plane
//! (`support::reference_crds_env`: CAPI core's manager, the reference's own CRDs from its Go
//! module, no IPAM provider until a test starts one):
//!
//! - `migration`: from the reference to inpool and back, from each release;
//! - `beside`: the reference running with its leader election when inpool starts.
//!
//! A binary of its own: its tests swap CRDs under the whole control plane and run providers
//! cluster-wide, so they take turns, and no other binary's tests may share the control plane.

mod beside;
mod migration;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use inpool::api::{IPAddress, IPAddressClaim};
use inpool_testenv::common::{apply_objects, parse_documents, wait_for};
use kube::api::{Api, PatchParams};
use kube::{Client, ResourceExt};

/// The tests take turns: each installs the CRDs it needs and runs providers cluster-wide.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long every claim may take to be realised after a provider starts.
const REALISED_WITHIN: Duration = Duration::from_secs(60);

/// The field manager of the CRD applies, as `kubectl apply --server-side` names itself: a later
/// apply takes back what an earlier one set and it does not.
const FIELD_MANAGER: &str = "kubectl";

/// Server-side applies the CRDs of `files` as `kubectl apply --server-side --force-conflicts`
/// does.
async fn apply_crds(client: &Client, files: &[PathBuf]) {
    let mut crds = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).expect("a CRD file");
        crds.extend(parse_documents(&text));
    }
    apply_objects(client, &crds, &PatchParams::apply(FIELD_MANAGER).force())
        .await
        .expect("the CRDs apply over the other provider's");
}

/// Waits until every claim of `names` has `status.addressRef` naming an existing `IPAddress`
/// (what the reference sets; it sets no condition) and returns each claim's address and the
/// `IPAddress`'s UID.
pub(crate) async fn realised_by_address_ref(
    claims: &Api<IPAddressClaim>,
    addresses: &Api<IPAddress>,
    names: &[String],
    by: &str,
) -> BTreeMap<String, (String, Option<String>)> {
    wait_for(
        &format!("{by} to realise claims {names:?}"),
        REALISED_WITHIN,
        || async {
            let mut realised = BTreeMap::new();
            for name in names {
                let c = claims.get(name).await.ok()?;
                let address = addresses.get_opt(c.address_ref()?).await.ok()??;
                realised.insert(name.clone(), (address.spec.address.clone(), address.uid()));
            }
            Some(realised)
        },
    )
    .await
}
