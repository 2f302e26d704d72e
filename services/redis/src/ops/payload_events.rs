//! Payload events on Redis: where they are written, how readers find them, and why none is
//! lost or counted twice.
//!
//! **Logs.** Every queue and every topic has its own log, a stream in its own slot
//! (`{P:<tenant>:<queue>}:plog`, `{P:<tenant>:topic:<topic>}:plog`), written by the script that
//! makes the change an event describes, so the event and the change are one atomic step: the
//! queue prelude (`queue.lua`) appends `A` when `send.lua` stores a message with a payload and
//! `R` whenever a payload message leaves for good (`remove_message` outside moves: delete,
//! expiry — also the receive- and move-time removal of expired messages — and `release_all`
//! before a purge, a queue deletion or a re-creation drops the `pay` hash); `publish.lua`
//! appends one `A` per delivery of a new publication with a payload into the topic's log, and
//! `fanout_ack.lua` one `R` per copy no queue took, once per entry whoever acknowledges. Moves
//! (`transfer_out`/`transfer_apply`/`transfer_revert`) and fan-out applies carry the `pay`
//! entry and append nothing; a repeated apply finds its id applied and changes nothing, so no
//! recovery path records an event twice. Each entry holds `k` (`A` or `R`) and `t`, the
//! payload tag `<len(message id)>:<message id><payload key>` (the value of the `pay` hash).
//! A log is not one of its queue's keys: a queue deletion leaves it, with the deletion's
//! `R` events in it.
//!
//! **Moves whose source goes.** A message in a move's intent (the source's `out` hash) is in
//! no queue's `pay`: if the source is deleted (or re-created, or its tenant deleted: the same
//! scripts) before the ack, `out` goes with it, and whether the message lives on depends on
//! whether the apply ran in the destination's slot — which the source's script cannot see.
//! Releasing it there could free an object the destination still names; not releasing it
//! leaked it (nothing named it any more, and its ledger record kept its holder). So the
//! deletion appends, per intent carrying a payload, an `M` ("maybe released") entry: `t`,
//! `x` (the transfer id), `q` (the source's `<tenant>/<queue>`), `d` (the destination's
//! name, resolved as the move resolves it) and `at` (the intent's time). A reader does not
//! hand an `M` out: before answering its batch it settles it in the destination's slot
//! (`transfer_settle.lua`), which, atomically with any apply of the same transfer, either
//! finds the id in `applied` or the tag in `pay` (the destination holds or held the message
//! and releases it itself) or records the id as applied — a void, so a late apply by a mover that still held
//! the intent inserts nothing — and appends the `R` to the destination's log (registered
//! first). The `R` is thus written once per entry, whoever settles and however often: two
//! gateways reading the same entry, or one that crashed before acknowledging, find the id
//! recorded the second time. An `M` is trimmed only with a batch answered after its settle.
//! `applied` outlives a destination's deletion for its window, and a settle into a queue that
//! does not exist (deleted, or never created) keeps it alive for the window too, so a missing
//! destination is settled like any other. An apply's id is forgotten a window (a day) after
//! it, so before voiding the settle also looks for the tag in the destination's `pay`: an
//! entry read late (readers stopped for a day) is not taken for a void while the destination
//! still holds the message (one `HVALS`, only on the void path). A read that finds only `M`
//! entries acknowledges them itself and reads again, so an empty batch still means nothing
//! is pending.
//!
//! **Registry.** `{P}:payload-logs` is the set of logs that may hold events. A log is added
//! (`SADD`, by the Rust side, remembered per process so it costs one round trip per log per
//! process) *before* the first script that may write to it: a send, a transfer apply or a
//! fan-out apply carrying a payload (for the queue's log: from then on the queue's `pay` hash
//! may be non-empty, and every later removal may release), and a publish with a payload (for
//! the topic's log: its `A` events and its copies' `R` at the ack). A log is **never removed**
//! from the registry. Removing one safely would need a check in the log's slot that no writer
//! can pass afterwards without registering again, and a writer that trusts its per-process
//! cache would not register again; every scheme that compares tokens across the two slots
//! either strands an event written between the check and the removal or makes gateways
//! re-register each other's logs in turn. Never removing costs one set member per queue or
//! topic that ever held a payload (and its stream key, emptied by acknowledgements); in
//! exchange the argument is one line: every event is written into a log that was registered
//! before, and stays registered, so a reader walking the registry finds it.
//!
//! **Pending set.** Walking the whole registry on every read made a read cost one `XRANGE`
//! per queue or topic that ever held a payload (10,000 such → 2,000 `XRANGE`/s per gateway
//! at a 5 s round, forever). So reads walk `{P}:payload-pending` instead, the logs that may
//! hold unacknowledged entries, and the registry only on every [`FULL_WALK_EVERY`]th read
//! of a process (its first read included). A process notes in memory each log a script it
//! ran may have appended to (a send, a publish with a payload and a settle: always; a delete,
//! purge, expiry, queue deletion or re-creation, fan-out ack: when the log is known to be
//! registered), and its next read adds them with one `SADD` — no write pays a round trip. A
//! read that finds a pending log empty removes it (`SREM`). Pending marks are only a
//! shortcut: losslessness still rests on the registry, since every event is in a registered
//! log and the full walk puts every registered log holding an entry (`XLEN` each) back into
//! the pending set. What the shortcut misses waits at most for the next full walk (about 5
//! minutes at one read per 5 s): an append whose process died before its next read, one a
//! process did not note (the rare release of an expired message at a receive or a move's
//! intent; a log registered by another process since this one last saw it in the registry
//! or the pending set), and one whose mark another reader removed between finding the log
//! empty and its `SREM`.
//!
//! **Reading and acknowledging.** [`payload_events`](RedisEngine::payload_events) walks the
//! pending set from a random member (so a busy log does not starve the others) and reads each
//! log from its start (`XRANGE`), until it has about `limit` events; the batch's cursor holds,
//! per log read, `<log key> <last id read>`. A log's ids grow with every append, so what a
//! read sees of a log is a prefix of it, and
//! [`ack_payload_events`](RedisEngine::ack_payload_events) removes exactly that prefix with
//! `XTRIM MINID` (ids up to the last read): entries appended after the read have larger ids
//! and stay, and trimming a prefix already trimmed (a second acknowledgement, or another
//! gateway's) removes nothing else. A call costs one `SMEMBERS` of the pending set, one
//! `SADD` if this process wrote since its last read, one `XRANGE` per pending log it reaches
//! before the limit (16 at a time) and one `SREM` if some were empty: with nothing pending,
//! one command, whatever the number of logs that ever held a payload; every
//! [`FULL_WALK_EVERY`]th call adds one `SMEMBERS` and one `XLEN` per registered log.
//! Readers are expected to call it on a timer of seconds, not per request.

use super::calls::FAN_OUT;
use super::transfer_settle::Unsettled;
use crate::keys::Keys;
use crate::RedisEngine;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use sluice_engine::{
    EngineError, Millis, PayloadEvent, PayloadEventBatch, PayloadEventKind, PayloadRef, QueueKey,
    QueueName, TopicKey,
};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The `pay` value and event tag of a message with a payload: the message id, length-prefixed,
/// then the payload key (opaque: any characters); `''` without a payload.
pub(crate) fn payload_tag(message_id: &str, payload: Option<&PayloadRef>) -> String {
    payload.map_or_else(String::new, |p| {
        format!("{}:{message_id}{}", message_id.len(), p.key)
    })
}

/// The inverse of [`payload_tag`]: `(message id, payload key)`.
fn parse_tag(tag: &str) -> Option<(String, String)> {
    let (len, rest) = tag.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let (message_id, key) = (rest.get(..len)?, rest.get(len..)?);
    Some((message_id.to_owned(), key.to_owned()))
}

/// What this process knows of the payload logs: those known to be registered (by it, or seen
/// in the registry or the pending set), those it wrote to since it last told the pending set,
/// and how many reads it made (every [`FULL_WALK_EVERY`]th walks the whole registry).
#[derive(Debug, Default)]
pub(crate) struct KnownLogs {
    registered: Mutex<HashSet<String>>,
    written: Mutex<HashSet<String>>,
    reads: AtomicU64,
}

impl KnownLogs {
    fn contains(&self, log: &str) -> bool {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(log)
    }

    fn insert_all(&self, logs: impl IntoIterator<Item = String>) {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(logs);
    }

    fn written(&self, log: String) {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(log);
    }

    fn take_written(&self) -> HashSet<String> {
        std::mem::take(&mut *self.written.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Every how many reads of this process one walks the whole registry instead of the pending
/// set (the first read does too): with the collector's round of 5 s, about every 5 minutes.
/// It finds the events a process appended but never told the pending set of (it died first,
/// or the script was one whose writes are not noted), and those whose pending mark a reader
/// removed while they were being appended.
pub const FULL_WALK_EVERY: u64 = 60;

/// How many reads one call makes at most while each finds only `M` entries (settled, then
/// forgotten) before answering an empty batch; the rest wait for the next call.
const MAX_SETTLE_ONLY_READS: usize = 4;

/// One log's entries as `XRANGE` answers them: id, then field/value pairs.
type StreamEntries = Vec<(String, Vec<String>)>;

impl RedisEngine {
    /// Registers `log` unless this process did before; call before a script that may write to
    /// a log not known to be registered.
    async fn register_payload_log(&self, log: String) -> Result<(), EngineError> {
        if self.payload_logs.contains(&log) {
            return Ok(());
        }
        let mut add = redis::cmd("SADD");
        add.arg(self.keys.payload_logs()).arg(&log);
        self.redis.query::<i64>(&add).await?;
        self.payload_logs.insert_all([log]);
        Ok(())
    }

    /// Notes that a script just appended (or may have) to `log`: the next read of this
    /// process adds it to the pending set. In memory only, so no write pays a round trip.
    pub(crate) fn payload_log_written(&self, log: String) {
        self.payload_logs.written(log);
    }

    /// After a script that may have released payload messages of the queue: noted as written
    /// if its log is known to be registered (a queue that never held a payload has no events;
    /// one registered elsewhere since this process last looked is found by the full walk).
    pub(crate) fn queue_payload_log_touched(&self, key: &QueueKey) {
        let log = self.keys.queue_payload_log(key);
        if self.payload_logs.contains(&log) {
            self.payload_log_written(log);
        }
    }

    /// [`queue_payload_log_touched`](Self::queue_payload_log_touched) for a topic's log.
    pub(crate) fn topic_payload_log_touched(&self, topic: &TopicKey) {
        let log = self.keys.topic_payload_log(topic);
        if self.payload_logs.contains(&log) {
            self.payload_log_written(log);
        }
    }

    /// Tells the pending set of the logs this process wrote to since it last did (one `SADD`,
    /// none if it wrote nothing); they stay noted if that fails.
    async fn flush_written_logs(&self) -> Result<(), EngineError> {
        let written = self.payload_logs.take_written();
        if written.is_empty() {
            return Ok(());
        }
        let mut add = redis::cmd("SADD");
        add.arg(self.keys.payload_pending())
            .arg(written.iter().collect::<Vec<_>>());
        if let Err(e) = self.redis.query::<i64>(&add).await {
            for log in written {
                self.payload_logs.written(log);
            }
            return Err(e);
        }
        Ok(())
    }

    /// The full walk: every registered log that holds an entry goes into the pending set
    /// (`XLEN` per log, 16 at a time, then one `SADD`).
    async fn walk_registry(&self) -> Result<(), EngineError> {
        let mut members = redis::cmd("SMEMBERS");
        members.arg(self.keys.payload_logs());
        let logs: Vec<String> = self.redis.query(&members).await?;
        self.payload_logs.insert_all(logs.iter().cloned());
        let lengths: Vec<(String, u64)> = stream::iter(logs)
            .map(|log| async move {
                let mut len = redis::cmd("XLEN");
                len.arg(&log);
                let n: u64 = self.redis.query(&len).await?;
                Ok::<_, EngineError>((log, n))
            })
            .buffered(FAN_OUT)
            .try_collect()
            .await?;
        let holding: Vec<String> = lengths
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(log, _)| log)
            .collect();
        if !holding.is_empty() {
            let mut add = redis::cmd("SADD");
            add.arg(self.keys.payload_pending()).arg(holding);
            self.redis.query::<i64>(&add).await?;
        }
        Ok(())
    }

    /// Registers the queue's log before a script that may leave a payload message in it.
    pub(crate) async fn register_queue_payload_log(
        &self,
        key: &QueueKey,
    ) -> Result<(), EngineError> {
        self.register_payload_log(self.keys.queue_payload_log(key))
            .await
    }

    /// Registers the topic's log before a publish with a payload.
    pub(crate) async fn register_topic_payload_log(
        &self,
        topic: &TopicKey,
    ) -> Result<(), EngineError> {
        self.register_payload_log(self.keys.topic_payload_log(topic))
            .await
    }

    pub(crate) async fn payload_events(
        &self,
        limit: usize,
    ) -> Result<PayloadEventBatch, EngineError> {
        // A read that found only `M` entries settled them all and has no event to hand out:
        // its cursor is forgotten here (what it covers is settled in the destinations' slots)
        // and the logs read again, so an empty batch still means "nothing pending" to callers.
        let read = self.payload_logs.reads.fetch_add(1, Ordering::Relaxed);
        if read.is_multiple_of(FULL_WALK_EVERY) {
            self.walk_registry().await?;
        }
        for _ in 0..MAX_SETTLE_ONLY_READS {
            // Each pass: a settle may just have written to a destination's log.
            self.flush_written_logs().await?;
            let batch = self.read_payload_events(limit).await?;
            if !batch.events.is_empty() || batch.cursor.is_empty() {
                return Ok(batch);
            }
            self.ack_payload_events(&batch).await?;
        }
        Ok(PayloadEventBatch::default())
    }

    async fn read_payload_events(&self, limit: usize) -> Result<PayloadEventBatch, EngineError> {
        let mut batch = PayloadEventBatch::default();
        if limit == 0 {
            return Ok(batch);
        }
        let mut members = redis::cmd("SMEMBERS");
        members.arg(self.keys.payload_pending());
        let mut logs: Vec<String> = self.redis.query(&members).await?;
        if logs.is_empty() {
            return Ok(batch);
        }
        // Only registered logs are ever pending: what a write here should note from now on.
        self.payload_logs.insert_all(logs.iter().cloned());
        logs.sort();
        let start = rand::Rng::gen_range(&mut rand::thread_rng(), 0..logs.len());
        logs.rotate_left(start);
        let limit_per_log = limit;
        let mut reads = stream::iter(logs)
            .map(|log| async move {
                let mut range = redis::cmd("XRANGE");
                range
                    .arg(&log)
                    .arg("-")
                    .arg("+")
                    .arg("COUNT")
                    .arg(limit_per_log);
                let entries: StreamEntries = self.redis.query(&range).await?;
                Ok::<_, EngineError>((log, entries))
            })
            .buffered(FAN_OUT);
        let mut unsettled: BTreeMap<QueueKey, Vec<Unsettled>> = BTreeMap::new();
        let mut drained = Vec::new();
        while let Some((log, entries)) = reads.try_next().await? {
            if entries.is_empty() {
                drained.push(log);
                continue;
            }
            let room = limit - batch.events.len();
            let mut last = None;
            for (id, fields) in entries.into_iter().take(room) {
                match parse_entry(&log, &id, &fields)? {
                    Entry::Event(event) => batch.events.push(event),
                    Entry::Maybe(destination, entry) => {
                        unsettled.entry(destination).or_default().push(entry);
                    }
                }
                last = Some(id);
            }
            if let Some(id) = last {
                batch.cursor.push(format!("{log} {id}"));
            }
            if batch.events.len() >= limit {
                break;
            }
        }
        drop(reads);
        // Settled before the batch is answered, so before its cursor can be acknowledged: an
        // `M` entry is trimmed only once its destination's slot has decided it (and appended
        // the `R` there if it released it). The `R` is read like any other, later.
        for (destination, entries) in unsettled {
            self.transfer_settle(&destination, &entries).await?;
        }
        // A log found empty leaves the pending set until a write notes it again. One written
        // between the read and this removal loses its mark: the full walk finds it.
        if !drained.is_empty() {
            let mut remove = redis::cmd("SREM");
            remove.arg(self.keys.payload_pending()).arg(drained);
            self.redis.query::<i64>(&remove).await?;
        }
        Ok(batch)
    }

    pub(crate) async fn ack_payload_events(
        &self,
        batch: &PayloadEventBatch,
    ) -> Result<(), EngineError> {
        stream::iter(batch.cursor.iter().cloned())
            .map(|position| self.trim_payload_log(position))
            .buffer_unordered(FAN_OUT)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }
}

impl RedisEngine {
    /// Removes the prefix of one log that a cursor position (`<log key> <last id read>`) says
    /// was read.
    async fn trim_payload_log(&self, position: String) -> Result<(), EngineError> {
        let bad = || EngineError::Internal(format!("not a payload cursor: {position:?}"));
        let (log, id) = position.rsplit_once(' ').ok_or_else(bad)?;
        let (ms, seq) = id.split_once('-').ok_or_else(bad)?;
        let (ms, seq): (u64, u64) = (
            ms.parse().map_err(|_| bad())?,
            seq.parse().map_err(|_| bad())?,
        );
        // MINID keeps ids >= the threshold: the one just after the last read.
        let next = match seq.checked_add(1) {
            Some(seq) => format!("{ms}-{seq}"),
            None => format!("{}-0", ms.saturating_add(1)),
        };
        let mut trim = redis::cmd("XTRIM");
        trim.arg(log).arg("MINID").arg(next);
        self.redis.query::<i64>(&trim).await.map(|_| ())
    }
}

/// One log entry as a reader takes it.
enum Entry {
    /// An `A` or `R`: handed out as is.
    Event(PayloadEvent),
    /// An `M` ("maybe released", `release_intents` in `queue.lua`): settled in the
    /// destination's slot before the batch is answered.
    Maybe(QueueKey, Unsettled),
}

fn parse_entry(log: &str, id: &str, fields: &[String]) -> Result<Entry, EngineError> {
    let corrupt = || EngineError::Internal(format!("corrupt payload event {id} in {log}"));
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|pair| pair[0] == name)
            .and_then(|pair| pair.get(1))
    };
    let tag = field("t").ok_or_else(corrupt)?;
    let (message_id, key) = parse_tag(tag).ok_or_else(corrupt)?;
    let kind = match field("k").map(String::as_str) {
        Some("A") => PayloadEventKind::Added,
        Some("R") => PayloadEventKind::Released,
        Some("M") => {
            let transfer_id = field("x").ok_or_else(corrupt)?;
            let source = field("q")
                .and_then(|q| Keys::parse_queue_id(q))
                .ok_or_else(corrupt)?;
            let at: Millis = field("at")
                .and_then(|at| at.parse().ok())
                .ok_or_else(corrupt)?;
            let entry = Unsettled {
                transfer_id: transfer_id.clone(),
                tag: tag.clone(),
                at,
            };
            return match field("d").and_then(|d| QueueName::parse(d).ok()) {
                Some(name) => Ok(Entry::Maybe(QueueKey::new(source.tenant, name), entry)),
                // No queue can have that name, so no apply into it ever ran (a move resolves
                // its destination the same way and reverts when it cannot): the source's
                // deletion was the message's end.
                None => Ok(Entry::Event(PayloadEvent {
                    kind: PayloadEventKind::Released,
                    key,
                    message_id,
                })),
            };
        }
        _ => return Err(corrupt()),
    };
    Ok(Entry::Event(PayloadEvent {
        kind,
        key,
        message_id,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_whatever_the_key_holds() {
        let payload = PayloadRef {
            key: "t/00ff: odd 9:key".into(),
            size: 3,
            enveloped: false,
        };
        let tag = payload_tag("msg:1", Some(&payload));
        assert_eq!(
            parse_tag(&tag),
            Some(("msg:1".to_owned(), payload.key.clone()))
        );
        assert_eq!(payload_tag("m", None), "");
        assert_eq!(parse_tag("x"), None);
        assert_eq!(parse_tag("9:short"), None);
    }
}
