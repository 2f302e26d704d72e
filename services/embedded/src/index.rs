//! The in-memory index of one queue: which messages exist, when each becomes receivable, and
//! its receive bookkeeping. Pure data structure, no I/O: the engine holds it under a mutex (in
//! `queue_entry.rs`) and its operations (`ops/`) pair each change with a write to the store.
//!
//! Message ids, group ids, bodies and attributes stay on disk; a message costs a fixed ~40-byte
//! [`MsgState`] plus its entries in two B-trees. Receive bookkeeping is deliberately volatile:
//! after a restart every message is visible again at its stored `visible_at`.
//!
//! FIFO queues also keep a [`Fifo`] (`fifo.rs`): each message's group (one more map entry per
//! message, and the group's name once per group), deduplication records and receive attempts.

use crate::fifo::{Attempt, DedupEntry, DedupKey, Fifo, MAX_MOVES_PER_RECEIVE};
use crate::message::{MsgState, Picked};
use sluice_engine::{HandleError, MessageState, Millis, QueueConfig, QueueStats, ReceiptHandle};
use std::collections::{BTreeMap, BTreeSet};
use tokio::sync::watch;

/// The result of one receive attempt on the index.
#[derive(Debug, Default)]
pub(crate) struct Pick {
    pub delivered: Vec<Picked>,
    /// Messages received `dead_letter_after` times or more, taken out of the index instead of
    /// delivered; the caller moves them to the dead-letter queue.
    pub taken: Vec<Taken>,
    /// Expired messages met on the way and dropped from the index; the caller deletes them
    /// from disk.
    pub expired: Vec<u64>,
    pub next_visible_at: Option<Millis>,
}

/// A message taken out of the index to be moved to another queue: what it takes to put it back
/// if the move fails.
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    pub seq: u64,
    pub state: MsgState,
    /// FIFO queues: its message group (`None` on standard queues).
    pub group: Option<String>,
}

/// How a receive treats what it finds, beyond the visibility timeout.
pub(crate) struct Redelivery<B: FnMut(u32) -> Millis> {
    /// Messages received this many times (or more) are taken out instead of delivered;
    /// `None`: every message is delivered.
    pub dead_letter_after: Option<u32>,
    /// Extra hiding for a delivery, by the receive count it reaches.
    pub backoff: B,
}

/// A message of a send whose commit completed (or failed), as the index needs it.
#[derive(Debug, Clone)]
pub(crate) struct Accepted {
    pub seq: u64,
    pub sent_at: Millis,
    pub visible_at: Millis,
    /// Its size as `max_message_bytes` counts it.
    pub size: u32,
    /// FIFO queues: the message group (`None` on standard queues, which ignore groups).
    pub group: Option<String>,
    /// FIFO queues: the deduplication key recorded for it, if any.
    pub dedup: Option<DedupKey>,
}

/// What [`QueueState::admit`] decided for one message of a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admission {
    /// To be stored under this seq.
    New(u64),
    /// A FIFO deduplication hit: the original's seq and id. `committed: false` while the
    /// original's send is not durable yet (the answer must wait for it).
    Duplicate {
        seq: u64,
        message_id: String,
        committed: bool,
    },
    /// Refused: the queue is full.
    Full,
}

/// Everything the engine keeps in memory about one queue incarnation.
#[derive(Debug)]
pub(crate) struct QueueState {
    pub config: QueueConfig,
    pub updated_at: Millis,
    /// Set once the queue is deleted; an operation that looked the queue up before the deletion
    /// sees it and answers "not found" instead of writing to a dead incarnation.
    pub deleted: bool,
    next_seq: u64,
    /// Messages accepted by sends whose commit has not completed; they count towards
    /// `max_depth` so concurrent sends cannot overshoot it.
    pending: u64,
    /// Seqs below this were purged; a send that was in flight during the purge must not add them
    /// to the index when its commit completes (the purge deleted them on disk after the insert).
    purge_floor: u64,
    messages: BTreeMap<u64, MsgState>,
    /// `(visible_at, seq)` of every message, so a receive finds the receivable ones in order
    /// without scanning the hidden ones.
    by_visibility: BTreeSet<(Millis, u64)>,
    /// `(sent_at, seq)` of every message, so the retention sweep takes the expired ones without
    /// looking at the others, and knows when the oldest expires. Seq order is not send order:
    /// moved messages keep their `sent_at`.
    by_sent: BTreeSet<(Millis, u64)>,
    /// Bumped when something may have become receivable; `None` once the queue is deleted, which
    /// wakes every listener for good.
    changes: Option<watch::Sender<u64>>,
    /// FIFO queues only: groups, deduplication records, receive attempts.
    fifo: Option<Box<Fifo>>,
}

impl QueueState {
    pub(crate) fn new(config: QueueConfig, updated_at: Millis, next_seq: u64, fifo: bool) -> Self {
        Self {
            config,
            updated_at,
            deleted: false,
            next_seq: next_seq.max(1),
            pending: 0,
            purge_floor: 0,
            messages: BTreeMap::new(),
            by_visibility: BTreeSet::new(),
            by_sent: BTreeSet::new(),
            changes: Some(watch::Sender::new(0)),
            fifo: fifo.then(Box::default),
        }
    }

    fn retention_ms(&self) -> Millis {
        Millis::from(self.config.message_retention_seconds) * 1000
    }

    pub(crate) fn is_fifo(&self) -> bool {
        self.fifo.is_some()
    }

    /// Replaces the configuration (FIFO groups depend on the retention: refiled if it changed).
    pub(crate) fn set_config(&mut self, config: QueueConfig) {
        let retention_changed =
            config.message_retention_seconds != self.config.message_retention_seconds;
        self.config = config;
        let retention = self.retention_ms();
        if let Some(fifo) = self.fifo.as_deref_mut().filter(|_| retention_changed) {
            fifo.groups.refile_all(&self.messages, retention);
        }
    }

    /// The seq the next send will get (what the store records so seqs never go back).
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Adds a message found on disk at start-up (`group` matters on FIFO queues only).
    /// Stored messages' seqs above `after`, ascending, at most `limit`.
    pub(crate) fn seqs_after(&self, after: u64, limit: usize) -> Vec<u64> {
        self.messages
            .range((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
            .take(limit)
            .map(|(&seq, _)| seq)
            .collect()
    }

    pub(crate) fn load(
        &mut self,
        seq: u64,
        sent_at: Millis,
        visible_at: Millis,
        size: u32,
        group: Option<&str>,
    ) {
        self.insert(seq, MsgState::new(sent_at, visible_at, size), group);
        self.next_seq = self.next_seq.max(seq.saturating_add(1));
    }

    /// Adds deduplication records found on disk at start-up (FIFO queues only).
    pub(crate) fn load_dedup(&mut self, records: Vec<(DedupKey, DedupEntry)>) {
        if let Some(fifo) = self.fifo.as_deref_mut() {
            fifo.dedup.load(records);
        }
    }

    fn insert(&mut self, seq: u64, state: MsgState, group: Option<&str>) {
        self.by_sent.insert((state.sent_at, seq));
        self.by_visibility.insert((state.visible_at, seq));
        self.messages.insert(seq, state);
        let retention = self.retention_ms();
        if let Some(fifo) = self.fifo.as_deref_mut() {
            let group = fifo.groups.add(seq, group.unwrap_or_default());
            fifo.groups.refile(group, &self.messages, retention);
        }
    }

    /// Takes a message out of the index to move it elsewhere (whatever its state); `None` if
    /// it is not stored or has expired (the sweep deletes it, as if gone already).
    pub(crate) fn take(&mut self, seq: u64, now: Millis) -> Option<Taken> {
        let retention = self.retention_ms();
        if self.messages.get(&seq)?.expired(retention, now) {
            return None;
        }
        let group = self
            .fifo
            .as_deref()
            .and_then(|fifo| fifo.groups.name_of(seq))
            .map(str::to_owned);
        let state = self.remove(seq)?;
        if self.fifo.is_some() {
            // Its group may deliver again, as after a delete.
            self.notify();
        }
        Some(Taken { seq, state, group })
    }

    /// Puts back messages whose move failed, as they were. Not those a purge or the queue's
    /// deletion removed meanwhile: those are gone on disk too.
    pub(crate) fn restore(&mut self, taken: &[Taken]) {
        if self.deleted {
            return;
        }
        for t in taken {
            if t.seq >= self.purge_floor && !self.messages.contains_key(&t.seq) {
                self.insert(t.seq, t.state, t.group.as_deref());
            }
        }
        self.notify();
    }

    /// Gives `count` messages moving in their seqs at the end of the queue. No `max_depth`
    /// check: a move is never refused for depth. They count as pending until the move
    /// completes ([`commit_sent`](Self::commit_sent) or [`abandon_sent`](Self::abandon_sent)).
    pub(crate) fn reserve_arrivals(&mut self, count: usize) -> Vec<u64> {
        let first = self.next_seq;
        self.next_seq += count as u64;
        self.pending += count as u64;
        (first..self.next_seq).collect()
    }

    fn remove(&mut self, seq: u64) -> Option<MsgState> {
        let state = self.messages.remove(&seq)?;
        self.by_sent.remove(&(state.sent_at, seq));
        self.by_visibility.remove(&(state.visible_at, seq));
        let retention = self.retention_ms();
        if let Some(fifo) = self.fifo.as_deref_mut() {
            if let Some(group) = fifo.groups.remove(seq) {
                fifo.groups.refile(group, &self.messages, retention);
            }
        }
        Some(state)
    }

    /// Moves a message in `by_visibility`. On FIFO queues the caller refiles its group.
    fn set_visible_at(&mut self, seq: u64, visible_at: Millis) {
        if let Some(state) = self.messages.get_mut(&seq) {
            self.by_visibility.remove(&(state.visible_at, seq));
            state.visible_at = visible_at;
            self.by_visibility.insert((visible_at, seq));
        }
    }

    /// FIFO queues: recomputes when the group of `seq` can deliver next.
    fn refile_group_of(&mut self, seq: u64) {
        let retention = self.retention_ms();
        if let Some(fifo) = self.fifo.as_deref_mut() {
            if let Some(group) = fifo.groups.group_of(seq) {
                fifo.groups.refile(group, &self.messages, retention);
            }
        }
    }

    fn notify(&self) {
        if let Some(tx) = &self.changes {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Admits one new message against `max_depth` and gives it its seq (pending until its
    /// commit completes); `None` if the queue is full.
    pub(crate) fn reserve_one(&mut self) -> Option<u64> {
        let depth = self.messages.len() as u64 + self.pending;
        if depth >= self.config.max_depth.unwrap_or(u64::MAX) {
            return None;
        }
        self.pending += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        Some(seq)
    }

    /// Admits up to `count` new messages against `max_depth` and gives each admitted one its
    /// seq; `None` for each refused (the excess of a full queue).
    #[cfg(test)]
    pub(crate) fn reserve(&mut self, count: usize) -> Vec<Option<u64>> {
        (0..count).map(|_| self.reserve_one()).collect()
    }

    /// Decides, in order, what becomes of each message of a send: `(deduplication key, message
    /// id)`, the key `None` on standard queues. A key accepted within the window (also earlier
    /// in the same send) makes a duplicate, which takes no room; every other message is admitted
    /// against `max_depth` and gets its seq, and its key is recorded at once (not yet committed)
    /// so a concurrent send with it is a duplicate too.
    pub(crate) fn admit<'a>(
        &mut self,
        requests: impl IntoIterator<Item = (Option<DedupKey>, &'a str)>,
        now: Millis,
    ) -> Vec<Admission> {
        let mut answers = Vec::new();
        for (key, message_id) in requests {
            let key = key.filter(|_| self.fifo.is_some());
            if let (Some(key), Some(fifo)) = (&key, self.fifo.as_deref()) {
                if let Some(original) = fifo.dedup.find(key, now) {
                    answers.push(Admission::Duplicate {
                        seq: original.seq,
                        message_id: original.message_id.clone(),
                        committed: original.committed,
                    });
                    continue;
                }
            }
            let Some(seq) = self.reserve_one() else {
                answers.push(Admission::Full);
                continue;
            };
            if let (Some(key), Some(fifo)) = (key, self.fifo.as_deref_mut()) {
                let entry = DedupEntry {
                    accepted_at: now,
                    seq,
                    message_id: message_id.to_owned(),
                    committed: false,
                };
                fifo.dedup.record(key, entry);
            }
            answers.push(Admission::New(seq));
        }
        answers
    }

    /// Releases `count` reservations whose commit failed or whose queue went away.
    pub(crate) fn abandon(&mut self, count: usize) {
        self.pending = self.pending.saturating_sub(count as u64);
    }

    /// A send's commit failed (or its queue went away): releases its reservations and frees its
    /// deduplication keys.
    pub(crate) fn abandon_sent(&mut self, sent: &[Accepted]) {
        self.abandon(sent.len());
        if let Some(fifo) = self.fifo.as_deref_mut() {
            for a in sent {
                if let Some(key) = &a.dedup {
                    fifo.dedup.forget(key, a.seq);
                }
            }
        }
    }

    /// Indexes messages whose commit completed, making them receivable, and wakes listeners.
    pub(crate) fn commit_sent(&mut self, sent: &[Accepted]) {
        self.abandon(sent.len());
        for a in sent {
            if a.seq >= self.purge_floor {
                self.insert(
                    a.seq,
                    MsgState::new(a.sent_at, a.visible_at, a.size),
                    a.group.as_deref(),
                );
            }
            // A purged message was accepted all the same: its key stays taken.
            if let (Some(key), Some(fifo)) = (&a.dedup, self.fifo.as_deref_mut()) {
                fifo.dedup.commit(key, a.seq);
            }
        }
        self.notify();
    }

    /// Whether `key` is recorded, durably, for the send of `seq` (a duplicate's original).
    pub(crate) fn dedup_confirmed(&self, key: &DedupKey, seq: u64) -> bool {
        self.fifo
            .as_deref()
            .is_some_and(|fifo| fifo.dedup.confirmed(key, seq))
    }

    /// Drops deduplication records and receive attempts whose window ended by `now`; answers
    /// the deduplication keys to delete on disk.
    pub(crate) fn prune_fifo(&mut self, now: Millis) -> Vec<DedupKey> {
        match self.fifo.as_deref_mut() {
            Some(fifo) => {
                fifo.attempts.prune(now);
                fifo.dedup.prune(now)
            }
            None => Vec::new(),
        }
    }

    /// Counts a delivery of `seq` (already hidden by the caller) and answers it.
    fn deliver(&mut self, seq: u64, now: Millis, delivery: u64) -> Option<Picked> {
        let m = self.messages.get_mut(&seq)?;
        m.count_delivery(now, delivery);
        Some(Picked { seq, state: *m })
    }

    /// Delivers up to `max` receivable messages with no dead-letter rule and no backoff.
    #[cfg(test)]
    pub(crate) fn receive(
        &mut self,
        max: usize,
        visibility_ms: Millis,
        now: Millis,
        next_delivery: impl FnMut() -> u64,
    ) -> Pick {
        let plain = Redelivery {
            dead_letter_after: None,
            backoff: |_| 0,
        };
        self.receive_with(max, visibility_ms, now, plain, next_delivery)
    }

    /// Delivers up to `max` receivable messages, hiding each until `now + visibility_ms` plus
    /// its backoff; takes out instead (up to [`MAX_MOVES_PER_RECEIVE`]) those received
    /// `dead_letter_after` times already, which neither count towards `max` nor block their
    /// FIFO group. `next_delivery` numbers each delivery. Standard queues deliver in
    /// `(visible_at, seq)` order; FIFO queues by group (see `fifo.rs`).
    pub(crate) fn receive_with<B: FnMut(u32) -> Millis>(
        &mut self,
        max: usize,
        visibility_ms: Millis,
        now: Millis,
        rules: Redelivery<B>,
        next_delivery: impl FnMut() -> u64,
    ) -> Pick {
        if self.fifo.is_some() {
            return self.receive_fifo(max, visibility_ms, now, rules, next_delivery);
        }
        let retention = self.retention_ms();
        let mut pick = Pick::default();
        let (mut chosen, mut moving) = (Vec::new(), Vec::new());
        for &(visible_at, seq) in &self.by_visibility {
            if visible_at > now || chosen.len() >= max {
                break;
            }
            match self.messages.get(&seq) {
                Some(m) if m.expired(retention, now) => pick.expired.push(seq),
                Some(m)
                    if rules
                        .dead_letter_after
                        .is_some_and(|n| m.receive_count >= n) =>
                {
                    if moving.len() >= MAX_MOVES_PER_RECEIVE {
                        break;
                    }
                    moving.push(seq);
                }
                Some(_) => chosen.push(seq),
                None => {}
            }
        }
        for &seq in &pick.expired {
            self.remove(seq);
        }
        pick.taken = moving
            .into_iter()
            .filter_map(|seq| self.take(seq, now))
            .collect();
        self.deliver_chosen(
            &chosen,
            visibility_ms,
            now,
            rules.backoff,
            next_delivery,
            &mut pick,
        );
        pick.next_visible_at = self.next_visible_after(now);
        pick
    }

    /// Hides and counts the chosen messages, each for the visibility timeout plus the backoff
    /// of the count it reaches.
    fn deliver_chosen(
        &mut self,
        chosen: &[u64],
        visibility_ms: Millis,
        now: Millis,
        mut backoff: impl FnMut(u32) -> Millis,
        mut next_delivery: impl FnMut() -> u64,
        pick: &mut Pick,
    ) {
        for &seq in chosen {
            let Some(count) = self.messages.get(&seq).map(|m| m.receive_count) else {
                continue;
            };
            let extra = backoff(count.saturating_add(1));
            let hidden_until = now.saturating_add(visibility_ms).saturating_add(extra);
            self.set_visible_at(seq, hidden_until);
            if let Some(picked) = self.deliver(seq, now, next_delivery()) {
                pick.delivered.push(picked);
            }
        }
    }

    fn receive_fifo<B: FnMut(u32) -> Millis>(
        &mut self,
        max: usize,
        visibility_ms: Millis,
        now: Millis,
        rules: Redelivery<B>,
        next_delivery: impl FnMut() -> u64,
    ) -> Pick {
        let retention = self.retention_ms();
        let Some(fifo) = self.fifo.as_deref_mut() else {
            return Pick::default();
        };
        let picked = fifo
            .groups
            .pick(max, now, &self.messages, retention, rules.dead_letter_after);
        for &seq in &picked.expired {
            self.remove(seq);
        }
        let mut pick = Pick {
            expired: picked.expired,
            ..Pick::default()
        };
        pick.taken = picked
            .moving
            .into_iter()
            .filter_map(|seq| self.take(seq, now))
            .collect();
        let chosen = picked.chosen;
        self.deliver_chosen(
            &chosen,
            visibility_ms,
            now,
            rules.backoff,
            next_delivery,
            &mut pick,
        );
        // Chosen messages of one group are adjacent: refile each group once, after its last.
        for (i, &seq) in chosen.iter().enumerate() {
            let group_of = |s: u64| self.fifo.as_deref().and_then(|f| f.groups.group_of(s));
            if chosen
                .get(i + 1)
                .is_none_or(|&next| group_of(next) != group_of(seq))
            {
                self.refile_group_of(seq);
            }
        }
        pick.next_visible_at = self
            .fifo
            .as_deref()
            .and_then(|fifo| fifo.groups.next_ready_after(now));
        pick
    }

    /// FIFO queues: what a receive with this attempt id answered within the window, if any.
    /// Only messages still stored and not expired are answered again.
    pub(crate) fn replay(&self, attempt_id: &str, now: Millis) -> Option<Attempt> {
        let mut attempt = self
            .fifo
            .as_deref()?
            .attempts
            .find(attempt_id, now)
            .cloned()?;
        let retention = self.retention_ms();
        attempt.delivered.retain(|picked| {
            self.messages
                .get(&picked.seq)
                .is_some_and(|m| !m.expired(retention, now))
        });
        Some(attempt)
    }

    /// FIFO queues: remembers what a receive with this attempt id answered. Empty answers are
    /// not remembered: a long poll asks again with the same id until something comes.
    pub(crate) fn remember(&mut self, attempt_id: &str, now: Millis, pick: &Pick) {
        if pick.delivered.is_empty() {
            return;
        }
        if let Some(fifo) = self.fifo.as_deref_mut() {
            let attempt = Attempt {
                at: now,
                delivered: pick.delivered.clone(),
                next_visible_at: pick.next_visible_at,
            };
            fifo.attempts.remember(attempt_id, attempt);
        }
    }

    /// When the next hidden message becomes receivable, skipping those that expire first (they
    /// never will). The scan is bounded: past the bound an early hint is returned, which only
    /// costs a long poll one extra look.
    fn next_visible_after(&self, now: Millis) -> Option<Millis> {
        const SCAN: usize = 1024;
        let retention = self.retention_ms();
        let mut hidden = self.by_visibility.range((now.saturating_add(1), 0)..);
        let first = hidden.clone().next().map(|&(visible_at, _)| visible_at);
        for &(visible_at, seq) in hidden.by_ref().take(SCAN) {
            match self.messages.get(&seq) {
                Some(m) if !m.expired(retention, visible_at) => return Some(visible_at),
                _ => {}
            }
        }
        if hidden.next().is_some() {
            first
        } else {
            None
        }
    }

    /// Looks up the message a handle of this queue names, checking it is the latest delivery.
    fn current(&self, handle: &ReceiptHandle) -> Result<Option<&MsgState>, HandleError> {
        match self.messages.get(&handle.seq) {
            None => Ok(None),
            Some(m) if m.receive_count == 0 || m.delivery != handle.delivery => {
                Err(HandleError::Stale)
            }
            Some(m) => Ok(Some(m)),
        }
    }

    /// Whether a handle (already checked to be this queue's) names the latest delivery of a
    /// message still stored and not expired; [`HandleError::Stale`] if not.
    pub(crate) fn check_current(
        &self,
        handle: &ReceiptHandle,
        now: Millis,
    ) -> Result<(), HandleError> {
        let retention = self.retention_ms();
        match self.current(handle)? {
            Some(m) if !m.expired(retention, now) => Ok(()),
            _ => Err(HandleError::Stale),
        }
    }

    /// Removes the message a handle (already checked to be this queue's) names. `Ok(true)` if
    /// it was removed and must be deleted on disk, `Ok(false)` if it was already gone.
    ///
    /// An expired message counts as already gone whatever the handle, so the answer does not
    /// depend on whether a sweep has removed it yet; it is removed now all the same.
    pub(crate) fn delete(
        &mut self,
        handle: &ReceiptHandle,
        now: Millis,
    ) -> Result<bool, HandleError> {
        let retention = self.retention_ms();
        let expired = match self.messages.get(&handle.seq) {
            None => return Ok(false),
            Some(m) => m.expired(retention, now),
        };
        if !expired {
            self.current(handle)?;
        }
        self.remove(handle.seq);
        if self.fifo.is_some() {
            // Its group may deliver again.
            self.notify();
        }
        Ok(true)
    }

    /// Makes the message receivable at `now + timeout_ms`. An expired message counts as gone.
    pub(crate) fn change_visibility(
        &mut self,
        handle: &ReceiptHandle,
        timeout_ms: Millis,
        now: Millis,
    ) -> Result<(), HandleError> {
        let retention = self.retention_ms();
        match self.current(handle)? {
            Some(m) if !m.expired(retention, now) => {}
            _ => return Err(HandleError::Stale),
        }
        self.set_visible_at(handle.seq, now.saturating_add(timeout_ms));
        self.refile_group_of(handle.seq);
        if timeout_ms == 0 {
            self.notify();
        }
        Ok(())
    }

    /// Up to `limit` unexpired messages in `state`, lowest seq first.
    pub(crate) fn peek(&self, state: MessageState, limit: usize, now: Millis) -> Vec<Picked> {
        let retention = self.retention_ms();
        self.messages
            .iter()
            .filter(|(_, m)| !m.expired(retention, now) && m.state(now) == state)
            .take(limit)
            .map(|(&seq, &state)| Picked { seq, state })
            .collect()
    }

    /// Counts by state and stored bytes at `now`, expired messages excluded. O(messages): stats are asked for
    /// by management calls, not on the hot path.
    pub(crate) fn stats(&self, now: Millis) -> QueueStats {
        let retention = self.retention_ms();
        let mut stats = QueueStats::default();
        for m in self.messages.values() {
            if m.expired(retention, now) {
                continue;
            }
            if stats.oldest_sent_at.is_none() {
                stats.oldest_sent_at = Some(m.sent_at);
            }
            stats.stored_bytes += u64::from(m.size);
            match m.state(now) {
                MessageState::Visible => stats.visible += 1,
                MessageState::InFlight => stats.in_flight += 1,
                MessageState::Delayed => stats.delayed += 1,
            }
        }
        stats
    }

    /// The earliest instant the retention sweep may have work here: the end of the retention
    /// of the oldest message, of the oldest FIFO deduplication record's window or of the oldest
    /// remembered receive attempt's; [`Millis::MAX`] if none. Cheap: asked each time the queue's lock is released.
    pub(crate) fn next_due(&self) -> Millis {
        let mut due = self.by_sent.first().map_or(Millis::MAX, |&(sent_at, _)| {
            sent_at.saturating_add(self.retention_ms())
        });
        if let Some(fifo) = self.fifo.as_deref() {
            due = due.min(fifo.dedup.next_due()).min(fifo.attempts.next_due());
        }
        due
    }

    /// Removes every message whose retention has ended by `now`; answers their seqs, ascending.
    /// Costs what it removes (oldest first in `by_sent`), not what the queue holds.
    pub(crate) fn take_expired(&mut self, now: Millis) -> Vec<u64> {
        let retention = self.retention_ms();
        let mut expired: Vec<u64> = self
            .by_sent
            .iter()
            .take_while(|&&(sent_at, _)| sent_at.saturating_add(retention) <= now)
            .map(|&(_, seq)| seq)
            .collect();
        for &seq in &expired {
            self.remove(seq);
        }
        expired.sort_unstable();
        expired
    }

    /// Empties the index; answers the seq below which the store must delete. Deduplication
    /// records stay: a purge does not make a recent send's id new again.
    pub(crate) fn purge(&mut self) -> u64 {
        self.messages.clear();
        self.by_visibility.clear();
        self.by_sent.clear();
        if let Some(fifo) = self.fifo.as_deref_mut() {
            fifo.groups.clear();
            fifo.attempts.clear();
        }
        self.purge_floor = self.next_seq;
        self.next_seq
    }

    /// Marks the queue deleted, frees its index and wakes its listeners.
    pub(crate) fn close(&mut self) {
        self.deleted = true;
        self.purge();
        if let Some(fifo) = self.fifo.as_deref_mut() {
            fifo.dedup.clear();
        }
        self.changes = None;
    }

    /// A receiver of the change counter (its current value counts as seen).
    pub(crate) fn subscribe(&self) -> Option<watch::Receiver<u64>> {
        self.changes.as_ref().map(watch::Sender::subscribe)
    }
}

impl crate::due::Due for QueueState {
    fn next_due(&self) -> Millis {
        QueueState::next_due(self)
    }

    fn gone(&self) -> bool {
        self.deleted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(retention_seconds: u32) -> QueueState {
        let mut config = QueueConfig::with_defaults(262_144);
        config.message_retention_seconds = retention_seconds;
        QueueState::new(config, 0, 1, false)
    }

    fn accepted(seq: u64, sent_at: Millis, visible_at: Millis) -> Accepted {
        Accepted {
            seq,
            sent_at,
            visible_at,
            group: None,
            size: 10,
            dedup: None,
        }
    }

    fn send(q: &mut QueueState, n: usize, now: Millis, delay: Millis) -> Vec<u64> {
        let seqs: Vec<u64> = q.reserve(n).into_iter().flatten().collect();
        let sent: Vec<_> = seqs
            .iter()
            .map(|&s| accepted(s, now, now + delay))
            .collect();
        q.commit_sent(&sent);
        seqs
    }

    fn counter() -> impl FnMut() -> u64 {
        let mut n = 100;
        move || {
            n += 1;
            n
        }
    }

    #[test]
    fn msg_state_stays_small() {
        assert_eq!(std::mem::size_of::<MsgState>(), 40);
    }

    #[test]
    fn receive_hides_in_order_and_reports_next_visible() {
        let mut q = state(60);
        let seqs = send(&mut q, 3, 1_000, 0);
        send(&mut q, 1, 1_000, 5_000);
        let pick = q.receive(2, 10_000, 1_000, counter());
        let got: Vec<u64> = pick.delivered.iter().map(|p| p.seq).collect();
        assert_eq!(got, seqs[..2]);
        assert_eq!(pick.delivered[0].state.receive_count, 1);
        assert_eq!(pick.delivered[0].state.first_received_at(), Some(1_000));
        assert_eq!(pick.next_visible_at, Some(6_000));
        let stats = q.stats(1_000);
        assert_eq!((stats.visible, stats.in_flight, stats.delayed), (1, 2, 1));
    }

    #[test]
    fn max_depth_counts_pending_sends() {
        let mut q = state(60);
        q.config.max_depth = Some(3);
        let first = q.reserve(2);
        assert!(first.iter().all(Option::is_some));
        let second = q.reserve(2);
        assert!(second[0].is_some() && second[1].is_none());
        q.abandon(3);
        assert_eq!(q.reserve(1).len(), 1);
    }

    #[test]
    fn handles_go_stale_on_redelivery() {
        let mut q = state(60);
        let seq = send(&mut q, 1, 0, 0)[0];
        let d1 = q.receive(1, 0, 0, counter()).delivered[0].state.delivery;
        let d2 = q.receive(1, 0, 0, || 999).delivered[0].state.delivery;
        let h = |delivery| ReceiptHandle {
            queue_uid: 7,
            seq,
            delivery,
        };
        assert_eq!(q.change_visibility(&h(d1), 5, 0), Err(HandleError::Stale));
        assert_eq!(q.delete(&h(d1), 0), Err(HandleError::Stale));
        assert_eq!(q.delete(&h(d2), 0), Ok(true));
        assert_eq!(q.delete(&h(d2), 0), Ok(false));
        assert_eq!(q.change_visibility(&h(d2), 5, 0), Err(HandleError::Stale));
    }

    #[test]
    fn the_sweep_follows_sent_at_not_seq() {
        // A moved-in message keeps its older sent_at under a newer seq.
        let mut q = state(60);
        let newer = send(&mut q, 1, 10_000, 0)[0];
        let moved: Vec<u64> = q.reserve(1).into_iter().flatten().collect();
        q.commit_sent(&[accepted(moved[0], 0, 0)]);
        assert_eq!(q.next_due(), 60_000);
        assert_eq!(q.take_expired(60_000), moved);
        assert_eq!(q.next_due(), 70_000);
        assert!(q.take_expired(69_999).is_empty());
        assert_eq!(q.take_expired(70_000), vec![newer]);
        assert_eq!(q.next_due(), Millis::MAX);
    }

    #[test]
    fn expired_messages_are_skipped_and_swept() {
        let mut q = state(60);
        send(&mut q, 2, 0, 0);
        assert!(q.take_expired(59_999).is_empty());
        let pick = q.receive(5, 0, 60_000, counter());
        assert!(pick.delivered.is_empty());
        assert_eq!(pick.expired.len(), 2);
        send(&mut q, 1, 60_000, 0);
        assert_eq!(q.take_expired(120_000).len(), 1);
        assert_eq!(q.stats(120_000), QueueStats::default());
    }

    #[test]
    fn an_expired_message_is_gone_for_every_handle() {
        let mut q = state(60);
        let seq = send(&mut q, 1, 0, 0)[0];
        let stale = ReceiptHandle {
            queue_uid: 7,
            seq,
            delivery: 1,
        };
        q.receive(1, 120_000, 0, counter());
        assert_eq!(
            q.next_visible_after(0),
            None,
            "it expires before it is visible"
        );
        assert_eq!(
            q.change_visibility(&stale, 0, 60_000),
            Err(HandleError::Stale)
        );
        assert_eq!(q.delete(&stale, 60_000), Ok(true));
        assert_eq!(q.stats(0), QueueStats::default());
    }

    #[test]
    fn a_purge_drops_sends_that_were_in_flight() {
        let mut q = state(60);
        let in_flight: Vec<u64> = q.reserve(1).into_iter().flatten().collect();
        q.purge();
        q.commit_sent(&[accepted(in_flight[0], 0, 0)]);
        assert_eq!(q.stats(0).visible, 0);
        send(&mut q, 1, 0, 0);
        assert_eq!(q.stats(0).visible, 1);
    }

    // FIFO queues.

    fn fifo(retention_seconds: u32) -> QueueState {
        let mut config = QueueConfig::with_defaults(262_144);
        config.message_retention_seconds = retention_seconds;
        QueueState::new(config, 0, 1, true)
    }

    /// Sends one message per group name, in order; answers their seqs.
    fn send_groups(q: &mut QueueState, groups: &[&str], now: Millis, delay: Millis) -> Vec<u64> {
        let admitted = q.admit(groups.iter().map(|_| (None, "id")), now);
        let sent: Vec<Accepted> = admitted
            .iter()
            .zip(groups)
            .map(|(a, g)| match a {
                Admission::New(seq) => Accepted {
                    group: Some((*g).to_owned()),
                    ..accepted(*seq, now, now + delay)
                },
                other => panic!("not admitted: {other:?}"),
            })
            .collect();
        q.commit_sent(&sent);
        sent.iter().map(|a| a.seq).collect()
    }

    fn seqs(pick: &Pick) -> Vec<u64> {
        pick.delivered.iter().map(|p| p.seq).collect()
    }

    fn handle(p: &Picked) -> ReceiptHandle {
        ReceiptHandle {
            queue_uid: 7,
            seq: p.seq,
            delivery: p.state.delivery,
        }
    }

    #[test]
    fn a_group_in_flight_delivers_nothing_more() {
        let mut q = fifo(600);
        let s = send_groups(&mut q, &["a", "a", "b", "a"], 0, 0);
        let first = q.receive(1, 30_000, 0, counter());
        assert_eq!(seqs(&first), [s[0]]);
        // `a` is in flight: only `b` comes, and `a` is due when its visibility ends.
        let second = q.receive(10, 30_000, 0, counter());
        assert_eq!(seqs(&second), [s[2]]);
        assert_eq!(second.next_visible_at, Some(30_000));
        assert!(q.receive(10, 30_000, 0, counter()).delivered.is_empty());
        // Deleting the in-flight message frees the group: the rest of it comes, in order.
        assert_eq!(q.delete(&handle(&first.delivered[0]), 1), Ok(true));
        let third = q.receive(10, 30_000, 1, counter());
        assert_eq!(seqs(&third), [s[1], s[3]]);
    }

    #[test]
    fn a_message_whose_visibility_ends_comes_again_before_later_ones() {
        let mut q = fifo(600);
        let s = send_groups(&mut q, &["a", "a", "a"], 0, 0);
        let first = q.receive(2, 10_000, 0, counter());
        assert_eq!(seqs(&first), [s[0], s[1]]);
        // One of the two becomes visible at once, the other is still in flight: nothing.
        q.change_visibility(&handle(&first.delivered[0]), 0, 5_000)
            .unwrap();
        assert!(q.receive(10, 10_000, 5_000, counter()).delivered.is_empty());
        // Both visible again: both again, first, then the third.
        let again = q.receive(10, 10_000, 10_000, counter());
        assert_eq!(seqs(&again), [s[0], s[1], s[2]]);
        assert_eq!(again.delivered[0].state.receive_count, 2);
        assert_eq!(again.delivered[2].state.receive_count, 1);
        // Deleting the second while the first is in flight keeps the group locked.
        q.delete(&handle(&again.delivered[1]), 10_000).unwrap();
        q.change_visibility(&handle(&again.delivered[2]), 0, 10_000)
            .unwrap();
        assert!(q
            .receive(10, 10_000, 10_000, counter())
            .delivered
            .is_empty());
        let last = q.receive(10, 10_000, 20_000, counter());
        assert_eq!(seqs(&last), [s[0], s[2]]);
    }

    #[test]
    fn groups_are_served_oldest_head_first() {
        let mut q = fifo(600);
        let s = send_groups(&mut q, &["a", "b", "a", "c", "b", "a"], 0, 0);
        // Consecutive messages of a group go together, then the next oldest head.
        let pick = q.receive(4, 30_000, 0, counter());
        assert_eq!(seqs(&pick), [s[0], s[2], s[5], s[1]]);
        let pick = q.receive(4, 30_000, 0, counter());
        assert_eq!(seqs(&pick), [s[3]]);
    }

    #[test]
    fn a_busy_group_does_not_hold_up_the_others() {
        let mut q = fifo(600);
        let busy: Vec<&str> = vec!["busy"; 1000];
        let busy_seqs = send_groups(&mut q, &busy, 0, 0);
        let others = send_groups(&mut q, &["b", "c", "d", "e"], 0, 0);
        // The busy group's head is oldest: it goes first, as much of it as asked for...
        let first = q.receive(10, 30_000, 0, counter());
        assert_eq!(seqs(&first), busy_seqs[..10]);
        // ... and while it is in flight, every other group comes at once.
        let next: Vec<u64> = (0..4)
            .flat_map(|_| seqs(&q.receive(1, 30_000, 0, counter())))
            .collect();
        assert_eq!(next, others);
        // A consumer that deletes as it goes sees the groups interleaved in send order.
        let mut q = fifo(600);
        let mut expected = Vec::new();
        for i in 0..50 {
            expected.extend(send_groups(&mut q, &["busy", "busy"], 0, 0));
            if i % 10 == 0 {
                expected.extend(send_groups(&mut q, &[&format!("g{i}")], 0, 0));
            }
        }
        let mut got = Vec::new();
        loop {
            let pick = q.receive(1, 30_000, 0, counter());
            let Some(p) = pick.delivered.first() else {
                break;
            };
            got.push(p.seq);
            q.delete(&handle(p), 0).unwrap();
        }
        assert_eq!(got, expected);
    }

    #[test]
    fn a_delayed_head_blocks_its_group_until_visible() {
        let mut q = fifo(600);
        let a1 = send_groups(&mut q, &["a"], 0, 5_000);
        let a2 = send_groups(&mut q, &["a"], 1_000, 0);
        let b = send_groups(&mut q, &["b"], 1_000, 0);
        let pick = q.receive(10, 30_000, 1_000, counter());
        assert_eq!(seqs(&pick), b);
        assert_eq!(pick.next_visible_at, Some(5_000));
        let pick = q.receive(10, 30_000, 5_000, counter());
        assert_eq!(seqs(&pick), [a1[0], a2[0]]);
    }

    #[test]
    fn expired_messages_do_not_block_their_group() {
        let mut q = fifo(60);
        let a1 = send_groups(&mut q, &["a"], 0, 0);
        let a2 = send_groups(&mut q, &["a"], 50_000, 0);
        let pick = q.receive(1, 120_000, 1_000, counter());
        assert_eq!(seqs(&pick), a1);
        // In flight until 121 s, but gone at 60 s: the group is free then.
        let pick = q.receive(10, 30_000, 59_999, counter());
        assert!(pick.delivered.is_empty());
        assert_eq!(pick.next_visible_at, Some(60_000));
        let pick = q.receive(10, 30_000, 60_000, counter());
        assert_eq!(seqs(&pick), a2);
        assert_eq!(pick.expired, a1);
        // A longer retention puts it back in the way (until its visibility ends).
        let mut q = fifo(60);
        let a1 = send_groups(&mut q, &["a"], 0, 0);
        send_groups(&mut q, &["a"], 1_000, 0);
        q.receive(1, 120_000, 1_000, counter());
        let mut config = q.config.clone();
        config.message_retention_seconds = 600;
        q.set_config(config);
        assert!(q
            .receive(10, 30_000, 60_000, counter())
            .delivered
            .is_empty());
        assert_eq!(seqs(&q.receive(1, 30_000, 121_000, counter())), a1);
    }

    #[test]
    fn groups_are_dropped_when_empty_and_purged() {
        let mut q = fifo(60);
        send_groups(&mut q, &["a", "b", "a"], 0, 0);
        let fifo = |q: &QueueState| q.fifo.as_deref().map(|f| f.groups.len());
        assert_eq!(fifo(&q), Some(2));
        let pick = q.receive(10, 0, 0, counter());
        for p in &pick.delivered {
            q.delete(&handle(p), 0).unwrap();
        }
        assert_eq!(fifo(&q), Some(0));
        send_groups(&mut q, &["a", "c"], 0, 0);
        q.purge();
        assert_eq!(fifo(&q), Some(0));
        assert!(q.receive(10, 0, 0, counter()).delivered.is_empty());
        send_groups(&mut q, &["c"], 0, 0);
        assert_eq!(q.take_expired(60_000).len(), 1);
        assert_eq!(fifo(&q), Some(0));
    }

    #[test]
    fn duplicates_take_no_room_and_a_failed_send_frees_its_keys() {
        let mut q = fifo(600);
        q.config.max_depth = Some(2);
        let key = |id: &str| {
            Some(DedupKey {
                group: String::new(),
                id: id.into(),
            })
        };
        let admitted = q.admit([(key("x"), "m1"), (key("x"), "m2"), (None, "m3")], 0);
        assert_eq!(admitted[0], Admission::New(1));
        assert_eq!(
            admitted[1],
            Admission::Duplicate {
                seq: 1,
                message_id: "m1".into(),
                committed: false
            }
        );
        assert_eq!(admitted[2], Admission::New(2));
        assert_eq!(q.admit([(key("y"), "m4")], 0), [Admission::Full]);
        // The first send fails: its key is free again, its room released.
        let failed = Accepted {
            size: 10,
            dedup: key("x"),
            ..accepted(1, 0, 0)
        };
        q.abandon_sent(&[failed, accepted(2, 0, 0)]);
        assert!(!q.dedup_confirmed(&key("x").unwrap(), 1));
        assert_eq!(q.admit([(key("x"), "m5")], 0), [Admission::New(3)]);
        q.commit_sent(&[Accepted {
            size: 10,
            dedup: key("x"),
            ..accepted(3, 0, 0)
        }]);
        assert!(q.dedup_confirmed(&key("x").unwrap(), 3));
        // Standard queues never deduplicate.
        let mut standard = state(600);
        let admitted = standard.admit([(key("x"), "m1"), (key("x"), "m2")], 0);
        assert_eq!(admitted, [Admission::New(1), Admission::New(2)]);
    }

    fn moving_after(count: u32) -> Redelivery<impl FnMut(u32) -> Millis> {
        Redelivery {
            dead_letter_after: Some(count),
            backoff: |_| 0,
        }
    }

    #[test]
    fn backoff_adds_to_the_hiding_of_each_delivery_by_its_count() {
        let mut q = state(600);
        let seq = send(&mut q, 1, 0, 0)[0];
        let mut counts = Vec::new();
        let mut now = 0;
        for _ in 0..3 {
            let rules = Redelivery {
                dead_letter_after: None,
                backoff: |count| {
                    counts.push(count);
                    Millis::from(count) * 1_000
                },
            };
            let pick = q.receive_with(1, 10_000, now, rules, counter());
            assert_eq!(seqs(&pick), [seq]);
            let count = pick.delivered[0].state.receive_count;
            // Hidden for the visibility timeout plus the backoff of the count it reached.
            let until = now + 10_000 + Millis::from(count) * 1_000;
            assert!(q.receive(1, 0, until - 1, counter()).delivered.is_empty());
            now = until;
        }
        assert_eq!(counts, [1, 2, 3]);
    }

    #[test]
    fn messages_received_often_enough_are_taken_out_not_delivered() {
        let mut q = state(600);
        let s = send(&mut q, 3, 0, 0);
        q.receive(1, 0, 0, counter());
        q.receive(1, 0, 0, counter());
        // s[0] was received twice; with a limit of 2 it is taken out and does not count
        // towards the one message asked for.
        let pick = q.receive_with(1, 30_000, 0, moving_after(2), counter());
        let taken: Vec<u64> = pick.taken.iter().map(|t| t.seq).collect();
        assert_eq!(taken, [s[0]]);
        assert_eq!(pick.taken[0].state.receive_count, 2);
        assert_eq!(seqs(&pick), [s[1]]);
        assert_eq!(q.stats(0).visible + q.stats(0).in_flight, 2, "taken out");
        assert_eq!(q.stats(0).stored_bytes, 20, "its bytes leave with it");
        // A failed move puts it back as it was: visible, its count kept.
        q.restore(&pick.taken);
        assert_eq!(q.stats(0).stored_bytes, 30);
        let again = q.receive(10, 30_000, 0, counter());
        assert_eq!(seqs(&again), [s[0], s[2]]);
        assert_eq!(again.delivered[0].state.receive_count, 3);
        // Not after a purge: it is gone on disk too.
        let taken = q.take(s[0], 0).unwrap();
        q.purge();
        q.restore(&[taken]);
        assert_eq!(q.stats(0), QueueStats::default());
    }

    #[test]
    fn taking_out_a_fifo_head_lets_the_rest_of_its_group_come() {
        let mut q = fifo(600);
        let s = send_groups(&mut q, &["a", "a", "b"], 0, 0);
        let first = q.receive(1, 0, 0, counter());
        assert_eq!(seqs(&first), [s[0]]);
        let pick = q.receive_with(10, 30_000, 0, moving_after(1), counter());
        let taken: Vec<u64> = pick.taken.iter().map(|t| t.seq).collect();
        assert_eq!(taken, [s[0]]);
        assert_eq!(pick.taken[0].group.as_deref(), Some("a"));
        assert_eq!(seqs(&pick), [s[1], s[2]], "a's next and b both come");
        // Put back (a failed move), it heads its group again, which is in flight now.
        q.restore(&pick.taken);
        q.delete(&handle(&pick.delivered[0]), 0).unwrap();
        let again = q.receive(10, 30_000, 0, counter());
        assert_eq!(seqs(&again), [s[0]]);
    }
}
