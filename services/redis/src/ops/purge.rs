//! Removing every message of a queue (`purge.lua`).

use super::calls::not_found;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, QueueKey};

impl RedisEngine {
    pub(crate) async fn purge(&self, key: &QueueKey) -> Result<(), EngineError> {
        let call = self.queue_call(&scripts::PURGE, key);
        let reply = self.run_queue(key, &call, true).await;
        self.queue_payload_log_touched(key);
        not_found(reply?).map(drop)
    }
}
