//! The expiry sweep (`expire.lua`): walks the registry of all queues, skips those whose next
//! expiry it noted is still ahead, runs the script on each due queue until nothing more is due,
//! and drops registry entries whose queue has been missing for long enough.

use super::calls::FAN_OUT;
use super::transfer_apply::APPLIED_WINDOW_MS;
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use sluice_engine::{EngineError, Millis, DEDUPLICATION_WINDOW_MS, RECEIVE_ATTEMPT_WINDOW_MS};
use std::sync::PoisonError;

/// Messages one expiry script removes at most (it runs again while more remain).
const EXPIRE_BATCH: usize = 1000;
/// A registry entry whose queue is missing is dropped by the expiry sweep only once it was
/// registered at least this long ago: a younger one may belong to a `put_queue` in progress.
const REGISTRY_GRACE_MS: Millis = 60_000;
/// The longest the sweep trusts its own note of when a queue's next message expires: a
/// retention shortened through another gateway is picked up within this time.
const MAX_EXPIRY_SKIP_MS: Millis = 60_000;

impl RedisEngine {
    /// Runs the expiry script on one registered queue until nothing more is due; drops a
    /// registry entry whose queue has been missing for long enough.
    pub(crate) async fn expire_queue(
        &self,
        queue_id: String,
        registered_at: Millis,
        now: Millis,
    ) -> Result<u64, EngineError> {
        let Some(key) = Keys::parse_queue_id(&queue_id) else {
            // Not a name this engine writes: leave it alone.
            return Ok(0);
        };
        let mut removed = 0;
        loop {
            let mut call = self.queue_call(&scripts::EXPIRE, &key);
            call.arg(now)
                .arg(EXPIRE_BATCH)
                .arg(DEDUPLICATION_WINDOW_MS)
                .arg(RECEIVE_ATTEMPT_WINDOW_MS)
                .arg(APPLIED_WINDOW_MS);
            let Some(mut reply) = self.run_queue(&key, &call, true).await? else {
                self.forget_expiry(&queue_id);
                if registered_at.saturating_add(REGISTRY_GRACE_MS) <= now {
                    let before = (now - REGISTRY_GRACE_MS).to_string();
                    self.unregister(&key, "before", &before).await?;
                }
                return Ok(removed);
            };
            removed += reply.u64()?;
            let more = reply.int()? == 1;
            let due = reply.time()?;
            let retention = reply.u64()?;
            if !more {
                // A message sent from now on expires no earlier than now + retention.
                let due = due.unwrap_or(now.saturating_add(retention));
                let due = due.min(now.saturating_add(MAX_EXPIRY_SKIP_MS));
                self.expiry_due
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(queue_id, due);
                return Ok(removed);
            }
        }
    }

    pub(crate) fn is_due(&self, queue_id: &str, now: Millis) -> bool {
        self.expiry_due
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(queue_id)
            .is_none_or(|&due| due <= now)
    }

    pub(crate) async fn expire(&self, now: Millis) -> Result<u64, EngineError> {
        let mut total = 0;
        let mut cursor = "0".to_owned();
        loop {
            let mut cmd = redis::cmd("ZSCAN");
            cmd.arg(self.keys.all_queues())
                .arg(&cursor)
                .arg("COUNT")
                .arg(500);
            let (next, flat): (String, Vec<String>) = self.redis.query(&cmd).await?;
            let due: Vec<(String, Millis)> = flat
                .chunks_exact(2)
                .filter(|pair| self.is_due(&pair[0], now))
                .map(|pair| {
                    (
                        pair[0].clone(),
                        pair[1].parse::<f64>().unwrap_or(0.0) as Millis,
                    )
                })
                .collect();
            total +=
                stream::iter(due.into_iter().map(|(queue_id, registered_at)| {
                    self.expire_queue(queue_id, registered_at, now)
                }))
                .buffer_unordered(FAN_OUT)
                .try_fold(0, |sum, n| async move { Ok(sum + n) })
                .await?;
            if next == "0" {
                return Ok(total);
            }
            cursor = next;
        }
    }
}
