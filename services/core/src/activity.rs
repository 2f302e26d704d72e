//! How many messages this process sent, received and deleted per queue since it started: the
//! running totals behind the dashboard's rate charts (which take differences between two
//! readings). Counted beside `sluice_messages_total`, where each outcome is known, so the
//! dashboard need not read the metrics recorder. Memory is bounded: at most
//! [`MAX_COUNTED_QUEUES`] queues are counted, the first ones to see traffic; a deleted queue
//! keeps its totals until a sampler walk no longer finds it. Each gateway counts its own requests only.

use sluice_engine::{Clock, Millis, QueueInfo, QueueKey};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Most queues counted at once (about 100 bytes each).
pub const MAX_COUNTED_QUEUES: usize = 10_000;

/// A queue's totals since this process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActivityTotals {
    /// Messages sent (each batch entry and topic copy counts).
    pub sent: u64,
    /// Messages received (each delivery counts, redeliveries too).
    pub received: u64,
    /// Messages deleted through their receipt handles.
    pub deleted: u64,
    /// When this process began counting the queue (its first counted message), milliseconds
    /// since the epoch; 0 when it has not.
    pub since: Millis,
}

/// Told of every queue the queue sampler's walk finds, with its totals: the dashboard's
/// charts follow queues nobody opened this way. Called with a page of one tenant's queues at
/// a time, on the sampler's task, so it must be quick.
pub trait QueueObserver: Send + Sync {
    /// One page of a tenant's queues, read at `now`.
    fn observe(&self, page: &[(&QueueInfo, ActivityTotals)], now: Millis);
}

/// Which total an outcome adds to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Counted {
    Sent,
    Received,
    Deleted,
}

/// The totals by tenant, then queue name (looked up by `&str`, so counting a known queue
/// allocates nothing).
pub(crate) struct QueueActivity {
    totals: Mutex<Tenants>,
    clock: Arc<dyn Clock>,
}

/// A queue's totals and the sampler walk that last found it (or during which it was first
/// counted).
type Entry = (ActivityTotals, u64);

#[derive(Default)]
struct Tenants {
    by_tenant: HashMap<String, HashMap<String, Entry>>,
    queues: usize,
    /// The sampler walk in progress.
    walk: u64,
}

impl QueueActivity {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            totals: Mutex::default(),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tenants> {
        self.totals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `n` to a total of `key` (nothing for a new queue once [`MAX_COUNTED_QUEUES`] are).
    pub(crate) fn add(&self, key: &QueueKey, what: Counted, n: u64) {
        let mut guard = self.lock();
        let tenants = &mut *guard;
        let (tenant, queue) = (key.tenant.as_str(), key.name.as_str());
        let full = tenants.queues >= MAX_COUNTED_QUEUES;
        if !tenants.by_tenant.contains_key(tenant) {
            if full {
                return;
            }
            tenants.by_tenant.insert(tenant.to_owned(), HashMap::new());
        }
        let Some(queues) = tenants.by_tenant.get_mut(tenant) else {
            return;
        };
        if !queues.contains_key(queue) {
            if full {
                return;
            }
            let totals = ActivityTotals {
                since: self.clock.now(),
                ..ActivityTotals::default()
            };
            queues.insert(queue.to_owned(), (totals, tenants.walk));
            tenants.queues += 1;
        }
        if let Some((totals, _)) = queues.get_mut(queue) {
            let total = match what {
                Counted::Sent => &mut totals.sent,
                Counted::Received => &mut totals.received,
                Counted::Deleted => &mut totals.deleted,
            };
            *total = total.saturating_add(n);
        }
    }

    /// The totals of one queue; zero for a queue this process has not counted.
    pub(crate) fn totals(&self, tenant: &str, queue: &str) -> ActivityTotals {
        self.lock()
            .by_tenant
            .get(tenant)
            .and_then(|queues| queues.get(queue))
            .map(|(totals, _)| *totals)
            .unwrap_or_default()
    }

    /// A sampler walk over every queue begins.
    pub(crate) fn begin_walk(&self) {
        self.lock().walk += 1;
    }

    /// The walk found these queues of `tenant`.
    pub(crate) fn found<'a>(&self, tenant: &str, queues: impl Iterator<Item = &'a str>) {
        let mut guard = self.lock();
        let walk = guard.walk;
        if let Some(counted) = guard.by_tenant.get_mut(tenant) {
            for queue in queues {
                if let Some(entry) = counted.get_mut(queue) {
                    entry.1 = walk;
                }
            }
        }
    }

    /// The walk went through every queue: those it did not find (deleted) give their room
    /// back. A queue first counted during the walk is kept.
    pub(crate) fn finish_walk(&self) {
        let mut guard = self.lock();
        let tenants = &mut *guard;
        let walk = tenants.walk;
        let mut kept = 0;
        tenants.by_tenant.retain(|_, queues| {
            queues.retain(|_, (_, seen)| *seen == walk);
            kept += queues.len();
            !queues.is_empty()
        });
        tenants.queues = kept;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use sluice_engine::{QueueName, TenantId};

    fn key(tenant: &str, queue: &str) -> QueueKey {
        QueueKey {
            tenant: TenantId::parse(tenant).unwrap(),
            name: QueueName::parse(queue).unwrap(),
        }
    }

    #[test]
    fn totals_add_up_per_queue_and_are_bounded() {
        let activity = QueueActivity::new(Arc::new(sluice_engine::ManualClock::new(5_000)));
        activity.add(&key("t", "a"), Counted::Sent, 3);
        activity.add(&key("t", "a"), Counted::Sent, 2);
        activity.add(&key("t", "a"), Counted::Received, 4);
        activity.add(&key("t", "a"), Counted::Deleted, 1);
        activity.add(&key("u", "a"), Counted::Sent, 7);
        assert_eq!(
            activity.totals("t", "a"),
            ActivityTotals {
                sent: 5,
                received: 4,
                deleted: 1,
                since: 5_000,
            }
        );
        assert_eq!(activity.totals("u", "a").sent, 7);
        assert_eq!(activity.totals("t", "b"), ActivityTotals::default());
        for i in 0..MAX_COUNTED_QUEUES {
            activity.add(&key("v", &format!("q{i}")), Counted::Sent, 1);
        }
        // Full: a new queue is not counted, a known one still is.
        assert_eq!(
            activity
                .totals("v", &format!("q{}", MAX_COUNTED_QUEUES - 1))
                .sent,
            0
        );
        assert_eq!(activity.totals("v", "q0").sent, 1);
        activity.add(&key("t", "a"), Counted::Sent, 1);
        assert_eq!(activity.totals("t", "a").sent, 6);
        // Deleted queues give their room back once a walk no longer finds them.
        activity.begin_walk();
        activity.found("t", ["a"].into_iter());
        activity.finish_walk();
        assert_eq!(activity.totals("t", "a").sent, 6);
        assert_eq!(activity.totals("u", "a").sent, 0, "not found by the walk");
        activity.begin_walk();
        activity.add(&key("u", "b"), Counted::Sent, 1);
        activity.finish_walk();
        assert_eq!(activity.totals("u", "b").sent, 1, "counted during the walk");
        activity.add(&key("v", "new"), Counted::Sent, 1);
        assert_eq!(activity.totals("v", "new").sent, 1);
    }
}
