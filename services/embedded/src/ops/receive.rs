//! `receive`: picks deliverable messages from the index (or replays a FIFO receive attempt),
//! moves those received too often to the queue's dead-letter queue instead (see `transfer.rs`),
//! and reads the delivered ones' bodies from disk. Receive bookkeeping stays in memory; only a
//! move is written (and waited for) before the answer.

use crate::delivery::seconds;
use crate::index::{Pick, QueueState, Redelivery, Taken};
use crate::ops::transfer::{Locked, Move};
use crate::queue_entry::QueueEntry;
use crate::store::{Pending, WriteOp};
use crate::EmbeddedEngine;
use sluice_engine::{
    DeadLetter, EngineError, Millis, QueueKey, QueueName, ReceiptHandle, ReceiveOutcome,
    ReceivedMessage, RedrivePolicy,
};
use std::sync::Arc;

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
        let request = Request {
            key,
            entry: &entry,
            max_messages,
            visibility_ms: seconds(visibility_timeout_seconds),
            attempt_id: request_attempt_id.filter(|_| key.name.is_fifo()),
            now,
        };
        let (pick, moved) = {
            let mut state = entry.live()?;
            match state.config.redrive_policy.clone() {
                // The common case costs one lock, as before dead letters.
                None => (self.pick(&request, &mut state, None), None),
                Some(policy) => {
                    drop(state);
                    self.pick_moving(&request, &policy)?
                }
            }
        };
        let mut dead_lettered = 0;
        if let Some((pending, moved)) = moved {
            // Durable before the answer; a failed move put the messages back in this queue.
            pending.wait().await?;
            dead_lettered = moved;
        }
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
            dead_lettered,
        })
    }

    /// The receive on a queue with a redrive policy: both queues locked, the messages taken
    /// out submitted as one move. A missing dead-letter queue moves nothing: its messages are
    /// delivered as usual.
    fn pick_moving(
        &self,
        request: &Request<'_>,
        policy: &RedrivePolicy,
    ) -> Result<(Pick, Option<(Pending, u64)>), EngineError> {
        let (key, entry) = (request.key, request.entry);
        let dlq_key = QueueKey::new(key.tenant.clone(), policy.dead_letter_queue.clone());
        let Ok(dlq) = self.queue(&dlq_key) else {
            return Ok((self.pick(request, &mut *entry.live()?, None), None));
        };
        let mut locked = Locked::lock(entry, &dlq);
        if locked.source().deleted {
            return Err(EngineError::QueueNotFound);
        }
        // The policy may have changed since it was read: only the one in force moves.
        let in_force = locked.source().config.redrive_policy.as_ref() == Some(policy);
        let dead_letter_after =
            (in_force && !locked.destination().deleted).then_some(policy.max_receive_count);
        let mut pick = self.pick(request, locked.source(), dead_letter_after);
        let moves = dead_letters(&key.name, std::mem::take(&mut pick.taken), request.now);
        if moves.is_empty() {
            return Ok((pick, None));
        }
        let moved = moves.len() as u64;
        let pending = self.submit_transfer(entry, &dlq, locked.destination(), moves, request.now);
        Ok((pick, Some((pending, moved))))
    }

    /// The receive on the (locked, live) index: a replayed attempt, or a new pick that takes
    /// out the messages received `dead_letter_after` times already.
    fn pick(
        &self,
        request: &Request<'_>,
        state: &mut QueueState,
        dead_letter_after: Option<u32>,
    ) -> Pick {
        let now = request.now;
        if let Some(attempt) = request.attempt_id.and_then(|id| state.replay(id, now)) {
            // A retried attempt: the same deliveries, changing nothing.
            return Pick {
                delivered: attempt.delivered,
                next_visible_at: attempt.next_visible_at,
                ..Pick::default()
            };
        }
        let backoff = state.config.retry_backoff;
        let rules = Redelivery {
            dead_letter_after,
            // The jitter is drawn per delivery, so redeliveries of a burst spread out.
            backoff: |count| backoff.map_or(0, |b| b.delay_ms(count, rand::random::<f64>())),
        };
        let entry = request.entry;
        let pick = state.receive_with(
            request.max_messages,
            request.visibility_ms,
            now,
            rules,
            || entry.next_delivery(),
        );
        if let Some(id) = request.attempt_id {
            state.remember(id, now, &pick);
        }
        if !pick.expired.is_empty() {
            // Already gone from the index; if this delete is lost in a crash the next start-up
            // re-indexes them and a later sweep deletes them again.
            self.store.submit_detached(vec![WriteOp::Delete {
                uid: entry.uid,
                seqs: pick.expired.clone(),
            }]);
        }
        pick
    }
}

/// What one receive asked for.
struct Request<'a> {
    key: &'a QueueKey,
    entry: &'a Arc<QueueEntry>,
    max_messages: usize,
    visibility_ms: Millis,
    attempt_id: Option<&'a str>,
    now: Millis,
}

/// The moves of messages taken out after too many receives, each with its dead-letter record.
fn dead_letters(source: &QueueName, taken: Vec<Taken>, now: Millis) -> Vec<Move> {
    taken
        .into_iter()
        .map(|taken| Move {
            dead_letter: Some(DeadLetter {
                source_queue: source.clone(),
                reason: DeadLetter::MAX_RECEIVE_COUNT_EXCEEDED.into(),
                receive_count: taken.state.receive_count,
                moved_at: now,
            }),
            taken,
        })
        .collect()
}
