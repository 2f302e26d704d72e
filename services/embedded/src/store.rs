//! The durable half of the engine: the redb tables and the records stored in them, the start-up
//! scan that rebuilds the in-memory index, the reads of message bodies, and the one OS thread
//! that owns every write (group commit).
//!
//! Layout (all values are postcard):
//!
//! | table       | key                  | value                                          |
//! |-------------|----------------------|------------------------------------------------|
//! | `meta`      | `&str`               | `u64` (the format version)                     |
//! | `tenants`   | tenant id            | [`TenantRecord`]                               |
//! | `tenant_tombstones` | tenant id    | `u64`: when the tenant was last deleted (ms)   |
//! | `queues`    | `"tenant/name"`      | [`QueueRecord`]                                |
//! | `queue_seq` | queue uid            | next sequence number to hand out               |
//! | `msg_meta`  | `(uid, seq)`         | [`MetaRecord`] (small: scanned at start-up)    |
//! | `msg_body`  | `(uid, seq)`         | [`BodyRecord`] (large: read only on delivery)  |
//! | `dedup`     | `(uid, group, id)`   | `(accepted_at, seq, message_id)`               |
//! | `secrets`   | `&str`               | raw bytes: the receipt-handle key (`secret.rs`) |
//!
//! Messages are keyed by the queue's `uid`, not its name, so deleting and re-creating a name
//! never mixes the two incarnations' messages, and a whole queue is one contiguous key range.
//! `dedup` holds the FIFO deduplication records (`group` is empty for the queue scope), written
//! in the transaction that stores the message and deleted once their window is over.
//!
//! Format history: 1 had no FIFO fields; 2 added `QueueConfig::content_based_deduplication`
//! and `deduplication_scope`, `MetaRecord::deduplication_id` and the `dedup` table. A format-1
//! file is migrated when opened.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};
use sluice_engine::{
    DeduplicationScope, EngineError, MessageAttribute, Millis, QueueConfig, TenantRecord,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::sync::oneshot;

use crate::fifo::{DedupEntry, DedupKey};
use crate::CommitMode;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const TENANTS: TableDefinition<&str, &[u8]> = TableDefinition::new("tenants");
/// A new table needs no format bump: it is created when missing and older builds ignore it.
const TOMBSTONES: TableDefinition<&str, u64> = TableDefinition::new("tenant_tombstones");
const QUEUES: TableDefinition<&str, &[u8]> = TableDefinition::new("queues");
const QUEUE_SEQ: TableDefinition<u64, u64> = TableDefinition::new("queue_seq");
const MSG_META: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("msg_meta");
const MSG_BODY: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("msg_body");
const DEDUP: TableDefinition<(u64, &str, &str), (u64, u64, &str)> = TableDefinition::new("dedup");

/// postcard is not self-describing: any change to a record's fields must bump this, and a file
/// written in another format is refused rather than misread.
const FORMAT_VERSION: u64 = 2;
const FORMAT_KEY: &str = "format";

/// Most operations one group commit applies; bounds the latency of the first waiter in a burst.
const MAX_BATCH_OPS: usize = 4096;

/// redb's page cache. Bodies are read about once (on delivery, shortly after they were written),
/// so a modest cache serves the hot tail; the default (1 GiB) would dwarf the index itself.
const CACHE_BYTES: usize = 128 * 1024 * 1024;

/// A queue as stored: everything about it except its messages and receive bookkeeping.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct QueueRecord {
    /// Random per creation of the name, so handles and message keys of a deleted queue can
    /// never address its successor.
    pub uid: u64,
    pub config: QueueConfig,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// The part of a message scanned at start-up. `sent_at` and `visible_at` come first so the scan
/// decodes them as a prefix ([`MetaTimes`]) without allocating the strings behind them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MetaRecord {
    pub sent_at: Millis,
    /// As sent (the delay); receive bookkeeping is never persisted.
    pub visible_at: Millis,
    /// Body plus attributes, in bytes.
    pub size: u64,
    pub message_id: String,
    pub group_id: Option<String>,
    /// FIFO queues: the deduplication id it was sent with.
    pub deduplication_id: Option<String>,
}

/// The leading fields of [`MetaRecord`], in the same order (postcard encodes fields back to back).
#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) struct MetaTimes {
    pub sent_at: Millis,
    pub visible_at: Millis,
}

/// What only a delivery or a peek needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BodyRecord {
    pub body: String,
    pub attributes: BTreeMap<String, MessageAttribute>,
}

/// A FIFO deduplication record to write, in the transaction of the message it names.
#[derive(Debug)]
pub(crate) struct DedupRecord {
    pub key: DedupKey,
    pub accepted_at: Millis,
    pub seq: u64,
    pub message_id: String,
}

/// One message ready to be written: its key within the queue and its two encoded records.
#[derive(Debug)]
pub(crate) struct EncodedMessage {
    pub seq: u64,
    pub meta: Vec<u8>,
    pub body: Vec<u8>,
}

/// A change to the store. The operations of one submission are applied in one transaction.
#[derive(Debug)]
pub(crate) enum WriteOp {
    PutTenant {
        id: String,
        record: Vec<u8>,
    },
    /// The record goes; the tombstone (kept forever: a few bytes per deleted tenant) records
    /// when, so tokens issued before stay refused.
    DeleteTenant {
        id: String,
        deleted_at: Millis,
    },
    PutQueue {
        key: String,
        record: Vec<u8>,
    },
    /// The queue record and every message and deduplication record of the incarnation `uid`.
    DeleteQueue {
        key: String,
        uid: u64,
    },
    /// Messages of queue `uid`; `next_seq` is recorded so sequence numbers never go back, even
    /// after every message has been deleted and the engine restarted. With them, the FIFO
    /// deduplication records `forget` (whose window is over; deleted first) and `dedup`.
    Insert {
        uid: u64,
        next_seq: u64,
        messages: Vec<EncodedMessage>,
        dedup: Vec<DedupRecord>,
        forget: Vec<DedupKey>,
    },
    /// FIFO deduplication records of queue `uid` whose window is over.
    Forget {
        uid: u64,
        keys: Vec<DedupKey>,
    },
    Delete {
        uid: u64,
        seqs: Vec<u64>,
    },
    /// Every message of queue `uid` whose seq is below `below` (later sends survive a purge).
    Purge {
        uid: u64,
        below: u64,
    },
}

/// What the start-up scan found besides messages.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    pub tenants: Vec<TenantRecord>,
    /// `(tenant id, when last deleted)`.
    pub tombstones: Vec<(String, Millis)>,
    /// `("tenant/name", record, recorded next seq)`.
    pub queues: Vec<(String, QueueRecord, u64)>,
}

pub(crate) fn internal(e: impl Display) -> EngineError {
    EngineError::Internal(e.to_string())
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, EngineError> {
    postcard::to_stdvec(value).map_err(internal)
}

fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8], what: &str) -> Result<T, EngineError> {
    postcard::from_bytes(bytes).map_err(|e| EngineError::Internal(format!("corrupt {what}: {e}")))
}

/// Opens (or creates) the database file and makes sure every table exists, so read
/// transactions never meet a missing table.
pub(crate) fn open_database(path: &Path) -> Result<Database, EngineError> {
    let db = redb::Builder::new()
        .set_cache_size(CACHE_BYTES)
        .create(path)
        .map_err(|e| EngineError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    let txn = db.begin_write().map_err(internal)?;
    {
        let mut meta = txn.open_table(META).map_err(internal)?;
        let found = meta.get(FORMAT_KEY).map_err(internal)?.map(|v| v.value());
        match found {
            None => {
                meta.insert(FORMAT_KEY, FORMAT_VERSION).map_err(internal)?;
            }
            Some(FORMAT_VERSION) => {}
            Some(1) => {
                tracing::info!(path = %path.display(), "migrating storage format 1 to 2");
                migrate_from_1(&txn)?;
                meta.insert(FORMAT_KEY, FORMAT_VERSION).map_err(internal)?;
            }
            Some(other) => {
                return Err(EngineError::Internal(format!(
                    "{} is in storage format {other}; this build reads format {FORMAT_VERSION}",
                    path.display()
                )))
            }
        }
        txn.open_table(TENANTS).map_err(internal)?;
        txn.open_table(TOMBSTONES).map_err(internal)?;
        txn.open_table(QUEUES).map_err(internal)?;
        txn.open_table(QUEUE_SEQ).map_err(internal)?;
        txn.open_table(MSG_META).map_err(internal)?;
        txn.open_table(MSG_BODY).map_err(internal)?;
        txn.open_table(DEDUP).map_err(internal)?;
    }
    txn.commit().map_err(internal)?;
    Ok(db)
}

/// [`QueueConfig`] as format 1 stored it (before the FIFO fields); for migration only.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct QueueConfigV1 {
    pub visibility_timeout_seconds: u32,
    pub message_retention_seconds: u32,
    pub delay_seconds: u32,
    pub receive_wait_seconds: u32,
    pub max_message_bytes: u32,
    pub max_depth: Option<u64>,
    pub tags: BTreeMap<String, String>,
}

/// [`QueueRecord`] as format 1 stored it; for migration only.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct QueueRecordV1 {
    pub uid: u64,
    pub config: QueueConfigV1,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// Message records rewritten per step of the migration (bounds what it holds in memory).
const MIGRATION_CHUNK: usize = 4096;

/// Rewrites a format-1 file as format 2, inside the caller's transaction: queue records get
/// the FIFO configuration fields (defaults), message records a `deduplication_id` of `None`.
fn migrate_from_1(txn: &WriteTransaction) -> Result<(), EngineError> {
    let mut queues = txn.open_table(QUEUES).map_err(internal)?;
    let old = queues
        .iter()
        .map_err(internal)?
        .map(|row| {
            let (key, value) = row.map_err(internal)?;
            Ok((key.value().to_owned(), value.value().to_vec()))
        })
        .collect::<Result<Vec<(String, Vec<u8>)>, EngineError>>()?;
    for (key, bytes) in old {
        let v1: QueueRecordV1 = decode(&bytes, "format-1 queue record")?;
        let c = v1.config;
        let record = QueueRecord {
            uid: v1.uid,
            config: QueueConfig {
                visibility_timeout_seconds: c.visibility_timeout_seconds,
                message_retention_seconds: c.message_retention_seconds,
                delay_seconds: c.delay_seconds,
                receive_wait_seconds: c.receive_wait_seconds,
                max_message_bytes: c.max_message_bytes,
                max_depth: c.max_depth,
                tags: c.tags,
                content_based_deduplication: false,
                deduplication_scope: DeduplicationScope::Queue,
            },
            created_at: v1.created_at,
            updated_at: v1.updated_at,
        };
        queues
            .insert(key.as_str(), encode(&record)?.as_slice())
            .map_err(internal)?;
    }

    // `deduplication_id` is the last field: postcard encodes `None` as one zero byte.
    let mut meta = txn.open_table(MSG_META).map_err(internal)?;
    let mut after: Option<(u64, u64)> = None;
    loop {
        let rows = match after {
            None => meta.iter(),
            Some(key) => meta.range::<(u64, u64)>((Bound::Excluded(key), Bound::Unbounded)),
        }
        .map_err(internal)?;
        let chunk = rows
            .take(MIGRATION_CHUNK)
            .map(|row| {
                let (key, value) = row.map_err(internal)?;
                Ok((key.value(), value.value().to_vec()))
            })
            .collect::<Result<Vec<((u64, u64), Vec<u8>)>, EngineError>>()?;
        let Some(&(last, _)) = chunk.last() else {
            break;
        };
        after = Some(last);
        for (key, mut value) in chunk {
            value.push(0);
            meta.insert(key, value.as_slice()).map_err(internal)?;
        }
    }
    Ok(())
}

/// Reads tenants and queues (small tables) at start-up.
pub(crate) fn read_catalog(db: &Database) -> Result<Catalog, EngineError> {
    let txn = db.begin_read().map_err(internal)?;
    let mut catalog = Catalog::default();
    let tenants = txn.open_table(TENANTS).map_err(internal)?;
    for row in tenants.iter().map_err(internal)? {
        let (_, value) = row.map_err(internal)?;
        catalog
            .tenants
            .push(decode(value.value(), "tenant record")?);
    }
    let tombstones = txn.open_table(TOMBSTONES).map_err(internal)?;
    for row in tombstones.iter().map_err(internal)? {
        let (id, at) = row.map_err(internal)?;
        catalog.tombstones.push((id.value().to_owned(), at.value()));
    }
    let seqs = txn.open_table(QUEUE_SEQ).map_err(internal)?;
    let queues = txn.open_table(QUEUES).map_err(internal)?;
    for row in queues.iter().map_err(internal)? {
        let (key, value) = row.map_err(internal)?;
        let record: QueueRecord = decode(value.value(), "queue record")?;
        let next_seq = seqs
            .get(record.uid)
            .map_err(internal)?
            .map_or(1, |v| v.value());
        catalog
            .queues
            .push((key.value().to_owned(), record, next_seq));
    }
    Ok(catalog)
}

/// The leading times of an encoded [`MetaRecord`], decoded without allocating.
pub(crate) fn meta_times(bytes: &[u8]) -> Result<MetaTimes, EngineError> {
    let (times, _): (MetaTimes, _) = postcard::take_from_bytes(bytes)
        .map_err(|e| EngineError::Internal(format!("corrupt message record: {e}")))?;
    Ok(times)
}

/// A whole encoded [`MetaRecord`].
pub(crate) fn meta_record(bytes: &[u8]) -> Result<MetaRecord, EngineError> {
    decode(bytes, "message record")
}

/// Visits every stored message's `(uid, seq, encoded meta record)` in key order. `visit`
/// answers whether the uid belongs to a live queue; messages of any other uid are deleted
/// before this returns. The engine never leaves such messages (a queue's deletion is ordered
/// after its inserts), so this is a defence against files written by a buggy or older build,
/// not a routine path.
pub(crate) fn scan_messages(
    db: &Database,
    mut visit: impl FnMut(u64, u64, &[u8]) -> Result<bool, EngineError>,
) -> Result<(), EngineError> {
    let mut orphans = BTreeSet::new();
    {
        let txn = db.begin_read().map_err(internal)?;
        let meta = txn.open_table(MSG_META).map_err(internal)?;
        for row in meta.iter().map_err(internal)? {
            let (key, value) = row.map_err(internal)?;
            let (uid, seq) = key.value();
            if orphans.contains(&uid) {
                continue;
            }
            if !visit(uid, seq, value.value())? {
                orphans.insert(uid);
            }
        }
    }
    if orphans.is_empty() {
        return Ok(());
    }
    tracing::warn!(
        queues = orphans.len(),
        "deleting messages of queues that no longer exist"
    );
    let txn = db.begin_write().map_err(internal)?;
    {
        let mut meta = txn.open_table(MSG_META).map_err(internal)?;
        let mut body = txn.open_table(MSG_BODY).map_err(internal)?;
        let mut seqs = txn.open_table(QUEUE_SEQ).map_err(internal)?;
        for uid in orphans {
            let range = (uid, 0)..=(uid, u64::MAX);
            meta.retain_in(range.clone(), |_, _| false)
                .map_err(internal)?;
            body.retain_in(range, |_, _| false).map_err(internal)?;
            seqs.remove(uid).map_err(internal)?;
        }
    }
    txn.commit().map_err(internal)?;
    Ok(())
}

/// A key of the `dedup` table.
type DedupTableKey = (u64, &'static str, &'static str);

/// The key range of every deduplication record of queue `uid`.
fn dedup_range(uid: u64) -> (Bound<DedupTableKey>, Bound<DedupTableKey>) {
    let end = match uid.checked_add(1) {
        Some(next) => Bound::Excluded((next, "", "")),
        None => Bound::Unbounded,
    };
    (Bound::Included((uid, "", "")), end)
}

/// Visits every stored deduplication record. `visit` answers whether the uid belongs to a live
/// queue; records of any other uid are deleted before this returns (as for messages: a
/// defence, not a routine path).
pub(crate) fn scan_dedup(
    db: &Database,
    mut visit: impl FnMut(u64, DedupKey, DedupEntry) -> bool,
) -> Result<(), EngineError> {
    let mut orphans = BTreeSet::new();
    {
        let txn = db.begin_read().map_err(internal)?;
        let table = txn.open_table(DEDUP).map_err(internal)?;
        for row in table.iter().map_err(internal)? {
            let (key, value) = row.map_err(internal)?;
            let (uid, group, id) = key.value();
            if orphans.contains(&uid) {
                continue;
            }
            let (accepted_at, seq, message_id) = value.value();
            let key = DedupKey {
                group: group.to_owned(),
                id: id.to_owned(),
            };
            let entry = DedupEntry {
                accepted_at,
                seq,
                message_id: message_id.to_owned(),
                committed: true,
            };
            if !visit(uid, key, entry) {
                orphans.insert(uid);
            }
        }
    }
    if orphans.is_empty() {
        return Ok(());
    }
    let txn = db.begin_write().map_err(internal)?;
    {
        let mut table = txn.open_table(DEDUP).map_err(internal)?;
        for uid in orphans {
            table
                .retain_in(dedup_range(uid), |_, _| false)
                .map_err(internal)?;
        }
    }
    txn.commit().map_err(internal)?;
    Ok(())
}

/// Runs on the commit thread once a submission's transaction has committed (or failed), before
/// its waiter is answered.
pub(crate) type OnCommit = Box<dyn FnOnce(&Result<(), EngineError>) + Send>;

/// One submission to the commit thread: operations applied atomically, and who to tell.
struct Job {
    ops: Vec<WriteOp>,
    on_commit: Option<OnCommit>,
    done: Option<oneshot::Sender<Result<(), EngineError>>>,
}

/// A submission in flight; [`wait`](Self::wait) completes once it is durable (or failed).
#[must_use = "a write is acknowledged only once waited for"]
pub(crate) struct Pending(Option<oneshot::Receiver<Result<(), EngineError>>>);

impl Pending {
    pub(crate) async fn wait(self) -> Result<(), EngineError> {
        match self.0 {
            Some(rx) => rx.await.unwrap_or_else(|_| Err(stopped())),
            None => Err(stopped()),
        }
    }
}

fn stopped() -> EngineError {
    EngineError::Unavailable("the embedded store's commit thread has stopped".into())
}

/// The open store: the database for reads and the channel to the thread that does all writes.
pub(crate) struct Store {
    db: Arc<Database>,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    commits: Arc<AtomicU64>,
}

impl Store {
    /// Starts the commit thread. Call after the start-up scan: from here on that thread is the
    /// only writer.
    pub(crate) fn start(db: Database, mode: CommitMode) -> Result<Self, EngineError> {
        let db = Arc::new(db);
        let commits = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sluice-commit".into())
            .spawn({
                let db = Arc::clone(&db);
                let commits = Arc::clone(&commits);
                move || commit_loop(&db, &rx, mode, &commits)
            })
            .map_err(internal)?;
        Ok(Self {
            db,
            jobs: Some(tx),
            thread: Some(thread),
            commits,
        })
    }

    /// Queues `ops` for the next commit. The caller decides the order of submissions (it submits
    /// while holding the lock that ordered the in-memory change), and the thread keeps it.
    pub(crate) fn submit(&self, ops: Vec<WriteOp>) -> Pending {
        self.send_job(ops, None)
    }

    /// Like [`submit`](Self::submit), and runs `on_commit` on the commit thread with the outcome.
    /// In-memory changes that must follow a durable write go there rather than after the
    /// caller's `wait`: a caller that is cancelled while waiting (a client hanging up) would
    /// otherwise leave a durable write the index never learns about.
    pub(crate) fn submit_then(
        &self,
        ops: Vec<WriteOp>,
        on_commit: impl FnOnce(&Result<(), EngineError>) + Send + 'static,
    ) -> Pending {
        self.send_job(ops, Some(Box::new(on_commit)))
    }

    fn send_job(&self, ops: Vec<WriteOp>, on_commit: Option<OnCommit>) -> Pending {
        let (done, rx) = oneshot::channel();
        let job = Job {
            ops,
            on_commit,
            done: Some(done),
        };
        match &self.jobs {
            Some(jobs) if jobs.send(job).is_ok() => Pending(Some(rx)),
            _ => Pending(None),
        }
    }

    /// Queues `ops` with nobody waiting (clean-up whose loss in a crash is harmless: expired
    /// messages that the next start-up or sweep deletes again).
    pub(crate) fn submit_detached(&self, ops: Vec<WriteOp>) {
        if let Some(jobs) = &self.jobs {
            let job = Job {
                ops,
                on_commit: None,
                done: None,
            };
            if jobs.send(job).is_err() {
                tracing::warn!("commit thread stopped; a clean-up write was dropped");
            }
        }
    }

    /// Write transactions committed since start.
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Reads the records of several messages of one queue from one snapshot; `None` for a
    /// message deleted meanwhile.
    pub(crate) fn read_messages(
        &self,
        uid: u64,
        seqs: &[u64],
    ) -> Result<Vec<Option<(MetaRecord, BodyRecord)>>, EngineError> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let txn = self.db.begin_read().map_err(internal)?;
        let meta = txn.open_table(MSG_META).map_err(internal)?;
        let body = txn.open_table(MSG_BODY).map_err(internal)?;
        let mut out = Vec::with_capacity(seqs.len());
        for &seq in seqs {
            let m = meta.get((uid, seq)).map_err(internal)?;
            let b = body.get((uid, seq)).map_err(internal)?;
            out.push(match (m, b) {
                (Some(m), Some(b)) => Some((
                    decode(m.value(), "message record")?,
                    decode(b.value(), "message body")?,
                )),
                _ => None,
            });
        }
        Ok(out)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Closing the channel lets the thread finish what is queued and exit; joining it releases
        // the database file before a re-open of the same directory.
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the commit thread panicked");
            }
        }
    }
}

fn commit_loop(db: &Database, rx: &mpsc::Receiver<Job>, mode: CommitMode, commits: &AtomicU64) {
    while let Ok(first) = rx.recv() {
        let mut ops = first.ops.len();
        let mut batch = vec![first];
        if mode == CommitMode::Group {
            // Everything that arrived while the previous commit was fsyncing rides this one.
            while ops < MAX_BATCH_OPS {
                match rx.try_recv() {
                    Ok(job) => {
                        ops += job.ops.len();
                        batch.push(job);
                    }
                    Err(_) => break,
                }
            }
        }
        let result = commit(db, &batch);
        match &result {
            Ok(()) => {
                commits.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::error!(error = %e, jobs = batch.len(), "group commit failed"),
        }
        for job in batch {
            if let Some(on_commit) = job.on_commit {
                on_commit(&result);
            }
            if let Some(done) = job.done {
                // The waiter may have given up (its request was cancelled); nothing to tell.
                let _ = done.send(result.clone());
            }
        }
    }
}

/// Applies a batch in one transaction committed with immediate durability (one fsync).
fn commit(db: &Database, batch: &[Job]) -> Result<(), EngineError> {
    let txn = db.begin_write().map_err(internal)?;
    apply_all(&txn, batch).map_err(internal)?;
    txn.commit().map_err(internal)
}

fn apply_all(txn: &WriteTransaction, batch: &[Job]) -> Result<(), redb::Error> {
    let mut tenants = txn.open_table(TENANTS)?;
    let mut tombstones = txn.open_table(TOMBSTONES)?;
    let mut queues = txn.open_table(QUEUES)?;
    let mut queue_seq = txn.open_table(QUEUE_SEQ)?;
    let mut meta = txn.open_table(MSG_META)?;
    let mut body = txn.open_table(MSG_BODY)?;
    let mut dedup = txn.open_table(DEDUP)?;
    for op in batch.iter().flat_map(|job| &job.ops) {
        match op {
            WriteOp::PutTenant { id, record } => {
                tenants.insert(id.as_str(), record.as_slice())?;
            }
            WriteOp::DeleteTenant { id, deleted_at } => {
                tenants.remove(id.as_str())?;
                tombstones.insert(id.as_str(), *deleted_at)?;
            }
            WriteOp::PutQueue { key, record } => {
                queues.insert(key.as_str(), record.as_slice())?;
            }
            WriteOp::DeleteQueue { key, uid } => {
                queues.remove(key.as_str())?;
                queue_seq.remove(*uid)?;
                let range = (*uid, 0)..=(*uid, u64::MAX);
                meta.retain_in(range.clone(), |_, _| false)?;
                body.retain_in(range, |_, _| false)?;
                dedup.retain_in(dedup_range(*uid), |_, _| false)?;
            }
            WriteOp::Insert {
                uid,
                next_seq,
                messages,
                dedup: records,
                forget,
            } => {
                for key in forget {
                    dedup.remove((*uid, key.group.as_str(), key.id.as_str()))?;
                }
                for m in messages {
                    meta.insert((*uid, m.seq), m.meta.as_slice())?;
                    body.insert((*uid, m.seq), m.body.as_slice())?;
                }
                for r in records {
                    dedup.insert(
                        (*uid, r.key.group.as_str(), r.key.id.as_str()),
                        (r.accepted_at, r.seq, r.message_id.as_str()),
                    )?;
                }
                queue_seq.insert(*uid, *next_seq)?;
            }
            WriteOp::Forget { uid, keys } => {
                for key in keys {
                    dedup.remove((*uid, key.group.as_str(), key.id.as_str()))?;
                }
            }
            WriteOp::Delete { uid, seqs } => {
                for &seq in seqs {
                    meta.remove((*uid, seq))?;
                    body.remove((*uid, seq))?;
                }
            }
            WriteOp::Purge { uid, below } => {
                let range = (*uid, 0)..(*uid, *below);
                meta.retain_in(range.clone(), |_, _| false)?;
                body.retain_in(range, |_, _| false)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes a format-1 file holding queue `t/old` (uid 42, visibility timeout 45 s) with one
    /// message; answers the uid and the message's seq.
    pub(crate) fn write_format_1(path: &Path) -> (u64, u64) {
        let (uid, seq) = (42, 7);
        let db = Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert(FORMAT_KEY, 1).unwrap();
            let record = QueueRecordV1 {
                uid,
                config: QueueConfigV1 {
                    visibility_timeout_seconds: 45,
                    message_retention_seconds: 345_600,
                    delay_seconds: 0,
                    receive_wait_seconds: 0,
                    max_message_bytes: 1024,
                    max_depth: None,
                    tags: BTreeMap::new(),
                },
                created_at: 0,
                updated_at: 0,
            };
            let mut queues = txn.open_table(QUEUES).unwrap();
            queues
                .insert("t/old", encode(&record).unwrap().as_slice())
                .unwrap();
            let mut queue_seq = txn.open_table(QUEUE_SEQ).unwrap();
            queue_seq.insert(uid, seq + 1).unwrap();
            // Format 1's message record is format 2's without its last field (`None`: one byte).
            let mut record = encode(&MetaRecord {
                sent_at: 0,
                visible_at: 0,
                size: 8,
                message_id: "id-old".into(),
                group_id: None,
                deduplication_id: None,
            })
            .unwrap();
            assert_eq!(record.pop(), Some(0));
            let mut msg_meta = txn.open_table(MSG_META).unwrap();
            msg_meta.insert((uid, seq), record.as_slice()).unwrap();
            let body = encode(&BodyRecord {
                body: "old body".into(),
                attributes: BTreeMap::new(),
            })
            .unwrap();
            let mut msg_body = txn.open_table(MSG_BODY).unwrap();
            msg_body.insert((uid, seq), body.as_slice()).unwrap();
        }
        txn.commit().unwrap();
        (uid, seq)
    }
}
