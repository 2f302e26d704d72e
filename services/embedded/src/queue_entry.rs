//! [`QueueEntry`]: one queue incarnation in memory, its fixed identity (uid, creation time), its
//! index behind a mutex and the counter that numbers its deliveries.

use crate::index::QueueState;
use sluice_engine::{EngineError, Millis, QueueInfo, QueueKey};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// One queue incarnation in memory: identity that never changes, state behind a mutex.
pub(crate) struct QueueEntry {
    /// Identifies this incarnation on disk and in its receipt handles.
    pub(crate) uid: u64,
    pub(crate) created_at: Millis,
    state: Mutex<QueueState>,
    /// Numbers this queue's deliveries (taken under the state lock, so in delivery order).
    /// Starts at a random value on every open, so a handle issued before a restart never
    /// matches a delivery made after it; per queue, so it counts nobody else's traffic.
    deliveries: AtomicU64,
}

impl QueueEntry {
    pub(crate) fn new(uid: u64, created_at: Millis, state: QueueState) -> Self {
        Self {
            uid,
            created_at,
            state: Mutex::new(state),
            deliveries: AtomicU64::new(rand::random()),
        }
    }

    pub(crate) fn next_delivery(&self) -> u64 {
        self.deliveries.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A panic under this lock leaves at worst a stale index entry, never a broken store:
        // carry on rather than fail every later request on the queue.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, unless the queue was deleted after it was looked up.
    pub(crate) fn live(&self) -> Result<MutexGuard<'_, QueueState>, EngineError> {
        let state = self.lock();
        if state.deleted {
            return Err(EngineError::QueueNotFound);
        }
        Ok(state)
    }

    pub(crate) fn info(&self, key: &QueueKey, state: &QueueState, now: Millis) -> QueueInfo {
        QueueInfo {
            tenant: key.tenant.clone(),
            name: key.name.clone(),
            config: state.config.clone(),
            created_at: self.created_at,
            updated_at: state.updated_at,
            stats: state.stats(now),
        }
    }
}
