//! Creating or updating a queue (`put_queue.lua`), registered first (`register_queue.lua`).

use super::calls::seconds;
use crate::codec::{to_json, Described, Reply};
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use sluice_engine::{DeduplicationScope, EngineError, Millis, QueueConfig, QueueInfo, QueueKey};

impl RedisEngine {
    pub(crate) async fn put_queue(
        &self,
        key: &QueueKey,
        config: QueueConfig,
        now: Millis,
    ) -> Result<(QueueInfo, bool), EngineError> {
        // Registered before it exists: a crash in between leaves an entry naming a missing
        // queue (skipped by readers, dropped by the sweep), never a queue nobody lists or
        // sweeps. Zero is never issued, so an all-zero handle prefix is never valid.
        let uid = rand::random::<u64>().max(1).to_string();
        // Admits the creation (quota, tenant not deleted) atomically with the registration.
        let generation = self.register(key, now, &uid).await?;
        let mut call = self.fenced_queue_call(&scripts::PUT_QUEUE, key);
        call.arg(now)
            .arg(&uid)
            .arg(to_json(&config)?)
            .arg(seconds(config.message_retention_seconds))
            .arg(config.max_depth.map(|d| d.to_string()).unwrap_or_default())
            .arg(match config.deduplication_scope {
                DeduplicationScope::Queue => "queue",
                DeduplicationScope::MessageGroup => "message_group",
            })
            .arg(generation)
            .arg(
                config
                    .redrive_policy
                    .as_ref()
                    .map(|p| p.max_receive_count.to_string())
                    .unwrap_or_default(),
            )
            .arg(
                config
                    .retry_backoff
                    .map(|b| {
                        format!(
                            "{} {} {}",
                            seconds(b.base_seconds),
                            seconds(b.max_seconds),
                            u8::from(b.jitter)
                        )
                    })
                    .unwrap_or_default(),
            )
            .arg(Keys::queue_id(key));
        let reply = self.redis.eval(&call, true).await;
        // A creation over leftovers releases them into the log.
        self.queue_payload_log_touched(key);
        let mut reply = Reply::new(reply?)?;
        let created = match reply.int()? {
            // A tenant deletion began after our registration and fenced this name: its walk
            // drops our entry; nothing was created.
            -1 => {
                let deleted_at = self.tenant_deleted_at(&key.tenant).await?.unwrap_or(now);
                return Err(EngineError::TenantDeleted { deleted_at });
            }
            status => status == 1,
        };
        let described = Described::read(&mut reply)?;
        if described.uid != uid {
            // The queue existed: register it for its actual incarnation, so that deleting it
            // drops the entry (a deletion only drops entries of the incarnation it deleted).
            self.register(key, now, &described.uid).await?;
        }
        self.configs.insert(key.clone(), described.config.clone());
        // It may be some queue's missing dead-letter queue.
        self.missing_dlqs.retain(|_| false);
        Ok((self.info(key, described), created))
    }
}
