//! HTTP-level faults between inpool and the API server, injected for real by the fault proxy
//! (`inpool_testenv::fault_proxy`): throttling (`429` with `Retry-After`), server errors
//! (`500`, `503`), writes whose answer is lost after they succeeded, connection resets (watches
//! included), slow responses, and blackholes (a watch stream that goes silent, a request that is
//! never answered). inpool runs as a process whose kubeconfig points at the proxy; the test's own
//! client talks to the API server directly.
//!
//! After each: every invariant (`assert_invariants`), and from the proxy's log of requests: a
//! retry never came before the `Retry-After` it was given, and the writes per claim stay within a
//! bound (no retry storm). Each prints its figures (`FAULTS http-…`); docs/testing.md has those
//! of a run.

use std::time::{Duration, Instant};

use inpool::api::IPAddress;
use inpool_testenv::common::{
    Inpool, assert_invariants, claim, create, pool, ready_message, ready_of, reasons, sample,
    snapshot, violations, wait_explained, wait_for, wait_reason,
};
use inpool_testenv::fault_proxy::{Fault, FaultProxy, Match, Rule, Seen};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::{
    Scenario, create_claims_in_background, delete_claims_in_background, force_delete, proxy_for,
    realised_and_waiting, start_provider,
};

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Writes per claim the API server may receive through a fault run before it counts as a
/// retry storm. A fault-free burst takes about 4 (reservation, `IPAddress`, the claim's
/// finalizer and status, an Event), the faults add their retries; kube's client alone would
/// retry one request up to 15 times.
const WRITES_PER_CLAIM_BOUND: f64 = 12.0;

/// How soon after the faults are lifted every invariant must hold: generous, as a bound
/// (measured: at most 3.4 s; docs/testing.md has the figures).
const RECOVERY_BOUND: Duration = Duration::from_secs(30);

/// A scenario whose provider talks to the API server through a fault proxy.
struct Proxied {
    scenario: Scenario,
    proxy: FaultProxy,
    provider: Inpool,
}

impl Proxied {
    /// A namespace with the pool `pool` over `range`, and a provider behind a fresh proxy that
    /// applies `rules` from the provider's first request.
    async fn start(range: &str, rules: Vec<Rule>) -> Proxied {
        let scenario = Scenario::start().await;
        create(&scenario.pools, &pool("pool", &[range], 24, None)).await;
        let proxy = proxy_for(&scenario.kubeconfig).await;
        for rule in rules {
            proxy.set(rule);
        }
        let provider = start_provider(proxy.kubeconfig(), &scenario.ns, "p");
        Proxied {
            scenario,
            proxy,
            provider,
        }
    }

    /// Waits until `realised` claims are realised and `waiting` wait; on a timeout, says what
    /// the claims, the invariant checker and the provider's log show.
    async fn wait_realised(&self, realised: usize, waiting: usize) {
        let claims = &self.scenario.claims;
        let deadline = Instant::now() + Duration::from_secs(120);
        while realised_and_waiting(claims).await != (realised, waiting) {
            if Instant::now() > deadline {
                let (client, ns) = (&self.scenario.client, &self.scenario.ns);
                let broken = match snapshot(client, ns).await {
                    Some(s) => violations(&s),
                    None => vec!["no snapshot".to_string()],
                };
                panic!(
                    "not {realised} claims realised and {waiting} waiting after 120 s: {:?}\nclaims: {:?}\ninvariants broken: {broken:#?}\nprovider log:\n{}",
                    realised_and_waiting(claims).await,
                    reasons(claims).await,
                    tail(&self.provider.logs(), 150)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Cuts every open watch once one is open; returns how many were cut.
    async fn cut_watches(&self) -> usize {
        let watches = Match::all().watches();
        wait_explained(
            "a watch open",
            Duration::from_secs(30),
            || async { (self.proxy.open_exchanges(&watches) > 0).then_some(()) },
            || {
                let seen: Vec<String> = self
                    .proxy
                    .requests()
                    .iter()
                    .filter(|s| s.watch)
                    .map(|s| format!("{} {:?} {:?}", s.path, s.fault, s.upstream_status))
                    .collect();
                format!(
                    "; watches seen: {seen:#?}; requests: {:?}; provider log:\n{}",
                    self.proxy.counts(),
                    tail(&self.provider.logs(), 40)
                )
            },
        )
        .await;
        self.proxy.cut(&watches)
    }

    /// Creates `count` claims (`c-0000`…), paced, and meanwhile cuts the open watches at three
    /// random moments; returns how many watches were cut.
    async fn burst_cutting_watches(&mut self, count: usize) -> usize {
        let burst = create_claims_in_background(&self.scenario.claims, "pool", "c", 0..count);
        let mut cut = 0;
        for _ in 0..3 {
            tokio::time::sleep(self.scenario.moments.millis(200, 900)).await;
            cut += self.cut_watches().await;
        }
        burst.await.unwrap();
        cut
    }

    /// Every invariant; returns when they held.
    async fn assert_invariants(&mut self) -> Instant {
        assert_invariants(
            &self.scenario.client,
            &self.scenario.ns,
            &mut [&mut self.provider],
        )
        .await
    }

    /// Every invariant, held within [`RECOVERY_BOUND`] of `lifted`; returns how long after.
    async fn assert_recovered(&mut self, lifted: Instant) -> Duration {
        let recovered = self.assert_invariants().await - lifted;
        assert!(
            recovered <= RECOVERY_BOUND,
            "invariants held only {recovered:?} after the faults were lifted"
        );
        recovered
    }

    /// Checks the proxy's log: retries after `Retry-After`, writes per claim within the bound.
    /// Returns what was checked, for the printed figures.
    async fn check_requests(&self, claims: usize) -> RequestFigures {
        let strays = self
            .provider
            .sample("inpool_stray_reservations_collected_total")
            .await
            .unwrap_or(0.0) as usize;
        let requests = self.proxy.requests();
        let RetriesAfter { answered, checked } = assert_retry_after_obeyed(&requests);
        // A run that was answered `Retry-After` and never retried would pass the check above
        // without testing anything: the retries it promises must have been seen.
        assert!(
            answered == 0 || checked > 0,
            "{answered} requests were answered with Retry-After, and none was seen retried"
        );
        let retries_checked = checked;
        let writes = requests.iter().filter(|s| s.is_write()).count();
        let per_claim = writes as f64 / claims as f64;
        assert!(
            per_claim <= WRITES_PER_CLAIM_BOUND,
            "{writes} writes for {claims} claims: a retry storm? {:?}",
            self.proxy.counts()
        );
        RequestFigures {
            strays,
            requests: requests.len(),
            faulted: requests.iter().filter(|s| s.fault.is_some()).count(),
            writes_per_claim: per_claim,
            retries_checked,
        }
    }
}

struct RequestFigures {
    /// Stray reservations the audit collected: left when a reservation's create was answered
    /// with a reset after it succeeded and the retry, not knowing, reserved another address.
    strays: usize,
    requests: usize,
    faulted: usize,
    writes_per_claim: f64,
    retries_checked: usize,
}

impl std::fmt::Display for RequestFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests, {} faulted, {:.1} writes per claim, {} retries after Retry-After checked, {} stray reservations collected",
            self.requests, self.faulted, self.writes_per_claim, self.retries_checked, self.strays
        )
    }
}

/// Requests answered with `Retry-After` that [`assert_retry_after_obeyed`] can check, and how
/// many of them were seen retried.
struct RetriesAfter {
    answered: usize,
    checked: usize,
}

/// For every request answered with `Retry-After: N`, the same request (method, path, query,
/// body) came again no sooner than N seconds later. Returns how many such answers there were
/// and how many retries were seen.
///
/// Reads of one object are left out: two parts of inpool may read the same object at once (a
/// claim's reconcile and the stray checks both read its `IPAddress`), and the proxy cannot tell
/// such a read from a retry. Writes and lists have one sender.
fn assert_retry_after_obeyed(requests: &[Seen]) -> RetriesAfter {
    let mut answered_with_retry_after = 0;
    let mut checked = 0;
    for (i, answered) in requests.iter().enumerate() {
        let Some(Fault::Status {
            retry_after: Some(seconds),
            ..
        }) = answered.fault
        else {
            continue;
        };
        let read_of_one_object = answered.method == "GET"
            && answered.subresource.is_none()
            && !answered.path.ends_with(&format!("/{}", answered.resource));
        if read_of_one_object {
            continue;
        }
        answered_with_retry_after += 1;
        let Some(retry) = requests[i + 1..].iter().find(|r| r.same_request(answered)) else {
            continue;
        };
        let gap = retry.at - answered.at;
        assert!(
            gap >= Duration::from_secs(seconds),
            "{} {} retried {gap:?} after a Retry-After of {seconds} s",
            answered.method,
            answered.path
        );
        checked += 1;
    }
    RetriesAfter {
        answered: answered_with_retry_after,
        checked,
    }
}

/// `count` claims on a pool of `addresses` addresses through the proxy, with `rules` on from
/// the start of the burst until it is over; then the rules are removed, and the time until every
/// invariant held is measured. Returns the figures to print, and the requests the proxy saw.
async fn burst_under(
    range: &str,
    addresses: usize,
    count: usize,
    rules: Vec<Rule>,
) -> (String, Vec<Seen>) {
    let mut run = Proxied::start(range, rules).await;
    let started = Instant::now();
    let claims = &run.scenario.claims;
    create_claims_in_background(claims, "pool", "c", 0..count)
        .await
        .unwrap();
    run.wait_realised(addresses, count - addresses).await;
    let realised = started.elapsed();
    run.proxy.clear();
    let lifted = Instant::now();
    let recovered = run.assert_recovered(lifted).await;
    let figures = run.check_requests(count).await;
    let figures = format!(
        "{count} claims on {addresses} addresses realised {:.1}s after the burst began; every invariant held {:.1}s after the faults were lifted; {figures}",
        realised.as_secs_f64(),
        recovered.as_secs_f64()
    );
    (figures, run.proxy.requests())
}

#[tokio::test]
async fn throttling_and_server_errors_are_retried_without_a_storm() {
    let rules = vec![
        Rule::new(
            Match::all().not_watches(),
            Fault::Status {
                code: 429,
                retry_after: Some(2),
            },
        )
        .probability(0.2),
        Rule::new(
            Match::all().not_watches(),
            Fault::Status {
                code: 503,
                retry_after: Some(1),
            },
        )
        .probability(0.1),
        Rule::new(
            Match::all().not_watches(),
            Fault::Status {
                code: 500,
                retry_after: None,
            },
        )
        .probability(0.1),
    ];
    let (figures, _) = burst_under("10.20.0.1-10.20.0.20", 20, 25, rules).await;
    println!(
        "FAULTS http-throttled: 429 (Retry-After 2) on 20%, 503 (Retry-After 1) and 500 on 10% each of the requests; {figures}"
    );
}

#[tokio::test]
async fn writes_whose_answer_is_lost_after_they_succeeded_end_right() {
    let lost = |path: &str, fault: Fault| {
        Rule::new(Match::all().method("POST").path(path), fault).probability(0.4)
    };
    let rules = vec![
        lost("/ipaddressreservations", Fault::StatusAfterForward(503)),
        lost("/ipaddressreservations", Fault::ResetAfterForward),
        lost("/ipaddresses", Fault::StatusAfterForward(503)),
        lost("/ipaddresses", Fault::ResetAfterForward),
        Rule::new(
            Match::all().method("PATCH").path("/ipaddressclaims"),
            Fault::ResetAfterForward,
        )
        .probability(0.2),
    ];
    let (figures, requests) = burst_under("10.21.0.1-10.21.0.20", 20, 25, rules).await;
    // The lost answers were of writes that succeeded, and inpool sent some again: those met
    // AlreadyExists, and were taken as its own (the invariants held).
    let already_exists = |resource: &str| {
        requests
            .iter()
            .filter(|s| s.resource == resource && s.upstream_status == Some(409))
            .count()
    };
    let (reservations, addresses) = (
        already_exists("ipaddressreservations"),
        already_exists("ipaddresses"),
    );
    assert!(
        reservations + addresses > 0,
        "no create was sent again after its answer was lost"
    );
    println!(
        "FAULTS http-lost-answers: creates sent again that met AlreadyExists: {reservations} reservations, {addresses} IPAddresses"
    );
    println!(
        "FAULTS http-lost-answers: the answer of 40% of reservation and IPAddress creates and 20% of claim patches lost after they succeeded (503 or a reset in its place); {figures}"
    );
}

#[tokio::test]
async fn resets_of_requests_and_watches_lose_nothing() {
    // The first two requests (the discovery at start) are reset, then one in 20. A claim's
    // reconcile makes several requests and backs off after each failure (1 s, doubling): at one
    // in 7 a few claims were still waiting out a minute's backoff after 2 minutes.
    let rules = vec![
        Rule::new(Match::all(), Fault::Reset).times(2),
        Rule::new(Match::all().not_watches(), Fault::Reset).probability(0.05),
    ];
    let mut run = Proxied::start("10.22.0.1-10.22.0.20", rules).await;
    let started = Instant::now();
    let cut = run.burst_cutting_watches(25).await;
    run.wait_realised(20, 5).await;
    let realised = started.elapsed();
    run.proxy.clear();
    let lifted = Instant::now();
    let recovered = run.assert_recovered(lifted).await;
    assert!(cut > 0, "no watch was open to cut");
    let figures = run.check_requests(25).await;
    println!(
        "FAULTS http-resets: the first 2 requests and 5% of the others reset, {cut} open watches cut in 3 rounds; 25 claims on 20 addresses realised {:.1}s after the burst began; every invariant held {:.1}s after; {figures}",
        realised.as_secs_f64(),
        recovered.as_secs_f64()
    );
}

#[tokio::test]
async fn slow_responses_lose_nothing() {
    let rules =
        vec![Rule::new(Match::all(), Fault::Delay(Duration::from_millis(800))).probability(0.3)];
    let (figures, _) = burst_under("10.23.0.1-10.23.0.20", 20, 25, rules).await;
    println!("FAULTS http-slow: 30% of requests (watches included) delayed 0.8 s; {figures}");
}

/// A watch whose stream goes silent is given up and opened again, and a request never
/// answered fails and is sent again: a claim created after the claim watch went silent is
/// realised, and so is the claim whose `IPAddress` create was blackholed.
#[tokio::test]
async fn a_blackholed_watch_and_request_are_detected_and_restarted() {
    let mut run = Proxied::start("10.24.0.1-10.24.0.10", Vec::new()).await;
    let claims = run.scenario.claims.clone();
    for name in ["c-0", "c-1"] {
        create(&claims, &claim(name, "pool")).await;
    }
    run.wait_realised(2, 0).await;

    // The next IPAddress create is never answered.
    let hole = run.proxy.set(
        Rule::new(
            Match::all().method("POST").path("/ipaddresses"),
            Fault::Blackhole,
        )
        .times(1),
    );
    create(&claims, &claim("held", "pool")).await;
    assert!(
        run.proxy.wait_held(1, Duration::from_secs(20)).await,
        "the IPAddress create of claim held reached the proxy"
    );

    // The claim watch goes silent: nothing more on its stream, the connection stays open.
    let claim_watch = Match::all().watches().path("/ipaddressclaims");
    wait_for("the claim watch open", Duration::from_secs(30), || async {
        (run.proxy.open_exchanges(&claim_watch) > 0).then_some(())
    })
    .await;
    assert_eq!(run.proxy.stall(&claim_watch), 1);
    let stalled_at = Instant::now();
    create(&claims, &claim("after", "pool")).await;

    run.wait_realised(4, 0).await;
    let all_realised = stalled_at.elapsed();
    let requests = run.proxy.requests();
    let rewatch = requests
        .iter()
        .find(|s| s.at > stalled_at && s.watch && s.resource == "ipaddressclaims")
        .expect("the claim watch was opened again")
        .at
        - stalled_at;
    let held = requests
        .iter()
        .find(|s| s.fault == Some(Fault::Blackhole))
        .expect("the blackholed create is logged");
    let resent = requests
        .iter()
        .find(|s| s.at > held.at && s.same_request(held))
        .expect("the IPAddress create was sent again")
        .at
        - held.at;
    // kube-runtime gives a silent watch up after its timeout (30 s) + 5 s; a request fails
    // after 45 s without a byte. A little room for the re-watch and a reconcile's backoff.
    assert!(
        rewatch <= Duration::from_secs(40),
        "claim watch restarted after {rewatch:?}"
    );
    assert!(
        resent <= Duration::from_secs(50),
        "blackholed create sent again after {resent:?}"
    );
    assert_eq!(
        run.proxy.applied(hole),
        1,
        "one create blackholed, none forwarded by it"
    );
    let lifted = Instant::now();
    run.proxy.clear();
    let recovered = run.assert_recovered(lifted).await;
    println!(
        "FAULTS http-blackhole: claim watch silent, restarted after {:.1}s; blackholed IPAddress create failed and sent again after {:.1}s; every claim realised {:.1}s after the watch went silent; invariants held {:.1}s later",
        rewatch.as_secs_f64(),
        resent.as_secs_f64(),
        all_realised.as_secs_f64(),
        recovered.as_secs_f64()
    );
}

/// A reservation create that keeps failing is told on the claim, as the contract asks of API
/// errors that persist: `Ready=False`, `AllocationFailed`, with the reservation, the address and
/// the API server's answer, and no `addressRef`; once the API server takes the create again, the
/// claim is realised.
#[tokio::test]
async fn a_reservation_create_that_keeps_failing_is_told_on_the_claim() {
    let refused = Rule::new(
        Match::all().method("POST").path("/ipaddressreservations"),
        Fault::Status {
            code: 500,
            retry_after: None,
        },
    );
    let mut run = Proxied::start("10.26.0.1-10.26.0.10", vec![refused]).await;
    let claims = run.scenario.claims.clone();
    create(&claims, &claim("c-0", "pool")).await;
    let failed = wait_reason(&claims, "c-0", "AllocationFailed").await;
    let message = ready_message(&failed);
    assert!(
        message.starts_with("creating IPAddressReservation ")
            && message.contains(" for 10.26.0.1 failed: ")
            && message.contains("injected by the fault proxy: 500"),
        "{message}"
    );
    assert_eq!(ready_of(&failed).and_then(|(_, _, r)| r), None);
    let lifted = Instant::now();
    run.proxy.clear();
    run.wait_realised(1, 0).await;
    let realised = lifted.elapsed();
    let recovered = run.assert_recovered(lifted).await;
    println!(
        "FAULTS http-refused-reservations: every reservation create answered 500: the claim AllocationFailed, naming it; realised {:.1}s after the creates were taken again; invariants held {:.1}s after",
        realised.as_secs_f64(),
        recovered.as_secs_f64()
    );
}

/// Every fault at once, at random, during a burst of claims and releases; the watches cut
/// at random moments too.
#[tokio::test]
async fn a_random_mix_of_http_faults_during_a_burst_loses_and_duplicates_nothing() {
    let status = |code, retry_after| Fault::Status { code, retry_after };
    let requests = || Match::all().not_watches();
    let writes = || Match::all().writes();
    let rules = [
        (requests(), status(429, Some(1)), 0.06),
        (requests(), status(503, Some(1)), 0.03),
        (requests(), status(500, None), 0.03),
        (Match::all(), Fault::Reset, 0.03),
        (Match::all(), Fault::Delay(Duration::from_millis(300)), 0.1),
        (writes(), Fault::StatusAfterForward(503), 0.04),
        (writes(), Fault::ResetAfterForward, 0.04),
    ]
    .map(|(matches, fault, probability)| Rule::new(matches, fault).probability(probability));
    let mut run = Proxied::start("10.25.0.1-10.25.0.30", rules.to_vec()).await;
    let started = Instant::now();
    let cut = run.burst_cutting_watches(40).await;
    let claims = run.scenario.claims.clone();
    // The faults stay on for a while after the burst, through 10 releases, then are lifted.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let names = (0..10).map(|i| format!("c-{:04}", i * 3)).collect();
    delete_claims_in_background(&claims, names).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let under_faults = started.elapsed();
    run.proxy.clear();
    let lifted = Instant::now();
    wait_for("10 claims gone", Duration::from_secs(60), || async {
        let left = claims.list(&ListParams::default()).await.ok()?.items;
        (left.len() == 30).then_some(())
    })
    .await;
    run.wait_realised(30, 0).await;
    let settled = lifted.elapsed();
    let recovered = run.assert_recovered(lifted).await;
    let figures = run.check_requests(40).await;
    println!(
        "FAULTS http-mix: 40 claims + 10 releases on 30 addresses under every fault at random for {:.1}s, {cut} watches cut; every claim settled {:.1}s and every invariant held {:.1}s after the faults were lifted; {figures}",
        under_faults.as_secs_f64(),
        settled.as_secs_f64(),
        recovered.as_secs_f64()
    );
}

/// The audit completes while half of its list requests fail: a page that fails on the way is
/// asked again, so an audit does not need every one of its requests to succeed. Before, under a
/// sustained error rate the audit hardly ever completed, and what only the audit repairs waited
/// for the errors to stop.
#[tokio::test]
async fn the_audit_completes_while_half_of_its_lists_fail() {
    let mut proxied = Proxied::start("10.9.0.1-10.9.0.10", Vec::new()).await;
    create_claims_in_background(&proxied.scenario.claims, "pool", "c", 0..5)
        .await
        .unwrap();
    proxied.wait_realised(5, 0).await;
    // Audits completed and failed so far, from /metrics.
    let audits = || async {
        let metrics = proxied.provider.metrics().await.unwrap_or_default();
        let completed = sample(&metrics, "inpool_audits_total").unwrap_or(0.0);
        let failed: f64 = metrics
            .lines()
            .filter(|l| l.starts_with(r#"inpool_reconcile_errors_total{controller="audit""#))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        (completed, failed)
    };
    wait_for("an audit completed", Duration::from_secs(30), || async {
        (audits().await.0 >= 1.0).then_some(())
    })
    .await;

    // Every page of every list (the audit's; the watches are open and do not list again) fails
    // with a 500 one time in two, until six audits have ended. Counted in audits, not in time:
    // how many audits fit in a given time depends on the machine's load.
    let pages = Match::all().method("GET").not_watches().query("limit=");
    let rule = proxied.proxy.set(
        Rule::new(
            pages.clone(),
            Fault::Status {
                code: 500,
                retry_after: None,
            },
        )
        .probability(0.5),
    );
    let (completed_before, failed_before) = audits().await;
    let started = Instant::now();
    let (completed, failed_audits) =
        wait_for("six audits ended", Duration::from_secs(180), || async {
            let (completed, failed) = audits().await;
            let ended = (completed - completed_before, failed - failed_before);
            (ended.0 + ended.1 >= 6.0).then_some(ended)
        })
        .await;
    let took = started.elapsed();
    let failed = proxied.proxy.applied(rule);
    proxied.proxy.remove(rule);
    let asked = proxied
        .proxy
        .requests()
        .iter()
        .filter(|s| pages.matches(s))
        .count();
    assert!(
        failed >= 10,
        "only {failed} pages failed: the rule did not apply"
    );
    // An audit lists six kinds (four pool kinds, IPAddresses, reservations): with every request
    // needed, one in 64 would complete; with each page asked up to five times, about four in
    // five do. At least two of six: with one in 64, 4 runs in 1,000 would pass; with four in
    // five, about 2 in 1,000 would fail.
    assert!(
        completed >= 2.0,
        "{completed} of {} audits completed while {failed} of {asked} list pages failed",
        completed + failed_audits
    );
    proxied.assert_invariants().await;
    println!(
        "FAULTS http-audit: {completed} of {} audits completed in {:.0} s while {failed} of {asked} list pages failed with a 500",
        completed + failed_audits,
        took.as_secs_f64()
    );
}

/// The cause of the drift the soak counted: an `IPAddress` deleted while the address watch was
/// failing. The audit saw it gone in both of its lists, while the registry, whose watch could not
/// tell it, still kept it: the watch's gap, not drift. The audit corrects it (the claim gets its
/// `IPAddress` back) and counts nothing; without [`WATCH_RECOVERY`]'s rule it counted one drift.
///
/// [`WATCH_RECOVERY`]: inpool::controllers::audit::WATCH_RECOVERY
#[tokio::test]
async fn what_a_failing_watch_missed_is_corrected_by_the_audit_and_not_counted_as_drift() {
    let mut proxied = Proxied::start("10.9.0.1-10.9.0.10", Vec::new()).await;
    create_claims_in_background(&proxied.scenario.claims, "pool", "c", 0..3)
        .await
        .unwrap();
    proxied.wait_realised(3, 0).await;
    let addresses: Api<IPAddress> =
        Api::namespaced(proxied.scenario.client.clone(), &proxied.scenario.ns);
    let before = addresses.get("c-0000").await.unwrap();

    // Every watch of IPAddresses is refused, and the open one is cut.
    let address_watches = Match::all().watches().path("/ipaddresses");
    let rule = proxied.proxy.set(Rule::new(
        address_watches.clone(),
        Fault::Status {
            code: 503,
            retry_after: None,
        },
    ));
    proxied.proxy.cut(&address_watches);
    force_delete(&addresses, "c-0000").await;
    let restored = wait_for(
        "IPAddress c-0000 made again while its watch fails",
        Duration::from_secs(60),
        || async {
            addresses
                .get_opt("c-0000")
                .await
                .ok()
                .flatten()
                .filter(|a| a.uid() != before.uid())
        },
    )
    .await;
    let refused = proxied.proxy.applied(rule);
    proxied.proxy.remove(rule);
    assert!(refused >= 1, "no watch of IPAddresses was refused");
    assert_eq!(restored.spec.address, before.spec.address);
    // Drift 0 (the invariant check reads it), and the audit's log says what it corrected.
    proxied.assert_invariants().await;
    let log = proxied.provider.logs();
    assert!(
        log.contains("corrected what a failed watch missed"),
        "the audit did not correct the deletion the watch missed:\n{}",
        tail(&log, 80)
    );
    println!(
        "FAULTS http-watch-gap: IPAddress deleted while {refused} watches of its kind were refused; restored by the audit's correction, no drift counted"
    );
}
