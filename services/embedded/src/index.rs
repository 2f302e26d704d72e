//! The in-memory index of one queue: which messages exist, when each becomes receivable, and
//! its receive bookkeeping. Pure data structure, no I/O: the engine (lib.rs) holds it under a
//! mutex and pairs each change with a write to the store.
//!
//! Message ids, group ids, bodies and attributes stay on disk; a message costs a fixed ~32-byte
//! [`MsgState`] plus its entries in two B-trees. Receive bookkeeping is deliberately volatile:
//! after a restart every message is visible again at its stored `visible_at`.

use sluice_engine::{HandleError, MessageState, Millis, QueueConfig, QueueStats, ReceiptHandle};
use std::collections::{BTreeMap, BTreeSet};
use tokio::sync::watch;

/// Receive state of one stored message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MsgState {
    pub sent_at: Millis,
    pub visible_at: Millis,
    /// The current delivery's number (meaningless while `receive_count` is 0).
    pub delivery: u64,
    pub receive_count: u32,
    /// First delivery time as `1 + ms after sent_at`, 0 = never delivered. A u32 offset rather
    /// than a u64 instant keeps the struct at 32 bytes; retention (at most 14 days ≈ 1.2e9 ms)
    /// fits, and anything longer saturates.
    first_received: u32,
}

impl MsgState {
    fn new(sent_at: Millis, visible_at: Millis) -> Self {
        Self {
            sent_at,
            visible_at,
            delivery: 0,
            receive_count: 0,
            first_received: 0,
        }
    }

    pub fn first_received_at(&self) -> Option<Millis> {
        (self.first_received > 0).then(|| self.sent_at + Millis::from(self.first_received - 1))
    }

    fn expired(&self, retention_ms: Millis, now: Millis) -> bool {
        self.sent_at.saturating_add(retention_ms) <= now
    }

    fn state(&self, now: Millis) -> MessageState {
        if self.visible_at <= now {
            MessageState::Visible
        } else if self.receive_count > 0 {
            MessageState::InFlight
        } else {
            MessageState::Delayed
        }
    }
}

/// One message handed out by [`QueueState::receive`] or listed by [`QueueState::peek`]: the
/// bookkeeping to report; the caller reads the rest from disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Picked {
    pub seq: u64,
    pub state: MsgState,
}

/// The result of one receive attempt on the index.
#[derive(Debug, Default)]
pub(crate) struct Pick {
    pub delivered: Vec<Picked>,
    /// Expired messages met on the way and dropped from the index; the caller deletes them
    /// from disk.
    pub expired: Vec<u64>,
    pub next_visible_at: Option<Millis>,
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
    /// A lower bound of every stored `sent_at` (`Millis::MAX` when none), so a retention sweep
    /// skips queues where nothing can have expired.
    oldest_hint: Millis,
    /// Bumped when something may have become receivable; `None` once the queue is deleted, which
    /// wakes every listener for good.
    changes: Option<watch::Sender<u64>>,
}

impl QueueState {
    pub fn new(config: QueueConfig, updated_at: Millis, next_seq: u64) -> Self {
        Self {
            config,
            updated_at,
            deleted: false,
            next_seq: next_seq.max(1),
            pending: 0,
            purge_floor: 0,
            messages: BTreeMap::new(),
            by_visibility: BTreeSet::new(),
            oldest_hint: Millis::MAX,
            changes: Some(watch::Sender::new(0)),
        }
    }

    fn retention_ms(&self) -> Millis {
        Millis::from(self.config.message_retention_seconds) * 1000
    }

    /// The seq the next send will get (what the store records so seqs never go back).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Adds a message found on disk at start-up.
    pub fn load(&mut self, seq: u64, sent_at: Millis, visible_at: Millis) {
        self.insert(seq, MsgState::new(sent_at, visible_at));
        self.next_seq = self.next_seq.max(seq.saturating_add(1));
    }

    fn insert(&mut self, seq: u64, state: MsgState) {
        self.oldest_hint = self.oldest_hint.min(state.sent_at);
        self.by_visibility.insert((state.visible_at, seq));
        self.messages.insert(seq, state);
    }

    fn remove(&mut self, seq: u64) -> Option<MsgState> {
        let state = self.messages.remove(&seq)?;
        self.by_visibility.remove(&(state.visible_at, seq));
        Some(state)
    }

    fn set_visible_at(&mut self, seq: u64, visible_at: Millis) {
        if let Some(state) = self.messages.get_mut(&seq) {
            self.by_visibility.remove(&(state.visible_at, seq));
            state.visible_at = visible_at;
            self.by_visibility.insert((visible_at, seq));
        }
    }

    fn notify(&self) {
        if let Some(tx) = &self.changes {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Admits up to `count` new messages against `max_depth` and gives each admitted one its
    /// seq; `None` for each refused (the excess of a full queue).
    pub fn reserve(&mut self, count: usize) -> Vec<Option<u64>> {
        let mut depth = self.messages.len() as u64 + self.pending;
        let limit = self.config.max_depth.unwrap_or(u64::MAX);
        (0..count)
            .map(|_| {
                if depth >= limit {
                    return None;
                }
                depth += 1;
                self.pending += 1;
                let seq = self.next_seq;
                self.next_seq += 1;
                Some(seq)
            })
            .collect()
    }

    /// Releases `count` reservations whose commit failed or whose queue went away.
    pub fn abandon(&mut self, count: usize) {
        self.pending = self.pending.saturating_sub(count as u64);
    }

    /// Indexes messages whose commit completed, making them receivable, and wakes listeners.
    pub fn commit_sent(&mut self, sent: &[(u64, Millis, Millis)]) {
        self.abandon(sent.len());
        for &(seq, sent_at, visible_at) in sent {
            if seq >= self.purge_floor {
                self.insert(seq, MsgState::new(sent_at, visible_at));
            }
        }
        self.notify();
    }

    /// Delivers up to `max` receivable messages in `(visible_at, seq)` order, hiding each until
    /// `now + visibility_ms`. `next_delivery` numbers each delivery.
    pub fn receive(
        &mut self,
        max: usize,
        visibility_ms: Millis,
        now: Millis,
        mut next_delivery: impl FnMut() -> u64,
    ) -> Pick {
        let retention = self.retention_ms();
        let mut pick = Pick::default();
        let mut chosen = Vec::new();
        for &(visible_at, seq) in &self.by_visibility {
            if visible_at > now || chosen.len() >= max {
                break;
            }
            match self.messages.get(&seq) {
                Some(m) if m.expired(retention, now) => pick.expired.push(seq),
                Some(_) => chosen.push(seq),
                None => {}
            }
        }
        for &seq in &pick.expired {
            self.remove(seq);
        }
        let hidden_until = now.saturating_add(visibility_ms);
        for seq in chosen {
            self.set_visible_at(seq, hidden_until);
            if let Some(m) = self.messages.get_mut(&seq) {
                m.receive_count = m.receive_count.saturating_add(1);
                if m.first_received == 0 {
                    let offset = now
                        .saturating_sub(m.sent_at)
                        .min(Millis::from(u32::MAX - 1));
                    m.first_received = u32::try_from(offset).map_or(u32::MAX, |o| o + 1);
                }
                m.delivery = next_delivery();
                pick.delivered.push(Picked { seq, state: *m });
            }
        }
        pick.next_visible_at = self.next_visible_after(now);
        pick
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

    /// Removes the message a handle (already checked to be this queue's) names. `Ok(true)` if
    /// it was removed and must be deleted on disk, `Ok(false)` if it was already gone.
    ///
    /// An expired message counts as already gone whatever the handle, so the answer does not
    /// depend on whether a sweep has removed it yet; it is removed now all the same.
    pub fn delete(&mut self, handle: &ReceiptHandle, now: Millis) -> Result<bool, HandleError> {
        let retention = self.retention_ms();
        let expired = match self.messages.get(&handle.seq) {
            None => return Ok(false),
            Some(m) => m.expired(retention, now),
        };
        if !expired {
            self.current(handle)?;
        }
        self.remove(handle.seq);
        Ok(true)
    }

    /// Makes the message receivable at `now + timeout_ms`. An expired message counts as gone.
    pub fn change_visibility(
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
        if timeout_ms == 0 {
            self.notify();
        }
        Ok(())
    }

    /// Up to `limit` unexpired messages in `state`, lowest seq first.
    pub fn peek(&self, state: MessageState, limit: usize, now: Millis) -> Vec<Picked> {
        let retention = self.retention_ms();
        self.messages
            .iter()
            .filter(|(_, m)| !m.expired(retention, now) && m.state(now) == state)
            .take(limit)
            .map(|(&seq, &state)| Picked { seq, state })
            .collect()
    }

    /// Counts by state at `now`, expired messages excluded. O(messages): stats are asked for
    /// by management calls, not on the hot path.
    pub fn stats(&self, now: Millis) -> QueueStats {
        let retention = self.retention_ms();
        let mut stats = QueueStats::default();
        for m in self.messages.values() {
            if m.expired(retention, now) {
                continue;
            }
            if stats.oldest_sent_at.is_none() {
                stats.oldest_sent_at = Some(m.sent_at);
            }
            match m.state(now) {
                MessageState::Visible => stats.visible += 1,
                MessageState::InFlight => stats.in_flight += 1,
                MessageState::Delayed => stats.delayed += 1,
            }
        }
        stats
    }

    /// Removes every message whose retention has ended by `now`; answers their seqs.
    pub fn take_expired(&mut self, now: Millis) -> Vec<u64> {
        let retention = self.retention_ms();
        if self.oldest_hint.saturating_add(retention) > now {
            return Vec::new();
        }
        let expired: Vec<u64> = self
            .messages
            .iter()
            .filter(|(_, m)| m.expired(retention, now))
            .map(|(&seq, _)| seq)
            .collect();
        for &seq in &expired {
            self.remove(seq);
        }
        self.oldest_hint = self
            .messages
            .values()
            .map(|m| m.sent_at)
            .min()
            .unwrap_or(Millis::MAX);
        expired
    }

    /// Empties the index; answers the seq below which the store must delete.
    pub fn purge(&mut self) -> u64 {
        self.messages.clear();
        self.by_visibility.clear();
        self.oldest_hint = Millis::MAX;
        self.purge_floor = self.next_seq;
        self.next_seq
    }

    /// Marks the queue deleted, frees its index and wakes its listeners.
    pub fn close(&mut self) {
        self.deleted = true;
        self.purge();
        self.changes = None;
    }

    /// A receiver of the change counter (its current value counts as seen).
    pub fn subscribe(&self) -> Option<watch::Receiver<u64>> {
        self.changes.as_ref().map(watch::Sender::subscribe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(retention_seconds: u32) -> QueueState {
        let mut config = QueueConfig::with_defaults(262_144);
        config.message_retention_seconds = retention_seconds;
        QueueState::new(config, 0, 1)
    }

    fn send(q: &mut QueueState, n: usize, now: Millis, delay: Millis) -> Vec<u64> {
        let seqs: Vec<u64> = q.reserve(n).into_iter().flatten().collect();
        let sent: Vec<_> = seqs.iter().map(|&s| (s, now, now + delay)).collect();
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
        assert_eq!(std::mem::size_of::<MsgState>(), 32);
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
        q.commit_sent(&[(in_flight[0], 0, 0)]);
        assert_eq!(q.stats(0).visible, 0);
        send(&mut q, 1, 0, 0);
        assert_eq!(q.stats(0).visible, 1);
    }
}
