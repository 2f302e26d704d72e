//! `expire`: the periodic sweep that deletes messages past retention and forgets FIFO
//! deduplication records past their window.

use crate::catalog::read;
use crate::queue_entry::QueueEntry;
use crate::store::WriteOp;
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
        for p in pending {
            p.wait().await?;
        }
        Ok(count)
    }
}
