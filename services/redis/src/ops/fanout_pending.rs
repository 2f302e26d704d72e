//! What recovery reads of a topic's outbox (`fanout_pending.lua`): its oldest pending entries,
//! in order.

use crate::codec::Reply;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, TopicKey};

impl RedisEngine {
    /// Up to `limit` pending entries of `topic` in order, as (entry id, value; '' if it went
    /// meanwhile), and whether the outbox holds more.
    pub(crate) async fn fanout_pending(
        &self,
        topic: &TopicKey,
        limit: usize,
    ) -> Result<(bool, Vec<(String, String)>), EngineError> {
        let mut call = self.topic_call(&scripts::FANOUT_PENDING, topic);
        call.arg(limit);
        let mut reply = Reply::new(self.redis.eval(&call, false).await?)?;
        let more = reply.int()? == 1;
        let mut entries = Vec::new();
        while !reply.is_empty() {
            entries.push((reply.text()?, reply.text()?));
        }
        Ok((more, entries))
    }
}
