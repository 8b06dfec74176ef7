//! Logging: a `tracing` subscriber writing to standard error, as human-readable text or as one
//! JSON object per line. Text carries ANSI colour codes only when standard error is a terminal,
//! so that a pod's log, a file or a pipe reads clean.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub use crate::settings::LogFormat;

/// Installs the global subscriber. `level` is an EnvFilter directive (`info`,
/// `inpool=debug,kube=warn`, ...); an unparsable one falls back to `info` with a warning. Does
/// nothing if a subscriber is already installed (tests may call it more than once).
pub fn init(format: LogFormat, level: &str) {
    let (filter, bad) = match EnvFilter::try_new(level) {
        Ok(filter) => (filter, None),
        Err(e) => (EnvFilter::new("info"), Some(e)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    if installed.is_ok()
        && let Some(e) = bad
    {
        tracing::warn!(filter = level, error = %e, "invalid log filter, using `info`");
    }
}
