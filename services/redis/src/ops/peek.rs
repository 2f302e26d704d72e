//! Looking at a queue's messages in one state without receiving them (`peek.lua`).

use super::calls::not_found;
use crate::codec::{from_json, StoredBody};
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, MessageState, Millis, QueueKey, StoredMessage};

/// How many messages a peek looks at, at most, to find those in the state asked for.
const PEEK_SCAN: usize = 10_000;

fn state_name(state: MessageState) -> &'static str {
    match state {
        MessageState::Visible => "visible",
        MessageState::InFlight => "in_flight",
        MessageState::Delayed => "delayed",
    }
}

impl RedisEngine {
    pub(crate) async fn peek(
        &self,
        key: &QueueKey,
        state: MessageState,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<StoredMessage>, EngineError> {
        let mut call = self.queue_call(&scripts::PEEK, key);
        call.arg(now)
            .arg(state_name(state))
            .arg(limit)
            .arg(PEEK_SCAN);
        let mut reply = not_found(self.run_queue(key, &call, false).await?)?;
        let mut messages = Vec::new();
        while !reply.is_empty() {
            let seq = reply.u64()?;
            let sent_at = reply.u64()?;
            let receive_count = u32::try_from(reply.u64()?).unwrap_or(u32::MAX);
            let first_received_at = reply.time()?;
            let body: StoredBody = from_json(&reply.bytes()?)?;
            messages.push(body.into_message(seq, sent_at, receive_count, first_received_at));
        }
        Ok(messages)
    }
}
