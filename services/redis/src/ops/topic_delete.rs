//! Forgetting a topic's state (`topic_delete.lua`): `delete_topic` (sequence numbers,
//! deduplication records, counters; pending deliveries still complete), and the topics of a
//! deleted tenant (everything, outbox included, once its pending entries are finished),
//! found in the tenant's topic registry.

use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Millis, QueueName, TenantId, TopicKey};

impl RedisEngine {
    pub(crate) async fn delete_topic(&self, topic: &TopicKey) -> Result<bool, EngineError> {
        let mut call = self.topic_call(&scripts::TOPIC_DELETE, topic);
        call.arg("state");
        Ok(matches!(
            self.redis.eval(&call, true).await?,
            redis::Value::Int(1)
        ))
    }

    /// Forgets every topic the tenant published to, with its outbox, then the tenant's topic
    /// registry. Called once the tenant's queues are gone: pending entries are finished first
    /// (every copy not applied yet fails), so their payloads are released.
    pub(crate) async fn forget_tenant_topics(
        &self,
        tenant: &TenantId,
        now: Millis,
    ) -> Result<(), EngineError> {
        let registry = self.keys.tenant_topics(tenant);
        let mut list = redis::cmd("ZRANGE");
        list.arg(&registry).arg(0).arg(-1);
        let names: Vec<String> = self.redis.query(&list).await?;
        for name in &names {
            let Ok(name) = QueueName::parse(name) else {
                continue;
            };
            let topic = TopicKey::new(tenant.clone(), name);
            self.settle_deleted_topic(&topic, now).await?;
            let mut call = self.topic_call(&scripts::TOPIC_DELETE, &topic);
            call.arg("all");
            self.redis.eval(&call, true).await?;
        }
        if !names.is_empty() {
            let mut forget = redis::cmd("ZREM");
            forget.arg(&registry).arg(&names);
            self.redis.query::<i64>(&forget).await?;
        }
        Ok(())
    }
}
