//! The tenant record operations: create, update, get, list and the tombstone lookup. Reads are
//! answered from memory; changes commit under the catalog lock before they show.

use crate::catalog::read;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Millis, TenantId, TenantRecord};
use std::ops::Bound;

impl EmbeddedEngine {
    /// Creates a record, refusing an existing id.
    pub(crate) async fn create_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        let _admin = self.admin.lock().await;
        if read(&self.tenants).contains_key(&record.id) {
            return Err(EngineError::AlreadyExists(format!("tenant {}", record.id)));
        }
        self.write_tenant(record).await
    }

    /// Replaces an existing record.
    pub(crate) async fn update_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        let _admin = self.admin.lock().await;
        if !read(&self.tenants).contains_key(&record.id) {
            return Err(EngineError::TenantNotFound);
        }
        self.write_tenant(record).await
    }

    /// One record, from memory.
    pub(crate) async fn get_tenant(
        &self,
        id: &TenantId,
    ) -> Result<Option<TenantRecord>, EngineError> {
        Ok(read(&self.tenants).get(id).cloned())
    }

    /// Records in id order after `after`, from memory.
    pub(crate) async fn list_tenants(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> Result<Vec<TenantRecord>, EngineError> {
        let tenants = read(&self.tenants);
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(tenants
            .range((start, Bound::Unbounded))
            .take(limit)
            .map(|(_, t)| t.clone())
            .collect())
    }

    /// When the tenant was last deleted, from memory.
    pub(crate) async fn tenant_deleted_at(
        &self,
        id: &TenantId,
    ) -> Result<Option<Millis>, EngineError> {
        Ok(read(&self.tombstones).get(id).copied())
    }
}
