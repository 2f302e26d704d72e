//! Receiving messages (`receive.lua`), and `listen`, the wake-up a long poll waits on between
//! receives. A receive is one script call; only when it answers messages that must move to
//! the dead-letter queue instead of being delivered does it run the move's steps (see
//! `transfers.rs`).

use super::calls::{not_found, seconds};
use super::handles::{delivery_number, SALT_BITS};
use crate::codec::{from_json, StoredBody};
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use sluice_engine::{
    EngineError, Millis, QueueKey, QueueListener, ReceiptHandle, ReceiveOutcome, ReceivedMessage,
    RECEIVE_ATTEMPT_WINDOW_MS,
};

impl RedisEngine {
    pub(crate) async fn receive(
        &self,
        key: &QueueKey,
        max_messages: usize,
        visibility_timeout_seconds: u32,
        request_attempt_id: Option<&str>,
        now: Millis,
    ) -> Result<ReceiveOutcome, EngineError> {
        let salt = rand::random::<u64>() & ((1 << SALT_BITS) - 1);
        let mut call = self.queue_call(&scripts::RECEIVE, key);
        call.arg(now)
            .arg(max_messages)
            .arg(seconds(visibility_timeout_seconds))
            .arg(salt)
            .arg(request_attempt_id.unwrap_or_default())
            .arg(RECEIVE_ATTEMPT_WINDOW_MS)
            .arg(if self.missing_dlqs.get(key).is_some() {
                "0"
            } else {
                "1"
            });
        // One jitter draw per possible delivery (the script uses them only under a backoff).
        for _ in 0..max_messages {
            call.arg(format!("{:.6}", rand::random::<f64>()));
        }
        // Receive bookkeeping may be lost with the store (see the trait): no WAIT for it.
        let mut reply = not_found(self.run_queue(key, &call, false).await?)?;
        let uid: u64 = reply
            .text()?
            .parse()
            .map_err(|_| EngineError::Internal(format!("corrupt uid of queue {key}")))?;
        let next_visible_at = reply.time()?;
        // Ours, or the one of the answer a request attempt id replays.
        let salt = reply.u64()?;
        let move_count = reply.u64()?;
        let mut moves = Vec::new();
        for _ in 0..move_count {
            moves.push(reply.u64()?);
        }
        let mut messages = Vec::new();
        while !reply.is_empty() {
            let seq = reply.u64()?;
            let sent_at = reply.u64()?;
            let receive_count = u32::try_from(reply.u64()?).unwrap_or(u32::MAX);
            let first_received_at = reply.time()?;
            let delivery = delivery_number(reply.u64()?, salt);
            let body: StoredBody = from_json(&reply.bytes()?)?;
            messages.push(ReceivedMessage {
                message: body.into_message(seq, sent_at, receive_count, first_received_at),
                receipt_handle: ReceiptHandle {
                    queue_uid: uid,
                    seq,
                    delivery,
                }
                .encode(&self.handle_key),
            });
        }
        let mut dead_lettered = 0;
        if !moves.is_empty() {
            // The deliveries are made: a failing move must not lose them. Its message is then
            // in neither queue until recovery completes the move.
            match self.move_exhausted(key, &moves, now).await {
                Ok(moved) => dead_lettered = moved,
                Err(e) => tracing::warn!(queue = %key, "dead-letter move not finished: {e}"),
            }
        }
        Ok(ReceiveOutcome {
            messages,
            next_visible_at,
            dead_lettered,
        })
    }

    pub(crate) async fn listen(&self, key: &QueueKey) -> Result<QueueListener, EngineError> {
        // No Redis call: the receive that follows finds out whether the queue exists.
        Ok(QueueListener::new(self.wakers.listen(&Keys::queue_id(key))))
    }
}
