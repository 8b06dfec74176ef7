//! The report: YAML (or JSON) in the manner of Gateway API's `ConformanceReport`, with each
//! check's result, evidence and timings, and JUnit XML for CI systems.

use std::collections::BTreeMap;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report as JunitReport, TestCase, TestCaseStatus, TestSuite};
use serde::Serialize;

use crate::config::Implementation;
use crate::profiles::{CheckSpec, Level, Profile};

pub const API_VERSION: &str = "conformance.inpool.dev/v1alpha1";
pub const KIND: &str = "IPAMConformanceReport";

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub date: String,
    /// The contract the checks come from.
    pub contract: Contract,
    pub implementation: Implementation,
    pub environment: BTreeMap<String, String>,
    pub pool: PoolUnderTest,
    pub profiles: Vec<ProfileReport>,
    pub summary: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Contract {
    pub name: &'static str,
    pub ipam_api_version: &'static str,
    pub suite: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolUnderTest {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    /// The parent the pools were carved from (`apiVersion` and kind), when they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub carved_from: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileReport {
    pub name: &'static str,
    /// `success`, `failure` or `skipped` (the provider does not support the profile).
    pub result: &'static str,
    pub statistics: Statistics,
    pub summary: String,
    pub duration_seconds: f64,
    pub checks: Vec<CheckReport>,
    /// What the suite could not clean up after the profile (objects left in the namespace).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cleanup: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct Statistics {
    #[serde(rename = "Passed")]
    pub passed: usize,
    #[serde(rename = "Failed")]
    pub failed: usize,
    #[serde(rename = "Skipped")]
    pub skipped: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    Fail,
    Skip,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    pub id: &'static str,
    pub title: &'static str,
    pub level: Level,
    pub source: Source,
    pub result: Outcome,
    /// Why it failed or was skipped, or what it established.
    pub message: String,
    pub duration_seconds: f64,
    /// Durations the check measured (seconds): how long the provider took to act.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub timings: BTreeMap<String, f64>,
    /// The objects the check saw when it decided, with a note on each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<Evidence>,
}

#[derive(Debug, Serialize)]
pub struct Source {
    pub text: &'static str,
    pub url: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct Evidence {
    pub note: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<serde_json::Value>,
}

impl CheckReport {
    pub fn new(spec: &'static CheckSpec) -> CheckReport {
        CheckReport {
            id: spec.id,
            title: spec.title,
            level: spec.level,
            source: Source {
                text: spec.source,
                url: spec.url,
            },
            result: Outcome::Skip,
            message: String::new(),
            duration_seconds: 0.0,
            timings: BTreeMap::new(),
            evidence: Vec::new(),
        }
    }
}

impl ProfileReport {
    pub fn new(profile: Profile, checks: Vec<CheckReport>, duration_seconds: f64) -> Self {
        let count = |o| checks.iter().filter(|c| c.result == o).count();
        let statistics = Statistics {
            passed: count(Outcome::Pass),
            failed: count(Outcome::Fail),
            skipped: count(Outcome::Skip),
        };
        let (result, summary) = if statistics.failed > 0 {
            (
                "failure",
                format!(
                    "{} of {} checks failed: {}.",
                    statistics.failed,
                    checks.len(),
                    checks
                        .iter()
                        .filter(|c| c.result == Outcome::Fail)
                        .map(|c| c.id)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        } else if statistics.passed == 0 {
            (
                "skipped",
                "The provider does not declare this profile.".to_string(),
            )
        } else {
            (
                "success",
                format!("All {} checks passed.", statistics.passed),
            )
        };
        ProfileReport {
            name: profile.name(),
            result,
            statistics,
            summary,
            duration_seconds: round(duration_seconds),
            checks,
            cleanup: Vec::new(),
        }
    }
}

impl Report {
    /// True when no check failed.
    pub fn passed(&self) -> bool {
        self.profiles.iter().all(|p| p.result != "failure")
    }

    /// True when no check failed and none was skipped.
    pub fn all_green(&self) -> bool {
        self.profiles.iter().all(|p| p.result == "success")
    }

    pub fn to_yaml(&self) -> String {
        serde_saphyr::to_string(self).unwrap_or_else(|e| format!("# report not serialisable: {e}"))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self)
            .unwrap_or_else(|e| format!("{{\"error\": \"report not serialisable: {e}\"}}"))
    }

    /// The failed checks, one line each, for a terminal or a test's panic message.
    pub fn failures(&self) -> Vec<String> {
        self.profiles
            .iter()
            .flat_map(|p| p.checks.iter())
            .filter(|c| c.result == Outcome::Fail)
            .map(|c| format!("{}: {}", c.id, c.message))
            .collect()
    }

    /// JUnit XML: one testsuite per profile, one testcase per check (classname the profile); a
    /// failure carries the message, and the check's title, source and evidence (as YAML) as its
    /// text. Written by `quick-junit`, which escapes and counts as the schema expects.
    pub fn to_junit(&self) -> String {
        let mut report = JunitReport::new("ipam-conformance");
        let timestamp = chrono::DateTime::parse_from_rfc3339(&self.date).ok();
        for profile in &self.profiles {
            let mut suite = TestSuite::new(profile.name);
            suite.set_time(Duration::from_secs_f64(profile.duration_seconds.max(0.0)));
            if let Some(timestamp) = timestamp {
                suite.set_timestamp(timestamp);
            }
            for check in &profile.checks {
                let status = match check.result {
                    Outcome::Pass => TestCaseStatus::success(),
                    Outcome::Skip => {
                        let mut status = TestCaseStatus::skipped();
                        status.set_message(check.message.as_str());
                        status
                    }
                    Outcome::Fail => {
                        let evidence = serde_saphyr::to_string(&check.evidence).unwrap_or_default();
                        let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                        status
                            .set_message(check.message.as_str())
                            .set_type(check.id)
                            .set_description(format!(
                                "{}\n\nsource: {}\n{}\n\nevidence:\n{evidence}",
                                check.title, check.source.text, check.source.url
                            ));
                        status
                    }
                };
                let mut case = TestCase::new(check.id, status);
                case.set_classname(profile.name)
                    .set_time(Duration::from_secs_f64(check.duration_seconds.max(0.0)));
                suite.add_test_case(case);
            }
            report.add_test_suite(suite);
        }
        report
            .to_string()
            .expect("a JUnit report of plain strings serialises")
    }
}

/// Seconds to the millisecond, so that reports stay readable.
pub fn round(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiles;

    #[test]
    fn junit_escapes_and_counts() {
        let mut failed = CheckReport::new(profiles::spec("core-realised"));
        failed.result = Outcome::Fail;
        failed.message = "no <addressRef> & \"nothing\"".into();
        failed.evidence.push(Evidence {
            note: "claim".into(),
            object: Some(serde_json::json!({"a": "<b>"})),
        });
        let mut passed = CheckReport::new(profiles::spec("core-address-name"));
        passed.result = Outcome::Pass;
        let report = Report {
            api_version: API_VERSION,
            kind: KIND,
            date: "d".into(),
            contract: Contract {
                name: "n",
                ipam_api_version: "v",
                suite: "s".into(),
            },
            implementation: Implementation::default(),
            environment: BTreeMap::new(),
            pool: PoolUnderTest {
                api_version: "a".into(),
                kind: "k".into(),
                namespace: "n".into(),
                carved_from: None,
            },
            profiles: vec![ProfileReport::new(Profile::Core, vec![failed, passed], 1.0)],
            summary: String::new(),
        };
        let xml = report.to_junit();
        assert!(
            xml.contains("no &lt;addressRef&gt; &amp; &quot;nothing&quot;"),
            "{xml}"
        );
        assert!(xml.contains("&lt;b&gt;"), "{xml}");
        let read = JunitReport::deserialize_from_str(&xml).expect("valid JUnit XML");
        assert_eq!(
            (read.tests, read.failures, read.skipped),
            (2, 1, 0),
            "{xml}"
        );
        let case = &read.test_suites[0].test_cases[0];
        assert_eq!(case.name.as_str(), "core-realised");
        match &case.status {
            TestCaseStatus::NonSuccess {
                kind: NonSuccessKind::Failure,
                message,
                description,
                ..
            } => {
                assert_eq!(
                    message.as_ref().map(|m| m.as_str()),
                    Some("no <addressRef> & \"nothing\"")
                );
                assert!(
                    description
                        .as_ref()
                        .is_some_and(|d| d.as_str().contains("<b>")),
                    "the evidence is the failure's text"
                );
            }
            other => panic!("not a failure: {other:?}"),
        }
        assert!(!report.passed());
        assert_eq!(report.profiles[0].result, "failure");
        assert!(report.to_yaml().contains("kind: IPAMConformanceReport"));
    }
}
