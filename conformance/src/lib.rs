//! A conformance suite for the Cluster API IPAM contract that any IPAM provider can run.
//!
//! It talks to a live cluster only through the API: claims, addresses and Clusters are CAPI's
//! (`ipam.cluster.x-k8s.io/v1beta2`, `cluster.x-k8s.io/v1beta2`), and the provider's pools are
//! dynamic objects rendered from the template its [`ProviderConfig`] supplies, so any pool CRD
//! works. Checks are grouped in [`Profile`]s; each names the contract text it tests
//! ([`profiles::CHECKS`]). The result is a [`Report`]: YAML or JSON in the manner of Gateway
//! API's conformance reports, with evidence and timings per check, and JUnit XML.
//!
//! The provider must be running against the cluster; the suite creates its objects in the
//! configured namespace and deletes them when each profile ends.

pub mod checks;
pub mod config;
pub mod harness;
pub mod profiles;
pub mod report;

use std::collections::BTreeMap;
use std::time::Instant;

pub use config::ProviderConfig;
use kube::Client;
pub use profiles::Profile;
pub use report::Report;

use report::{CheckReport, Outcome, ProfileReport};

/// Runs every profile against the cluster `client` reaches and returns the report. A profile
/// the provider does not declare is skipped; an error means the suite could not start (the pool
/// kind is not served, say), never that a check failed.
pub async fn run(client: Client, config: ProviderConfig) -> anyhow::Result<Report> {
    let version = client.apiserver_version().await?;
    let mut environment =
        BTreeMap::from([("kubernetesVersion".to_string(), version.git_version.clone())]);
    environment.extend(config.environment.clone());
    let pool_api_version = config.pool_api_version();
    let suite = harness::Suite::new(client, config).await?;
    let mut profiles = Vec::new();
    for profile in Profile::ALL {
        let started = Instant::now();
        if !suite.config.profiles.contains(&profile) {
            let checks = profile
                .checks()
                .map(|spec| {
                    let mut check = CheckReport::new(spec);
                    check.result = Outcome::Skip;
                    check.message = format!(
                        "the provider config does not list profile {}",
                        profile.name()
                    );
                    check
                })
                .collect();
            profiles.push(ProfileReport::new(profile, checks, 0.0));
            continue;
        }
        let scenario = suite.scenario(profile);
        let checks = match profile {
            Profile::Core => checks::core::run(&scenario).await,
            Profile::ReadyCondition => checks::ready::run(&scenario).await,
            Profile::Lifecycle => checks::lifecycle::run(&scenario).await,
            Profile::Move => checks::moves::run(&scenario).await,
            Profile::Concurrency => checks::concurrency::run(&scenario).await,
        };
        let cleanup = scenario.cleanup().await;
        let mut report = ProfileReport::new(profile, checks, started.elapsed().as_secs_f64());
        report.cleanup = cleanup;
        profiles.push(report);
    }
    let failed: Vec<&str> = profiles
        .iter()
        .filter(|p| p.result == "failure")
        .map(|p| p.name)
        .collect();
    let skipped: Vec<&str> = profiles
        .iter()
        .filter(|p| p.result == "skipped")
        .map(|p| p.name)
        .collect();
    let summary = match (failed.is_empty(), skipped.is_empty()) {
        (true, true) => "Every profile succeeded.".to_string(),
        (true, false) => format!(
            "Every declared profile succeeded; not declared: {}.",
            skipped.join(", ")
        ),
        (false, _) => format!("Failed profiles: {}.", failed.join(", ")),
    };
    Ok(Report {
        api_version: report::API_VERSION,
        kind: report::KIND,
        date: now_rfc3339(),
        contract: report::Contract {
            name: "Cluster API IPAM contract (contract v1beta2) with the claim Ready condition of CAPI #8424",
            ipam_api_version: harness::IPAM_VERSION,
            suite: format!("inpool-conformance {}", env!("CARGO_PKG_VERSION")),
        },
        implementation: suite.config.implementation.clone(),
        environment,
        pool: report::PoolUnderTest {
            api_version: pool_api_version,
            kind: suite.config.pool.kind.clone(),
            namespace: suite.config.namespace.clone(),
            carved_from: suite
                .config
                .pool
                .parent
                .as_ref()
                .map(|p| format!("{} {}", suite.config.parent_api_version(), p.kind)),
        },
        profiles,
        summary,
    })
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
