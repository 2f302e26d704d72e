//! `delete_queue`: removes the queue from the catalog, closes it and deletes it on disk.

use crate::catalog::write;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, QueueKey};

impl EmbeddedEngine {
    /// Answers whether the queue existed, once its deletion is durable.
    pub(crate) async fn delete_queue(&self, key: &QueueKey) -> Result<bool, EngineError> {
        let _admin = self.admin.lock().await;
        let entry = {
            let mut queues = write(&self.queues);
            let Some(names) = queues.get_mut(&key.tenant) else {
                return Ok(false);
            };
            let Some(entry) = names.remove(&key.name) else {
                return Ok(false);
            };
            if names.is_empty() {
                queues.remove(&key.tenant);
            }
            entry
        };
        let ops = Self::close_queues([(key.to_string(), &entry)]);
        self.store.submit(ops).wait().await?;
        Ok(true)
    }
}
