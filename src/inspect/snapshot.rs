//! The [`Snapshot`]: pools and claims at one moment, read from the API (every pool kind, in one
//! namespace or everywhere; a prefix kind that cannot be listed becomes a note), and what it says
//! about them as a whole.
use futures::FutureExt;
use futures::future::BoxFuture;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::rows::{ClaimRow, PoolRow, claim_row, pool_row, queue_positions};
use crate::api::kinds::WithPoolType;
use crate::api::{
    IPAddress, IPAddressClaim, IPPool, PoolKind, REASON_ADDRESS_ALLOCATED, REASON_POOL_EXHAUSTED,
};
use crate::controllers::runtime::api_in;

/// The objects of a pool kind, or none with a note when the kind is not served (404) or the
/// caller may not list it (403).
async fn list_or_note<K>(
    api: Api<K>,
    lp: &ListParams,
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(lp).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => {
            notes.push(unlisted_note(&K::kind(&()), status.code));
            Ok(Vec::new())
        }
        Err(e) => Err(e.into()),
    }
}

/// The rows of one pool kind's pools: everywhere, or in `namespace`; each counts `claims`.
struct RowsOfKind<'a> {
    client: &'a Client,
    namespace: Option<&'a str>,
    addresses: &'a [IPAddress],
    claims: &'a [IPAddressClaim],
    notes: &'a mut Vec<String>,
}

impl<'a> WithPoolType for RowsOfKind<'a> {
    type Output = BoxFuture<'a, anyhow::Result<Vec<PoolRow>>>;

    fn with<P: IPPool>(self) -> Self::Output {
        async move {
            let api = P::api(self.client.clone(), self.namespace);
            let lp = ListParams::default();
            let pools = match P::KIND.is_prefix() {
                true => list_or_note(api, &lp, self.notes).await?,
                false => api.list(&lp).await?.items,
            };
            Ok(pools
                .iter()
                .map(|pool| pool_row(pool, self.addresses, self.claims))
                .collect())
        }
        .boxed()
    }
}

/// The note for a pool kind that could not be listed (`code` 404 or 403).
fn unlisted_note(kind: &str, code: u16) -> String {
    if code == 404 {
        format!(
            "{kind}s are not shown: the API server does not serve the kind (its CRD is not installed)"
        )
    } else {
        format!("{kind}s are not shown: you may not list them (403 Forbidden)")
    }
}

/// Pools and claims at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    pub pools: Vec<PoolRow>,
    pub claims: Vec<ClaimRow>,
    /// What could not be read and was taken as empty (a prefix pool kind whose CRD is not
    /// installed, or that the caller may not list), one sentence each.
    pub notes: Vec<String>,
}

impl Snapshot {
    /// Reads pools, claims and `IPAddress`es: everywhere, or in `namespace` (its namespaced
    /// pools, and the global pools its claims may use).
    pub async fn fetch(client: &Client, namespace: Option<&str>) -> anyhow::Result<Snapshot> {
        let lp = ListParams::default();
        // A global pool's queue spans namespaces: it is counted from every claim when the caller
        // may read them all, and the namespace's claims are then taken from that one list; else
        // both come from the namespace's claims.
        let everywhere = Api::<IPAddressClaim>::all(client.clone()).list(&lp).await;
        let (claims, everywhere) = match (namespace, everywhere) {
            (None, everywhere) => (everywhere?.items, None),
            (Some(ns), Ok(everywhere)) => {
                let here = everywhere
                    .items
                    .iter()
                    .filter(|c| c.namespace().as_deref() == Some(ns))
                    .cloned()
                    .collect();
                (here, Some(everywhere.items))
            }
            (Some(_), Err(_)) => (
                api_in::<IPAddressClaim>(client, namespace)
                    .list(&lp)
                    .await?
                    .items,
                None,
            ),
        };
        let queued = everywhere.as_deref().unwrap_or(&claims);
        let addresses = api_in::<IPAddress>(client, namespace)
            .list(&lp)
            .await?
            .items;

        let positions = queue_positions(queued);
        let mut claim_rows: Vec<ClaimRow> = claims
            .iter()
            .map(|claim| claim_row(claim, &addresses, &positions))
            .collect();
        claim_rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

        // Namespaced kinds first, then global ones. The prefix kinds came later: a cluster
        // without their CRDs (or a caller without their RBAC) still gets its IP pools, with a
        // note.
        let mut kinds = PoolKind::ALL;
        kinds.sort_by_key(|kind| !kind.is_namespaced());
        let mut notes = Vec::new();
        let mut pool_rows = Vec::new();
        for kind in kinds {
            // A namespaced pool's rows count the namespace's claims, a global pool's every
            // claim.
            let counted = if kind.is_namespaced() {
                &claims[..]
            } else {
                queued
            };
            pool_rows.extend(
                kind.with_type(RowsOfKind {
                    client,
                    namespace,
                    addresses: &addresses,
                    claims: counted,
                    notes: &mut notes,
                })
                .await?,
            );
        }
        Ok(Snapshot {
            pools: pool_rows,
            claims: claim_rows,
            notes,
        })
    }
    /// Every claim has a Ready condition, each is realised or waiting for an address, and the
    /// pools' counts agree with the claims.
    pub fn settled(&self) -> bool {
        !self.claims.is_empty()
            && self.claims.iter().all(|c| {
                c.reason == REASON_ADDRESS_ALLOCATED
                    || (c.ready == "False" && c.reason == REASON_POOL_EXHAUSTED)
            })
            && self.pools_agree()
    }

    /// Every claim is Ready and the pools' counts agree with the claims.
    pub fn all_ready(&self) -> bool {
        !self.claims.is_empty()
            && self
                .claims
                .iter()
                .all(|c| c.ready == "True" && c.reason == REASON_ADDRESS_ALLOCATED)
            && self.pools_agree()
    }

    /// Each pool counts as used exactly the addresses of its realised claims (its status, written
    /// by inpool's pool controller, may lag a moment behind the claims).
    pub fn pools_agree(&self) -> bool {
        self.pools.iter().all(|p| match p.used {
            Some(used) => usize::try_from(used).is_ok_and(|u| u == p.realised),
            None => true,
        })
    }

    /// (claims Ready, claims PoolExhausted)
    pub fn tally(&self) -> (usize, usize) {
        let ready = self.claims.iter().filter(|c| c.ready == "True").count();
        let exhausted = self.claims.iter().filter(|c| c.is_waiting()).count();
        (ready, exhausted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_kind_that_cannot_be_listed_gets_a_note_saying_why() {
        assert_eq!(
            unlisted_note("InClusterPrefixPool", 404),
            "InClusterPrefixPools are not shown: the API server does not serve the kind (its CRD is not installed)"
        );
        assert!(unlisted_note("GlobalInClusterPrefixPool", 403).contains("403 Forbidden"));
    }
}
