//! Kubernetes Events (`events.k8s.io/v1`) about claims, published without keeping anything.
//!
//! kube-runtime's `Recorder` keeps every Event it published for six minutes, to turn repeats into
//! a series, and sweeps that whole cache on every publish: at 10,000 claims realised in a few
//! minutes that is one cached Event (about 1.5 KiB) per claim, and a sweep over all of them per
//! Event. inpool publishes an Event only when a claim's `Ready` reason changes (see
//! `claims::reconcile::conditions::set_ready`), so there are no repeats to fold into a series: each Event is
//! created once and forgotten.
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;

/// Whether an Event reports something normal or a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// Creates Events as `reporting_controller`; holds nothing per Event.
#[derive(Clone)]
pub struct Events {
    client: Client,
    reporting_controller: String,
}

impl Events {
    pub fn new(client: Client, reporting_controller: &str) -> Events {
        Events {
            client,
            reporting_controller: reporting_controller.to_string(),
        }
    }

    /// Creates one Event about `regarding`, in its namespace.
    pub async fn publish(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let event = event(
            &self.reporting_controller,
            regarding,
            type_,
            reason,
            note,
            Timestamp::now(),
        );
        Api::<Event>::namespaced(self.client.clone(), &namespace)
            .create(&super::create_params(), &event)
            .await
            .map(drop)
    }
}

/// The Event as kube-runtime's `Recorder` would create it for a first occurrence: named after the
/// object and the time in nanoseconds, action `Reconcile`.
fn event(
    reporting_controller: &str,
    regarding: ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
    now: Timestamp,
) -> Event {
    let name = format!(
        "{}.{:x}",
        regarding.name.as_deref().unwrap_or(reporting_controller),
        now.as_nanosecond()
    );
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: regarding.namespace.clone(),
            ..ObjectMeta::default()
        },
        action: Some("Reconcile".into()),
        reason: Some(reason.into()),
        note: Some(note),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding),
        reporting_controller: Some(reporting_controller.into()),
        reporting_instance: Some(reporting_controller.into()),
        type_: Some(
            match type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
        ),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_names_its_object_reason_and_reporter() {
        let regarding = ObjectReference {
            kind: Some("IPAddressClaim".into()),
            name: Some("m-0".into()),
            namespace: Some("ns".into()),
            ..ObjectReference::default()
        };
        let now: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let e = event(
            "inpool",
            regarding,
            EventType::Warning,
            "PoolExhausted",
            "full".into(),
            now,
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert!(e.metadata.name.as_deref().unwrap().starts_with("m-0."));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("PoolExhausted"));
        assert_eq!(e.note.as_deref(), Some("full"));
        assert_eq!(e.reporting_controller.as_deref(), Some("inpool"));
        assert_eq!(e.regarding.unwrap().name.as_deref(), Some("m-0"));
        assert!(e.series.is_none());
    }
}
