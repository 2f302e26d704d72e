//! What connecting checks and loads once: that no master may evict keys, and the prefix's
//! receipt-handle key shared by every gateway on this Redis.

use crate::conn::Redis;
use crate::keys::Keys;
use sluice_engine::{EngineError, HandleKey};

/// The prefix's receipt-handle key: the stored one, or a fresh one stored now if there is none.
/// `SET NX GET` makes it one atomic step, so engines connecting at once agree on the winner.
/// (In a cluster the key lives in the registries' slot; it is read once, here.)
pub(crate) async fn load_handle_key(redis: &Redis, keys: &Keys) -> Result<HandleKey, EngineError> {
    let fresh = hex::encode(HandleKey::random_bytes());
    let mut cmd = redis::cmd("SET");
    cmd.arg(keys.handle_key()).arg(&fresh).arg("NX").arg("GET");
    let stored: Option<String> = redis.query(&cmd).await?;
    let text = stored.unwrap_or(fresh);
    hex::decode(&text)
        .ok()
        .and_then(|bytes| HandleKey::from_bytes(&bytes))
        .ok_or_else(|| {
            EngineError::Internal(format!(
                "{} does not hold a receipt handle key ({} hex digits expected)",
                keys.handle_key(),
                2 * HandleKey::BYTES
            ))
        })
}

/// Refuses a server that may evict keys: eviction would delete messages without a trace.
pub(crate) async fn check_eviction_policy(
    redis: &Redis,
    allow_eviction: bool,
) -> Result<(), EngineError> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    let replies = match redis.on_every_master(&cmd).await {
        Ok(replies) => replies,
        Err(EngineError::Internal(why)) if allow_eviction => {
            tracing::warn!(%why, "cannot read maxmemory-policy; continuing as allowed");
            return Ok(());
        }
        Err(EngineError::Internal(why)) => {
            return Err(EngineError::Internal(format!(
                "cannot check maxmemory-policy (CONFIG GET failed: {why}); Sluice needs \
                 noeviction on every master, set allow_eviction to connect anyway"
            )))
        }
        Err(other) => return Err(other),
    };
    for (node, reply) in replies {
        let policy = policy_of(reply);
        if policy.as_deref() == Some("noeviction") {
            continue;
        }
        let policy = policy.unwrap_or_else(|| "unknown".to_owned());
        if allow_eviction {
            tracing::warn!(
                node,
                policy,
                "maxmemory-policy is not noeviction: Redis may evict messages"
            );
        } else {
            return Err(EngineError::Internal(format!(
                "Redis {node} runs with maxmemory-policy {policy}: it may evict (silently delete) \
                 messages. Sluice needs `maxmemory-policy noeviction` on every master \
                 (or RedisOptions::allow_eviction to connect anyway)"
            )));
        }
    }
    Ok(())
}

/// The value of a `CONFIG GET` reply (a `[name, value]` array, or a map under RESP3).
fn policy_of(reply: redis::Value) -> Option<String> {
    use redis::Value;
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match reply {
        Value::Array(items) => items.get(1).and_then(text),
        Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
        _ => None,
    }
}
