//! The Redis engine: Sluice's queues in Redis (standalone or Cluster), for several stateless
//! gateways in front of one store.
//!
//! This crate owns [`RedisEngine`], an implementation of [`sluice_engine::Engine`]:
//!
//! * **One script per operation** (`scripts.rs`, `src/scripts/*.lua`): send (a whole batch),
//!   receive, delete (a batch), change visibility, peek, stats, purge, expiry and queue
//!   creation are each one `EVALSHA` over the keys of one queue, which share one hash tag and
//!   so one cluster slot. Scripts check everything before they change anything and take "now"
//!   from the caller, never from the server's clock.
//! * **Keys** (`keys.rs`): one namespace type builds every key; the layout is documented there.
//! * **FIFO queues** get nine more keys (groups ready by head seq, groups waiting by the time
//!   they are released, each group's messages in order, deduplication records, receive
//!   attempts), passed to the same scripts: sends, receives and delete batches stay one
//!   `EVALSHA` each (see the README).
//! * **Connection** (`conn.rs`): a `ConnectionManager` (standalone) or the async cluster client,
//!   every call bounded by [`RedisOptions::command_timeout`] and mapped to
//!   [`EngineError::Unavailable`] when Redis is away; both reconnect by themselves.
//! * **Wake-ups** (`wake.rs`): scripts publish on one channel; one pub/sub connection per
//!   engine wakes long polls in this process, so a send through any gateway wakes a receive
//!   waiting on any other.
//! * **Caches** (`cache.rs`): queue configurations and known tenants for
//!   [`RedisOptions::cache_ttl`] (1 s by default), so a send, a receive and a delete batch
//!   are each one Redis call.
//!
//! # What a successful answer means
//!
//! `send`, `delete`, `purge`, `expire`, queue and tenant changes answer once Redis has applied
//! them; how durable that is depends on how Redis is run:
//!
//! | Redis settings | an acknowledged write survives |
//! |---|---|
//! | `appendonly yes`, `appendfsync always` | a crash of `redis-server` or of its machine (the AOF is fsynced before Redis replies) |
//! | `appendonly yes`, `appendfsync everysec` (Redis' default for AOF) | a crash of `redis-server`; a machine crash loses up to about the last second |
//! | replicas + [`RedisOptions::wait_replicas`] `= Some((n, t))` | the loss of the master, if a replica that acknowledged it is promoted (`WAIT` confirms receipt by `n` replicas, not their fsync) |
//! | no AOF (RDB snapshots or nothing) | nothing beyond the last snapshot: a restart loses messages |
//!
//! The engine refuses to connect unless every master runs with `maxmemory-policy noeviction`
//! (eviction deletes messages silently; see [`RedisOptions::allow_eviction`]). Receive
//! bookkeeping (visibility, receive counts, delivery numbers) is written like everything else
//! but never waited for with `WAIT`. A write whose `WAIT` falls short answers `Unavailable`
//! although the master applied it: a retry may duplicate a message (at-least-once).

mod cache;
mod codec;
mod conn;
mod keys;
mod options;
mod scripts;
mod wake;

pub use options::RedisOptions;

use async_trait::async_trait;
use cache::TtlCache;
use codec::{from_json, tenant_from, to_json, Described, Reply, StoredBody};
use conn::{Call, Redis};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use keys::{Keys, QueueKeys};
use sluice_engine::{
    Admission, DeduplicationScope, EngineError, HandleError, HandleKey, MessageState, Messages,
    Millis, NewMessage, QueueConfig, QueueInfo, QueueKey, QueueListener, QueueName, Queues, Quotas,
    RateLimit, RateLimiter, ReceiptHandle, ReceiveOutcome, ReceivedMessage, SendRejection,
    SentMessage, StoredMessage, TenantId, TenantRecord, Tenants, Upkeep, DEDUPLICATION_WINDOW_MS,
    RECEIVE_ATTEMPT_WINDOW_MS,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::task::JoinHandle;

/// How many queue scripts an administrative sweep (expiry, tenant deletion, listing) runs at
/// once.
const FAN_OUT: usize = 16;
/// Messages one expiry script removes at most (it runs again while more remain).
const EXPIRE_BATCH: usize = 1000;
/// How many messages a peek looks at, at most, to find those in the state asked for.
const PEEK_SCAN: usize = 10_000;
/// A registry entry whose queue is missing is dropped by the expiry sweep only once it was
/// registered at least this long ago: a younger one may belong to a `put_queue` in progress.
const REGISTRY_GRACE_MS: Millis = 60_000;
/// The longest the sweep trusts its own note of when a queue's next message expires: a
/// retention shortened through another gateway is picked up within this time.
const MAX_EXPIRY_SKIP_MS: Millis = 60_000;

/// The Redis engine. See the crate documentation for what its answers guarantee.
pub struct RedisEngine {
    redis: Redis,
    keys: Keys,
    wakers: Arc<wake::Wakers>,
    subscriber: JoinHandle<()>,
    configs: TtlCache<QueueKey, QueueConfig>,
    /// Tenants known to exist, with their tombstone (when last deleted) and quotas, so the
    /// check of a token's issue time and the rate limit's parameters cost no round trip either.
    known_tenants: TtlCache<TenantId, (Option<Millis>, Quotas)>,
    /// Per `<tenant>/<queue>`: before this instant (on the callers' clock) no message of the
    /// queue can expire, so the sweep skips it.
    expiry_due: Mutex<HashMap<String, Millis>>,
    /// Authenticates receipt handles; the one stored under the prefix, so every gateway on
    /// this Redis accepts the others' handles.
    handle_key: HandleKey,
}

impl std::fmt::Debug for RedisEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisEngine")
            .field("topology", self.redis.topology())
            .finish_non_exhaustive()
    }
}

impl Drop for RedisEngine {
    fn drop(&mut self) {
        self.subscriber.abort();
    }
}

fn seconds(s: u32) -> Millis {
    Millis::from(s) * 1000
}

fn member(seq: u64) -> String {
    format!("{seq:016}")
}

/// Bits of a handle's delivery number that hold the per-receive random salt; the queue's
/// delivery counter fills the rest (2^44 deliveries per queue incarnation).
const SALT_BITS: u32 = 20;

/// The delivery number a handle carries: the counter, then the salt.
fn delivery_number(counter: u64, salt: u64) -> u64 {
    (counter << SALT_BITS) | salt
}

/// How scripts store and compare a delivery: `<counter>-<salt>`.
fn delivery_token(delivery: u64) -> String {
    format!(
        "{}-{}",
        delivery >> SALT_BITS,
        delivery & ((1 << SALT_BITS) - 1)
    )
}

/// The prefix's receipt-handle key: the stored one, or a fresh one stored now if there is none.
/// `SET NX GET` makes it one atomic step, so engines connecting at once agree on the winner.
/// (In a cluster the key lives in the registries' slot; it is read once, here.)
async fn load_handle_key(redis: &Redis, keys: &Keys) -> Result<HandleKey, EngineError> {
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

fn not_found<T>(reply: Option<T>) -> Result<T, EngineError> {
    reply.ok_or(EngineError::QueueNotFound)
}

fn handle_error(code: i64) -> Result<(), HandleError> {
    match code {
        0 => Ok(()),
        1 => Err(HandleError::Invalid),
        _ => Err(HandleError::Stale),
    }
}

fn state_name(state: MessageState) -> &'static str {
    match state {
        MessageState::Visible => "visible",
        MessageState::InFlight => "in_flight",
        MessageState::Delayed => "delayed",
    }
}

impl RedisEngine {
    /// Connects to `redis://host:port[/db]` (standalone) or
    /// `redis+cluster://h1:p1,h2:p2,...` (Cluster), checks that every master runs with
    /// `maxmemory-policy noeviction`, and subscribes to wake-ups.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, EngineError> {
        let keys = Keys::new(&options.key_prefix)?;
        let redis = Redis::connect(url, &options).await?;
        check_eviction_policy(&redis, options.allow_eviction).await?;
        let handle_key = load_handle_key(&redis, &keys).await?;

        let wakers = Arc::new(wake::Wakers::new());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let subscriber = tokio::spawn(wake::run_subscriber(
            Arc::downgrade(&wakers),
            redis.topology().pubsub_urls(),
            keys.wake_channel(),
            options.command_timeout,
            ready_tx,
        ));
        // Wait for the subscription so that wake-ups published from now on reach us; if it
        // cannot be made yet, the task keeps trying and long polls fall back to their timers.
        if !matches!(
            tokio::time::timeout(options.command_timeout, ready_rx).await,
            Ok(Ok(()))
        ) {
            tracing::warn!("not yet subscribed to wake-ups; long polls may wake late");
        }
        tracing::info!(
            url = conn::redacted(url),
            cluster = redis.is_cluster(),
            prefix = options.key_prefix,
            "redis engine connected"
        );
        Ok(Self {
            redis,
            keys,
            wakers,
            subscriber,
            configs: TtlCache::new(options.cache_ttl),
            known_tenants: TtlCache::new(options.cache_ttl),
            expiry_due: Mutex::new(HashMap::new()),
            handle_key,
        })
    }

    /// The key this engine's receipt handles are authenticated with, for tests and tools that
    /// take handles apart ([`ReceiptHandle::decode`]).
    pub fn handle_key(&self) -> &HandleKey {
        &self.handle_key
    }

    fn queue_call(&self, script: &'static redis::Script, key: &QueueKey) -> Call {
        let QueueKeys(keys) = self.keys.queue(key);
        Call::new(script, keys)
    }

    /// A call of a script that also takes the queue's fence key (put_queue, delete_queue).
    fn fenced_queue_call(&self, script: &'static redis::Script, key: &QueueKey) -> Call {
        let QueueKeys(mut keys) = self.keys.queue(key);
        keys.push(self.keys.queue_fence(key));
        Call::new(script, keys)
    }

    fn info(&self, key: &QueueKey, d: Described) -> QueueInfo {
        QueueInfo {
            tenant: key.tenant.clone(),
            name: key.name.clone(),
            config: d.config,
            created_at: d.created_at,
            updated_at: d.updated_at,
            stats: d.stats,
        }
    }

    /// A queue script's reply; forgets the cached configuration when the queue is gone.
    async fn run_queue(
        &self,
        key: &QueueKey,
        call: &Call,
        durable: bool,
    ) -> Result<Option<Reply>, EngineError> {
        let reply = Reply::of_queue(self.redis.eval(call, durable).await?)?;
        if reply.is_none() {
            self.configs.remove(key);
        }
        Ok(reply)
    }

    fn forget_expiry(&self, queue_id: &str) {
        self.expiry_due
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(queue_id);
    }

    fn registry_keys(&self, tenant: &TenantId) -> Vec<String> {
        vec![
            self.keys.all_queues(),
            self.keys.queue_uids(),
            self.keys.tenant_queues(tenant),
            self.keys.queue_gens(),
        ]
    }

    fn registry_call(&self, script: &'static redis::Script, key: &QueueKey) -> Call {
        Call::new(script, self.registry_keys(&key.tenant))
    }

    /// Records the queue (incarnation `uid`) in the registries, unless that would take the
    /// tenant past `max_queues` or the tenant is (being) deleted. Answers the tenant
    /// generation the registration carries.
    async fn register(&self, key: &QueueKey, now: Millis, uid: &str) -> Result<u64, EngineError> {
        let mut keys = self.registry_keys(&key.tenant);
        keys.extend([
            self.keys.tenants(),
            self.keys.tenant_tombstones(),
            self.keys.tenant_gens(),
            self.keys.tenant_deleting(),
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

    /// Drops a queue from the registries unless it was registered again since: `mode` is
    /// `"uid"` (only if last registered for that incarnation) or `"before"` (only if last
    /// registered no later than that instant).
    async fn unregister(&self, key: &QueueKey, mode: &str, value: &str) -> Result<(), EngineError> {
        let mut call = self.registry_call(&scripts::UNREGISTER_QUEUE, key);
        call.arg(Keys::queue_id(key))
            .arg(key.name.as_str())
            .arg(mode)
            .arg(value);
        self.redis.eval(&call, true).await.map(drop)
    }

    /// Writes a tenant record (see `tenant_put.lua` for `mode`); `issued_at` is the token's
    /// issue time for `ensure`. Answers the script's status and the quotas now stored.
    async fn tenant_put(
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

    /// Deletes one queue's keys; answers the uid of the incarnation deleted, if it existed.
    /// Leaves the registries alone. `fence` (tenant deletion only) voids registrations of
    /// that tenant generation or older for this name, whether the queue exists yet or not.
    async fn drop_queue(
        &self,
        key: &QueueKey,
        fence: Option<u64>,
    ) -> Result<Option<String>, EngineError> {
        let queue_id = Keys::queue_id(key);
        let mut call = self.fenced_queue_call(&scripts::DELETE_QUEUE, key);
        call.arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id))
            .arg(fence.map(|f| f.to_string()).unwrap_or_default());
        let deleted = match self.run_queue(key, &call, true).await? {
            Some(mut reply) => Some(reply.text()?),
            None => None,
        };
        self.configs.remove(key);
        self.forget_expiry(&queue_id);
        // Waiters look again and find the queue gone.
        self.wakers.wake(&queue_id);
        Ok(deleted)
    }

    /// Runs the expiry script on one registered queue until nothing more is due; drops a
    /// registry entry whose queue has been missing for long enough.
    async fn expire_queue(
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
                .arg(RECEIVE_ATTEMPT_WINDOW_MS);
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

    fn is_due(&self, queue_id: &str, now: Millis) -> bool {
        self.expiry_due
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(queue_id)
            .is_none_or(|&due| due <= now)
    }
}

/// Refuses a server that may evict keys: eviction would delete messages without a trace.
async fn check_eviction_policy(redis: &Redis, allow_eviction: bool) -> Result<(), EngineError> {
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

/// Gateways on one Redis share each tenant's bucket: one script call per limited request, on
/// the tenant's own key; `now` comes from the calling gateway's clock.
#[async_trait]
impl RateLimiter for RedisEngine {
    async fn admit(
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

#[async_trait]
impl Tenants for RedisEngine {
    async fn ensure_tenant(
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

    async fn create_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        match self.tenant_put("create", &record, None).await?.0 {
            1 => Ok(()),
            _ => Err(EngineError::AlreadyExists(format!("tenant {}", record.id))),
        }
    }

    async fn update_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        match self.tenant_put("update", &record, None).await?.0 {
            1 => Ok(()),
            _ => Err(EngineError::TenantNotFound),
        }
    }

    async fn get_tenant(&self, id: &TenantId) -> Result<Option<TenantRecord>, EngineError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.keys.tenants()).arg(id.as_str());
        tenant_from(self.redis.query(&cmd).await?)
    }

    async fn list_tenants(
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

    async fn delete_tenant(&self, id: &TenantId, now: Millis) -> Result<bool, EngineError> {
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
        let mut keys = self.registry_keys(id);
        keys.push(self.keys.tenant_deleting());
        let mut end = Call::new(&scripts::TENANT_DELETE, keys);
        end.arg(id.as_str()).arg(fence);
        self.redis.eval(&end, true).await?;
        self.known_tenants.remove(id);
        self.configs.retain(|k| &k.tenant != id);
        Ok(existed)
    }

    async fn tenant_deleted_at(&self, id: &TenantId) -> Result<Option<Millis>, EngineError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.keys.tenant_tombstones()).arg(id.as_str());
        self.redis.query(&cmd).await
    }
}

#[async_trait]
impl Queues for RedisEngine {
    async fn put_queue(
        &self,
        key: &QueueKey,
        config: QueueConfig,
        now: Millis,
    ) -> Result<(QueueInfo, bool), EngineError> {
        // Registered before it exists: a crash in between leaves an entry naming a missing
        // queue (skipped by readers, dropped by the sweep), never a queue nobody lists or
        // sweeps. Zero is never issued, so an all-zero handle prefix is never valid.
        let uid = rand::random::<u64>().max(1).to_string();
        // Admits the creation (quota, tenant not deleted) atomically with the registration.
        let generation = self.register(key, now, &uid).await?;
        let mut call = self.fenced_queue_call(&scripts::PUT_QUEUE, key);
        call.arg(now)
            .arg(&uid)
            .arg(to_json(&config)?)
            .arg(seconds(config.message_retention_seconds))
            .arg(config.max_depth.map(|d| d.to_string()).unwrap_or_default())
            .arg(match config.deduplication_scope {
                DeduplicationScope::Queue => "queue",
                DeduplicationScope::MessageGroup => "message_group",
            })
            .arg(generation);
        let mut reply = Reply::new(self.redis.eval(&call, true).await?)?;
        let created = match reply.int()? {
            // A tenant deletion began after our registration and fenced this name: its walk
            // drops our entry; nothing was created.
            -1 => {
                let deleted_at = self.tenant_deleted_at(&key.tenant).await?.unwrap_or(now);
                return Err(EngineError::TenantDeleted { deleted_at });
            }
            status => status == 1,
        };
        let described = Described::read(&mut reply)?;
        if described.uid != uid {
            // The queue existed: register it for its actual incarnation, so that deleting it
            // drops the entry (a deletion only drops entries of the incarnation it deleted).
            self.register(key, now, &described.uid).await?;
        }
        self.configs.insert(key.clone(), described.config.clone());
        // The retention may have changed: let the sweep look at the queue afresh.
        self.forget_expiry(&Keys::queue_id(key));
        Ok((self.info(key, described), created))
    }

    async fn get_queue(
        &self,
        key: &QueueKey,
        now: Millis,
    ) -> Result<Option<QueueInfo>, EngineError> {
        let mut call = self.queue_call(&scripts::QUEUE_INFO, key);
        call.arg(now);
        let Some(mut reply) = self.run_queue(key, &call, false).await? else {
            return Ok(None);
        };
        let described = Described::read(&mut reply)?;
        self.configs.insert(key.clone(), described.config.clone());
        Ok(Some(self.info(key, described)))
    }

    async fn queue_config(&self, key: &QueueKey) -> Result<Option<QueueConfig>, EngineError> {
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

    async fn list_queues(
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

    async fn count_queues(&self, tenant: &TenantId) -> Result<u64, EngineError> {
        let mut cmd = redis::cmd("ZCARD");
        cmd.arg(self.keys.tenant_queues(tenant));
        self.redis.query(&cmd).await
    }

    async fn delete_queue(&self, key: &QueueKey) -> Result<bool, EngineError> {
        let Some(uid) = self.drop_queue(key, None).await? else {
            // An entry left by a crash, if any, is dropped by the expiry sweep.
            return Ok(false);
        };
        // After the queue: a crash in between leaves an entry naming a missing queue. Only
        // the entry of this incarnation goes: one registered since belongs to a put_queue
        // creating the queue anew, concurrently.
        self.unregister(key, "uid", &uid).await?;
        Ok(true)
    }
}

#[async_trait]
impl Messages for RedisEngine {
    async fn send(
        &self,
        key: &QueueKey,
        messages: Vec<NewMessage>,
        now: Millis,
    ) -> Result<Vec<Result<SentMessage, SendRejection>>, EngineError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let fifo = key.name.is_fifo();
        let queue_id = Keys::queue_id(key);
        let mut call = self.queue_call(&scripts::SEND, key);
        call.arg(now)
            .arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id))
            .arg(DEDUPLICATION_WINDOW_MS);
        let mut ids = Vec::with_capacity(messages.len());
        for m in messages {
            let (group, dedup) = (m.group_id.clone(), m.deduplication_id.clone());
            call.arg(m.visible_at).arg(to_json(&StoredBody {
                message_id: m.message_id.clone(),
                body: m.body,
                attributes: m.attributes,
                group_id: m.group_id,
                deduplication_id: m.deduplication_id,
            })?);
            if fifo {
                // The services guarantee both on FIFO queues; without them a message joins the
                // group "" and is never a duplicate.
                call.arg(&m.message_id)
                    .arg(group.unwrap_or_default())
                    .arg(dedup.unwrap_or_default());
            }
            ids.push(m.message_id);
        }
        let mut reply = not_found(self.run_queue(key, &call, true).await?)?;
        let mut answers = Vec::with_capacity(ids.len());
        for message_id in ids {
            let seq = reply.u64()?;
            let original = if fifo { reply.text()? } else { String::new() };
            answers.push(match seq {
                0 => Err(SendRejection::QueueFull),
                seq if original.is_empty() => Ok(SentMessage {
                    message_id,
                    seq,
                    duplicate: false,
                }),
                seq => Ok(SentMessage {
                    message_id: original,
                    seq,
                    duplicate: true,
                }),
            });
        }
        if answers.iter().any(Result::is_ok) {
            self.wakers.wake(&queue_id);
        }
        Ok(answers)
    }

    async fn receive(
        &self,
        key: &QueueKey,
        max_messages: usize,
        visibility_timeout_seconds: u32,
        request_attempt_id: Option<&str>,
        now: Millis,
    ) -> Result<ReceiveOutcome, EngineError> {
        let salt = rand::random::<u64>() & ((1 << SALT_BITS) - 1);
        let mut call = self.queue_call(&scripts::RECEIVE, key);
        call.arg(now)
            .arg(max_messages)
            .arg(seconds(visibility_timeout_seconds))
            .arg(salt)
            .arg(request_attempt_id.unwrap_or_default())
            .arg(RECEIVE_ATTEMPT_WINDOW_MS);
        // Receive bookkeeping may be lost with the store (see the trait): no WAIT for it.
        let mut reply = not_found(self.run_queue(key, &call, false).await?)?;
        let uid: u64 = reply
            .text()?
            .parse()
            .map_err(|_| EngineError::Internal(format!("corrupt uid of queue {key}")))?;
        let next_visible_at = reply.time()?;
        // Ours, or the one of the answer a request attempt id replays.
        let salt = reply.u64()?;
        let mut messages = Vec::new();
        while !reply.is_empty() {
            let seq = reply.u64()?;
            let sent_at = reply.u64()?;
            let receive_count = u32::try_from(reply.u64()?).unwrap_or(u32::MAX);
            let first_received_at = reply.time()?;
            let delivery = delivery_number(reply.u64()?, salt);
            let body: StoredBody = from_json(&reply.bytes()?)?;
            messages.push(ReceivedMessage {
                message: body.into_message(seq, sent_at, receive_count, first_received_at),
                receipt_handle: ReceiptHandle {
                    queue_uid: uid,
                    seq,
                    delivery,
                }
                .encode(&self.handle_key),
            });
        }
        Ok(ReceiveOutcome {
            messages,
            next_visible_at,
        })
    }

    async fn delete(
        &self,
        key: &QueueKey,
        handles: &[String],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        let queue_id = Keys::queue_id(key);
        let mut call = self.queue_call(&scripts::DELETE, key);
        call.arg(now)
            .arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id));
        let decoded: Vec<Option<ReceiptHandle>> = handles
            .iter()
            .map(|h| ReceiptHandle::decode(h, &self.handle_key))
            .collect();
        for h in decoded.iter().flatten() {
            call.arg(h.queue_uid.to_string())
                .arg(member(h.seq))
                .arg(delivery_token(h.delivery));
        }
        // Sent even when every handle is garbage: the script also answers whether the queue
        // exists.
        let mut reply = not_found(self.run_queue(key, &call, true).await?)?;
        // FIFO: a group whose message in flight was deleted may deliver again.
        if reply.int()? == 1 {
            self.wakers.wake(&queue_id);
        }
        decoded
            .into_iter()
            .map(|h| match h {
                None => Ok(Err(HandleError::Invalid)),
                Some(_) => Ok(handle_error(reply.int()?)),
            })
            .collect()
    }

    async fn change_visibility(
        &self,
        key: &QueueKey,
        entries: &[(String, u32)],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        let queue_id = Keys::queue_id(key);
        let mut call = self.queue_call(&scripts::CHANGE_VISIBILITY, key);
        call.arg(now)
            .arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id));
        let decoded: Vec<Option<(ReceiptHandle, u32)>> = entries
            .iter()
            .map(|(h, t)| ReceiptHandle::decode(h, &self.handle_key).map(|h| (h, *t)))
            .collect();
        for (h, timeout) in decoded.iter().flatten() {
            call.arg(h.queue_uid.to_string())
                .arg(member(h.seq))
                .arg(delivery_token(h.delivery))
                .arg(seconds(*timeout));
        }
        let mut reply = not_found(self.run_queue(key, &call, false).await?)?;
        let mut woke = false;
        let answers = decoded
            .into_iter()
            .map(|entry| match entry {
                None => Ok(Err(HandleError::Invalid)),
                Some((_, timeout)) => {
                    let answer = handle_error(reply.int()?);
                    woke |= answer.is_ok() && timeout == 0;
                    Ok(answer)
                }
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        if woke {
            self.wakers.wake(&queue_id);
        }
        Ok(answers)
    }

    async fn peek(
        &self,
        key: &QueueKey,
        state: MessageState,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<StoredMessage>, EngineError> {
        let mut call = self.queue_call(&scripts::PEEK, key);
        call.arg(now)
            .arg(state_name(state))
            .arg(limit)
            .arg(PEEK_SCAN);
        let mut reply = not_found(self.run_queue(key, &call, false).await?)?;
        let mut messages = Vec::new();
        while !reply.is_empty() {
            let seq = reply.u64()?;
            let sent_at = reply.u64()?;
            let receive_count = u32::try_from(reply.u64()?).unwrap_or(u32::MAX);
            let first_received_at = reply.time()?;
            let body: StoredBody = from_json(&reply.bytes()?)?;
            messages.push(body.into_message(seq, sent_at, receive_count, first_received_at));
        }
        Ok(messages)
    }

    async fn purge(&self, key: &QueueKey) -> Result<(), EngineError> {
        let call = self.queue_call(&scripts::PURGE, key);
        not_found(self.run_queue(key, &call, true).await?).map(drop)
    }

    async fn listen(&self, key: &QueueKey) -> Result<QueueListener, EngineError> {
        // No Redis call: the receive that follows finds out whether the queue exists.
        Ok(QueueListener::new(self.wakers.listen(&Keys::queue_id(key))))
    }
}

#[async_trait]
impl Upkeep for RedisEngine {
    async fn ping(&self) -> Result<(), EngineError> {
        self.redis
            .on_every_master(&redis::cmd("PING"))
            .await
            .map(drop)
    }

    async fn expire(&self, now: Millis) -> Result<u64, EngineError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_numbers_split_into_the_scripts_token() {
        let d = delivery_number(12_345, 0xF_FFFF);
        assert_eq!(delivery_token(d), "12345-1048575");
        assert_eq!(delivery_token(delivery_number(1, 0)), "1-0");
        assert_eq!(member(42), "0000000000000042");
    }
}
