//! `listen`: subscribes to a queue's changes, to wake long polls.

use crate::EmbeddedEngine;
use sluice_engine::{EngineError, QueueKey, QueueListener};

impl EmbeddedEngine {
    /// A listener on the queue's in-memory change counter.
    pub(crate) async fn listen(&self, key: &QueueKey) -> Result<QueueListener, EngineError> {
        let entry = self.queue(key)?;
        let rx = entry.live()?.subscribe();
        rx.map(QueueListener::new).ok_or(EngineError::QueueNotFound)
    }
}
