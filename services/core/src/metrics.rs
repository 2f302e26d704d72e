//! The domain metrics the services record through the `metrics` facade: message outcomes
//! (`sluice_messages_total`) at the point each is known, and the queue gauges
//! (`sluice_queue_messages`, `sluice_queue_oldest_message_age_seconds`,
//! `sluice_queue_stored_bytes`) refreshed by a sampler task. Which recorder collects them (Prometheus, in the gateway) is not this crate's business.

use crate::activity::{Counted, QueueActivity};
use crate::Services;
use sluice_engine::{Millis, QueueInfo, QueueKey, QueueStats, TenantId};
use std::collections::HashMap;

/// A message outcome counted in `sluice_messages_total`'s `event` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    Sent,
    Received,
    Deleted,
    DeadLettered,
}

impl Event {
    fn label(self) -> &'static str {
        match self {
            Event::Sent => "sent",
            Event::Received => "received",
            Event::Deleted => "deleted",
            Event::DeadLettered => "dead_lettered",
        }
    }
}

/// How queue-level series are labelled, and the per-queue totals kept beside them.
#[derive(Clone)]
pub(crate) struct MetricLabels {
    /// Whether series carry the `queue` label; off, a tenant's queues add up in one series.
    pub(crate) per_queue: bool,
    /// Sent, received and deleted per queue, for the dashboard's rates (whatever the labels).
    pub(crate) activity: std::sync::Arc<QueueActivity>,
}

impl MetricLabels {
    pub(crate) fn count(&self, key: &QueueKey, event: Event, n: u64) {
        if n == 0 {
            return;
        }
        let counted = match event {
            Event::Sent => Some(Counted::Sent),
            Event::Received => Some(Counted::Received),
            Event::Deleted => Some(Counted::Deleted),
            Event::DeadLettered => None,
        };
        if let Some(counted) = counted {
            self.activity.add(key, counted, n);
        }
        let tenant = key.tenant.as_str().to_owned();
        if self.per_queue {
            metrics::counter!("sluice_messages_total", "tenant" => tenant,
                "queue" => key.name.as_str().to_owned(), "event" => event.label())
            .increment(n);
        } else {
            metrics::counter!("sluice_messages_total", "tenant" => tenant,
                "event" => event.label())
            .increment(n);
        }
    }
}

/// `sluice_topic_deliveries_total{tenant, topic, outcome}`: `delivered`, `filtered_out` or
/// `failed`, counted where a publish learns the outcome.
pub(crate) fn count_topic_delivery(topic: &sluice_engine::TopicKey, outcome: &'static str, n: u64) {
    if n > 0 {
        metrics::counter!("sluice_topic_deliveries_total",
            "tenant" => topic.tenant.as_str().to_owned(),
            "topic" => topic.name.as_str().to_owned(), "outcome" => outcome)
        .increment(n);
    }
}

/// Counts messages removed by retention expiry. The engine answers one total per sweep, not a
/// count per queue, so this series carries the `event` label alone.
pub(crate) fn count_expired(n: u64) {
    if n > 0 {
        metrics::counter!("sluice_messages_total", "event" => "expired").increment(n);
    }
}

/// `sluice_payload_objects_removed_total`: spilled bodies' objects the payload collector
/// deleted (no message referred to them any more, or their send never committed).
pub(crate) fn count_payload_objects_removed(n: u64) {
    if n > 0 {
        metrics::counter!("sluice_payload_objects_removed_total").increment(n);
    }
}

/// How often a walk sets every queue gauge, changed or not (others set only what changed).
/// What the recorder sees then does not depend on when a value last changed, and a gauge that
/// is set keeps its series alive: the gateway's recorder forgets gauges left unset for
/// `2 × MAX_PACED_PAUSE` (see `gateway/src/metrics.rs`).
pub(crate) const SET_ALL_EVERY_MS: Millis = 10_000;

/// Past this since the last walk that set every gauge, each series' handles are resolved
/// again before use: a recorder may have forgotten a gauge left unset for long (its idle
/// timeout, twice this in the gateway), and a handle it forgot sets nothing any more. Only a
/// sampler that failed for minutes, or one pacing itself to minutes between walks, waits that
/// long.
pub(crate) const RESOLVE_AGAIN_AFTER_MS: Millis = 300_000;

/// What one walk found for one series (a queue, or a tenant's queues added up).
#[derive(Default)]
struct Sample {
    visible: u64,
    in_flight: u64,
    delayed: u64,
    oldest_sent_at: Option<Millis>,
    stored_bytes: u64,
}

/// How many gauges a series has.
const GAUGES: usize = 5;

impl Sample {
    fn add(&mut self, stats: &QueueStats) {
        self.visible += stats.visible;
        self.in_flight += stats.in_flight;
        self.delayed += stats.delayed;
        self.stored_bytes += stats.stored_bytes;
        self.oldest_sent_at = match (self.oldest_sent_at, stats.oldest_sent_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// The values of the series' gauges, in [`SeriesGauges`] order.
    fn values(&self, now: Millis) -> [f64; GAUGES] {
        let age = self
            .oldest_sent_at
            .map_or(0.0, |sent| now.saturating_sub(sent) as f64 / 1000.0);
        [
            self.visible as f64,
            self.in_flight as f64,
            self.delayed as f64,
            age,
            self.stored_bytes as f64,
        ]
    }
}

/// The gauges of one series: `sluice_queue_messages` by state (visible, in flight, delayed),
/// `sluice_queue_oldest_message_age_seconds` and `sluice_queue_stored_bytes`, as handles
/// resolved once, with the values they were last set to.
struct SeriesGauges {
    handles: [metrics::Gauge; GAUGES],
    values: [f64; GAUGES],
    /// The walk that last found the series.
    walk: u64,
}

impl SeriesGauges {
    /// Resolves the series' handles (the registry's label hashing and look-up, paid here
    /// rather than on every walk). Nothing is set yet.
    fn resolve(tenant: &str, queue: Option<&str>, walk: u64) -> Self {
        let labels = |state: Option<&'static str>| {
            let mut labels = vec![("tenant", tenant.to_owned())];
            if let Some(queue) = queue {
                labels.push(("queue", queue.to_owned()));
            }
            if let Some(state) = state {
                labels.push(("state", state.to_owned()));
            }
            labels
        };
        let handles = [
            metrics::gauge!("sluice_queue_messages", &labels(Some("visible"))),
            metrics::gauge!("sluice_queue_messages", &labels(Some("in_flight"))),
            metrics::gauge!("sluice_queue_messages", &labels(Some("delayed"))),
            metrics::gauge!("sluice_queue_oldest_message_age_seconds", &labels(None)),
            metrics::gauge!("sluice_queue_stored_bytes", &labels(None)),
        ];
        Self {
            handles,
            // Equal to nothing: the first `set` sets every gauge.
            values: [f64::NAN; GAUGES],
            walk,
        }
    }

    /// Sets the gauges whose value changed since they were last set, or all of them.
    fn set(&mut self, values: [f64; GAUGES], all: bool) {
        for ((handle, last), value) in self.handles.iter().zip(&mut self.values).zip(values) {
            if all || last.to_bits() != value.to_bits() {
                handle.set(value);
                *last = value;
            }
        }
    }
}

/// The series of one tenant.
#[derive(Default)]
struct TenantGauges {
    /// Without per-queue labels: the tenant's queues added up.
    total: Option<SeriesGauges>,
    /// With them: by queue name.
    queues: HashMap<String, SeriesGauges>,
}

/// What the queue sampler keeps between walks: every series it set, with its handles and last
/// values, so a walk resolves no labels for a series it knows and sets only the gauges whose
/// value changed, every gauge at least every [`SET_ALL_EVERY_MS`]. Series a walk no longer
/// finds (deleted queues, tenants) are set to 0 once and forgotten; the recorder then drops
/// them once nothing sets them.
#[derive(Default)]
pub(crate) struct QueueGauges {
    tenants: HashMap<String, TenantGauges>,
    /// Numbers the walks.
    walk: u64,
    /// This walk sets every gauge.
    all: bool,
    /// This walk resolves each series' handles again.
    resolve: bool,
    /// When the last walk that set every gauge began.
    all_set_at: Option<Millis>,
}

impl QueueGauges {
    /// Begins a walk at `now`.
    fn begin(&mut self, now: Millis) {
        self.walk += 1;
        let since = self.all_set_at.map(|at| now.saturating_sub(at));
        self.all = since.is_none_or(|since| since >= SET_ALL_EVERY_MS);
        self.resolve = since.is_some_and(|since| since > RESOLVE_AGAIN_AFTER_MS);
    }

    /// The gauges of a series this walk found, resolved if new (or if this walk resolves
    /// every series again).
    fn found<'a>(
        series: &'a mut HashMap<String, SeriesGauges>,
        tenant: &str,
        queue: &str,
        walk: u64,
        resolve: bool,
    ) -> &'a mut SeriesGauges {
        // Looked up by `&str` first: a known series costs no allocation.
        if resolve || !series.contains_key(queue) {
            series.insert(
                queue.to_owned(),
                SeriesGauges::resolve(tenant, Some(queue), walk),
            );
        }
        let gauges = series
            .get_mut(queue)
            .unwrap_or_else(|| unreachable!("inserted above"));
        gauges.walk = walk;
        gauges
    }

    /// Sets the per-queue series of a page of one tenant's queues.
    fn set_queues(&mut self, tenant: &str, page: &[QueueInfo], now: Millis) {
        let (walk, all, resolve) = (self.walk, self.all, self.resolve);
        let queues = &mut self.tenant(tenant).queues;
        for info in page {
            let mut sample = Sample::default();
            sample.add(&info.stats);
            let gauges = Self::found(queues, tenant, info.name.as_str(), walk, resolve);
            gauges.set(sample.values(now), all);
        }
    }

    /// Sets the series of one tenant's queues added up.
    fn set_total(&mut self, tenant: &str, sample: &Sample, now: Millis) {
        let (walk, all, resolve) = (self.walk, self.all, self.resolve);
        let total = &mut self.tenant(tenant).total;
        let gauges = match total {
            Some(gauges) if !resolve => gauges,
            _ => total.insert(SeriesGauges::resolve(tenant, None, walk)),
        };
        gauges.walk = walk;
        gauges.set(sample.values(now), all);
    }

    fn tenant(&mut self, tenant: &str) -> &mut TenantGauges {
        if !self.tenants.contains_key(tenant) {
            self.tenants
                .insert(tenant.to_owned(), TenantGauges::default());
        }
        self.tenants
            .get_mut(tenant)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    /// Ends a walk that went through every tenant and queue: series it did not find drop to 0
    /// and are forgotten.
    fn finish(&mut self, now: Millis) {
        let walk = self.walk;
        let zero = [0.0; GAUGES];
        self.tenants.retain(|_, tenant| {
            tenant.queues.retain(|_, gauges| {
                let found = gauges.walk == walk;
                if !found {
                    gauges.set(zero, true);
                }
                found
            });
            if let Some(mut gone) = tenant.total.take_if(|gauges| gauges.walk != walk) {
                gone.set(zero, true);
            }
            tenant.total.is_some() || !tenant.queues.is_empty()
        });
        if self.all {
            self.all_set_at = Some(now);
        }
    }

    /// How many series are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.tenants
            .values()
            .map(|t| t.queues.len() + usize::from(t.total.is_some()))
            .sum()
    }
}

/// How many tenants or queues one list call asks for.
const PAGE: usize = 100;

impl Services {
    /// Walks every tenant's queues once, page by page, and sets the queue gauges through
    /// `gauges` (see [`QueueGauges`]). A walk that fails part way leaves the rest for the next.
    pub(crate) async fn sample_queues(
        &self,
        gauges: &mut QueueGauges,
    ) -> Result<(), crate::ServiceError> {
        crate::messages::publish_waiting_polls();
        let now = self.clock.now();
        gauges.begin(now);
        let activity = &self.metric_labels.activity;
        activity.begin_walk();
        let observers = self.queue_observers();
        let per_queue = self.metric_labels.per_queue;
        let mut after_tenant: Option<TenantId> = None;
        loop {
            let tenants = self
                .engine
                .list_tenants(after_tenant.as_ref(), PAGE)
                .await?;
            for tenant in &tenants {
                let mut total: Option<Sample> = None;
                let mut after_queue = None;
                loop {
                    let queues = self
                        .engine
                        .list_queues(&tenant.id, "", after_queue.as_ref(), PAGE, now)
                        .await?;
                    activity.found(tenant.id.as_str(), queues.iter().map(|q| q.name.as_str()));
                    if !observers.is_empty() {
                        let page: Vec<_> = queues
                            .iter()
                            .map(|q| (q, activity.totals(tenant.id.as_str(), q.name.as_str())))
                            .collect();
                        for observer in &observers {
                            observer.observe(&page, now);
                        }
                    }
                    if per_queue {
                        gauges.set_queues(tenant.id.as_str(), &queues, now);
                    } else {
                        for info in &queues {
                            total.get_or_insert_default().add(&info.stats);
                        }
                    }
                    if queues.len() < PAGE {
                        break;
                    }
                    after_queue = queues.last().map(|q| q.name.clone());
                }
                if let Some(total) = &total {
                    gauges.set_total(tenant.id.as_str(), total, now);
                }
            }
            if tenants.len() < PAGE {
                break;
            }
            after_tenant = tenants.last().map(|t| t.id.clone());
        }
        gauges.finish(now);
        activity.finish_walk();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use metrics::{Counter, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, SharedString, Unit};
    use sluice_engine::{QueueConfig, QueueName};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    /// Counts the gauges resolved and the values set, and keeps the last value of each.
    #[derive(Default)]
    struct Counting {
        resolved: AtomicUsize,
        sets: Arc<AtomicUsize>,
        values: Arc<Mutex<HashMap<String, f64>>>,
    }

    struct CountingGauge {
        key: String,
        sets: Arc<AtomicUsize>,
        values: Arc<Mutex<HashMap<String, f64>>>,
    }

    impl GaugeFn for CountingGauge {
        fn increment(&self, _: f64) {}
        fn decrement(&self, _: f64) {}
        fn set(&self, value: f64) {
            self.sets.fetch_add(1, Ordering::SeqCst);
            self.values.lock().unwrap().insert(self.key.clone(), value);
        }
    }

    impl metrics::Recorder for Counting {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            self.resolved.fetch_add(1, Ordering::SeqCst);
            Gauge::from_arc(Arc::new(CountingGauge {
                key: key.to_string(),
                sets: Arc::clone(&self.sets),
                values: Arc::clone(&self.values),
            }))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    impl Counting {
        fn counts(&self) -> (usize, usize) {
            (
                self.resolved.load(Ordering::SeqCst),
                self.sets.load(Ordering::SeqCst),
            )
        }

        /// The last value set of the series whose key mentions every one of `parts`.
        fn value(&self, parts: &[&str]) -> Vec<f64> {
            self.values
                .lock()
                .unwrap()
                .iter()
                .filter(|(key, _)| parts.iter().all(|p| key.contains(p)))
                .map(|(_, &v)| v)
                .collect()
        }
    }

    fn info(name: &str, visible: u64) -> QueueInfo {
        QueueInfo {
            tenant: TenantId::parse("t").unwrap(),
            name: QueueName::parse(name).unwrap(),
            config: QueueConfig::with_defaults(1024),
            created_at: 0,
            updated_at: 0,
            stats: QueueStats {
                visible,
                ..QueueStats::default()
            },
        }
    }

    fn walk(recorder: &Counting, gauges: &mut QueueGauges, page: &[QueueInfo], now: Millis) {
        metrics::with_local_recorder(recorder, || {
            gauges.begin(now);
            gauges.set_queues("t", page, now);
            gauges.finish(now);
        });
    }

    #[test]
    fn a_walk_sets_what_changed_and_everything_now_and_then() {
        let recorder = Counting::default();
        let mut gauges = QueueGauges::default();
        let both = [info("a", 2), info("b", 0)];
        walk(&recorder, &mut gauges, &both, 0);
        // Two series of five gauges, each resolved once and set.
        assert_eq!(recorder.counts(), (10, 10));
        assert_eq!(recorder.value(&["queue = a", "state = visible"]), [2.0]);
        // Nothing changed: nothing resolved, nothing set.
        walk(&recorder, &mut gauges, &both, 3_000);
        assert_eq!(recorder.counts(), (10, 10));
        // One value changed: one gauge set.
        walk(&recorder, &mut gauges, &[info("a", 3), info("b", 0)], 6_000);
        assert_eq!(recorder.counts(), (10, 11));
        assert_eq!(recorder.value(&["queue = a", "state = visible"]), [3.0]);
        // Every SET_ALL_EVERY_MS all of them, changed or not, through the same handles.
        walk(
            &recorder,
            &mut gauges,
            &[info("a", 3), info("b", 0)],
            SET_ALL_EVERY_MS,
        );
        assert_eq!(recorder.counts(), (10, 21));
        // A queue no longer found drops to 0 once and is forgotten.
        walk(
            &recorder,
            &mut gauges,
            &[info("a", 3)],
            SET_ALL_EVERY_MS + 3_000,
        );
        assert_eq!(recorder.counts(), (10, 26));
        assert_eq!(gauges.len(), 1);
        walk(
            &recorder,
            &mut gauges,
            &[info("a", 3)],
            SET_ALL_EVERY_MS + 6_000,
        );
        assert_eq!(recorder.counts(), (10, 26));
        // After a long pause the handles are resolved again (a recorder may have forgotten
        // them) and every gauge set.
        let late = SET_ALL_EVERY_MS + RESOLVE_AGAIN_AFTER_MS + 1;
        walk(&recorder, &mut gauges, &[info("a", 3)], late);
        assert_eq!(recorder.counts(), (15, 31));
    }

    #[test]
    fn without_queue_labels_a_tenant_is_one_series() {
        let recorder = Counting::default();
        let mut gauges = QueueGauges::default();
        let mut total = Sample::default();
        for (stats, bytes) in [(info("a", 2).stats, 100), (info("b", 3).stats, 20)] {
            total.add(&QueueStats {
                stored_bytes: bytes,
                ..stats
            });
        }
        metrics::with_local_recorder(&recorder, || {
            gauges.begin(0);
            gauges.set_total("t", &total, 0);
            gauges.finish(0);
        });
        assert_eq!(recorder.counts(), (5, 5));
        assert_eq!(recorder.value(&["state = visible"]), [5.0]);
        assert_eq!(recorder.value(&["sluice_queue_stored_bytes"]), [120.0]);
        // The tenant went away: its series drops to 0.
        metrics::with_local_recorder(&recorder, || {
            gauges.begin(3_000);
            gauges.finish(3_000);
        });
        assert_eq!(recorder.counts(), (5, 10));
        assert_eq!(recorder.value(&["state = visible"]), [0.0]);
        assert_eq!(gauges.len(), 0);
    }
}
