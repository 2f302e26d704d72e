//! What the operations share: building a script call over one queue's keys (with or without
//! its fence key) or over the registries' keys, running a queue script, and the small
//! conversions every operation needs (seconds to millis, a missing queue to an error, a
//! script's description to a [`QueueInfo`]).

use crate::codec::{Described, Reply};
use crate::conn::Call;
use crate::keys::QueueKeys;
use crate::RedisEngine;
use sluice_engine::{EngineError, Millis, QueueInfo, QueueKey, TenantId};

/// How many queue scripts an administrative sweep (expiry, tenant deletion, listing) runs at
/// once.
pub(crate) const FAN_OUT: usize = 16;

pub(crate) fn seconds(s: u32) -> Millis {
    Millis::from(s) * 1000
}

pub(crate) fn not_found<T>(reply: Option<T>) -> Result<T, EngineError> {
    reply.ok_or(EngineError::QueueNotFound)
}

impl RedisEngine {
    pub(crate) fn queue_call(&self, script: &'static redis::Script, key: &QueueKey) -> Call {
        let QueueKeys(keys) = self.keys.queue(key);
        Call::new(script, keys)
    }

    /// A call of a script that also takes the queue's fence key (put_queue, delete_queue).
    pub(crate) fn fenced_queue_call(&self, script: &'static redis::Script, key: &QueueKey) -> Call {
        let QueueKeys(mut keys) = self.keys.queue(key);
        keys.push(self.keys.queue_fence(key));
        Call::new(script, keys)
    }

    pub(crate) fn info(&self, key: &QueueKey, d: Described) -> QueueInfo {
        QueueInfo {
            tenant: key.tenant.clone(),
            name: key.name.clone(),
            config: d.config,
            created_at: d.created_at,
            updated_at: d.updated_at,
            stats: d.stats,
        }
    }

    /// A queue script's reply; forgets the cached configuration when the queue is gone.
    pub(crate) async fn run_queue(
        &self,
        key: &QueueKey,
        call: &Call,
        durable: bool,
    ) -> Result<Option<Reply>, EngineError> {
        let reply = Reply::of_queue(self.redis.eval(call, durable).await?)?;
        if reply.is_none() {
            self.configs.remove(key);
        }
        Ok(reply)
    }

    pub(crate) fn registry_keys(&self, tenant: &TenantId) -> Vec<String> {
        vec![
            self.keys.all_queues(),
            self.keys.queue_uids(),
            self.keys.tenant_queues(tenant),
            self.keys.queue_gens(),
        ]
    }

    pub(crate) fn registry_call(&self, script: &'static redis::Script, key: &QueueKey) -> Call {
        Call::new(script, self.registry_keys(&key.tenant))
    }
}
