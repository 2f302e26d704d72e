//! The small topic operations beside `publish`: reading a topic's subscription counters, and
//! forgetting a topic's state (`delete_topic`, every topic of a deleted tenant, deduplication
//! records past their window).

use crate::catalog::topics;
use crate::store::WriteOp;
use crate::topic_entry::TopicMap;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, SubscriptionStats, TenantId, TopicKey};
use std::collections::BTreeMap;

impl EmbeddedEngine {
    /// The committed counters (memory follows the commits, so no disk read).
    pub(crate) async fn subscription_stats(
        &self,
        topic: &TopicKey,
    ) -> Result<BTreeMap<String, SubscriptionStats>, EngineError> {
        Ok(self
            .existing_topic(topic)
            .map(|entry| entry.lock().stats().clone())
            .unwrap_or_default())
    }

    /// Answers whether the topic had state, once its removal is durable.
    pub(crate) async fn delete_topic(&self, topic: &TopicKey) -> Result<bool, EngineError> {
        let pending = {
            let mut map = topics(&self.topics);
            let Some(names) = map.get_mut(&topic.tenant) else {
                return Ok(false);
            };
            let Some(entry) = names.remove(&topic.name) else {
                return Ok(false);
            };
            if names.is_empty() {
                map.remove(&topic.tenant);
            }
            let existed = {
                // Every publish of this incarnation was submitted under this lock before it is
                // taken here, so the removal lands after their writes and leaves nothing.
                let mut state = entry.lock();
                state.deleted = true;
                state.touched()
            };
            if !existed {
                return Ok(false);
            }
            // Submitted under the map's lock: the successor's first publish needs it to find
            // its entry, so it is submitted after this and survives it.
            self.store.submit(vec![WriteOp::ForgetTopic {
                topic: topic.to_string(),
            }])
        };
        pending.wait().await?;
        Ok(true)
    }
}

/// The write that deletes a topic's (`"tenant/name"`) deduplication records `ids`, whose window
/// is over: a [`WriteOp::Publish`] that changes nothing else.
pub(crate) fn forget_dedup(topic: String, ids: Vec<String>) -> WriteOp {
    WriteOp::Publish {
        topic,
        next_seq: None,
        dedup: Vec::new(),
        forget: ids,
        counts: Vec::new(),
        failed: Vec::new(),
    }
}

/// Drops every topic of `tenant` from memory, marking each deleted (under its lock, so every
/// publish to it was submitted before); answers the write that forgets them on disk, which the
/// caller submits before it lets go of the map, or `None` if they had no state.
pub(crate) fn forget_tenant_topics(map: &mut TopicMap, tenant: &TenantId) -> Option<WriteOp> {
    let names = map.remove(tenant)?;
    let mut touched = false;
    for entry in names.values() {
        let mut state = entry.lock();
        state.deleted = true;
        touched |= state.touched();
    }
    touched.then(|| WriteOp::ForgetTenantTopics {
        tenant: tenant.as_str().to_owned(),
    })
}
