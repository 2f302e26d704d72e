//! `expire`: the periodic sweep that deletes messages past retention and forgets FIFO
//! deduplication records past their window (of queues and of topics, so an idle one does not
//! keep them).

use crate::catalog::{read, topics};
use crate::ops::topics::forget_dedup;
use crate::queue_entry::QueueEntry;
use crate::store::WriteOp;
use crate::topic_entry::TopicEntry;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Millis};
use std::collections::BTreeMap;
use std::sync::Arc;

impl EmbeddedEngine {
    /// Answers how many messages were deleted, once those deletions are durable.
    pub(crate) async fn expire(&self, now: Millis) -> Result<u64, EngineError> {
        let entries: Vec<Arc<QueueEntry>> = read(&self.queues)
            .values()
            .flat_map(BTreeMap::values)
            .cloned()
            .collect();
        let mut count = 0;
        let mut pending = Vec::new();
        for entry in entries {
            let mut state = entry.lock();
            if state.deleted {
                continue;
            }
            let seqs = state.take_expired(now);
            let forget = state.prune_fifo(now);
            let mut ops = Vec::new();
            if !seqs.is_empty() {
                count += seqs.len() as u64;
                ops.push(WriteOp::Delete {
                    uid: entry.uid,
                    seqs,
                });
            }
            if !forget.is_empty() {
                ops.push(WriteOp::Forget {
                    uid: entry.uid,
                    keys: forget,
                });
            }
            if !ops.is_empty() {
                pending.push(self.store.submit(ops));
            }
        }
        let topics: Vec<(String, Arc<TopicEntry>)> = topics(&self.topics)
            .iter()
            .flat_map(|(tenant, names)| {
                names
                    .iter()
                    .map(move |(name, entry)| (format!("{tenant}/{name}"), Arc::clone(entry)))
            })
            .collect();
        for (key, entry) in topics {
            let mut state = entry.lock();
            if state.deleted {
                continue;
            }
            let forget = state.prune(now);
            if !forget.is_empty() {
                // Under the topic's lock, so it lands before a later publish records an id
                // again.
                pending.push(self.store.submit(vec![forget_dedup(key, forget)]));
            }
        }
        for p in pending {
            p.wait().await?;
        }
        Ok(count)
    }
}
