//! The per-pool series (`inpool_pool_*`, `inpool_foreign_addresses`, `inpool_allocations_total`,
//! `inpool_releases_total`): one map entry per pool holding all eight values, encoded at each
//! scrape by a [`Collector`].
//!
//! prometheus-client's `Family` would do the job, but a family keeps its own hash map entry and
//! one separately allocated metric per series: eight families cost 886 bytes per pool
//! (`cargo bench --bench memory`), the largest share after the pool object itself, and a
//! management cluster may have thousands of pools. One entry of plain values per pool costs a
//! third of that. Scrapes see the same families, labels and values.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, LabelSetEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::api::PoolKey;

/// A pool's gauges, in the order of [`GAUGES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolGauge {
    Size,
    Used,
    Free,
    OutOfRange,
    WaitingClaims,
    ForeignAddresses,
}

/// Name (without the `inpool_` prefix) and help of each [`PoolGauge`].
const GAUGES: [(PoolGauge, &str, &str); 6] = [
    (
        PoolGauge::Size,
        "pool_size",
        "Addresses in the pool (its capacity), as in the pool's status.ipAddresses.total",
    ),
    (
        PoolGauge::Used,
        "pool_used",
        "Addresses of the pool held by a claim",
    ),
    (
        PoolGauge::Free,
        "pool_free",
        "Addresses of the pool that can still be allocated",
    ),
    (
        PoolGauge::OutOfRange,
        "pool_out_of_range",
        "Addresses held by claims of the pool that lie outside its current ranges",
    ),
    (
        PoolGauge::WaitingClaims,
        "pool_waiting_claims",
        "Claims of the pool waiting for an address",
    ),
    (
        PoolGauge::ForeignAddresses,
        "foreign_addresses",
        "IPAddresses of the pool created by another writer (not inpool) since inpool's controllers started: another IPAM provider allocates from the pool",
    ),
];

/// A pool's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolCounter {
    Allocations,
    Releases,
}

/// Name (without the `inpool_` prefix and the `_total` suffix the encoder adds) and help of
/// each [`PoolCounter`].
const COUNTERS: [(PoolCounter, &str, &str); 2] = [
    (
        PoolCounter::Allocations,
        "allocations",
        "Addresses allocated to claims",
    ),
    (
        PoolCounter::Releases,
        "releases",
        "Addresses released by claims",
    ),
];

/// The values of one pool. A gauge is exported once set, until its pool is forgotten; a
/// counter once counted, for the life of the process (counters must not go backwards). A bit
/// per gauge says whether it is set rather than an `Option` each: half the bytes per pool.
#[derive(Clone, Copy, Debug, Default)]
struct PoolValues {
    gauges: [u64; GAUGES.len()],
    /// Bit `i` is set while `gauges[i]` is.
    gauges_set: u8,
    counters: [u64; COUNTERS.len()],
}

impl PoolValues {
    fn gauge(&self, gauge: PoolGauge) -> Option<u64> {
        let i = gauge as usize;
        (self.gauges_set & (1 << i) != 0).then_some(self.gauges[i])
    }

    fn set(&mut self, gauge: PoolGauge, value: u64) {
        let i = gauge as usize;
        self.gauges[i] = value;
        self.gauges_set |= 1 << i;
    }

    /// Drops the gauges; whether anything is left to export (a counter counted).
    fn forget_gauges(&mut self) -> bool {
        self.gauges_set = 0;
        self.counters.iter().any(|&c| c > 0)
    }
}

/// The per-pool series of the process. Cheap to clone (clones share one map).
#[derive(Clone, Debug, Default)]
pub struct PoolSeries(Arc<Mutex<HashMap<PoolKey, PoolValues>>>);

impl PoolSeries {
    fn values(&self) -> MutexGuard<'_, HashMap<PoolKey, PoolValues>> {
        // A panic while the map was locked cannot leave a value half-written.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets the pool's gauges.
    pub fn set(&self, pool: &PoolKey, gauges: &[(PoolGauge, u64)]) {
        let mut values = self.values();
        let values = values.entry(pool.clone()).or_default();
        for &(gauge, value) in gauges {
            values.set(gauge, value);
        }
    }

    /// Adds one to the pool's counter.
    pub fn inc(&self, pool: &PoolKey, counter: PoolCounter) {
        let mut values = self.values();
        values.entry(pool.clone()).or_default().counters[counter as usize] += 1;
    }

    /// Drops the pool's gauges (a deleted pool); its counters stay.
    pub fn forget(&self, pool: &PoolKey) {
        let mut values = self.values();
        if let Some(v) = values.get_mut(pool)
            && !v.forget_gauges()
        {
            values.remove(pool);
        }
    }

    /// Drops every pool's gauges; the counters stay.
    pub fn forget_all(&self) {
        let mut values = self.values();
        values.retain(|_, v| v.forget_gauges());
    }

    /// The collector that encodes these series at each scrape.
    pub fn collector(&self) -> Box<dyn Collector> {
        Box::new(PoolCollector(self.clone()))
    }
}

/// A pool's labels: `pool_kind`, `pool_namespace` (`""` for a global pool) and `pool_name`.
struct PoolLabels<'a>(&'a PoolKey);

impl EncodeLabelSet for PoolLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let PoolLabels(key) = self;
        [
            ("pool_kind", key.kind.name()),
            (
                "pool_namespace",
                key.namespace.as_deref().unwrap_or_default(),
            ),
            ("pool_name", &*key.name),
        ]
        .encode(encoder)
    }
}

#[derive(Debug)]
struct PoolCollector(PoolSeries);

impl Collector for PoolCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let values = self.0.values();
        let series = |read: &dyn Fn(&PoolValues) -> Option<u64>| -> Vec<(&PoolKey, u64)> {
            values
                .iter()
                .filter_map(|(key, v)| read(v).map(|value| (key, value)))
                .collect()
        };
        for (gauge, name, help) in GAUGES {
            let series = series(&|v| v.gauge(gauge));
            // A family appears with its first series, as prometheus-client's families do.
            if series.is_empty() {
                continue;
            }
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (key, value) in series {
                ConstGauge::new(value).encode(family.encode_family(&PoolLabels(key))?)?;
            }
        }
        for (counter, name, help) in COUNTERS {
            let series = series(&|v| Some(v.counters[counter as usize]).filter(|&c| c > 0));
            if series.is_empty() {
                continue;
            }
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (key, value) in series {
                ConstCounter::new(value).encode(family.encode_family(&PoolLabels(key))?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_pool_keeps_its_counters_and_only_them() {
        let series = PoolSeries::default();
        let (counted, idle) = (PoolKey::global("counted"), PoolKey::global("idle"));
        series.set(&counted, &[(PoolGauge::Free, 3)]);
        series.inc(&counted, PoolCounter::Releases);
        series.set(&idle, &[(PoolGauge::Size, 0)]);
        series.forget(&counted);
        series.forget(&idle);
        let values = series.values();
        assert!(
            !values.contains_key(&idle),
            "an entry with nothing to export stays"
        );
        let kept = values[&counted];
        assert_eq!(kept.gauge(PoolGauge::Free), None);
        assert_eq!(kept.counters, [0, 1]);
    }

    #[test]
    fn a_gauge_set_to_zero_is_exported_and_an_unset_one_is_not() {
        let series = PoolSeries::default();
        let pool = PoolKey::in_cluster("ns", "p");
        series.set(&pool, &[(PoolGauge::WaitingClaims, 0)]);
        let values = series.values()[&pool];
        assert_eq!(values.gauge(PoolGauge::WaitingClaims), Some(0));
        assert_eq!(values.gauge(PoolGauge::ForeignAddresses), None);
    }
}
