//! Opening an engine: reading the catalog and rebuilding every queue's in-memory index (and FIFO
//! deduplication records) and every topic's state from disk, and keeping a file-size limit from
//! ending the process.

use crate::catalog::{QueueMap, TombstoneMap};
use crate::fifo::{DedupEntry, DedupKey};
use crate::index::QueueState;
use crate::queue_entry::{QueueDue, QueueEntry};
use crate::store::{self, Store};
use crate::topic_entry::{TopicDue, TopicEntry, TopicMap, TopicState};
use crate::{secret, EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{EngineError, Millis, QueueKey, QueueName, TenantId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

impl EmbeddedEngine {
    /// Opens the engine on what `open` opens (again after a failed write); `label` names it in
    /// logs.
    pub(crate) fn open_with(
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
                    state.load(
                        seq,
                        meta.sent_at,
                        meta.visible_at,
                        size_u32(meta.size),
                        meta.group_id.as_deref(),
                    );
                } else {
                    let times = store::meta_times(bytes)?;
                    state.load(
                        seq,
                        times.sent_at,
                        times.visible_at,
                        size_u32(times.size),
                        None,
                    );
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

        let topic_due = Arc::new(TopicDue::default());
        let mut topics = TopicMap::new();
        for (text, stored) in store::read_topics(&db)? {
            let key = parse_queue_key(&text)?;
            let state = TopicState::load(stored.next_seq, stored.dedup, stored.stats);
            topics
                .entry(key.tenant)
                .or_default()
                .insert(key.name, TopicEntry::new(text, state, &topic_due));
        }

        let queue_due = Arc::new(QueueDue::default());
        let mut queues = QueueMap::new();
        for (uid, (key, created_at, state)) in by_uid {
            let entry = QueueEntry::new(uid, created_at, state, &queue_due);
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
            topics = topics.values().map(HashMap::len).sum::<usize>(),
            "embedded engine opened"
        );
        Ok(Self {
            store: Store::start(db, options.commit_mode, open)?,
            queues: Arc::new(RwLock::new(queues)),
            tenants: Arc::new(RwLock::new(tenants)),
            tombstones: Arc::new(RwLock::new(tombstones)),
            topics: Mutex::new(topics),
            queue_due,
            topic_due,
            admin: tokio::sync::Mutex::new(()),
            handle_key,
        })
    }
}

/// Writing past a file-size limit (`RLIMIT_FSIZE`) raises SIGXFSZ, whose default action ends
/// the process. With a handler registered (it stays for the life of the process) the write
/// fails with `EFBIG` instead, which the commit thread answers with 503s and recovers from once
/// the limit allows writes again. Needs a tokio runtime; without one the default stays.
pub(crate) fn survive_file_size_limit() {
    #[cfg(unix)]
    if tokio::runtime::Handle::try_current().is_ok() {
        let kind = tokio::signal::unix::SignalKind::from_raw(libc::SIGXFSZ);
        if let Err(e) = tokio::signal::unix::signal(kind) {
            tracing::warn!(error = %e, "cannot catch SIGXFSZ: a file-size limit will end the process");
        }
    }
}

/// A `"tenant/name"` key of the `queues` or `topic_*` tables.
fn parse_queue_key(text: &str) -> Result<QueueKey, EngineError> {
    let corrupt = || EngineError::Internal(format!("corrupt queue or topic key {text:?}"));
    let (tenant, name) = text.split_once('/').ok_or_else(corrupt)?;
    Ok(QueueKey::new(
        TenantId::parse(tenant).map_err(|_| corrupt())?,
        QueueName::parse(name).map_err(|_| corrupt())?,
    ))
}

/// A stored size as the index keeps it (messages are at most 64 MiB; saturating is only a
/// guard against a corrupt record).
fn size_u32(size: u64) -> u32 {
    u32::try_from(size).unwrap_or(u32::MAX)
}
