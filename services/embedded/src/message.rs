//! The receive state of one stored message ([`MsgState`]) and a message picked from the index
//! ([`Picked`]): the small types both the per-queue index (`index.rs`) and its FIFO layer
//! (`fifo.rs`) work with. They live here, below both, so dependencies point one way:
//! index -> fifo -> message.

use sluice_engine::{MessageState, Millis};

/// Receive state of one stored message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MsgState {
    pub sent_at: Millis,
    pub visible_at: Millis,
    /// The current delivery's number (meaningless while `receive_count` is 0).
    pub delivery: u64,
    pub receive_count: u32,
    /// First delivery time as `1 + ms after sent_at`, 0 = never delivered. A u32 offset rather
    /// than a u64 instant keeps the struct small; retention (at most 14 days ≈ 1.2e9 ms)
    /// fits, and anything longer saturates.
    first_received: u32,
    /// The message's size as `max_message_bytes` counts it ([`sluice_engine::message_size`];
    /// at most 64 MiB, so a u32), so the queue's stored bytes are summed without a disk read.
    pub size: u32,
}

impl MsgState {
    pub(crate) fn new(sent_at: Millis, visible_at: Millis, size: u32) -> Self {
        Self {
            sent_at,
            visible_at,
            delivery: 0,
            receive_count: 0,
            first_received: 0,
            size,
        }
    }

    pub(crate) fn first_received_at(&self) -> Option<Millis> {
        (self.first_received > 0).then(|| self.sent_at + Millis::from(self.first_received - 1))
    }

    /// Counts one more delivery, numbered `delivery`, made at `now`.
    pub(crate) fn count_delivery(&mut self, now: Millis, delivery: u64) {
        self.receive_count = self.receive_count.saturating_add(1);
        if self.first_received == 0 {
            let offset = now
                .saturating_sub(self.sent_at)
                .min(Millis::from(u32::MAX - 1));
            self.first_received = u32::try_from(offset).map_or(u32::MAX, |o| o + 1);
        }
        self.delivery = delivery;
    }

    pub(crate) fn expired(&self, retention_ms: Millis, now: Millis) -> bool {
        self.sent_at.saturating_add(retention_ms) <= now
    }

    pub(crate) fn state(&self, now: Millis) -> MessageState {
        if self.visible_at <= now {
            MessageState::Visible
        } else if self.receive_count > 0 {
            MessageState::InFlight
        } else {
            MessageState::Delayed
        }
    }
}

/// One message handed out by
/// [`QueueState::receive_with`](crate::index::QueueState::receive_with) or listed by
/// [`QueueState::peek`](crate::index::QueueState::peek): the bookkeeping to report; the caller
/// reads the rest from disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Picked {
    pub seq: u64,
    pub state: MsgState,
}
