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
//!   and [`Engine::ping`] reports the engine unavailable until then.
//!
//! What a successful answer means: `send`, `delete`, `purge`, `expire`, queue and tenant changes
//! are on disk (fsynced) before they answer. A message is never delivered before its send is
//! durable. Receive bookkeeping (visibility, receive counts, delivery numbers) lives in memory
//! only: after a restart every stored message is visible again at its sent `visible_at` with a
//! receive count of 0, and handles issued before the restart are stale.
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

mod fifo;
mod index;
mod message;
mod secret;
mod store;

use async_trait::async_trait;
use fifo::{DedupEntry, DedupKey};
use index::{Accepted, Admission, Pick, QueueState};
use message::Picked;
use sluice_engine::{
    DeduplicationScope, EngineError, HandleError, HandleKey, MessageState, Messages, Millis,
    NewMessage, QueueConfig, QueueInfo, QueueKey, QueueListener, QueueName, Queues, Quotas,
    ReceiptHandle, ReceiveOutcome, ReceivedMessage, SendRejection, SentMessage, StoredMessage,
    TenantId, TenantRecord, Tenants, Upkeep,
};
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use store::{
    encode, BodyRecord, DedupRecord, EncodedMessage, MetaRecord, QueueRecord, Store, WriteOp,
};

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

/// One queue incarnation in memory: identity that never changes, state behind a mutex.
struct QueueEntry {
    uid: u64,
    created_at: Millis,
    state: Mutex<QueueState>,
    /// Numbers this queue's deliveries (taken under the state lock, so in delivery order).
    /// Starts at a random value on every open, so a handle issued before a restart never
    /// matches a delivery made after it; per queue, so it counts nobody else's traffic.
    deliveries: AtomicU64,
}

impl QueueEntry {
    fn new(uid: u64, created_at: Millis, state: QueueState) -> Self {
        Self {
            uid,
            created_at,
            state: Mutex::new(state),
            deliveries: AtomicU64::new(rand::random()),
        }
    }

    fn next_delivery(&self) -> u64 {
        self.deliveries.fetch_add(1, Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A panic under this lock leaves at worst a stale index entry, never a broken store:
        // carry on rather than fail every later request on the queue.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, unless the queue was deleted after it was looked up.
    fn live(&self) -> Result<MutexGuard<'_, QueueState>, EngineError> {
        let state = self.lock();
        if state.deleted {
            return Err(EngineError::QueueNotFound);
        }
        Ok(state)
    }

    fn info(&self, key: &QueueKey, state: &QueueState, now: Millis) -> QueueInfo {
        QueueInfo {
            tenant: key.tenant.clone(),
            name: key.name.clone(),
            config: state.config.clone(),
            created_at: self.created_at,
            updated_at: state.updated_at,
            stats: state.stats(now),
        }
    }
}

type QueueMap = BTreeMap<TenantId, BTreeMap<QueueName, Arc<QueueEntry>>>;
type TenantMap = BTreeMap<TenantId, TenantRecord>;
/// Per deleted tenant, when its last deletion happened.
type TombstoneMap = HashMap<TenantId, Millis>;

/// Refuses a token issued at or before the tenant's last deletion (or with no issue time).
fn check_tombstone(
    tombstones: &TombstoneMap,
    id: &TenantId,
    issued_at: Option<Millis>,
) -> Result<(), EngineError> {
    match tombstones.get(id) {
        Some(&deleted_at) if issued_at.is_none_or(|at| at <= deleted_at) => {
            Err(EngineError::TenantDeleted { deleted_at })
        }
        _ => Ok(()),
    }
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

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

fn seconds(s: u32) -> Millis {
    Millis::from(s) * 1000
}

fn message_size(m: &NewMessage) -> u64 {
    let attributes: usize = m
        .attributes
        .iter()
        .map(|(name, a)| name.len() + a.data_type.len() + a.value.len())
        .sum();
    (m.body.len() + attributes) as u64
}

/// What deduplicates a FIFO message under `scope`; `None` when it has no deduplication id.
fn dedup_key(scope: DeduplicationScope, m: &NewMessage) -> Option<DedupKey> {
    let id = m.deduplication_id.clone()?;
    let group = match scope {
        DeduplicationScope::Queue => String::new(),
        DeduplicationScope::MessageGroup => m.group_id.clone().unwrap_or_default(),
    };
    Some(DedupKey { group, id })
}

impl EmbeddedEngine {
    /// Opens the engine stored in `dir` (created if missing), rebuilding the in-memory index
    /// from disk.
    pub fn open(dir: &Path, options: EmbeddedOptions) -> Result<Self, EngineError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            EngineError::Unavailable(format!("cannot create {}: {e}", dir.display()))
        })?;
        survive_file_size_limit();
        let path = dir.join(DATABASE_FILE);
        Self::open_with(
            Box::new(move || store::open_database(&path)),
            options,
            &dir.display().to_string(),
        )
    }

    /// Opens the engine on what `open` opens (again after a failed write); `label` names it in
    /// logs.
    fn open_with(
        open: store::Opener,
        options: EmbeddedOptions,
        label: &str,
    ) -> Result<Self, EngineError> {
        let db = open()?;
        let handle_key = secret::handle_key(&db)?;
        let catalog = store::read_catalog(&db)?;

        let mut by_uid: HashMap<u64, (QueueKey, Millis, QueueState)> = HashMap::new();
        for (key, record, next_seq) in catalog.queues {
            let key = parse_queue_key(&key)?;
            let fifo = key.name.is_fifo();
            let state = QueueState::new(record.config, record.updated_at, next_seq, fifo);
            by_uid.insert(record.uid, (key, record.created_at, state));
        }
        let mut messages = 0u64;
        store::scan_messages(&db, |uid, seq, bytes| match by_uid.get_mut(&uid) {
            Some((_, _, state)) => {
                if state.is_fifo() {
                    // FIFO queues index the group too (the whole record is decoded).
                    let meta = store::meta_record(bytes)?;
                    state.load(seq, meta.sent_at, meta.visible_at, meta.group_id.as_deref());
                } else {
                    let times = store::meta_times(bytes)?;
                    state.load(seq, times.sent_at, times.visible_at, None);
                }
                messages += 1;
                Ok(true)
            }
            None => Ok(false),
        })?;
        let mut dedup: HashMap<u64, Vec<(DedupKey, DedupEntry)>> = HashMap::new();
        store::scan_dedup(&db, |uid, key, entry| {
            let live = by_uid.contains_key(&uid);
            if live {
                dedup.entry(uid).or_default().push((key, entry));
            }
            live
        })?;
        for (uid, records) in dedup {
            if let Some((_, _, state)) = by_uid.get_mut(&uid) {
                state.load_dedup(records);
            }
        }

        let mut queues = QueueMap::new();
        for (uid, (key, created_at, state)) in by_uid {
            let entry = Arc::new(QueueEntry::new(uid, created_at, state));
            queues
                .entry(key.tenant)
                .or_default()
                .insert(key.name, entry);
        }
        let tenants = catalog
            .tenants
            .into_iter()
            .map(|t| (t.id.clone(), t))
            .collect();
        let mut tombstones = TombstoneMap::new();
        for (id, deleted_at) in catalog.tombstones {
            let id = TenantId::parse(&id)
                .map_err(|_| EngineError::Internal(format!("corrupt tenant tombstone {id:?}")))?;
            tombstones.insert(id, deleted_at);
        }
        tracing::info!(
            dir = label,
            queues = queues.values().map(BTreeMap::len).sum::<usize>(),
            messages,
            "embedded engine opened"
        );
        Ok(Self {
            store: Store::start(db, options.commit_mode, open)?,
            queues: Arc::new(RwLock::new(queues)),
            tenants: Arc::new(RwLock::new(tenants)),
            tombstones: Arc::new(RwLock::new(tombstones)),
            admin: tokio::sync::Mutex::new(()),
            handle_key,
        })
    }

    /// Write transactions committed since this engine was opened (each is one fsync). With
    /// group commit, far fewer than the writes requested under concurrency.
    pub fn commit_count(&self) -> u64 {
        self.store.commits()
    }

    fn queue(&self, key: &QueueKey) -> Result<Arc<QueueEntry>, EngineError> {
        read(&self.queues)
            .get(&key.tenant)
            .and_then(|names| names.get(&key.name))
            .cloned()
            .ok_or(EngineError::QueueNotFound)
    }

    /// The key this engine's receipt handles are authenticated with, for tests and tools that
    /// take handles apart ([`ReceiptHandle::decode`]).
    pub fn handle_key(&self) -> &HandleKey {
        &self.handle_key
    }

    /// Reads the stored parts of picked messages; drops any deleted since they were picked.
    fn load_messages(
        &self,
        uid: u64,
        picked: &[Picked],
    ) -> Result<Vec<(Picked, StoredMessage)>, EngineError> {
        let seqs: Vec<u64> = picked.iter().map(|p| p.seq).collect();
        let records = self.store.read_messages(uid, &seqs)?;
        Ok(picked
            .iter()
            .zip(records)
            .filter_map(|(p, record)| {
                let (meta, body): (MetaRecord, BodyRecord) = record?;
                let message = StoredMessage {
                    message_id: meta.message_id,
                    body: body.body,
                    attributes: body.attributes,
                    sent_at: meta.sent_at,
                    receive_count: p.state.receive_count,
                    first_received_at: p.state.first_received_at(),
                    group_id: meta.group_id,
                    deduplication_id: meta.deduplication_id,
                    seq: p.seq,
                };
                Some((*p, message))
            })
            .collect())
    }

    /// Closes the given queues (no more writes are submitted for them) and answers the
    /// operations that delete them on disk.
    fn close_queues<'a>(
        entries: impl IntoIterator<Item = (String, &'a Arc<QueueEntry>)>,
    ) -> Vec<WriteOp> {
        entries
            .into_iter()
            .map(|(key, entry)| {
                // Every insert for this queue was submitted under its lock before `close`, so
                // the delete submitted after it lands after them and leaves nothing behind.
                entry.lock().close();
                WriteOp::DeleteQueue {
                    key,
                    uid: entry.uid,
                }
            })
            .collect()
    }

    async fn write_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        let op = WriteOp::PutTenant {
            id: record.id.as_str().to_owned(),
            record: encode(&record)?,
        };
        let tenants = Arc::clone(&self.tenants);
        self.store
            .submit_then(vec![op], move |committed| {
                if committed.is_ok() {
                    write(&tenants).insert(record.id.clone(), record);
                }
            })
            .wait()
            .await
    }
}

/// Writing past a file-size limit (`RLIMIT_FSIZE`) raises SIGXFSZ, whose default action ends
/// the process. With a handler registered (it stays for the life of the process) the write
/// fails with `EFBIG` instead, which the commit thread answers with 503s and recovers from once
/// the limit allows writes again. Needs a tokio runtime; without one the default stays.
fn survive_file_size_limit() {
    #[cfg(unix)]
    if tokio::runtime::Handle::try_current().is_ok() {
        let kind = tokio::signal::unix::SignalKind::from_raw(libc::SIGXFSZ);
        if let Err(e) = tokio::signal::unix::signal(kind) {
            tracing::warn!(error = %e, "cannot catch SIGXFSZ: a file-size limit will end the process");
        }
    }
}

/// The answers of a send, in order, from what was admitted.
fn answer_sends(
    admissions: Vec<Admission>,
    messages: Vec<NewMessage>,
) -> Vec<Result<SentMessage, SendRejection>> {
    admissions
        .into_iter()
        .zip(messages)
        .map(|(admission, m)| match admission {
            Admission::New(seq) => Ok(SentMessage {
                message_id: m.message_id,
                seq,
                duplicate: false,
            }),
            Admission::Duplicate {
                seq, message_id, ..
            } => Ok(SentMessage {
                message_id,
                seq,
                duplicate: true,
            }),
            Admission::Full => Err(SendRejection::QueueFull),
        })
        .collect()
}

fn parse_queue_key(text: &str) -> Result<QueueKey, EngineError> {
    let corrupt = || EngineError::Internal(format!("corrupt queue key {text:?}"));
    let (tenant, name) = text.split_once('/').ok_or_else(corrupt)?;
    Ok(QueueKey::new(
        TenantId::parse(tenant).map_err(|_| corrupt())?,
        QueueName::parse(name).map_err(|_| corrupt())?,
    ))
}

/// Decodes a handle, checks its tag and that it was issued by this queue incarnation.
fn own_handle(text: &str, key: &HandleKey, uid: u64) -> Result<ReceiptHandle, HandleError> {
    match ReceiptHandle::decode(text, key) {
        Some(h) if h.queue_uid == uid => Ok(h),
        _ => Err(HandleError::Invalid),
    }
}

#[async_trait]
impl Tenants for EmbeddedEngine {
    async fn ensure_tenant(
        &self,
        id: &TenantId,
        issued_at: Option<Millis>,
        now: Millis,
    ) -> Result<Quotas, EngineError> {
        check_tombstone(&read(&self.tombstones), id, issued_at)?;
        if let Some(record) = read(&self.tenants).get(id) {
            return Ok(record.quotas.clone());
        }
        let _admin = self.admin.lock().await;
        // A deletion may have committed while this call waited for the lock.
        check_tombstone(&read(&self.tombstones), id, issued_at)?;
        if let Some(record) = read(&self.tenants).get(id) {
            return Ok(record.quotas.clone());
        }
        self.write_tenant(TenantRecord {
            id: id.clone(),
            quotas: Quotas::default(),
            created_at: now,
        })
        .await?;
        Ok(Quotas::default())
    }

    async fn create_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        let _admin = self.admin.lock().await;
        if read(&self.tenants).contains_key(&record.id) {
            return Err(EngineError::AlreadyExists(format!("tenant {}", record.id)));
        }
        self.write_tenant(record).await
    }

    async fn update_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        let _admin = self.admin.lock().await;
        if !read(&self.tenants).contains_key(&record.id) {
            return Err(EngineError::TenantNotFound);
        }
        self.write_tenant(record).await
    }

    async fn get_tenant(&self, id: &TenantId) -> Result<Option<TenantRecord>, EngineError> {
        Ok(read(&self.tenants).get(id).cloned())
    }

    async fn list_tenants(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> Result<Vec<TenantRecord>, EngineError> {
        let tenants = read(&self.tenants);
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(tenants
            .range((start, Bound::Unbounded))
            .take(limit)
            .map(|(_, t)| t.clone())
            .collect())
    }

    async fn delete_tenant(&self, id: &TenantId, now: Millis) -> Result<bool, EngineError> {
        // Under the catalog lock, which put_queue holds from its quota check to its commit:
        // a creation either committed before (and its queue is closed here) or runs after
        // (and meets the tombstone).
        let _admin = self.admin.lock().await;
        let existed = read(&self.tenants).contains_key(id);
        // Its queues go even if the record does not exist (queues may be created for a tenant
        // nobody registered); the answer is about the tenant.
        let queues = write(&self.queues).remove(id).unwrap_or_default();
        let mut ops = Self::close_queues(
            queues
                .iter()
                .map(|(name, entry)| (format!("{id}/{name}"), entry)),
        );
        if !existed && ops.is_empty() {
            return Ok(false);
        }
        // Never moves back, should the clock.
        let deleted_at = read(&self.tombstones).get(id).map_or(now, |&t| t.max(now));
        ops.push(WriteOp::DeleteTenant {
            id: id.as_str().to_owned(),
            deleted_at,
        });
        let (tenants, tombstones) = (Arc::clone(&self.tenants), Arc::clone(&self.tombstones));
        let id = id.clone();
        self.store
            .submit_then(ops, move |committed| {
                if committed.is_ok() {
                    write(&tenants).remove(&id);
                    write(&tombstones).insert(id, deleted_at);
                }
            })
            .wait()
            .await?;
        Ok(existed)
    }

    async fn tenant_deleted_at(&self, id: &TenantId) -> Result<Option<Millis>, EngineError> {
        Ok(read(&self.tombstones).get(id).copied())
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
        // The catalog lock makes the quota check and the creation one step: every creation
        // and deletion of a queue or tenant runs under it and commits before releasing it.
        let _admin = self.admin.lock().await;
        let existing = self.queue(key).ok();
        if existing.is_none() {
            let tenant = read(&self.tenants).get(&key.tenant).cloned();
            match tenant {
                // Deleted and not named since: it owns nothing any more.
                None => {
                    if let Some(&deleted_at) = read(&self.tombstones).get(&key.tenant) {
                        return Err(EngineError::TenantDeleted { deleted_at });
                    }
                }
                Some(record) => {
                    if let Some(max_queues) = record.quotas.max_queues {
                        if self.count_queues(&key.tenant).await? >= max_queues {
                            return Err(EngineError::QuotaExceeded {
                                tenant: key.tenant.to_string(),
                                max_queues,
                            });
                        }
                    }
                }
            }
        }
        let (uid, created_at) = match &existing {
            Some(entry) => (entry.uid, entry.created_at),
            // Zero is never used, so no handle with an all-zero prefix can ever be valid.
            None => (rand::random::<u64>().max(1), now),
        };
        let record = QueueRecord {
            uid,
            config: config.clone(),
            created_at,
            updated_at: now,
        };
        let op = WriteOp::PutQueue {
            key: key.to_string(),
            record: encode(&record)?,
        };
        let created = existing.is_none();
        let entry = match existing {
            Some(entry) => {
                let target = Arc::clone(&entry);
                let pending = self.store.submit_then(vec![op], move |committed| {
                    if committed.is_ok() {
                        let mut state = target.lock();
                        state.set_config(config);
                        state.updated_at = now;
                    }
                });
                pending.wait().await?;
                entry
            }
            None => {
                let entry = Arc::new(QueueEntry::new(
                    uid,
                    created_at,
                    QueueState::new(config, now, 1, key.name.is_fifo()),
                ));
                let (queues, target, key) =
                    (Arc::clone(&self.queues), Arc::clone(&entry), key.clone());
                let pending = self.store.submit_then(vec![op], move |committed| {
                    if committed.is_ok() {
                        write(&queues)
                            .entry(key.tenant)
                            .or_default()
                            .insert(key.name, target);
                    }
                });
                pending.wait().await?;
                entry
            }
        };
        let info = entry.info(key, &entry.lock(), now);
        Ok((info, created))
    }

    async fn get_queue(
        &self,
        key: &QueueKey,
        now: Millis,
    ) -> Result<Option<QueueInfo>, EngineError> {
        Ok(self.queue(key).ok().and_then(|entry| {
            let state = entry.live().ok()?;
            Some(entry.info(key, &state, now))
        }))
    }

    async fn queue_config(&self, key: &QueueKey) -> Result<Option<QueueConfig>, EngineError> {
        // The send and receive paths ask this on every call: no stats, just the config.
        Ok(self
            .queue(key)
            .ok()
            .and_then(|entry| Some(entry.live().ok()?.config.clone())))
    }

    async fn list_queues(
        &self,
        tenant: &TenantId,
        prefix: &str,
        after: Option<&QueueName>,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<QueueInfo>, EngineError> {
        let entries: Vec<(QueueName, Arc<QueueEntry>)> = {
            let queues = read(&self.queues);
            let Some(names) = queues.get(tenant) else {
                return Ok(Vec::new());
            };
            let start = after.map_or(Bound::Unbounded, Bound::Excluded);
            names
                .range((start, Bound::Unbounded))
                .skip_while(|(name, _)| name.as_str() < prefix)
                .take_while(|(name, _)| name.as_str().starts_with(prefix))
                .take(limit)
                .map(|(name, entry)| (name.clone(), Arc::clone(entry)))
                .collect()
        };
        // Stats are computed outside the map lock: they walk each queue's index.
        Ok(entries
            .into_iter()
            .filter_map(|(name, entry)| {
                let state = entry.live().ok()?;
                let key = QueueKey::new(tenant.clone(), name);
                Some(entry.info(&key, &state, now))
            })
            .collect())
    }

    async fn count_queues(&self, tenant: &TenantId) -> Result<u64, EngineError> {
        Ok(read(&self.queues).get(tenant).map_or(0, |n| n.len() as u64))
    }

    async fn delete_queue(&self, key: &QueueKey) -> Result<bool, EngineError> {
        let _admin = self.admin.lock().await;
        let entry = {
            let mut queues = write(&self.queues);
            let Some(names) = queues.get_mut(&key.tenant) else {
                return Ok(false);
            };
            let Some(entry) = names.remove(&key.name) else {
                return Ok(false);
            };
            if names.is_empty() {
                queues.remove(&key.tenant);
            }
            entry
        };
        let ops = Self::close_queues([(key.to_string(), &entry)]);
        self.store.submit(ops).wait().await?;
        Ok(true)
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
        let entry = self.queue(key)?;
        let fifo = key.name.is_fifo();
        // Encode before taking the lock: the seq is part of the key, not of the records.
        let mut encoded = Vec::with_capacity(messages.len());
        for m in &messages {
            let meta = encode(&MetaRecord {
                sent_at: now,
                visible_at: m.visible_at,
                size: message_size(m),
                message_id: m.message_id.clone(),
                group_id: m.group_id.clone(),
                deduplication_id: m.deduplication_id.clone().filter(|_| fifo),
            })?;
            let body = encode(&BodyRecord {
                body: m.body.clone(),
                attributes: m.attributes.clone(),
            })?;
            encoded.push((meta, body));
        }

        let (admissions, keys, pending) = {
            let mut state = entry.live()?;
            let keys: Vec<Option<DedupKey>> = messages
                .iter()
                .map(|m| dedup_key(state.config.deduplication_scope, m).filter(|_| fifo))
                .collect();
            let admissions = state.admit(
                keys.iter()
                    .cloned()
                    .zip(messages.iter().map(|m| m.message_id.as_str())),
                now,
            );
            let forget = state.prune_fifo(now);
            let mut to_write = Vec::new();
            let mut records = Vec::new();
            let mut accepted = Vec::new();
            for (((admission, (meta, body)), m), key) in
                admissions.iter().zip(encoded).zip(&messages).zip(&keys)
            {
                let Admission::New(seq) = *admission else {
                    continue;
                };
                to_write.push(EncodedMessage { seq, meta, body });
                if let Some(key) = key {
                    records.push(DedupRecord {
                        key: key.clone(),
                        accepted_at: now,
                        seq,
                        message_id: m.message_id.clone(),
                    });
                }
                accepted.push(Accepted {
                    seq,
                    sent_at: now,
                    visible_at: m.visible_at,
                    group: fifo.then(|| m.group_id.clone().unwrap_or_default()),
                    dedup: key.clone(),
                });
            }
            // A duplicate of a send still committing answers once that send is durable: a
            // submission made now commits with it or after it.
            let awaits_original = admissions.iter().any(|a| {
                matches!(
                    a,
                    Admission::Duplicate {
                        committed: false,
                        ..
                    }
                )
            });
            if to_write.is_empty() && !awaits_original {
                if !forget.is_empty() {
                    self.store.submit_detached(vec![WriteOp::Forget {
                        uid: entry.uid,
                        keys: forget,
                    }]);
                }
                return Ok(answer_sends(admissions, messages));
            }
            let ops = if !to_write.is_empty() {
                vec![WriteOp::Insert {
                    uid: entry.uid,
                    next_seq: state.next_seq(),
                    messages: to_write,
                    dedup: records,
                    forget,
                }]
            } else if !forget.is_empty() {
                vec![WriteOp::Forget {
                    uid: entry.uid,
                    keys: forget,
                }]
            } else {
                Vec::new()
            };
            let target = Arc::clone(&entry);
            // Submitted under the queue lock, so the store applies it before any later purge or
            // deletion of this queue.
            let pending = self.store.submit_then(ops, move |committed| {
                if accepted.is_empty() {
                    return;
                }
                let mut state = target.lock();
                if committed.is_ok() && !state.deleted {
                    // Only now, durable, do the messages become receivable.
                    state.commit_sent(&accepted);
                } else {
                    state.abandon_sent(&accepted);
                }
            });
            (admissions, keys, pending)
        };
        pending.wait().await?;
        {
            let state = entry.lock();
            if state.deleted {
                return Err(EngineError::QueueNotFound);
            }
            for (admission, key) in admissions.iter().zip(&keys) {
                let awaited = match admission {
                    Admission::Duplicate {
                        seq,
                        committed: false,
                        ..
                    } => Some(*seq),
                    _ => None,
                };
                if let (Some(seq), Some(key)) = (awaited, key) {
                    if !state.dedup_confirmed(key, seq) {
                        return Err(EngineError::Unavailable(
                            "the send this message duplicates was not stored; retry".into(),
                        ));
                    }
                }
            }
        }
        Ok(answer_sends(admissions, messages))
    }

    async fn receive(
        &self,
        key: &QueueKey,
        max_messages: usize,
        visibility_timeout_seconds: u32,
        request_attempt_id: Option<&str>,
        now: Millis,
    ) -> Result<ReceiveOutcome, EngineError> {
        let entry = self.queue(key)?;
        let attempt_id = request_attempt_id.filter(|_| key.name.is_fifo());
        let pick = {
            let mut state = entry.live()?;
            match attempt_id.and_then(|id| state.replay(id, now)) {
                // A retried attempt: the same deliveries, changing nothing.
                Some(attempt) => Pick {
                    delivered: attempt.delivered,
                    expired: Vec::new(),
                    next_visible_at: attempt.next_visible_at,
                },
                None => {
                    let pick = state.receive(
                        max_messages,
                        seconds(visibility_timeout_seconds),
                        now,
                        || entry.next_delivery(),
                    );
                    if let Some(id) = attempt_id {
                        state.remember(id, now, &pick);
                    }
                    if !pick.expired.is_empty() {
                        // Already gone from the index; if this delete is lost in a crash the
                        // next start-up re-indexes them and a later sweep deletes them again.
                        self.store.submit_detached(vec![WriteOp::Delete {
                            uid: entry.uid,
                            seqs: pick.expired.clone(),
                        }]);
                    }
                    pick
                }
            }
        };
        let messages = self
            .load_messages(entry.uid, &pick.delivered)?
            .into_iter()
            .map(|(p, message)| ReceivedMessage {
                message,
                receipt_handle: ReceiptHandle {
                    queue_uid: entry.uid,
                    seq: p.seq,
                    delivery: p.state.delivery,
                }
                .encode(&self.handle_key),
            })
            .collect();
        Ok(ReceiveOutcome {
            messages,
            next_visible_at: pick.next_visible_at,
        })
    }

    async fn delete(
        &self,
        key: &QueueKey,
        handles: &[String],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        let entry = self.queue(key)?;
        let (answers, pending) = {
            let mut state = entry.live()?;
            let mut removed = Vec::new();
            let answers: Vec<Result<(), HandleError>> = handles
                .iter()
                .map(|text| {
                    let handle = own_handle(text, &self.handle_key, entry.uid)?;
                    if state.delete(&handle, now)? {
                        removed.push(handle.seq);
                    }
                    Ok(())
                })
                .collect();
            let pending = if !removed.is_empty() {
                Some(self.store.submit(vec![WriteOp::Delete {
                    uid: entry.uid,
                    seqs: removed,
                }]))
            } else if self.store.is_degraded() {
                // A retry of a delete whose commit failed finds the message gone from the index
                // while its removal is still carried: answer once a commit has written it.
                Some(self.store.submit(Vec::new()))
            } else {
                None
            };
            (answers, pending)
        };
        if let Some(pending) = pending {
            pending.wait().await?;
        }
        Ok(answers)
    }

    async fn change_visibility(
        &self,
        key: &QueueKey,
        entries: &[(String, u32)],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        let entry = self.queue(key)?;
        let mut state = entry.live()?;
        Ok(entries
            .iter()
            .map(|(text, timeout)| {
                let handle = own_handle(text, &self.handle_key, entry.uid)?;
                state.change_visibility(&handle, seconds(*timeout), now)
            })
            .collect())
    }

    async fn peek(
        &self,
        key: &QueueKey,
        state: MessageState,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<StoredMessage>, EngineError> {
        let entry = self.queue(key)?;
        let picked = entry.live()?.peek(state, limit, now);
        Ok(self
            .load_messages(entry.uid, &picked)?
            .into_iter()
            .map(|(_, m)| m)
            .collect())
    }

    async fn purge(&self, key: &QueueKey) -> Result<(), EngineError> {
        let entry = self.queue(key)?;
        let pending = {
            let mut state = entry.live()?;
            let below = state.purge();
            self.store.submit(vec![WriteOp::Purge {
                uid: entry.uid,
                below,
            }])
        };
        pending.wait().await
    }

    async fn listen(&self, key: &QueueKey) -> Result<QueueListener, EngineError> {
        let entry = self.queue(key)?;
        let rx = entry.live()?.subscribe();
        rx.map(QueueListener::new).ok_or(EngineError::QueueNotFound)
    }
}

#[async_trait]
impl Upkeep for EmbeddedEngine {
    async fn ping(&self) -> Result<(), EngineError> {
        // Not ready while writes fail: the commit thread records that and probes for recovery.
        self.store.health()
    }

    async fn expire(&self, now: Millis) -> Result<u64, EngineError> {
        let entries: Vec<Arc<QueueEntry>> = read(&self.queues)
            .values()
            .flat_map(BTreeMap::values)
            .cloned()
            .collect();
        let mut count = 0;
        let mut pending = Vec::new();
        for entry in entries {
            let mut state = entry.lock();
            if state.deleted {
                continue;
            }
            let seqs = state.take_expired(now);
            let forget = state.prune_fifo(now);
            let mut ops = Vec::new();
            if !seqs.is_empty() {
                count += seqs.len() as u64;
                ops.push(WriteOp::Delete {
                    uid: entry.uid,
                    seqs,
                });
            }
            if !forget.is_empty() {
                ops.push(WriteOp::Forget {
                    uid: entry.uid,
                    keys: forget,
                });
            }
            if !ops.is_empty() {
                pending.push(self.store.submit(ops));
            }
        }
        for p in pending {
            p.wait().await?;
        }
        Ok(count)
    }
}

#[cfg(test)]
mod failure_tests;
#[cfg(test)]
mod fifo_tests;
#[cfg(test)]
mod tests;
