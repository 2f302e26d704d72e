//! The counts history behind a queue page's charts, kept by the server so the charts work
//! without Prometheus: per queue, a ring of one point a minute over the last hour and one every
//! 15 minutes over the last day, each point with the queue's counts and this process's running
//! totals of messages sent, received and deleted (`Services::queue_activity`), from which the
//! charts' rates are the differences between consecutive points over their time apart.
//!
//! Memory is bounded: at most [`MAX_QUEUES`] queues are followed, 156 points each. Two sources
//! feed it: the queue sampler's walk (`Services::observe_queues`), which records every
//! followed queue and starts following the queues it finds while there is room (the first
//! ones of its walk: tenants, then names, in order), so queues nobody opened have charts too;
//! and page views, which always follow the queue viewed, making room by dropping a queue only
//! the sampler follows, else the one viewed longest ago. A viewed queue is followed for a day
//! after its last view, one only the sampler follows for as long as the walk finds it. A task
//! started with the first page view reads each viewed queue once a minute, through the same
//! service call as `GET /v1/queues/{queue}`, in case the sampler is slower or off.
//!
//! A history belongs to one incarnation of a queue: every point carries the queue's creation
//! time, and a point of a queue deleted and created again under the same name starts its
//! history afresh rather than drawing the new queue on the old one's past.

use crate::dto::Queue;
use serde::Serialize;
use sluice_engine::{Millis, QueueInfo, TenantId};
use sluice_services::{ActivityTotals, QueueObserver, Services};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

/// Most queues followed at once.
pub(super) const MAX_QUEUES: usize = 256;
/// How long a queue is followed after its page was last opened, in milliseconds.
const FOLLOW_FOR_MS: u64 = 24 * 3600 * 1000;
/// The two rings: spacing between points and how many points.
const HOUR: (u64, usize) = (60_000, 60);
/// How many points the hour's ring holds (the overview's sparklines span it).
pub(super) const HOUR_POINTS: usize = HOUR.1;
const DAY: (u64, usize) = (15 * 60_000, 96);
/// How often the task reads the viewed queues.
const PERIOD: Duration = Duration::from_secs(60);
/// A queue only the sampler follows is dropped when no walk found it for this long (deleted).
const SAMPLED_FOR_MS: u64 = 3600 * 1000;

/// One sample of a queue's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Point {
    /// Milliseconds since the epoch.
    pub(super) at: u64,
    pub(super) visible: u64,
    pub(super) in_flight: u64,
    pub(super) delayed: u64,
    pub(super) oldest_age_seconds: Option<u64>,
    /// This process's running totals for the queue at `at`.
    pub(super) totals: ActivityTotals,
    /// When the queue was created (milliseconds since the epoch): which incarnation of the
    /// name the point is of.
    pub(super) created_at: Millis,
}

impl Point {
    pub(super) fn of(queue: &Queue, totals: ActivityTotals, at: u64) -> Self {
        Point {
            at,
            visible: queue.stats.visible,
            in_flight: queue.stats.in_flight,
            delayed: queue.stats.delayed,
            oldest_age_seconds: queue.stats.oldest_age_seconds,
            totals,
            created_at: chrono::DateTime::parse_from_rfc3339(&queue.created_at)
                .map_or(0, |at| at.timestamp_millis() as Millis),
        }
    }

    fn sampled(info: &QueueInfo, totals: ActivityTotals, at: Millis) -> Self {
        Point {
            at,
            visible: info.stats.visible,
            in_flight: info.stats.in_flight,
            delayed: info.stats.delayed,
            oldest_age_seconds: info
                .stats
                .oldest_sent_at
                .map(|sent| at.saturating_sub(sent) / 1000),
            totals,
            created_at: info.created_at,
        }
    }
}

/// Messages per second up to `point`: since the previous point, or, at the first point, since
/// this process began counting the queue if that was within `spacing` (before it, the queue
/// saw no message through this process). `None` otherwise, or when the totals went back (the
/// queue was deleted and created again, its count started over).
fn rate(
    previous: Option<&Point>,
    point: &Point,
    spacing: u64,
    total: fn(&ActivityTotals) -> u64,
) -> Option<f64> {
    let (from, before) = match previous {
        Some(previous) => (previous.at, total(&previous.totals)),
        None if point.totals.since > 0
            && point.at.saturating_sub(point.totals.since) <= spacing =>
        {
            (point.totals.since, 0)
        }
        None => return None,
    };
    // At least a second apart, so a first message a moment ago is not a rate in thousands.
    let seconds = point.at.checked_sub(from)?.max(1000) as f64 / 1000.0;
    let added = total(&point.totals).checked_sub(before)?;
    // Two decimals: enough for a chart, and short in JSON.
    Some((added as f64 / seconds * 100.0).round() / 100.0)
}

/// The columns uPlot draws: times in seconds, then one array per series.
#[derive(Debug, Serialize, PartialEq)]
pub(super) struct Columns {
    /// The window the span names, in seconds since the epoch: the charts' x range, whatever
    /// points there are (one point alone must not stretch an hour's axis over years).
    pub(super) from: u64,
    pub(super) to: u64,
    pub(super) t: Vec<u64>,
    pub(super) visible: Vec<u64>,
    pub(super) in_flight: Vec<u64>,
    pub(super) delayed: Vec<u64>,
    pub(super) oldest_age_seconds: Vec<Option<u64>>,
    /// Messages per second since the previous point (`null` at the first).
    pub(super) sent_per_second: Vec<Option<f64>>,
    pub(super) received_per_second: Vec<Option<f64>>,
    pub(super) deleted_per_second: Vec<Option<f64>>,
}

#[derive(Default)]
struct Series {
    hour: VecDeque<Point>,
    day: VecDeque<Point>,
    /// When its page was last opened; `None` for a queue only the sampler follows.
    viewed_at: Option<u64>,
    /// When the sampler last found it.
    sampled_at: u64,
    /// The creation time of the queue the points are of.
    created_at: Millis,
}

impl Series {
    fn push(&mut self, point: Point) {
        if point.created_at != self.created_at {
            // Another queue of the same name: its predecessor's points are not its history.
            self.hour.clear();
            self.day.clear();
            self.created_at = point.created_at;
        }
        push(&mut self.hour, HOUR, point);
        push(&mut self.day, DAY, point);
    }
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
            // Sampler-only queues (`None`) sort first, then the one viewed longest ago.
            let oldest = series
                .iter()
                .min_by_key(|(_, s)| s.viewed_at)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                series.remove(&oldest);
            }
        }
        let entry = series.entry(key).or_default();
        entry.viewed_at = Some(point.at);
        entry.push(point);
    }

    /// The sampler found these queues of one tenant: record the followed ones, follow new
    /// ones while there is room.
    fn sampled(&self, page: &[(&QueueInfo, ActivityTotals)], now: Millis) {
        let mut series = self.lock();
        for (info, totals) in page {
            let point = Point::sampled(info, *totals, now);
            // Owned keys: a page is at most a hundred queues, once a walk.
            let key = (
                info.tenant.as_str().to_owned(),
                info.name.as_str().to_owned(),
            );
            if let Some(entry) = series.get_mut(&key) {
                entry.sampled_at = now;
                entry.push(point);
            } else if series.len() < MAX_QUEUES {
                let entry = series.entry(key).or_default();
                entry.sampled_at = now;
                entry.push(point);
            }
        }
    }

    /// Records a point of a followed queue (nothing if it is not followed).
    pub(super) fn record(&self, tenant: &str, queue: &str, point: Point) {
        let mut series = self.lock();
        if let Some(entry) = series.get_mut(&(tenant.to_owned(), queue.to_owned())) {
            entry.push(point);
        }
    }

    /// The recorded points of one queue over `span` up to `now`, oldest first.
    pub(super) fn columns(&self, tenant: &str, queue: &str, span: Span, now: Millis) -> Columns {
        let series = self.lock();
        let points: Vec<Point> = series
            .get(&(tenant.to_owned(), queue.to_owned()))
            .map(|s| match span {
                Span::Hour => s.hour.iter().copied().collect(),
                Span::Day => s.day.iter().copied().collect(),
            })
            .unwrap_or_default();
        let (spacing, width) = match span {
            Span::Hour => (HOUR.0, HOUR.0 * HOUR.1 as u64),
            Span::Day => (DAY.0, DAY.0 * DAY.1 as u64),
        };
        Columns {
            from: now.saturating_sub(width) / 1000,
            to: now / 1000,
            t: points.iter().map(|p| p.at / 1000).collect(),
            visible: points.iter().map(|p| p.visible).collect(),
            in_flight: points.iter().map(|p| p.in_flight).collect(),
            delayed: points.iter().map(|p| p.delayed).collect(),
            oldest_age_seconds: points.iter().map(|p| p.oldest_age_seconds).collect(),
            sent_per_second: rates(&points, spacing, |t| t.sent),
            received_per_second: rates(&points, spacing, |t| t.received),
            deleted_per_second: rates(&points, spacing, |t| t.deleted),
        }
    }

    /// The viewed queues to read now; forgets those not viewed for a day and those only the
    /// sampler followed that it has not found for an hour.
    fn followed(&self, now: u64) -> Vec<(String, String)> {
        let mut series = self.lock();
        series.retain(|_, s| match s.viewed_at {
            Some(viewed_at) => now.saturating_sub(viewed_at) < FOLLOW_FOR_MS,
            None => now.saturating_sub(s.sampled_at) < SAMPLED_FOR_MS,
        });
        series
            .iter()
            .filter(|(_, s)| s.viewed_at.is_some())
            .map(|(k, _)| k.clone())
            .collect()
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
                            let totals = services.queue_activity(&tenant, &queue);
                            let point = Point::of(&Queue::from(view), totals, now);
                            history.record(&tenant, &queue, point);
                        }
                    }
                }
            });
        });
    }
}

/// The rate of one total at each point.
fn rates(points: &[Point], spacing: u64, total: fn(&ActivityTotals) -> u64) -> Vec<Option<f64>> {
    let mut previous = None;
    points
        .iter()
        .map(|point| {
            let r = rate(previous, point, spacing, total);
            previous = Some(point);
            r
        })
        .collect()
}

impl QueueObserver for History {
    fn observe(&self, page: &[(&QueueInfo, ActivityTotals)], now: Millis) {
        self.sampled(page, now);
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
            totals: ActivityTotals::default(),
            created_at: 0,
        }
    }

    #[test]
    fn rings_keep_one_point_per_spacing_and_are_bounded() {
        let history = History::default();
        history.viewed("t", "q", point(0, 1));
        // Within the same minute: replaces the minute's point.
        history.record("t", "q", point(30_000, 2));
        assert_eq!(history.columns("t", "q", Span::Hour, 0).visible, [2]);
        for minute in 1..=200u64 {
            history.record("t", "q", point(minute * 60_000, minute));
        }
        let hour = history.columns("t", "q", Span::Hour, 0);
        assert_eq!(hour.t.len(), HOUR.1);
        assert_eq!(hour.visible.last(), Some(&200));
        assert_eq!(hour.visible.first(), Some(&141));
        let day = history.columns("t", "q", Span::Day, 0);
        // The last point of each quarter hour: minutes 14, 29, ..., 194, then 200.
        let expected: Vec<u64> = (0..=13).map(|i| (15 * i + 14).min(200)).collect();
        assert_eq!(day.visible, expected);
        // A queue nobody viewed is not followed.
        history.record("t", "other", point(0, 1));
        assert!(history.columns("t", "other", Span::Hour, 0).t.is_empty());
    }

    #[test]
    fn a_queue_created_again_under_its_name_starts_a_new_history() {
        let history = History::default();
        history.viewed("t", "q", point(0, 1));
        history.record("t", "q", point(60_000, 2));
        assert_eq!(history.columns("t", "q", Span::Hour, 0).visible, [1, 2]);
        let again = Point {
            created_at: 100_000,
            ..point(120_000, 7)
        };
        history.record("t", "q", again);
        assert_eq!(history.columns("t", "q", Span::Hour, 0).visible, [7]);
        assert_eq!(history.columns("t", "q", Span::Day, 0).visible, [7]);
        // A late point of the old queue (a walk that read it before the deletion) cannot mix
        // the two either: each switch of incarnation starts afresh.
        history.record("t", "q", point(180_000, 1));
        history.record(
            "t",
            "q",
            Point {
                created_at: 100_000,
                ..point(240_000, 8)
            },
        );
        assert_eq!(history.columns("t", "q", Span::Hour, 0).visible, [8]);
    }

    #[test]
    fn the_columns_span_the_window_their_span_names() {
        let history = History::default();
        history.viewed("t", "q", point(7_200_000, 1));
        let hour = history.columns("t", "q", Span::Hour, 7_260_000);
        assert_eq!((hour.from, hour.to), (3_660, 7_260));
        let day = history.columns("t", "q", Span::Day, 90_000_000);
        assert_eq!((day.from, day.to), (3_600, 90_000));
    }

    #[test]
    fn at_most_max_queues_are_followed_and_idle_ones_are_forgotten() {
        let history = History::default();
        for i in 0..MAX_QUEUES as u64 + 10 {
            history.viewed("t", &format!("q{i}"), point(i, 0));
        }
        assert_eq!(history.lock().len(), MAX_QUEUES);
        // The ten viewed first made room.
        assert!(history.columns("t", "q0", Span::Hour, 0).t.is_empty());
        assert_eq!(history.columns("t", "q10", Span::Hour, 0).t.len(), 1);
        // A day after, only those viewed in the last day are still followed.
        let kept = history.followed(FOLLOW_FOR_MS + 100);
        assert_eq!(kept.len(), (101..MAX_QUEUES as u64 + 10).count());
    }

    fn info(name: &str, visible: u64) -> QueueInfo {
        QueueInfo {
            tenant: TenantId::parse("t").unwrap(),
            name: sluice_engine::QueueName::parse(name).unwrap(),
            config: sluice_engine::QueueConfig::with_defaults(1024),
            created_at: 0,
            updated_at: 0,
            stats: sluice_engine::QueueStats {
                visible,
                oldest_sent_at: Some(1_000),
                ..Default::default()
            },
        }
    }

    /// Totals counted since long before the first point.
    fn sent(n: u64) -> ActivityTotals {
        ActivityTotals {
            sent: n,
            received: n / 2,
            deleted: 0,
            since: 1,
        }
    }

    #[test]
    fn rates_are_the_totals_added_between_points_per_second() {
        let history = History::default();
        let a = info("a", 3);
        history.observe(&[(&a, sent(100))], 660_000);
        history.observe(&[(&a, sent(220))], 720_000);
        // Three minutes later (two missed minutes): the rate is over the whole gap.
        history.observe(&[(&a, sent(580))], 900_000);
        let hour = history.columns("t", "a", Span::Hour, 0);
        assert_eq!(hour.t, [660, 720, 900]);
        assert_eq!(hour.sent_per_second, [None, Some(2.0), Some(2.0)]);
        assert_eq!(hour.received_per_second, [None, Some(1.0), Some(1.0)]);
        assert_eq!(hour.deleted_per_second, [None, Some(0.0), Some(0.0)]);
        assert_eq!(hour.visible, [3, 3, 3]);
        assert_eq!(hour.oldest_age_seconds.last(), Some(&Some(899)));
        // The day ring: one point per quarter hour, the rate over the time between them.
        history.observe(&[(&a, sent(580 + 900 * 4))], 1_800_000);
        let day = history.columns("t", "a", Span::Day, 0);
        assert_eq!(day.t, [720, 900, 1800]);
        // Its first point is within a quarter hour of when counting began: 220 over 720 s.
        assert_eq!(day.sent_per_second, [Some(0.31), Some(2.0), Some(4.0)]);
        // Totals that went back (the queue was created again): no rate, not a negative one.
        history.observe(&[(&a, sent(5))], 1_860_000);
        let hour = history.columns("t", "a", Span::Hour, 0);
        assert_eq!(hour.sent_per_second.last(), Some(&None));
    }

    #[test]
    fn a_first_point_has_a_rate_when_counting_began_within_its_spacing() {
        let history = History::default();
        let (b, c) = (info("b", 0), info("c", 0));
        let recent = ActivityTotals {
            sent: 30,
            received: 10,
            deleted: 0,
            since: 590_000,
        };
        // Counting began 10 s before the point: 30 messages over those 10 s.
        history.observe(&[(&b, recent), (&c, sent(30))], 600_000);
        let hour = history.columns("t", "b", Span::Hour, 0);
        assert_eq!(hour.sent_per_second, [Some(3.0)]);
        assert_eq!(hour.received_per_second, [Some(1.0)]);
        // Counted for longer than a minute before: no honest one-minute rate.
        assert_eq!(
            history.columns("t", "c", Span::Hour, 0).sent_per_second,
            [None]
        );
        // Nothing counted at all: no rate.
        let d = info("d", 0);
        history.observe(&[(&d, ActivityTotals::default())], 600_000);
        assert_eq!(
            history.columns("t", "d", Span::Hour, 0).sent_per_second,
            [None]
        );
    }

    #[test]
    fn the_sampler_follows_queues_while_there_is_room_and_views_take_it_back() {
        let history = History::default();
        let infos: Vec<QueueInfo> = (0..MAX_QUEUES + 5)
            .map(|i| info(&format!("s{i}"), 1))
            .collect();
        let page: Vec<_> = infos.iter().map(|i| (i, sent(0))).collect();
        history.observe(&page, 60_000);
        assert_eq!(history.lock().len(), MAX_QUEUES);
        assert_eq!(history.columns("t", "s0", Span::Hour, 0).t.len(), 1);
        assert!(history
            .columns("t", &format!("s{MAX_QUEUES}"), Span::Hour, 0)
            .t
            .is_empty());
        // A viewed queue makes room by dropping a sampler-only one, and stays followed.
        history.viewed("t", "viewed", point(60_000, 9));
        assert_eq!(history.lock().len(), MAX_QUEUES);
        assert_eq!(history.columns("t", "viewed", Span::Hour, 0).visible, [9]);
        // Only viewed queues are read by the page-view task; sampler-only ones the walk no
        // longer finds are forgotten after an hour.
        assert_eq!(
            history.followed(120_000),
            [("t".to_owned(), "viewed".to_owned())]
        );
        history.followed(60_000 + SAMPLED_FOR_MS);
        assert_eq!(history.lock().len(), 1);
    }
}
