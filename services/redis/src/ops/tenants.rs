//! Reading tenants, by plain commands (no script): `get_tenant`, `list_tenants` and
//! `tenant_deleted_at`.

use crate::codec::tenant_from;
use crate::RedisEngine;
use sluice_engine::{EngineError, Millis, TenantId, TenantRecord};

impl RedisEngine {
    pub(crate) async fn get_tenant(
        &self,
        id: &TenantId,
    ) -> Result<Option<TenantRecord>, EngineError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.keys.tenants()).arg(id.as_str());
        tenant_from(self.redis.query(&cmd).await?)
    }

    pub(crate) async fn list_tenants(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> Result<Vec<TenantRecord>, EngineError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut range = redis::cmd("ZRANGEBYLEX");
        range
            .arg(self.keys.tenant_ids())
            .arg(after.map_or_else(|| "-".to_owned(), |a| format!("({a}")))
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(limit);
        let ids: Vec<String> = self.redis.query(&range).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut get = redis::cmd("HMGET");
        get.arg(self.keys.tenants()).arg(&ids);
        let records: Vec<Option<Vec<u8>>> = self.redis.query(&get).await?;
        // A tenant deleted between the two reads is simply not listed.
        records
            .into_iter()
            .filter_map(|r| tenant_from(r).transpose())
            .collect()
    }

    pub(crate) async fn tenant_deleted_at(
        &self,
        id: &TenantId,
    ) -> Result<Option<Millis>, EngineError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.keys.tenant_tombstones()).arg(id.as_str());
        self.redis.query(&cmd).await
    }
}
