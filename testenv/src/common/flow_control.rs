//! API Priority and Fairness as a busy management cluster applies it to inpool: a `FlowSchema`
//! that puts inpool's ServiceAccount in a `PriorityLevelConfiguration` of its own with a few
//! nominal shares, none lent, that rejects what does not fit, so that the API server itself
//! answers inpool's surplus `429`. Shared by `tests/process/throttled.rs` and the scale harness's
//! `--priority-level-shares`.

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PatchParams};
use serde_json::json;

use super::{SERVICE_ACCOUNT, SYSTEM_NAMESPACE, apply_objects};

/// The flow control kinds, by kind and plural.
const KINDS: [(&str, &str); 2] = [
    ("PriorityLevelConfiguration", "prioritylevelconfigurations"),
    ("FlowSchema", "flowschemas"),
];

/// Applies a priority level `level` of `shares` nominal concurrency shares, and a flow schema of
/// the same name that puts every request of inpool's ServiceAccount in it.
pub async fn apply_priority_level_for_inpool(
    client: &Client,
    level: &str,
    shares: u32,
) -> Result<(), String> {
    let objects = [
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration", "metadata": {"name": level},
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": shares,
                "lendablePercent": 0,
                "limitResponse": {"type": "Reject"}}}}),
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": level},
            "spec": {"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": 100,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                        "namespace": SYSTEM_NAMESPACE, "name": SERVICE_ACCOUNT}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                        "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}]}]}}),
    ];
    apply_objects(client, &objects, &PatchParams::apply("inpool-test")).await
}

/// Deletes what [`apply_priority_level_for_inpool`] applied (whatever is still there).
pub async fn delete_priority_level(client: &Client, level: &str) {
    for (kind, plural) in KINDS {
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource {
                group: "flowcontrol.apiserver.k8s.io".into(),
                version: "v1".into(),
                api_version: "flowcontrol.apiserver.k8s.io/v1".into(),
                kind: kind.into(),
                plural: plural.into(),
            },
        );
        let _ = api.delete(level, &Default::default()).await;
    }
}

/// What the API server counts for priority level `level` on its `/metrics` page `page`:
/// requests dispatched and requests rejected (answered `429`).
pub fn priority_level_counts(page: &str, level: &str) -> (f64, f64) {
    let label = format!("priority_level=\"{level}\"");
    let sum = |metric: &str| {
        page.lines()
            .filter(|l| l.starts_with(metric) && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    (
        sum("apiserver_flowcontrol_dispatched_requests_total{"),
        sum("apiserver_flowcontrol_rejected_requests_total{"),
    )
}

/// The API server's own `/metrics` page.
pub async fn apiserver_metrics(client: &Client) -> Result<String, kube::Error> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a request");
    client.request_text(request).await
}

/// The sum of a client's `rest_client_requests_total` samples whose labels contain every one of
/// `labels`, on its `/metrics` page `page`.
pub fn rest_client_requests(page: &str, labels: &[&str]) -> f64 {
    page.lines()
        .filter(|l| l.starts_with("rest_client_requests_total{"))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
