//! The health check: `PING` on every master.

use crate::RedisEngine;
use sluice_engine::EngineError;

impl RedisEngine {
    pub(crate) async fn ping(&self) -> Result<(), EngineError> {
        self.redis
            .on_every_master(&redis::cmd("PING"))
            .await
            .map(drop)
    }
}
