//! `put_queue`: creates a queue (checking the tenant's quota and tombstone) or updates its
//! configuration, under the catalog lock; the change shows in memory once committed.

use crate::catalog::{read, write};
use crate::index::QueueState;
use crate::queue_entry::QueueEntry;
use crate::store::{encode, QueueRecord, WriteOp};
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Millis, QueueConfig, QueueInfo, QueueKey};
use std::sync::Arc;

impl EmbeddedEngine {
    /// Answers the queue and whether it was created.
    pub(crate) async fn put_queue(
        &self,
        key: &QueueKey,
        config: QueueConfig,
        now: Millis,
    ) -> Result<(QueueInfo, bool), EngineError> {
        // The catalog lock makes the quota check and the creation one step: every creation
        // and deletion of a queue or tenant runs under it and commits before releasing it.
        let _admin = self.admin.lock().await;
        let existing = self.queue(key).ok();
        if existing.is_none() {
            let tenant = read(&self.tenants).get(&key.tenant).cloned();
            match tenant {
                // Deleted and not named since: it owns nothing any more.
                None => {
                    if let Some(&deleted_at) = read(&self.tombstones).get(&key.tenant) {
                        return Err(EngineError::TenantDeleted { deleted_at });
                    }
                }
                Some(record) => {
                    if let Some(max_queues) = record.quotas.max_queues {
                        if self.count_queues(&key.tenant).await? >= max_queues {
                            return Err(EngineError::QuotaExceeded {
                                tenant: key.tenant.to_string(),
                                max_queues,
                            });
                        }
                    }
                }
            }
        }
        let (uid, created_at) = match &existing {
            Some(entry) => (entry.uid, entry.created_at),
            // Zero is never used, so no handle with an all-zero prefix can ever be valid.
            None => (rand::random::<u64>().max(1), now),
        };
        let record = QueueRecord {
            uid,
            config: config.clone(),
            created_at,
            updated_at: now,
        };
        let op = WriteOp::PutQueue {
            key: key.to_string(),
            record: encode(&record)?,
        };
        let created = existing.is_none();
        let entry = match existing {
            Some(entry) => {
                let target = Arc::clone(&entry);
                let pending = self.store.submit_then(vec![op], move |committed| {
                    if committed.is_ok() {
                        let mut state = target.lock();
                        state.set_config(config);
                        state.updated_at = now;
                    }
                });
                pending.wait().await?;
                entry
            }
            None => {
                let entry = QueueEntry::new(
                    uid,
                    created_at,
                    QueueState::new(config, now, 1, key.name.is_fifo()),
                    &self.queue_due,
                );
                let (queues, target, key) =
                    (Arc::clone(&self.queues), Arc::clone(&entry), key.clone());
                let pending = self.store.submit_then(vec![op], move |committed| {
                    if committed.is_ok() {
                        write(&queues)
                            .entry(key.tenant)
                            .or_default()
                            .insert(key.name, target);
                    }
                });
                pending.wait().await?;
                entry
            }
        };
        let info = entry.info(key, &entry.lock(), now);
        Ok((info, created))
    }
}
