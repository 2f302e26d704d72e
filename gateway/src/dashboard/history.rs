//! The counts history behind a queue page's charts, kept by the server so the charts work
//! without Prometheus: per queue, a ring of one point a minute over the last hour and one every
//! 15 minutes over the last day. Memory is bounded: at most [`MAX_QUEUES`] queues are followed
//! (those whose page was opened most recently, each for a day after), 156 points each. A task
//! started with the first page view reads each followed queue once a minute, through the same
//! service call as `GET /v1/queues/{queue}`; an idle gateway nobody opened follows nothing.

use crate::dto::Queue;
use serde::Serialize;
use sluice_engine::TenantId;
use sluice_services::Services;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

/// Most queues followed at once.
pub(super) const MAX_QUEUES: usize = 256;
/// How long a queue is followed after its page was last opened, in milliseconds.
const FOLLOW_FOR_MS: u64 = 24 * 3600 * 1000;
/// The two rings: spacing between points and how many points.
const HOUR: (u64, usize) = (60_000, 60);
const DAY: (u64, usize) = (15 * 60_000, 96);
/// How often the task reads the followed queues.
const PERIOD: Duration = Duration::from_secs(60);

/// One sample of a queue's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Point {
    /// Milliseconds since the epoch.
    pub(super) at: u64,
    pub(super) visible: u64,
    pub(super) in_flight: u64,
    pub(super) delayed: u64,
    pub(super) oldest_age_seconds: Option<u64>,
}

impl Point {
    pub(super) fn of(queue: &Queue, at: u64) -> Self {
        Point {
            at,
            visible: queue.stats.visible,
            in_flight: queue.stats.in_flight,
            delayed: queue.stats.delayed,
            oldest_age_seconds: queue.stats.oldest_age_seconds,
        }
    }
}

/// The columns uPlot draws: times in seconds, then one array per series.
#[derive(Debug, Serialize, PartialEq)]
pub(super) struct Columns {
    pub(super) t: Vec<u64>,
    pub(super) visible: Vec<u64>,
    pub(super) in_flight: Vec<u64>,
    pub(super) delayed: Vec<u64>,
    pub(super) oldest_age_seconds: Vec<Option<u64>>,
}

#[derive(Default)]
struct Series {
    hour: VecDeque<Point>,
    day: VecDeque<Point>,
    viewed_at: u64,
}

/// Files `point` in its bucket (`at / spacing`): a later point of the last bucket replaces it,
/// so the newest bucket always shows the latest counts.
fn push(ring: &mut VecDeque<Point>, (spacing, capacity): (u64, usize), point: Point) {
    if let Some(last) = ring.back_mut() {
        if point.at / spacing == last.at / spacing {
            if point.at >= last.at {
                *last = point;
            }
            return;
        }
        if point.at < last.at {
            return;
        }
    }
    if ring.len() == capacity {
        ring.pop_front();
    }
    ring.push_back(point);
}

/// Which ring to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Span {
    Hour,
    Day,
}

/// The followed queues' histories.
#[derive(Default)]
pub(super) struct History {
    series: Mutex<HashMap<(String, String), Series>>,
    started: std::sync::OnceLock<()>,
}

impl History {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Series>> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A page of `queue` was opened at `now` with these counts: follow it (forgetting the
    /// queue viewed longest ago past [`MAX_QUEUES`]) and record the point.
    pub(super) fn viewed(&self, tenant: &str, queue: &str, point: Point) {
        let mut series = self.lock();
        let key = (tenant.to_owned(), queue.to_owned());
        if !series.contains_key(&key) && series.len() >= MAX_QUEUES {
            let oldest = series
                .iter()
                .min_by_key(|(_, s)| s.viewed_at)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                series.remove(&oldest);
            }
        }
        let entry = series.entry(key).or_default();
        entry.viewed_at = point.at;
        push(&mut entry.hour, HOUR, point);
        push(&mut entry.day, DAY, point);
    }

    /// Records a point of a followed queue (nothing if it is not followed).
    pub(super) fn record(&self, tenant: &str, queue: &str, point: Point) {
        let mut series = self.lock();
        if let Some(entry) = series.get_mut(&(tenant.to_owned(), queue.to_owned())) {
            push(&mut entry.hour, HOUR, point);
            push(&mut entry.day, DAY, point);
        }
    }

    /// The recorded points of one queue over `span`, oldest first.
    pub(super) fn columns(&self, tenant: &str, queue: &str, span: Span) -> Columns {
        let series = self.lock();
        let points: Vec<Point> = series
            .get(&(tenant.to_owned(), queue.to_owned()))
            .map(|s| match span {
                Span::Hour => s.hour.iter().copied().collect(),
                Span::Day => s.day.iter().copied().collect(),
            })
            .unwrap_or_default();
        Columns {
            t: points.iter().map(|p| p.at / 1000).collect(),
            visible: points.iter().map(|p| p.visible).collect(),
            in_flight: points.iter().map(|p| p.in_flight).collect(),
            delayed: points.iter().map(|p| p.delayed).collect(),
            oldest_age_seconds: points.iter().map(|p| p.oldest_age_seconds).collect(),
        }
    }

    /// The queues to read now; forgets those not viewed for a day.
    fn followed(&self, now: u64) -> Vec<(String, String)> {
        let mut series = self.lock();
        series.retain(|_, s| now.saturating_sub(s.viewed_at) < FOLLOW_FOR_MS);
        series.keys().cloned().collect()
    }

    /// Starts the sampling task once (from a request, so inside the runtime); it ends when the
    /// history is dropped.
    pub(super) fn start(self: &Arc<Self>, services: &Services) {
        self.started.get_or_init(|| {
            let weak: Weak<History> = Arc::downgrade(self);
            let services = services.clone();
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(PERIOD);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticker.tick().await;
                loop {
                    ticker.tick().await;
                    let Some(history) = weak.upgrade() else {
                        return;
                    };
                    let now = services.clock().now();
                    for (tenant, queue) in history.followed(now) {
                        let Ok(id) = TenantId::parse(&tenant) else {
                            continue;
                        };
                        // A queue deleted since, or a store error: no point this minute.
                        if let Ok(view) = services.get_queue(&id, &queue).await {
                            history.record(&tenant, &queue, Point::of(&Queue::from(view), now));
                        }
                    }
                }
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(at: u64, visible: u64) -> Point {
        Point {
            at,
            visible,
            in_flight: 0,
            delayed: 0,
            oldest_age_seconds: None,
        }
    }

    #[test]
    fn rings_keep_one_point_per_spacing_and_are_bounded() {
        let history = History::default();
        history.viewed("t", "q", point(0, 1));
        // Within the same minute: replaces the minute's point.
        history.record("t", "q", point(30_000, 2));
        assert_eq!(history.columns("t", "q", Span::Hour).visible, [2]);
        for minute in 1..=200u64 {
            history.record("t", "q", point(minute * 60_000, minute));
        }
        let hour = history.columns("t", "q", Span::Hour);
        assert_eq!(hour.t.len(), HOUR.1);
        assert_eq!(hour.visible.last(), Some(&200));
        assert_eq!(hour.visible.first(), Some(&141));
        let day = history.columns("t", "q", Span::Day);
        // The last point of each quarter hour: minutes 14, 29, ..., 194, then 200.
        let expected: Vec<u64> = (0..=13).map(|i| (15 * i + 14).min(200)).collect();
        assert_eq!(day.visible, expected);
        // A queue nobody viewed is not followed.
        history.record("t", "other", point(0, 1));
        assert!(history.columns("t", "other", Span::Hour).t.is_empty());
    }

    #[test]
    fn at_most_max_queues_are_followed_and_idle_ones_are_forgotten() {
        let history = History::default();
        for i in 0..MAX_QUEUES as u64 + 10 {
            history.viewed("t", &format!("q{i}"), point(i, 0));
        }
        assert_eq!(history.lock().len(), MAX_QUEUES);
        // The ten viewed first made room.
        assert!(history.columns("t", "q0", Span::Hour).t.is_empty());
        assert_eq!(history.columns("t", "q10", Span::Hour).t.len(), 1);
        // A day after, only those viewed in the last day are still followed.
        let kept = history.followed(FOLLOW_FOR_MS + 100);
        assert_eq!(kept.len(), (101..MAX_QUEUES as u64 + 10).count());
    }
}
