//! Registering a queue incarnation in the registries (`register_queue.lua`), the quota and
//! tenant-deletion check of a queue's creation.

use crate::codec::Reply;
use crate::conn::Call;
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Millis, QueueKey};

impl RedisEngine {
    /// Records the queue (incarnation `uid`) in the registries, unless that would take the
    /// tenant past `max_queues` or the tenant is (being) deleted. Answers the tenant
    /// generation the registration carries.
    pub(crate) async fn register(
        &self,
        key: &QueueKey,
        now: Millis,
        uid: &str,
    ) -> Result<u64, EngineError> {
        let mut keys = self.registry_keys(&key.tenant);
        keys.extend([
            self.keys.tenants(),
            self.keys.tenant_tombstones(),
            self.keys.tenant_gens(),
            self.keys.tenant_deleting(),
            self.keys.expiry_due(),
        ]);
        let mut call = Call::new(&scripts::REGISTER_QUEUE, keys);
        call.arg(Keys::queue_id(key))
            .arg(key.name.as_str())
            .arg(now)
            .arg(uid)
            .arg(key.tenant.as_str());
        let mut reply = Reply::new(self.redis.eval(&call, true).await?)?;
        let status = reply.int()?;
        let value = reply.u64()?;
        match status {
            0 => Ok(value),
            1 => Err(EngineError::QuotaExceeded {
                tenant: key.tenant.to_string(),
                max_queues: value,
            }),
            _ => {
                self.known_tenants.remove(&key.tenant);
                Err(EngineError::TenantDeleted { deleted_at: value })
            }
        }
    }
}
