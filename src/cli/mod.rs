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
//!
//! One concern per file: `args` (the flags), `values` (parsing one flag's value),
//! `settings` (what the flags come to).

mod args;
mod settings;
mod values;

pub use crate::settings::{LeaseSettings, LogFormat, Settings};
pub use args::{Args, DEFAULT_LEASE_NAME};
pub use settings::{DiagnosticsMode, DiagnosticsSettings, default_identity};
pub use values::{
    FeatureGates, LeaseId, MIN_LEASE_DURATION, clusterctl_defaults, parse_bind_address,
    parse_duration, parse_feature_gates, parse_go_bool, parse_lease_duration, parse_lease_id,
    parse_log_filter, parse_positive_duration, parse_whole_seconds,
};

#[cfg(test)]
mod tests;
