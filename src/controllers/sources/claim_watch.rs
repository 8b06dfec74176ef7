//! The claim watch: the only watch the claim controller reads, opened last (see
//! `runtime::controller`), in the namespace and with the label filter of the settings.
use futures::Stream;
use kube::Client;
use kube::runtime::{WatchStreamExt, watcher};

use super::watch;
use crate::api::WATCH_FILTER_LABEL;
use crate::controllers::claims::cached_claim::WatchedClaim;
use crate::controllers::runtime::scoped;
use crate::settings::Settings;

/// The claims this run serves, read as the cache keeps them: each object is cut down as it is
/// deserialised.
pub(crate) fn open(
    client: &Client,
    settings: &Settings,
) -> impl Stream<Item = Result<watcher::Event<WatchedClaim>, watcher::Error>> + use<> {
    watcher::watcher(scoped::<WatchedClaim>(client, settings), filtered(settings)).default_backoff()
}

/// Watcher configuration for namespaced objects that follow the provider's label filter.
fn filtered(settings: &Settings) -> watcher::Config {
    let config = watch::watch_config();
    match &settings.watch_filter {
        Some(value) => config.labels(&format!("{WATCH_FILTER_LABEL}={value}")),
        None => config,
    }
}
