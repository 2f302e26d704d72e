//! What every move between two queues shares (the move on receive, `dead_letter`, `redrive`):
//! locking both queues without deadlock, and the one commit that removes the messages from the
//! source and inserts them into the destination, with the indexes following only its outcome.
//!
//! A move runs in three steps: under both queues' locks the messages are taken out of the
//! source's index and given seqs in the destination's, and one [`WriteOp::Transfer`] is
//! submitted; the commit thread applies it in one transaction; then, on the commit thread, the
//! destination's index receives them (durable) or the source's gets them back (failed: nothing
//! changed on disk). Submitting under both locks orders the transfer before any later purge,
//! deletion or removal in either queue, so the rows it moves still exist when it is applied.

use crate::index::{Accepted, QueueState, Taken};
use crate::queue_entry::{QueueEntry, QueueGuard};
use crate::store::{Arrival, Pending, WriteOp};
use crate::EmbeddedEngine;
use sluice_engine::{DeadLetter, Millis};
use std::sync::Arc;

/// The two queues of a move, locked.
pub(crate) struct Locked<'a> {
    source: QueueGuard<'a>,
    /// `None` when the destination is the source itself.
    destination: Option<QueueGuard<'a>>,
}

impl<'a> Locked<'a> {
    /// Locks both in one fixed order (by address: entries stay put while shared), so two moves
    /// in opposite directions can never each hold one lock and wait for the other. The only
    /// other holder of several queue locks, a publish (`publish.rs`), takes them in this same
    /// order.
    pub(crate) fn lock(source: &'a QueueEntry, destination: &'a QueueEntry) -> Self {
        if std::ptr::eq(source, destination) {
            return Self {
                source: source.lock(),
                destination: None,
            };
        }
        let source_first =
            std::ptr::from_ref(source) as usize <= std::ptr::from_ref(destination) as usize;
        if source_first {
            let source = source.lock();
            let destination = destination.lock();
            Self {
                source,
                destination: Some(destination),
            }
        } else {
            let destination = destination.lock();
            let source = source.lock();
            Self {
                source,
                destination: Some(destination),
            }
        }
    }

    pub(crate) fn source(&mut self) -> &mut QueueState {
        &mut self.source
    }

    pub(crate) fn destination(&mut self) -> &mut QueueState {
        match &mut self.destination {
            Some(destination) => destination,
            None => &mut self.source,
        }
    }
}

/// One message to move: taken out of the source's index already, with the `dead_letter` record
/// it arrives with (`None`: a redrive, which clears it).
pub(crate) struct Move {
    pub taken: Taken,
    pub dead_letter: Option<DeadLetter>,
}

impl EmbeddedEngine {
    /// Submits the move of `moves` from `source` into `destination`, whose state (locked by
    /// the caller, live) is `into`; the caller holds the source's lock too (see [`Locked`]).
    /// In the destination each message gets a new seq at the end, a receive count of 0, is
    /// visible at `now`, keeps its `sent_at` (standard) or restarts it at `now` (FIFO), and
    /// meets neither deduplication nor `max_depth`.
    pub(crate) fn submit_transfer(
        &self,
        source: &Arc<QueueEntry>,
        destination: &Arc<QueueEntry>,
        into: &mut QueueState,
        moves: Vec<Move>,
        now: Millis,
    ) -> Pending {
        let fifo = into.is_fifo();
        let seqs = into.reserve_arrivals(moves.len());
        let mut arrivals = Vec::with_capacity(moves.len());
        let mut accepted = Vec::with_capacity(moves.len());
        let mut taken = Vec::with_capacity(moves.len());
        for (m, to_seq) in moves.into_iter().zip(seqs) {
            let sent_at = if fifo { now } else { m.taken.state.sent_at };
            arrivals.push(Arrival {
                from_seq: m.taken.seq,
                to_seq,
                sent_at: fifo.then_some(now),
                visible_at: now,
                dead_letter: m.dead_letter,
            });
            accepted.push(Accepted {
                seq: to_seq,
                sent_at,
                visible_at: now,
                size: m.taken.state.size,
                // A standard source keeps no groups in memory: a receive or dead-letter move
                // from one (into a FIFO queue, a kind mismatch the services refuse) files its
                // messages in the default group until a restart reads theirs; redrive reads
                // the group from disk.
                group: fifo.then(|| m.taken.group.clone().unwrap_or_default()),
                dedup: None,
            });
            taken.push(m.taken);
        }
        let op = WriteOp::Transfer {
            from: source.uid,
            to: destination.uid,
            next_seq: into.next_seq(),
            moves: arrivals,
        };
        let (source, destination) = (Arc::clone(source), Arc::clone(destination));
        // Each index is locked on its own here, never both at once.
        self.store.submit_then(vec![op], move |committed| {
            let mut into = destination.lock();
            if committed.is_ok() && !into.deleted {
                // Indexes them and wakes the destination's long polls.
                into.commit_sent(&accepted);
                return;
            }
            into.abandon_sent(&accepted);
            drop(into);
            if committed.is_err() {
                source.lock().restore(&taken);
            }
        })
    }
}
