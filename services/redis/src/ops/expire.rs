//! The expiry sweep (`expire.lua`), driven by the shared due index `{P}:expiry-due`: each
//! round asks Redis which queues are due (`ZRANGEBYSCORE … -inf now`), runs the script on each
//! until nothing more is due, and files the queue again under its next due time — so a round
//! costs in proportion to the queues that are due, not to the number of queues. Registering
//! a queue (every `put_queue`) files it as due at once, since its retention may have changed.
//! Every gateway sweeps; the script is atomic and idempotent, so two sweeping one queue at
//! once remove each message once. Registry entries whose queue has been missing for long
//! enough are dropped on the way.

use super::calls::FAN_OUT;
use super::transfer_apply::APPLIED_WINDOW_MS;
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use sluice_engine::{EngineError, Millis, DEDUPLICATION_WINDOW_MS, RECEIVE_ATTEMPT_WINDOW_MS};

/// Messages one expiry script removes at most (it runs again while more remain).
const EXPIRE_BATCH: usize = 1000;
/// A registry entry whose queue is missing is dropped by the expiry sweep only once it was
/// registered at least this long ago: a younger one may belong to a `put_queue` in progress.
const REGISTRY_GRACE_MS: Millis = 60_000;
/// The longest a queue goes unswept: besides expiring messages, a sweep forgets FIFO
/// deduplication records, receive attempts and applied transfer ids past their windows, and
/// those made after a sweep are not in its due time.
const MAX_SWEEP_GAP_MS: Millis = 3_600_000;
/// Due queues taken from the index at once.
const DUE_PAGE: usize = 500;
/// Pages one round sweeps at most; the rest wait for the next round (a second later).
const MAX_PAGES: usize = 20;

impl RedisEngine {
    /// Runs the expiry script on one queue until nothing more is due, then files it under its
    /// next due time; drops the entries of a queue that has been missing for long enough.
    pub(crate) async fn expire_queue(
        &self,
        queue_id: String,
        now: Millis,
    ) -> Result<u64, EngineError> {
        let Some(key) = Keys::parse_queue_id(&queue_id) else {
            // Not a name this engine writes: out of the index, so no round meets it again.
            self.file_due(&queue_id, None).await?;
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
            let reply = self.run_queue(&key, &call, true).await;
            self.queue_payload_log_touched(&key);
            let Some(mut reply) = reply? else {
                let mut score = redis::cmd("ZSCORE");
                score.arg(self.keys.all_queues()).arg(&queue_id);
                let registered_at: Option<f64> = self.redis.query(&score).await?;
                match registered_at {
                    Some(at) if (at as Millis).saturating_add(REGISTRY_GRACE_MS) > now => {
                        // Perhaps a creation in progress: look again once the grace is over.
                        let again = (at as Millis).saturating_add(REGISTRY_GRACE_MS);
                        self.file_due(&queue_id, Some(again)).await?;
                    }
                    Some(_) => {
                        let before = (now - REGISTRY_GRACE_MS).to_string();
                        self.unregister(&key, "before", &before).await?;
                        self.file_due(&queue_id, None).await?;
                    }
                    None => self.file_due(&queue_id, None).await?,
                }
                return Ok(removed);
            };
            removed += reply.u64()?;
            let more = reply.int()? == 1;
            let due = reply.time()?;
            let retention = reply.u64()?;
            if !more {
                // A message sent from now on expires no earlier than now + retention.
                let due = due
                    .unwrap_or(now.saturating_add(retention))
                    .min(now.saturating_add(MAX_SWEEP_GAP_MS));
                self.file_due(&queue_id, Some(due)).await?;
                return Ok(removed);
            }
        }
    }

    /// Files `queue_id` in the due index at `due` — only if it is still there (`XX`), so that
    /// a sweep racing with a deletion does not bring the entry back — or takes it out.
    async fn file_due(&self, queue_id: &str, due: Option<Millis>) -> Result<(), EngineError> {
        let mut cmd = match due {
            Some(due) => {
                let mut cmd = redis::cmd("ZADD");
                cmd.arg(self.keys.expiry_due()).arg("XX").arg(due);
                cmd
            }
            None => {
                let mut cmd = redis::cmd("ZREM");
                cmd.arg(self.keys.expiry_due());
                cmd
            }
        };
        cmd.arg(queue_id);
        self.redis.query::<i64>(&cmd).await.map(drop)
    }

    /// Files every registered queue as due, once per store: stores written before the due
    /// index existed have their queues in the registry only.
    pub(crate) async fn fill_expiry_due(&self, now: Millis) -> Result<(), EngineError> {
        let mut filled = redis::cmd("EXISTS");
        filled.arg(self.keys.expiry_due_filled());
        if self.redis.query::<i64>(&filled).await? == 1 {
            return Ok(());
        }
        let mut cursor = "0".to_owned();
        loop {
            let mut scan = redis::cmd("ZSCAN");
            scan.arg(self.keys.all_queues())
                .arg(&cursor)
                .arg("COUNT")
                .arg(500);
            let (next, flat): (String, Vec<String>) = self.redis.query(&scan).await?;
            let ids: Vec<&String> = flat.chunks_exact(2).map(|pair| &pair[0]).collect();
            if !ids.is_empty() {
                let mut add = redis::cmd("ZADD");
                add.arg(self.keys.expiry_due()).arg("NX");
                for id in ids {
                    add.arg(now).arg(id);
                }
                self.redis.query::<i64>(&add).await?;
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
        let mut mark = redis::cmd("SET");
        mark.arg(self.keys.expiry_due_filled()).arg(now);
        self.redis.query::<()>(&mark).await
    }

    pub(crate) async fn expire(&self, now: Millis) -> Result<u64, EngineError> {
        self.fill_expiry_due(now).await?;
        let mut total = 0;
        for _ in 0..MAX_PAGES {
            let mut due = redis::cmd("ZRANGEBYSCORE");
            due.arg(self.keys.expiry_due())
                .arg("-inf")
                .arg(now)
                .arg("LIMIT")
                .arg(0)
                .arg(DUE_PAGE);
            let queues: Vec<String> = self.redis.query(&due).await?;
            let page = queues.len();
            total += stream::iter(
                queues
                    .into_iter()
                    .map(|queue_id| self.expire_queue(queue_id, now)),
            )
            .buffer_unordered(FAN_OUT)
            .try_fold(0, |sum, n| async move { Ok(sum + n) })
            .await?;
            if page < DUE_PAGE {
                break;
            }
        }
        Ok(total)
    }
}
