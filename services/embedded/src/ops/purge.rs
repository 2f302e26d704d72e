//! `purge`: empties a queue, in the index at once and on disk by one range delete.

use crate::store::WriteOp;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, QueueKey};

impl EmbeddedEngine {
    /// Answers once the purge is durable.
    pub(crate) async fn purge(&self, key: &QueueKey) -> Result<(), EngineError> {
        let entry = self.queue(key)?;
        let pending = {
            let mut state = entry.live()?;
            let below = state.purge();
            self.store.submit(vec![WriteOp::Purge {
                uid: entry.uid,
                below,
            }])
        };
        pending.wait().await
    }
}
