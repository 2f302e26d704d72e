//! `receive`: picks deliverable messages from the index (or replays a FIFO receive attempt) and
//! reads their bodies from disk. Receive bookkeeping stays in memory.

use crate::delivery::seconds;
use crate::index::Pick;
use crate::store::WriteOp;
use crate::EmbeddedEngine;
use sluice_engine::{
    EngineError, Millis, QueueKey, ReceiptHandle, ReceiveOutcome, ReceivedMessage,
};

impl EmbeddedEngine {
    /// Deletes expired messages met on the way without waiting for that commit.
    pub(crate) async fn receive(
        &self,
        key: &QueueKey,
        max_messages: usize,
        visibility_timeout_seconds: u32,
        request_attempt_id: Option<&str>,
        now: Millis,
    ) -> Result<ReceiveOutcome, EngineError> {
        let entry = self.queue(key)?;
        let attempt_id = request_attempt_id.filter(|_| key.name.is_fifo());
        let pick = {
            let mut state = entry.live()?;
            match attempt_id.and_then(|id| state.replay(id, now)) {
                // A retried attempt: the same deliveries, changing nothing.
                Some(attempt) => Pick {
                    delivered: attempt.delivered,
                    expired: Vec::new(),
                    next_visible_at: attempt.next_visible_at,
                },
                None => {
                    let pick = state.receive(
                        max_messages,
                        seconds(visibility_timeout_seconds),
                        now,
                        || entry.next_delivery(),
                    );
                    if let Some(id) = attempt_id {
                        state.remember(id, now, &pick);
                    }
                    if !pick.expired.is_empty() {
                        // Already gone from the index; if this delete is lost in a crash the
                        // next start-up re-indexes them and a later sweep deletes them again.
                        self.store.submit_detached(vec![WriteOp::Delete {
                            uid: entry.uid,
                            seqs: pick.expired.clone(),
                        }]);
                    }
                    pick
                }
            }
        };
        let messages = self
            .load_messages(entry.uid, &pick.delivered)?
            .into_iter()
            .map(|(p, message)| ReceivedMessage {
                message,
                receipt_handle: ReceiptHandle {
                    queue_uid: entry.uid,
                    seq: p.seq,
                    delivery: p.state.delivery,
                }
                .encode(&self.handle_key),
            })
            .collect();
        Ok(ReceiveOutcome {
            messages,
            next_visible_at: pick.next_visible_at,
            dead_lettered: 0,
        })
    }
}
