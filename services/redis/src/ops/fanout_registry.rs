//! The due index of fan-outs (`fanout_register.lua`; `transfer_due.lua` and
//! `transfer_unregister.lua` on the fan-out pair of keys): which topics recovery should look
//! at, and from when. Like the index of moves it lives in the registries' slot, apart from
//! every topic and queue, so it is written before a publish commits (a spurious entry costs
//! recovery one look) and dropped only if unchanged since it was read. Registering also files
//! the topic among its tenant's, which is how a tenant deletion finds its topics.

use crate::conn::Call;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Millis, TopicKey};

impl RedisEngine {
    /// Files `topic` to be looked at by recovery from `at` on.
    pub(crate) async fn register_fanout(
        &self,
        topic: &TopicKey,
        at: Millis,
    ) -> Result<(), EngineError> {
        let mut call = Call::new(
            &scripts::FANOUT_REGISTER,
            [
                self.keys.fanouts_due(),
                self.keys.fanout_regs(),
                self.keys.tenant_topics(&topic.tenant),
            ],
        );
        call.arg(crate::keys::Keys::topic_id(topic))
            .arg(at)
            .arg(hex::encode(rand::random::<[u8; 8]>()))
            .arg(topic.name.as_str());
        self.redis.eval(&call, true).await?;
        Ok(())
    }
}
