//! Settling a "maybe released" payload (`transfer_settle.lua`): a source queue deleted (or
//! re-created) while a move's intent was pending left an `M` entry in its payload log; in the
//! destination's slot this step decides, atomically with any apply of the same transfer,
//! whether the destination holds or held the message (its transfer id was applied, or the
//! message's tag is in its `pay` once the id is forgotten: nothing to do) or
//! never will (the id is recorded as applied, a void, and one `R` goes into the destination's
//! log). Run by [`payload_events`](RedisEngine::payload_events) for each such entry it reads;
//! see `payload_events.rs` for why no payload leaks and none is released twice.

use super::transfer_apply::APPLIED_WINDOW_MS;
use crate::codec::Reply;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Millis, QueueKey};

/// One "maybe released" entry, addressed to its destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsettled {
    pub transfer_id: String,
    /// The payload tag of the moving message (`payload_events::payload_tag`).
    pub tag: String,
    /// When the intent was recorded: the void's score in `applied`.
    pub at: Millis,
}

impl RedisEngine {
    /// Settles `entries` in `destination`'s slot; answers per entry whether it was released
    /// now (`false`: applied there, or settled before).
    pub(crate) async fn transfer_settle(
        &self,
        destination: &QueueKey,
        entries: &[Unsettled],
    ) -> Result<Vec<bool>, EngineError> {
        // The `R` a void appends goes into the destination's log: registered first, like
        // every writer of a log.
        self.register_queue_payload_log(destination).await?;
        let mut call = self.queue_call(&scripts::TRANSFER_SETTLE, destination);
        call.arg(APPLIED_WINDOW_MS);
        for e in entries {
            call.arg(&e.transfer_id).arg(&e.tag).arg(e.at);
        }
        let reply = self.redis.eval(&call, true).await;
        self.payload_log_written(self.keys.queue_payload_log(destination));
        let mut reply = Reply::new(reply?)?;
        entries.iter().map(|_| Ok(reply.int()? == 1)).collect()
    }
}
