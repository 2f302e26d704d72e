//! Tenant administration: the records behind `/v1/admin/tenants`, implicit tenants named by
//! tokens, and what deleting a tenant means for its tokens. The queue-count quota is checked by
//! the engine, atomically with the creation of a queue.

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
    /// Records a tenant named by a valid token issued at `issued_at_seconds` (its `iat`
    /// claim), so it is listed like a created one.
    ///
    /// Deleting a tenant revokes the tokens issued before: a token whose `iat` is not after
    /// the deletion (token times have one-second precision, so a token issued in the second of
    /// the deletion is refused too), or that has no `iat`, answers
    /// [`ServiceError::TenantDeleted`] and re-creates nothing. A token issued later re-creates
    /// the tenant with default quotas; old tokens stay refused.
    pub async fn ensure_tenant(
        &self,
        tenant: &TenantId,
        issued_at_seconds: Option<u64>,
    ) -> Result<(), ServiceError> {
        let issued_at = issued_at_seconds.map(|s| s.saturating_mul(1000));
        Ok(self
            .engine
            .ensure_tenant(tenant, issued_at, self.clock.now())
            .await?)
    }

    /// The earliest `iat` (seconds since the epoch) a token for `tenant` may carry to be
    /// accepted: the second after its last deletion, if it was ever deleted. Minting with it
    /// keeps a token minted in the second of a deletion usable.
    pub async fn first_valid_issue_second(
        &self,
        tenant: &TenantId,
    ) -> Result<Option<u64>, ServiceError> {
        Ok(self
            .engine
            .tenant_deleted_at(tenant)
            .await?
            .map(|deleted_at| deleted_at / 1000 + 1))
    }

    /// Creates a tenant; `Conflict` if it exists (also when only tokens named it). Tokens
    /// issued before an earlier deletion of the id stay refused.
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

    /// Deletes a tenant with all its resources and revokes the tokens issued until now (see
    /// [`ensure_tenant`](Self::ensure_tenant)).
    pub async fn delete_tenant(&self, id: &str) -> Result<(), ServiceError> {
        let id = parse_tenant("id", id)?;
        if self.engine.delete_tenant(&id, self.clock.now()).await? {
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
}
