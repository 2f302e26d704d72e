//! `expire`: the periodic sweep that deletes messages past retention and forgets FIFO
//! deduplication records (and receive attempts) past their window, of queues and of topics, so
//! an idle one does not keep them. A round visits only the queues and topics the due index
//! (`due.rs`) holds as due by `now`, and in each only its expired messages (the oldest first in
//! the queue's `by_sent` index), so it costs what is due, not one look per queue or message.

use crate::ops::topics::forget_dedup;
use crate::store::WriteOp;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Millis};

impl EmbeddedEngine {
    /// Answers how many messages were deleted, once those deletions are durable.
    pub(crate) async fn expire(&self, now: Millis) -> Result<u64, EngineError> {
        let mut count = 0;
        let mut pending = Vec::new();
        for entry in self.queue_due.take_due(now) {
            // Gone from memory: deleted, and nothing left to do.
            let Some(entry) = entry.upgrade() else {
                continue;
            };
            let mut state = entry.lock();
            // Released at the end of this turn, which files it again under what is due next.
            state.taken_at(now);
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
                // Under the queue's lock, so it lands before anything later done to the queue.
                pending.push(self.store.submit(ops));
            }
        }
        for entry in self.topic_due.take_due(now) {
            let Some(entry) = entry.upgrade() else {
                continue;
            };
            let mut state = entry.lock();
            state.taken_at(now);
            if state.deleted {
                continue;
            }
            let forget = state.prune(now);
            if !forget.is_empty() {
                // Under the topic's lock, so it lands before a later publish records an id
                // again.
                pending.push(
                    self.store
                        .submit(vec![forget_dedup(entry.key.clone(), forget)]),
                );
            }
        }
        for p in pending {
            p.wait().await?;
        }
        Ok(count)
    }
}
