//! `ensure_tenant`: answered from memory on the hot path; the catalog lock is taken only to
//! create a record for a tenant seen for the first time.

use crate::catalog::{check_tombstone, read};
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Millis, Quotas, TenantId, TenantRecord};

impl EmbeddedEngine {
    /// Refuses tokens from before a deletion; creates an unknown tenant with default quotas.
    pub(crate) async fn ensure_tenant(
        &self,
        id: &TenantId,
        issued_at: Option<Millis>,
        now: Millis,
    ) -> Result<Quotas, EngineError> {
        check_tombstone(&read(&self.tombstones), id, issued_at)?;
        if let Some(record) = read(&self.tenants).get(id) {
            return Ok(record.quotas.clone());
        }
        let _admin = self.admin.lock().await;
        // A deletion may have committed while this call waited for the lock.
        check_tombstone(&read(&self.tombstones), id, issued_at)?;
        if let Some(record) = read(&self.tenants).get(id) {
            return Ok(record.quotas.clone());
        }
        self.write_tenant(TenantRecord {
            id: id.clone(),
            quotas: Quotas::default(),
            created_at: now,
        })
        .await?;
        Ok(Quotas::default())
    }
}
