//! The shared per-tenant token bucket (`rate_limit.lua`).

use crate::codec::Reply;
use crate::conn::Call;
use crate::{scripts, RedisEngine};
use sluice_engine::{Admission, EngineError, Millis, RateLimit, TenantId};

impl RedisEngine {
    pub(crate) async fn admit(
        &self,
        tenant: &TenantId,
        limit: RateLimit,
        now: Millis,
    ) -> Result<Admission, EngineError> {
        let mut call = Call::new(&scripts::RATE_LIMIT, [self.keys.tenant_rate(tenant)]);
        call.arg(now.saturating_mul(1000))
            .arg(limit.interval_us().max(1))
            .arg(limit.burst.max(1));
        let mut reply = Reply::new(self.redis.eval(&call, false).await?)?;
        let allowed = reply.int()? == 1;
        let wait_us = reply.u64()?;
        Ok(Admission {
            allowed,
            retry_after_ms: wait_us.div_ceil(1000),
        })
    }
}
