//! A queue's configuration and stats (`queue_info.lua`): `get_queue`.

use crate::codec::Described;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Millis, QueueInfo, QueueKey};

impl RedisEngine {
    pub(crate) async fn get_queue(
        &self,
        key: &QueueKey,
        now: Millis,
    ) -> Result<Option<QueueInfo>, EngineError> {
        let mut call = self.queue_call(&scripts::QUEUE_INFO, key);
        call.arg(now);
        let Some(mut reply) = self.run_queue(key, &call, false).await? else {
            return Ok(None);
        };
        let described = Described::read(&mut reply)?;
        self.configs.insert(key.clone(), described.config.clone());
        Ok(Some(self.info(key, described)))
    }
}
