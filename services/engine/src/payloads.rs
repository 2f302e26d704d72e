//! Bodies kept outside the engine: the [`PayloadRef`] a message carries instead of its body, and
//! the payload events an engine records with every change that adds or removes such a message,
//! so a payload store can free objects no message refers to without a round trip on the hot
//! path (the [`Payloads`](crate::Payloads) capability reads and acknowledges them).

use crate::MessageAttribute;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A body kept outside the engine, in a payload store: the engine stores and carries only this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadRef {
    /// The object's key in the payload store (`<tenant>/<32 hex>`; opaque to the engine).
    pub key: String,
    /// The object's size in bytes (counted in the message's size: `max_message_bytes` of
    /// fan-out copies, `stored_bytes`).
    pub size: u64,
    /// The stored body is an SNS notification envelope whose `Message` value is empty and is
    /// to be replaced by the object's bytes when read; `false`: the object is the whole body.
    pub enveloped: bool,
}

/// What happened to a message with a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PayloadEventKind {
    /// A message with a payload was committed (a send that was not a FIFO duplicate, or one
    /// copy of a publication, recorded at the publish's commit).
    Added,
    /// A message with a payload left the store for good (delete, purge, expiry, queue or tenant
    /// deletion, a fan-out copy no queue took, ...). Moves between queues record nothing.
    Released,
}

/// One recorded change of a message with a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadEvent {
    /// Added or released.
    pub kind: PayloadEventKind,
    /// The payload's key ([`PayloadRef::key`]).
    pub key: String,
    /// The message's id (for a fan-out copy, the copy's queue-level id).
    pub message_id: String,
}

/// Events read together; `cursor` is opaque to callers (engine-specific positions).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PayloadEventBatch {
    /// The events, in recording order within one queue or topic (no order across them).
    pub events: Vec<PayloadEvent>,
    /// What [`Payloads::ack_payload_events`](crate::Payloads::ack_payload_events) forgets.
    pub cursor: Vec<String>,
}

/// [`message_size`](crate::message_size) of a message that may keep its body in a payload
/// store: the stored body and attributes plus the payload's size. What `stored_bytes` sums and
/// what a queue's `max_message_bytes` bounds.
pub fn message_size_with_payload(
    body: &str,
    attributes: &BTreeMap<String, MessageAttribute>,
    payload: Option<&PayloadRef>,
) -> usize {
    let payload = payload.map_or(0, |p| usize::try_from(p.size).unwrap_or(usize::MAX));
    crate::message_size(body, attributes).saturating_add(payload)
}
