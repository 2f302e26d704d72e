//! The engine's in-memory catalog (queues per tenant, tenant records, tenant tombstones) and the
//! helpers several operations share to look things up in it and change it: queue lookup,
//! closing queues for deletion, writing a tenant record.

use crate::queue_entry::QueueEntry;
use crate::store::{encode, WriteOp};
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Millis, QueueKey, QueueName, TenantId, TenantRecord};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

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
