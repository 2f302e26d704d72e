//! [`QueueEntry`]: one queue incarnation in memory, its fixed identity (uid, creation time), its
//! index behind a mutex, its place in the retention sweep's due index and the counter that
//! numbers its deliveries.

use crate::due::{DueGuard, DueIndex, Filed, Slot};
use crate::index::QueueState;
use sluice_engine::{EngineError, Millis, QueueInfo, QueueKey};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The queues' due index (see `due.rs`).
pub(crate) type QueueDue = DueIndex<QueueEntry>;

/// A queue's state, locked; releasing it files the queue in the due index if its next
/// expiry (or FIFO record's end) came forward.
pub(crate) type QueueGuard<'a> = DueGuard<'a, QueueState, QueueEntry>;

/// One queue incarnation in memory: identity that never changes, state behind a mutex.
pub(crate) struct QueueEntry {
    /// Identifies this incarnation on disk and in its receipt handles.
    pub(crate) uid: u64,
    pub(crate) created_at: Millis,
    state: Mutex<Filed<QueueState>>,
    /// Where the sweep finds it.
    due: Slot<QueueEntry>,
    /// Numbers this queue's deliveries (taken under the state lock, so in delivery order).
    /// Starts at a random value on every open, so a handle issued before a restart never
    /// matches a delivery made after it; per queue, so it counts nobody else's traffic.
    deliveries: AtomicU64,
}

impl QueueEntry {
    /// The entry, filed in `due` if its state already has something to expire (loaded at
    /// start-up).
    pub(crate) fn new(
        uid: u64,
        created_at: Millis,
        state: QueueState,
        due: &Arc<QueueDue>,
    ) -> Arc<Self> {
        let entry = Arc::new_cyclic(|me: &Weak<Self>| Self {
            uid,
            created_at,
            state: Mutex::new(Filed::new(state)),
            due: Slot {
                index: Arc::clone(due),
                id: due.new_id(),
                me: Weak::clone(me),
            },
            deliveries: AtomicU64::new(rand::random()),
        });
        drop(entry.lock());
        entry
    }

    pub(crate) fn next_delivery(&self) -> u64 {
        self.deliveries.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn lock(&self) -> QueueGuard<'_> {
        // A panic under this lock leaves at worst a stale index entry, never a broken store:
        // carry on rather than fail every later request on the queue (poisoning is ignored).
        DueGuard::lock(&self.state, &self.due)
    }

    /// The state, unless the queue was deleted after it was looked up.
    pub(crate) fn live(&self) -> Result<QueueGuard<'_>, EngineError> {
        let state = self.lock();
        if state.deleted {
            return Err(EngineError::QueueNotFound);
        }
        Ok(state)
    }

    pub(crate) fn info(&self, key: &QueueKey, state: &QueueState, now: Millis) -> QueueInfo {
        self.info_of(key.clone(), state, now)
    }

    /// [`info`](Self::info), taking the key (a listing already owns one per queue).
    pub(crate) fn info_of(&self, key: QueueKey, state: &QueueState, now: Millis) -> QueueInfo {
        QueueInfo {
            tenant: key.tenant,
            name: key.name,
            config: state.config.clone(),
            created_at: self.created_at,
            updated_at: state.updated_at,
            stats: state.stats(now),
        }
    }
}
