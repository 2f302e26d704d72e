//! Deleting a tenant (`tenant_delete_begin.lua`, then every queue by `delete_queue.lua`, then
//! every topic it published to by `topic_delete.lua` once its pending fan-outs are finished,
//! then `tenant_delete.lua`).

use super::calls::FAN_OUT;
use crate::codec::Reply;
use crate::conn::Call;
use crate::{scripts, RedisEngine};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use sluice_engine::{EngineError, Millis, QueueKey, QueueName, TenantId};

impl RedisEngine {
    pub(crate) async fn delete_tenant(
        &self,
        id: &TenantId,
        now: Millis,
    ) -> Result<bool, EngineError> {
        // Three steps, because a tenant's registry and its queues live in different cluster
        // slots: begin (record, tombstone, deletion mark: registrations refused from now on),
        // fence and delete each registered queue, then drop the registry entries and the mark.
        // tenant_delete_begin.lua argues why no interleaving with put_queue leaves a live
        // queue outside the registries.
        let mut begin = Call::new(
            &scripts::TENANT_DELETE_BEGIN,
            [
                self.keys.tenants(),
                self.keys.tenant_ids(),
                self.keys.tenant_tombstones(),
                self.keys.tenant_gens(),
                self.keys.tenant_deleting(),
                self.keys.tenant_queues(id),
            ],
        );
        begin.arg(id.as_str()).arg(now);
        self.known_tenants.remove(id);
        let mut reply = Reply::new(self.redis.eval(&begin, true).await?)?;
        let existed = reply.int()? == 1;
        let fence = reply.u64()?;
        let mut names = Vec::new();
        while !reply.is_empty() {
            names.push(reply.text()?);
        }
        if !existed && names.is_empty() {
            // Topics are no queues: their state goes whether or not the tenant had any.
            self.forget_tenant_topics(id, now).await?;
            return Ok(false);
        }
        let keys: Vec<QueueKey> = names
            .iter()
            .filter_map(|n| QueueName::parse(n).ok())
            .map(|name| QueueKey::new(id.clone(), name))
            .collect();
        stream::iter(
            keys.into_iter()
                .map(|key| async move { self.drop_queue(&key, Some(fence)).await }),
        )
        .buffer_unordered(FAN_OUT)
        .try_for_each(|_| async { Ok(()) })
        .await?;
        // After the queues: a pending fan-out's copies then fail, and their payloads are
        // released by its ack (see `settle_deleted_topic`).
        self.forget_tenant_topics(id, now).await?;
        let mut keys = self.registry_keys(id);
        keys.push(self.keys.tenant_deleting());
        let mut end = Call::new(&scripts::TENANT_DELETE, keys);
        end.arg(id.as_str()).arg(fence);
        self.redis.eval(&end, true).await?;
        self.known_tenants.remove(id);
        self.configs.retain(|k| &k.tenant != id);
        Ok(existed)
    }
}
