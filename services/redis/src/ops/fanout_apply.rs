//! The apply step of a fan-out (`fanout_apply.lua`): in the destination queue's slot, each
//! copy is inserted as a new message unless its apply id was applied there before; in `Copy`
//! mode the queue may refuse it (too large, full), and a refusal is remembered as well, so a
//! repeated apply answers what the first one did.

use super::transfer_apply::APPLIED_WINDOW_MS;
use crate::codec::Reply;
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use sluice_engine::{DeliveryFailure, EngineError, Millis, QueueKey};

/// How long a queue remembers the apply ids of fan-out copies (and refusals): far longer
/// than recovery takes to repeat an apply (seconds, or as long as the store is away), but
/// shorter than moves' [`APPLIED_WINDOW_MS`], since every copy leaves one.
pub(crate) const FANOUT_APPLIED_WINDOW_MS: Millis = 60 * 60 * 1000;

/// How a queue takes copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ApplyMode {
    /// A subscription's queue: bounded by `max_depth` and `max_message_bytes`, visible after
    /// its `delay_seconds`.
    Copy,
    /// A delivery's dead-letter queue: takes the copy whatever its depth and size, visible at
    /// once, like a dead-letter move.
    Dead,
}

/// One copy to insert.
pub(crate) struct CopyIn {
    /// `<publication message id>/<subscription id>`.
    pub apply_id: String,
    /// The message's JSON as the queue stores it.
    pub msg: String,
    /// What `max_message_bytes` bounds.
    pub size: usize,
    /// The publish.
    pub sent_at: Millis,
    pub group: Option<String>,
    /// The copy's payload tag (`ops/payload_events.rs`; empty without a payload).
    pub payload_tag: String,
}

/// What became of one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    /// In the queue (now or by an earlier apply).
    Made,
    /// Refused (now or by an earlier apply).
    Refused(DeliveryFailure),
}

impl RedisEngine {
    /// Inserts `copies` into `key`, in order. A missing queue refuses each copy as
    /// `QueueMissing`, except those applied before it was deleted: they were made (and went
    /// with the queue), so a repeat neither sends them elsewhere nor releases their payload
    /// again.
    pub(crate) async fn fanout_apply(
        &self,
        key: &QueueKey,
        copies: &[CopyIn],
        mode: ApplyMode,
        now: Millis,
    ) -> Result<Vec<Applied>, EngineError> {
        if copies.iter().any(|c| !c.payload_tag.is_empty()) {
            self.register_queue_payload_log(key).await?;
        }
        let queue_id = Keys::queue_id(key);
        let mut call = self.queue_call(&scripts::FANOUT_APPLY, key);
        call.arg(now)
            .arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id))
            .arg(APPLIED_WINDOW_MS)
            .arg(match mode {
                ApplyMode::Copy => "copy",
                ApplyMode::Dead => "dead",
            })
            .arg(FANOUT_APPLIED_WINDOW_MS);
        for c in copies {
            call.arg(&c.apply_id)
                .arg(&c.msg)
                .arg(c.size)
                .arg(c.sent_at)
                .arg(c.group.as_deref().unwrap_or_default())
                .arg(&c.payload_tag);
        }
        let mut reply = Reply::new(self.redis.eval(&call, true).await?)?;
        if reply.int()? == 0 {
            self.configs.remove(key);
            return copies
                .iter()
                .map(|_| {
                    Ok(match reply.int()? {
                        1 => Applied::Made,
                        _ => Applied::Refused(DeliveryFailure::QueueMissing),
                    })
                })
                .collect();
        }
        let mut answers = Vec::with_capacity(copies.len());
        let mut earliest: Option<Millis> = None;
        for c in copies {
            answers.push(match reply.int()? {
                1 => {
                    earliest = Some(earliest.map_or(c.sent_at, |e| e.min(c.sent_at)));
                    Applied::Made
                }
                2 => Applied::Made,
                3 => Applied::Refused(DeliveryFailure::TooLarge),
                _ => Applied::Refused(DeliveryFailure::QueueFull),
            });
        }
        if let Some(sent_at) = earliest {
            self.wakers.wake(&queue_id);
            // A copy keeps the publish as its sent_at, which may be earlier than the time the
            // queue is filed under in the expiry index: file it no later (as moves do).
            let mut due = redis::cmd("ZADD");
            due.arg(self.keys.expiry_due())
                .arg("LT")
                .arg(sent_at)
                .arg(&queue_id);
            self.redis.query::<i64>(&due).await?;
        }
        Ok(answers)
    }
}
