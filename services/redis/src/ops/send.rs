//! Sending a batch of messages (`send.lua`): one script call for the whole batch.

use super::calls::not_found;
use super::payload_events::payload_tag;
use crate::codec::{to_json, StoredBody};
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use sluice_engine::{
    message_size_with_payload, EngineError, Millis, NewMessage, QueueKey, SendRejection,
    SentMessage, DEDUPLICATION_WINDOW_MS,
};

impl RedisEngine {
    pub(crate) async fn send(
        &self,
        key: &QueueKey,
        messages: Vec<NewMessage>,
        now: Millis,
    ) -> Result<Vec<Result<SentMessage, SendRejection>>, EngineError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let fifo = key.name.is_fifo();
        let spilled = messages.iter().any(|m| m.payload.is_some());
        if spilled {
            self.register_queue_payload_log(key).await?;
        }
        let queue_id = Keys::queue_id(key);
        let mut call = self.queue_call(&scripts::SEND, key);
        call.arg(now)
            .arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id))
            .arg(DEDUPLICATION_WINDOW_MS);
        let mut ids = Vec::with_capacity(messages.len());
        for m in messages {
            let (group, dedup) = (m.group_id.clone(), m.deduplication_id.clone());
            let size = message_size_with_payload(&m.body, &m.attributes, m.payload.as_ref());
            let tag = payload_tag(&m.message_id, m.payload.as_ref());
            call.arg(m.visible_at).arg(to_json(&StoredBody {
                message_id: m.message_id.clone(),
                body: m.body,
                attributes: m.attributes,
                group_id: m.group_id,
                deduplication_id: m.deduplication_id,
                dead_letter: None,
                payload: m.payload,
            })?);
            call.arg(size).arg(tag);
            if fifo {
                // The services guarantee both on FIFO queues; without them a message joins the
                // group "" and is never a duplicate.
                call.arg(&m.message_id)
                    .arg(group.unwrap_or_default())
                    .arg(dedup.unwrap_or_default());
            }
            ids.push(m.message_id);
        }
        let reply = self.run_queue(key, &call, true).await;
        if spilled {
            self.payload_log_written(self.keys.queue_payload_log(key));
        }
        let mut reply = not_found(reply?)?;
        let mut answers = Vec::with_capacity(ids.len());
        for message_id in ids {
            let seq = reply.u64()?;
            let original = if fifo { reply.text()? } else { String::new() };
            answers.push(match seq {
                0 => Err(SendRejection::QueueFull),
                seq if original.is_empty() => Ok(SentMessage {
                    message_id,
                    seq,
                    duplicate: false,
                }),
                seq => Ok(SentMessage {
                    message_id: original,
                    seq,
                    duplicate: true,
                }),
            });
        }
        if answers.iter().any(Result::is_ok) {
            self.wakers.wake(&queue_id);
        }
        Ok(answers)
    }
}
