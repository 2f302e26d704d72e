//! Tenant administration: the records behind `/v1/admin/tenants`, implicit tenants named by
//! tokens, and the queue-count quota.

use crate::queues::{decode_page_token, encode_page_token, page_limit};
use crate::{ServiceError, Services};
use sluice_engine::{Quotas, TenantId, TenantRecord};

/// One page of a tenant listing.
#[derive(Debug, Clone)]
pub struct TenantPage {
    /// The tenants, by id.
    pub tenants: Vec<TenantRecord>,
    /// Where the next page starts, if there is one.
    pub next_token: Option<String>,
}

const TOKEN_PREFIX: &str = "t1:";

/// Parses a tenant id given in a path or body, naming `field` when it is invalid.
pub(crate) fn parse_tenant(field: &str, id: &str) -> Result<TenantId, ServiceError> {
    TenantId::parse(id).map_err(|e| ServiceError::invalid(field, e.0))
}

impl Services {
    /// Records a tenant named by a valid token, so it is listed like a created one.
    pub async fn ensure_tenant(&self, tenant: &TenantId) -> Result<(), ServiceError> {
        Ok(self.engine.ensure_tenant(tenant, self.clock.now()).await?)
    }

    /// Creates a tenant; `Conflict` if it exists (also when only tokens named it).
    pub async fn create_tenant(
        &self,
        id: &str,
        quotas: Quotas,
    ) -> Result<TenantRecord, ServiceError> {
        let record = TenantRecord {
            id: parse_tenant("id", id)?,
            quotas,
            created_at: self.clock.now(),
        };
        self.engine.create_tenant(record.clone()).await?;
        Ok(record)
    }

    /// One tenant.
    pub async fn get_tenant(&self, id: &str) -> Result<TenantRecord, ServiceError> {
        let id = parse_tenant("id", id)?;
        self.engine
            .get_tenant(&id)
            .await?
            .ok_or(ServiceError::TenantNotFound)
    }

    /// Replaces a tenant's quotas.
    pub async fn update_tenant(
        &self,
        id: &str,
        quotas: Quotas,
    ) -> Result<TenantRecord, ServiceError> {
        let mut record = self.get_tenant(id).await?;
        record.quotas = quotas;
        self.engine.update_tenant(record.clone()).await?;
        Ok(record)
    }

    /// Deletes a tenant with all its resources.
    pub async fn delete_tenant(&self, id: &str) -> Result<(), ServiceError> {
        let id = parse_tenant("id", id)?;
        if self.engine.delete_tenant(&id).await? {
            Ok(())
        } else {
            Err(ServiceError::TenantNotFound)
        }
    }

    /// A page of tenants by id.
    pub async fn list_tenants(
        &self,
        limit: Option<u32>,
        next_token: Option<&str>,
    ) -> Result<TenantPage, ServiceError> {
        let limit = page_limit(limit)?;
        let after = match next_token {
            Some(token) => Some(parse_tenant(
                "next_token",
                &decode_page_token(TOKEN_PREFIX, token)?,
            )?),
            None => None,
        };
        let mut tenants = self.engine.list_tenants(after.as_ref(), limit + 1).await?;
        let more = tenants.len() > limit;
        tenants.truncate(limit);
        let next_token = match (more, tenants.last()) {
            (true, Some(last)) => Some(encode_page_token(TOKEN_PREFIX, last.id.as_str())),
            _ => None,
        };
        Ok(TenantPage {
            tenants,
            next_token,
        })
    }

    /// Refuses a new queue when the tenant owns `max_queues` already.
    pub(crate) async fn check_queue_quota(&self, tenant: &TenantId) -> Result<(), ServiceError> {
        let Some(record) = self.engine.get_tenant(tenant).await? else {
            return Ok(());
        };
        if let Some(max) = record.quotas.max_queues {
            if self.engine.count_queues(tenant).await? >= max {
                return Err(ServiceError::QuotaExceeded(format!(
                    "tenant {tenant} may own at most {max} queues"
                )));
            }
        }
        Ok(())
    }
}
