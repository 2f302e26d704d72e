//! The revert step of a move (`transfer_revert.lua`): in the source queue's slot, a message
//! whose destination is missing goes back exactly as it was, and its intent is forgotten.

use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Millis, QueueKey};

impl RedisEngine {
    /// Puts back the messages of these transfers; answers how many were restored now (an
    /// intent already reverted or acknowledged is skipped).
    pub(crate) async fn transfer_revert(
        &self,
        key: &QueueKey,
        transfer_ids: &[&str],
        now: Millis,
    ) -> Result<u64, EngineError> {
        if transfer_ids.is_empty() {
            return Ok(0);
        }
        let queue_id = Keys::queue_id(key);
        let mut call = self.queue_call(&scripts::TRANSFER_REVERT, key);
        call.arg(now)
            .arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id));
        for id in transfer_ids {
            call.arg(*id);
        }
        // A missing source took its intents with it: nothing to restore.
        let Some(mut reply) = self.run_queue(key, &call, true).await? else {
            return Ok(0);
        };
        let mut restored = 0;
        for _ in transfer_ids {
            restored += reply.u64()?;
        }
        if restored > 0 {
            self.wakers.wake(&queue_id);
        }
        Ok(restored)
    }

    /// The ack step: forgets intents whose apply succeeded. One `HDEL` in the source's slot;
    /// repeating it is harmless. Answers how many intents this call forgot (of several
    /// gateways acknowledging one move, exactly one counts it).
    pub(crate) async fn transfer_ack(
        &self,
        key: &QueueKey,
        transfer_ids: &[&str],
    ) -> Result<u64, EngineError> {
        if transfer_ids.is_empty() {
            return Ok(0);
        }
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(self.keys.transfer_intents(key)).arg(transfer_ids);
        self.redis.query::<u64>(&cmd).await
    }

    /// Every intent recorded in a queue: transfer id → intent JSON.
    pub(crate) async fn transfer_intents(
        &self,
        key: &QueueKey,
    ) -> Result<Vec<(String, Vec<u8>)>, EngineError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.keys.transfer_intents(key));
        self.redis.query(&cmd).await
    }
}
