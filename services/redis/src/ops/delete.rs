//! Deleting a batch of messages by receipt handle (`delete.lua`).

use super::calls::not_found;
use super::handles::{delivery_token, handle_error, member};
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, HandleError, Millis, QueueKey, ReceiptHandle};

impl RedisEngine {
    pub(crate) async fn delete(
        &self,
        key: &QueueKey,
        handles: &[String],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        let queue_id = Keys::queue_id(key);
        let mut call = self.queue_call(&scripts::DELETE, key);
        call.arg(now)
            .arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id));
        let decoded: Vec<Option<ReceiptHandle>> = handles
            .iter()
            .map(|h| ReceiptHandle::decode(h, &self.handle_key))
            .collect();
        for h in decoded.iter().flatten() {
            call.arg(h.queue_uid.to_string())
                .arg(member(h.seq))
                .arg(delivery_token(h.delivery));
        }
        // Sent even when every handle is garbage: the script also answers whether the queue
        // exists.
        let reply = self.run_queue(key, &call, true).await;
        // Whatever the outcome: a payload message deleted appended an `R` (see payload_events.rs).
        self.queue_payload_log_touched(key);
        let mut reply = not_found(reply?)?;
        // FIFO: a group whose message in flight was deleted may deliver again.
        if reply.int()? == 1 {
            self.wakers.wake(&queue_id);
        }
        decoded
            .into_iter()
            .map(|h| match h {
                None => Ok(Err(HandleError::Invalid)),
                Some(_) => Ok(handle_error(reply.int()?)),
            })
            .collect()
    }
}
