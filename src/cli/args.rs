//! The flags: what `inpool` accepts on its command line and from its environment (names,
//! aliases, defaults, environment variables, help), and the checks that need several flags at
//! once. What a single value means is parsed in [`values`](super::values); what the flags
//! come to, in [`settings`](super::settings).
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser};

use crate::settings::LogFormat;

use super::values::{
    FeatureGates, LeaseId, clusterctl_defaults, parse_bind_address, parse_duration,
    parse_feature_gates, parse_go_bool, parse_lease_duration, parse_lease_id, parse_log_filter,
    parse_positive_duration, parse_whole_seconds,
};

/// Default name of the leader election Lease.
pub const DEFAULT_LEASE_NAME: &str = "inpool-leader";

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
}
