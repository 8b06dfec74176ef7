//! A controller's share of a kind's one watch ([`Subscription`]): the store of the objects it
//! reconciles and their triggers, kept by the watch ([`Subscriber`]) instead of a watch of its
//! own. The reuse-grace controller takes the released reservations this way.
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::Event;

use crate::controllers::runtime::controller::Requests;

/// A controller's share of a kind's one watch: the store it reconciles from, and the objects the
/// watch applied or (re-)listed, as triggers. It never opens a watch of its own.
pub struct Subscription<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    triggers: mpsc::UnboundedReceiver<Arc<K>>,
}

impl<K> Subscription<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync,
    K: serde::de::DeserializeOwned + 'static,
{
    /// The store the controller reads, and its requests: one for each object triggered, under
    /// the key `key_of` gives it.
    pub fn requests<Key>(
        self,
        key_of: impl Fn(&K) -> Key,
    ) -> (Store<K>, impl futures::Stream<Item = Requests<Key>>) {
        let requests = self
            .triggers
            .map(move |object| Requests::now(key_of(&object)));
        (self.store, requests)
    }
}

/// The watch's side of a [`Subscription`]: it keeps the controller's store, and picks the
/// objects to trigger, which the feed sends once the registry has them.
pub(super) struct Subscriber<K: Resource<DynamicType = ()> + Clone + 'static> {
    /// The objects the controller reconciles.
    selects: fn(&K) -> bool,
    /// The controller's own store of the selected objects.
    store: Writer<K>,
    /// The selected objects of a list under way, triggered once it is done.
    listed: Vec<Arc<K>>,
}

impl<K> Subscriber<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// A controller of the objects `selects` picks, with a store of just those; the sender is
    /// where the feed hands it the objects [`Subscriber::take`] picks.
    pub(super) fn only(
        selects: fn(&K) -> bool,
    ) -> (
        Subscriber<K>,
        Subscription<K>,
        mpsc::UnboundedSender<Arc<K>>,
    ) {
        let writer = Writer::default();
        let store = writer.as_reader();
        let (triggers, rx) = mpsc::unbounded();
        let subscriber = Subscriber {
            selects,
            store: writer,
            listed: Vec::new(),
        };
        let subscription = Subscription {
            store,
            triggers: rx,
        };
        (subscriber, subscription, triggers)
    }

    /// Brings the controller's own store up to date with `event`; returns the objects to
    /// trigger: the selected object applied, or every selected object of a list once it is done
    /// (as the watch of a `Controller::new` would). Only the selected objects of a list are kept
    /// meanwhile.
    pub(super) fn take(&mut self, event: &Event<K>) -> Vec<Arc<K>> {
        let selects = self.selects;
        let store = &mut self.store;
        let was_kept = |o: &K| store.as_reader().get(&ObjectRef::from_obj(o)).is_some();
        match event {
            Event::Apply(o) if selects(o) => store.apply_watcher_event(event),
            Event::Apply(o) | Event::Delete(o) if was_kept(o) => {
                store.apply_watcher_event(&Event::Delete(o.clone()))
            }
            Event::Apply(_) | Event::Delete(_) => {}
            Event::InitApply(o) if !selects(o) => {}
            Event::Init | Event::InitApply(_) | Event::InitDone => store.apply_watcher_event(event),
        }
        match event {
            Event::Init => {
                self.listed.clear();
                Vec::new()
            }
            Event::InitApply(o) => {
                if selects(o) {
                    self.listed.push(Arc::new(o.clone()));
                }
                Vec::new()
            }
            Event::InitDone => std::mem::take(&mut self.listed),
            Event::Apply(o) if selects(o) => vec![Arc::new(o.clone())],
            Event::Apply(_) | Event::Delete(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use kube::ResourceExt;

    use super::*;

    fn config_map(name: &str, released: bool) -> k8s_openapi::api::core::v1::ConfigMap {
        let mut map = k8s_openapi::api::core::v1::ConfigMap::default();
        map.metadata.name = Some(name.into());
        if released {
            map.labels_mut().insert("released".into(), "true".into());
        }
        map
    }

    #[test]
    fn a_subscriber_keeps_and_triggers_only_what_it_selects() {
        let (mut subscriber, subscription, _) =
            Subscriber::only(|m: &k8s_openapi::api::core::v1::ConfigMap| {
                m.labels().contains_key("released")
            });
        let mut step = |events: Vec<Event<k8s_openapi::api::core::v1::ConfigMap>>| {
            let triggered: Vec<String> = events
                .iter()
                .flat_map(|event| subscriber.take(event))
                .map(|m| m.name_any())
                .collect();
            let mut kept: Vec<String> = subscription
                .store
                .state()
                .iter()
                .map(|m| m.name_any())
                .collect();
            kept.sort();
            (kept, triggered)
        };
        let list = |maps: Vec<k8s_openapi::api::core::v1::ConfigMap>| {
            let mut events = vec![Event::Init];
            events.extend(maps.into_iter().map(Event::InitApply));
            events.push(Event::InitDone);
            events
        };
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            step(list(vec![config_map("a", true), config_map("b", false)])),
            (names(&["a"]), names(&["a"])),
            "a list: only the selected ones"
        );
        assert!(
            subscription
                .store
                .wait_until_ready()
                .now_or_never()
                .is_some()
        );
        assert_eq!(
            step(vec![Event::Apply(config_map("b", true))]),
            (names(&["a", "b"]), names(&["b"]))
        );
        assert_eq!(
            step(vec![Event::Apply(config_map("a", false))]),
            (names(&["b"]), names(&[])),
            "no longer selected: dropped, not triggered"
        );
        assert_eq!(
            step(vec![Event::Delete(config_map("b", true))]),
            (names(&[]), names(&[]))
        );
        assert_eq!(
            step(list(vec![config_map("c", true)])),
            (names(&["c"]), names(&["c"])),
            "a re-list replaces the store"
        );
    }
}
