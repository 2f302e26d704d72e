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
//! | `queues`    | `"tenant/name"`      | [`QueueRecord`]                                |
//! | `queue_seq` | queue uid            | next sequence number to hand out               |
//! | `msg_meta`  | `(uid, seq)`         | [`MetaRecord`] (small: scanned at start-up)    |
//! | `msg_body`  | `(uid, seq)`         | [`BodyRecord`] (large: read only on delivery)  |
//!
//! Messages are keyed by the queue's `uid`, not its name, so deleting and re-creating a name
//! never mixes the two incarnations' messages, and a whole queue is one contiguous key range.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};
use sluice_engine::{EngineError, MessageAttribute, Millis, QueueConfig, TenantRecord};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::sync::oneshot;

use crate::CommitMode;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const TENANTS: TableDefinition<&str, &[u8]> = TableDefinition::new("tenants");
const QUEUES: TableDefinition<&str, &[u8]> = TableDefinition::new("queues");
const QUEUE_SEQ: TableDefinition<u64, u64> = TableDefinition::new("queue_seq");
const MSG_META: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("msg_meta");
const MSG_BODY: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("msg_body");

/// postcard is not self-describing: any change to a record's fields must bump this, and a file
/// written in another format is refused rather than misread.
const FORMAT_VERSION: u64 = 1;
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
    DeleteTenant {
        id: String,
    },
    PutQueue {
        key: String,
        record: Vec<u8>,
    },
    /// The queue record and every message of the incarnation `uid`.
    DeleteQueue {
        key: String,
        uid: u64,
    },
    /// Messages of queue `uid`; `next_seq` is recorded so sequence numbers never go back, even
    /// after every message has been deleted and the engine restarted.
    Insert {
        uid: u64,
        next_seq: u64,
        messages: Vec<EncodedMessage>,
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
            Some(other) => {
                return Err(EngineError::Internal(format!(
                    "{} is in storage format {other}; this build reads format {FORMAT_VERSION}",
                    path.display()
                )))
            }
        }
        txn.open_table(TENANTS).map_err(internal)?;
        txn.open_table(QUEUES).map_err(internal)?;
        txn.open_table(QUEUE_SEQ).map_err(internal)?;
        txn.open_table(MSG_META).map_err(internal)?;
        txn.open_table(MSG_BODY).map_err(internal)?;
    }
    txn.commit().map_err(internal)?;
    Ok(db)
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

/// Visits every stored message's `(uid, seq, times)` in key order. `visit` answers whether the
/// uid belongs to a live queue; messages of any other uid are deleted before this returns. The
/// engine never leaves such messages (a queue's deletion is ordered after its inserts), so this
/// is a defence against files written by a buggy or older build, not a routine path.
pub(crate) fn scan_messages(
    db: &Database,
    mut visit: impl FnMut(u64, u64, MetaTimes) -> bool,
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
            let (times, _): (MetaTimes, _) = postcard::take_from_bytes(value.value())
                .map_err(|e| EngineError::Internal(format!("corrupt message record: {e}")))?;
            if !visit(uid, seq, times) {
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
    let mut queues = txn.open_table(QUEUES)?;
    let mut queue_seq = txn.open_table(QUEUE_SEQ)?;
    let mut meta = txn.open_table(MSG_META)?;
    let mut body = txn.open_table(MSG_BODY)?;
    for op in batch.iter().flat_map(|job| &job.ops) {
        match op {
            WriteOp::PutTenant { id, record } => {
                tenants.insert(id.as_str(), record.as_slice())?;
            }
            WriteOp::DeleteTenant { id } => {
                tenants.remove(id.as_str())?;
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
            }
            WriteOp::Insert {
                uid,
                next_seq,
                messages,
            } => {
                for m in messages {
                    meta.insert((*uid, m.seq), m.meta.as_slice())?;
                    body.insert((*uid, m.seq), m.body.as_slice())?;
                }
                queue_seq.insert(*uid, *next_seq)?;
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
