//! What the flags come to: the controllers' [`Settings`], the leader election's
//! [`LeaseSettings`], the diagnostics server's settings, the log filter, and the caveats the
//! binary logs at start for flags it accepts but cannot honour as asked. Nothing here fails on
//! flags [`Args::check`](super::Args) accepted: what cannot be honoured is a caveat.
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::settings::{LeaseSettings, Settings};
use crate::telemetry::tls::{self, TlsPolicy};

use super::args::Args;
use super::values::{FeatureGates, LeaseId};

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
