//! The values of single flags: durations in Go's syntax, Go's booleans, listen addresses, lease
//! names and durations, feature gates, log filters, and clusterctl's `${NAME:=default}`
//! variables. Each parser takes the text as given and returns the value or the message clap
//! shows; none looks at another flag.
use std::net::SocketAddr;
use std::time::Duration;

/// Shortest lease duration accepted: the holder renews a third of the duration before expiry,
/// so the duration must leave at least one whole second for that.
pub const MIN_LEASE_DURATION: Duration = Duration::from_secs(3);

/// `--leader-election-id`: the Lease's namespace (if given) and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseId {
    pub namespace: Option<String>,
    pub name: String,
}

/// `--feature-gates`: each gate and its value, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates(pub Vec<(String, bool)>);

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
