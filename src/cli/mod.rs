//! Command line and environment of the `inpool` binary.
//!
//! Every flag can also be given through the environment variable named in its help text; a flag
//! on the command line wins over the variable. [`Args`] is what the binary parses
//! ([`Args::parse_checked`]); [`Settings`] is the plain data the controllers need;
//! [`LeaseSettings`] is what leader election needs.
//!
//! The flags follow Cluster API's managers, so that a Deployment written for the reference
//! provider or for CAPI core, or rendered by cluster-api-operator, starts inpool:
//!
//! - `--flag=value` and `--flag value`; a boolean takes `--flag`, `--flag=true` and
//!   `--flag=false` (and Go's other spellings of true and false: `1`, `t`, `T`, `TRUE`, `True`).
//! - A flag given twice: the last one wins, as with Go's pflag, so that cluster-api-operator may
//!   append `--leader-elect=false` to a Deployment that says `--leader-elect`.
//! - Cluster API's names are aliases where inpool has a flag of its own
//!   (`--health-probe-bind-address` for `--health-bind-address`, ...).
//! - Flags whose concept inpool lacks (webhooks, `--sync-period`, `--profiler-address`, feature
//!   gates) are accepted and logged once, at start, as having no effect ([`Args::caveats`]).
//!   A flag nobody knows fails, naming it.
//! - Durations in Go's syntax (`1m30s`, `500ms`), or a plain number of seconds.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser};

pub use crate::settings::{LeaseSettings, LogFormat, Settings};
use crate::telemetry::tls::{self, TlsPolicy};

/// Default name of the leader election Lease.
pub const DEFAULT_LEASE_NAME: &str = "inpool-leader";
/// Shortest lease duration accepted: the holder renews a third of the duration before expiry,
/// so the duration must leave at least one whole second for that.
pub const MIN_LEASE_DURATION: Duration = Duration::from_secs(3);

/// Heading of the flags accepted for compatibility with Cluster API's managers.
const WITHOUT_EFFECT: &str = "Accepted for compatibility with Cluster API managers (no effect)";

/// The `inpool` controller: a Cluster API IPAM provider that hands out addresses from
/// `InClusterIPPool` and `GlobalInClusterIPPool` pools, and IPv6 sub-prefixes from
/// `InClusterPrefixPool` and `GlobalInClusterPrefixPool` pools.
#[derive(Clone, Debug, Parser)]
#[command(name = "inpool", version, about, long_about = None, args_override_self = true)]
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

    /// How many claims are reconciled at once (0: no limit). `--max-concurrent-reconciles` is
    /// this flag under controller-runtime's name.
    #[arg(
        long,
        env = "INPOOL_CONCURRENCY",
        default_value_t = 16,
        visible_alias = "max-concurrent-reconciles"
    )]
    pub concurrency: u16,

    /// How many claims are reconciled at once, as cluster-api-operator names the concurrency of
    /// the `IPAddressClaim` kind; wins over `--concurrency`, as a kind's concurrency wins over
    /// the default in controller-runtime.
    #[arg(long, value_name = "N")]
    pub ipaddressclaim_concurrency: Option<u16>,

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
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        value_parser = parse_go_bool,
        action = ArgAction::Set
    )]
    pub insecure_diagnostics: bool,

    /// Directory holding the diagnostics server's certificate `tls.crt` and key `tls.key` (PEM;
    /// re-read every 10 s, so a renewed certificate is used without a restart). Without it a
    /// self-signed certificate is generated at start.
    #[arg(long, env = "INPOOL_DIAGNOSTICS_CERT_DIR", value_name = "DIR")]
    pub diagnostics_cert_dir: Option<PathBuf>,

    /// Lowest TLS version of the diagnostics server: `VersionTLS12` (TLS 1.2 and 1.3) or
    /// `VersionTLS13`.
    #[arg(
        long,
        env = "INPOOL_TLS_MIN_VERSION",
        default_value = "VersionTLS12",
        value_name = "VERSION"
    )]
    pub tls_min_version: String,

    /// Comma-separated TLS 1.2 cipher suites of the diagnostics server, in Go's names (e.g.
    /// `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`); TLS 1.3 suites are not configurable, as in
    /// Go. Default: every suite inpool's TLS implements.
    #[arg(
        long,
        env = "INPOOL_TLS_CIPHER_SUITES",
        value_delimiter = ',',
        value_name = "SUITES"
    )]
    pub tls_cipher_suites: Vec<String>,

    /// Comma-separated key exchange curves of the diagnostics server, as Go's numeric `CurveID`s
    /// (23: P-256, 24: P-384, 29: X25519). Default: all three.
    #[arg(
        long,
        env = "INPOOL_TLS_CURVE_PREFERENCES",
        value_delimiter = ',',
        value_name = "IDS"
    )]
    pub tls_curve_preferences: Vec<String>,

    /// Deprecated: also serve `/metrics` over plain HTTP, to anyone, on this address (as
    /// controller-runtime's `--metrics-bind-addr` did before the diagnostics server). Prefer
    /// the diagnostics server; to be removed in a later release.
    #[arg(
        long,
        env = "INPOOL_METRICS_BIND_ADDRESS",
        visible_alias = "metrics-bind-addr",
        value_name = "ADDR",
        value_parser = parse_bind_address
    )]
    pub metrics_bind_address: Option<SocketAddr>,

    /// Address of the plain HTTP server for `/healthz` and `/readyz`. With
    /// `--insecure-diagnostics` and the same address as the diagnostics, one server answers all
    /// three paths. `:PORT` as for `--diagnostics-address`. `--health-probe-bind-address` (the
    /// reference provider's) and `--health-addr` (cluster-api-operator's) are this flag.
    #[arg(
        long,
        env = "INPOOL_HEALTH_BIND_ADDRESS",
        default_value = ":8081",
        value_name = "ADDR",
        value_parser = parse_bind_address,
        visible_aliases = ["health-probe-bind-address", "health-addr"]
    )]
    pub health_bind_address: SocketAddr,

    /// Log format: `text` for people, `json` for log collectors. `--logging-format` (the
    /// Kubernetes components' name) is this flag.
    #[arg(
        long,
        env = "INPOOL_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text,
        visible_alias = "logging-format"
    )]
    pub log_format: LogFormat,

    /// Log level or filter, in `tracing` EnvFilter syntax (e.g. `info`, `inpool=debug,kube=warn`).
    /// Default: `info`, or what `--v` says. Wins over `--v`.
    #[arg(
        long,
        env = "RUST_LOG",
        value_name = "FILTER",
        value_parser = parse_log_filter
    )]
    pub log_level: Option<String>,

    /// Log verbosity as Kubernetes components take it: 0 and 1 log `info`, 2 to 4 add inpool's
    /// `debug`, 5 and more inpool's `trace`.
    #[arg(long = "v", short = 'v', value_name = "N")]
    pub verbosity: Option<u8>,

    /// Run the controllers only while holding the leader election Lease, so that several
    /// replicas can run and only one writes.
    #[arg(
        long,
        env = "INPOOL_LEADER_ELECT",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        value_parser = parse_go_bool,
        action = ArgAction::Set
    )]
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

    /// The leader election Lease as `NAMESPACE/NAME` (as cluster-api-operator writes it) or
    /// `NAME`; wins over `--leader-election-namespace` and `--leader-election-lease-name`.
    #[arg(long, value_name = "[NAMESPACE/]NAME", value_parser = parse_lease_id)]
    pub leader_election_id: Option<LeaseId>,

    /// How long the Lease stays valid after its last renewal, in whole seconds, e.g. `15s`,
    /// `1m` (at least 3s). A standby takes over at most this long after the leader stops
    /// renewing. `--leader-elect-lease-duration` (Cluster API's name) is this flag.
    #[arg(
        long,
        env = "INPOOL_LEADER_ELECTION_LEASE_DURATION",
        default_value = "15s",
        value_name = "DURATION",
        value_parser = parse_lease_duration,
        visible_alias = "leader-elect-lease-duration"
    )]
    pub leader_election_lease_duration: Duration,

    /// How long the leader goes on working without a confirmed renewal of the Lease; shorter
    /// than the lease duration. Default: the lease duration less a sixth of it (12.5s of 15s).
    #[arg(
        long,
        env = "INPOOL_LEADER_ELECT_RENEW_DEADLINE",
        value_name = "DURATION",
        value_parser = parse_positive_duration
    )]
    pub leader_elect_renew_deadline: Option<Duration>,

    /// How long after a renewal the leader renews again, and how often a standby looks for a
    /// released Lease, in whole seconds; at least half a second shorter than the renew
    /// deadline. Default: two thirds of the lease duration (10s of 15s) for the leader (half
    /// the renew deadline if only that is given), and 2s for a standby.
    #[arg(
        long,
        env = "INPOOL_LEADER_ELECT_RETRY_PERIOD",
        value_name = "DURATION",
        value_parser = parse_whole_seconds
    )]
    pub leader_elect_retry_period: Option<Duration>,

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

    /// How long a reservation whose claim exists but has no `IPAddress` yet is left to the
    /// process that made it, before the claim is woken to recover it. Longer than any gap between
    /// a reservation and its `IPAddress` that a live process can have. Stray reservations (claim
    /// gone, or realised with another address) are collected on evidence, without this wait.
    #[arg(
        long,
        env = "INPOOL_STRAY_RESERVATION_AGE",
        default_value = "2m",
        value_name = "DURATION",
        value_parser = parse_positive_duration
    )]
    pub stray_reservation_age: Duration,

    /// Allocate even while the reference IPAM provider's leader election Lease
    /// (`7bb7acb4.ipam.cluster.x-k8s.io`, any namespace) is held and renewed. Without it inpool
    /// logs an error naming the Lease and allocates nothing until it is gone or expired: the
    /// reference would hand out addresses inpool holds.
    #[arg(
        long,
        env = "INPOOL_IGNORE_REFERENCE_PROVIDER_LEASE",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        value_parser = parse_go_bool,
        action = ArgAction::Set
    )]
    pub ignore_reference_provider_lease: bool,

    /// Cluster API feature gates, `Name=true,Other=false`; inpool has none.
    #[arg(long, value_name = "GATES", value_parser = parse_feature_gates, help_heading = WITHOUT_EFFECT)]
    pub feature_gates: Option<FeatureGates>,

    /// A controller-runtime manager's informer resync period; inpool's audit
    /// (`--audit-interval`) is what re-reads the API server.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = WITHOUT_EFFECT)]
    pub sync_period: Option<Duration>,

    /// A controller-runtime manager's pprof address; inpool serves no pprof.
    #[arg(long, value_name = "ADDR", help_heading = WITHOUT_EFFECT)]
    pub profiler_address: Option<String>,

    /// Webhook server host; inpool serves no webhooks (its CRDs validate with CEL rules).
    #[arg(long, value_name = "HOST", help_heading = WITHOUT_EFFECT)]
    pub webhook_host: Option<String>,

    /// Webhook server port; inpool serves no webhooks.
    #[arg(long, value_name = "PORT", help_heading = WITHOUT_EFFECT)]
    pub webhook_port: Option<u16>,

    /// Webhook certificate directory; inpool serves no webhooks.
    #[arg(long, value_name = "DIR", help_heading = WITHOUT_EFFECT)]
    pub webhook_cert_dir: Option<PathBuf>,

    /// Webhook certificate file name; inpool serves no webhooks.
    #[arg(long, value_name = "NAME", help_heading = WITHOUT_EFFECT)]
    pub webhook_cert_name: Option<String>,

    /// Webhook key file name; inpool serves no webhooks.
    #[arg(long, value_name = "NAME", help_heading = WITHOUT_EFFECT)]
    pub webhook_key_name: Option<String>,

    /// The arguments that still held a clusterctl variable, `${NAME:=default}`, as given.
    #[arg(skip)]
    pub unsubstituted: Vec<String>,
}

/// `--leader-election-id`: the Lease's namespace (if given) and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseId {
    pub namespace: Option<String>,
    pub name: String,
}

/// `--feature-gates`: each gate and its value, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates(pub Vec<(String, bool)>);

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
    /// The TLS versions, suites and curves of the secure mode.
    pub tls: TlsPolicy,
    /// The deprecated plain `/metrics` address (`--metrics-bind-address`), if given.
    pub plain_metrics: Option<SocketAddr>,
}

impl Args {
    /// Parses the process's command line and environment, and checks what one flag alone
    /// cannot ([`Args::check`]); on an error prints it as clap does and exits 2.
    pub fn parse_checked() -> Args {
        Args::try_parse_checked(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// [`Args::parse_checked`] over `argv` (the program name first), returning the error.
    pub fn try_parse_checked<I, T>(argv: I) -> Result<Args, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut command = Args::command();
        let mut unsubstituted = Vec::new();
        let argv: Vec<std::ffi::OsString> = argv
            .into_iter()
            .map(Into::into)
            .map(|arg| match arg.to_str().and_then(clusterctl_defaults) {
                Some(substituted) => {
                    unsubstituted.push(arg.to_string_lossy().into_owned());
                    substituted.into()
                }
                None => arg,
            })
            .collect();
        let matches = command.try_get_matches_from_mut(argv)?;
        let mut args = Args::from_arg_matches(&matches)?;
        args.unsubstituted = unsubstituted;
        args.check(&matches)
            .map_err(|message| command.error(ErrorKind::ArgumentConflict, message))?;
        Ok(args)
    }

    /// What the flags say together: a certificate directory only for HTTPS, the deprecated
    /// plain metrics on a port of its own, a valid TLS policy and lease timing, and `--v` and
    /// `--log-level` not both on the command line.
    fn check(&self, matches: &ArgMatches) -> Result<(), String> {
        if self.insecure_diagnostics && self.diagnostics_cert_dir.is_some() {
            return Err(
                "--diagnostics-cert-dir is the certificate of the HTTPS diagnostics \
                        server, which --insecure-diagnostics=true turns off"
                    .into(),
            );
        }
        if let Some(plain) = self.metrics_bind_address
            && plain == self.diagnostics_address
            && plain.port() != 0
            && !self.insecure_diagnostics
        {
            return Err(format!(
                "--metrics-bind-address and --diagnostics-address are both {plain}: the \
                 diagnostics are served over HTTPS and the deprecated metrics over plain HTTP, \
                 so they need two ports"
            ));
        }
        let from_command_line =
            |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
        if from_command_line("log_level") && from_command_line("verbosity") {
            return Err("--log-level and --v both set the log filter: give one".into());
        }
        self.tls_policy()?;
        crate::leader::Timing::new(&self.lease_settings())?;
        Ok(())
    }

    /// The controllers' settings.
    pub fn settings(&self) -> Settings {
        Settings::from(self)
    }

    /// The log filter: `--log-level` (or `RUST_LOG`), else the one `--v` stands for, else
    /// `info`.
    pub fn log_filter(&self) -> String {
        match (&self.log_level, self.verbosity) {
            (Some(filter), _) => filter.clone(),
            (None, Some(0..=1) | None) => "info".to_string(),
            (None, Some(2..=4)) => "info,inpool=debug".to_string(),
            (None, Some(_)) => "debug,inpool=trace".to_string(),
        }
    }

    /// The leader election settings (identity generated when not given).
    pub fn lease_settings(&self) -> LeaseSettings {
        let (namespace, name) = match &self.leader_election_id {
            Some(LeaseId { namespace, name }) => (
                namespace
                    .clone()
                    .unwrap_or_else(|| self.leader_election_namespace.clone()),
                name.clone(),
            ),
            None => (
                self.leader_election_namespace.clone(),
                self.leader_election_lease_name.clone(),
            ),
        };
        LeaseSettings {
            namespace,
            name,
            identity: self.identity.clone().unwrap_or_else(default_identity),
            duration: self.leader_election_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        }
    }

    /// The diagnostics server's TLS policy.
    pub fn tls_policy(&self) -> Result<TlsPolicy, String> {
        Ok(self.tls_policy_and_caveats()?.0)
    }

    fn tls_policy_and_caveats(&self) -> Result<(TlsPolicy, Vec<String>), String> {
        let (min_version, version_caveat) = tls::parse_min_version(&self.tls_min_version)?;
        let (cipher_suites, mut caveats) = tls::parse_cipher_suites(&self.tls_cipher_suites)?;
        let (groups, curve_caveats) = tls::parse_curves(&self.tls_curve_preferences)?;
        caveats.extend(version_caveat);
        caveats.extend(curve_caveats);
        Ok((
            TlsPolicy {
                min_version,
                cipher_suites,
                groups,
            },
            caveats,
        ))
    }

    /// The diagnostics server's settings.
    pub fn diagnostics(&self) -> DiagnosticsSettings {
        DiagnosticsSettings {
            address: self.diagnostics_address,
            mode: if self.insecure_diagnostics {
                DiagnosticsMode::Insecure
            } else {
                DiagnosticsMode::Secure {
                    cert_dir: self.diagnostics_cert_dir.clone(),
                }
            },
            tls: self.tls_policy().unwrap_or_default(),
            plain_metrics: self.metrics_bind_address,
        }
    }

    /// One line for each flag given that inpool accepts but cannot honour as asked: flags
    /// without effect, deprecated flags, TLS choices its TLS lacks, `--v` under `--log-level`.
    /// The binary logs each as a warning at start.
    pub fn caveats(&self) -> Vec<String> {
        let mut caveats: Vec<String> = self
            .unsubstituted
            .iter()
            .map(|arg| {
                format!(
                    "{arg} still holds a clusterctl variable (the manifests were applied \
                     without clusterctl or cluster-api-operator): its default applies"
                )
            })
            .collect();
        let without_effect = |flag: String, reason: &str| format!("{flag} has no effect: {reason}");
        if let Some(FeatureGates(gates)) = &self.feature_gates {
            for (gate, value) in gates {
                caveats.push(without_effect(
                    format!("--feature-gates {gate}={value}"),
                    "inpool has no feature gates",
                ));
            }
        }
        if let Some(period) = self.sync_period {
            caveats.push(without_effect(
                format!("--sync-period={}s", period.as_secs()),
                "inpool keeps no informer resync; its audit (--audit-interval) re-reads the API \
                 server and corrects drift",
            ));
        }
        let webhook = "inpool serves no webhooks (its CRDs validate with CEL rules)";
        for (flag, value) in [
            ("--profiler-address", self.profiler_address.clone()),
            ("--webhook-host", self.webhook_host.clone()),
            ("--webhook-port", self.webhook_port.map(|p| p.to_string())),
            (
                "--webhook-cert-dir",
                self.webhook_cert_dir
                    .as_ref()
                    .map(|d| d.display().to_string()),
            ),
            ("--webhook-cert-name", self.webhook_cert_name.clone()),
            ("--webhook-key-name", self.webhook_key_name.clone()),
        ] {
            if let Some(value) = value {
                let reason = if flag == "--profiler-address" {
                    "inpool serves no pprof"
                } else {
                    webhook
                };
                caveats.push(without_effect(format!("{flag}={value}"), reason));
            }
        }
        if let Some(plain) = self.metrics_bind_address {
            caveats.push(format!(
                "--metrics-bind-address={plain} is deprecated: it serves /metrics over plain \
                 HTTP to anyone; the diagnostics server ({}) serves it{}",
                self.diagnostics_address,
                if self.insecure_diagnostics {
                    " too"
                } else {
                    " over HTTPS with authentication"
                }
            ));
        }
        if let (Some(_), Some(v)) = (&self.log_level, self.verbosity) {
            caveats.push(without_effect(
                format!("--v={v}"),
                "the log filter comes from RUST_LOG",
            ));
        }
        if let Ok((_, tls)) = self.tls_policy_and_caveats() {
            caveats.extend(tls);
        }
        caveats
    }
}

impl From<&Args> for Settings {
    fn from(args: &Args) -> Settings {
        Settings {
            namespace: args.namespace.clone().filter(|s| !s.is_empty()),
            watch_filter: args.watch_filter.clone().filter(|s| !s.is_empty()),
            concurrency: args.ipaddressclaim_concurrency.unwrap_or(args.concurrency),
            audit_interval: args.audit_interval,
            stray_reservation_age: args.stray_reservation_age,
            ignore_reference_provider_lease: args.ignore_reference_provider_lease,
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

/// `text` with each clusterctl variable `${NAME:=default}` replaced by its default; `None` if it
/// holds none. Manifests written for clusterctl carry such variables in a Deployment's args
/// (`--diagnostics-address=${CAPI_DIAGNOSTICS_ADDRESS:=:8443}`); applied without clusterctl
/// (`kubectl apply -k`, a GitOps tool), the variable reaches the process, which then behaves as
/// clusterctl would have made it with the variable unset.
pub fn clusterctl_defaults(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = text;
    let mut found = false;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let variable = after.find(":=").map(|end| &after[..end]).filter(|name| {
            name.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        });
        let Some(name) = variable else {
            out.push_str(&rest[..start + 2]);
            rest = after;
            continue;
        };
        let default_start = name.len() + 2;
        let Some(default_len) = after[default_start..].find('}') else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push_str(&after[default_start..default_start + default_len]);
        rest = &after[default_start + default_len + 1..];
        found = true;
    }
    out.push_str(rest);
    found.then_some(out)
}

/// Parses a lease duration: a duration ([`parse_duration`]) of whole seconds (a Lease counts
/// whole seconds), at least [`MIN_LEASE_DURATION`].
pub fn parse_lease_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_whole_seconds(text)?;
    if duration < MIN_LEASE_DURATION {
        return Err(format!(
            "the lease duration must be at least {}s",
            MIN_LEASE_DURATION.as_secs()
        ));
    }
    Ok(duration)
}

/// Parses a duration ([`parse_duration`]) of whole seconds, greater than zero.
pub fn parse_whole_seconds(text: &str) -> Result<Duration, String> {
    let duration = parse_positive_duration(text)?;
    if duration.subsec_nanos() != 0 {
        return Err(format!(
            "`{}` is not a whole number of seconds",
            text.trim()
        ));
    }
    Ok(duration)
}

/// Parses a duration ([`parse_duration`]) greater than zero.
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        return Err("the duration must be greater than zero".to_string());
    }
    Ok(duration)
}

/// Parses a duration in Go's syntax (`time.ParseDuration`: `15s`, `1m30s`, `1.5h`, `500ms`;
/// units `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), or a plain number of seconds (`15`). Negative
/// durations are refused. Hand-written: the crates that parse durations (humantime, ...) take
/// another syntax (`15days`, no fractions), and the point is to read what Go writes.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let invalid = || format!("`{text}` is not a duration like 15s, 1m30s, 500ms or 1h");
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map(Duration::from_secs).map_err(|_| invalid());
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() || rest.starts_with('-') {
        return Err(invalid());
    }
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let (number, tail) = rest.split_at(number_end);
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let per_unit: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(invalid()),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid())?
        };
        let mut part = whole.checked_mul(per_unit).ok_or_else(invalid)?;
        let mut scale = per_unit;
        for digit in fraction.bytes() {
            if !digit.is_ascii_digit() {
                return Err(invalid());
            }
            scale /= 10;
            part += u128::from(digit - b'0') * scale;
        }
        nanos = nanos.checked_add(part).ok_or_else(invalid)?;
        rest = tail;
    }
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| invalid())
}

/// Parses a boolean as Go's `strconv.ParseBool` does (`1`, `t`, `T`, `TRUE`, `true`, `True`,
/// and the same for false), the values a Go program's boolean flag takes.
pub fn parse_go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(format!("`{other}` is not a boolean: use true or false")),
    }
}

/// Parses `--leader-election-id`: `NAMESPACE/NAME` or `NAME`.
pub fn parse_lease_id(text: &str) -> Result<LeaseId, String> {
    let text = text.trim();
    let (namespace, name) = match text.split_once('/') {
        Some((namespace, name)) => (Some(namespace), name),
        None => (None, text),
    };
    let valid = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    if !valid(name) || namespace.is_some_and(|ns| !valid(ns)) {
        return Err(format!(
            "`{text}` is not a Lease as NAMESPACE/NAME or NAME (lower-case letters, digits, `-` \
             and `.`)"
        ));
    }
    Ok(LeaseId {
        namespace: namespace.map(str::to_string),
        name: name.to_string(),
    })
}

/// Parses `--feature-gates`: `Name=true,Other=false` (an empty value names no gate).
pub fn parse_feature_gates(text: &str) -> Result<FeatureGates, String> {
    text.split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (gate, value) = part.split_once('=').ok_or_else(|| {
                format!("`{part}` is not a feature gate as Name=true or Name=false")
            })?;
            let value = parse_go_bool(value.trim())
                .map_err(|e| format!("feature gate `{}`: {e}", gate.trim()))?;
            Ok((gate.trim().to_string(), value))
        })
        .collect::<Result<Vec<_>, String>>()
        .map(FeatureGates)
}

/// Accepts only filters that `tracing_subscriber::EnvFilter` can parse, so that a typo fails at
/// start-up instead of silently logging nothing.
pub fn parse_log_filter(text: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(text)
        .map(|_| text.to_string())
        .map_err(|e| format!("invalid log filter `{text}`: {e}"))
}

#[cfg(test)]
mod tests;
