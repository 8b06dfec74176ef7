//! Command line and environment of the `inpool` binary.
//!
//! Every flag can also be given through the environment variable named in its help text; a flag
//! on the command line wins over the variable. [`Args`] is what the binary parses; [`Settings`]
//! is the plain data the controllers need; [`LeaseSettings`] is what leader election needs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Default name of the leader election Lease.
pub const DEFAULT_LEASE_NAME: &str = "inpool-leader";
/// Shortest lease duration accepted: the holder renews a third of the duration before expiry,
/// so the duration must leave at least one whole second for that.
pub const MIN_LEASE_DURATION: Duration = Duration::from_secs(3);

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (for a terminal).
    Text,
    /// One JSON object per line (for log collectors in a cluster).
    Json,
}

/// The `inpool` controller: a Cluster API IPAM provider that hands out addresses from
/// `InClusterIPPool` and `GlobalInClusterIPPool` pools, and IPv6 sub-prefixes from
/// `InClusterPrefixPool` and `GlobalInClusterPrefixPool` pools.
#[derive(Clone, Debug, Parser)]
#[command(name = "inpool", version, about, long_about = None)]
pub struct Args {
    /// Kubeconfig file(s) to use (a path list like `KUBECONFIG` is merged). Without it inpool
    /// uses the in-cluster service account, then the usual kubeconfig inference
    /// (`~/.kube/config`).
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Watch claims in this namespace only (default: all namespaces). Global pools are always
    /// watched cluster-wide.
    #[arg(long, env = "INPOOL_NAMESPACE", value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// Only handle objects whose `cluster.x-k8s.io/watch-filter` label has this value.
    #[arg(long, env = "INPOOL_WATCH_FILTER", value_name = "VALUE")]
    pub watch_filter: Option<String>,

    /// How many claims are reconciled at once (0: no limit).
    #[arg(long, env = "INPOOL_CONCURRENCY", default_value_t = 16)]
    pub concurrency: u16,

    /// Address of the diagnostics server, which serves `/metrics`: over HTTPS, to callers the
    /// API server authenticates (TokenReview) and authorizes (SubjectAccessReview of `get` on
    /// the non-resource URL `/metrics`), unless `--insecure-diagnostics`. `:PORT` means every
    /// interface, IPv6 and IPv4 (`[::]:PORT`, or `0.0.0.0:PORT` where there is no IPv6).
    #[arg(
        long,
        env = "INPOOL_DIAGNOSTICS_ADDRESS",
        default_value = ":8443",
        value_name = "ADDR",
        value_parser = parse_bind_address
    )]
    pub diagnostics_address: SocketAddr,

    /// Serve `/metrics` on the diagnostics address over plain HTTP to anyone, without
    /// authentication or authorization.
    #[arg(
        long,
        env = "INPOOL_INSECURE_DIAGNOSTICS",
        conflicts_with = "diagnostics_cert_dir"
    )]
    pub insecure_diagnostics: bool,

    /// Directory holding the diagnostics server's certificate `tls.crt` and key `tls.key` (PEM;
    /// re-read every 10 s, so a renewed certificate is used without a restart). Without it a
    /// self-signed certificate is generated at start.
    #[arg(long, env = "INPOOL_DIAGNOSTICS_CERT_DIR", value_name = "DIR")]
    pub diagnostics_cert_dir: Option<PathBuf>,

    /// Deprecated: `--diagnostics-address ADDR --insecure-diagnostics`. Kept so that existing
    /// command lines keep serving plain `/metrics` where they did; to be removed in a later
    /// release.
    #[arg(
        long,
        env = "INPOOL_METRICS_BIND_ADDRESS",
        value_name = "ADDR",
        value_parser = parse_bind_address,
        conflicts_with_all = ["diagnostics_address", "diagnostics_cert_dir"]
    )]
    pub metrics_bind_address: Option<SocketAddr>,

    /// Address of the plain HTTP server for `/healthz` and `/readyz`. With
    /// `--insecure-diagnostics` and the same address as the diagnostics, one server answers all
    /// three paths. `:PORT` as for `--diagnostics-address`.
    #[arg(
        long,
        env = "INPOOL_HEALTH_BIND_ADDRESS",
        default_value = ":8081",
        value_name = "ADDR",
        value_parser = parse_bind_address
    )]
    pub health_bind_address: SocketAddr,

    /// Log format: `text` for people, `json` for log collectors.
    #[arg(long, env = "INPOOL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log level or filter, in `tracing` EnvFilter syntax (e.g. `info`, `inpool=debug,kube=warn`).
    #[arg(
        long,
        env = "RUST_LOG",
        default_value = "info",
        value_name = "FILTER",
        value_parser = parse_log_filter
    )]
    pub log_level: String,

    /// Run the controllers only while holding the leader election Lease, so that several
    /// replicas can run and only one writes.
    #[arg(long, env = "INPOOL_LEADER_ELECT")]
    pub leader_elect: bool,

    /// Namespace of the leader election Lease (default: the pod's namespace from
    /// `POD_NAMESPACE`, else `default`).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        default_value = "default",
        value_name = "NAMESPACE"
    )]
    pub leader_election_namespace: String,

    /// Name of the leader election Lease.
    #[arg(long, env = "INPOOL_LEADER_ELECTION_LEASE_NAME", default_value = DEFAULT_LEASE_NAME, value_name = "NAME")]
    pub leader_election_lease_name: String,

    /// How long the Lease stays valid after its last renewal, e.g. `15s`, `1m` (at least 3s).
    /// A standby takes over at most this long after the leader stops renewing.
    #[arg(
        long,
        env = "INPOOL_LEADER_ELECTION_LEASE_DURATION",
        default_value = "15s",
        value_name = "DURATION",
        value_parser = parse_lease_duration
    )]
    pub leader_election_lease_duration: Duration,

    /// This instance's identity in the Lease (default: `POD_NAME`, else the host name, plus a
    /// random suffix).
    #[arg(long, env = "INPOOL_IDENTITY", value_name = "ID")]
    pub identity: Option<String>,

    /// How often the audit compares what inpool holds in memory with the API server (pools,
    /// reservations, `IPAddress`es), corrects drift and collects stray reservations, e.g. `10m`.
    /// It also runs shortly after every re-list of a watch.
    #[arg(
        long,
        env = "INPOOL_AUDIT_INTERVAL",
        default_value = "10m",
        value_name = "DURATION",
        value_parser = parse_positive_duration
    )]
    pub audit_interval: Duration,

    /// How old a reservation must be before the audit may delete it as stray (its claim is gone,
    /// or holds another address). Longer than any gap between a reservation and its
    /// `IPAddress` that a live process can have.
    #[arg(
        long,
        env = "INPOOL_STRAY_RESERVATION_AGE",
        default_value = "2m",
        value_name = "DURATION",
        value_parser = parse_positive_duration
    )]
    pub stray_reservation_age: Duration,
}

/// What the controllers need from the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Watch claims in this namespace only; `None`: all namespaces.
    pub namespace: Option<String>,
    /// Value of the `cluster.x-k8s.io/watch-filter` label to select objects by.
    pub watch_filter: Option<String>,
    /// Claims reconciled at once (0: unbounded).
    pub concurrency: u16,
    /// Time between two audits (see `controllers::audit`).
    pub audit_interval: Duration,
    /// Minimum age of a reservation the audit deletes as stray.
    pub stray_reservation_age: Duration,
}

impl Default for Settings {
    /// The binary's defaults.
    fn default() -> Settings {
        Settings {
            namespace: None,
            watch_filter: None,
            concurrency: 16,
            audit_interval: Duration::from_secs(600),
            stray_reservation_age: Duration::from_secs(120),
        }
    }
}

/// How `/metrics` is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiagnosticsMode {
    /// HTTPS, only to callers the API server authenticates and authorizes; the certificate from
    /// `cert_dir` (`tls.crt`, `tls.key`), else self-signed.
    Secure { cert_dir: Option<PathBuf> },
    /// Plain HTTP to anyone.
    Insecure,
}

/// Where and how `/metrics` is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiagnosticsSettings {
    pub address: SocketAddr,
    pub mode: DiagnosticsMode,
    /// Given through the deprecated `--metrics-bind-address` (the binary warns).
    pub deprecated_flag: bool,
}

/// What leader election needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// Holder identity written into the Lease; unique per process.
    pub identity: String,
    /// Validity of the Lease after each renewal.
    pub duration: Duration,
}

impl Args {
    /// The controllers' settings.
    pub fn settings(&self) -> Settings {
        Settings::from(self)
    }

    /// The leader election settings (identity generated when not given).
    pub fn lease_settings(&self) -> LeaseSettings {
        LeaseSettings {
            namespace: self.leader_election_namespace.clone(),
            name: self.leader_election_lease_name.clone(),
            identity: self.identity.clone().unwrap_or_else(default_identity),
            duration: self.leader_election_lease_duration,
        }
    }
}

impl Args {
    /// The diagnostics server's settings; `--metrics-bind-address` stands for
    /// `--diagnostics-address` with `--insecure-diagnostics`.
    pub fn diagnostics(&self) -> DiagnosticsSettings {
        match self.metrics_bind_address {
            Some(address) => DiagnosticsSettings {
                address,
                mode: DiagnosticsMode::Insecure,
                deprecated_flag: true,
            },
            None => DiagnosticsSettings {
                address: self.diagnostics_address,
                mode: if self.insecure_diagnostics {
                    DiagnosticsMode::Insecure
                } else {
                    DiagnosticsMode::Secure {
                        cert_dir: self.diagnostics_cert_dir.clone(),
                    }
                },
                deprecated_flag: false,
            },
        }
    }
}

impl From<&Args> for Settings {
    fn from(args: &Args) -> Settings {
        Settings {
            namespace: args.namespace.clone().filter(|s| !s.is_empty()),
            watch_filter: args.watch_filter.clone().filter(|s| !s.is_empty()),
            concurrency: args.concurrency,
            audit_interval: args.audit_interval,
            stray_reservation_age: args.stray_reservation_age,
        }
    }
}

/// `POD_NAME`, else `HOSTNAME`, else the kernel's host name, else `inpool`; then `-` and 8
/// random hex digits, so that a restarted pod with the same name never reuses a stale lease hold.
pub fn default_identity() -> String {
    let base = ["POD_NAME", "HOSTNAME"]
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .chain(std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "inpool".to_string());
    format!("{base}-{:08x}", random_u32())
}

/// A random number from the standard library's randomly seeded hasher (no extra dependency).
fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    hasher.finish() as u32
}

/// Parses a listen address: `HOST:PORT` (`[::1]:PORT` for IPv6), or `:PORT` for every
/// interface, as Go's `net.Listen` and CAPI's `--diagnostics-address :8443`: the IPv6 wildcard
/// `[::]:PORT`, which on Linux also accepts IPv4 (the servers fall back to `0.0.0.0:PORT` where
/// IPv6 is unavailable, [`crate::telemetry::server::listen`]), so that IPv6-only clusters work.
pub fn parse_bind_address(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    let full = match text.strip_prefix(':') {
        Some(port) => format!("[::]:{port}"),
        None => text.to_string(),
    };
    full.parse().map_err(|_| {
        format!(
            "`{text}` is not a listen address like :8443, 0.0.0.0:8443, 127.0.0.1:8443 or [::]:8443"
        )
    })
}

/// Parses `15s`, `15`, `2m`, `1h` (whole units) into a duration of at least
/// [`MIN_LEASE_DURATION`].
pub fn parse_lease_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration < MIN_LEASE_DURATION {
        return Err(format!(
            "the lease duration must be at least {}s",
            MIN_LEASE_DURATION.as_secs()
        ));
    }
    Ok(duration)
}

/// Parses a duration like [`parse_lease_duration`], greater than zero.
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        return Err("the duration must be greater than zero".to_string());
    }
    Ok(duration)
}

/// Parses `15s`, `15`, `2m`, `1h` (whole units).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 15s, 2m or 1h"))?;
    let seconds = match unit {
        "s" => Some(value),
        "m" => value.checked_mul(60),
        "h" => value.checked_mul(3600),
        _ => None,
    }
    .ok_or_else(|| format!("`{text}` is not a duration like 15s, 2m or 1h"))?;
    Ok(Duration::from_secs(seconds))
}

/// Accepts only filters that `tracing_subscriber::EnvFilter` can parse, so that a typo fails at
/// start-up instead of silently logging nothing.
pub fn parse_log_filter(text: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(text)
        .map(|_| text.to_string())
        .map_err(|e| format!("invalid log filter `{text}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    const CHILD_MARKER: &str = "INPOOL_CLI_TEST_CHILD_ARGS";

    /// Parses `argv` in a child process of this test binary whose environment is exactly `env`
    /// (the crate forbids `unsafe`, so the test cannot change its own environment). Returns the
    /// child's `Debug` rendering of the parsed [`Args`], or its error text.
    fn parse_in_child(argv: &[&str], env: &[(&str, &str)]) -> String {
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
            .find_map(|l| l.split_once("PARSED: ").map(|(_, rest)| rest))
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
        match Args::try_parse_from(argv) {
            Ok(args) => println!("PARSED: {args:?}"),
            Err(e) => println!("PARSED: error: {}", e.to_string().replace('\n', " ")),
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
            diagnostics_address: "[::]:8443".parse().unwrap(),
            insecure_diagnostics: false,
            diagnostics_cert_dir: None,
            metrics_bind_address: None,
            health_bind_address: "[::]:8081".parse().unwrap(),
            log_format: LogFormat::Text,
            log_level: "info".into(),
            leader_elect: false,
            leader_election_namespace: "default".into(),
            leader_election_lease_name: "inpool-leader".into(),
            leader_election_lease_duration: Duration::from_secs(15),
            identity: None,
            audit_interval: Duration::from_secs(600),
            stray_reservation_age: Duration::from_secs(120),
        };
        assert_eq!(parsed, format!("{expected:?}"));
        assert_eq!(expected.settings(), Settings::default());
        assert_eq!(
            expected.diagnostics(),
            DiagnosticsSettings {
                address: "[::]:8443".parse().unwrap(),
                mode: DiagnosticsMode::Secure { cert_dir: None },
                deprecated_flag: false,
            }
        );
    }

    #[test]
    fn diagnostics_flags() {
        let parse = |argv: &[&str]| {
            Args::try_parse_from(std::iter::once("inpool").chain(argv.iter().copied()))
                .map(|args| args.diagnostics())
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            parse(&[
                "--diagnostics-address=127.0.0.1:9443",
                "--diagnostics-cert-dir=/certs"
            ]),
            Ok(DiagnosticsSettings {
                address: "127.0.0.1:9443".parse().unwrap(),
                mode: DiagnosticsMode::Secure {
                    cert_dir: Some("/certs".into())
                },
                deprecated_flag: false,
            })
        );
        assert_eq!(
            parse(&["--insecure-diagnostics", "--diagnostics-address=[::1]:8080"]),
            Ok(DiagnosticsSettings {
                address: "[::1]:8080".parse().unwrap(),
                mode: DiagnosticsMode::Insecure,
                deprecated_flag: false,
            })
        );
        // The deprecated flag keeps its old meaning: plain HTTP on that address.
        assert_eq!(
            parse(&["--metrics-bind-address=:8080"]),
            Ok(DiagnosticsSettings {
                address: "[::]:8080".parse().unwrap(),
                mode: DiagnosticsMode::Insecure,
                deprecated_flag: true,
            })
        );
        for conflict in [
            &[
                "--metrics-bind-address=:8080",
                "--diagnostics-address=:8443",
            ][..],
            &[
                "--metrics-bind-address=:8080",
                "--diagnostics-cert-dir=/certs",
            ],
            &["--insecure-diagnostics", "--diagnostics-cert-dir=/certs"],
        ] {
            let error = parse(conflict).unwrap_err();
            assert!(
                error.contains("cannot be used with"),
                "{conflict:?}: {error}"
            );
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
            "log_level: \"inpool=debug\"",
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
        assert!(parsed.contains("log_level: \"warn\""), "{parsed}");
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
}
