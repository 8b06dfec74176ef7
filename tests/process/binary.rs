//! The `inpool` binary as a process on the test control plane, as its ServiceAccount (the
//! RBAC of `config/rbac`, applied from the rendered components): it serves `/healthz`,
//! `/readyz` and OpenMetrics `/metrics` and exits 0 on SIGTERM and SIGINT, and 1 with a clear
//! error on an unusable kubeconfig; with leader election, exactly one of two instances leads and
//! the other takes over within the lease duration, or once the lease expires after a SIGKILL;
//! and the work run under [`inpool::leader::run_as_leader`] never runs in two instances at once
//! and stops when the lease is lost.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inpool_testenv::{common, support};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use inpool::cli::LeaseSettings;
use inpool::leader::run_as_leader;
use inpool::telemetry::HealthState;

use common::{
    Inpool, SYSTEM_NAMESPACE, assert_openmetrics, ensure_applied, one_inpool_test_at_a_time,
    service_account_kubeconfig, unique, wait_for,
};

/// The shared control plane's kubeconfig, as inpool's ServiceAccount.
fn kubeconfig() -> std::path::PathBuf {
    service_account_kubeconfig(support::env().kubeconfig())
}

/// inpool as its ServiceAccount, under leader election on `lease` in `inpool-system` as
/// `identity`.
fn start_elected(identity: &str, lease: &str, lease_seconds: u64) -> Inpool {
    Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        identity,
        &kubeconfig(),
        &[
            "--leader-elect",
            &format!("--leader-election-namespace={SYSTEM_NAMESPACE}"),
            &format!("--leader-election-lease-name={lease}"),
            &format!("--leader-election-lease-duration={lease_seconds}s"),
            &format!("--identity={identity}"),
        ],
    )
}

/// The lease's holder.
async fn lease_holder(leases: &Api<Lease>, lease: &str) -> Option<String> {
    leases
        .get(lease)
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity
}

#[tokio::test]
async fn the_binary_serves_health_and_metrics_and_exits_0_on_sigterm() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let lease = unique("serve");
    let mut inpool = Inpool::start(
        env!("CARGO_BIN_EXE_inpool"),
        "serve",
        &kubeconfig(),
        &[
            "--leader-elect",
            "--leader-election-namespace",
            SYSTEM_NAMESPACE,
            "--leader-election-lease-name",
            &lease,
            "--leader-election-lease-duration=6s",
        ],
    );

    let health = inpool.get("/healthz").await.expect("/healthz answers");
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));

    // It becomes leader (as the ServiceAccount: the lease RBAC is enough).
    wait_for("inpool to lead", Duration::from_secs(30), || async {
        inpool.leader().await.filter(|l| *l)
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(support::env().client().await, SYSTEM_NAMESPACE);
    let holder = lease_holder(&leases, &lease).await;
    assert!(holder.is_some_and(|h| !h.is_empty()));

    let metrics = inpool.get("/metrics").await.expect("/metrics answers");
    assert_openmetrics(&metrics);
    assert!(
        metrics.body.contains("# TYPE inpool_leader gauge"),
        "{}",
        metrics.body
    );

    // Ready once the controllers' caches synced: every list and watch they need is allowed
    // to the ServiceAccount.
    inpool.wait_ready(Duration::from_secs(30)).await;
    assert!(
        !inpool.logs().to_lowercase().contains("forbidden"),
        "an API request was forbidden to the ServiceAccount:\n{}",
        inpool.logs()
    );

    let code = inpool.terminate();
    assert_eq!(code, Some(0), "exit status; logs:\n{}", inpool.logs());
    let logs = inpool.logs();
    assert!(logs.contains("shutdown requested"), "{logs}");
    assert!(logs.contains("leader election lease released"), "{logs}");
    // Released: nobody holds the lease any more.
    let spec = leases.get(&lease).await.unwrap().spec.unwrap_or_default();
    assert_eq!(spec.holder_identity, None);
}

#[tokio::test]
async fn without_leader_election_it_leads_at_once_and_exits_0_on_sigint() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    let mut inpool = Inpool::start(env!("CARGO_BIN_EXE_inpool"), "sigint", &kubeconfig(), &[]);
    wait_for("inpool_leader 1", Duration::from_secs(10), || async {
        inpool.leader().await.filter(|l| *l)
    })
    .await;
    inpool.wait_ready(Duration::from_secs(30)).await;
    let code = inpool.stop_with("INT");
    assert_eq!(
        code,
        Some(0),
        "exit status after SIGINT (None: ignored); logs:\n{}",
        inpool.logs()
    );
    assert!(
        inpool.logs().contains("\"signal\":\"SIGINT\""),
        "{}",
        inpool.logs()
    );
}

#[test]
fn an_unusable_kubeconfig_is_a_clear_error_and_exit_1() {
    let output = Command::new(env!("CARGO_BIN_EXE_inpool"))
        .args([
            "--kubeconfig=/nonexistent/kubeconfig",
            "--diagnostics-address=127.0.0.1:0",
            "--health-bind-address=127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run inpool");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
}

/// `inpool ARGS` with an unusable kubeconfig: its exit code and log (JSON lines). The servers start
/// before the API client, so their set-up is done and logged by then.
fn run_without_cluster(args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_inpool"))
        .args(["--kubeconfig=/nonexistent/kubeconfig", "--log-format=json"])
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("INPOOL_DIAGNOSTICS_CERT_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("run inpool");
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), log)
}

#[test]
fn start_up_errors_are_clear_and_flags_without_effect_are_warned_about() {
    let (code, log) = run_without_cluster(&[
        "--diagnostics-address=127.0.0.1:0",
        "--health-bind-address=127.0.0.1:0",
        "--diagnostics-cert-dir=/nonexistent/certs",
    ]);
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("/nonexistent/certs/tls.crt"), "{log}");
    assert!(log.contains("--diagnostics-cert-dir"), "{log}");

    let (code, log) = run_without_cluster(&[
        "--diagnostics-address=127.0.0.1:18443",
        "--health-bind-address=127.0.0.1:18443",
    ]);
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("need two ports"), "{log}");

    // Secure by default: HTTPS /metrics, plain health endpoints.
    let (_, log) = run_without_cluster(&[
        "--diagnostics-address=127.0.0.1:0",
        "--health-bind-address=127.0.0.1:0",
    ]);
    assert!(
        log.contains("scheme\":\"https\",\"serves\":\"/metrics\""),
        "{log}"
    );
    assert!(
        log.contains("scheme\":\"http\",\"serves\":\"/healthz, /readyz\""),
        "{log}"
    );

    // The deprecated flag: a warning, and plain /metrics where it says (with the health paths
    // when the addresses are equal), beside the HTTPS diagnostics server.
    let (_, log) = run_without_cluster(&[
        "--metrics-bind-addr=127.0.0.1:0",
        "--health-bind-address=127.0.0.1:0",
        "--diagnostics-address=127.0.0.1:0",
    ]);
    assert!(
        log.contains("--metrics-bind-address=127.0.0.1:0 is deprecated"),
        "{log}"
    );
    assert!(
        log.contains("scheme\":\"http\",\"serves\":\"/metrics, /healthz, /readyz\""),
        "{log}"
    );
    assert!(
        log.contains("scheme\":\"https\",\"serves\":\"/metrics\""),
        "{log}"
    );

    // The flags Cluster API's tooling writes that inpool cannot honour: accepted, one warning
    // each, and the process goes on to connect.
    let (code, log) = run_without_cluster(&[
        "--diagnostics-address=127.0.0.1:0",
        "--health-probe-bind-address=127.0.0.1:0",
        "--insecure-diagnostics=false",
        "--leader-elect=false",
        "--webhook-port=9443",
        "--feature-gates=MachinePool=true",
    ]);
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("/nonexistent/kubeconfig"), "{log}");
    for warning in [
        "--webhook-port=9443 has no effect",
        "--feature-gates MachinePool=true has no effect",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains("\"level\":\"WARN\"") && l.contains(warning)),
            "{warning}: {log}"
        );
    }

    // Text logs into a pipe carry no colour codes (the last --log-format wins).
    let (_, log) = run_without_cluster(&[
        "--log-format=text",
        "--diagnostics-address=127.0.0.1:0",
        "--health-bind-address=127.0.0.1:0",
    ]);
    assert!(log.contains("starting inpool"), "{log}");
    assert!(!log.contains('\u{1b}'), "colour codes in a pipe: {log:?}");

    // A flag nobody knows stops the process before it does anything, naming the flag.
    let (code, log) = run_without_cluster(&["--made-up-flag=true"]);
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("--made-up-flag"), "{log}");
}

#[tokio::test]
async fn of_two_instances_one_leads_and_the_other_takes_over_within_the_lease_duration() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    const LEASE_SECONDS: u64 = 6;
    let lease = unique("failover");
    let mut a = start_elected("inpool-a", &lease, LEASE_SECONDS);
    let mut b = start_elected("inpool-b", &lease, LEASE_SECONDS);
    let leases: Api<Lease> = Api::namespaced(support::env().client().await, SYSTEM_NAMESPACE);

    // Exactly one leads, and it is the lease's holder; it stays so for over a lease duration.
    let first = wait_for("one instance to lead", Duration::from_secs(30), || async {
        match (a.leader().await, b.leader().await) {
            (Some(true), Some(false)) => Some("inpool-a"),
            (Some(false), Some(true)) => Some("inpool-b"),
            (Some(true), Some(true)) => panic!("both instances lead"),
            _ => None,
        }
    })
    .await;
    let observe_until = Instant::now() + Duration::from_secs(LEASE_SECONDS + 2);
    while Instant::now() < observe_until {
        let (la, lb) = (a.leader().await, b.leader().await);
        assert_ne!((la, lb), (Some(true), Some(true)), "both instances lead");
        assert_eq!(
            la,
            Some(first == "inpool-a"),
            "the leader changed without cause"
        );
        assert_eq!(
            lb,
            Some(first == "inpool-b"),
            "the leader changed without cause"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let holder = lease_holder(&leases, &lease).await;
    assert_eq!(holder.as_deref(), Some(first));

    // Stop the leader; the other takes over within the lease duration (a released lease is
    // taken as soon as the standby sees it free).
    let (leader, standby) = if first == "inpool-a" {
        (&mut a, &b)
    } else {
        (&mut b, &a)
    };
    let stopped_at = Instant::now();
    assert_eq!(leader.terminate(), Some(0), "logs:\n{}", leader.logs());
    wait_for(
        "the standby to take over",
        Duration::from_secs(LEASE_SECONDS + 10),
        || async { standby.leader().await.filter(|l| *l) },
    )
    .await;
    let takeover = stopped_at.elapsed();
    eprintln!("takeover {takeover:?} after SIGTERM to the leader (lease {LEASE_SECONDS}s)");
    assert!(
        takeover < Duration::from_secs(LEASE_SECONDS),
        "takeover took {takeover:?} for a {LEASE_SECONDS}s lease"
    );
    let second = if first == "inpool-a" {
        "inpool-b"
    } else {
        "inpool-a"
    };
    let holder = lease_holder(&leases, &lease).await;
    assert_eq!(holder.as_deref(), Some(second));
}

#[tokio::test]
async fn a_killed_leader_is_replaced_once_its_lease_expires() {
    ensure_applied().await;
    let _turn = one_inpool_test_at_a_time().await;
    const LEASE_SECONDS: u64 = 6;
    let lease = unique("killed");
    let mut first = start_elected("first", &lease, LEASE_SECONDS);
    wait_for("the first to lead", Duration::from_secs(30), || async {
        first.leader().await.filter(|l| *l)
    })
    .await;
    let second = start_elected("second", &lease, LEASE_SECONDS);
    wait_for(
        "the second to be a standby",
        Duration::from_secs(30),
        || async { second.leader().await.filter(|l| !*l) },
    )
    .await;

    // SIGKILL: no release. The standby must wait for the hold to expire (at most one lease
    // duration after the last renewal, plus kube-lease-manager's random back-off of up to 1 s).
    let leases: Api<Lease> = Api::namespaced(support::env().client().await, SYSTEM_NAMESPACE);
    let killed_at = Instant::now();
    first.kill();
    let spec = leases.get(&lease).await.unwrap().spec.unwrap();
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some("first"),
        "not released"
    );
    wait_for(
        "the standby to take over",
        Duration::from_secs(LEASE_SECONDS + 10),
        || async { second.leader().await.filter(|l| *l) },
    )
    .await;
    let takeover = killed_at.elapsed();
    eprintln!("takeover {takeover:?} after SIGKILL to the leader (lease {LEASE_SECONDS}s)");
    assert!(
        takeover <= Duration::from_secs(LEASE_SECONDS + 2),
        "takeover took {takeover:?} for a {LEASE_SECONDS}s lease"
    );
    let holder = lease_holder(&leases, &lease).await;
    assert_eq!(holder.as_deref(), Some("second"));
}

// ------------------------------------------------------------------------------------------
// run_as_leader in process: the work never runs twice at once, and stops when the lease goes
// ------------------------------------------------------------------------------------------

/// Intervals during which each instance's work future was alive.
#[derive(Default)]
struct Journal {
    intervals: Mutex<Vec<(String, Instant, Option<Instant>)>>,
}

/// Records the end of a work interval when the work future is dropped (the only way
/// `run_as_leader` stops it).
struct EndOnDrop {
    journal: Arc<Journal>,
    index: usize,
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.journal.intervals.lock().unwrap()[self.index].2 = Some(Instant::now());
    }
}

/// The work: record the interval, and write a ConfigMap every 100 ms for as long as it runs.
fn writer(
    journal: Arc<Journal>,
    client: Client,
    namespace: String,
    identity: &'static str,
) -> impl FnMut() -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>
{
    move || {
        let journal = journal.clone();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        Box::pin(async move {
            let index = {
                let mut intervals = journal.intervals.lock().unwrap();
                intervals.push((identity.to_string(), Instant::now(), None));
                intervals.len() - 1
            };
            let _end = EndOnDrop { journal, index };
            let mut n = 0u64;
            loop {
                n += 1;
                let cm = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": { "name": "written-by-the-leader" },
                    "data": { "writer": identity, "n": n.to_string() },
                });
                api.patch(
                    "written-by-the-leader",
                    &PatchParams::apply(identity).force(),
                    &Patch::Apply(&cm),
                )
                .await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }
}

fn assert_no_overlap(journal: &Journal) {
    let intervals = journal.intervals.lock().unwrap();
    for (i, (who_a, start_a, end_a)) in intervals.iter().enumerate() {
        for (who_b, start_b, end_b) in intervals.iter().skip(i + 1) {
            let end_a = end_a.unwrap_or_else(Instant::now);
            let end_b = end_b.unwrap_or_else(Instant::now);
            assert!(
                end_a <= *start_b || end_b <= *start_a,
                "{who_a} and {who_b} worked at the same time"
            );
        }
    }
}

#[tokio::test]
async fn run_as_leader_never_runs_the_work_twice_and_stops_it_when_the_lease_is_lost() {
    let (client, namespace) = support::env().namespace().await;
    let lease_name = "in-process";
    let settings = |identity: &str| {
        LeaseSettings::new(&namespace, lease_name, identity, Duration::from_secs(6))
    };
    let journal = Arc::new(Journal::default());
    let (stop_a, stopped_a) = tokio::sync::oneshot::channel::<()>();
    let (stop_b, stopped_b) = tokio::sync::oneshot::channel::<()>();
    let health_a = HealthState::new();
    let health_b = HealthState::new();
    let a = tokio::spawn(run_as_leader(
        client.clone(),
        settings("a"),
        health_a.clone(),
        writer(journal.clone(), client.clone(), namespace.clone(), "a"),
        async move {
            let _ = stopped_a.await;
        },
    ));
    // Let `a` take the lease first.
    wait_for("a to lead", Duration::from_secs(20), || async {
        health_a.is_leading().then_some(())
    })
    .await;
    let b = tokio::spawn(run_as_leader(
        client.clone(),
        settings("b"),
        health_b.clone(),
        writer(journal.clone(), client.clone(), namespace.clone(), "b"),
        async move {
            let _ = stopped_b.await;
        },
    ));
    wait_for(
        "b to know it is a standby",
        Duration::from_secs(20),
        || async { health_b.leader_state_known().then_some(()) },
    )
    .await;
    assert!(!health_b.is_leading());

    // Someone else takes the lease (as if a's renewals had stopped and it had expired): a must
    // stop working before its hold would have expired, without being told.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let stolen_at = Instant::now();
    let now = k8s_openapi::jiff::Timestamp::now();
    leases
        .patch(
            lease_name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": {
                "holderIdentity": "thief",
                "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now),
                "leaseDurationSeconds": 8,
            }})),
        )
        .await
        .unwrap();
    wait_for("a to stop working", Duration::from_secs(10), || async {
        (!health_a.is_leading()).then_some(())
    })
    .await;
    let a_stopped = stolen_at.elapsed();
    assert!(
        a_stopped < Duration::from_secs(6),
        "a worked {a_stopped:?} after losing the lease"
    );
    {
        let intervals = journal.intervals.lock().unwrap();
        assert!(
            intervals.iter().all(|(_, _, end)| end.is_some()),
            "a's work still alive"
        );
    }
    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let written = cm_api.get("written-by-the-leader").await.unwrap();
    let n_at_stop = written.data.unwrap()["n"].clone();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let written = cm_api.get("written-by-the-leader").await.unwrap();
    assert_eq!(
        written.data.unwrap()["n"],
        n_at_stop,
        "a kept writing after it stopped"
    );

    // The thief's hold expires; one of a and b takes over (never both), then a shuts down and
    // the lease ends with b.
    wait_for("a or b to lead again", Duration::from_secs(20), || async {
        (health_a.is_leading() || health_b.is_leading()).then_some(())
    })
    .await;
    assert!(!(health_a.is_leading() && health_b.is_leading()));
    stop_a.send(()).unwrap();
    a.await.unwrap().expect("a ends cleanly");
    wait_for("b to lead", Duration::from_secs(20), || async {
        health_b.is_leading().then_some(())
    })
    .await;
    let written = wait_for("b to write", Duration::from_secs(5), || async {
        let cm = cm_api.get("written-by-the-leader").await.ok()?;
        let data = cm.data?;
        (data["writer"] == "b").then_some(data)
    })
    .await;
    assert_eq!(written["writer"], "b");
    stop_b.send(()).unwrap();
    b.await.unwrap().expect("b ends cleanly");

    assert_no_overlap(&journal);
    let intervals = journal.intervals.lock().unwrap();
    assert!(intervals.len() >= 2, "{} work intervals", intervals.len());
    assert!(intervals.iter().all(|(_, _, end)| end.is_some()));
}
