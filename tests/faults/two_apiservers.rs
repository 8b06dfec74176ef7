//! Two API servers on one etcd behind a TCP balancer (`inpool_testenv::ha`), as a production
//! management cluster has several control-plane nodes behind a load balancer: inpool talks to the
//! balancer, which hands each of its connections, round robin, to an API server its health check
//! finds ready. Each API server has its own watch cache, so lists and watches through the two can
//! disagree. Under a burst (30 claims on 25 addresses, one every 40 ms), at a random moment:
//!
//! - one API server stopped, then started again 5 s later;
//! - one API server frozen (SIGSTOP) for 20 s while the other serves: what inpool has open on
//!   the frozen one (watches, requests) hangs until inpool's own timeouts give it up, while its
//!   new connections reach the other;
//! - every connection cut three times, so that inpool's watches resume on whichever API server
//!   the balancer hands them to, from a resource version the other one served.
//!
//! After each: every invariant of `assert_invariants` (no address twice, no `Ready=True` without
//! its `IPAddress`, no drift found by the audit), and every claim settled within [`SETTLED_WITHIN`]
//! of the fault's end.

use std::time::{Duration, Instant};

use inpool::api::IPAddressClaim;
use inpool_testenv::common::{assert_invariants, create, pool};
use inpool_testenv::ha::{Balancer, SecondApiServer};
use kube::Api;

use super::{Scenario, client, create_claims_in_background, start_provider, wait_realised};

/// How soon after a fault ends every claim must be settled and every invariant hold: above
/// inpool's own timeouts for a connection that answers nothing (a watch 35 s, a request 45 s;
/// docs/reliability.md), which a frozen API server can hold until it is thawed.
const SETTLED_WITHIN: Duration = Duration::from_secs(60);

/// What a fault may do to the pair.
enum Fault {
    StopAndStart,
    Freeze,
    CutConnections,
}

/// Runs the burst through a balancer over the control plane's API server and a second one,
/// injects `fault` mid-burst, and checks the outcome; prints what happened.
async fn burst_over_two_api_servers(range: &str, fault: Fault, name: &str) {
    let mut scenario = Scenario::start().await;
    create(&scenario.pools, &pool("pool", &[range], 24, None)).await;
    let mut second = SecondApiServer::start(super::supervisor_pid(), &scenario.kubeconfig)
        .await
        .expect("a second API server starts");
    let balancer = Balancer::start(
        &scenario.kubeconfig,
        &[super::apiserver_port(), second.port],
    )
    .await
    .expect("the balancer starts");
    assert_eq!(balancer.healthy(), [true, true], "both API servers ready");
    let mut provider = start_provider(balancer.kubeconfig(), &scenario.ns, "p");
    let burst = create_claims_in_background(&scenario.claims, "pool", "c", 0..30);
    tokio::time::sleep(scenario.moments.millis(300, 1500)).await;
    let mut cut = 0;
    match fault {
        Fault::StopAndStart => {
            second.stop();
            tokio::time::sleep(Duration::from_secs(5)).await;
            second
                .start_again(&scenario.kubeconfig)
                .await
                .expect("the second API server starts again");
        }
        Fault::Freeze => {
            second.signal("STOP");
            tokio::time::sleep(Duration::from_secs(20)).await;
            second.signal("CONT");
        }
        Fault::CutConnections => {
            for _ in 0..3 {
                cut += balancer.cut(None);
                tokio::time::sleep(scenario.moments.millis(200, 900)).await;
            }
        }
    }
    let fault_ended = Instant::now();
    burst.await.unwrap();
    let client = client(&scenario.kubeconfig).await;
    let claims: Api<IPAddressClaim> = Api::namespaced(client.clone(), &scenario.ns);
    wait_realised(&claims, 25, 5).await;
    let settled =
        assert_invariants(&client, &scenario.ns, &mut [&mut provider]).await - fault_ended;
    println!(
        "FAULTS two-apiservers-{name}: 30 claims on 25 addresses through a balancer over two API \
         servers; every claim settled and every invariant held {:.1}s after the fault ended; \
         connections handed to each API server {:?}, {cut} cut",
        settled.as_secs_f64(),
        balancer.handed()
    );
    assert!(
        settled <= SETTLED_WITHIN,
        "settled only {settled:?} after the fault ended"
    );
    assert!(
        balancer.handed().iter().all(|&n| n > 0),
        "the balancer handed connections to both API servers: {:?}",
        balancer.handed()
    );
}

#[tokio::test]
async fn one_of_two_api_servers_stopped_and_started_mid_burst_loses_nothing() {
    burst_over_two_api_servers("10.29.0.1-10.29.0.25", Fault::StopAndStart, "stopped").await;
}

#[tokio::test]
async fn one_of_two_api_servers_frozen_mid_burst_loses_nothing() {
    burst_over_two_api_servers("10.30.0.1-10.30.0.25", Fault::Freeze, "frozen").await;
}

#[tokio::test]
async fn watches_moved_between_two_api_servers_mid_burst_lose_nothing() {
    burst_over_two_api_servers("10.31.0.1-10.31.0.25", Fault::CutConnections, "moved").await;
}
