//! The protocol-neutral face of a queue service as the load generator sees it, and the message
//! body format every driver carries.
//!
//! A [`Driver`] is one queue on one service (created when the driver opens). It hands out
//! [`Producer`]s and [`Consumer`]s, each owning its own connection, so N producers and M
//! consumers are N + M clients, as they would be in production. The load loop in `load.rs`
//! only speaks these traits; each submodule speaks one wire protocol:
//!
//! * `sluice`: Sluice's REST API (and the no-op ceiling server, which mimics its answers);
//! * `amqp`: RabbitMQ over AMQP 0-9-1 (durable queue, persistent messages, confirms, acks);
//! * `sqs`: the SQS API through `aws-sdk-sqs` (moto's server).

pub(crate) mod amqp;
pub(crate) mod sluice;
pub(crate) mod sqs;

use std::fmt;
use std::future::Future;
use std::time::Duration;

/// The queue a run uses.
#[derive(Clone, Debug)]
pub(crate) struct QueueSpec {
    pub name: String,
    /// FIFO queue: messages carry a group id and a deduplication id.
    pub fifo: bool,
}

/// One message to send.
pub(crate) struct Outgoing {
    pub body: String,
    /// FIFO only: the message group.
    pub group: Option<String>,
    /// FIFO only: the deduplication id (the sequence id, so every message is distinct).
    pub dedup: Option<String>,
}

/// One message received: its body (to check and time it) and whatever the protocol needs to
/// acknowledge it.
pub(crate) struct Delivery<H> {
    pub body: Vec<u8>,
    pub handle: H,
}

pub(crate) trait Driver: Send + Sync + 'static {
    type Producer: Producer;
    type Consumer: Consumer;

    /// False when deliveries do not carry what producers sent (the no-op ceiling answers canned
    /// messages): the load loop then skips the correctness ledger and end-to-end latency.
    fn verifies(&self) -> bool {
        true
    }

    fn producer(&self) -> impl Future<Output = anyhow::Result<Self::Producer>> + Send;

    /// A consumer that receives up to `max` messages at a time, long-polling up to `wait`.
    fn consumer(
        &self,
        max: usize,
        wait: Duration,
    ) -> impl Future<Output = anyhow::Result<Self::Consumer>> + Send;

    /// Removes the queue (best effort, after the run).
    fn delete_queue(&self) -> impl Future<Output = anyhow::Result<()>> + Send;
}

pub(crate) trait Producer: Send + 'static {
    /// Sends the messages and returns, per message, whether the service acknowledged it (a
    /// durable service acknowledges only what it has stored), with the reason when some entries
    /// of a batch failed. A transport error is an `Err`: none of the messages counts as
    /// acknowledged.
    fn send(
        &mut self,
        batch: &[Outgoing],
    ) -> impl Future<Output = anyhow::Result<Outcome<Vec<bool>>>> + Send;
}

pub(crate) trait Consumer: Send + 'static {
    type Handle: Send;

    /// Receives up to the consumer's batch size; an empty answer after the long-poll wait is Ok.
    fn receive(
        &mut self,
    ) -> impl Future<Output = anyhow::Result<Vec<Delivery<Self::Handle>>>> + Send;

    /// Deletes (acknowledges) the received messages; returns how many the service confirmed.
    fn delete(
        &mut self,
        handles: Vec<Self::Handle>,
    ) -> impl Future<Output = anyhow::Result<Outcome<usize>>> + Send;
}

/// What a batch operation achieved, and why part of it failed (one failed entry of a batch does
/// not undo the others, so it is not an `Err`).
pub(crate) struct Outcome<T> {
    pub value: T,
    pub failure: Option<String>,
}

impl<T> Outcome<T> {
    pub(crate) fn ok(value: T) -> Self {
        Self {
            value,
            failure: None,
        }
    }
}

/// The run cannot happen on this target because the service does not offer the feature (e.g.
/// FIFO queues answered 400). The binary exits with code 3 so the script can report "not
/// available" instead of a failure.
#[derive(Debug)]
pub(crate) struct Unsupported(pub String);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not available: {}", self.0)
    }
}

impl std::error::Error for Unsupported {}

/// Bytes of header at the start of every body: 16 hex digits of sequence id, 16 of send time.
pub(crate) const HEADER_BYTES: usize = 32;

/// A body of `size` bytes carrying `seq` and the intended send time (µs since the run started),
/// padded with `x`. Only `[0-9a-fx]`: nothing to escape in JSON, XML or form encoding, so the
/// size on the wire is the size asked for.
pub(crate) fn make_body(seq: u64, sent_micros: u64, size: usize) -> String {
    let mut body = format!("{seq:016x}{sent_micros:016x}");
    body.extend(std::iter::repeat_n('x', size.saturating_sub(HEADER_BYTES)));
    body
}

/// The sequence id and send time of a body made by [`make_body`], or None for a foreign body.
pub(crate) fn parse_body(body: &[u8]) -> Option<(u64, u64)> {
    let head = std::str::from_utf8(body.get(..HEADER_BYTES)?).ok()?;
    let seq = u64::from_str_radix(&head[..16], 16).ok()?;
    let micros = u64::from_str_radix(&head[16..], 16).ok()?;
    Some((seq, micros))
}

/// Shortens an error for the per-kind error counts: the first line, at most 120 characters.
pub(crate) fn error_kind(e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    let line = text.lines().next().unwrap_or("");
    line.chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_round_trip() {
        let body = make_body(0xabc << 40 | 7, 123_456, 1024);
        assert_eq!(body.len(), 1024);
        assert_eq!(
            parse_body(body.as_bytes()),
            Some((0xabc << 40 | 7, 123_456))
        );
        assert_eq!(parse_body(b"short"), None);
        assert_eq!(parse_body(&[b'z'; 40]), None);
    }

    #[test]
    fn small_bodies_keep_the_header() {
        assert_eq!(make_body(1, 2, 8).len(), HEADER_BYTES);
    }
}
