//! API Priority and Fairness, as a busy management cluster applies it: a `FlowSchema` puts
//! inpool's ServiceAccount in a `PriorityLevelConfiguration` of its own with one nominal share
//! (of the API server's 600 seats, a seat or two) that rejects what does not fit, so its burst is
//! answered `429` by the API server itself. inpool, as its ServiceAccount, realises a burst of 200
//! claims all the same, with no retry storm: its writes that succeed stay at one of each kind per
//! claim (finalizer, reservation, `IPAddress`, status, Event), the `429`s it was answered stay a
//! small multiple of the claims, and its `rest_client_requests_total{code="429"}` counts exactly
//! the rejections the API server counts for that priority level.

use std::time::Duration;

use inpool::api::{IPAddressClaim, InClusterIPPool};
use inpool_testenv::{common, support};
use kube::api::Api;

use common::{
    Inpool, apiserver_metrics, apply_priority_level_for_inpool, claim, claim_states, create,
    delete_priority_level, ensure_applied, one_inpool_test_at_a_time, pool, priority_level_counts,
    rest_client_requests, service_account_kubeconfig, wait_explained,
};

const CLAIMS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_throttled_by_priority_and_fairness_is_realised_without_a_retry_storm() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let env = support::env();
    let (client, ns) = env.namespace().await;
    let level = "inpool-test-small";
    apply_priority_level_for_inpool(&client, level, 1)
        .await
        .expect("the flow control objects");

    let kubeconfig = service_account_kubeconfig(env.kubeconfig());
    let inpool = Inpool::start(env!("CARGO_BIN_EXE_inpool"), "inpool", &kubeconfig, &[]);
    let pools: Api<InClusterIPPool> = Api::namespaced(client.clone(), &ns);
    create(&pools, &pool("pool", &["10.81.0.10-10.81.0.250"], 24, None)).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &ns);
    futures::future::join_all((0..CLAIMS).map(|i| {
        let claims = claims.clone();
        async move { create(&claims, &claim(&format!("c-{i:03}"), "pool")).await }
    }))
    .await;
    wait_explained(
        "every claim of the throttled burst Ready",
        Duration::from_secs(180),
        || async {
            let states = claim_states(&claims).await;
            let ready = states
                .values()
                .filter(|(status, _)| status == "True")
                .count();
            (ready == CLAIMS).then_some(())
        },
        || inpool.logs(),
    )
    .await;
    let metrics = inpool.metrics().await.expect("inpool's /metrics");
    let server = apiserver_metrics(&client)
        .await
        .expect("the API server's /metrics");
    let (dispatched, rejected) = priority_level_counts(&server, level);
    eprintln!("the API server: {dispatched} dispatched, {rejected} rejected at {level}");
    let throttled = rest_client_requests(&metrics, &["code=\"429\""]);
    let created = rest_client_requests(&metrics, &["code=\"201\"", "method=\"POST\""]);
    let patched = rest_client_requests(&metrics, &["code=\"200\"", "method=\"PATCH\""]);
    eprintln!(
        "{CLAIMS} claims: {throttled} requests answered 429, {created} creates and {patched} patches that succeeded"
    );
    delete_priority_level(&client, level).await;
    drop(inpool);
    assert!(
        rejected > 0.0,
        "the API server rejected none of inpool's requests at {level}"
    );
    assert_eq!(
        throttled, rejected,
        "inpool's rest_client_requests_total{{code=\"429\"}} counts each rejection"
    );
    // Reservation, IPAddress and Event creates; finalizer and status patches (server-side apply
    // is a PATCH): each once per claim, with 2% for a retry after a lost answer.
    let claims = CLAIMS as f64;
    assert!(
        (3.0 * claims..=3.0 * claims * 1.02).contains(&created),
        "{created} creates for {CLAIMS} claims, expected 3 each"
    );
    assert!(
        patched <= 2.0 * claims * 1.02 + 20.0,
        "{patched} patches for {CLAIMS} claims, expected 2 each and the pool's status"
    );
    assert!(
        throttled <= 10.0 * claims,
        "a retry storm: {throttled} requests answered 429 for {CLAIMS} claims"
    );
}
