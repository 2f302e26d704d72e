//! The domain metrics the services record through the `metrics` facade: message outcomes
//! (`sluice_messages_total`) at the point each is known, and the queue gauges
//! (`sluice_queue_messages`, `sluice_queue_oldest_message_age_seconds`) refreshed by a sampler
//! task. Which recorder collects them (Prometheus, in the gateway) is not this crate's business.

use crate::Services;
use sluice_engine::{Millis, QueueKey, QueueStats, TenantId};
use std::collections::{BTreeMap, BTreeSet};

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

/// How queue-level series are labelled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MetricLabels {
    /// Whether series carry the `queue` label; off, a tenant's queues add up in one series.
    pub(crate) per_queue: bool,
}

impl MetricLabels {
    pub(crate) fn count(self, key: &QueueKey, event: Event, n: u64) {
        if n == 0 {
            return;
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

/// Counts messages removed by retention expiry. The engine answers one total per sweep, not a
/// count per queue, so this series carries the `event` label alone.
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

pub(crate) fn count_expired(n: u64) {
    if n > 0 {
        metrics::counter!("sluice_messages_total", "event" => "expired").increment(n);
    }
}

/// The gauges' label set: tenant, and the queue when per-queue labels are on.
type Series = (String, Option<String>);

/// What one walk over every queue found, per series.
#[derive(Default)]
struct Sample {
    visible: u64,
    in_flight: u64,
    delayed: u64,
    oldest_sent_at: Option<Millis>,
}

impl Sample {
    fn add(&mut self, stats: &QueueStats) {
        self.visible += stats.visible;
        self.in_flight += stats.in_flight;
        self.delayed += stats.delayed;
        self.oldest_sent_at = match (self.oldest_sent_at, stats.oldest_sent_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

fn labels(series: &Series) -> Vec<(&'static str, String)> {
    let mut labels = vec![("tenant", series.0.clone())];
    if let Some(queue) = &series.1 {
        labels.push(("queue", queue.clone()));
    }
    labels
}

fn set_gauges(series: &Series, sample: &Sample, now: Millis) {
    for (state, value) in [
        ("visible", sample.visible),
        ("in_flight", sample.in_flight),
        ("delayed", sample.delayed),
    ] {
        let mut labels = labels(series);
        labels.push(("state", state.to_owned()));
        metrics::gauge!("sluice_queue_messages", &labels).set(value as f64);
    }
    let age = sample
        .oldest_sent_at
        .map_or(0.0, |sent| now.saturating_sub(sent) as f64 / 1000.0);
    metrics::gauge!("sluice_queue_oldest_message_age_seconds", &labels(series)).set(age);
}

/// How many tenants or queues one list call asks for.
const PAGE: usize = 100;

impl Services {
    /// Walks every tenant's queues once, page by page, and sets the queue gauges. Series the
    /// previous walk set and this one did not find (deleted queues) drop to 0; the recorder
    /// forgets them once nothing refreshes them. Answers this walk's series.
    pub(crate) async fn sample_queues(
        &self,
        previous: &BTreeSet<Series>,
    ) -> Result<BTreeSet<Series>, crate::ServiceError> {
        crate::messages::publish_waiting_polls();
        let mut samples: BTreeMap<Series, Sample> = BTreeMap::new();
        let now = self.clock.now();
        let mut after_tenant: Option<TenantId> = None;
        loop {
            let tenants = self
                .engine
                .list_tenants(after_tenant.as_ref(), PAGE)
                .await?;
            for tenant in &tenants {
                let mut after_queue = None;
                loop {
                    let queues = self
                        .engine
                        .list_queues(&tenant.id, "", after_queue.as_ref(), PAGE, now)
                        .await?;
                    for info in &queues {
                        let series = (
                            info.tenant.as_str().to_owned(),
                            self.metric_labels
                                .per_queue
                                .then(|| info.name.as_str().to_owned()),
                        );
                        samples.entry(series).or_default().add(&info.stats);
                    }
                    if queues.len() < PAGE {
                        break;
                    }
                    after_queue = queues.last().map(|q| q.name.clone());
                }
            }
            if tenants.len() < PAGE {
                break;
            }
            after_tenant = tenants.last().map(|t| t.id.clone());
        }
        for (series, sample) in &samples {
            set_gauges(series, sample, now);
        }
        for gone in previous.iter().filter(|s| !samples.contains_key(*s)) {
            set_gauges(gone, &Sample::default(), now);
        }
        Ok(samples.into_keys().collect())
    }
}
