//! Which pool kinds inpool serves in this cluster. The IP pool kinds are required (their CRDs
//! come with every install); the prefix pool kinds came later, so a binary upgraded without its
//! CRDs, or run with an older Role, may find them missing or forbidden. Their watches would then
//! fail forever and the caches never sync: IP-pool claims would stop being served too. So each
//! prefix kind is checked at start-up (API discovery, then whether inpool may list and watch it)
//! and skipped, with a warning and `inpool_pool_kind_served{pool_kind} 0`, when it is not.
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use crate::api::{IPAM_GROUP, POOL_VERSION, PoolKind};
use crate::controllers::runtime::error::backoff;
use crate::settings::Settings;
use crate::telemetry::Metrics;

/// The pool kinds this run watches and serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServedKinds {
    served: [bool; PoolKind::ALL.len()],
}

impl ServedKinds {
    /// Every kind served (a cluster with every CRD and the full Role).
    #[cfg(test)]
    pub fn all() -> ServedKinds {
        ServedKinds {
            served: [true; PoolKind::ALL.len()],
        }
    }

    /// The IP pool kinds and those of `prefix_kinds` that are served.
    pub fn with_prefix_kinds(prefix_kinds: &[PoolKind]) -> ServedKinds {
        let mut served = [false; PoolKind::ALL.len()];
        for (i, kind) in PoolKind::ALL.into_iter().enumerate() {
            served[i] = !kind.is_prefix() || prefix_kinds.contains(&kind);
        }
        ServedKinds { served }
    }

    pub fn serves(&self, kind: PoolKind) -> bool {
        PoolKind::ALL
            .into_iter()
            .position(|k| k == kind)
            .is_some_and(|i| self.served[i])
    }
}

/// Why a kind is not served, for the warning.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Missing {
    /// The API server does not serve the resource: its CRD is not installed.
    Resource,
    /// inpool may not `verb` it: its Role or ClusterRole lacks the rule.
    Forbidden(&'static str),
}

/// The warning for a kind that is skipped.
fn warning(kind: PoolKind, plural: &str, missing: &Missing) -> String {
    match missing {
        Missing::Resource => format!(
            "{kind} is not served by the API server ({plural}.{IPAM_GROUP}/{POOL_VERSION} is \
             missing): claims on {kind}s are not served until its CRD is installed (apply the \
             CRDs of this release, e.g. `cargo run --bin crdgen` or the release's components) \
             and inpool restarted",
            kind = kind.name()
        ),
        Missing::Forbidden(verb) => format!(
            "inpool may not {verb} {plural}.{IPAM_GROUP}: claims on {kind}s are not served until \
             its ClusterRole grants get, list, watch, update and patch on {plural} and \
             {plural}/status (apply the RBAC of this release) and inpool restarted",
            kind = kind.name()
        ),
    }
}

/// How many times the discovery request is sent when it fails on the way (a reset connection,
/// `429`, `5xx`), [`backoff`] apart (1 s doubling: 15 s in all), before the run fails: one
/// dropped connection at start must not cost a restart.
const DISCOVERY_ATTEMPTS: u32 = 5;

/// Finds which prefix kinds are served and allowed; sets `inpool_pool_kind_served` for every
/// kind and warns about each one skipped. A discovery request that keeps failing (other than
/// with 404, which means the group version is not served at all) fails the run, which is retried
/// like any start-up failure.
pub async fn discover(
    client: &Client,
    settings: &Settings,
    metrics: &Metrics,
) -> anyhow::Result<ServedKinds> {
    let group_version = format!("{IPAM_GROUP}/{POOL_VERSION}");
    let resources = group_resources(client, &group_version)
        .await
        .map_err(|e| anyhow::anyhow!("discovering {group_version}: {e}"))?;
    let mut served = Vec::new();
    for kind in PoolKind::ALL.into_iter().filter(|kind| kind.is_prefix()) {
        let plural = kind.plural();
        let namespace = if kind.is_namespaced() {
            settings.namespace.as_deref()
        } else {
            None
        };
        let missing = if !resources.contains(&plural) {
            Some(Missing::Resource)
        } else {
            forbidden_verb(client, &plural, namespace)
                .await
                .map(Missing::Forbidden)
        };
        match missing {
            Some(missing) => {
                tracing::warn!(kind = kind.name(), "{}", warning(kind, &plural, &missing))
            }
            None => served.push(kind),
        }
    }
    let served = ServedKinds::with_prefix_kinds(&served);
    for kind in PoolKind::ALL {
        metrics.pool_kind_served(kind, served.serves(kind));
    }
    Ok(served)
}

/// The resources of `group_version` (none when it is not served), the request sent again while
/// it fails on the way.
async fn group_resources(client: &Client, group_version: &str) -> Result<Vec<String>, kube::Error> {
    let mut failures = 0;
    loop {
        match client.list_api_group_resources(group_version).await {
            Ok(list) => return Ok(list.resources.into_iter().map(|r| r.name).collect()),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Vec::new()),
            Err(e) if failed_on_the_way(&e) && failures + 1 < DISCOVERY_ATTEMPTS => {
                failures += 1;
                let delay = backoff(failures);
                tracing::warn!(error = %e, retry_in = ?delay, "discovering {group_version} failed; trying again");
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A failure that says nothing about the request: the connection, throttling, the server.
fn failed_on_the_way(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}

/// The first of list and watch that inpool may not do on `plural` (in `namespace`, or in every
/// namespace). A review that cannot be made (the API refuses it) is taken as allowed: the watch
/// then reports what is wrong, as before these checks.
async fn forbidden_verb(
    client: &Client,
    plural: &str,
    namespace: Option<&str>,
) -> Option<&'static str> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for verb in ["list", "watch"] {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(IPAM_GROUP.to_string()),
                    resource: Some(plural.to_string()),
                    verb: Some(verb.to_string()),
                    namespace: namespace.map(str::to_string),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        match reviews.create(&PostParams::default(), &review).await {
            Ok(done) if !done.status.as_ref().is_some_and(|s| s.allowed) => return Some(verb),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(resource = plural, verb, error = %e, "access review failed");
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ip_pool_kinds_are_always_served_the_prefix_kinds_when_found() {
        let none = ServedKinds::with_prefix_kinds(&[]);
        assert!(none.serves(PoolKind::InCluster) && none.serves(PoolKind::Global));
        assert!(!none.serves(PoolKind::InClusterPrefix) && !none.serves(PoolKind::GlobalPrefix));
        let one = ServedKinds::with_prefix_kinds(&[PoolKind::GlobalPrefix]);
        assert!(!one.serves(PoolKind::InClusterPrefix) && one.serves(PoolKind::GlobalPrefix));
        assert!(
            PoolKind::ALL
                .into_iter()
                .all(|k| ServedKinds::all().serves(k))
        );
    }

    #[test]
    fn the_warning_names_the_kind_and_what_to_install() {
        let text = warning(
            PoolKind::InClusterPrefix,
            "inclusterprefixpools",
            &Missing::Resource,
        );
        assert!(
            text.starts_with("InClusterPrefixPool is not served"),
            "{text}"
        );
        assert!(text.contains("CRD"), "{text}");
        let text = warning(
            PoolKind::GlobalPrefix,
            "globalinclusterprefixpools",
            &Missing::Forbidden("watch"),
        );
        assert!(
            text.starts_with("inpool may not watch globalinclusterprefixpools"),
            "{text}"
        );
        assert!(text.contains("ClusterRole"), "{text}");
    }
}
