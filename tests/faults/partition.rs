//! A leader cut off from the API server, as a network partition cuts it off: two `inpool`
//! processes under leader election, the leader talking to the API server through the fault
//! proxy, the standby directly. Mid-burst the proxy blackholes the leader: every exchange already
//! open (its watches, a request in flight) is stalled for good and every new request is held, so
//! nothing the leader sends is answered and nothing of what it sends from then on reaches the API
//! server until the partition heals. The connections stay open, as they do when a network drops
//! packets instead of refusing them.
//!
//! What must hold (docs/reliability.md, "A partitioned leader"):
//! - the leader stops its controllers by its renew deadline (`renewTime + D` of its last renewal
//!   the API server holds, `D` = 5 s for a 6 s Lease), on its own clock, without an answer;
//! - the standby takes over only once the Lease has expired (`renewTime + d`), so the two never
//!   believe they lead at the same time: the window is `D - d` (negative: a gap, 1 s here);
//! - the old leader sends no write after its deadline (the proxy logs every request it receives,
//!   held or not; the Lease's own requests aside, which the API server refuses once another holds
//!   it);
//! - once the partition heals, what the old leader sent before its deadline and the network held
//!   reaches the API server late; the reservations make it harmless: no address is held twice,
//!   and every claim is realised (every invariant of `assert_invariants`).
//!
//! The check of "no write after the deadline" is shown to catch one: the test sends a write of
//! its own through the proxy after the heal and the same check must name it.

use std::time::{Duration, Instant, SystemTime};

use inpool_testenv::common::{Inpool, assert_invariants, create, pool, wait_for};
use inpool_testenv::fault_proxy::{Fault, Match, Rule, Seen};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{Scenario, client, create_claims_in_background, proxy_for, wait_realised};

/// The Lease's duration `d`; inpool derives its renew deadline `D = d - max(1 s, d/3)/2` = 5 s
/// and renews every `d - max(1 s, d/3)` = 4 s (src/leader.rs).
const LEASE: Duration = Duration::from_secs(6);
const RENEW_DEADLINE: Duration = Duration::from_secs(5);
/// How late the leader's stop may be seen: its watchdog's poll of the Lease (250 ms) and the
/// test's poll of its `/metrics` (100 ms), with room for a loaded machine.
const SEEN_STOPPED_WITHIN: Duration = Duration::from_secs(1);
/// Claims in the burst, and the pool's addresses: every claim gets one.
const CLAIMS: usize = 40;

/// `inpool` for `ns`, under leader election on the Lease `lease` in `ns`, as `identity`.
fn start_elected(kubeconfig: &std::path::Path, ns: &str, lease: &str, identity: &str) -> Inpool {
    Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        identity,
        kubeconfig,
        &[
            &format!("--namespace={ns}"),
            "--audit-interval=2s",
            "--stray-reservation-age=5s",
            "--leader-elect",
            &format!("--leader-election-namespace={ns}"),
            &format!("--leader-election-lease-name={lease}"),
            &format!("--leader-election-lease-duration={}s", LEASE.as_secs()),
            &format!("--identity={identity}"),
        ],
    )
}

/// The Lease's holder and its last renewal.
async fn hold(leases: &Api<Lease>, lease: &str) -> Option<(String, SystemTime)> {
    let spec = leases.get_opt(lease).await.ok()??.spec?;
    let renewed = spec.renew_time?.0;
    let renewed = SystemTime::UNIX_EPOCH
        + Duration::from_micros(u64::try_from(renewed.as_microsecond()).ok()?);
    Some((spec.holder_identity?, renewed))
}

/// The instant of this process's clock at `time` of the system clock.
fn instant_of(time: SystemTime) -> Instant {
    let (now, system_now) = (Instant::now(), SystemTime::now());
    match system_now.duration_since(time) {
        Ok(ago) => now - ago,
        Err(ahead) => now + ahead.duration(),
    }
}

/// `a - b` in seconds, negative when `a` is earlier.
fn signed_seconds(a: Instant, b: Instant) -> f64 {
    match a.checked_duration_since(b) {
        Some(after) => after.as_secs_f64(),
        None => -(b - a).as_secs_f64(),
    }
}

/// How long, within `window`, both processes' `inpool_leader` gauges said 1 at once (each read
/// every 100 ms).
async fn both_leading_within(a: &Inpool, b: &Inpool, window: Duration) -> Duration {
    let end = Instant::now() + window;
    let mut both = Duration::ZERO;
    while Instant::now() < end {
        let started = Instant::now();
        if a.leader().await == Some(true) && b.leader().await == Some(true) {
            both += Duration::from_millis(100);
        }
        tokio::time::sleep_until((started + Duration::from_millis(100)).into()).await;
    }
    both
}

/// The writes the proxy received after `deadline`, but for the Lease's: what a leader must not
/// send once its hold may have expired.
fn writes_after(requests: &[Seen], deadline: Instant) -> Vec<String> {
    requests
        .iter()
        .filter(|s| s.is_write() && s.resource != "leases" && s.at > deadline)
        .map(|s| {
            format!(
                "{} {} ({:?} after the deadline)",
                s.method,
                s.path,
                s.at - deadline
            )
        })
        .collect()
}

#[tokio::test]
async fn a_partitioned_leader_stops_by_its_renew_deadline_and_no_address_is_held_twice() {
    let mut scenario = Scenario::start().await;
    let ns = scenario.ns.clone();
    create(
        &scenario.pools,
        &pool("pool", &["10.27.0.1-10.27.0.40"], 24, None),
    )
    .await;
    let lease = "partitioned";
    let leases: Api<Lease> = Api::namespaced(scenario.client.clone(), &ns);
    let proxy = proxy_for(&scenario.kubeconfig).await;

    let mut leader = start_elected(proxy.kubeconfig(), &ns, lease, "behind-the-proxy");
    wait_for("the first to lead", Duration::from_secs(30), || async {
        leader.leader().await.filter(|l| *l)
    })
    .await;
    let mut standby = start_elected(&scenario.kubeconfig, &ns, lease, "direct");
    wait_for(
        "the second to be a standby",
        Duration::from_secs(30),
        || async { standby.leader().await.filter(|l| !*l) },
    )
    .await;

    // The partition, mid-burst.
    let burst = create_claims_in_background(&scenario.claims, "pool", "c", 0..CLAIMS);
    tokio::time::sleep(scenario.moments.millis(300, 1000)).await;
    let held = proxy.set(Rule::new(Match::all(), Fault::Blackhole));
    let stalled = proxy.stall(&Match::all());
    let partitioned_at = Instant::now();
    // A renewal in flight as the partition began may still land; none can after that.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (holder, renewed) = hold(&leases, lease).await.expect("the Lease");
    assert_eq!(holder, "behind-the-proxy", "the leader held the Lease");
    let deadline = instant_of(renewed + RENEW_DEADLINE);
    let expiry = instant_of(renewed + LEASE);

    let stopped = wait_for(
        "the partitioned leader to stop its controllers",
        LEASE + Duration::from_secs(5),
        || async {
            leader
                .leader()
                .await
                .filter(|l| !*l)
                .map(|_| Instant::now())
        },
    )
    .await;
    let took_over = wait_for(
        "the standby to take over",
        LEASE + Duration::from_secs(10),
        || async {
            standby
                .leader()
                .await
                .filter(|l| *l)
                .map(|_| Instant::now())
        },
    )
    .await;
    let (holder, _) = hold(&leases, lease).await.expect("the Lease");
    assert_eq!(holder, "direct", "the standby holds the Lease");
    assert!(
        stopped <= deadline + SEEN_STOPPED_WITHIN,
        "the partitioned leader stopped {:?} after its renew deadline",
        stopped - deadline
    );
    assert!(
        took_over >= expiry,
        "the standby took over {:?} before the Lease expired",
        expiry - took_over
    );
    assert!(
        stopped < took_over,
        "both led at once for {:?}",
        stopped - took_over
    );
    let late_writes = writes_after(&proxy.requests(), deadline);
    assert!(
        late_writes.is_empty(),
        "the partitioned leader sent writes after its renew deadline: {late_writes:#?}"
    );

    // The partition heals a Lease duration after it began: what was held goes upstream.
    let heal_at = partitioned_at + LEASE + LEASE;
    tokio::time::sleep_until(heal_at.into()).await;
    let delivered_late = proxy.held();
    proxy.remove(held);
    // What was held includes the old leader's last Lease renewal, a patch of `renewTime` with no
    // precondition: watch both for two Lease durations after the heal, as they settle.
    let both_led = both_leading_within(&leader, &standby, LEASE + LEASE).await;
    burst.await.unwrap();
    wait_realised(&scenario.claims, CLAIMS, 0).await;
    // The old leader, a standby now, runs no audit: only the leader's verdict counts.
    leader.assert_healthy();
    assert_invariants(&scenario.client, &ns, &mut [&mut standby]).await;

    // The check above catches a write after the deadline: one of the test's own, through the
    // proxy, after the heal.
    let through_proxy = client(proxy.kubeconfig()).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(through_proxy, &ns);
    let planted = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "written-after-the-deadline"}});
    config_maps
        .patch(
            "written-after-the-deadline",
            &PatchParams::apply("test"),
            &Patch::Apply(&planted),
        )
        .await
        .expect("a write through the healed proxy");
    let caught = writes_after(&proxy.requests(), deadline);
    assert!(
        caught
            .iter()
            .any(|w| w.contains("configmaps/written-after-the-deadline")),
        "the check names a write sent after the deadline: {caught:#?}"
    );

    let late: Vec<String> = proxy
        .requests()
        .iter()
        .filter(|s| matches!(s.fault, Some(Fault::Blackhole)) && s.upstream_status.is_some())
        .map(|s| format!("{} {} → {:?}", s.method, s.path, s.upstream_status))
        .collect();
    eprintln!("FAULTS partition: delivered at the heal: {late:?}");
    eprintln!(
        "FAULTS partition: {stalled} exchanges stalled, {delivered_late} requests held and \
         delivered at the heal; leader stopped {:.2} s after the partition (seen {:+.2} s from its \
         renew deadline), standby led {:.2} s after the partition ({:.2} s after the Lease \
         expired): {:.2} s with no leader; after the heal both led for {both_led:?}",
        (stopped - partitioned_at).as_secs_f64(),
        signed_seconds(stopped, deadline),
        (took_over - partitioned_at).as_secs_f64(),
        took_over.saturating_duration_since(expiry).as_secs_f64(),
        (took_over - stopped).as_secs_f64(),
    );
    assert_eq!(
        both_led,
        Duration::ZERO,
        "after the heal both believed they led for {both_led:?}"
    );
}
