//! What a FIFO queue keeps in memory on top of the per-message index (`index.rs`): its message
//! groups, its deduplication records and its remembered receive attempts. Pure data structures,
//! no I/O; [`QueueState`](crate::index::QueueState) owns one [`Fifo`] per FIFO queue and keeps it
//! in step with its messages.
//!
//! **Groups.** A group is deliverable when nothing of it is in flight and its head (lowest seq)
//! is receivable. Messages are only ever delivered from the head onwards, without gaps, so the
//! received messages of a group are always a prefix of its members; the group can deliver again
//! at `ready_at` = the latest moment one of them (or the head) stops hiding, i.e. the largest
//! `min(visible_at, expiry)` over the head and the received prefix. That instant only changes
//! when the group does (send, receive, delete, visibility change, expiry, retention change), so
//! each group is filed under it in `waiting`; a receive first moves every group whose
//! `ready_at` has come into `ready`, which orders them by head seq (oldest head first), and
//! serves them from there. A receive costs O(log groups) per group served, however many groups
//! are blocked.
//!
//! **Deduplication.** Every key accepted within the window, with the original's seq and message
//! id. An entry is recorded when its send is admitted (so a concurrent send with the same key is
//! already a duplicate) and marked committed once the send is durable; the same records live in
//! the store's `dedup` table, written in the message's transaction.
//!
//! **Receive attempts.** The deliveries a receive with a `request_attempt_id` answered, kept
//! (without bodies) for the attempt window and bounded in number.

use crate::message::{MsgState, Picked};
use sluice_engine::{Millis, DEDUPLICATION_WINDOW_MS, RECEIVE_ATTEMPT_WINDOW_MS};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;

/// Everything FIFO about one queue.
#[derive(Debug, Default)]
pub(crate) struct Fifo {
    pub groups: Groups,
    pub dedup: Dedup,
    pub attempts: Attempts,
}

/// One message group.
#[derive(Debug)]
struct Group {
    name: Box<str>,
    /// Seqs of its stored messages.
    members: BTreeSet<u64>,
    /// When it can next deliver (see the module documentation).
    ready_at: Millis,
    /// `Some(head)` while filed in `ready` under `(head, id)`, `None` while in `waiting` under
    /// `(ready_at, id)`.
    ready_head: Option<u64>,
}

/// Most messages one receive moves to its queue's dead-letter queue; the rest wait for the next
/// receive, so a backlog of dead letters cannot make one receive (and one commit) unbounded.
pub(crate) const MAX_MOVES_PER_RECEIVE: usize = 256;

/// What [`Groups::pick`] chose.
#[derive(Debug, Default)]
pub(crate) struct GroupPick {
    /// To deliver, groups oldest head first, each group's in order.
    pub chosen: Vec<u64>,
    /// Expired members met on the way.
    pub expired: Vec<u64>,
    /// Members received `dead_letter_after` times already, to move instead of delivering, in
    /// the order met (a group's in order).
    pub moving: Vec<u64>,
}

/// The message groups of one FIFO queue.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    ids: HashMap<Box<str>, u64>,
    groups: HashMap<u64, Group>,
    /// The group of every member.
    group_of: HashMap<u64, u64>,
    /// Groups that could not deliver at the latest receive, by `ready_at`.
    waiting: BTreeSet<(Millis, u64)>,
    /// Groups that could, by head seq: the order they are served in.
    ready: BTreeSet<(u64, u64)>,
    next_id: u64,
}

impl Groups {
    /// Adds a member (seqs of one group arrive in increasing order, but nothing depends on it).
    /// The caller refiles the answered group once the message is in the index.
    pub(crate) fn add(&mut self, seq: u64, name: &str) -> u64 {
        let id = match self.ids.get(name) {
            Some(&id) => id,
            None => {
                let id = self.next_id;
                self.next_id += 1;
                self.ids.insert(name.into(), id);
                self.groups.insert(
                    id,
                    Group {
                        name: name.into(),
                        members: BTreeSet::new(),
                        ready_at: 0,
                        ready_head: None,
                    },
                );
                self.waiting.insert((0, id));
                id
            }
        };
        if let Some(group) = self.groups.get_mut(&id) {
            group.members.insert(seq);
        }
        self.group_of.insert(seq, id);
        id
    }

    /// Removes a member; answers its group, which the caller refiles.
    pub(crate) fn remove(&mut self, seq: u64) -> Option<u64> {
        let id = self.group_of.remove(&seq)?;
        if let Some(group) = self.groups.get_mut(&id) {
            group.members.remove(&seq);
        }
        Some(id)
    }

    pub(crate) fn group_of(&self, seq: u64) -> Option<u64> {
        self.group_of.get(&seq).copied()
    }

    /// The name of the group of `seq`.
    pub(crate) fn name_of(&self, seq: u64) -> Option<&str> {
        let id = self.group_of.get(&seq)?;
        self.groups.get(id).map(|g| &*g.name)
    }

    /// Recomputes a group's `ready_at` after a change and files it in `waiting` (the next
    /// receive promotes it if it is ready); drops it once it has no members.
    pub(crate) fn refile(
        &mut self,
        id: u64,
        messages: &BTreeMap<u64, MsgState>,
        retention: Millis,
    ) {
        let Some(group) = self.groups.get_mut(&id) else {
            return;
        };
        match group.ready_head.take() {
            Some(head) => self.ready.remove(&(head, id)),
            None => self.waiting.remove(&(group.ready_at, id)),
        };
        if group.members.is_empty() {
            self.ids.remove(&group.name);
            self.groups.remove(&id);
            return;
        }
        let mut ready_at = 0;
        for (i, seq) in group.members.iter().enumerate() {
            let Some(m) = messages.get(seq) else { continue };
            if i > 0 && m.receive_count == 0 {
                break;
            }
            ready_at = ready_at.max(m.visible_at.min(m.sent_at.saturating_add(retention)));
        }
        group.ready_at = ready_at;
        self.waiting.insert((ready_at, id));
    }

    /// Refiles every group (after a retention change).
    pub(crate) fn refile_all(&mut self, messages: &BTreeMap<u64, MsgState>, retention: Millis) {
        let ids: Vec<u64> = self.groups.keys().copied().collect();
        for id in ids {
            self.refile(id, messages, retention);
        }
    }

    /// Moves every group whose `ready_at` has come into `ready`.
    fn promote(&mut self, now: Millis) {
        while let Some(&(ready_at, id)) = self.waiting.first() {
            if ready_at > now {
                break;
            }
            self.waiting.pop_first();
            if let Some(group) = self.groups.get_mut(&id) {
                if let Some(&head) = group.members.first() {
                    group.ready_head = Some(head);
                    self.ready.insert((head, id));
                }
            }
        }
    }

    /// Chooses up to `max` messages to deliver at `now`: groups oldest head first, from each its
    /// head and the receivable messages right after it. Expired members met on the way are
    /// answered separately (the caller drops them; they block nothing), and so are members
    /// received `dead_letter_after` times already (up to [`MAX_MOVES_PER_RECEIVE`]): the caller
    /// moves them, so they block nothing either and what follows them in their group may be
    /// chosen. Changes nothing but the filing of groups: the caller updates the chosen messages
    /// and refiles their groups.
    pub(crate) fn pick(
        &mut self,
        max: usize,
        now: Millis,
        messages: &BTreeMap<u64, MsgState>,
        retention: Millis,
        dead_letter_after: Option<u32>,
    ) -> GroupPick {
        self.promote(now);
        let (mut chosen, mut expired, mut moving) = (Vec::new(), Vec::new(), Vec::new());
        let mut after = Bound::Unbounded;
        while chosen.len() < max {
            let Some(&(head, id)) = self.ready.range((after, Bound::Unbounded)).next() else {
                break;
            };
            let Some(group) = self.groups.get_mut(&id) else {
                after = Bound::Excluded((head, id));
                continue;
            };
            // The group was filed under its head when promoted; a head that expired since no
            // longer decides its place: refile it under its first live member and look again,
            // so groups stay served oldest live head first.
            let live_head = group.members.iter().copied().find(|seq| {
                messages
                    .get(seq)
                    .is_some_and(|m| !m.expired(retention, now))
            });
            match live_head {
                Some(live) if live != head => {
                    self.ready.remove(&(head, id));
                    self.ready.insert((live, id));
                    group.ready_head = Some(live);
                    continue;
                }
                None => {
                    // Nothing live: report the expired members and move on.
                    expired.extend(group.members.iter().copied());
                    after = Bound::Excluded((head, id));
                    continue;
                }
                Some(_) => {}
            }
            after = Bound::Excluded((head, id));
            // Only when `now` went back since the group was promoted.
            if group.ready_at > now {
                continue;
            }
            for &seq in &group.members {
                if chosen.len() >= max {
                    break;
                }
                let Some(m) = messages.get(&seq) else {
                    continue;
                };
                if m.expired(retention, now) {
                    expired.push(seq);
                } else if m.visible_at > now {
                    // Delayed: it and everything after it wait.
                    break;
                } else if dead_letter_after.is_some_and(|n| m.receive_count >= n) {
                    if moving.len() >= MAX_MOVES_PER_RECEIVE {
                        // It must move before anything after it is delivered: next receive.
                        break;
                    }
                    moving.push(seq);
                } else {
                    chosen.push(seq);
                }
            }
        }
        GroupPick {
            chosen,
            expired,
            moving,
        }
    }

    /// The earliest instant after `now` at which a group that cannot deliver now may.
    pub(crate) fn next_ready_after(&self, now: Millis) -> Option<Millis> {
        self.waiting
            .range((now.saturating_add(1), 0)..)
            .next()
            .map(|&(ready_at, _)| ready_at)
    }

    pub(crate) fn clear(&mut self) {
        *self = Self {
            next_id: self.next_id,
            ..Self::default()
        };
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.groups.len()
    }
}

/// What deduplicates a FIFO send: the id, and the group when the scope is the message group
/// (empty for the queue scope).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct DedupKey {
    pub group: String,
    pub id: String,
}

/// The send a deduplication key was first accepted for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DedupEntry {
    pub accepted_at: Millis,
    pub seq: u64,
    pub message_id: String,
    /// Durable; until then a duplicate's answer waits for the original's commit.
    pub committed: bool,
}

impl DedupEntry {
    fn live(&self, now: Millis) -> bool {
        self.accepted_at.saturating_add(DEDUPLICATION_WINDOW_MS) > now
    }
}

/// The deduplication records of one FIFO queue.
#[derive(Debug, Default)]
pub(crate) struct Dedup {
    entries: HashMap<DedupKey, DedupEntry>,
    /// `(seq, accepted_at, key)` in acceptance order, for pruning. A key accepted again after
    /// its window appears twice; the older one no longer matches its entry's seq and is skipped.
    order: VecDeque<(u64, Millis, DedupKey)>,
}

impl Dedup {
    /// The send `key` was accepted for within the window before `now`.
    pub(crate) fn find(&self, key: &DedupKey, now: Millis) -> Option<&DedupEntry> {
        self.entries.get(key).filter(|e| e.live(now))
    }

    pub(crate) fn record(&mut self, key: DedupKey, entry: DedupEntry) {
        self.order
            .push_back((entry.seq, entry.accepted_at, key.clone()));
        self.entries.insert(key, entry);
    }

    /// Records found on disk at start-up, in any order.
    pub(crate) fn load(&mut self, mut records: Vec<(DedupKey, DedupEntry)>) {
        records.sort_by_key(|(_, e)| (e.accepted_at, e.seq));
        for (key, entry) in records {
            self.record(key, entry);
        }
    }

    /// The original's send is durable.
    pub(crate) fn commit(&mut self, key: &DedupKey, seq: u64) {
        if let Some(e) = self.entries.get_mut(key).filter(|e| e.seq == seq) {
            e.committed = true;
        }
    }

    /// The original's send failed: the key is free again.
    pub(crate) fn forget(&mut self, key: &DedupKey, seq: u64) {
        if self.entries.get(key).is_some_and(|e| e.seq == seq) {
            self.entries.remove(key);
        }
    }

    /// Whether `key` is (still) recorded, durably, for the send of `seq`.
    pub(crate) fn confirmed(&self, key: &DedupKey, seq: u64) -> bool {
        self.entries
            .get(key)
            .is_some_and(|e| e.seq == seq && e.committed)
    }

    /// Drops the committed records whose window ended by `now`; answers their keys, for the
    /// store to delete.
    pub(crate) fn prune(&mut self, now: Millis) -> Vec<DedupKey> {
        let mut gone = Vec::new();
        while let Some((seq, _, key)) = self.order.front() {
            match self.entries.get(key) {
                Some(e) if e.seq == *seq => {
                    if !e.committed || e.live(now) {
                        break;
                    }
                    self.entries.remove(key);
                    if let Some((_, _, key)) = self.order.pop_front() {
                        gone.push(key);
                    }
                }
                // Forgotten, or accepted again later (its newer entry is further back).
                _ => {
                    self.order.pop_front();
                }
            }
        }
        gone
    }

    /// When [`prune`](Self::prune) may next have something to drop: the end of the oldest
    /// record's window ([`Millis::MAX`] if none). Records are kept in acceptance order, so none
    /// ends much before it (concurrent sends may record a few milliseconds out of order).
    pub(crate) fn next_due(&self) -> Millis {
        self.order
            .front()
            .map_or(Millis::MAX, |&(_, accepted_at, _)| {
                accepted_at.saturating_add(DEDUPLICATION_WINDOW_MS)
            })
    }

    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Most receive attempts remembered per queue; the oldest go first past it.
pub(crate) const MAX_ATTEMPTS: usize = 4096;

/// What one receive with a `request_attempt_id` answered.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    pub at: Millis,
    pub delivered: Vec<Picked>,
    pub next_visible_at: Option<Millis>,
}

/// The remembered receive attempts of one FIFO queue.
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    by_id: HashMap<String, Attempt>,
    /// `(at, id)` in the order remembered.
    order: VecDeque<(Millis, String)>,
}

impl Attempts {
    /// The answer of a receive with this attempt id within the window before `now`.
    pub(crate) fn find(&self, id: &str, now: Millis) -> Option<&Attempt> {
        self.by_id
            .get(id)
            .filter(|a| a.at.saturating_add(RECEIVE_ATTEMPT_WINDOW_MS) > now)
    }

    pub(crate) fn remember(&mut self, id: &str, attempt: Attempt) {
        self.prune(attempt.at);
        while self.by_id.len() >= MAX_ATTEMPTS {
            self.pop_oldest();
        }
        self.order.push_back((attempt.at, id.to_owned()));
        self.by_id.insert(id.to_owned(), attempt);
    }

    /// Forgets the attempts whose window ended by `now`.
    pub(crate) fn prune(&mut self, now: Millis) {
        while let Some((at, _)) = self.order.front() {
            if at.saturating_add(RECEIVE_ATTEMPT_WINDOW_MS) > now {
                break;
            }
            self.pop_oldest();
        }
    }

    /// When [`prune`](Self::prune) may next have something to drop ([`Millis::MAX`] if
    /// nothing is remembered).
    pub(crate) fn next_due(&self) -> Millis {
        self.order.front().map_or(Millis::MAX, |&(at, _)| {
            at.saturating_add(RECEIVE_ATTEMPT_WINDOW_MS)
        })
    }

    fn pop_oldest(&mut self) {
        if let Some((at, id)) = self.order.pop_front() {
            if self.by_id.get(&id).is_some_and(|a| a.at == at) {
                self.by_id.remove(&id);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(group: &str, id: &str) -> DedupKey {
        DedupKey {
            group: group.into(),
            id: id.into(),
        }
    }

    fn entry(accepted_at: Millis, seq: u64) -> DedupEntry {
        DedupEntry {
            accepted_at,
            seq,
            message_id: format!("m{seq}"),
            committed: true,
        }
    }

    #[test]
    fn dedup_entries_live_for_the_window_and_are_pruned_after() {
        let mut d = Dedup::default();
        d.record(key("", "a"), entry(1_000, 1));
        d.record(key("", "b"), entry(2_000, 2));
        assert!(d
            .find(&key("", "a"), 1_000 + DEDUPLICATION_WINDOW_MS - 1)
            .is_some());
        assert!(d
            .find(&key("", "a"), 1_000 + DEDUPLICATION_WINDOW_MS)
            .is_none());
        assert!(d.find(&key("g", "a"), 1_000).is_none());
        assert_eq!(d.prune(1_000 + DEDUPLICATION_WINDOW_MS), vec![key("", "a")]);
        assert_eq!(d.len(), 1);
        // Accepted again after its window: the stale order entry is skipped, not pruned.
        d.record(key("", "b"), entry(2_000 + DEDUPLICATION_WINDOW_MS, 3));
        assert!(d.prune(2_000 + DEDUPLICATION_WINDOW_MS).is_empty());
        assert_eq!(
            d.find(&key("", "b"), 2_000 + DEDUPLICATION_WINDOW_MS)
                .map(|e| e.seq),
            Some(3)
        );
    }

    #[test]
    fn uncommitted_dedup_entries_are_not_pruned_and_can_be_forgotten() {
        let mut d = Dedup::default();
        let mut pending = entry(0, 1);
        pending.committed = false;
        d.record(key("", "a"), pending);
        assert!(!d.confirmed(&key("", "a"), 1));
        assert!(d.prune(DEDUPLICATION_WINDOW_MS * 2).is_empty());
        d.forget(&key("", "a"), 1);
        assert!(d.find(&key("", "a"), 0).is_none());
        assert!(d.prune(DEDUPLICATION_WINDOW_MS * 2).is_empty());
        assert!(d.order.is_empty());
    }

    #[test]
    fn attempts_are_bounded_and_expire() {
        let mut a = Attempts::default();
        let attempt = |at| Attempt {
            at,
            delivered: Vec::new(),
            next_visible_at: None,
        };
        for i in 0..MAX_ATTEMPTS + 10 {
            a.remember(&format!("r{i}"), attempt(5));
        }
        assert_eq!(a.len(), MAX_ATTEMPTS);
        assert!(a.find("r0", 5).is_none());
        assert!(a.find(&format!("r{}", MAX_ATTEMPTS + 9), 5).is_some());
        assert!(a.find("r20", 5 + RECEIVE_ATTEMPT_WINDOW_MS).is_none());
        a.prune(5 + RECEIVE_ATTEMPT_WINDOW_MS);
        assert_eq!(a.len(), 0);
    }
}
