//! Dropping a queue from the registries unless it was registered again since
//! (`unregister_queue.lua`).

use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, QueueKey};

impl RedisEngine {
    /// Drops a queue from the registries unless it was registered again since: `mode` is
    /// `"uid"` (only if last registered for that incarnation) or `"before"` (only if last
    /// registered no later than that instant).
    pub(crate) async fn unregister(
        &self,
        key: &QueueKey,
        mode: &str,
        value: &str,
    ) -> Result<(), EngineError> {
        let mut call = self.registry_call(&scripts::UNREGISTER_QUEUE, key);
        call.arg(Keys::queue_id(key))
            .arg(key.name.as_str())
            .arg(mode)
            .arg(value);
        self.redis.eval(&call, true).await.map(drop)
    }
}
