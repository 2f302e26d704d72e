//! The records engines store and return. Times are [`Millis`]; validation of values (ranges,
//! sizes, attribute syntax) happens in the services before anything reaches an engine.

use crate::{Millis, PayloadRef, QueueName, TenantId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A queue's configuration with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// How long a received message stays hidden (0–43200 s).
    pub visibility_timeout_seconds: u32,
    /// How long a message is kept before it expires (60–1209600 s).
    pub message_retention_seconds: u32,
    /// Delay applied to every message that names no delay of its own (0–900 s).
    pub delay_seconds: u32,
    /// Default long-poll wait of a receive (0–20 s).
    pub receive_wait_seconds: u32,
    /// Largest message accepted, body plus attributes.
    pub max_message_bytes: u32,
    /// Sends past this many stored messages are refused; `None` is unbounded.
    pub max_depth: Option<u64>,
    /// Free-form labels.
    pub tags: BTreeMap<String, String>,
    /// FIFO only: a send without a deduplication id uses the SHA-256 of its body (the services
    /// compute it and pass it as the message's `deduplication_id`).
    #[serde(default)]
    pub content_based_deduplication: bool,
    /// FIFO only: whether deduplication ids are unique per queue or per message group.
    #[serde(default)]
    pub deduplication_scope: DeduplicationScope,
    /// Where messages go after too many receives; `None`: they stay until they expire.
    #[serde(default)]
    pub redrive_policy: Option<RedrivePolicy>,
    /// Which queues may name this one as their dead-letter queue; `None` allows all.
    #[serde(default)]
    pub redrive_allow_policy: Option<RedriveAllowPolicy>,
    /// Extra hiding after each redelivery; `None`: only the visibility timeout.
    #[serde(default)]
    pub retry_backoff: Option<RetryBackoff>,
}

/// A queue's dead-letter rule: a message received `max_receive_count` times and not deleted
/// is moved to `dead_letter_queue` (same tenant, same kind) by the next receive that would
/// deliver it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedrivePolicy {
    /// The dead-letter queue, in the same tenant.
    pub dead_letter_queue: QueueName,
    /// 1–1000.
    pub max_receive_count: u32,
}

/// Which queues may use a queue as their dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    rename_all = "snake_case",
    tag = "permission",
    content = "source_queues"
)]
pub enum RedriveAllowPolicy {
    /// Any queue of the tenant.
    AllowAll,
    /// None.
    DenyAll,
    /// Only these (1–10 names).
    ByQueue(Vec<QueueName>),
}

impl RedriveAllowPolicy {
    /// Whether `source` may name the queue with this policy as its dead-letter queue.
    pub fn admits(&self, source: &QueueName) -> bool {
        match self {
            Self::AllowAll => true,
            Self::DenyAll => false,
            Self::ByQueue(names) => names.contains(source),
        }
    }
}

/// Exponential extra hiding between redeliveries (beyond SQS): a message received for the
/// k-th time is hidden for `visibility_timeout + b(k)`, where b(1) = 0 and
/// b(k) = min(max_seconds, base_seconds × 2^(k−2)); with `jitter`, b(k) is drawn uniformly
/// from [b(k)/2, b(k)].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryBackoff {
    /// 1–43200.
    pub base_seconds: u32,
    /// `base_seconds`–43200.
    pub max_seconds: u32,
    /// Spread redeliveries at random over the upper half of each step.
    pub jitter: bool,
}

impl RetryBackoff {
    /// b(k) in milliseconds before jitter, for a message being received for the
    /// `receive_count`-th time (1 for its first delivery).
    pub fn backoff_ms(&self, receive_count: u32) -> Millis {
        if receive_count < 2 {
            return 0;
        }
        let doublings = (receive_count - 2).min(32);
        let seconds = u64::from(self.base_seconds)
            .saturating_mul(1u64 << doublings)
            .min(u64::from(self.max_seconds));
        seconds * 1000
    }

    /// The extra hiding for the `receive_count`-th delivery, with `unit` (uniform in [0, 1))
    /// placing it in [b/2, b] when jitter is on. Engines draw `unit` themselves.
    pub fn delay_ms(&self, receive_count: u32, unit: f64) -> Millis {
        let full = self.backoff_ms(receive_count);
        if !self.jitter || full == 0 {
            return full;
        }
        let half = full / 2;
        half + ((full - half) as f64 * unit.clamp(0.0, 1.0)) as Millis
    }
}

/// Why a message is in a dead-letter queue: where it came from, why, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The queue it was moved from (same tenant).
    pub source_queue: QueueName,
    /// [`DeadLetter::MAX_RECEIVE_COUNT_EXCEEDED`], or the reason a consumer gave.
    pub reason: String,
    /// Its receive count at the source when it moved.
    pub receive_count: u32,
    /// When it moved.
    pub moved_at: Millis,
}

impl DeadLetter {
    /// The reason of an automatic move after `max_receive_count` receives.
    pub const MAX_RECEIVE_COUNT_EXCEEDED: &'static str = "max_receive_count_exceeded";
}

/// How far a FIFO deduplication id reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeduplicationScope {
    /// One id space per queue (SQS's default).
    #[default]
    Queue,
    /// One id space per message group.
    MessageGroup,
}

/// A FIFO deduplication id accepted at `t` makes later sends with the same id (in its scope)
/// duplicates until `t + DEDUPLICATION_WINDOW_MS`.
pub const DEDUPLICATION_WINDOW_MS: Millis = 5 * 60 * 1000;

/// A retried FIFO receive with the same `request_attempt_id` within this long after the first
/// answers the same messages with the same receipt handles.
pub const RECEIVE_ATTEMPT_WINDOW_MS: Millis = 5 * 60 * 1000;

impl QueueConfig {
    /// SQS's defaults, with `max_message_bytes` capped by the server's maximum.
    pub fn with_defaults(server_max_message_bytes: u32) -> Self {
        Self {
            visibility_timeout_seconds: 30,
            message_retention_seconds: 345_600,
            delay_seconds: 0,
            receive_wait_seconds: 0,
            max_message_bytes: server_max_message_bytes.min(1_048_576),
            max_depth: None,
            tags: BTreeMap::new(),
            content_based_deduplication: false,
            deduplication_scope: DeduplicationScope::Queue,
            redrive_policy: None,
            redrive_allow_policy: None,
            retry_backoff: None,
        }
    }
}

/// Counts of a queue's messages at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Receivable now.
    pub visible: u64,
    /// Received and neither deleted nor visible again yet.
    pub in_flight: u64,
    /// Sent but not receivable before their delay ends.
    pub delayed: u64,
    /// When the oldest message still stored was sent.
    pub oldest_sent_at: Option<Millis>,
    /// The sum of the sizes ([`message_size_with_payload`](crate::message_size_with_payload),
    /// payloads included) of the messages counted
    /// above (every state; expired messages left out like in the counts). Changes in the same
    /// atomic step as each add and removal.
    #[serde(default)]
    pub stored_bytes: u64,
}

/// A queue as the engine knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    /// The owner.
    pub tenant: TenantId,
    /// The name.
    pub name: QueueName,
    /// The configuration in force.
    pub config: QueueConfig,
    /// When the name was first created (kept across configuration replacements).
    pub created_at: Millis,
    /// When the configuration last changed.
    pub updated_at: Millis,
    /// Counts at the `now` the caller passed in.
    pub stats: QueueStats,
}

/// One typed message attribute, as sent. Binary values stay in their base64 text form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageAttribute {
    /// `String`, `Number` or `Binary`, optionally with a `.custom` suffix.
    pub data_type: String,
    /// The value as text (base64 for `Binary`).
    pub value: String,
}

/// A message the services have validated and want stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    /// Globally unique id chosen by the services.
    pub message_id: String,
    /// The UTF-8 body.
    pub body: String,
    /// Typed attributes by name.
    pub attributes: BTreeMap<String, MessageAttribute>,
    /// Not receivable before this instant (send time when there is no delay).
    pub visible_at: Millis,
    /// Caller's group id (standard queues: returned, no ordering implied; FIFO queues:
    /// required, the unit of ordering).
    pub group_id: Option<String>,
    /// FIFO queues: required (the services fill it in for content-based deduplication).
    pub deduplication_id: Option<String>,
    /// The body kept in a payload store; when `Some`, `body` is what the engine stores (empty
    /// for a plain spilled message, the envelope with an empty `Message` for an enveloped one).
    pub payload: Option<PayloadRef>,
}

/// What the engine answers for one accepted message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentMessage {
    /// The id the message was stored under (for a duplicate: the original's).
    pub message_id: String,
    /// The message's position in its queue (strictly increasing per queue incarnation; for a
    /// duplicate: the original's).
    pub seq: u64,
    /// A FIFO deduplication hit: nothing was enqueued.
    pub duplicate: bool,
}

/// A stored message with its delivery bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// The id given at send.
    pub message_id: String,
    /// The body.
    pub body: String,
    /// The attributes.
    pub attributes: BTreeMap<String, MessageAttribute>,
    /// When it was accepted.
    pub sent_at: Millis,
    /// Deliveries so far, this one included when returned by a receive.
    pub receive_count: u32,
    /// When it was first delivered.
    pub first_received_at: Option<Millis>,
    /// The caller's group id.
    pub group_id: Option<String>,
    /// FIFO queues: the deduplication id it was sent with (or the body's SHA-256).
    pub deduplication_id: Option<String>,
    /// The message's position in its queue.
    pub seq: u64,
    /// Set while it is in a dead-letter queue: where it came from and why.
    pub dead_letter: Option<DeadLetter>,
    /// The body kept in a payload store, as sent (unchanged by every move).
    pub payload: Option<PayloadRef>,
}

/// One delivery: the message and the handle that names this delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// The message, with counts that include this delivery.
    pub message: StoredMessage,
    /// The handle to delete or change visibility with.
    pub receipt_handle: String,
}

/// The answer of one receive attempt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReceiveOutcome {
    /// Up to the requested number of deliveries.
    pub messages: Vec<ReceivedMessage>,
    /// When some message not receivable now will become receivable (a delay or visibility
    /// timeout ending), so a long poll knows when to look again without polling.
    pub next_visible_at: Option<Millis>,
    /// How many messages this receive moved to the queue's dead-letter queue instead of
    /// delivering them.
    pub dead_lettered: u64,
}

/// The three states a stored message can be in, as peek names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageState {
    /// Receivable now.
    Visible,
    /// Received, hidden until its visibility timeout ends.
    InFlight,
    /// Never received, hidden until its delay ends.
    Delayed,
}

/// Per-tenant limits; `None` means unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    /// Most queues the tenant may own.
    pub max_queues: Option<u64>,
    /// Most topics the tenant may own.
    pub max_topics: Option<u64>,
    /// Sustained request rate (at least 1), enforced per request by a [`RateLimiter`](crate::RateLimiter).
    pub requests_per_second: Option<u64>,
    /// The rate limit's bucket size: requests admitted at once after a quiet spell (default:
    /// `requests_per_second`; meaningless without it).
    pub burst: Option<u64>,
    /// Most bytes of messages the tenant may store.
    pub max_stored_bytes: Option<u64>,
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRecord {
    /// The id.
    pub id: TenantId,
    /// Its limits.
    pub quotas: Quotas,
    /// When it was created (or first named by a token).
    pub created_at: Millis,
}

/// One page of [`Transfers::message_seqs`](crate::Transfers::message_seqs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SeqScan {
    /// Stored messages' seqs, ascending.
    pub seqs: Vec<u64>,
    /// Every seq up to this one was looked at: the next call's `after`.
    pub scanned_to: u64,
    /// The highest seq the queue has handed out (0: none yet).
    pub last_seq: u64,
}

/// A record of [`Records`](crate::Records): its text and its version (1 for a new record, one
/// more per write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Bumped by every write.
    pub version: u64,
    /// The text the services stored (JSON).
    pub value: String,
}
