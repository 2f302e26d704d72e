//! The apply step of a move (`transfer_apply.lua`): in the destination queue's slot, the
//! message is inserted as a new one unless its transfer id was applied there before.

use crate::codec::Reply;
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Millis, QueueKey};

/// How long a queue remembers the transfer ids applied into it: recovery repeats an apply
/// within seconds, so a day is a wide margin.
pub(crate) const APPLIED_WINDOW_MS: Millis = 24 * 60 * 60 * 1000;

/// One message to insert at the destination.
pub(crate) struct Arrival {
    pub transfer_id: String,
    /// The message's JSON as the destination stores it (dead-letter record set or cleared).
    pub msg: String,
    pub sent_at: Millis,
    pub group: Option<String>,
    /// Its size as `max_message_bytes` counts it (the destination's stored bytes grow by it).
    pub size: usize,
    /// Its payload tag (`ops/payload_events.rs`; empty without a payload): carried, never
    /// released or added by a move.
    pub payload_tag: String,
}

impl RedisEngine {
    /// Inserts the arrivals into `key`; per arrival whether it was inserted now (`false`: an
    /// earlier apply of the same transfer did). `Err` per arrival: the destination does not
    /// exist — `true` if this transfer was applied before it was deleted (the message went
    /// with it: the move is done and must not be reverted), `false` if never.
    pub(crate) async fn transfer_apply(
        &self,
        key: &QueueKey,
        arrivals: &[Arrival],
        now: Millis,
    ) -> Result<Result<Vec<bool>, Vec<bool>>, EngineError> {
        if arrivals.iter().any(|a| !a.payload_tag.is_empty()) {
            self.register_queue_payload_log(key).await?;
        }
        let queue_id = Keys::queue_id(key);
        let mut call = self.queue_call(&scripts::TRANSFER_APPLY, key);
        call.arg(now)
            .arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id))
            .arg(APPLIED_WINDOW_MS);
        for a in arrivals {
            call.arg(&a.transfer_id)
                .arg(&a.msg)
                .arg(a.sent_at)
                .arg(a.group.as_deref().unwrap_or_default())
                .arg(a.size)
                .arg(&a.payload_tag);
        }
        let mut reply = Reply::new(self.redis.eval(&call, true).await?)?;
        if reply.int()? == 0 {
            self.configs.remove(key);
            let applied = arrivals
                .iter()
                .map(|_| Ok(reply.int()? == 1))
                .collect::<Result<Vec<bool>, EngineError>>()?;
            return Ok(Err(applied));
        }
        let mut fresh = Vec::with_capacity(arrivals.len());
        for _ in arrivals {
            fresh.push(reply.u64()? != 0);
        }
        let earliest = arrivals
            .iter()
            .zip(&fresh)
            .filter(|(_, fresh)| **fresh)
            .map(|(a, _)| a.sent_at)
            .min();
        if let Some(sent_at) = earliest {
            self.wakers.wake(&queue_id);
            // A message moved into a standard queue keeps its sent_at, so it may expire before
            // the time the queue is filed under in the due index: file it no later than that
            // sent_at (`LT`), and the next sweep files it exactly.
            let mut due = redis::cmd("ZADD");
            due.arg(self.keys.expiry_due())
                .arg("LT")
                .arg(sent_at)
                .arg(&queue_id);
            self.redis.query::<i64>(&due).await?;
        }
        Ok(Ok(fresh))
    }
}
