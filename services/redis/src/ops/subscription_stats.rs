//! The subscriptions' counters of a topic: one `HGETALL` of its `counters` hash
//! (`<subscription>:delivered|filtered_out|failed` → count), written by `publish.lua`
//! (filtered out) and `fanout_ack.lua` (delivered, failed).

use crate::RedisEngine;
use sluice_engine::{EngineError, SubscriptionStats, TopicKey};
use std::collections::BTreeMap;

impl RedisEngine {
    pub(crate) async fn subscription_stats(
        &self,
        topic: &TopicKey,
    ) -> Result<BTreeMap<String, SubscriptionStats>, EngineError> {
        let mut read = redis::cmd("HGETALL");
        read.arg(self.keys.topic_counters(topic));
        let fields: BTreeMap<String, u64> = self.redis.query(&read).await?;
        let mut stats: BTreeMap<String, SubscriptionStats> = BTreeMap::new();
        for (field, count) in fields {
            // Subscription ids may contain ':'; the counter's name never does.
            let Some((subscription, counter)) = field.rsplit_once(':') else {
                continue;
            };
            let entry = stats.entry(subscription.to_owned()).or_default();
            match counter {
                "delivered" => entry.delivered = count,
                "filtered_out" => entry.filtered_out = count,
                "failed" => entry.failed = count,
                _ => {}
            }
        }
        Ok(stats)
    }
}
