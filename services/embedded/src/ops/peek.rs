//! `peek`: lists messages in one state without delivering them.

use crate::EmbeddedEngine;
use sluice_engine::{EngineError, MessageState, Millis, QueueKey, StoredMessage};

impl EmbeddedEngine {
    /// Reads the listed messages from disk; changes nothing.
    pub(crate) async fn peek(
        &self,
        key: &QueueKey,
        state: MessageState,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<StoredMessage>, EngineError> {
        let entry = self.queue(key)?;
        let picked = entry.live()?.peek(state, limit, now);
        Ok(self
            .load_messages(entry.uid, &picked)?
            .into_iter()
            .map(|(_, m)| m)
            .collect())
    }
}
