//! The plain settings the library's parts take from the command line: [`Settings`] for the
//! controllers, [`LeaseSettings`] for leader election, [`LogFormat`] for logging.
//!
//! They sit below every part that reads them (`telemetry`, `controllers`, `leader`) and above
//! none: `cli` parses the flags into them, and nothing here knows about flags beyond the
//! `ValueEnum` that lets clap parse a [`LogFormat`].
use std::time::Duration;

use clap::ValueEnum;

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (for a terminal).
    Text,
    /// One JSON object per line (for log collectors in a cluster).
    Json,
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
    /// How long a reservation whose claim has no `IPAddress` yet is left to its writer.
    pub stray_reservation_age: Duration,
    /// Allocate even while the reference provider's Lease is live (see
    /// `controllers::sources::writers`).
    pub ignore_reference_provider_lease: bool,
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
            ignore_reference_provider_lease: false,
        }
    }
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
    /// How long the leader works on without a confirmed renewal; `None`: derived from
    /// `duration` (see [`crate::leader::Timing`]).
    pub renew_deadline: Option<Duration>,
    /// Time between renewals, and between a standby's looks; `None`: derived.
    pub retry_period: Option<Duration>,
}

impl LeaseSettings {
    /// A Lease of this name, namespace, identity and duration, with the derived timings.
    pub fn new(namespace: &str, name: &str, identity: &str, duration: Duration) -> LeaseSettings {
        LeaseSettings {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
            renew_deadline: None,
            retry_period: None,
        }
    }
}
