//! Status conditions: upsert of `metav1.Condition` by type and the mirror into CAPI's legacy
//! (v1beta1) condition shape.
//!
//! Rules (the stackable / apimachinery `SetStatusCondition` rule):
//! - a condition is identified by its `type`; setting one replaces the entry of that type or
//!   appends a new one, and never touches entries of other types;
//! - `lastTransitionTime` moves to "now" only when the entry is new or its `status` flips;
//!   a change of reason or message alone keeps the old time;
//! - `observedGeneration` is always written from the caller's value.
//!
//! "Now" is injectable ([`set_condition_at`]) so that tests are deterministic.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{REASON_ALLOCATION_FAILED, REASON_POOL_EXHAUSTED, REASON_POOL_NOT_READY};

/// `status` of a `metav1.Condition`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    /// The wire value: `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    /// Parses the wire value; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "True" => Some(ConditionStatus::True),
            "False" => Some(ConditionStatus::False),
            "Unknown" => Some(ConditionStatus::Unknown),
            _ => None,
        }
    }
}

impl std::fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a controller wants a condition to say; [`set_condition`] turns it into a
/// `metav1.Condition`, keeping `lastTransitionTime` when the status does not flip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCondition {
    /// Condition type, e.g. `Ready`.
    pub type_: String,
    pub status: ConditionStatus,
    /// CamelCase reason; the metav1 schema requires a non-empty one.
    pub reason: String,
    /// Human readable message; may be empty.
    pub message: String,
    /// `metadata.generation` of the object the condition was computed from.
    pub observed_generation: Option<i64>,
}

impl DesiredCondition {
    pub fn new(
        type_: impl Into<String>,
        status: ConditionStatus,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
            observed_generation: None,
        }
    }

    /// Sets `observedGeneration`.
    pub fn observed_generation(mut self, generation: Option<i64>) -> Self {
        self.observed_generation = generation;
        self
    }
}

/// Upserts `desired` into `conditions` with the current time; see [`set_condition_at`].
pub fn set_condition(conditions: &mut Vec<Condition>, desired: DesiredCondition) -> bool {
    set_condition_at(conditions, desired, now())
}

/// The current time, truncated to whole seconds (the precision `metav1.Time` keeps on the
/// wire), so that a value read back from the API server compares equal to the one written.
pub fn now() -> Time {
    let ts = k8s_openapi::jiff::Timestamp::now();
    let secs = ts.as_second();
    Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap_or(ts))
}

/// Upserts `desired` into `conditions` by type.
///
/// - No entry of that type: appends one with `lastTransitionTime = now`.
/// - An entry whose `status` differs: replaces it, `lastTransitionTime = now`.
/// - An entry with the same `status`: updates reason, message and observedGeneration in place
///   and keeps its `lastTransitionTime`.
///
/// Entries of other types are left untouched and in place. Returns whether anything changed.
pub fn set_condition_at(
    conditions: &mut Vec<Condition>,
    desired: DesiredCondition,
    now: Time,
) -> bool {
    let status = desired.status.as_str();
    match conditions.iter_mut().find(|c| c.type_ == desired.type_) {
        None => {
            conditions.push(Condition {
                type_: desired.type_,
                status: status.to_owned(),
                reason: desired.reason,
                message: desired.message,
                observed_generation: desired.observed_generation,
                last_transition_time: now,
            });
            true
        }
        Some(existing) => {
            let mut changed = false;
            if existing.status != status {
                existing.status = status.to_owned();
                existing.last_transition_time = now;
                changed = true;
            }
            if existing.reason != desired.reason {
                existing.reason = desired.reason;
                changed = true;
            }
            if existing.message != desired.message {
                existing.message = desired.message;
                changed = true;
            }
            if existing.observed_generation != desired.observed_generation {
                existing.observed_generation = desired.observed_generation;
                changed = true;
            }
            changed
        }
    }
}

/// Finds the condition of `type_`.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Severity of a legacy CAPI condition; set only when the status is `False`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LegacySeverity {
    Error,
    Warning,
    Info,
}

impl LegacySeverity {
    pub fn as_str(self) -> &'static str {
        match self {
            LegacySeverity::Error => "Error",
            LegacySeverity::Warning => "Warning",
            LegacySeverity::Info => "Info",
        }
    }
}

/// CAPI's legacy (v1beta1) condition, as found at `status.deprecated.v1beta1.conditions[]` of a
/// v1beta2 claim (and as `status.conditions[]` when the claim is read through v1beta1).
///
/// The schema gives `reason` and `message` a minimum length of 1, so they are omitted rather
/// than sent empty; `severity` is omitted unless the status is `False`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "Condition defines an observation of a Cluster API resource operational state (legacy v1beta1 shape)."
)]
pub struct LegacyCondition {
    /// type of condition in CamelCase or in foo.example.com/CamelCase.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 256))]
    pub type_: String,
    /// status of the condition, one of True, False, Unknown.
    pub status: String,
    /// severity provides an explicit classification of Reason code; set only when status is False.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub severity: Option<String>,
    /// lastTransitionTime is the last time the condition transitioned from one status to another.
    pub last_transition_time: Time,
    /// reason is the reason for the condition's last transition in CamelCase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub reason: Option<String>,
    /// message is a human readable message indicating details about the transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub message: Option<String>,
}

/// Maximum length of a legacy condition's reason.
pub const LEGACY_REASON_MAX: usize = 256;
/// Maximum length of a legacy condition's message.
pub const LEGACY_MESSAGE_MAX: usize = 10240;

/// The legacy severity inpool uses for a condition: none when the status is not `False`;
/// `Warning` for `PoolExhausted` and `PoolNotReady`, `Error` for `AllocationFailed`, `Info`
/// for any other reason.
pub fn legacy_severity(status: &str, reason: &str) -> Option<LegacySeverity> {
    if status != "False" {
        return None;
    }
    Some(match reason {
        REASON_POOL_EXHAUSTED | REASON_POOL_NOT_READY => LegacySeverity::Warning,
        REASON_ALLOCATION_FAILED => LegacySeverity::Error,
        _ => LegacySeverity::Info,
    })
}

/// Mirrors a `metav1.Condition` into the legacy shape: same type, status and
/// lastTransitionTime; severity per [`legacy_severity`]; reason and message omitted when empty
/// and cut to the legacy maximum lengths (on a character boundary) when longer.
pub fn to_legacy(c: &Condition) -> LegacyCondition {
    LegacyCondition {
        type_: c.type_.clone(),
        status: c.status.clone(),
        severity: legacy_severity(&c.status, &c.reason).map(|s| s.as_str().to_owned()),
        last_transition_time: c.last_transition_time.clone(),
        reason: non_empty_truncated(&c.reason, LEGACY_REASON_MAX),
        message: non_empty_truncated(&c.message, LEGACY_MESSAGE_MAX),
    }
}

fn non_empty_truncated(s: &str, max: usize) -> Option<String> {
    if s.is_empty() {
        return None;
    }
    if s.len() <= max {
        return Some(s.to_owned());
    }
    // The API server counts characters (runes), we cut by bytes: cutting to `max` bytes
    // always leaves at most `max` characters.
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Some(s[..end].to_owned())
}

/// Replaces the legacy entry of the same type, or appends. Returns whether anything changed.
pub fn upsert_legacy(list: &mut Vec<LegacyCondition>, c: LegacyCondition) -> bool {
    match list.iter_mut().find(|l| l.type_ == c.type_) {
        Some(existing) if *existing == c => false,
        Some(existing) => {
            *existing = c;
            true
        }
        None => {
            list.push(c);
            true
        }
    }
}

/// Mirrors the conditions of the given `types` from `conditions` into `legacy` (upsert by
/// type; legacy entries of other types are kept). Returns whether anything changed.
pub fn mirror_to_legacy(
    conditions: &[Condition],
    types: &[&str],
    legacy: &mut Vec<LegacyCondition>,
) -> bool {
    let mut changed = false;
    for c in conditions
        .iter()
        .filter(|c| types.contains(&c.type_.as_str()))
    {
        changed |= upsert_legacy(legacy, to_legacy(c));
    }
    changed
}

/// Schema of a `metav1.Condition` list as CAPI's CRDs (controller-gen) publish it: every field's
/// constraints, `x-kubernetes-list-type: map` keyed by `type`, at most 32 entries.
/// Use with `#[schemars(schema_with = "crate::api::conditions::conditions_schema")]`.
pub fn conditions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "conditions represent the observations of the object's current state. Known condition types are Ready.",
        "maxItems": 32,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "description": "Condition contains details for one aspect of the current state of this API Resource.",
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
            "properties": {
                "lastTransitionTime": {
                    "type": "string",
                    "format": "date-time",
                    "description": "lastTransitionTime is the last time the condition transitioned from one status to another."
                },
                "message": {
                    "type": "string",
                    "maxLength": 32768,
                    "description": "message is a human readable message indicating details about the transition. This may be an empty string."
                },
                "observedGeneration": {
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0,
                    "description": "observedGeneration represents the .metadata.generation that the condition was set based upon."
                },
                "reason": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 1024,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                    "description": "reason contains a programmatic identifier indicating the reason for the condition's last transition."
                },
                "status": {
                    "type": "string",
                    "enum": ["True", "False", "Unknown"],
                    "description": "status of the condition, one of True, False, Unknown."
                },
                "type": {
                    "type": "string",
                    "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                    "description": "type of condition in CamelCase or in foo.example.com/CamelCase."
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::READY_CONDITION;

    fn t(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn ready(status: ConditionStatus, reason: &str, msg: &str) -> DesiredCondition {
        DesiredCondition::new(READY_CONDITION, status, reason, msg).observed_generation(Some(3))
    }

    #[test]
    fn appends_new_type_with_now() {
        let mut list = vec![];
        assert!(set_condition_at(
            &mut list,
            ready(ConditionStatus::False, "PoolExhausted", "full"),
            t(10)
        ));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].last_transition_time, t(10));
        assert_eq!(list[0].observed_generation, Some(3));
        assert_eq!(list[0].status, "False");
    }

    #[test]
    fn keeps_transition_time_unless_status_flips() {
        let mut list = vec![];
        set_condition_at(
            &mut list,
            ready(ConditionStatus::False, "PoolExhausted", "full"),
            t(10),
        );
        // same status, other reason/message: time kept, fields updated
        assert!(set_condition_at(
            &mut list,
            ready(ConditionStatus::False, "PoolNotReady", "gone"),
            t(20)
        ));
        assert_eq!(list[0].last_transition_time, t(10));
        assert_eq!(list[0].reason, "PoolNotReady");
        // identical: no change
        assert!(!set_condition_at(
            &mut list,
            ready(ConditionStatus::False, "PoolNotReady", "gone"),
            t(30)
        ));
        assert_eq!(list[0].last_transition_time, t(10));
        // flip: time moves
        assert!(set_condition_at(
            &mut list,
            ready(ConditionStatus::True, "AddressAllocated", ""),
            t(40)
        ));
        assert_eq!(list[0].last_transition_time, t(40));
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn other_types_untouched() {
        let other = Condition {
            type_: "Other".into(),
            status: "True".into(),
            reason: "Fine".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: t(1),
        };
        let mut list = vec![other.clone()];
        set_condition_at(
            &mut list,
            ready(ConditionStatus::True, "AddressAllocated", ""),
            t(5),
        );
        assert_eq!(list[0], other);
        assert_eq!(list[1].type_, "Ready");
    }

    #[test]
    fn legacy_mirror() {
        let mut list = vec![];
        set_condition_at(
            &mut list,
            ready(ConditionStatus::False, "PoolExhausted", "full"),
            t(10),
        );
        let l = to_legacy(&list[0]);
        assert_eq!(l.severity.as_deref(), Some("Warning"));
        assert_eq!(l.reason.as_deref(), Some("PoolExhausted"));
        assert_eq!(l.message.as_deref(), Some("full"));
        assert_eq!(l.last_transition_time, t(10));

        set_condition_at(
            &mut list,
            ready(ConditionStatus::False, "AllocationFailed", "boom"),
            t(11),
        );
        assert_eq!(to_legacy(&list[0]).severity.as_deref(), Some("Error"));

        set_condition_at(
            &mut list,
            ready(ConditionStatus::True, "AddressAllocated", ""),
            t(12),
        );
        let l = to_legacy(&list[0]);
        assert_eq!(l.severity, None);
        assert_eq!(l.message, None);
        let v = serde_json::to_value(&l).unwrap();
        assert!(v.get("severity").is_none() && v.get("message").is_none());

        let long = "é".repeat(6000); // 12000 bytes
        let c = Condition {
            message: long,
            ..list[0].clone()
        };
        let l = to_legacy(&c);
        assert!(l.message.unwrap().len() <= LEGACY_MESSAGE_MAX);
    }

    #[test]
    fn mirror_keeps_other_legacy_entries() {
        let mut conds = vec![];
        set_condition_at(
            &mut conds,
            ready(ConditionStatus::True, "AddressAllocated", ""),
            t(1),
        );
        let mut legacy = vec![LegacyCondition {
            type_: "Other".into(),
            status: "True".into(),
            severity: None,
            last_transition_time: t(0),
            reason: None,
            message: None,
        }];
        assert!(mirror_to_legacy(&conds, &[READY_CONDITION], &mut legacy));
        assert_eq!(legacy.len(), 2);
        assert!(!mirror_to_legacy(&conds, &[READY_CONDITION], &mut legacy));
    }
}
