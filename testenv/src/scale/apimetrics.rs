//! The API server's own request counters (`apiserver_request_total` on `/metrics`), read before
//! and after a phase, so that "API writes per claim" is what the server counted, whoever sent
//! the requests; and the time it spent serving them (`apiserver_request_duration_seconds_sum`),
//! so that what each kind of write costs it can be compared.

use std::collections::BTreeMap;

use kube::Client;
use serde::Serialize;

/// Verbs that change state. Server-side apply is counted as `APPLY` by the API server.
pub const WRITE_VERBS: &[&str] = &[
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// What one counter series is about (the `scope`, `component`, `dry_run` and `version` labels
/// are summed over).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct RequestKey {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    /// HTTP status code, e.g. `201`, `409`.
    pub code: String,
}

impl RequestKey {
    pub fn is_write(&self) -> bool {
        WRITE_VERBS.contains(&self.verb.as_str())
    }

    /// The short name the report uses: `claims`, `claims/status`, `ipaddresses`,
    /// `ipaddressreservations`, `pools`, `pools/status`, `events`, or `other`.
    pub fn bucket(&self) -> &'static str {
        match (self.resource.as_str(), self.subresource.as_str()) {
            ("ipaddressclaims", "") => "claims",
            ("ipaddressclaims", "status") => "claims/status",
            ("ipaddresses", _) => "ipaddresses",
            ("ipaddressreservations", _) => "ipaddressreservations",
            (
                "inclusterippools"
                | "globalinclusterippools"
                | "inclusterprefixpools"
                | "globalinclusterprefixpools",
                "status",
            ) => "pools/status",
            (
                "inclusterippools"
                | "globalinclusterippools"
                | "inclusterprefixpools"
                | "globalinclusterprefixpools",
                _,
            ) => "pools",
            ("events", _) => "events",
            _ => "other",
        }
    }
}

/// Request counts by verb and resource.
#[derive(Clone, Debug, Default)]
pub struct RequestCounts(pub BTreeMap<RequestKey, f64>);

/// One line of the request breakdown written to the JSON report.
#[derive(Clone, Debug, Serialize)]
pub struct RequestDelta {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub code: String,
    pub count: f64,
}

impl RequestCounts {
    /// `self - before`, keeping only series that changed.
    pub fn since(&self, before: &RequestCounts) -> RequestCounts {
        let mut out = BTreeMap::new();
        for (key, value) in &self.0 {
            let delta = value - before.0.get(key).copied().unwrap_or(0.0);
            if delta > 0.0 {
                out.insert(key.clone(), delta);
            }
        }
        RequestCounts(out)
    }

    /// Writes to resources (non-resource requests such as `/metrics` excluded).
    pub fn writes(&self) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| k.is_write() && !k.resource.is_empty())
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b)
    }

    /// Writes the server refused (4xx, e.g. 409 AlreadyExists or Conflict).
    pub fn refused_writes(&self) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| k.is_write() && !k.resource.is_empty() && k.code.starts_with('4'))
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b)
    }

    /// Writes summed by [`RequestKey::bucket`].
    pub fn writes_by_bucket(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (key, value) in &self.0 {
            if key.is_write() && !key.resource.is_empty() {
                *out.entry(key.bucket().to_string()).or_insert(0.0) += value;
            }
        }
        out
    }

    /// Requests of one verb (e.g. `GET`) to resources.
    pub fn verb(&self, verb: &str) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| k.verb == verb && !k.resource.is_empty())
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b)
    }

    /// Requests of one verb to one resource (and subresource).
    pub fn count(&self, verb: &str, resource: &str, subresource: &str) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| {
                k.verb == verb && k.resource == resource && k.subresource == subresource
            })
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b)
    }

    pub fn deltas(&self) -> Vec<RequestDelta> {
        self.0
            .iter()
            .map(|(k, v)| RequestDelta {
                verb: k.verb.clone(),
                group: k.group.clone(),
                resource: k.resource.clone(),
                subresource: k.subresource.clone(),
                code: k.code.clone(),
                count: *v,
            })
            .collect()
    }
}

/// Reads `/metrics` from the API server (the admin client may).
pub async fn scrape(client: &Client) -> anyhow::Result<RequestCounts> {
    Ok(parse(&metrics_page(client).await?))
}

/// Reads `/metrics` once: the request counts, and the seconds the server spent on the requests
/// of each key (its `code` left empty: the duration histogram has no code label).
pub async fn scrape_with_seconds(
    client: &Client,
) -> anyhow::Result<(RequestCounts, RequestCounts)> {
    let text = metrics_page(client).await?;
    Ok((
        parse(&text),
        parse_series(&text, "apiserver_request_duration_seconds_sum{"),
    ))
}

async fn metrics_page(client: &Client) -> anyhow::Result<String> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    Ok(client.request_text(request).await?)
}

/// Sums the `apiserver_request_total` series of a Prometheus text page by [`RequestKey`].
pub fn parse(text: &str) -> RequestCounts {
    parse_series(text, "apiserver_request_total{")
}

/// Sums the series of one metric (`prefix`: its name and `{`) by [`RequestKey`].
fn parse_series(text: &str, prefix: &str) -> RequestCounts {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(prefix) else {
            continue;
        };
        let Some(end) = rest.rfind('}') else { continue };
        let labels = parse_labels(&rest[..end]);
        let Some(value) = rest[end + 1..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let get = |name: &str| labels.get(name).cloned().unwrap_or_default();
        let key = RequestKey {
            verb: get("verb"),
            group: get("group"),
            resource: get("resource"),
            subresource: get("subresource"),
            code: get("code"),
        };
        *out.entry(key).or_insert(0.0) += value;
    }
    RequestCounts(out)
}

/// `a="x",b="y\"z"` → map.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let mut name = String::new();
        for c in chars.by_ref() {
            if c == '=' {
                break;
            }
            name.push(c);
        }
        if name.is_empty() {
            break;
        }
        if chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                '"' => break,
                other => value.push(other),
            }
        }
        out.insert(name, value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_buckets() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",dry_run="",group="ipam.cluster.x-k8s.io",resource="ipaddressclaims",scope="resource",subresource="",verb="POST",version="v1beta2"} 3
apiserver_request_total{code="409",component="apiserver",dry_run="",group="ipam.cluster.x-k8s.io",resource="ipaddressclaims",scope="resource",subresource="",verb="POST",version="v1beta2"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="ipam.cluster.x-k8s.io",resource="ipaddressclaims",scope="resource",subresource="status",verb="APPLY",version="v1beta2"} 2
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 7
"#;
        let counts = parse(text);
        assert_eq!(counts.writes(), 6.0);
        let buckets = counts.writes_by_bucket();
        assert_eq!(buckets["claims"], 4.0);
        assert_eq!(buckets["claims/status"], 2.0);
        assert_eq!(counts.verb("GET"), 0.0);
    }

    #[test]
    fn the_seconds_of_each_write_are_summed_by_bucket() {
        let text = r#"apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 0.5
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="ipam.cluster.x-k8s.io",resource="ipaddressclaims",scope="resource",subresource="status",verb="APPLY",version="v1beta2"} 1.5
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 9
"#;
        let seconds = parse_series(text, "apiserver_request_duration_seconds_sum{");
        let buckets = seconds.writes_by_bucket();
        assert_eq!(buckets["events"], 0.5);
        assert_eq!(buckets["claims/status"], 1.5);
        assert_eq!(seconds.writes(), 2.0);
    }
}
