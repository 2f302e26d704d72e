//! The durable half of the engine: the redb tables and the records stored in them, the start-up
//! scan that rebuilds the in-memory index, the reads of message bodies, and the one OS thread
//! that owns every write (group commit) and the recovery from failed ones ([`Committer`]).
//!
//! Layout (all values are postcard):
//!
//! | table       | key                  | value                                          |
//! |-------------|----------------------|------------------------------------------------|
//! | `meta`      | `&str`               | `u64`: the format version; `probe`: when a recovery probe last wrote |
//! | `tenants`   | tenant id            | [`TenantRecord`]                               |
//! | `tenant_tombstones` | tenant id    | `u64`: when the tenant was last deleted (ms)   |
//! | `queues`    | `"tenant/name"`      | [`QueueRecord`]                                |
//! | `queue_seq` | queue uid            | next sequence number to hand out               |
//! | `msg_meta`  | `(uid, seq)`         | [`MetaRecord`] (small: scanned at start-up)    |
//! | `msg_body`  | `(uid, seq)`         | [`BodyRecord`] (large: read only on delivery)  |
//! | `dedup`     | `(uid, group, id)`   | `(accepted_at, seq, message_id)`               |
//! | `secrets`   | `&str`               | raw bytes: the receipt-handle key (`secret.rs`) |
//! | `records`   | `(kind, key)`        | `(version, value)`: the services' small records (`ops/records.rs`) |
//! | `topic_seq` | `"tenant/topic"`     | FIFO topics: the next sequence number to hand out |
//! | `topic_dedup` | `("tenant/topic", id)` | `(accepted_at, seq, message_id)`: FIFO topics' deduplication records |
//! | `topic_stats` | `("tenant/topic", subscription id)` | `(delivered, filtered_out, failed)` |
//! | `msg_payload` | `(uid, seq)`       | `(key, size, enveloped, message_id)`: the [`PayloadRef`] of a message whose body is in a payload store |
//! | `payload_events` | `u64` seq       | `(kind, key, message_id)`: recorded payload events, kind 0 added, 1 released |
//!
//! A message's payload reference lives in `msg_payload` beside its `msg_meta` row (only messages
//! with a payload have one), so removing a message finds its payload without decoding its meta
//! record, and a queue's deletion or purge walks only its payload messages. Every operation that
//! writes or removes those rows records the matching payload event in `payload_events` in the
//! same transaction ([`EventLog`]): an insert records `Added`, a delete, purge, queue deletion
//! (expiry is a delete) `Released` — one per row actually removed, so a removal carried past a
//! failed commit, or repeated after a commit whose outcome was unknown, records nothing twice —
//! and a move carries the row to its new key and records nothing. Event seqs come from the
//! `payload_events_next` counter in `meta` and never go back, so acknowledging "everything up to
//! seq n" (all a reader's cursor says) never drops an event recorded after the reader read.
//!
//! Messages are keyed by the queue's `uid`, not its name, so deleting and re-creating a name
//! never mixes the two incarnations' messages, and a whole queue is one contiguous key range.
//! `dedup` holds the FIFO deduplication records (`group` is empty for the queue scope), written
//! in the transaction that stores the message and deleted once their window is over.
//!
//! Format history: 1 had no FIFO fields; 2 added `QueueConfig::content_based_deduplication`
//! and `deduplication_scope`, `MetaRecord::deduplication_id` and the `dedup` table; 3 added
//! `QueueConfig::redrive_policy`, `redrive_allow_policy` and `retry_backoff` and
//! `MetaRecord::dead_letter`. An older file is migrated step by step when opened. The `topic_*`
//! tables came later without a bump (as `tenant_tombstones` and `records` did): they hold plain
//! tuples, not postcard records, and opening a file of format 3 that lacks them creates them
//! empty, which is the whole upgrade.
//!
//! A move between queues (dead letters, redrive: [`WriteOp::Transfer`]) is one operation,
//! applied inside one transaction: the message's rows leave the source and arrive in the
//! destination in the same commit, so no crash can leave them in both queues or in neither.
//!
//! A publish to a topic is likewise one submission: an [`WriteOp::Insert`] of the copies per
//! destination queue and one [`WriteOp::Publish`] with the topic's state (sequence number,
//! deduplication records, counter increments), so a crash leaves the whole publication or none
//! of it.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};
use sluice_engine::{
    DeadLetter, DeduplicationScope, EngineError, MessageAttribute, Millis, PayloadEvent,
    PayloadEventKind, PayloadRef, QueueConfig, Record, SubscriptionStats, TenantRecord,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
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
/// New tables need no format bump (see `TOMBSTONES`).
const RECORDS: TableDefinition<(&str, &str), (u64, &str)> = TableDefinition::new("records");
/// New tables need no format bump (see `TOMBSTONES`); keyed by `"tenant/topic"`.
const TOPIC_SEQ: TableDefinition<&str, u64> = TableDefinition::new("topic_seq");
const TOPIC_DEDUP: TableDefinition<(&str, &str), (u64, u64, &str)> =
    TableDefinition::new("topic_dedup");
const TOPIC_STATS: TableDefinition<(&str, &str), (u64, u64, u64)> =
    TableDefinition::new("topic_stats");
/// New tables need no format bump (see `TOMBSTONES`): `(key, size, enveloped, message_id)`.
const MSG_PAYLOAD: TableDefinition<(u64, u64), (&str, u64, bool, &str)> =
    TableDefinition::new("msg_payload");
/// `seq -> (kind, key, message_id)`; kind [`ADDED`] or [`RELEASED`].
const PAYLOAD_EVENTS: TableDefinition<u64, (u8, &str, &str)> =
    TableDefinition::new("payload_events");
/// The `meta` key of the next payload event's seq.
const PAYLOAD_EVENTS_NEXT: &str = "payload_events_next";
const ADDED: u8 = 0;
const RELEASED: u8 = 1;

/// postcard is not self-describing: any change to a record's fields must bump this, and a file
/// written in another format is refused rather than misread.
const FORMAT_VERSION: u64 = 3;
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

/// The part of a message scanned at start-up. `sent_at`, `visible_at` and `size` come first so
/// the scan decodes them as a prefix ([`MetaTimes`]) without allocating the strings behind them.
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
    /// Set while it is in a dead-letter queue (written by the move that brought it there).
    pub dead_letter: Option<DeadLetter>,
}

/// The leading fields of [`MetaRecord`], in the same order (postcard encodes fields back to back).
#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) struct MetaTimes {
    pub sent_at: Millis,
    pub visible_at: Millis,
    pub size: u64,
}

/// A stored message as a delivery or a peek reads it.
#[derive(Debug)]
pub(crate) struct StoredParts {
    pub meta: MetaRecord,
    pub body: BodyRecord,
    pub payload: Option<PayloadRef>,
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

/// A FIFO topic's deduplication record to write, in the transaction of its publication.
#[derive(Debug, Clone)]
pub(crate) struct TopicDedupRecord {
    pub id: String,
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
    /// Its body in a payload store (an `Added` event is recorded with it).
    pub payload: Option<PayloadRow>,
}

/// A message's payload reference as `msg_payload` keeps it, with the message's id for the
/// events that name it.
#[derive(Debug, Clone)]
pub(crate) struct PayloadRow {
    pub message_id: String,
    pub payload: PayloadRef,
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
    /// One of the services' records, at `version`.
    PutRecord {
        kind: String,
        key: String,
        version: u64,
        value: String,
    },
    DeleteRecord {
        kind: String,
        key: String,
    },
    /// Messages moved from queue `from` to queue `to`: each one's rows leave `from` and are
    /// written to `to` under its new seq, with its meta record rewritten as [`Arrival`] says;
    /// `next_seq` of `to` is recorded. Never carried past a failed commit (the index applies a
    /// move only once it is durable), so a failed move leaves the message in its source.
    Transfer {
        from: u64,
        to: u64,
        next_seq: u64,
        moves: Vec<Arrival>,
    },
    /// The topic state of a publish (`topic` is `"tenant/name"`), submitted with the
    /// [`Insert`](WriteOp::Insert)s of its copies: the deduplication records `forget` (whose
    /// window is over; deleted first), the next sequence number (FIFO topics; never lowered),
    /// new deduplication records and counter increments by subscription id (added to the
    /// stored counters, so a failed commit loses nothing that was counted before).
    Publish {
        topic: String,
        next_seq: Option<u64>,
        dedup: Vec<TopicDedupRecord>,
        forget: Vec<String>,
        counts: Vec<(String, SubscriptionStats)>,
        /// Copies with a payload that no queue took: each recorded `Added` and `Released`.
        failed: Vec<PayloadRow>,
    },
    /// Forgets the payload events up to and including this seq (what a reader acknowledged).
    AckPayloadEvents {
        upto: u64,
    },
    /// Every row of one topic (`"tenant/name"`): sequence number, deduplication records,
    /// counters.
    ForgetTopic {
        topic: String,
    },
    /// Every row of every topic of one tenant.
    ForgetTenantTopics {
        tenant: String,
    },
}

/// One message of a [`WriteOp::Transfer`]: where it was, where it goes, and what of its meta
/// record changes on the way (the rest, and the body, are copied as stored).
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    pub from_seq: u64,
    pub to_seq: u64,
    /// `Some` to restart retention at the move (FIFO destinations), `None` to keep it.
    pub sent_at: Option<Millis>,
    pub visible_at: Millis,
    pub dead_letter: Option<DeadLetter>,
}

/// A topic's state as stored, read at start-up.
#[derive(Debug, Default)]
pub(crate) struct StoredTopic {
    pub next_seq: Option<u64>,
    /// `(deduplication id, record)`.
    pub dedup: Vec<(String, DedupEntry)>,
    pub stats: BTreeMap<String, SubscriptionStats>,
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

/// Classifies a redb error. The disk refusing work (full, a file-size limit, an I/O error, or the
/// failed state redb latches after one) is an outage that reopening the database once writes can
/// succeed again repairs, so it is [`EngineError::Unavailable`]; anything else (corruption, a
/// misuse) is [`EngineError::Internal`].
pub(crate) fn storage(e: impl Into<redb::Error>) -> EngineError {
    let e = e.into();
    match e {
        redb::Error::Io(_)
        | redb::Error::PreviousIo
        | redb::Error::DatabaseClosed
        | redb::Error::DatabaseAlreadyOpen
        | redb::Error::Backend(_) => {
            EngineError::Unavailable(format!("the disk store failed: {e}"))
        }
        _ => EngineError::Internal(e.to_string()),
    }
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
    restrict_to_owner(path)
        .map_err(|e| EngineError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    let db = redb::Builder::new()
        .set_cache_size(CACHE_BYTES)
        .create(path)
        .map_err(|e| EngineError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    prepare(db, &path.display().to_string())
}

/// Creates the database file readable and writable by its owner only (it holds every tenant's
/// AWS secret keys and the receipt-handle key), and takes group and other access away from a
/// file an older build created with the umask's permissions.
fn restrict_to_owner(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        // Created empty and private before redb writes a byte, so no moment exposes it.
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Checks (or records, or migrates) the storage format of the database `label` and creates
/// any missing table.
pub(crate) fn prepare(db: Database, label: &str) -> Result<Database, EngineError> {
    let txn = db.begin_write().map_err(storage)?;
    {
        let mut meta = txn.open_table(META).map_err(storage)?;
        let found = meta.get(FORMAT_KEY).map_err(storage)?.map(|v| v.value());
        match found {
            None => {
                meta.insert(FORMAT_KEY, FORMAT_VERSION).map_err(storage)?;
            }
            Some(FORMAT_VERSION) => {}
            Some(found @ (1 | 2)) => {
                if found == 1 {
                    tracing::info!(path = label, "migrating storage format 1 to 2");
                    migrate_from_1(&txn)?;
                }
                tracing::info!(path = label, "migrating storage format 2 to 3");
                migrate_from_2(&txn)?;
                meta.insert(FORMAT_KEY, FORMAT_VERSION).map_err(storage)?;
            }
            Some(other) => {
                return Err(EngineError::Internal(format!(
                    "{label} is in storage format {other}; this build reads format {FORMAT_VERSION}"
                )))
            }
        }
        txn.open_table(TENANTS).map_err(storage)?;
        txn.open_table(TOMBSTONES).map_err(storage)?;
        txn.open_table(QUEUES).map_err(storage)?;
        txn.open_table(QUEUE_SEQ).map_err(storage)?;
        txn.open_table(MSG_META).map_err(storage)?;
        txn.open_table(MSG_BODY).map_err(storage)?;
        txn.open_table(DEDUP).map_err(storage)?;
        txn.open_table(TOPIC_SEQ).map_err(storage)?;
        txn.open_table(TOPIC_DEDUP).map_err(storage)?;
        txn.open_table(TOPIC_STATS).map_err(storage)?;
        txn.open_table(MSG_PAYLOAD).map_err(storage)?;
        txn.open_table(PAYLOAD_EVENTS).map_err(storage)?;
    }
    txn.commit().map_err(storage)?;
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

/// [`QueueConfig`] as format 2 stored it (before the dead-letter fields); for migration only.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct QueueConfigV2 {
    pub visibility_timeout_seconds: u32,
    pub message_retention_seconds: u32,
    pub delay_seconds: u32,
    pub receive_wait_seconds: u32,
    pub max_message_bytes: u32,
    pub max_depth: Option<u64>,
    pub tags: BTreeMap<String, String>,
    pub content_based_deduplication: bool,
    pub deduplication_scope: DeduplicationScope,
}

/// [`QueueRecord`] as format 2 stored it; for migration only.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct QueueRecordV2 {
    pub uid: u64,
    pub config: QueueConfigV2,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// Message records rewritten per step of the migration (bounds what it holds in memory).
const MIGRATION_CHUNK: usize = 4096;

/// Rewrites every queue record with `convert`, inside the caller's transaction.
fn rewrite_queue_records(
    txn: &WriteTransaction,
    mut convert: impl FnMut(&[u8]) -> Result<Vec<u8>, EngineError>,
) -> Result<(), EngineError> {
    let mut queues = txn.open_table(QUEUES).map_err(storage)?;
    let old = queues
        .iter()
        .map_err(storage)?
        .map(|row| {
            let (key, value) = row.map_err(storage)?;
            Ok((key.value().to_owned(), value.value().to_vec()))
        })
        .collect::<Result<Vec<(String, Vec<u8>)>, EngineError>>()?;
    for (key, bytes) in old {
        queues
            .insert(key.as_str(), convert(&bytes)?.as_slice())
            .map_err(storage)?;
    }
    Ok(())
}

/// Rewrites a format-1 file as format 2, inside the caller's transaction: queue records get
/// the FIFO configuration fields (defaults), message records a `deduplication_id` of `None`.
fn migrate_from_1(txn: &WriteTransaction) -> Result<(), EngineError> {
    rewrite_queue_records(txn, |bytes| {
        let v1: QueueRecordV1 = decode(bytes, "format-1 queue record")?;
        let c = v1.config;
        encode(&QueueRecordV2 {
            uid: v1.uid,
            config: QueueConfigV2 {
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
        })
    })?;
    // `deduplication_id` was the last field.
    append_none_to_message_records(txn)
}

/// Rewrites a format-2 file as format 3, inside the caller's transaction: queue records get
/// the dead-letter configuration fields (none), message records a `dead_letter` of `None`.
fn migrate_from_2(txn: &WriteTransaction) -> Result<(), EngineError> {
    rewrite_queue_records(txn, |bytes| {
        let v2: QueueRecordV2 = decode(bytes, "format-2 queue record")?;
        let c = v2.config;
        encode(&QueueRecord {
            uid: v2.uid,
            config: QueueConfig {
                visibility_timeout_seconds: c.visibility_timeout_seconds,
                message_retention_seconds: c.message_retention_seconds,
                delay_seconds: c.delay_seconds,
                receive_wait_seconds: c.receive_wait_seconds,
                max_message_bytes: c.max_message_bytes,
                max_depth: c.max_depth,
                tags: c.tags,
                content_based_deduplication: c.content_based_deduplication,
                deduplication_scope: c.deduplication_scope,
                redrive_policy: None,
                redrive_allow_policy: None,
                retry_backoff: None,
            },
            created_at: v2.created_at,
            updated_at: v2.updated_at,
        })
    })?;
    append_none_to_message_records(txn)
}

/// Adds a trailing `None` field to every message record: postcard encodes `None` as one zero
/// byte, so appending it is the whole migration of a new last `Option` field.
fn append_none_to_message_records(txn: &WriteTransaction) -> Result<(), EngineError> {
    let mut meta = txn.open_table(MSG_META).map_err(storage)?;
    let mut after: Option<(u64, u64)> = None;
    loop {
        let rows = match after {
            None => meta.iter(),
            Some(key) => meta.range::<(u64, u64)>((Bound::Excluded(key), Bound::Unbounded)),
        }
        .map_err(storage)?;
        let chunk = rows
            .take(MIGRATION_CHUNK)
            .map(|row| {
                let (key, value) = row.map_err(storage)?;
                Ok((key.value(), value.value().to_vec()))
            })
            .collect::<Result<Vec<((u64, u64), Vec<u8>)>, EngineError>>()?;
        let Some(&(last, _)) = chunk.last() else {
            break;
        };
        after = Some(last);
        for (key, mut value) in chunk {
            value.push(0);
            meta.insert(key, value.as_slice()).map_err(storage)?;
        }
    }
    Ok(())
}

/// Reads tenants and queues (small tables) at start-up.
pub(crate) fn read_catalog(db: &Database) -> Result<Catalog, EngineError> {
    let txn = db.begin_read().map_err(storage)?;
    let mut catalog = Catalog::default();
    let tenants = txn.open_table(TENANTS).map_err(storage)?;
    for row in tenants.iter().map_err(storage)? {
        let (_, value) = row.map_err(storage)?;
        catalog
            .tenants
            .push(decode(value.value(), "tenant record")?);
    }
    let tombstones = txn.open_table(TOMBSTONES).map_err(storage)?;
    for row in tombstones.iter().map_err(storage)? {
        let (id, at) = row.map_err(storage)?;
        catalog.tombstones.push((id.value().to_owned(), at.value()));
    }
    let seqs = txn.open_table(QUEUE_SEQ).map_err(storage)?;
    let queues = txn.open_table(QUEUES).map_err(storage)?;
    for row in queues.iter().map_err(storage)? {
        let (key, value) = row.map_err(storage)?;
        let record: QueueRecord = decode(value.value(), "queue record")?;
        let next_seq = seqs
            .get(record.uid)
            .map_err(storage)?
            .map_or(1, |v| v.value());
        catalog
            .queues
            .push((key.value().to_owned(), record, next_seq));
    }
    Ok(catalog)
}

/// Reads every topic's state (small: counters, and the deduplication records a publish to the
/// topic has not pruned yet) at start-up, by `"tenant/name"`.
pub(crate) fn read_topics(db: &Database) -> Result<BTreeMap<String, StoredTopic>, EngineError> {
    let txn = db.begin_read().map_err(storage)?;
    let mut topics: BTreeMap<String, StoredTopic> = BTreeMap::new();
    let seqs = txn.open_table(TOPIC_SEQ).map_err(storage)?;
    for row in seqs.iter().map_err(storage)? {
        let (topic, next_seq) = row.map_err(storage)?;
        topics.entry(topic.value().to_owned()).or_default().next_seq = Some(next_seq.value());
    }
    let dedup = txn.open_table(TOPIC_DEDUP).map_err(storage)?;
    for row in dedup.iter().map_err(storage)? {
        let (key, value) = row.map_err(storage)?;
        let (topic, id) = key.value();
        let (accepted_at, seq, message_id) = value.value();
        let entry = DedupEntry {
            accepted_at,
            seq,
            message_id: message_id.to_owned(),
            committed: true,
        };
        topics
            .entry(topic.to_owned())
            .or_default()
            .dedup
            .push((id.to_owned(), entry));
    }
    let stats = txn.open_table(TOPIC_STATS).map_err(storage)?;
    for row in stats.iter().map_err(storage)? {
        let (key, value) = row.map_err(storage)?;
        let (topic, subscription) = key.value();
        let (delivered, filtered_out, failed) = value.value();
        topics.entry(topic.to_owned()).or_default().stats.insert(
            subscription.to_owned(),
            SubscriptionStats {
                delivered,
                filtered_out,
                failed,
            },
        );
    }
    Ok(topics)
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
        let txn = db.begin_read().map_err(storage)?;
        let meta = txn.open_table(MSG_META).map_err(storage)?;
        for row in meta.iter().map_err(storage)? {
            let (key, value) = row.map_err(storage)?;
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
    let txn = db.begin_write().map_err(storage)?;
    {
        let mut meta = txn.open_table(MSG_META).map_err(storage)?;
        let mut body = txn.open_table(MSG_BODY).map_err(storage)?;
        let mut seqs = txn.open_table(QUEUE_SEQ).map_err(storage)?;
        let mut payloads = txn.open_table(MSG_PAYLOAD).map_err(storage)?;
        let mut events = None;
        for uid in orphans {
            let range = (uid, 0)..=(uid, u64::MAX);
            meta.retain_in(range.clone(), |_, _| false)
                .map_err(storage)?;
            body.retain_in(range.clone(), |_, _| false)
                .map_err(storage)?;
            release_range(&txn, &mut payloads, &mut events, range).map_err(storage)?;
            seqs.remove(uid).map_err(storage)?;
        }
        EventLog::finish(&txn, events).map_err(storage)?;
    }
    txn.commit().map_err(storage)?;
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
        let txn = db.begin_read().map_err(storage)?;
        let table = txn.open_table(DEDUP).map_err(storage)?;
        for row in table.iter().map_err(storage)? {
            let (key, value) = row.map_err(storage)?;
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
    let txn = db.begin_write().map_err(storage)?;
    {
        let mut table = txn.open_table(DEDUP).map_err(storage)?;
        for uid in orphans {
            table
                .retain_in(dedup_range(uid), |_, _| false)
                .map_err(storage)?;
        }
    }
    txn.commit().map_err(storage)?;
    Ok(())
}

/// Runs on the commit thread once a submission's transaction has committed (or failed), before
/// its waiter is answered.
pub(crate) type OnCommit = Box<dyn FnOnce(&Result<(), EngineError>) + Send>;

/// Opens the database (with every table present): at start, and again after a failed write.
pub(crate) type Opener = Box<dyn Fn() -> Result<Database, EngineError> + Send>;

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

/// What readers and the commit thread share.
struct Shared {
    /// The open database; `None` while the commit thread reopens it after a failed write.
    db: RwLock<Option<Arc<Database>>>,
    commits: AtomicU64,
    /// Why writes are failing, from the failed commit until one succeeds again.
    failure: Mutex<Option<String>>,
}

impl Shared {
    fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_failure(&self, why: Option<String>) {
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = why;
    }

    fn set_db(&self, db: Option<Arc<Database>>) {
        *self.db.write().unwrap_or_else(PoisonError::into_inner) = db;
    }
}

/// The open store: the database for reads and the channel to the thread that does all writes.
pub(crate) struct Store {
    shared: Arc<Shared>,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Store {
    /// Starts the commit thread on `db`, which `open` opened. Call after the start-up scan: from
    /// here on that thread is the only writer, and it calls `open` again whenever a failed write
    /// leaves redb refusing all further work.
    pub(crate) fn start(db: Database, mode: CommitMode, open: Opener) -> Result<Self, EngineError> {
        let db = Arc::new(db);
        let shared = Arc::new(Shared {
            db: RwLock::new(Some(Arc::clone(&db))),
            commits: AtomicU64::new(0),
            failure: Mutex::new(None),
        });
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sluice-commit".into())
            .spawn({
                let mut committer = Committer {
                    shared: Arc::clone(&shared),
                    open,
                    mode,
                    db: Some(db),
                    carried: Vec::new(),
                    recovery: None,
                };
                move || committer.run(&rx)
            })
            .map_err(internal)?;
        Ok(Self {
            shared,
            jobs: Some(tx),
            thread: Some(thread),
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
        self.shared.commits.load(Ordering::Relaxed)
    }

    /// Whether writes can be expected to succeed: the commit thread runs and its last commit
    /// (or recovery probe) succeeded.
    pub(crate) fn health(&self) -> Result<(), EngineError> {
        if self.thread.as_ref().is_none_or(JoinHandle::is_finished) {
            return Err(stopped());
        }
        match self.shared.failure() {
            None => Ok(()),
            Some(why) => Err(EngineError::Unavailable(format!(
                "the disk store cannot be written: {why}"
            ))),
        }
    }

    /// Whether the last commit failed (removals it carried are not yet on disk).
    pub(crate) fn is_degraded(&self) -> bool {
        self.shared.failure().is_some()
    }

    fn db(&self) -> Result<Arc<Database>, EngineError> {
        let db = self
            .shared
            .db
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        match &*db {
            Some(db) => Ok(Arc::clone(db)),
            None => Err(EngineError::Unavailable(
                "the disk store is being reopened after a failed write".into(),
            )),
        }
    }

    /// Reads the records of several messages of one queue from one snapshot; `None` for a
    /// message deleted meanwhile.
    pub(crate) fn read_messages(
        &self,
        uid: u64,
        seqs: &[u64],
    ) -> Result<Vec<Option<StoredParts>>, EngineError> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let db = self.db()?;
        let result = Self::read_from(&db, uid, seqs);
        drop(db);
        if let Err(EngineError::Unavailable(_)) = &result {
            // A failed read latches redb's failed state as a failed write does, and only the
            // commit thread reopens: an empty commit makes it notice even when nothing writes.
            self.submit_detached(Vec::new());
        }
        result
    }

    /// One of the services' records, as last committed.
    pub(crate) fn read_record(&self, kind: &str, key: &str) -> Result<Option<Record>, EngineError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(storage)?;
        let table = match txn.open_table(RECORDS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(storage(e)),
        };
        Ok(table.get((kind, key)).map_err(storage)?.map(|row| {
            let (version, value) = row.value();
            Record {
                version,
                value: value.to_owned(),
            }
        }))
    }

    /// Records of `kind` whose keys start with `prefix`, after `after`, in key order.
    pub(crate) fn read_records(
        &self,
        kind: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Record)>, EngineError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(storage)?;
        let table = match txn.open_table(RECORDS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(storage(e)),
        };
        let start = match after {
            Some(after) if after >= prefix => Bound::Excluded((kind, after)),
            _ => Bound::Included((kind, prefix)),
        };
        let mut out = Vec::new();
        for row in table
            .range::<(&str, &str)>((start, Bound::Unbounded))
            .map_err(storage)?
        {
            if out.len() >= limit {
                break;
            }
            let (k, v) = row.map_err(storage)?;
            let (row_kind, row_key) = k.value();
            if row_kind != kind || !row_key.starts_with(prefix) {
                break;
            }
            let (version, value) = v.value();
            out.push((
                row_key.to_owned(),
                Record {
                    version,
                    value: value.to_owned(),
                },
            ));
        }
        Ok(out)
    }

    /// Reads the meta records alone (what a move needs to know of a message: where it came
    /// from, its group) of several messages of one queue from one snapshot; `None` for a
    /// message not stored.
    pub(crate) fn read_meta(
        &self,
        uid: u64,
        seqs: &[u64],
    ) -> Result<Vec<Option<MetaRecord>>, EngineError> {
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let db = self.db()?;
        let read = || -> Result<Vec<Option<MetaRecord>>, EngineError> {
            let txn = db.begin_read().map_err(storage)?;
            let meta = txn.open_table(MSG_META).map_err(storage)?;
            seqs.iter()
                .map(|&seq| match meta.get((uid, seq)).map_err(storage)? {
                    Some(m) => decode(m.value(), "message record").map(Some),
                    None => Ok(None),
                })
                .collect()
        };
        let result = read();
        drop(db);
        if let Err(EngineError::Unavailable(_)) = &result {
            // As for `read_messages`: make the commit thread notice and reopen.
            self.submit_detached(Vec::new());
        }
        result
    }

    fn read_from(
        db: &Database,
        uid: u64,
        seqs: &[u64],
    ) -> Result<Vec<Option<StoredParts>>, EngineError> {
        let txn = db.begin_read().map_err(storage)?;
        let meta = txn.open_table(MSG_META).map_err(storage)?;
        let body = txn.open_table(MSG_BODY).map_err(storage)?;
        let payloads = txn.open_table(MSG_PAYLOAD).map_err(storage)?;
        let mut out = Vec::with_capacity(seqs.len());
        for &seq in seqs {
            let m = meta.get((uid, seq)).map_err(storage)?;
            let b = body.get((uid, seq)).map_err(storage)?;
            out.push(match (m, b) {
                (Some(m), Some(b)) => Some(StoredParts {
                    meta: decode(m.value(), "message record")?,
                    body: decode(b.value(), "message body")?,
                    payload: payloads.get((uid, seq)).map_err(storage)?.map(|row| {
                        let (key, size, enveloped, _) = row.value();
                        PayloadRef {
                            key: key.to_owned(),
                            size,
                            enveloped,
                        }
                    }),
                }),
                _ => None,
            });
        }
        Ok(out)
    }

    /// Up to `limit` recorded payload events, oldest first, with their seqs.
    pub(crate) fn read_payload_events(
        &self,
        limit: usize,
    ) -> Result<Vec<(u64, PayloadEvent)>, EngineError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(storage)?;
        let table = txn.open_table(PAYLOAD_EVENTS).map_err(storage)?;
        let mut out = Vec::new();
        for row in table.iter().map_err(storage)?.take(limit) {
            let (seq, event) = row.map_err(storage)?;
            let (kind, key, message_id) = event.value();
            let kind = match kind {
                ADDED => PayloadEventKind::Added,
                RELEASED => PayloadEventKind::Released,
                other => {
                    return Err(EngineError::Internal(format!(
                        "corrupt payload event {}: kind {other}",
                        seq.value()
                    )))
                }
            };
            out.push((
                seq.value(),
                PayloadEvent {
                    kind,
                    key: key.to_owned(),
                    message_id: message_id.to_owned(),
                },
            ));
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

/// Wait before probing after a first failed write, and between attempts after a second;
/// doubled on each failed attempt up to [`MAX_REOPEN_BACKOFF`].
const FIRST_REOPEN_BACKOFF: Duration = Duration::from_millis(200);
/// Longest wait between recovery attempts: how long a store that can write again may still
/// refuse writes and answer not ready.
const MAX_REOPEN_BACKOFF: Duration = Duration::from_secs(1);

/// The commit thread's state while writes are failing.
struct Recovery {
    /// From when a batch may try again (reopening first if closed); until then batches are
    /// refused at once, so a lasting failure costs no reopen per request.
    due: Instant,
    /// When to try on its own with a probe commit, if idle.
    probe_at: Instant,
    backoff: Duration,
}

/// The commit thread: owns every write and the recovery from failed ones.
///
/// After redb fails to write (disk full, file-size limit, I/O error) it refuses every later
/// operation, reads included, so the thread answers the failed batch with
/// [`EngineError::Unavailable`], closes the database and reopens it at once (for the readers).
/// The next batch tries again; once that fails too, batches are refused at once between
/// attempts spaced by a growing backoff, and an idle thread probes with a small commit, until
/// a commit succeeds.
///
/// A failed batch changes nothing on disk, and the index learns of its sends and catalog
/// changes only from a successful commit, so both agree. Its removals (deletes, purges, queue
/// deletions, expired deduplication records) are the exception: the index applied them when
/// they were submitted, so they are carried and applied first in the next successful
/// transaction, keeping disk and index in the order they were submitted.
///
/// One case stays ambiguous, as it is for any store: a commit whose final fsync fails may be on
/// disk all the same. Its sends were answered 503 and are not receivable in this process; a
/// restart finds them (delivered at least once, as a retried send would be).
struct Committer {
    shared: Arc<Shared>,
    open: Opener,
    mode: CommitMode,
    /// The database writes go to; `None` once a failure closed it, until a reopen succeeds.
    db: Option<Arc<Database>>,
    /// Removals of failed batches, applied first by the next commit.
    carried: Vec<WriteOp>,
    recovery: Option<Recovery>,
}

impl Committer {
    fn run(&mut self, rx: &mpsc::Receiver<Job>) {
        loop {
            let first = match self.recovery.as_ref().map(|r| r.probe_at) {
                None => match rx.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                },
                Some(probe_at) => {
                    match rx.recv_timeout(probe_at.saturating_duration_since(Instant::now())) {
                        Ok(job) => job,
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            // Idle while degraded: find out whether writes succeed again, so
                            // readiness recovers without waiting for a client's write.
                            let _ = self.write(&[], true);
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            };
            let mut ops = first.ops.len();
            let mut batch = vec![first];
            if self.mode == CommitMode::Group {
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
            let started = Instant::now();
            let result = self.write(&batch, false);
            // Commit latency and batch size are what group commit trades; watch both.
            metrics::histogram!("sluice_embedded_commit_duration_seconds")
                .record(started.elapsed().as_secs_f64());
            metrics::histogram!("sluice_embedded_commit_batch_jobs").record(batch.len() as f64);
            if result.is_err() {
                metrics::counter!("sluice_embedded_commit_failures_total").increment(1);
            }
            let carry = matches!(result, Err(EngineError::Unavailable(_)));
            for job in batch {
                if carry {
                    self.carried.extend(job.ops.into_iter().filter_map(removal));
                }
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

    /// Commits the carried removals and `batch` in one transaction, reopening the database first
    /// if a failure closed it and the next attempt is due; `probe` adds a small write of its own.
    fn write(&mut self, batch: &[Job], probe: bool) -> Result<(), EngineError> {
        let (result, attempted) = match self.usable_db() {
            Ok(db) => (commit(&db, &self.carried, batch, probe), true),
            Err(e) => (Err(e), false),
        };
        match &result {
            Ok(()) => {
                self.shared.commits.fetch_add(1, Ordering::Relaxed);
                self.carried.clear();
                if self.recovery.take().is_some() {
                    self.shared.set_failure(None);
                    tracing::info!("the disk store accepts writes again");
                }
            }
            Err(EngineError::Unavailable(why)) => {
                if self.recovery.is_none() {
                    tracing::error!(error = %why, jobs = batch.len(), "commit failed; reopening the store");
                } else {
                    tracing::debug!(error = %why, "commit failed again while recovering");
                }
                if attempted {
                    self.failed(why);
                    // redb refuses all work, reads too, after a failed write until the database
                    // is reopened. Reopening reads and repairs but need not grow the file, so it
                    // usually succeeds on a full disk, and reads go on while writes wait for the
                    // next attempt.
                    self.close();
                    let _ = self.reopen();
                }
            }
            Err(e) => {
                tracing::error!(error = %e, jobs = batch.len(), "group commit failed");
                if attempted && self.recovery.is_some() {
                    // Keep the probes on their backoff rather than retrying at once.
                    self.failed(&e.to_string());
                }
            }
        }
        result
    }

    /// The database to write to: none while recovering until the next attempt is due, then
    /// reopened if a failure closed it.
    fn usable_db(&mut self) -> Result<Arc<Database>, EngineError> {
        if let Some(recovery) = &self.recovery {
            if Instant::now() < recovery.due {
                let why = self.shared.failure().unwrap_or_default();
                return Err(EngineError::Unavailable(format!(
                    "the disk store is recovering from a failed write: {why}"
                )));
            }
        }
        if let Some(db) = &self.db {
            return Ok(Arc::clone(db));
        }
        self.reopen().map_err(|why| {
            self.failed(&why);
            EngineError::Unavailable(format!("the disk store cannot be reopened: {why}"))
        })
    }

    /// Opens the database again and hands it to readers; answers why not.
    fn reopen(&mut self) -> Result<Arc<Database>, String> {
        match (self.open)() {
            Ok(db) => {
                let db = Arc::new(db);
                self.db = Some(Arc::clone(&db));
                self.shared.set_db(Some(Arc::clone(&db)));
                tracing::debug!("reopened the store");
                Ok(db)
            }
            Err(e) => {
                tracing::debug!(error = %e, "reopening the store failed");
                Err(e.to_string())
            }
        }
    }

    /// Drops every handle this thread and new readers can get; the file is released once the
    /// reads in progress finish (a reopen before then fails and is retried).
    fn close(&mut self) {
        self.shared.set_db(None);
        self.db = None;
    }

    /// Records a failed attempt and schedules the next.
    fn failed(&mut self, why: &str) {
        self.shared.set_failure(Some(why.to_owned()));
        let now = Instant::now();
        self.recovery = Some(match &self.recovery {
            // The next batch tries at once: a failure that has passed fails no other request.
            None => Recovery {
                due: now,
                probe_at: now + FIRST_REOPEN_BACKOFF,
                backoff: FIRST_REOPEN_BACKOFF,
            },
            Some(r) => {
                let backoff = (r.backoff * 2).min(MAX_REOPEN_BACKOFF);
                Recovery {
                    due: now + backoff,
                    probe_at: now + backoff,
                    backoff,
                }
            }
        });
    }
}

/// The part of a failed operation the index applied already, to carry to the next commit.
fn removal(op: WriteOp) -> Option<WriteOp> {
    match op {
        WriteOp::DeleteQueue { .. }
        | WriteOp::Delete { .. }
        | WriteOp::Purge { .. }
        | WriteOp::Forget { .. } => Some(op),
        WriteOp::Insert { uid, forget, .. } if !forget.is_empty() => {
            Some(WriteOp::Forget { uid, keys: forget })
        }
        // Memory forgot these when they were submitted.
        WriteOp::ForgetTopic { .. } | WriteOp::ForgetTenantTopics { .. } => Some(op),
        WriteOp::Publish { topic, forget, .. } if !forget.is_empty() => Some(WriteOp::Publish {
            topic,
            next_seq: None,
            dedup: Vec::new(),
            forget,
            counts: Vec::new(),
            failed: Vec::new(),
        }),
        WriteOp::Insert { .. }
        | WriteOp::Publish { .. }
        | WriteOp::Transfer { .. }
        | WriteOp::PutTenant { .. }
        | WriteOp::DeleteTenant { .. }
        | WriteOp::PutQueue { .. }
        | WriteOp::PutRecord { .. }
        | WriteOp::DeleteRecord { .. }
        | WriteOp::AckPayloadEvents { .. } => None,
    }
}

/// The `meta` key a recovery probe writes: a real change to a table, not just a new header, so
/// the probe needs room as a small send does.
const PROBE_KEY: &str = "probe";

/// Applies `carried` then a batch in one transaction committed with immediate durability (one
/// fsync).
fn commit(
    db: &Database,
    carried: &[WriteOp],
    batch: &[Job],
    probe: bool,
) -> Result<(), EngineError> {
    let txn = db.begin_write().map_err(storage)?;
    let ops = carried.iter().chain(batch.iter().flat_map(|job| &job.ops));
    apply_all(&txn, ops).map_err(storage)?;
    if probe {
        let mut meta = txn.open_table(META).map_err(storage)?;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        meta.insert(PROBE_KEY, stamp).map_err(storage)?;
    }
    txn.commit().map_err(storage)
}

fn apply_all<'a>(
    txn: &WriteTransaction,
    ops: impl Iterator<Item = &'a WriteOp>,
) -> Result<(), redb::Error> {
    let mut tenants = txn.open_table(TENANTS)?;
    let mut tombstones = txn.open_table(TOMBSTONES)?;
    let mut queues = txn.open_table(QUEUES)?;
    let mut queue_seq = txn.open_table(QUEUE_SEQ)?;
    let mut meta = txn.open_table(MSG_META)?;
    let mut body = txn.open_table(MSG_BODY)?;
    let mut dedup = txn.open_table(DEDUP)?;
    let mut payloads = txn.open_table(MSG_PAYLOAD)?;
    // Opened by the first operation that records a payload event.
    let mut events = None;
    // Opened only by the rare commits that carry a record.
    let mut records = None;
    // Opened only by commits that carry a publish or forget a topic.
    let mut topics = None;
    for op in ops {
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
                body.retain_in(range.clone(), |_, _| false)?;
                release_range(txn, &mut payloads, &mut events, range)?;
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
                    if let Some(row) = &m.payload {
                        let p = &row.payload;
                        payloads.insert(
                            (*uid, m.seq),
                            (p.key.as_str(), p.size, p.enveloped, row.message_id.as_str()),
                        )?;
                        EventLog::open(txn, &mut events)?.record(ADDED, &p.key, &row.message_id)?;
                    }
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
                    let released = payloads.remove((*uid, seq))?.map(|row| {
                        let (key, _, _, message_id) = row.value();
                        (key.to_owned(), message_id.to_owned())
                    });
                    if let Some((key, message_id)) = released {
                        EventLog::open(txn, &mut events)?.record(RELEASED, &key, &message_id)?;
                    }
                }
            }
            WriteOp::Purge { uid, below } => {
                let range = (*uid, 0)..(*uid, *below);
                meta.retain_in(range.clone(), |_, _| false)?;
                body.retain_in(range.clone(), |_, _| false)?;
                release_range(txn, &mut payloads, &mut events, range)?;
            }
            WriteOp::PutRecord {
                kind,
                key,
                version,
                value,
            } => {
                if records.is_none() {
                    records = Some(txn.open_table(RECORDS)?);
                }
                if let Some(table) = records.as_mut() {
                    table.insert((kind.as_str(), key.as_str()), (*version, value.as_str()))?;
                }
            }
            WriteOp::DeleteRecord { kind, key } => {
                if records.is_none() {
                    records = Some(txn.open_table(RECORDS)?);
                }
                if let Some(table) = records.as_mut() {
                    table.remove((kind.as_str(), key.as_str()))?;
                }
            }
            WriteOp::Transfer {
                from,
                to,
                next_seq,
                moves,
            } => {
                for arrival in moves {
                    let source = (*from, arrival.from_seq);
                    let record = meta.remove(source)?.map(|v| v.value().to_vec());
                    let content = body.remove(source)?.map(|v| v.value().to_vec());
                    // The move was decided on the index under the source's lock, which orders
                    // it before any removal of the message, so both rows exist; only a commit
                    // reported failed that reached the disk all the same (a failed final fsync)
                    // can have moved them already. Then there is nothing left to move.
                    let (Some(record), Some(content)) = (record, content) else {
                        tracing::warn!(
                            queue = from,
                            seq = arrival.from_seq,
                            "a message to move is no longer stored"
                        );
                        continue;
                    };
                    let mut record: MetaRecord = postcard::from_bytes(&record)
                        .map_err(|e| redb::Error::Corrupted(format!("message record: {e}")))?;
                    if let Some(sent_at) = arrival.sent_at {
                        record.sent_at = sent_at;
                    }
                    record.visible_at = arrival.visible_at;
                    record.dead_letter = arrival.dead_letter.clone();
                    let record = postcard::to_stdvec(&record)
                        .map_err(|e| redb::Error::Corrupted(format!("message record: {e}")))?;
                    let target = (*to, arrival.to_seq);
                    meta.insert(target, record.as_slice())?;
                    body.insert(target, content.as_slice())?;
                    // The payload goes with the message: a move releases nothing.
                    let payload = payloads.remove(source)?.map(|row| {
                        let (key, size, enveloped, message_id) = row.value();
                        (key.to_owned(), size, enveloped, message_id.to_owned())
                    });
                    if let Some((key, size, enveloped, message_id)) = payload {
                        payloads
                            .insert(target, (key.as_str(), size, enveloped, message_id.as_str()))?;
                    }
                }
                queue_seq.insert(*to, *next_seq)?;
            }
            WriteOp::Publish {
                topic,
                next_seq,
                dedup,
                forget,
                counts,
                failed,
            } => {
                let tables = TopicTables::open(txn, &mut topics)?;
                tables.publish(topic, *next_seq, dedup, forget, counts)?;
                for row in failed {
                    let log = EventLog::open(txn, &mut events)?;
                    log.record(ADDED, &row.payload.key, &row.message_id)?;
                    log.record(RELEASED, &row.payload.key, &row.message_id)?;
                }
            }
            WriteOp::AckPayloadEvents { upto } => {
                let log = EventLog::open(txn, &mut events)?;
                log.table.retain_in(..=*upto, |_, _| false)?;
            }
            WriteOp::ForgetTopic { topic } => {
                let tables = TopicTables::open(txn, &mut topics)?;
                tables.seq.remove(topic.as_str())?;
                // `topic` followed by NUL is the smallest first element above `topic`.
                let end = format!("{topic}\0");
                let rows = (
                    Bound::Included((topic.as_str(), "")),
                    Bound::Excluded((end.as_str(), "")),
                );
                tables.dedup.retain_in(rows, |_, _| false)?;
                tables.stats.retain_in(rows, |_, _| false)?;
            }
            WriteOp::ForgetTenantTopics { tenant } => {
                let tables = TopicTables::open(txn, &mut topics)?;
                // Every `"tenant/…"` key sorts from `"tenant/"` up to `"tenant0"` ('/' + 1).
                let prefix = format!("{tenant}/");
                let end = format!("{tenant}0");
                tables
                    .seq
                    .retain_in::<&str, _>(prefix.as_str()..end.as_str(), |_, _| false)?;
                let rows = (
                    Bound::Included((prefix.as_str(), "")),
                    Bound::Excluded((end.as_str(), "")),
                );
                tables.dedup.retain_in(rows, |_, _| false)?;
                tables.stats.retain_in(rows, |_, _| false)?;
            }
        }
    }
    EventLog::finish(txn, events)
}

/// A [`PayloadRef`] row of `msg_payload`, as its table hands it out.
type PayloadTable<'txn> = redb::Table<'txn, (u64, u64), (&'static str, u64, bool, &'static str)>;

/// Removes the payload rows of `range` (messages leaving the store for good), recording one
/// `Released` event per row.
fn release_range<'txn>(
    txn: &'txn WriteTransaction,
    payloads: &mut PayloadTable<'_>,
    events: &mut Option<EventLog<'txn>>,
    range: impl std::ops::RangeBounds<(u64, u64)>,
) -> Result<(), redb::Error> {
    let mut released = Vec::new();
    payloads.retain_in(range, |_, (key, _, _, message_id)| {
        released.push((key.to_owned(), message_id.to_owned()));
        false
    })?;
    for (key, message_id) in released {
        EventLog::open(txn, events)?.record(RELEASED, &key, &message_id)?;
    }
    Ok(())
}

/// The `payload_events` table and the next seq to hand out, opened by the first operation of a
/// commit that records (or acknowledges) an event; [`finish`](Self::finish) stores the counter.
struct EventLog<'txn> {
    table: redb::Table<'txn, u64, (u8, &'static str, &'static str)>,
    next: u64,
}

impl<'txn> EventLog<'txn> {
    fn open<'a>(
        txn: &'txn WriteTransaction,
        slot: &'a mut Option<Self>,
    ) -> Result<&'a mut Self, redb::Error> {
        if slot.is_none() {
            let next = txn
                .open_table(META)?
                .get(PAYLOAD_EVENTS_NEXT)?
                .map_or(1, |v| v.value());
            *slot = Some(Self {
                table: txn.open_table(PAYLOAD_EVENTS)?,
                next,
            });
        }
        slot.as_mut()
            .ok_or_else(|| redb::Error::Corrupted("payload events".into()))
    }

    fn record(&mut self, kind: u8, key: &str, message_id: &str) -> Result<(), redb::Error> {
        self.table.insert(self.next, (kind, key, message_id))?;
        self.next += 1;
        Ok(())
    }

    /// Stores the counter if anything was recorded (closing the table first).
    fn finish(txn: &WriteTransaction, log: Option<Self>) -> Result<(), redb::Error> {
        if let Some(log) = log {
            let next = log.next;
            drop(log);
            txn.open_table(META)?.insert(PAYLOAD_EVENTS_NEXT, next)?;
        }
        Ok(())
    }
}

/// The `topic_*` tables, opened together by the first operation of a commit that needs them.
struct TopicTables<'txn> {
    seq: redb::Table<'txn, &'static str, u64>,
    dedup: redb::Table<'txn, (&'static str, &'static str), (u64, u64, &'static str)>,
    stats: redb::Table<'txn, (&'static str, &'static str), (u64, u64, u64)>,
}

impl<'txn> TopicTables<'txn> {
    fn open<'a>(
        txn: &'txn WriteTransaction,
        slot: &'a mut Option<Self>,
    ) -> Result<&'a mut Self, redb::Error> {
        if slot.is_none() {
            *slot = Some(Self {
                seq: txn.open_table(TOPIC_SEQ)?,
                dedup: txn.open_table(TOPIC_DEDUP)?,
                stats: txn.open_table(TOPIC_STATS)?,
            });
        }
        slot.as_mut()
            .ok_or_else(|| redb::Error::Corrupted("topic tables".into()))
    }

    fn publish(
        &mut self,
        topic: &str,
        next_seq: Option<u64>,
        dedup: &[TopicDedupRecord],
        forget: &[String],
        counts: &[(String, SubscriptionStats)],
    ) -> Result<(), redb::Error> {
        for id in forget {
            self.dedup.remove((topic, id.as_str()))?;
        }
        if let Some(next_seq) = next_seq {
            let stored = self.seq.get(topic)?.map_or(0, |v| v.value());
            self.seq.insert(topic, next_seq.max(stored))?;
        }
        for r in dedup {
            self.dedup.insert(
                (topic, r.id.as_str()),
                (r.accepted_at, r.seq, r.message_id.as_str()),
            )?;
        }
        for (subscription, delta) in counts {
            let key = (topic, subscription.as_str());
            let (delivered, filtered_out, failed) =
                self.stats.get(key)?.map_or((0, 0, 0), |v| v.value());
            self.stats.insert(
                key,
                (
                    delivered + delta.delivered,
                    filtered_out + delta.filtered_out,
                    failed + delta.failed,
                ),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// How many topic deduplication records the (closed) file at `path` holds.
    pub(crate) fn topic_dedup_rows(path: &Path) -> u64 {
        let db = Database::create(path).unwrap();
        let txn = db.begin_read().unwrap();
        txn.open_table(TOPIC_DEDUP).unwrap().iter().unwrap().count() as u64
    }

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
                dead_letter: None,
            })
            .unwrap();
            // And without format 3's last field (`None` too).
            assert_eq!(record.pop(), Some(0));
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

    /// Writes a format-2 file holding FIFO queue `t/old.fifo` (uid 43, content-based
    /// deduplication, message-group scope) with one message of group `g`, deduplication id
    /// `d`; answers the uid and the message's seq.
    pub(crate) fn write_format_2(path: &Path) -> (u64, u64) {
        let (uid, seq) = (43, 9);
        let db = Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert(FORMAT_KEY, 2).unwrap();
            let record = QueueRecordV2 {
                uid,
                config: QueueConfigV2 {
                    visibility_timeout_seconds: 45,
                    message_retention_seconds: 345_600,
                    delay_seconds: 0,
                    receive_wait_seconds: 0,
                    max_message_bytes: 1024,
                    max_depth: Some(10),
                    tags: BTreeMap::from([("team".to_owned(), "a".to_owned())]),
                    content_based_deduplication: true,
                    deduplication_scope: DeduplicationScope::MessageGroup,
                },
                created_at: 0,
                updated_at: 0,
            };
            let mut queues = txn.open_table(QUEUES).unwrap();
            queues
                .insert("t/old.fifo", encode(&record).unwrap().as_slice())
                .unwrap();
            let mut queue_seq = txn.open_table(QUEUE_SEQ).unwrap();
            queue_seq.insert(uid, seq + 1).unwrap();
            // Format 2's message record is format 3's without its last field (`None`).
            let mut record = encode(&MetaRecord {
                sent_at: 0,
                visible_at: 0,
                size: 8,
                message_id: "id-old".into(),
                group_id: Some("g".into()),
                deduplication_id: Some("d".into()),
                dead_letter: None,
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
            let mut dedup = txn.open_table(DEDUP).unwrap();
            dedup.insert((uid, "g", "d"), (0, seq, "id-old")).unwrap();
        }
        txn.commit().unwrap();
        (uid, seq)
    }
}
