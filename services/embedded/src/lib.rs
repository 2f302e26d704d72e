//! The embedded engine: Sluice's default storage, in-process and durable on local disk.
//!
//! This crate owns [`EmbeddedEngine`], an implementation of [`sluice_engine::Engine`] over one
//! redb file (`<dir>/sluice.redb`):
//!
//! * **Bodies on disk, a compact index in memory** (`index.rs`): each queue keeps a small
//!   per-message state (times, receive count, current delivery) in two B-trees; ids, bodies and
//!   attributes are read from disk only when a message is delivered or peeked. Start-up scans the
//!   small message records only, to rebuild the index.
//! * **Group commit** (`store.rs`): one OS thread owns every write. It takes everything queued
//!   while the previous commit was fsyncing and applies it in one transaction with one fsync,
//!   then answers every waiter. [`CommitMode::FsyncEachWrite`] commits each request on its own,
//!   for comparison. A commit that fails (disk full, file-size limit, I/O error) fails only the
//!   requests in it, with [`EngineError::Unavailable`]; the thread reopens the database (redb
//!   refuses all work after a failed write) with backoff and probes until a commit succeeds,
//!   and [`Engine::ping`](sluice_engine::Upkeep::ping) reports the engine unavailable until then.
//!
//! What a successful answer means: `send`, `delete`, `purge`, `expire`, moves between queues,
//! publishes, queue, tenant and topic changes are on disk (fsynced) before they answer. A message is never
//! delivered before its send is durable. Receive bookkeeping (visibility, receive counts,
//! delivery numbers) lives in memory only: after a restart every stored message is visible
//! again at its sent `visible_at` with a receive count of 0, and handles issued before the
//! restart are stale.
//!
//! **Receipt handles** (`secret.rs`) are authenticated with a key generated once and kept in
//! the file, so a handle from before a restart is recognised (and stale), and one altered or
//! made up is refused. Each queue numbers its own deliveries, from a random start on every
//! open, so a handle says nothing about other queues and never matches a delivery made after a
//! restart.
//!
//! **FIFO queues** (`fifo.rs`) add, in memory, the message group of each message (to deliver
//! each group in order, one delivery in flight per group, oldest head first), the
//! deduplication records of the last
//! [`DEDUPLICATION_WINDOW_MS`](sluice_engine::DEDUPLICATION_WINDOW_MS) (also on disk, in the
//! transaction of the message they name, so they survive a restart) and the answers of recent
//! receives by `request_attempt_id` (memory only, like all receive bookkeeping).
//!
//! **Dead letters and redrive** (`ops/transfer.rs`): a move between two queues (after
//! `max_receive_count` receives, on a consumer's word, or a redrive) is one write applied in one
//! redb transaction, removing the message's rows from the source and writing them, under a new
//! seq, to the destination. It is submitted while both queues' indexes are locked (in a fixed
//! order), the indexes follow its outcome once committed, and it is durable before the call
//! answers; a failed commit leaves the message in its source. The `dead_letter` record is part
//! of the message's stored record. A queue's retry backoff only lengthens a delivery's hiding
//! (in memory, like all receive bookkeeping): receive counts, and so the count towards
//! `max_receive_count`, start from 0 again after a restart.
//!
//! **Topics** (`ops/publish.rs`): a publish call is one submission to the commit thread, so
//! one redb transaction: the copies for every delivery (each a new message of its queue, or of
//! its dead-letter queue when the queue is missing, full or too small) and the topic's state
//! (FIFO sequence number, deduplication records, subscription counters, in the `topic_*`
//! tables). A crash leaves the whole publication or none of it, so there is nothing to recover.
//! It is submitted under the topic's lock and every destination queue's (in the fixed order
//! moves use), which keeps a FIFO topic's copies in sequence-number order in every queue; as
//! for sends, copies become receivable and counters change only once the commit is durable.
//! Each topic's state is also kept in memory (`topic_entry.rs`), rebuilt at start-up.
//!
//! **Payloads** (`store.rs`, `ops/payload_events.rs`): a message whose body is in a payload
//! store keeps its reference in the `msg_payload` table, and the transaction that writes or
//! removes it for good also records the payload event in `payload_events` (moves carry it and
//! record nothing), so events are exactly what reached the disk.
//!
//! **Layout.** `lib.rs` holds [`EmbeddedEngine`] and its opening and implements the engine
//! traits by delegating to one module per operation under `ops/`. Shared by those: `catalog.rs`
//! (the in-memory maps of queues, tenants, tombstones and topics), `queue_entry.rs` (one queue
//! in memory), `topic_entry.rs` (one topic's state in memory), `due.rs` (the retention sweep's
//! index of queues and topics by when it next has work for them, kept up to date as each one's
//! lock is released), `delivery.rs` (reading messages back, checking handles), `open.rs` (rebuilding
//! memory from disk) and `ops/transfer.rs` (moving messages between two queues, for
//! `ops/receive.rs`, `ops/dead_letter.rs` and `ops/redrive.rs`). Below them: `index.rs` ->
//! `fifo.rs` -> `message.rs`, and `store.rs`.

mod catalog;
mod delivery;
mod due;
mod fifo;
mod index;
mod message;
mod open;
mod ops;
mod queue_entry;
mod secret;
mod store;
mod topic_entry;

use async_trait::async_trait;
use catalog::{QueueMap, TenantMap, TombstoneMap};
use queue_entry::QueueDue;
use sluice_engine::{
    DeadLetterRefusal, EngineError, HandleError, HandleKey, MessageState, Messages, Millis,
    NewMessage, PayloadEventBatch, Payloads, Publication, Published, Publishing, QueueConfig,
    QueueInfo, QueueKey, QueueListener, QueueName, Queues, Quotas, ReceiveOutcome, Record, Records,
    RedriveOutcome, SendRejection, SentMessage, SeqScan, StoredMessage, SubscriptionStats,
    TenantId, TenantRecord, Tenants, TopicKey, Transfers, Upkeep,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use store::Store;
use topic_entry::{TopicDue, TopicMap};

/// The file the engine keeps in its directory.
pub const DATABASE_FILE: &str = "sluice.redb";

/// How writes reach the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CommitMode {
    /// Concurrent writes share one transaction and one fsync (the default).
    #[default]
    Group,
    /// Every write request is its own transaction and fsync (for benchmarks and comparison).
    FsyncEachWrite,
}

/// How to open an [`EmbeddedEngine`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmbeddedOptions {
    /// Group commit or one commit per write.
    pub commit_mode: CommitMode,
}

/// The embedded storage engine. See the crate documentation for what its answers guarantee.
pub struct EmbeddedEngine {
    store: Store,
    /// Per tenant, ordered by name so listing needs no sort. Shared with commit callbacks.
    queues: Arc<RwLock<QueueMap>>,
    /// Every tenant record (small), so `ensure_tenant` on the hot path costs no I/O.
    tenants: Arc<RwLock<TenantMap>>,
    /// Tombstones of deleted tenants (small), read on every authenticated request.
    tombstones: Arc<RwLock<TombstoneMap>>,
    /// Topics with state (sequence numbers, deduplication records, counters). Looked up per
    /// publish and released before the topic's own lock is taken; deletions hold it across
    /// their submission (see `ops/topics.rs`).
    topics: Mutex<TopicMap>,
    /// The queues by when the retention sweep next has work for them (`due.rs`).
    queue_due: Arc<QueueDue>,
    /// The topics likewise (FIFO topics' deduplication records).
    topic_due: Arc<TopicDue>,
    /// Serialises catalog changes (queues, tenants) across their commit, so two creations of
    /// one name cannot both win. These are rare; message operations never take it.
    admin: tokio::sync::Mutex<()>,
    /// Authenticates receipt handles; kept in the file (`secret.rs`).
    handle_key: HandleKey,
}

impl std::fmt::Debug for EmbeddedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedEngine")
            .field("commits", &self.store.commits())
            .finish_non_exhaustive()
    }
}

impl EmbeddedEngine {
    /// Opens the engine stored in `dir` (created if missing), rebuilding the in-memory index
    /// from disk.
    pub fn open(dir: &Path, options: EmbeddedOptions) -> Result<Self, EngineError> {
        create_private_dir(dir).map_err(|e| {
            EngineError::Unavailable(format!("cannot create {}: {e}", dir.display()))
        })?;
        open::survive_file_size_limit();
        let path = dir.join(DATABASE_FILE);
        Self::open_with(
            Box::new(move || store::open_database(&path)),
            options,
            &dir.display().to_string(),
        )
    }

    /// Write transactions committed since this engine was opened (each is one fsync). With
    /// group commit, far fewer than the writes requested under concurrency.
    pub fn commit_count(&self) -> u64 {
        self.store.commits()
    }

    /// The key this engine's receipt handles are authenticated with, for tests and tools that
    /// take handles apart ([`ReceiptHandle::decode`](sluice_engine::ReceiptHandle::decode)).
    pub fn handle_key(&self) -> &HandleKey {
        &self.handle_key
    }
}

/// Creates `dir` and any missing parent readable by its owner only (mode 0700): the data folder
/// holds every tenant's messages and keys. An existing folder keeps the permissions its
/// operator gave it.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

// Each operation's body is in its own module under `ops/`; these impls only delegate to those
// inherent methods (which method resolution picks before the trait's).

#[async_trait]
impl Tenants for EmbeddedEngine {
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
impl Queues for EmbeddedEngine {
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
impl Messages for EmbeddedEngine {
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
impl Transfers for EmbeddedEngine {
    async fn dead_letter(
        &self,
        key: &QueueKey,
        handle: &str,
        reason: &str,
        now: Millis,
    ) -> Result<Result<(), DeadLetterRefusal>, EngineError> {
        self.dead_letter(key, handle, reason, now).await
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

    /// Nothing to recover, ever: this engine applies a move in one redb transaction (the
    /// source's rows removed and the destination's written in the same commit), so a crash at
    /// any point leaves the message wholly in one of the two queues, never half moved.
    async fn recover_transfers(&self, _now: Millis) -> Result<u64, EngineError> {
        Ok(0)
    }
}

#[async_trait]
impl Records for EmbeddedEngine {
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
impl Payloads for EmbeddedEngine {
    async fn payload_events(&self, limit: usize) -> Result<PayloadEventBatch, EngineError> {
        self.payload_events(limit).await
    }

    async fn ack_payload_events(&self, batch: &PayloadEventBatch) -> Result<(), EngineError> {
        self.ack_payload_events(batch).await
    }
}

#[async_trait]
impl Upkeep for EmbeddedEngine {
    async fn ping(&self) -> Result<(), EngineError> {
        // Not ready while writes fail: the commit thread records that and probes for recovery.
        self.store.health()
    }

    async fn expire(&self, now: Millis) -> Result<u64, EngineError> {
        self.expire(now).await
    }
}

#[async_trait]
impl Publishing for EmbeddedEngine {
    async fn publish(
        &self,
        topic: &TopicKey,
        publications: Vec<Publication>,
        now: Millis,
    ) -> Result<Vec<Published>, EngineError> {
        self.publish(topic, publications, now).await
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

    /// Nothing to recover, ever: a publish is one redb transaction (every copy and the topic's
    /// state in the same commit), so a crash leaves the whole publication or none of it.
    async fn recover_publications(&self, _now: Millis) -> Result<u64, EngineError> {
        Ok(0)
    }
}

#[cfg(test)]
mod failure_tests;
#[cfg(test)]
mod fifo_tests;
#[cfg(test)]
mod publish_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod transfer_tests;
