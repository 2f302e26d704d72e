//! [`TopicEntry`]: what the engine keeps in memory about one topic incarnation — the FIFO
//! sequence counter, the deduplication records of the last
//! [`DEDUPLICATION_WINDOW_MS`](sluice_engine::DEDUPLICATION_WINDOW_MS) and the subscriptions'
//! counters — behind the mutex that orders a topic's publishes. Pure data, no I/O: `ops/publish.rs`
//! pairs each change with a write to the store (the `topic_*` tables of `store.rs`), and
//! `open.rs` rebuilds it from those tables.
//!
//! As for queues, memory follows the commit: deduplication records are taken at once (so a
//! concurrent publish with the same id is already a duplicate) and confirmed or dropped with the
//! commit's outcome; counters change only once their commit is durable.

use crate::due::{Due, DueGuard, DueIndex, Filed, Slot};
use crate::fifo::{Dedup, DedupEntry, DedupKey};
use sluice_engine::{Millis, QueueName, SubscriptionStats, TenantId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};

/// Per tenant, the topics that have state (or are being published to).
pub(crate) type TopicMap = HashMap<TenantId, HashMap<QueueName, Arc<TopicEntry>>>;

/// The topics' due index (see `due.rs`): FIFO topics by when their oldest deduplication
/// record's window ends.
pub(crate) type TopicDue = DueIndex<TopicEntry>;

/// A topic's state, locked; releasing it files the topic in the due index if its oldest
/// deduplication record's end came forward.
pub(crate) type TopicGuard<'a> = DueGuard<'a, TopicState, TopicEntry>;

/// One topic incarnation in memory.
pub(crate) struct TopicEntry {
    /// `"tenant/name"`, as the `topic_*` tables key it.
    pub(crate) key: String,
    state: Mutex<Filed<TopicState>>,
    /// Where the sweep finds it.
    due: Slot<TopicEntry>,
}

impl TopicEntry {
    /// The entry of topic `key` (`"tenant/name"`), filed in `due` if its state already has
    /// deduplication records (loaded at start-up).
    pub(crate) fn new(key: String, state: TopicState, due: &Arc<TopicDue>) -> Arc<Self> {
        let entry = Arc::new_cyclic(|me: &Weak<Self>| Self {
            key,
            state: Mutex::new(Filed::new(state)),
            due: Slot {
                index: Arc::clone(due),
                id: due.new_id(),
                me: Weak::clone(me),
            },
        });
        drop(entry.lock());
        entry
    }

    /// Held by a publish from its sequence numbers until its copies are submitted, so every
    /// queue receives a FIFO topic's copies in sequence-number order.
    pub(crate) fn lock(&self) -> TopicGuard<'_> {
        // A panic under this lock leaves at worst a stale record, never a broken store
        // (poisoning is ignored).
        DueGuard::lock(&self.state, &self.due)
    }
}

impl Due for TopicState {
    fn next_due(&self) -> Millis {
        self.dedup.next_due()
    }

    fn gone(&self) -> bool {
        self.deleted
    }
}

/// The state of one topic incarnation.
#[derive(Debug)]
pub(crate) struct TopicState {
    /// Set once the topic (or its tenant) is deleted: a publish that looked the entry up before
    /// takes the successor's instead, which starts afresh.
    pub deleted: bool,
    /// FIFO topics: the sequence number the next publication gets.
    next_seq: u64,
    /// FIFO topics: by deduplication id (the key's group is always empty), the publication it
    /// was first accepted for, with the topic's sequence number as its seq.
    dedup: Dedup,
    /// Committed counters by subscription id.
    stats: BTreeMap<String, SubscriptionStats>,
    /// Whether anything was loaded or submitted for this incarnation (what `delete_topic`
    /// answers).
    touched: bool,
}

impl Default for TopicState {
    fn default() -> Self {
        Self {
            deleted: false,
            next_seq: 1,
            dedup: Dedup::default(),
            stats: BTreeMap::new(),
            touched: false,
        }
    }
}

/// The deduplication key of a topic-wide id.
pub(crate) fn topic_dedup_key(id: &str) -> DedupKey {
    DedupKey {
        group: String::new(),
        id: id.to_owned(),
    }
}

impl TopicState {
    /// The state found on disk at start-up.
    pub(crate) fn load(
        next_seq: Option<u64>,
        dedup: Vec<(String, DedupEntry)>,
        stats: BTreeMap<String, SubscriptionStats>,
    ) -> Self {
        let mut state = Self {
            touched: true,
            stats,
            ..Self::default()
        };
        state.next_seq = next_seq.unwrap_or(1).max(1);
        for (_, entry) in &dedup {
            // Never hand out a seq a recorded publication has (the counter is written in the
            // same commit, so this only guards against a damaged file).
            state.next_seq = state.next_seq.max(entry.seq.saturating_add(1));
        }
        state.dedup.load(
            dedup
                .into_iter()
                .map(|(id, entry)| (topic_dedup_key(&id), entry))
                .collect(),
        );
        state
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The publication `id` was accepted for within the window before `now`, if any.
    pub(crate) fn find(&self, id: &str, now: Millis) -> Option<&DedupEntry> {
        self.dedup.find(&topic_dedup_key(id), now)
    }

    /// Gives a publication (FIFO topics) sequence number `seq`, at least the next one, as planned
    /// under this lock; records its deduplication id (not yet committed) when it has one.
    pub(crate) fn accept(&mut self, seq: u64, id: Option<&str>, message_id: &str, now: Millis) {
        self.next_seq = self.next_seq.max(seq.saturating_add(1));
        self.touched = true;
        if let Some(id) = id {
            self.dedup.record(
                topic_dedup_key(id),
                DedupEntry {
                    accepted_at: now,
                    seq,
                    message_id: message_id.to_owned(),
                    committed: false,
                },
            );
        }
    }

    /// A publish is about to be submitted (what `delete_topic` answers).
    pub(crate) fn touch(&mut self) {
        self.touched = true;
    }

    /// The publish that recorded `accepted` (`(deduplication id, seq)`) and counted `counts`
    /// is durable.
    pub(crate) fn commit(
        &mut self,
        accepted: &[(String, u64)],
        counts: &[(String, SubscriptionStats)],
    ) {
        for (id, seq) in accepted {
            self.dedup.commit(&topic_dedup_key(id), *seq);
        }
        for (subscription, delta) in counts {
            let stats = self.stats.entry(subscription.clone()).or_default();
            stats.delivered += delta.delivered;
            stats.filtered_out += delta.filtered_out;
            stats.failed += delta.failed;
        }
    }

    /// The publish that recorded `accepted` failed: those ids are free again. (Its sequence
    /// numbers stay used: they need only increase.)
    pub(crate) fn abandon(&mut self, accepted: &[(String, u64)]) {
        for (id, seq) in accepted {
            self.dedup.forget(&topic_dedup_key(id), *seq);
        }
    }

    /// Whether `id` is recorded, durably, for the publication of `seq` (a duplicate's original).
    pub(crate) fn confirmed(&self, id: &str, seq: u64) -> bool {
        self.dedup.confirmed(&topic_dedup_key(id), seq)
    }

    /// Drops the committed deduplication records whose window ended by `now`; answers their
    /// ids, for the store to delete.
    pub(crate) fn prune(&mut self, now: Millis) -> Vec<String> {
        self.dedup
            .prune(now)
            .into_iter()
            .map(|key| key.id)
            .collect()
    }

    pub(crate) fn stats(&self) -> &BTreeMap<String, SubscriptionStats> {
        &self.stats
    }

    /// Whether this incarnation has (or may have) anything to forget.
    pub(crate) fn touched(&self) -> bool {
        self.touched
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::DEDUPLICATION_WINDOW_MS;

    #[test]
    fn ids_are_taken_at_once_and_freed_by_a_failed_commit() {
        let mut state = TopicState::default();
        assert_eq!(state.next_seq(), 1);
        state.accept(1, Some("d"), "m-1", 0);
        let seq = 1;
        let original = state.find("d", 1).unwrap();
        assert_eq!((original.seq, original.committed), (1, false));
        state.abandon(&[("d".into(), seq)]);
        assert!(state.find("d", 1).is_none());
        // Sequence numbers never go back, even past a failed commit.
        assert_eq!(state.next_seq(), 2);
        state.accept(2, Some("d"), "m-2", 1);
        state.commit(&[("d".into(), 2)], &[]);
        assert!(state.confirmed("d", 2));
        assert_eq!(state.find("d", DEDUPLICATION_WINDOW_MS).unwrap().seq, 2);
        assert!(state.find("d", DEDUPLICATION_WINDOW_MS + 1).is_none());
        assert_eq!(state.prune(DEDUPLICATION_WINDOW_MS + 1), vec!["d"]);
    }

    #[test]
    fn counters_add_up_only_on_commit() {
        let mut state = TopicState::default();
        let delta = SubscriptionStats {
            delivered: 1,
            filtered_out: 0,
            failed: 2,
        };
        state.commit(&[], &[("s".into(), delta)]);
        state.commit(&[], &[("s".into(), delta)]);
        assert_eq!(
            state.stats()["s"],
            SubscriptionStats {
                delivered: 2,
                filtered_out: 0,
                failed: 4
            }
        );
    }

    #[test]
    fn loading_never_reuses_a_recorded_seq() {
        let entry = DedupEntry {
            accepted_at: 0,
            seq: 9,
            message_id: "m".into(),
            committed: true,
        };
        let state = TopicState::load(Some(3), vec![("d".into(), entry)], BTreeMap::new());
        assert_eq!(state.next_seq(), 10);
        assert!(state.touched());
    }
}
