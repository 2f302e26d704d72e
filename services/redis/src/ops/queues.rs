//! Reading queues without a script of their own: `queue_config` (from the cache, else one
//! `HGET`), `list_queues` (the tenant's registry, then `queue_info.lua` per queue) and
//! `count_queues`.

use super::calls::FAN_OUT;
use crate::codec::from_json;
use crate::keys::QueueKeys;
use crate::RedisEngine;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use sluice_engine::{EngineError, Millis, QueueConfig, QueueInfo, QueueKey, QueueName, TenantId};

impl RedisEngine {
    pub(crate) async fn queue_config(
        &self,
        key: &QueueKey,
    ) -> Result<Option<QueueConfig>, EngineError> {
        if let Some(config) = self.configs.get(key) {
            return Ok(Some(config));
        }
        let QueueKeys(keys) = self.keys.queue(key);
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&keys[0]).arg("config");
        let Some(json) = self.redis.query::<Option<Vec<u8>>>(&cmd).await? else {
            // Absence is not cached: a queue created through another gateway is seen at once.
            return Ok(None);
        };
        let config: QueueConfig = from_json(&json)?;
        self.configs.insert(key.clone(), config.clone());
        Ok(Some(config))
    }

    pub(crate) async fn list_queues(
        &self,
        tenant: &TenantId,
        prefix: &str,
        after: Option<&QueueName>,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<QueueInfo>, EngineError> {
        let mut out = Vec::new();
        let mut start = match after {
            Some(a) if a.as_str() >= prefix => format!("({a}"),
            _ if prefix.is_empty() => "-".to_owned(),
            _ => format!("[{prefix}"),
        };
        while out.len() < limit {
            // A little more than needed: registry entries of missing queues are skipped.
            let page = limit - out.len() + 8;
            let mut cmd = redis::cmd("ZRANGEBYLEX");
            cmd.arg(self.keys.tenant_queues(tenant))
                .arg(&start)
                .arg("+")
                .arg("LIMIT")
                .arg(0)
                .arg(page);
            let names: Vec<String> = self.redis.query(&cmd).await?;
            let matching: Vec<&String> =
                names.iter().take_while(|n| n.starts_with(prefix)).collect();
            let done = names.len() < page || matching.len() < names.len();
            let keys: Vec<QueueKey> = matching
                .iter()
                .filter_map(|n| QueueName::parse(n).ok())
                .map(|name| QueueKey::new(tenant.clone(), name))
                .collect();
            let infos: Vec<Option<QueueInfo>> = stream::iter(
                keys.into_iter()
                    .map(|k| async move { self.get_queue(&k, now).await }),
            )
            .buffered(FAN_OUT)
            .try_collect()
            .await?;
            out.extend(infos.into_iter().flatten().take(limit - out.len()));
            match names.last() {
                Some(last) if !done => start = format!("({last}"),
                _ => break,
            }
        }
        Ok(out)
    }

    pub(crate) async fn count_queues(&self, tenant: &TenantId) -> Result<u64, EngineError> {
        let mut cmd = redis::cmd("ZCARD");
        cmd.arg(self.keys.tenant_queues(tenant));
        self.redis.query(&cmd).await
    }
}
