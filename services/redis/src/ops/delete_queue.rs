//! Deleting a queue (`delete_queue.lua`): `drop_queue` deletes its keys (also used by tenant
//! deletion, fenced), `delete_queue` then drops its registry entry.

use super::transfer_apply::APPLIED_WINDOW_MS;
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, QueueKey};

impl RedisEngine {
    /// Deletes one queue's keys; answers the uid of the incarnation deleted, if it existed.
    /// Leaves the registries alone. `fence` (tenant deletion only) voids registrations of
    /// that tenant generation or older for this name, whether the queue exists yet or not.
    pub(crate) async fn drop_queue(
        &self,
        key: &QueueKey,
        fence: Option<u64>,
    ) -> Result<Option<String>, EngineError> {
        let queue_id = Keys::queue_id(key);
        let mut call = self.fenced_queue_call(&scripts::DELETE_QUEUE, key);
        call.arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id))
            .arg(fence.map(|f| f.to_string()).unwrap_or_default())
            .arg(APPLIED_WINDOW_MS)
            .arg(&queue_id);
        let reply = self.run_queue(key, &call, true).await;
        // Its payload messages and pending moves' `M` entries went into its log.
        self.queue_payload_log_touched(key);
        let deleted = match reply? {
            Some(mut reply) => Some(reply.text()?),
            None => None,
        };
        self.configs.remove(key);
        // Waiters look again and find the queue gone.
        self.wakers.wake(&queue_id);
        Ok(deleted)
    }

    pub(crate) async fn delete_queue(&self, key: &QueueKey) -> Result<bool, EngineError> {
        let Some(uid) = self.drop_queue(key, None).await? else {
            // An entry left by a crash, if any, is dropped by the expiry sweep.
            return Ok(false);
        };
        // After the queue: a crash in between leaves an entry naming a missing queue. Only
        // the entry of this incarnation goes: one registered since belongs to a put_queue
        // creating the queue anew, concurrently.
        self.unregister(key, "uid", &uid).await?;
        Ok(true)
    }
}
