//! Writing a tenant record (`tenant_put.lua`): `ensure_tenant` (answered from the tenant cache
//! while recently seen), `create_tenant` and `update_tenant`.

use crate::codec::{from_json, to_json, Reply};
use crate::conn::Call;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Millis, Quotas, TenantId, TenantRecord};

impl RedisEngine {
    /// Writes a tenant record (see `tenant_put.lua` for `mode`); `issued_at` is the token's
    /// issue time for `ensure`. Answers the script's status and the quotas now stored.
    pub(crate) async fn tenant_put(
        &self,
        mode: &str,
        record: &TenantRecord,
        issued_at: Option<Millis>,
    ) -> Result<(i64, Quotas), EngineError> {
        let mut call = Call::new(
            &scripts::TENANT_PUT,
            [
                self.keys.tenants(),
                self.keys.tenant_ids(),
                self.keys.tenant_tombstones(),
            ],
        );
        call.arg(mode)
            .arg(record.id.as_str())
            .arg(to_json(record)?)
            .arg(issued_at.map(|t| t.to_string()).unwrap_or_default());
        let mut reply = Reply::new(self.redis.eval(&call, true).await?)?;
        let written = reply.int()?;
        let tombstone = reply.time()?;
        match (written, tombstone) {
            (-2, Some(deleted_at)) => return Err(EngineError::TenantDeleted { deleted_at }),
            (1, _) | (0, _) => {
                let stored: TenantRecord = from_json(reply.text()?.as_bytes())?;
                self.known_tenants
                    .insert(record.id.clone(), (tombstone, stored.quotas.clone()));
                return Ok((written, stored.quotas));
            }
            _ => {}
        }
        Ok((written, record.quotas.clone()))
    }

    pub(crate) async fn ensure_tenant(
        &self,
        id: &TenantId,
        issued_at: Option<Millis>,
        now: Millis,
    ) -> Result<Quotas, EngineError> {
        // Asked on every authenticated request: answered from memory while recently seen (a
        // deletion or a quota change through another gateway is seen here within the cache's
        // TTL; the queue registrations a deletion makes refuse the tenant at once).
        if let Some((tombstone, quotas)) = self.known_tenants.get(id) {
            return match tombstone {
                Some(deleted_at) if issued_at.is_none_or(|at| at <= deleted_at) => {
                    Err(EngineError::TenantDeleted { deleted_at })
                }
                _ => Ok(quotas),
            };
        }
        let record = TenantRecord {
            id: id.clone(),
            quotas: Quotas::default(),
            created_at: now,
        };
        self.tenant_put("ensure", &record, issued_at)
            .await
            .map(|(_, quotas)| quotas)
    }

    pub(crate) async fn create_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        match self.tenant_put("create", &record, None).await?.0 {
            1 => Ok(()),
            _ => Err(EngineError::AlreadyExists(format!("tenant {}", record.id))),
        }
    }

    pub(crate) async fn update_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        match self.tenant_put("update", &record, None).await?.0 {
            1 => Ok(()),
            _ => Err(EngineError::TenantNotFound),
        }
    }
}
