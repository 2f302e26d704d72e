//! `delete_tenant`: closes and deletes every queue of the tenant, forgets its topics' state and
//! writes its tombstone, in one commit.

use crate::catalog::{read, topics, write};
use crate::ops::topics::forget_tenant_topics;
use crate::store::WriteOp;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Millis, TenantId};
use std::sync::Arc;

impl EmbeddedEngine {
    /// Drops the tenant's queues from memory at once, and its record once the tombstone is
    /// durable.
    pub(crate) async fn delete_tenant(
        &self,
        id: &TenantId,
        now: Millis,
    ) -> Result<bool, EngineError> {
        // Under the catalog lock, which put_queue holds from its quota check to its commit:
        // a creation either committed before (and its queue is closed here) or runs after
        // (and meets the tombstone).
        let _admin = self.admin.lock().await;
        let existed = read(&self.tenants).contains_key(id);
        // Its queues go even if the record does not exist (queues may be created for a tenant
        // nobody registered); the answer is about the tenant.
        let queues = write(&self.queues).remove(id).unwrap_or_default();
        let mut ops = Self::close_queues(
            queues
                .iter()
                .map(|(name, entry)| (format!("{id}/{name}"), entry)),
        );
        let pending = {
            // Held until the forgetting is submitted: a publish after this one (which needs the
            // map to find its topic) is submitted after it, and survives it.
            let mut topic_map = topics(&self.topics);
            ops.extend(forget_tenant_topics(&mut topic_map, id));
            if !existed && ops.is_empty() {
                return Ok(false);
            }
            // Never moves back, should the clock.
            let deleted_at = read(&self.tombstones).get(id).map_or(now, |&t| t.max(now));
            ops.push(WriteOp::DeleteTenant {
                id: id.as_str().to_owned(),
                deleted_at,
            });
            let (tenants, tombstones) = (Arc::clone(&self.tenants), Arc::clone(&self.tombstones));
            let id = id.clone();
            self.store.submit_then(ops, move |committed| {
                if committed.is_ok() {
                    write(&tenants).remove(&id);
                    write(&tombstones).insert(id, deleted_at);
                }
            })
        };
        pending.wait().await?;
        Ok(existed)
    }
}
