//! Listing page by page: every object of a kind in pages of [`PAGE`], each page asked for again
//! while it fails on the way, so that an audit completes under a steady error rate.
use std::time::Duration;

use kube::api::{Api, ListParams};

use crate::controllers::runtime::error::Error;

/// Objects per list request: the API server's own default page for clients that page.
pub(super) const PAGE: u32 = 500;

/// Times each page is asked for before the audit fails: a page that fails on the way (a reset,
/// a `500`, `502` or `504`) is asked again after [`PAGE_RETRY`], doubling. (kube's client
/// already sends a request answered `429` or `503` again, after the `Retry-After` the server
/// gave; once it gives up, so does the audit, rather than ask sooner than the server said.) An
/// audit that failed at its first failed request would, under a sustained error rate, need
/// every one of its requests to succeed: it would hardly ever complete, and what only the audit
/// repairs would wait for the errors to stop.
pub(super) const PAGE_ATTEMPTS: u32 = 5;

pub(super) const PAGE_RETRY: Duration = Duration::from_millis(200);

/// Lists every object of `api`, handing each page to `each` as it arrives.
pub(super) async fn for_each_page<K>(
    api: &Api<K>,
    mut each: impl FnMut(Vec<K>),
) -> Result<(), Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = list_page(api, &params).await?;
        each(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(()),
        }
    }
}

/// One page, asked for again while it fails on the way (see [`PAGE_ATTEMPTS`]).
pub(super) async fn list_page<K>(
    api: &Api<K>,
    params: &ListParams,
) -> Result<kube::core::ObjectList<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut delay = PAGE_RETRY;
    for _ in 1..PAGE_ATTEMPTS {
        match api.list(params).await {
            Err(e) if fails_on_the_way(&e) => {
                tracing::debug!(error = %e, ?delay, "audit: a list page failed; asking again");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            answer => return answer,
        }
    }
    api.list(params).await
}

/// Whether a request failed on the way, with no word from the API server on when to ask again:
/// a connection that failed, or a `500`, `502` or `504`.
pub(super) fn fails_on_the_way(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 500 | 502 | 504),
        _ => true,
    }
}
