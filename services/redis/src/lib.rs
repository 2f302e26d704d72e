//! The Redis engine: Sluice's queues in Redis (standalone or Cluster), for several stateless
//! gateways in front of one store.
//!
//! This crate owns [`RedisEngine`], an implementation of [`sluice_engine::Engine`]:
//!
//! * **One script per operation** (`ops/<operation>.lua`, built by `scripts.rs`; the Rust side
//!   of each operation is `ops/<operation>.rs`, beside its script): send (a whole batch),
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
//! * **Moves** between queues (dead letters, redrive; `ops/transfers.rs`): the source and the
//!   destination live in different slots, so a move is a transfer in steps (register in a due
//!   index, intent in the source's slot, apply in the destination's, ack), each atomic in one
//!   slot and repeatable; [`Transfers::recover_transfers`] completes interrupted ones. A
//!   receive on a queue without a redrive policy, or one that moves nothing, stays one call.
//! * **Topic publishing** (`ops/fanout.rs`): the "copy" form of a move. The publication is
//!   committed to an outbox in the topic's own slot (with its deduplication record and FIFO
//!   sequence number), then each copy is applied idempotently in its queue's slot and the
//!   entry acknowledged; [`Publishing::recover_publications`] completes interrupted fan-outs.
//!   A FIFO publisher first delivers every entry still pending before its own, so queues get
//!   a topic's copies in sequence order.
//! * **Payloads** (`ops/payload_events.rs`): a message whose body is in a payload store keeps
//!   its reference in its JSON and a tag in the queue's `pay` hash; the script that adds or
//!   removes it for good appends the payload event to the queue's (or, for a publication's
//!   copies, the topic's) own log, so no event costs a round trip of its own;
//!   [`Payloads`] walks the registry of logs to read and trim them. A queue deleted while a
//!   move out of it is pending leaves a "maybe released" entry per payload intent, which the
//!   reader settles in the destination's slot (`ops/transfer_settle.rs`).
//! * **Caches** (`cache.rs`): queue configurations and known tenants for
//!   [`RedisOptions::cache_ttl`] (1 s by default), so a send, a receive and a delete batch
//!   are each one Redis call.
//!
//! # What a successful answer means
//!
//! `send`, `delete`, `purge`, `expire`, queue and tenant changes answer once Redis has applied
//! them; `publish` once the publication is in the topic's outbox (its deliveries then complete
//! exactly once, by the publisher or by recovery). How durable that is depends on how Redis is
//! run:
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
//!
//! # Layout
//!
//! This file only wires things: the [`RedisEngine`] struct, connecting, and the engine traits,
//! each method handing over to the inherent method of the same name in `ops/` (an inherent
//! method wins method resolution over the trait's, so these are no recursion). What
//! connecting checks lives in `setup.rs`; what the operations share in `ops/calls.rs` (script
//! calls) and `ops/handles.rs` (receipt-handle parts).

mod codec;
mod conn;
mod keys;
mod ops;
mod options;
mod scripts;
mod setup;
mod wake;

pub use ops::fanout::PublishCrash;
#[doc(hidden)]
pub use ops::payload_events::FULL_WALK_EVERY;
pub use ops::transfers::{CrashPoint, RECOVERY_GRACE_MS};
pub use options::RedisOptions;

use async_trait::async_trait;
use conn::Redis;
use keys::Keys;
use sluice_engine::TtlCache;
use sluice_engine::{
    Admission, DeadLetterRefusal, EngineError, HandleError, HandleKey, MessageState, Messages,
    Millis, NewMessage, PayloadEventBatch, Payloads, QueueConfig, QueueInfo, QueueKey,
    QueueListener, QueueName, Queues, Quotas, RateLimit, RateLimiter, ReceiveOutcome, Record,
    Records, RedriveOutcome, SendRejection, SentMessage, SeqScan, StoredMessage, TenantId,
    TenantRecord, Tenants, Transfers, Upkeep,
};
use sluice_engine::{Publication, Published, Publishing, SubscriptionStats, TopicKey};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// The Redis engine. See the crate documentation for what its answers guarantee.
pub struct RedisEngine {
    redis: Redis,
    keys: Keys,
    wakers: Arc<wake::Wakers>,
    subscriber: JoinHandle<()>,
    configs: TtlCache<QueueKey, QueueConfig>,
    /// Queues whose dead-letter queue a move found missing: their receives deliver as usual
    /// for a while instead of trying (and reverting) a move on every call.
    missing_dlqs: TtlCache<QueueKey, ()>,
    /// Tenants known to exist, with their tombstone (when last deleted) and quotas, so the
    /// check of a token's issue time and the rate limit's parameters cost no round trip either.
    known_tenants: TtlCache<TenantId, (Option<Millis>, Quotas)>,
    /// Authenticates receipt handles; the one stored under the prefix, so every gateway on
    /// this Redis accepts the others' handles.
    handle_key: HandleKey,
    /// Payload event logs this process registered (registrations are kept for good).
    payload_logs: ops::payload_events::KnownLogs,
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

impl RedisEngine {
    /// Connects to `redis://host:port[/db]` (standalone) or
    /// `redis+cluster://h1:p1,h2:p2,...` (Cluster), checks that every master runs with
    /// `maxmemory-policy noeviction`, and subscribes to wake-ups.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, EngineError> {
        let keys = Keys::new(&options.key_prefix)?;
        let redis = Redis::connect(url, &options).await?;
        setup::check_eviction_policy(&redis, options.allow_eviction).await?;
        let handle_key = setup::load_handle_key(&redis, &keys).await?;

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
            missing_dlqs: TtlCache::new(ops::transfers::MISSING_DLQ_TTL),
            known_tenants: TtlCache::new(options.cache_ttl),
            handle_key,
            payload_logs: ops::payload_events::KnownLogs::default(),
        })
    }

    /// The key this engine's receipt handles are authenticated with, for tests and tools that
    /// take handles apart ([`ReceiptHandle::decode`](sluice_engine::ReceiptHandle::decode)).
    pub fn handle_key(&self) -> &HandleKey {
        &self.handle_key
    }

    /// The move intents pending in `key` (transfer id, intent), as a mover between its intent
    /// and apply steps holds them: for tests of moves that outlive their source queue.
    #[doc(hidden)]
    pub async fn pending_moves(
        &self,
        key: &QueueKey,
    ) -> Result<Vec<(String, Vec<u8>)>, EngineError> {
        self.transfer_intents(key).await
    }

    /// Finishes moves out of `key` from intents read earlier ([`pending_moves`](Self::pending_moves)),
    /// as a mover that held them does (apply, then ack or revert), whatever became of `key`
    /// meanwhile; answers how many it finished.
    #[doc(hidden)]
    pub async fn finish_moves(
        &self,
        key: &QueueKey,
        intents: &[(String, Vec<u8>)],
        now: Millis,
    ) -> Result<u64, EngineError> {
        self.complete_held(key, intents, now).await
    }

    /// [`Transfers::dead_letter`] stopped at `crash`, as if the gateway died there: for tests
    /// of [`Transfers::recover_transfers`].
    #[doc(hidden)]
    pub async fn dead_letter_interrupted(
        &self,
        key: &QueueKey,
        handle: &str,
        reason: &str,
        now: Millis,
        crash: CrashPoint,
    ) -> Result<Result<(), DeadLetterRefusal>, EngineError> {
        self.dead_letter_until(key, handle, reason, now, Some(crash))
            .await
    }

    /// [`Publishing::publish`] stopped at `crash`, as if the gateway died there: for tests of
    /// [`Publishing::recover_publications`]. Deliveries not made answer `Pending`.
    #[doc(hidden)]
    pub async fn publish_interrupted(
        &self,
        topic: &TopicKey,
        publications: Vec<Publication>,
        now: Millis,
        crash: PublishCrash,
    ) -> Result<Vec<Published>, EngineError> {
        self.publish_until(topic, publications, now, Some(crash))
            .await
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
        self.admit(tenant, limit, now).await
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
        self.ensure_tenant(id, issued_at, now).await
    }

    async fn create_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        self.create_tenant(record).await
    }

    async fn update_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        self.update_tenant(record).await
    }

    async fn get_tenant(&self, id: &TenantId) -> Result<Option<TenantRecord>, EngineError> {
        self.get_tenant(id).await
    }

    async fn list_tenants(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> Result<Vec<TenantRecord>, EngineError> {
        self.list_tenants(after, limit).await
    }

    async fn delete_tenant(&self, id: &TenantId, now: Millis) -> Result<bool, EngineError> {
        self.delete_tenant(id, now).await
    }

    async fn tenant_deleted_at(&self, id: &TenantId) -> Result<Option<Millis>, EngineError> {
        self.tenant_deleted_at(id).await
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
        self.put_queue(key, config, now).await
    }

    async fn get_queue(
        &self,
        key: &QueueKey,
        now: Millis,
    ) -> Result<Option<QueueInfo>, EngineError> {
        self.get_queue(key, now).await
    }

    async fn queue_config(&self, key: &QueueKey) -> Result<Option<QueueConfig>, EngineError> {
        self.queue_config(key).await
    }

    async fn list_queues(
        &self,
        tenant: &TenantId,
        prefix: &str,
        after: Option<&QueueName>,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<QueueInfo>, EngineError> {
        self.list_queues(tenant, prefix, after, limit, now).await
    }

    async fn count_queues(&self, tenant: &TenantId) -> Result<u64, EngineError> {
        self.count_queues(tenant).await
    }

    async fn delete_queue(&self, key: &QueueKey) -> Result<bool, EngineError> {
        self.delete_queue(key).await
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
        self.send(key, messages, now).await
    }

    async fn receive(
        &self,
        key: &QueueKey,
        max_messages: usize,
        visibility_timeout_seconds: u32,
        request_attempt_id: Option<&str>,
        now: Millis,
    ) -> Result<ReceiveOutcome, EngineError> {
        self.receive(
            key,
            max_messages,
            visibility_timeout_seconds,
            request_attempt_id,
            now,
        )
        .await
    }

    async fn delete(
        &self,
        key: &QueueKey,
        handles: &[String],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        self.delete(key, handles, now).await
    }

    async fn change_visibility(
        &self,
        key: &QueueKey,
        entries: &[(String, u32)],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        self.change_visibility(key, entries, now).await
    }

    async fn peek(
        &self,
        key: &QueueKey,
        state: MessageState,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<StoredMessage>, EngineError> {
        self.peek(key, state, limit, now).await
    }

    async fn purge(&self, key: &QueueKey) -> Result<(), EngineError> {
        self.purge(key).await
    }

    async fn listen(&self, key: &QueueKey) -> Result<QueueListener, EngineError> {
        self.listen(key).await
    }
}

#[async_trait]
impl Transfers for RedisEngine {
    async fn dead_letter(
        &self,
        key: &QueueKey,
        handle: &str,
        reason: &str,
        now: Millis,
    ) -> Result<Result<(), DeadLetterRefusal>, EngineError> {
        self.dead_letter_until(key, handle, reason, now, None).await
    }

    async fn redrive(
        &self,
        from: &QueueKey,
        seqs: &[u64],
        destination: Option<&QueueName>,
        now: Millis,
    ) -> Result<Vec<RedriveOutcome>, EngineError> {
        self.redrive(from, seqs, destination, now).await
    }

    async fn message_seqs(
        &self,
        key: &QueueKey,
        after: u64,
        limit: usize,
    ) -> Result<SeqScan, EngineError> {
        self.message_seqs(key, after, limit).await
    }

    async fn recover_transfers(&self, now: Millis) -> Result<u64, EngineError> {
        self.recover_transfers(now).await
    }
}

#[async_trait]
impl Records for RedisEngine {
    async fn get_record(&self, kind: &str, key: &str) -> Result<Option<Record>, EngineError> {
        self.get_record(kind, key).await
    }

    async fn put_record(
        &self,
        kind: &str,
        key: &str,
        value: String,
        expected: Option<u64>,
    ) -> Result<Option<u64>, EngineError> {
        self.put_record(kind, key, value, expected).await
    }

    async fn delete_record(
        &self,
        kind: &str,
        key: &str,
        expected: u64,
    ) -> Result<bool, EngineError> {
        self.delete_record(kind, key, expected).await
    }

    async fn list_records(
        &self,
        kind: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Record)>, EngineError> {
        self.list_records(kind, prefix, after, limit).await
    }
}

#[async_trait]
impl Payloads for RedisEngine {
    async fn payload_events(&self, limit: usize) -> Result<PayloadEventBatch, EngineError> {
        self.payload_events(limit).await
    }

    async fn ack_payload_events(&self, batch: &PayloadEventBatch) -> Result<(), EngineError> {
        self.ack_payload_events(batch).await
    }
}

#[async_trait]
impl Upkeep for RedisEngine {
    async fn ping(&self) -> Result<(), EngineError> {
        self.ping().await
    }

    async fn expire(&self, now: Millis) -> Result<u64, EngineError> {
        self.expire(now).await
    }
}

#[async_trait]
impl Publishing for RedisEngine {
    async fn publish(
        &self,
        topic: &TopicKey,
        publications: Vec<Publication>,
        now: Millis,
    ) -> Result<Vec<Published>, EngineError> {
        self.publish_until(topic, publications, now, None).await
    }

    async fn subscription_stats(
        &self,
        topic: &TopicKey,
    ) -> Result<BTreeMap<String, SubscriptionStats>, EngineError> {
        self.subscription_stats(topic).await
    }

    async fn delete_topic(&self, topic: &TopicKey) -> Result<bool, EngineError> {
        self.delete_topic(topic).await
    }

    async fn recover_publications(&self, now: Millis) -> Result<u64, EngineError> {
        self.recover_publications(now).await
    }
}
