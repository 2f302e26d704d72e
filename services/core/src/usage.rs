//! A tenant's usage to set against its quotas, for the dashboard's admin page: counts the
//! engine keeps already, so reading them costs no listing.

use crate::tenants::parse_tenant;
use crate::{ServiceError, Services};

/// What a tenant uses of what its quotas bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantUsage {
    /// Queues it owns (bounded by `max_queues`).
    pub queues: u64,
}

impl Services {
    /// The tenant's usage; the tenant need not exist (a tenant without queues uses nothing).
    pub async fn tenant_usage(&self, tenant: &str) -> Result<TenantUsage, ServiceError> {
        let tenant = parse_tenant("id", tenant)?;
        Ok(TenantUsage {
            queues: self.engine.count_queues(&tenant).await?,
        })
    }
}
