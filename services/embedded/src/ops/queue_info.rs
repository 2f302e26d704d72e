//! The small catalog reads: one queue's info, its config alone, and a tenant's queue count, all
//! from memory.

use crate::catalog::read;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Millis, QueueConfig, QueueInfo, QueueKey, TenantId};

impl EmbeddedEngine {
    /// The queue with its current stats, if it exists.
    pub(crate) async fn get_queue(
        &self,
        key: &QueueKey,
        now: Millis,
    ) -> Result<Option<QueueInfo>, EngineError> {
        Ok(self.queue(key).ok().and_then(|entry| {
            let state = entry.live().ok()?;
            Some(entry.info(key, &state, now))
        }))
    }

    /// The queue's config, if it exists.
    pub(crate) async fn queue_config(
        &self,
        key: &QueueKey,
    ) -> Result<Option<QueueConfig>, EngineError> {
        // The send and receive paths ask this on every call: no stats, just the config.
        Ok(self
            .queue(key)
            .ok()
            .and_then(|entry| Some(entry.live().ok()?.config.clone())))
    }

    /// How many queues the tenant has.
    pub(crate) async fn count_queues(&self, tenant: &TenantId) -> Result<u64, EngineError> {
        Ok(read(&self.queues).get(tenant).map_or(0, |n| n.len() as u64))
    }
}
