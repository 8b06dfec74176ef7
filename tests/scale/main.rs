//! The scale harness's correctness check at a small size: 200 claims in one pool, 100 in one
//! pool that pre-allocates each of them an address, and 100 in one prefix pool, against the
//! `inpool` binary as a separate process, on the test control plane. It asserts the end state
//! only — every claim Ready with its own address inside the pool (a pre-allocated one with its
//! entry's), one reservation per claim, no orphan `IPAddress`, nothing left after every claim is
//! deleted — and counts of writes per claim, never timing. Before
//! the release it restarts the provider (the harness's `restart` scenario) and asserts that the new
//! process writes nothing while it catches up and reconciles each existing claim at most once.
//! The full run with timings is `cargo run --release --bin scale`.
//!
//! It runs the global-pools scenario small too: 120 claims from 3 namespaces over 4
//! `GlobalInClusterIPPool`s, with the same end-state checks; and the carved side of the
//! carved-pools comparison: 60 claims over 6 pools that each carve a /26 from one parent.
//!
//! It runs the reference provider v1.1.0 through the harness too, as `scale --with-reference`
//! does: 100 claims realised distinct and released, and its writes per claim.
//!
//! It also holds claims of another provider's pool kind to their cost (the harness's
//! foreign-claims scenario at 300 claims): none kept in inpool's claim cache, none reconciled,
//! none written to, before and after a restart.
//!
//! A binary of its own: the writes per claim are counted from the API server's own metrics, so
//! no other test may write on its control plane meanwhile.

use std::path::{Path, PathBuf};
use std::time::Duration;

use inpool_testenv::scale::{atsize, foreign, harness, process};
use inpool_testenv::{reference, support};

/// The writes a realised claim costs besides its create, by the harness's names of their
/// resources: finalizer, status, reservation, `IPAddress`, Event.
const WRITES_OF_A_CLAIM: [&str; 5] = [
    "claims",
    "claims/status",
    "ipaddressreservations",
    "ipaddresses",
    "events",
];

/// The writes are counted from the API server's own metrics, which every run on the control
/// plane adds to: one run at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_claims_in_one_pool_are_realised_distinct_and_released_without_orphans() {
    realise_and_release("scale-test", 200, None, 0).await;
}

/// The same on a prefix pool: distinct /64s inside its /48, and the same writes per claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_claims_in_one_prefix_pool_get_distinct_sub_prefixes_and_are_released() {
    realise_and_release("scale-test-prefix", 100, Some(64), 0).await;
}

/// The same with every claim named in the pool's `spec.preAllocations` (the harness's
/// `--pre-allocations`, addresses spread across the pool): each claim gets its entry's address,
/// and a pre-allocated claim costs the writes of a plain one, while realised, after a restart
/// and when released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_pre_allocated_claims_get_their_entries_at_the_writes_of_plain_ones() {
    realise_and_release("scale-test-pre", 100, None, 100).await;
}

/// 120 claims from 3 namespaces over 4 `GlobalInClusterIPPool`s, each pool serving every
/// namespace, the provider watching every namespace: distinct addresses across the namespaces,
/// one reservation per claim, nothing left after the release, and each write a claim costs at
/// most once per claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_three_namespaces_on_shared_global_pools_are_realised_distinct_and_released() {
    const POOLS: usize = 4;
    const PER_POOL: usize = 30;
    let _turn = ONE_AT_A_TIME.lock().await;
    let scenario = harness::Scenario {
        name: "global".into(),
        namespace: "scale-test-global".into(),
        pools: POOLS,
        claims_per_pool: PER_POOL,
        concurrency: 16,
        timeout: Duration::from_secs(300),
        settle: false,
        sub_prefixes: None,
        at_size: atsize::Plan::default(),
        shared_by_namespaces: Some(3),
        pre_allocations: 0,
        carving: None,
    };
    let (run, log_dir) = run_on_the_test_plane(&scenario).await;
    assert_end_state(&run, POOLS * PER_POOL);
    // The finalizer (the harness's creates not counted), status, reservation, IPAddress and
    // Event: each once per claim, as in one pool; the slack is for a retry after a transient
    // error.
    for kind in WRITES_OF_A_CLAIM {
        let per_claim = run
            .writes_per_claim_by_resource
            .get(kind)
            .copied()
            .unwrap_or(0.0);
        assert!(
            per_claim <= 1.02,
            "{per_claim} writes to {kind} per claim: {:?}",
            run.writes_per_claim_by_resource
        );
    }
    let _ = std::fs::remove_dir_all(&log_dir);
}

/// The harness's carved-pools side (`scale --carved`) small: 6 `InClusterIPPool`s made on the
/// clock, each carving a /26 from one parent prefix pool, 10 claims on each. Every claim Ready
/// with its own address inside its pool's carved /26, the /26s apart from each other, inside the
/// parent and each held from it by one of its `IPAddress`es; nothing of the claims left after
/// the release. Few enough pools that their status is never paced (`FEW_POOLS`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_on_pools_carved_from_one_parent_get_addresses_inside_their_pools_sub_prefix() {
    const POOLS: usize = 6;
    const PER_POOL: usize = 10;
    let _turn = ONE_AT_A_TIME.lock().await;
    let scenario = harness::Scenario {
        name: "carved".into(),
        namespace: "scale-test-carved".into(),
        pools: POOLS,
        claims_per_pool: PER_POOL,
        concurrency: 16,
        timeout: Duration::from_secs(300),
        settle: false,
        sub_prefixes: None,
        at_size: atsize::Plan::default(),
        shared_by_namespaces: None,
        pre_allocations: 0,
        carving: Some(harness::Carving::FromParent),
    };
    let (run, log_dir) = run_on_the_test_plane(&scenario).await;
    assert_end_state(&run, POOLS * PER_POOL);
    let correctness = run.correctness.as_ref().expect("checked");
    assert_eq!(
        correctness.pool_subnets_apart,
        Some(POOLS),
        "pools whose carved /26 is apart from the others, inside the parent and held from it"
    );
    assert!(
        run.seconds_to_pools_ready.is_some(),
        "the pools were made on the clock and all became Ready"
    );
    let _ = std::fs::remove_dir_all(&log_dir);
}

/// The reference provider, v1.1.0 built from the Go module proxy, through the same harness as
/// `scale --with-reference` runs it beside inpool: 100 claims in one pool realised (by
/// `status.addressRef`, as it sets no condition) with distinct addresses and released without
/// orphans. Its writes per claim are pinned to what docs/performance.md compares inpool's with:
/// a finalizer, an `IPAddress`, a status and a pool status write per claim; no reservation and no
/// Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_provider_realises_and_releases_claims_in_the_harness() {
    const CLAIMS: usize = 100;
    let binary = tokio::task::spawn_blocking(|| reference::PROGRAM.binary())
        .await
        .expect("the build task")
        .expect("the reference provider builds");
    let _turn = ONE_AT_A_TIME.lock().await;
    let scenario = harness::Scenario {
        name: "single".into(),
        namespace: "scale-test-reference".into(),
        pools: 1,
        claims_per_pool: CLAIMS,
        concurrency: 16,
        timeout: Duration::from_secs(300),
        settle: false,
        sub_prefixes: None,
        at_size: atsize::Plan::default(),
        shared_by_namespaces: None,
        pre_allocations: 0,
        carving: None,
    };
    let provider = process::ProviderSpec::reference(&binary);
    let (run, log_dir) = run_provider_on_the_test_plane(&provider, &scenario).await;
    assert_realised_and_released(&run, CLAIMS, None);
    let per_claim = |kind: &str| {
        run.writes_per_claim_by_resource
            .get(kind)
            .copied()
            .unwrap_or(0.0)
    };
    for kind in ["claims", "claims/status", "ipaddresses"] {
        assert!(
            (1.0..=1.02).contains(&per_claim(kind)),
            "the reference: {} writes to {kind} per claim, expected 1: {:?}",
            per_claim(kind),
            run.writes_per_claim_by_resource
        );
    }
    assert!(
        per_claim("pools/status") >= 0.5,
        "the reference writes its pool's status for about every claim: {:?}",
        run.writes_per_claim_by_resource
    );
    for kind in ["ipaddressreservations", "events"] {
        assert_eq!(
            per_claim(kind),
            0.0,
            "the reference keeps no reservation and sends no Event"
        );
    }
    let _ = std::fs::remove_dir_all(&log_dir);
}

/// 300 claims of metal3's `IPPool` beside inpool's own pool: inpool keeps none of them, reconciles
/// none, writes nothing for them, while it watches them arrive and after a restart that lists them.
/// The sentinel claims of inpool's pool, created after them, are what the counts may include.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_another_providers_pool_are_not_kept_reconciled_or_written() {
    const FOREIGN: usize = 300;
    let _turn = ONE_AT_A_TIME.lock().await;
    let env = support::env();
    let client = env.client().await;
    let provider = process::ProviderSpec::inpool(Path::new(env!("CARGO_BIN_EXE_inpool")));
    let log_dir = std::env::temp_dir().join(format!("inpool-scale-foreign-{}", std::process::id()));
    let setup = foreign::Setup {
        kubeconfig: env.kubeconfig(),
        provider: &provider,
        namespace: "scale-test-foreign",
        foreign_claims: FOREIGN,
        concurrency: 16,
        log_dir: &log_dir,
    };
    let run = foreign::run(&client, setup)
        .await
        .unwrap_or_else(|e| panic!("foreign-claims run failed: {e:#}"));
    eprintln!("{run:#?}");

    assert_eq!(
        (
            run.foreign_claims_touched,
            run.foreign_addresses,
            run.foreign_reservations,
            run.foreign_events
        ),
        (0, 0, 0, 0),
        "foreign claims touched / their IPAddresses, reservations, Events"
    );
    let (watching, restarted) = (&run.watching, run.restarted.as_ref().expect("restarted"));
    // The claim cache: the canary, then the first sentinel; after the restart the second too.
    // Each foreign claim kept would add one.
    assert_eq!(
        (
            watching.claims_watched_before,
            watching.claims_watched_after
        ),
        (Some(1.0), Some(2.0)),
        "claims in inpool's claim cache before and after {FOREIGN} foreign claims"
    );
    assert_eq!(restarted.claims_watched_after, Some(3.0));
    // The registry gains only the sentinel's entries: its reservation, its IPAddress and the
    // claim's index of its reservations.
    let registry_growth = watching.registry_entries_after.expect("registry gauge")
        - watching.registry_entries_before.expect("registry gauge");
    assert!(
        registry_growth <= 3.0,
        "the registry grew by {registry_growth} entries"
    );
    // A claim is reconciled twice (the second confirms inpool's own status write); each
    // existing claim once after a restart. A foreign claim reconciled or queued would add one.
    let reconciles = watching.claim_reconciles.expect("reconcile counter");
    let queued = watching.queue_adds.expect("work-queue counter");
    assert!(
        reconciles <= 3.0 && queued <= 4.0,
        "{reconciles} claim reconciles, {queued} queued, for one sentinel beside {FOREIGN} foreign claims"
    );
    let reconciles = restarted.claim_reconciles.expect("reconcile counter");
    assert!(
        reconciles <= 5.0,
        "{reconciles} claim reconciles after a restart with 2 existing claims, 1 new and {FOREIGN} foreign"
    );
    // The sentinel's writes, one of each kind a claim costs (finalizer, status, reservation,
    // IPAddress, Event); a write for each foreign claim would add 300. (A restarted process
    // also takes the leader Lease: `other`.)
    for (when, window) in [("watching", watching), ("restarted", restarted)] {
        for kind in WRITES_OF_A_CLAIM {
            let writes = window.writes_by.get(kind).copied().unwrap_or(0.0);
            assert!(
                writes <= 1.0,
                "{when}: {writes} writes to {kind} for one sentinel beside {FOREIGN} foreign claims: {:?}",
                window.writes_by
            );
        }
    }
    let _ = std::fs::remove_dir_all(&log_dir);
}

/// Runs `claims` claims in one pool of the scenario's kind (`sub_prefixes`: a prefix pool), of
/// which the pool pre-allocates `pre_allocations`, and checks the end state and the writes per
/// claim.
async fn realise_and_release(
    namespace: &str,
    claims: usize,
    sub_prefixes: Option<u8>,
    pre_allocations: usize,
) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let scenario = harness::Scenario {
        name: "single".into(),
        namespace: namespace.into(),
        pools: 1,
        claims_per_pool: claims,
        concurrency: 16,
        timeout: Duration::from_secs(300),
        settle: false,
        sub_prefixes,
        at_size: atsize::Plan {
            restart: Some(process::StopSignal::Term),
            // The catch-up is what this test holds to account; the second restart only times.
            restart_with_new_claim: false,
            ..Default::default()
        },
        shared_by_namespaces: None,
        pre_allocations,
        carving: None,
    };
    let (run, log_dir) = run_on_the_test_plane(&scenario).await;

    // A new process facing realised claims makes no write while it catches up, and
    // reconciles each existing claim at most once (the API server's counters: nobody else writes
    // to claims, addresses, reservations, pools or Events meanwhile).
    let restart = run
        .at_size
        .as_ref()
        .and_then(|a| a.restart.as_ref())
        .expect("the restart scenario ran");
    assert_eq!(
        restart.writes, 0.0,
        "a new process facing {} realised claims wrote while catching up: {:?}",
        restart.existing_claims, restart.writes_by
    );
    let reconciles = restart
        .claim_reconciles
        .expect("inpool_reconciles_total{controller=\"claim\"} of the new process");
    assert!(
        reconciles <= restart.existing_claims as f64,
        "{reconciles} claim reconciles after the restart for {} existing claims",
        restart.existing_claims
    );

    assert_end_state(&run, claims);
    let honoured = run.correctness.as_ref().map(|c| c.pre_allocations_honoured);
    assert_eq!(
        honoured,
        Some(pre_allocations),
        "pre-allocated claims holding exactly their entry's address"
    );
    let release = run.release.as_ref().expect("every claim was released");
    // Releasing costs 4 writes and one Event per claim (docs/contract.md, "API writes per claim");
    // waking a deleting claim again (e.g. when its own IPAddress goes) would run the release twice.
    assert!(
        release.writes_per_claim <= 5.0 * 1.02,
        "release: {} writes per claim, expected at most 5: {:?}",
        release.writes_per_claim,
        release.writes_per_claim_by_resource
    );

    // The writes per claim of docs/contract.md ("API writes per claim"): finalizer patch,
    // reservation, IPAddress, status, and one Event. Every claim is Ready, so each of the first
    // four was written at least once per claim; the Event has an upper bound only, as the last
    // Events may land after the last Ready was seen. The slack (2%) is for a retry after a
    // transient API error; writing any of them again per claim (e.g. status on every reconcile)
    // fails. The same figures hold a pre-allocated claim to the cost of a plain one.
    let writes = |resource: &str, subresource: &str| {
        run.requests
            .iter()
            .filter(|r| r.resource == resource && r.subresource == subresource)
            .filter(|r| matches!(r.verb.as_str(), "PATCH" | "APPLY" | "PUT" | "POST"))
            .map(|r| r.count)
            .sum::<f64>()
    };
    let per_claim = [
        (
            "claim create + finalizer",
            writes("ipaddressclaims", ""),
            2.0,
            true,
        ),
        (
            "reservation",
            writes("ipaddressreservations", ""),
            1.0,
            true,
        ),
        ("IPAddress", writes("ipaddresses", ""), 1.0, true),
        (
            "claim status",
            writes("ipaddressclaims", "status"),
            1.0,
            true,
        ),
        ("Event", writes("events", ""), 1.0, false),
    ];
    for (what, count, expected, at_least) in per_claim {
        let least = if at_least {
            claims as f64 * expected
        } else {
            0.0
        };
        assert!(
            (least..=claims as f64 * expected * 1.02).contains(&count),
            "{what}: {count} writes for {claims} claims, expected {expected} per claim"
        );
    }
    let _ = std::fs::remove_dir_all(&log_dir);
}

/// Runs `scenario` against the `inpool` binary on the test control plane (the caller holds
/// [`ONE_AT_A_TIME`]). Returns the run and the directory of the provider's logs, for the caller
/// to remove once its assertions held.
async fn run_on_the_test_plane(scenario: &harness::Scenario) -> (harness::Run, PathBuf) {
    let provider = process::ProviderSpec::inpool(Path::new(env!("CARGO_BIN_EXE_inpool")));
    run_provider_on_the_test_plane(&provider, scenario).await
}

/// Runs `scenario` against `provider` on the test control plane (the caller holds
/// [`ONE_AT_A_TIME`]), as [`run_on_the_test_plane`].
async fn run_provider_on_the_test_plane(
    provider: &process::ProviderSpec,
    scenario: &harness::Scenario,
) -> (harness::Run, PathBuf) {
    let env = support::env();
    let client = env.client().await;
    let log_dir = std::env::temp_dir().join(format!(
        "inpool-{}-{}",
        scenario.namespace,
        std::process::id()
    ));
    let run = harness::run_scenario(
        &client,
        env.kubeconfig(),
        None,
        provider,
        scenario,
        &log_dir,
    )
    .await
    .unwrap_or_else(|e| panic!("scale run failed: {e:#}"));
    (run, log_dir)
}

/// Every claim Ready with its own address, one reservation each, no orphan `IPAddress`, and
/// nothing left once every claim was deleted.
fn assert_end_state(run: &harness::Run, claims: usize) {
    assert_realised_and_released(run, claims, Some(claims));
}

/// [`assert_end_state`], with `reservations` as the provider keeps them (`None`: the harness
/// does not count them, for a provider that keeps none).
fn assert_realised_and_released(run: &harness::Run, claims: usize, reservations: Option<usize>) {
    let correctness = run
        .correctness
        .as_ref()
        .expect("the run checks correctness");
    assert!(
        correctness.ok,
        "problems: {:#?}\n{correctness:#?}",
        correctness.problems
    );
    assert_eq!(correctness.claims, claims);
    assert_eq!(correctness.claims_ready, claims);
    assert_eq!(correctness.distinct_addresses, claims);
    assert_eq!(correctness.reservations, reservations);
    assert_eq!(correctness.orphan_addresses, 0);
    let left = correctness.left_after_release.as_ref().expect("released");
    assert_eq!(
        (left.claims, left.addresses, left.reservations),
        (0, 0, 0),
        "objects left after deleting every claim"
    );
}
