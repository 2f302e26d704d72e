//! The due index of the retention sweep (`ops/expire.rs`): queues and topics by the earliest
//! instant the sweep may have work for them (a message's retention ending, a FIFO
//! deduplication record's or receive attempt's window ending), so a round visits what is due
//! and nothing else. Idle queues and topics cost a sweep nothing.
//!
//! **Filing follows the lock.** An entry's state sits in a [`Filed`] beside the instant it is
//! filed under, and is only reached through a [`DueGuard`]. When a guard is released it asks
//! the state for its next due instant ([`Due::next_due`], a lower bound: the sweep may find
//! nothing yet and file it again) and, if that is earlier than where the entry is filed, files
//! it there too. So every change that can bring work forward (a send, a move or publish into a
//! queue, a restored message, a shorter retention, a new deduplication record or attempt) is
//! covered without each operation remembering to file, and the hot path pays a comparison: a
//! queue that already holds messages is filed under its oldest one's expiry, which later sends
//! do not bring forward.
//!
//! **Stale entries are allowed.** Nothing is taken out when work goes away (a message deleted
//! by its consumer, a queue drained): the sweep finds nothing at that instant, one look, and
//! files the entry under its next due instant, if any. A deleted entry is taken out when its
//! guard is released (only the instant it was last filed under; any older one is skipped by
//! the sweep, as is an entry whose memory is gone).
//!
//! Lock order: an entry's own lock, then the index's (a leaf: nothing is locked under it).
//! The sweep takes what is due from the index first and locks each entry after.

use sluice_engine::Millis;
use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, Weak};

/// Not filed: nothing is due, ever, until the state changes.
pub(crate) const NEVER: Millis = Millis::MAX;

/// What the sweep asks of a state kept in a [`DueIndex`].
pub(crate) trait Due {
    /// The earliest instant the sweep may have work here, at most the real one
    /// ([`NEVER`] if it has none).
    fn next_due(&self) -> Millis;

    /// Whether the entry is gone (deleted): it is then taken out of the index, not filed.
    fn gone(&self) -> bool;
}

/// Entries of type `T` (queues or topics) by when the sweep next has work for them.
#[derive(Debug)]
pub(crate) struct DueIndex<T> {
    /// By `(instant, entry id)`.
    by_time: Mutex<BTreeMap<(Millis, u64), Weak<T>>>,
    next_id: AtomicU64,
}

impl<T> Default for DueIndex<T> {
    fn default() -> Self {
        Self {
            by_time: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
        }
    }
}

impl<T> DueIndex<T> {
    fn entries(&self) -> MutexGuard<'_, BTreeMap<(Millis, u64), Weak<T>>> {
        // Every change under this lock is one map operation: nothing is left half done.
        self.by_time.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new entry's id (unique within this index).
    pub(crate) fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn file(&self, at: Millis, id: u64, entry: &Weak<T>) {
        self.entries().insert((at, id), Weak::clone(entry));
    }

    fn unfile(&self, at: Millis, id: u64) {
        self.entries().remove(&(at, id));
    }

    /// Takes out every entry filed at or before `now` and answers them, each once. Entries
    /// filed again while the caller works on these (at or before `now` too, when their work
    /// cannot be done yet) wait for the next call.
    pub(crate) fn take_due(&self, now: Millis) -> Vec<Weak<T>> {
        let due = {
            let mut entries = self.entries();
            let later = entries.split_off(&(now.saturating_add(1), 0));
            std::mem::replace(&mut *entries, later)
        };
        let mut due: Vec<(u64, Weak<T>)> = due.into_iter().map(|((_, id), e)| (id, e)).collect();
        due.sort_unstable_by_key(|&(id, _)| id);
        due.dedup_by_key(|&mut (id, _)| id);
        due.into_iter().map(|(_, entry)| entry).collect()
    }

    /// How many entries are filed (stale ones included).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries().len()
    }

    /// The earliest instant anything is filed under.
    #[cfg(test)]
    pub(crate) fn first(&self) -> Option<Millis> {
        self.entries().keys().next().map(|&(at, _)| at)
    }
}

/// A state and the instant its entry is filed under ([`NEVER`]: not filed), behind the
/// entry's mutex.
#[derive(Debug)]
pub(crate) struct Filed<S> {
    state: S,
    at: Millis,
}

impl<S> Filed<S> {
    pub(crate) fn new(state: S) -> Self {
        Self { state, at: NEVER }
    }
}

/// Where an entry is filed: its index, its id there, and itself (weakly: the index never keeps
/// an entry alive).
#[derive(Debug)]
pub(crate) struct Slot<T> {
    pub(crate) index: std::sync::Arc<DueIndex<T>>,
    pub(crate) id: u64,
    pub(crate) me: Weak<T>,
}

/// An entry's state, locked; on release files the entry where its state says (see the module
/// documentation). Dereferences to the state.
pub(crate) struct DueGuard<'a, S: Due, T> {
    guard: MutexGuard<'a, Filed<S>>,
    slot: &'a Slot<T>,
}

impl<'a, S: Due, T> DueGuard<'a, S, T> {
    /// Locks `mutex` (poisoning ignored: a panic under an entry's lock leaves at worst a stale
    /// index entry).
    pub(crate) fn lock(mutex: &'a Mutex<Filed<S>>, slot: &'a Slot<T>) -> Self {
        Self {
            guard: mutex.lock().unwrap_or_else(PoisonError::into_inner),
            slot,
        }
    }

    /// For the sweep, which took this entry out of the index at `now` with everything else
    /// filed up to then: if the entry was filed at or before `now`, it no longer is, and is
    /// filed again on release under what is due next.
    pub(crate) fn taken_at(&mut self, now: Millis) {
        if self.guard.at <= now {
            self.guard.at = NEVER;
        }
    }
}

impl<S: Due, T> Deref for DueGuard<'_, S, T> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.guard.state
    }
}

impl<S: Due, T> DerefMut for DueGuard<'_, S, T> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.guard.state
    }
}

impl<S: Due, T> Drop for DueGuard<'_, S, T> {
    fn drop(&mut self) {
        let filed = &mut *self.guard;
        if filed.state.gone() {
            if filed.at != NEVER {
                self.slot.index.unfile(filed.at, self.slot.id);
                filed.at = NEVER;
            }
            return;
        }
        let due = filed.state.next_due();
        if due < filed.at {
            self.slot.index.file(due, self.slot.id, &self.slot.me);
            filed.at = due;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    struct State {
        due: Millis,
        gone: bool,
    }

    impl Due for State {
        fn next_due(&self) -> Millis {
            self.due
        }
        fn gone(&self) -> bool {
            self.gone
        }
    }

    struct Entry {
        slot: Slot<Entry>,
        state: Mutex<Filed<State>>,
    }

    impl Entry {
        fn new(index: &Arc<DueIndex<Entry>>) -> Arc<Self> {
            Arc::new_cyclic(|me| Self {
                slot: Slot {
                    index: Arc::clone(index),
                    id: index.new_id(),
                    me: Weak::clone(me),
                },
                state: Mutex::new(Filed::new(State {
                    due: NEVER,
                    gone: false,
                })),
            })
        }

        fn lock(&self) -> DueGuard<'_, State, Entry> {
            DueGuard::lock(&self.state, &self.slot)
        }
    }

    #[test]
    fn entries_are_filed_when_work_comes_forward_and_taken_once_due() {
        let index = Arc::new(DueIndex::default());
        let (a, b) = (Entry::new(&index), Entry::new(&index));
        // Nothing due: nothing filed.
        drop(a.lock());
        assert_eq!(index.len(), 0);
        a.lock().due = 100;
        b.lock().due = 50;
        // A later instant does not file again; an earlier one does (the old entry stays).
        a.lock().due = 200;
        assert_eq!(index.len(), 2);
        a.lock().due = 80;
        assert_eq!(index.len(), 3);
        assert!(index.take_due(49).is_empty());
        let due = index.take_due(100);
        // Each entry once, though `a` was filed twice.
        assert_eq!(due.len(), 2);
        assert_eq!(index.len(), 0);
        for entry in due {
            let entry = entry.upgrade().unwrap();
            let mut state = entry.lock();
            state.taken_at(100);
            state.due = if Arc::ptr_eq(&entry, &a) { 300 } else { NEVER };
        }
        assert_eq!((index.len(), index.first()), (1, Some(300)));
    }

    #[test]
    fn gone_entries_are_taken_out_and_dropped_ones_skipped() {
        let index = Arc::new(DueIndex::default());
        let (a, b) = (Entry::new(&index), Entry::new(&index));
        a.lock().due = 10;
        b.lock().due = 20;
        a.lock().gone = true;
        assert_eq!((index.len(), index.first()), (1, Some(20)));
        drop(b);
        let due = index.take_due(30);
        assert_eq!(due.len(), 1);
        assert!(due[0].upgrade().is_none());
    }

    #[test]
    fn work_not_yet_doable_waits_for_the_next_round() {
        let index = Arc::new(DueIndex::default());
        let a = Entry::new(&index);
        a.lock().due = 10;
        for entry in index.take_due(10) {
            let entry = entry.upgrade().unwrap();
            let mut state = entry.lock();
            state.taken_at(10);
            // Still due (say, a record whose commit is not done): filed in the past again.
            state.due = 5;
        }
        assert_eq!(index.first(), Some(5));
        assert_eq!(index.take_due(11).len(), 1);
    }
}
