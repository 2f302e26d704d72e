//! The engine's in-memory catalog (queues per tenant, tenant records, tenant tombstones, topics
//! with state) and the helpers several operations share to look things up in it and change it:
//! queue and topic lookup, closing queues for deletion, writing a tenant record.

use crate::queue_entry::QueueEntry;
use crate::store::{encode, WriteOp};
use crate::topic_entry::{TopicEntry, TopicMap, TopicState};
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Millis, QueueKey, QueueName, TenantId, TenantRecord, TopicKey};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

pub(crate) type QueueMap = BTreeMap<TenantId, BTreeMap<QueueName, Arc<QueueEntry>>>;
pub(crate) type TenantMap = BTreeMap<TenantId, TenantRecord>;
/// Per deleted tenant, when its last deletion happened.
pub(crate) type TombstoneMap = HashMap<TenantId, Millis>;

/// Refuses a token issued at or before the tenant's last deletion (or with no issue time).
pub(crate) fn check_tombstone(
    tombstones: &TombstoneMap,
    id: &TenantId,
    issued_at: Option<Millis>,
) -> Result<(), EngineError> {
    match tombstones.get(id) {
        Some(&deleted_at) if issued_at.is_none_or(|at| at <= deleted_at) => {
            Err(EngineError::TenantDeleted { deleted_at })
        }
        _ => Ok(()),
    }
}

/// Reads a catalog map; a panic under its lock leaves it whole, so poisoning is ignored.
pub(crate) fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// Writes a catalog map (poisoning ignored, as for [`read`]).
pub(crate) fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// Locks the topic map (poisoning ignored, as for [`read`]). Taken before a topic's own lock
/// when both are held (deletions), never after it.
pub(crate) fn topics(lock: &Mutex<TopicMap>) -> MutexGuard<'_, TopicMap> {
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}

impl EmbeddedEngine {
    /// The queue's entry in the catalog, or [`EngineError::QueueNotFound`]; it may be deleted
    /// by the time its lock is taken, which [`QueueEntry::live`] checks.
    pub(crate) fn queue(&self, key: &QueueKey) -> Result<Arc<QueueEntry>, EngineError> {
        read(&self.queues)
            .get(&key.tenant)
            .and_then(|names| names.get(&key.name))
            .cloned()
            .ok_or(EngineError::QueueNotFound)
    }

    /// The topic's entry, created (empty) if it has none. It may be deleted by the time its
    /// lock is taken: the caller checks [`deleted`](crate::topic_entry::TopicState::deleted)
    /// and looks again.
    pub(crate) fn topic(&self, key: &TopicKey) -> Arc<TopicEntry> {
        let mut map = topics(&self.topics);
        let entry = map
            .entry(key.tenant.clone())
            .or_default()
            .entry(key.name.clone())
            .or_insert_with(|| {
                TopicEntry::new(key.to_string(), TopicState::default(), &self.topic_due)
            });
        Arc::clone(entry)
    }

    /// The topic's entry if it has one (reads never create one).
    pub(crate) fn existing_topic(&self, key: &TopicKey) -> Option<Arc<TopicEntry>> {
        topics(&self.topics)
            .get(&key.tenant)
            .and_then(|names| names.get(&key.name))
            .cloned()
    }

    /// Closes the given queues (no more writes are submitted for them) and answers the
    /// operations that delete them on disk.
    pub(crate) fn close_queues<'a>(
        entries: impl IntoIterator<Item = (String, &'a Arc<QueueEntry>)>,
    ) -> Vec<WriteOp> {
        entries
            .into_iter()
            .map(|(key, entry)| {
                // Every insert for this queue was submitted under its lock before `close`, so
                // the delete submitted after it lands after them and leaves nothing behind.
                entry.lock().close();
                WriteOp::DeleteQueue {
                    key,
                    uid: entry.uid,
                }
            })
            .collect()
    }

    /// Commits a tenant record, then (only if durable) shows it in memory.
    pub(crate) async fn write_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        let op = WriteOp::PutTenant {
            id: record.id.as_str().to_owned(),
            record: encode(&record)?,
        };
        let tenants = Arc::clone(&self.tenants);
        self.store
            .submit_then(vec![op], move |committed| {
                if committed.is_ok() {
                    write(&tenants).insert(record.id.clone(), record);
                }
            })
            .wait()
            .await
    }
}
