//! The parser's tests: defaults, environment, values, and the flags Cluster API's tooling writes.

use super::*;
use crate::telemetry::tls::{self, TlsPolicy};
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const CHILD_MARKER: &str = "INPOOL_CLI_TEST_CHILD_ARGS";

/// Parses `argv` in a child process of this test binary whose environment is exactly `env`
/// (the crate forbids `unsafe`, so the test cannot change its own environment). Returns the
/// child's `Debug` rendering of the parsed [`Args`], or its error text.
fn parse_in_child(argv: &[&str], env: &[(&str, &str)]) -> String {
    child_line(argv, env, "PARSED: ")
}

/// The [`Effects`] of `argv` (with an empty environment), parsed in a child process, as `Debug`
/// text; or the parser's error text.
fn effects_in_child(argv: &[&str]) -> String {
    child_line(argv, &[], "EFFECTS: ")
}

fn child_line(argv: &[&str], env: &[(&str, &str)], prefix: &str) -> String {
    let exe = std::env::current_exe().expect("test binary path");
    let output = Command::new(exe)
        .args(["--exact", "cli::tests::child_parses_args", "--nocapture"])
        .args(["--test-threads", "1"])
        .env_clear()
        .env(CHILD_MARKER, argv.join("\u{1f}"))
        .envs(env.iter().copied())
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|l| l.split_once(prefix).map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("child printed no result: {stdout}"))
        .to_string()
}

/// The child side of [`parse_in_child`]; a no-op when run normally.
#[test]
fn child_parses_args() {
    let Ok(argv) = std::env::var(CHILD_MARKER) else {
        return;
    };
    let argv: Vec<&str> = std::iter::once("inpool")
        .chain(argv.split('\u{1f}').filter(|s| !s.is_empty()))
        .collect();
    match Args::try_parse_checked(argv) {
        Ok(args) => {
            println!("PARSED: {args:?}");
            println!("EFFECTS: {:?}", Effects::of(&args));
        }
        Err(e) => {
            let error = e.to_string().replace('\n', " ");
            println!("PARSED: error: {error}");
            println!("EFFECTS: error: {error}");
        }
    }
}

#[test]
fn defaults_without_flags_or_environment() {
    let parsed = parse_in_child(&[], &[]);
    let expected = Args {
        kubeconfig: None,
        namespace: None,
        watch_filter: None,
        concurrency: 16,
        ipaddressclaim_concurrency: None,
        diagnostics_address: "[::]:8443".parse().unwrap(),
        insecure_diagnostics: false,
        diagnostics_cert_dir: None,
        tls_min_version: "VersionTLS12".into(),
        tls_cipher_suites: vec![],
        tls_curve_preferences: vec![],
        metrics_bind_address: None,
        health_bind_address: "[::]:8081".parse().unwrap(),
        log_format: LogFormat::Text,
        log_level: None,
        verbosity: None,
        leader_elect: false,
        leader_election_namespace: "default".into(),
        leader_election_lease_name: "inpool-leader".into(),
        leader_election_id: None,
        leader_election_lease_duration: Duration::from_secs(15),
        leader_elect_renew_deadline: None,
        leader_elect_retry_period: None,
        identity: None,
        audit_interval: Duration::from_secs(600),
        stray_reservation_age: Duration::from_secs(120),
        ignore_reference_provider_lease: false,
        feature_gates: None,
        sync_period: None,
        profiler_address: None,
        webhook_host: None,
        webhook_port: None,
        webhook_cert_dir: None,
        webhook_cert_name: None,
        webhook_key_name: None,
        unsubstituted: vec![],
    };
    assert_eq!(parsed, format!("{expected:?}"));
    assert_eq!(expected.settings(), Settings::default());
    assert_eq!(expected.log_filter(), "info");
    assert_eq!(expected.caveats(), Vec::<String>::new());
    assert_eq!(
        expected.diagnostics(),
        DiagnosticsSettings {
            address: "[::]:8443".parse().unwrap(),
            mode: DiagnosticsMode::Secure { cert_dir: None },
            tls: TlsPolicy::default(),
            plain_metrics: None,
        }
    );
}

#[test]
fn diagnostics_flags() {
    let parse = |argv: &[&str]| {
        Args::try_parse_checked(std::iter::once("inpool").chain(argv.iter().copied()))
            .map(|args| args.diagnostics())
            .map_err(|e| e.to_string())
    };
    let secure = |cert_dir: Option<&str>| DiagnosticsMode::Secure {
        cert_dir: cert_dir.map(PathBuf::from),
    };
    assert_eq!(
        parse(&[
            "--diagnostics-address=127.0.0.1:9443",
            "--diagnostics-cert-dir=/certs"
        ]),
        Ok(DiagnosticsSettings {
            address: "127.0.0.1:9443".parse().unwrap(),
            mode: secure(Some("/certs")),
            tls: TlsPolicy::default(),
            plain_metrics: None,
        })
    );
    for insecure in ["--insecure-diagnostics", "--insecure-diagnostics=true"] {
        assert_eq!(
            parse(&[insecure, "--diagnostics-address=[::1]:8080"]),
            Ok(DiagnosticsSettings {
                address: "[::1]:8080".parse().unwrap(),
                mode: DiagnosticsMode::Insecure,
                tls: TlsPolicy::default(),
                plain_metrics: None,
            })
        );
    }
    // `=false` with a certificate directory is the secure server with that certificate.
    assert_eq!(
        parse(&[
            "--insecure-diagnostics=false",
            "--diagnostics-cert-dir=/certs"
        ])
        .map(|d| d.mode),
        Ok(secure(Some("/certs")))
    );
    // The deprecated flag adds plain /metrics beside the diagnostics server.
    assert_eq!(
        parse(&["--metrics-bind-addr=:8080"]),
        Ok(DiagnosticsSettings {
            address: "[::]:8443".parse().unwrap(),
            mode: secure(None),
            tls: TlsPolicy::default(),
            plain_metrics: Some("[::]:8080".parse().unwrap()),
        })
    );
    for conflict in [
        &["--insecure-diagnostics", "--diagnostics-cert-dir=/certs"][..],
        &[
            "--metrics-bind-address=:8443",
            "--diagnostics-address=:8443",
        ],
    ] {
        let error = parse(conflict).unwrap_err();
        assert!(error.contains("--diagnostics-"), "{conflict:?}: {error}");
    }
}

#[test]
fn bind_addresses() {
    // `:PORT` is every interface: the IPv6 wildcard (dual-stack), for IPv6-only clusters.
    assert_eq!(
        parse_bind_address(":8443"),
        Ok("[::]:8443".parse().unwrap())
    );
    assert_eq!(parse_bind_address(" :0 "), Ok("[::]:0".parse().unwrap()));
    assert_eq!(
        parse_bind_address("0.0.0.0:8443"),
        Ok("0.0.0.0:8443".parse().unwrap())
    );
    assert_eq!(parse_bind_address("[::]:1"), Ok("[::]:1".parse().unwrap()));
    for bad in ["localhost:8443", "8443", ":", ":http", ""] {
        let error = parse_bind_address(bad).unwrap_err();
        assert!(error.contains(":8443"), "{bad}: {error}");
    }
}

#[test]
fn environment_is_honoured() {
    let parsed = parse_in_child(
        &[],
        &[
            ("KUBECONFIG", "/tmp/kc"),
            ("INPOOL_NAMESPACE", "team-a"),
            ("INPOOL_WATCH_FILTER", "blue"),
            ("INPOOL_CONCURRENCY", "4"),
            ("RUST_LOG", "inpool=debug"),
            ("INPOOL_LOG_FORMAT", "json"),
            ("INPOOL_LEADER_ELECT", "true"),
            ("POD_NAMESPACE", "inpool-system"),
            ("INPOOL_LEADER_ELECTION_LEASE_DURATION", "1m"),
        ],
    );
    for part in [
        "kubeconfig: Some(\"/tmp/kc\")",
        "namespace: Some(\"team-a\")",
        "watch_filter: Some(\"blue\")",
        "concurrency: 4",
        "log_format: Json",
        "log_level: Some(\"inpool=debug\")",
        "leader_elect: true",
        "leader_election_namespace: \"inpool-system\"",
        "leader_election_lease_duration: 60s",
    ] {
        assert!(parsed.contains(part), "{part} missing in {parsed}");
    }
}

#[test]
fn flags_win_over_environment() {
    let parsed = parse_in_child(
        &[
            "--namespace=ns-flag",
            "--leader-election-namespace=lease-ns",
            "--log-level=warn",
        ],
        &[
            ("INPOOL_NAMESPACE", "ns-env"),
            ("POD_NAMESPACE", "pod-ns"),
            ("RUST_LOG", "debug"),
        ],
    );
    assert!(parsed.contains("namespace: Some(\"ns-flag\")"), "{parsed}");
    assert!(
        parsed.contains("leader_election_namespace: \"lease-ns\""),
        "{parsed}"
    );
    assert!(parsed.contains("log_level: Some(\"warn\")"), "{parsed}");
}

#[test]
fn the_reference_provider_lease_is_ignored_only_when_asked() {
    let ignores = |argv: &[&str]| {
        Args::try_parse_checked(std::iter::once("inpool").chain(argv.iter().copied()))
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"))
            .settings()
            .ignore_reference_provider_lease
    };
    assert!(!ignores(&[]));
    assert!(ignores(&["--ignore-reference-provider-lease"]));
    assert!(ignores(&["--ignore-reference-provider-lease=true"]));
    assert!(!ignores(&["--ignore-reference-provider-lease=false"]));
    assert!(
        parse_in_child(&[], &[("INPOOL_IGNORE_REFERENCE_PROVIDER_LEASE", "true")])
            .contains("ignore_reference_provider_lease: true")
    );
}

#[test]
fn invalid_values_are_rejected() {
    for argv in [
        &["--log-format=xml"][..],
        &["--leader-election-lease-duration=2s"],
        &["--leader-election-lease-duration=soon"],
        &["--concurrency=-1"],
        &["--metrics-bind-address=localhost"],
        &["--diagnostics-address=localhost:8443"],
        &["--log-level=inpool=[bad"],
    ] {
        let parsed = parse_in_child(argv, &[]);
        assert!(parsed.starts_with("error:"), "{argv:?} accepted: {parsed}");
    }
}

#[test]
fn settings_come_from_args() {
    let args = Args::try_parse_from([
        "inpool",
        "--namespace=a",
        "--watch-filter=",
        "--concurrency=3",
        "--leader-elect",
        "--identity=me",
        "--leader-election-lease-duration=4",
    ])
    .unwrap();
    assert_eq!(
        args.settings(),
        Settings {
            namespace: Some("a".into()),
            watch_filter: None,
            concurrency: 3,
            ..Settings::default()
        }
    );
    let lease = args.lease_settings();
    assert_eq!(lease.identity, "me");
    assert_eq!(lease.duration, Duration::from_secs(4));
    assert_eq!(lease.name, "inpool-leader");
}

#[test]
fn audit_durations_must_be_positive() {
    assert_eq!(parse_positive_duration("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(parse_positive_duration("1"), Ok(Duration::from_secs(1)));
    assert!(parse_positive_duration("0s").is_err());
    assert!(parse_positive_duration("soon").is_err());
}

#[test]
fn lease_durations() {
    assert_eq!(parse_lease_duration("15s"), Ok(Duration::from_secs(15)));
    assert_eq!(parse_lease_duration("15"), Ok(Duration::from_secs(15)));
    assert_eq!(parse_lease_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_lease_duration("1h"), Ok(Duration::from_secs(3600)));
    assert!(parse_lease_duration("2s").is_err());
    assert!(parse_lease_duration("1.5s").is_err());
    assert!(parse_lease_duration("15ms").is_err());
    assert!(parse_lease_duration("").is_err());
}

#[test]
fn identities_differ_per_call() {
    let a = default_identity();
    let b = default_identity();
    assert_ne!(a, b);
    let suffix = a.rsplit('-').next().unwrap();
    assert_eq!(suffix.len(), 8, "{a}");
}

/// What a command line does, in one value: what [`Args`] hands to the controllers, the
/// servers, the log and leader election, and the caveats logged at start.
#[derive(Debug)]
#[expect(
    dead_code,
    reason = "compared through its Debug text, across a process boundary"
)]
struct Effects {
    settings: Settings,
    health: SocketAddr,
    diagnostics: DiagnosticsSettings,
    log_format: LogFormat,
    log_filter: String,
    leader_elect: bool,
    /// Namespace, name, duration, renew deadline and retry period of the Lease.
    lease: (String, String, Duration, Option<Duration>, Option<Duration>),
    caveats: Vec<String>,
}

impl Effects {
    fn of(args: &Args) -> Effects {
        let lease = args.lease_settings();
        Effects {
            settings: args.settings(),
            health: args.health_bind_address,
            diagnostics: args.diagnostics(),
            log_format: args.log_format,
            log_filter: args.log_filter(),
            leader_elect: args.leader_elect,
            lease: (
                lease.namespace,
                lease.name,
                lease.duration,
                lease.renew_deadline,
                lease.retry_period,
            ),
            caveats: args.caveats(),
        }
    }

    /// The effects of no flags at all.
    fn defaults() -> Effects {
        Effects {
            settings: Settings::default(),
            health: "[::]:8081".parse().unwrap(),
            diagnostics: DiagnosticsSettings {
                address: "[::]:8443".parse().unwrap(),
                mode: DiagnosticsMode::Secure { cert_dir: None },
                tls: TlsPolicy::default(),
                plain_metrics: None,
            },
            log_format: LogFormat::Text,
            log_filter: "info".into(),
            leader_elect: false,
            lease: (
                "default".into(),
                DEFAULT_LEASE_NAME.into(),
                Duration::from_secs(15),
                None,
                None,
            ),
            caveats: vec![],
        }
    }
}

/// inpool's own Deployment args (`config/manager/manager.yaml`) after clusterctl's variable
/// defaults.
const INPOOL_COMPONENTS: &[&str] = &[
    "--leader-elect",
    "--log-format=json",
    "--diagnostics-address=:8443",
    "--insecure-diagnostics=false",
];

fn with_components(extra: &[&'static str]) -> Vec<&'static str> {
    INPOOL_COMPONENTS.iter().chain(extra).copied().collect()
}

fn caveats(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|l| l.to_string()).collect()
}

/// Every command line Cluster API's tooling writes for a provider's manager, with the effect
/// each has on inpool. The README's table of accepted flags says the same.
#[test]
fn the_flags_cluster_api_tooling_writes_are_accepted_with_their_meaning() {
    let gates = "MachinePool=true,ClusterTopology=false,RuntimeSDK=false,\
        MachineSetPreflightChecks=true,MachineWaitForVolumeDetachConsiderVolumeAttachments=true,\
        PriorityQueue=true,ReconcilerRateLimiting=true,InPlaceUpdates=false,\
        MachineTaintPropagation=false";
    let capi_core_gates = format!("--feature-gates={gates}");
    let no_gates = |gates: &str| -> Vec<String> {
        gates
            .split(',')
            .map(|g| format!("--feature-gates {g} has no effect: inpool has no feature gates"))
            .collect()
    };
    let table: Vec<(&str, Vec<&str>, Effects)> = vec![
        (
            "the reference provider's Deployment (config/manager/manager.yaml)",
            vec!["--leader-elect"],
            Effects {
                leader_elect: true,
                ..Effects::defaults()
            },
        ),
        (
            "every flag of the reference provider's main.go and CAPI's util/flags",
            vec![
                "--kubeconfig=/etc/kubeconfig",
                "--health-probe-bind-address=:9440",
                "--leader-elect=true",
                "--namespace=team-a",
                "--watch-filter=blue",
                "--webhook-port=9443",
                "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
                "--webhook-cert-name=tls.crt",
                "--webhook-key-name=tls.key",
                "--diagnostics-address=:8443",
                "--insecure-diagnostics=false",
                "--tls-min-version=VersionTLS13",
                "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256",
                "--tls-curve-preferences=23,29",
            ],
            Effects {
                settings: Settings {
                    namespace: Some("team-a".into()),
                    watch_filter: Some("blue".into()),
                    ..Settings::default()
                },
                health: "[::]:9440".parse().unwrap(),
                diagnostics: DiagnosticsSettings {
                    tls: TlsPolicy {
                        min_version: tls::MinVersion::Tls13,
                        cipher_suites: vec![
                            rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                        ],
                        groups: vec![rustls::NamedGroup::secp256r1, rustls::NamedGroup::X25519],
                    },
                    ..Effects::defaults().diagnostics
                },
                leader_elect: true,
                caveats: caveats(&[
                    "--webhook-port=9443 has no effect: inpool serves no webhooks (its CRDs \
                     validate with CEL rules)",
                    "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs has no effect: \
                     inpool serves no webhooks (its CRDs validate with CEL rules)",
                    "--webhook-cert-name=tls.crt has no effect: inpool serves no webhooks (its \
                     CRDs validate with CEL rules)",
                    "--webhook-key-name=tls.key has no effect: inpool serves no webhooks (its \
                     CRDs validate with CEL rules)",
                ]),
                ..Effects::defaults()
            },
        ),
        (
            "CAPI core's Deployment (core/config/manager/manager.yaml, clusterctl's defaults)",
            vec![
                "--leader-elect",
                "--diagnostics-address=:8443",
                "--insecure-diagnostics=false",
                &capi_core_gates,
            ],
            Effects {
                leader_elect: true,
                caveats: no_gates(gates),
                ..Effects::defaults()
            },
        ),
        (
            "inpool's components, CAPI_INSECURE_DIAGNOSTICS=true",
            vec![
                "--leader-elect",
                "--log-format=json",
                "--diagnostics-address=:8080",
                "--insecure-diagnostics=true",
            ],
            Effects {
                diagnostics: DiagnosticsSettings {
                    address: "[::]:8080".parse().unwrap(),
                    mode: DiagnosticsMode::Insecure,
                    ..Effects::defaults().diagnostics
                },
                log_format: LogFormat::Json,
                leader_elect: true,
                ..Effects::defaults()
            },
        ),
        (
            "cluster-api-operator v0.25.0, every manager setting, over inpool's components",
            with_components(&[
                "--ipaddressclaim-concurrency=8",
                "--max-concurrent-reconciles=4",
                "--namespace=team-a",
                "--health-addr=:9440",
                "--leader-elect=true",
                "--leader-election-id=inpool-system/inpool-lease",
                "--leader-elect-lease-duration=15s",
                "--leader-elect-renew-deadline=10s",
                "--leader-elect-retry-period=2s",
                "--metrics-bind-addr=:8080",
                "--webhook-host=0.0.0.0",
                "--webhook-port=9443",
                "--webhook-cert-dir=/tmp/certs",
                "--sync-period=600s",
                "--profiler-address=localhost:6060",
                "--v=4",
                "--feature-gates=SomeGate=true",
            ]),
            Effects {
                settings: Settings {
                    namespace: Some("team-a".into()),
                    concurrency: 8,
                    ..Settings::default()
                },
                health: "[::]:9440".parse().unwrap(),
                diagnostics: DiagnosticsSettings {
                    plain_metrics: Some("[::]:8080".parse().unwrap()),
                    ..Effects::defaults().diagnostics
                },
                log_format: LogFormat::Json,
                log_filter: "info,inpool=debug".into(),
                leader_elect: true,
                lease: (
                    "inpool-system".into(),
                    "inpool-lease".into(),
                    Duration::from_secs(15),
                    Some(Duration::from_secs(10)),
                    Some(Duration::from_secs(2)),
                ),
                caveats: caveats(&[
                    "--feature-gates SomeGate=true has no effect: inpool has no feature gates",
                    "--sync-period=600s has no effect: inpool keeps no informer resync; its \
                     audit (--audit-interval) re-reads the API server and corrects drift",
                    "--profiler-address=localhost:6060 has no effect: inpool serves no pprof",
                    "--webhook-host=0.0.0.0 has no effect: inpool serves no webhooks (its CRDs \
                     validate with CEL rules)",
                    "--webhook-port=9443 has no effect: inpool serves no webhooks (its CRDs \
                     validate with CEL rules)",
                    "--webhook-cert-dir=/tmp/certs has no effect: inpool serves no webhooks (its \
                     CRDs validate with CEL rules)",
                    "--metrics-bind-address=[::]:8080 is deprecated: it serves /metrics over \
                     plain HTTP to anyone; the diagnostics server ([::]:8443) serves it over \
                     HTTPS with authentication",
                ]),
            },
        ),
        (
            "cluster-api-operator with leader election off, over inpool's components",
            with_components(&["--leader-elect=false", "--insecure-diagnostics=false"]),
            Effects {
                log_format: LogFormat::Json,
                ..Effects::defaults()
            },
        ),
    ];
    for (source, argv, expected) in table {
        assert_eq!(
            effects_in_child(&argv),
            format!("{expected:?}"),
            "{source}: {argv:?}"
        );
    }
}

#[test]
fn what_nobody_knows_fails_and_names_the_flag() {
    for (argv, named) in [
        (&["--made-up-flag=1"][..], "--made-up-flag"),
        (
            &["--inclusterippool-concurrency=4"],
            "--inclusterippool-concurrency",
        ),
        (&["--leader-elect=yes"], "yes"),
        (&["--insecure-diagnostics", "false"], "false"),
        (&["--v=loud"], "loud"),
        (&["--feature-gates=MachinePool"], "MachinePool"),
        (&["--feature-gates=MachinePool=maybe"], "maybe"),
        (&["--leader-election-id=Ns/Lease"], "Ns/Lease"),
        (&["--tls-min-version=1.2"], "1.2"),
        (&["--tls-cipher-suites=TLS_NOT_A_SUITE"], "TLS_NOT_A_SUITE"),
        (&["--tls-curve-preferences=7"], "7"),
        (&["--sync-period=10 minutes"], "10 minutes"),
        (
            &["--leader-elect-renew-deadline=20s"],
            "--leader-elect-renew-deadline",
        ),
        (
            &[
                "--leader-elect-renew-deadline=10s",
                "--leader-elect-retry-period=10s",
            ],
            "--leader-elect-retry-period",
        ),
        (&["--leader-elect-retry-period=1500ms"], "1500ms"),
        (&["--v=2", "--log-level=debug"], "--log-level and --v"),
    ] {
        let effects = effects_in_child(argv);
        assert!(
            effects.starts_with("error:") && effects.contains(named),
            "{argv:?}: {effects}"
        );
    }
}

#[test]
fn booleans_take_go_spellings_and_the_last_flag_wins() {
    let leads = |argv: &[&str]| {
        let args = Args::try_parse_checked(std::iter::once("inpool").chain(argv.iter().copied()))
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        args.leader_elect
    };
    for yes in [
        "--leader-elect",
        "--leader-elect=true",
        "--leader-elect=1",
        "--leader-elect=T",
    ] {
        assert!(leads(&[yes]), "{yes}");
    }
    for no in [
        "--leader-elect=false",
        "--leader-elect=0",
        "--leader-elect=F",
    ] {
        assert!(!leads(&[no]), "{no}");
    }
    assert!(!leads(&["--leader-elect", "--leader-elect=false"]));
    assert!(leads(&["--leader-elect=false", "--leader-elect"]));
    // The environment variable takes the same spellings.
    assert!(parse_in_child(&[], &[("INPOOL_LEADER_ELECT", "True")]).contains("leader_elect: true"));
}

#[test]
fn verbosity_maps_to_a_log_filter_and_log_level_wins() {
    let filter = |argv: &[&str], env: &[(&str, &str)]| parse_in_child(argv, env);
    assert!(filter(&["--v=1"], &[]).contains("verbosity: Some(1)"));
    let args = |argv: &[&str]| {
        Args::try_parse_checked(std::iter::once("inpool").chain(argv.iter().copied())).unwrap()
    };
    assert_eq!(args(&["--v=0"]).log_filter(), "info");
    assert_eq!(args(&["-v=2"]).log_filter(), "info,inpool=debug");
    assert_eq!(args(&["--v", "6"]).log_filter(), "debug,inpool=trace");
    // RUST_LOG in the environment and --v on the command line: RUST_LOG, with a caveat.
    assert!(
        effects_in_child_with_env(&["--v=4"], &[("RUST_LOG", "warn")])
            .contains("log_filter: \"warn\"")
    );
    assert!(
        effects_in_child_with_env(&["--v=4"], &[("RUST_LOG", "warn")])
            .contains("--v=4 has no effect")
    );
}

fn effects_in_child_with_env(argv: &[&str], env: &[(&str, &str)]) -> String {
    child_line(argv, env, "EFFECTS: ")
}

#[test]
fn durations_are_read_as_go_writes_them() {
    let cases = [
        ("15s", Duration::from_secs(15)),
        ("15", Duration::from_secs(15)),
        ("1m30s", Duration::from_secs(90)),
        ("1.5h", Duration::from_secs(5400)),
        ("500ms", Duration::from_millis(500)),
        ("2us", Duration::from_micros(2)),
        ("3µs", Duration::from_micros(3)),
        (".5s", Duration::from_millis(500)),
        ("0", Duration::ZERO),
        ("+10m", Duration::from_secs(600)),
    ];
    for (text, expected) in cases {
        assert_eq!(parse_duration(text), Ok(expected), "{text}");
    }
    for bad in ["", "-1s", "1d", "s", "1.s.5", "1m30", ".s", "10 minutes"] {
        assert!(parse_duration(bad).is_err(), "{bad} accepted");
    }
}

#[test]
fn clusterctl_variables_left_in_the_args_take_their_defaults() {
    assert_eq!(
        clusterctl_defaults("--diagnostics-address=${CAPI_DIAGNOSTICS_ADDRESS:=:8443}"),
        Some("--diagnostics-address=:8443".into())
    );
    assert_eq!(
        clusterctl_defaults("--feature-gates=A=${EXP_A:=true},B=${EXP_B:=false}"),
        Some("--feature-gates=A=true,B=false".into())
    );
    assert_eq!(clusterctl_defaults("--namespace=team-a"), None);
    // Only clusterctl's form with a default: anything else is left to fail where it is used.
    assert_eq!(clusterctl_defaults("--namespace=${NAMESPACE}"), None);
    assert_eq!(clusterctl_defaults("--x=${lower:=1}"), None);
    assert_eq!(clusterctl_defaults("--x=${UNCLOSED:=1"), None);
    // inpool's own components applied with `kubectl apply -k`: it starts, and says why.
    let effects = effects_in_child(&[
        "--leader-elect",
        "--diagnostics-address=${CAPI_DIAGNOSTICS_ADDRESS:=:8443}",
        "--insecure-diagnostics=${CAPI_INSECURE_DIAGNOSTICS:=false}",
    ]);
    let expected = Effects {
        leader_elect: true,
        caveats: caveats(&[
            "--diagnostics-address=${CAPI_DIAGNOSTICS_ADDRESS:=:8443} still holds a clusterctl \
             variable (the manifests were applied without clusterctl or cluster-api-operator): \
             its default applies",
            "--insecure-diagnostics=${CAPI_INSECURE_DIAGNOSTICS:=false} still holds a \
             clusterctl variable (the manifests were applied without clusterctl or \
             cluster-api-operator): its default applies",
        ]),
        ..Effects::defaults()
    };
    assert_eq!(effects, format!("{expected:?}"));
}

#[test]
fn lease_ids_and_feature_gates() {
    assert_eq!(
        parse_lease_id("inpool-system/inpool-lease"),
        Ok(LeaseId {
            namespace: Some("inpool-system".into()),
            name: "inpool-lease".into()
        })
    );
    assert_eq!(
        parse_lease_id("7bb7acb4.ipam.cluster.x-k8s.io"),
        Ok(LeaseId {
            namespace: None,
            name: "7bb7acb4.ipam.cluster.x-k8s.io".into()
        })
    );
    for bad in ["", "/name", "ns/", "a/b/c", "UPPER"] {
        assert!(parse_lease_id(bad).is_err(), "{bad} accepted");
    }
    assert_eq!(
        parse_feature_gates("A=true, B=false,"),
        Ok(FeatureGates(vec![("A".into(), true), ("B".into(), false)]))
    );
    assert_eq!(parse_feature_gates(""), Ok(FeatureGates(vec![])));
}
