//! `list_queues`: a page of a tenant's queues by name, from the in-memory catalog.

use crate::catalog::read;
use crate::queue_entry::QueueEntry;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Millis, QueueInfo, QueueKey, QueueName, TenantId};
use std::ops::Bound;
use std::sync::Arc;

impl EmbeddedEngine {
    /// Queues named with `prefix`, after `after`, at most `limit`, with their stats.
    pub(crate) async fn list_queues(
        &self,
        tenant: &TenantId,
        prefix: &str,
        after: Option<&QueueName>,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<QueueInfo>, EngineError> {
        let entries: Vec<(QueueName, Arc<QueueEntry>)> = {
            let queues = read(&self.queues);
            let Some(names) = queues.get(tenant) else {
                return Ok(Vec::new());
            };
            let start = after.map_or(Bound::Unbounded, Bound::Excluded);
            names
                .range((start, Bound::Unbounded))
                .skip_while(|(name, _)| name.as_str() < prefix)
                .take_while(|(name, _)| name.as_str().starts_with(prefix))
                .take(limit)
                .map(|(name, entry)| (name.clone(), Arc::clone(entry)))
                .collect()
        };
        // Stats are computed outside the map lock: they walk each queue's index.
        Ok(entries
            .into_iter()
            .filter_map(|(name, entry)| {
                let state = entry.live().ok()?;
                Some(entry.info_of(QueueKey::new(tenant.clone(), name), &state, now))
            })
            .collect())
    }
}
