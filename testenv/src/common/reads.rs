//! What the API server says: claims' `Ready` conditions, pools' conditions, the addresses held
//! and the reservations, and metric samples.

use std::collections::BTreeMap;

use inpool::api::reservation::IPAddressReservation;
use inpool::api::{IPAddress, IPAddressClaim, InClusterIPPoolStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

/// The condition `type_` of a pool's status (every pool kind's status has this type).
pub fn pool_status_condition<'a>(
    status: Option<&'a InClusterIPPoolStatus>,
    type_: &str,
) -> Option<&'a Condition> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// (status, reason, addressRef) of a claim's Ready condition.
pub fn ready_of(claim: &IPAddressClaim) -> Option<(String, String, Option<String>)> {
    let ready = claim.conditions().iter().find(|c| c.type_ == "Ready")?;
    let address_ref = claim.address_ref().map(str::to_string);
    Some((ready.status.clone(), ready.reason.clone(), address_ref))
}

/// An API server's refusal as the tests compare it, the same on every supported Kubernetes: for
/// a CEL rule's refusal, 1.36 writes the refused value before the message when it is a string or
/// a number (`Invalid value: "10.0.0.0/33": message`, `Invalid value: 56: message`) and nothing
/// else; 1.32 writes a string's nothing and other values' type (`Invalid value: "object":
/// message`). What stands between `Invalid value: ` and the message is dropped here; compare a
/// refusal with an expectation passed through this too.
pub fn refusal(error: &impl std::fmt::Display) -> String {
    const MARK: &str = "Invalid value: ";
    let text = error.to_string();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at + MARK.len()]);
        rest = &rest[at + MARK.len()..];
        let quoted = rest
            .strip_prefix('"')
            .and_then(|inner| inner.find("\": ").map(|end| &inner[end + 3..]));
        let digits = rest.trim_start_matches('-');
        let numeric = digits
            .find(": ")
            .filter(|&end| end > 0 && digits[..end].bytes().all(|b| b.is_ascii_digit()))
            .map(|end| &digits[end + 2..]);
        rest = quoted.or(numeric).unwrap_or(rest);
    }
    out.push_str(rest);
    out
}

/// The message of a claim's Ready condition ("" without one).
pub fn ready_message(claim: &IPAddressClaim) -> String {
    claim
        .conditions()
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Claim name → (Ready status, reason) for every claim with a Ready condition.
pub async fn claim_states(claims: &Api<IPAddressClaim>) -> BTreeMap<String, (String, String)> {
    claims
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|c| {
            let (status, reason, _) = ready_of(c)?;
            Some((c.name_any(), (status, reason)))
        })
        .collect()
}

/// Claim name → reason of its Ready condition.
pub async fn reasons(claims: &Api<IPAddressClaim>) -> BTreeMap<String, String> {
    claim_states(claims)
        .await
        .into_iter()
        .map(|(name, (_, reason))| (name, reason))
        .collect()
}

/// The live `IPAddress`es of a namespace (not being deleted).
async fn live_addresses(client: &Client, ns: &str) -> impl Iterator<Item = IPAddress> {
    let addresses: Api<IPAddress> = Api::namespaced(client.clone(), ns);
    addresses
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
}

/// Claim name → address, from the live `IPAddress` objects of a namespace.
pub async fn addresses_by_claim(client: &Client, ns: &str) -> BTreeMap<String, String> {
    live_addresses(client, ns)
        .await
        .map(|a| (a.spec.claim_ref.name.clone(), a.spec.address.clone()))
        .collect()
}

/// The addresses held from one pool of a namespace.
pub async fn addresses_of_pool(client: &Client, ns: &str, pool: &str) -> Vec<String> {
    live_addresses(client, ns)
        .await
        .filter(|a| a.spec.pool_ref.name == pool)
        .map(|a| a.spec.address)
        .collect()
}

/// Address → claim name of the reservations held for claims of `ns`.
pub async fn reservations_of(client: &Client, ns: &str) -> BTreeMap<String, String> {
    Api::<IPAddressReservation>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.spec.claim_namespace == ns)
        .map(|r| (r.spec.address.clone(), r.spec.claim_name.clone()))
        .collect()
}

/// The samples of a metric family (`name{labels} value` lines) whose value is not zero.
pub fn nonzero_samples(exposition: &str, name: &str) -> Vec<String> {
    exposition
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| {
            l.rsplit(' ')
                .next()
                .is_some_and(|v| v.parse::<f64>() != Ok(0.0))
        })
        .map(str::to_string)
        .collect()
}

/// The value of one sample (`name` with its labels exactly as exposed), if present.
pub fn sample(exposition: &str, name: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Every field manager of an object's `managedFields`.
pub fn managers<K: kube::ResourceExt>(object: &K) -> Vec<String> {
    object
        .managed_fields()
        .iter()
        .map(|f| f.manager.clone().unwrap_or_default())
        .collect()
}
