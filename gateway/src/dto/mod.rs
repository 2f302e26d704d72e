//! The REST v1 wire types: what the JSON bodies look like, with their OpenAPI schemas, and the
//! conversions to and from the services' domain types. Times are RFC 3339 UTC with
//! milliseconds; durations are integer seconds.

use serde::{Deserialize, Deserializer, Serialize};
use sluice_engine::{DeduplicationScope, MessageAttribute, Millis, Quotas, TenantRecord};
use sluice_services::{
    MessageView, QueueConfigPatch, QueueView, RedriveAllowPolicyInput, RedrivePolicyInput,
    RedriveStatus, RedriveTask, RetryBackoffInput, SendRequest, SendResult,
};
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};

mod access_keys;
mod topics;
pub use access_keys::*;
pub use topics::*;

/// Formats epoch milliseconds as RFC 3339 UTC with milliseconds and a `Z`.
pub fn rfc3339(millis: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(millis as i64)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Tells "absent" (outer `None`) from "null" (`Some(None)`).
fn double_option<'de, T, D>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// Where a queue's messages go after too many receives: a message received
/// `max_receive_count` times and not deleted is moved to `dead_letter_queue` by the next
/// receive that would deliver it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedrivePolicy {
    /// A queue of the same tenant and kind (FIFO source, FIFO dead-letter queue), not this one,
    /// whose `redrive_allow_policy` admits this queue.
    pub dead_letter_queue: String,
    /// 1–1000.
    #[schema(minimum = 1, maximum = 1000)]
    pub max_receive_count: u32,
}

impl From<RedrivePolicy> for RedrivePolicyInput {
    fn from(policy: RedrivePolicy) -> Self {
        RedrivePolicyInput {
            dead_letter_queue: policy.dead_letter_queue,
            max_receive_count: policy.max_receive_count,
        }
    }
}

impl From<sluice_engine::RedrivePolicy> for RedrivePolicy {
    fn from(policy: sluice_engine::RedrivePolicy) -> Self {
        RedrivePolicy {
            dead_letter_queue: policy.dead_letter_queue.as_str().to_owned(),
            max_receive_count: policy.max_receive_count,
        }
    }
}

/// Which queues may use this one as their dead-letter queue.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveAllowPolicy {
    /// `allow_all`, `deny_all` or `by_queue`.
    pub permission: String,
    /// 1–10 queue names; required with `by_queue`, refused otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_queues: Option<Vec<String>>,
}

impl From<RedriveAllowPolicy> for RedriveAllowPolicyInput {
    fn from(policy: RedriveAllowPolicy) -> Self {
        RedriveAllowPolicyInput {
            permission: policy.permission,
            source_queues: policy.source_queues,
        }
    }
}

impl From<sluice_engine::RedriveAllowPolicy> for RedriveAllowPolicy {
    fn from(policy: sluice_engine::RedriveAllowPolicy) -> Self {
        use sluice_engine::RedriveAllowPolicy as Allow;
        let (permission, source_queues) = match policy {
            Allow::AllowAll => ("allow_all", None),
            Allow::DenyAll => ("deny_all", None),
            Allow::ByQueue(names) => (
                "by_queue",
                Some(names.iter().map(|n| n.as_str().to_owned()).collect()),
            ),
        };
        RedriveAllowPolicy {
            permission: permission.to_owned(),
            source_queues,
        }
    }
}

/// Exponential extra hiding between redeliveries (beyond SQS): a message received for the
/// k-th time is hidden for the visibility timeout plus b(k), where b(1) = 0 and
/// b(k) = min(max_seconds, base_seconds × 2^(k−2)); with `jitter`, b(k) is drawn uniformly
/// from [b(k)/2, b(k)].
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryBackoff {
    /// 1–43200.
    #[schema(minimum = 1, maximum = 43200)]
    pub base_seconds: u32,
    /// Required: `base_seconds`–43200.
    #[schema(required = true, minimum = 1, maximum = 43200)]
    pub max_seconds: Option<u32>,
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<bool>,
}

impl From<RetryBackoff> for RetryBackoffInput {
    fn from(backoff: RetryBackoff) -> Self {
        RetryBackoffInput {
            base_seconds: backoff.base_seconds,
            max_seconds: backoff.max_seconds,
            jitter: backoff.jitter,
        }
    }
}

impl From<sluice_engine::RetryBackoff> for RetryBackoff {
    fn from(backoff: sluice_engine::RetryBackoff) -> Self {
        RetryBackoff {
            base_seconds: backoff.base_seconds,
            max_seconds: Some(backoff.max_seconds),
            jitter: Some(backoff.jitter),
        }
    }
}

/// A queue configuration in a request. Every field is optional: `PUT` resets omitted fields to
/// their defaults, `PATCH` leaves them alone.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueConfigInput {
    /// Default 30; 0–43200.
    #[schema(maximum = 43200)]
    pub visibility_timeout_seconds: Option<u32>,
    /// Default 345600 (4 days); 60–1209600.
    #[schema(minimum = 60, maximum = 1209600)]
    pub message_retention_seconds: Option<u32>,
    /// Default 0; 0–900.
    #[schema(maximum = 900)]
    pub delay_seconds: Option<u32>,
    /// Default 0; 0–20.
    #[schema(maximum = 20)]
    pub receive_wait_seconds: Option<u32>,
    /// Default 1048576 (1 MiB), or the server's maximum (`--max-message-bytes`) if that is
    /// smaller; 1024 – that maximum, which may be up to 67108864 when the server has a payload
    /// store (a queue takes messages above 1 MiB only when this is set above it).
    #[schema(minimum = 1024, maximum = 67108864)]
    pub max_message_bytes: Option<u32>,
    /// Default null (messages stay until they expire).
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<RedrivePolicy>, nullable)]
    pub redrive_policy: Option<Option<RedrivePolicy>>,
    /// Default null (any queue of the tenant may use this one as its dead-letter queue).
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<RedriveAllowPolicy>, nullable)]
    pub redrive_allow_policy: Option<Option<RedriveAllowPolicy>>,
    /// Default null (redeliveries wait the visibility timeout only).
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<RetryBackoff>, nullable)]
    pub retry_backoff: Option<Option<RetryBackoff>>,
    /// FIFO queues only. Default false.
    pub content_based_deduplication: Option<bool>,
    /// FIFO queues only: `queue` (default) or `message_group`.
    pub deduplication_scope: Option<String>,
    /// Sends past this many stored messages answer 429 `QueueFull`; `null` is unbounded.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<u64>, nullable, minimum = 1)]
    pub max_depth: Option<Option<u64>>,
    /// At most 50.
    pub tags: Option<BTreeMap<String, String>>,
}

impl From<QueueConfigInput> for QueueConfigPatch {
    fn from(input: QueueConfigInput) -> Self {
        QueueConfigPatch {
            visibility_timeout_seconds: input.visibility_timeout_seconds,
            message_retention_seconds: input.message_retention_seconds,
            delay_seconds: input.delay_seconds,
            receive_wait_seconds: input.receive_wait_seconds,
            max_message_bytes: input.max_message_bytes,
            max_depth: input.max_depth,
            tags: input.tags,
            redrive_policy: input.redrive_policy.map(|p| p.map(Into::into)),
            redrive_allow_policy: input.redrive_allow_policy.map(|p| p.map(Into::into)),
            retry_backoff: input.retry_backoff.map(|p| p.map(Into::into)),
            content_based_deduplication: input.content_based_deduplication,
            deduplication_scope: input.deduplication_scope,
        }
    }
}

/// A queue's configuration with every default filled in.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QueueConfigOutput {
    /// Seconds a received message stays hidden.
    pub visibility_timeout_seconds: u32,
    /// Seconds a message is kept.
    pub message_retention_seconds: u32,
    /// Seconds every message is held back.
    pub delay_seconds: u32,
    /// Default long-poll wait.
    pub receive_wait_seconds: u32,
    /// Largest message accepted, body plus attributes.
    pub max_message_bytes: u32,
    /// Where messages go after too many receives; `null`: nowhere.
    #[schema(value_type = Option<RedrivePolicy>)]
    pub redrive_policy: Option<RedrivePolicy>,
    /// Which queues may use this one as their dead-letter queue; `null` allows all.
    #[schema(value_type = Option<RedriveAllowPolicy>)]
    pub redrive_allow_policy: Option<RedriveAllowPolicy>,
    /// Extra hiding between redeliveries; `null`: none.
    #[schema(value_type = Option<RetryBackoff>)]
    pub retry_backoff: Option<RetryBackoff>,
    /// `null` is unbounded.
    pub max_depth: Option<u64>,
    /// Labels.
    pub tags: BTreeMap<String, String>,
    /// FIFO queues only (absent on standard queues): deduplicate by the body's SHA-256 when a
    /// send names no deduplication id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_based_deduplication: Option<bool>,
    /// FIFO queues only (absent on standard queues): `queue` or `message_group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deduplication_scope: Option<String>,
}

/// Message counts of a queue.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QueueStatsOutput {
    /// Receivable now.
    pub visible: u64,
    /// Received, not yet deleted or visible again.
    pub in_flight: u64,
    /// Waiting for their delay to end.
    pub delayed: u64,
    /// Age of the oldest message not yet deleted; `null` when there is none.
    pub oldest_age_seconds: Option<u64>,
    /// Bytes of the messages counted above (every state, expired ones left out), each as
    /// `max_message_bytes` counts it: body plus attribute names, types and values. What the
    /// tenant quota `max_stored_bytes` adds up.
    pub stored_bytes: u64,
}

/// A queue.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Queue {
    /// Its name.
    pub name: String,
    /// `standard` or `fifo`.
    pub kind: String,
    /// The configuration in force.
    pub config: QueueConfigOutput,
    /// When first created.
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When last configured.
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// Counts now.
    pub stats: QueueStatsOutput,
}

impl From<QueueView> for Queue {
    fn from(view: QueueView) -> Self {
        let config = view.config;
        let fifo = view.name.is_fifo();
        Queue {
            kind: if view.name.is_fifo() {
                "fifo"
            } else {
                "standard"
            }
            .to_owned(),
            name: view.name.as_str().to_owned(),
            config: QueueConfigOutput {
                visibility_timeout_seconds: config.visibility_timeout_seconds,
                message_retention_seconds: config.message_retention_seconds,
                delay_seconds: config.delay_seconds,
                receive_wait_seconds: config.receive_wait_seconds,
                max_message_bytes: config.max_message_bytes,
                redrive_policy: config.redrive_policy.map(Into::into),
                redrive_allow_policy: config.redrive_allow_policy.map(Into::into),
                retry_backoff: config.retry_backoff.map(Into::into),
                max_depth: config.max_depth,
                tags: config.tags,
                content_based_deduplication: fifo.then_some(config.content_based_deduplication),
                deduplication_scope: fifo.then(|| {
                    match config.deduplication_scope {
                        DeduplicationScope::Queue => "queue",
                        DeduplicationScope::MessageGroup => "message_group",
                    }
                    .to_owned()
                }),
            },
            created_at: rfc3339(view.created_at),
            updated_at: rfc3339(view.updated_at),
            stats: QueueStatsOutput {
                visible: view.stats.visible,
                in_flight: view.stats.in_flight,
                delayed: view.stats.delayed,
                oldest_age_seconds: view.oldest_age_seconds,
                stored_bytes: view.stats.stored_bytes,
            },
        }
    }
}

/// One page of queues.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct QueueList {
    /// Ordered by name.
    pub queues: Vec<Queue>,
    /// Pass as `next_token` for the next page; `null` on the last.
    pub next_token: Option<String>,
}

/// Query of `GET /v1/queues`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQueuesQuery {
    /// Only names starting with this.
    pub prefix: Option<String>,
    /// 1–1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// From the previous page.
    pub next_token: Option<String>,
}

/// Body of `POST /v1/queues/{dlq}/redrive`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveInput {
    /// Where to move the messages: a queue of the same kind. Default: each message's
    /// `dead_letter.source_queue`.
    pub destination: Option<String>,
    /// 1–500, default 500.
    #[schema(minimum = 1, maximum = 500)]
    pub max_messages_per_second: Option<u32>,
}

/// A redrive task: moving a dead-letter queue's messages back out, at a bounded rate.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RedriveTaskOutput {
    /// Opaque id.
    pub id: String,
    /// The dead-letter queue being emptied.
    pub source: String,
    /// Where messages go; `null`: each message's `dead_letter.source_queue`.
    pub destination: Option<String>,
    /// `running`, `completed`, `cancelled` or `failed`.
    pub status: String,
    /// Messages moved so far.
    pub moved: u64,
    /// Messages that could not move (their source queue is gone, or they never had one); they
    /// stay in the dead-letter queue.
    pub failed: u64,
    /// The dead-letter queue's depth when the task started.
    pub to_move: u64,
    /// The rate limit.
    pub max_messages_per_second: u32,
    /// When it started.
    #[schema(format = DateTime)]
    pub started_at: String,
    /// When it ended; `null` while running.
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
    /// Why it failed (`failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl From<RedriveTask> for RedriveTaskOutput {
    fn from(task: RedriveTask) -> Self {
        RedriveTaskOutput {
            id: task.id,
            source: task.source.as_str().to_owned(),
            destination: task.destination.map(|d| d.as_str().to_owned()),
            status: match task.status {
                RedriveStatus::Running => "running",
                RedriveStatus::Completed => "completed",
                RedriveStatus::Cancelled => "cancelled",
                RedriveStatus::Failed => "failed",
            }
            .to_owned(),
            moved: task.moved,
            failed: task.failed,
            to_move: task.to_move,
            max_messages_per_second: task.max_messages_per_second,
            started_at: rfc3339(task.started_at),
            finished_at: task.finished_at.map(rfc3339),
            error: task.error,
        }
    }
}

/// One page of redrive tasks.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RedriveTaskList {
    /// Oldest first.
    pub tasks: Vec<RedriveTaskOutput>,
    /// Pass as `next_token` for the next page; `null` on the last.
    pub next_token: Option<String>,
}

/// Query of `GET /v1/redrive-tasks`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListRedriveTasksQuery {
    /// Only this dead-letter queue's tasks.
    pub queue: Option<String>,
    /// 1–1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// From the previous page.
    pub next_token: Option<String>,
}

/// Query of list endpoints without a prefix.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// 1–1000, default 100.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// From the previous page.
    pub next_token: Option<String>,
}

/// A typed message attribute.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Attribute {
    /// `String`, `Number` or `Binary`, optionally followed by `.` and a custom label.
    #[serde(rename = "type")]
    #[schema(pattern = r"^(String|Number|Binary)(\.[A-Za-z0-9_.-]+)?$")]
    pub data_type: String,
    /// The value as text; base64 for `Binary`.
    #[schema(min_length = 1)]
    pub value: String,
}

pub(crate) fn to_domain(
    attributes: Option<BTreeMap<String, Attribute>>,
) -> BTreeMap<String, MessageAttribute> {
    attributes
        .unwrap_or_default()
        .into_iter()
        .map(|(name, a)| {
            (
                name,
                MessageAttribute {
                    data_type: a.data_type,
                    value: a.value,
                },
            )
        })
        .collect()
}

/// A message to send.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// Non-empty UTF-8.
    #[schema(min_length = 1)]
    pub body: String,
    /// Up to 10 typed attributes.
    pub attributes: Option<BTreeMap<String, Attribute>>,
    /// 0–900; overrides the queue's delay (standard queues only; refused on FIFO queues).
    #[schema(maximum = 900)]
    pub delay_seconds: Option<u32>,
    /// RFC 3339: deliver not before this time (at most the retention period ahead; standard
    /// queues only).
    pub deliver_at: Option<String>,
    /// FIFO queues: required; messages of one group are delivered in order. Standard queues:
    /// returned on receive, no ordering implied. 1–128 letters, digits and punctuation.
    pub group_id: Option<String>,
    /// FIFO queues only: required unless the queue has `content_based_deduplication`; a send
    /// repeating an id accepted in the last 5 minutes answers the original message.
    pub deduplication_id: Option<String>,
}

impl From<SendMessage> for SendRequest {
    fn from(m: SendMessage) -> Self {
        SendRequest {
            body: m.body,
            attributes: to_domain(m.attributes),
            delay_seconds: m.delay_seconds,
            deliver_at: m.deliver_at,
            group_id: m.group_id,
            deduplication_id: m.deduplication_id,
        }
    }
}

/// A message in a send batch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendBatchEntry {
    /// Unique in the batch: 1–80 of `[A-Za-z0-9_-]`.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,80}$")]
    pub id: String,
    /// Non-empty UTF-8.
    #[schema(min_length = 1)]
    pub body: String,
    /// Up to 10 typed attributes.
    pub attributes: Option<BTreeMap<String, Attribute>>,
    /// 0–900.
    #[schema(maximum = 900)]
    pub delay_seconds: Option<u32>,
    /// RFC 3339.
    pub deliver_at: Option<String>,
    /// Returned on receive.
    pub group_id: Option<String>,
    /// FIFO queues only.
    pub deduplication_id: Option<String>,
}

impl From<SendBatchEntry> for sluice_services::SendEntry {
    fn from(e: SendBatchEntry) -> Self {
        sluice_services::SendEntry {
            id: e.id,
            message: SendRequest {
                body: e.body,
                attributes: to_domain(e.attributes),
                delay_seconds: e.delay_seconds,
                deliver_at: e.deliver_at,
                group_id: e.group_id,
                deduplication_id: e.deduplication_id,
            },
        }
    }
}

/// A batch of messages to send.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendBatch {
    /// 1–10 entries.
    #[schema(min_items = 1, max_items = 10)]
    pub entries: Vec<SendBatchEntry>,
}

/// What a send answers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SendOutput {
    /// The message's id.
    pub message_id: String,
    /// MD5 of the body, as SQS computes it.
    pub md5_of_body: String,
    /// MD5 of the attributes, as SQS computes it; `null` without attributes.
    pub md5_of_attributes: Option<String>,
    /// FIFO queues only; `null` otherwise.
    pub sequence_number: Option<String>,
    /// A FIFO deduplication hit: the original's `message_id` and `sequence_number`; nothing
    /// was enqueued.
    pub duplicate: bool,
}

impl From<SendResult> for SendOutput {
    fn from(r: SendResult) -> Self {
        SendOutput {
            message_id: r.message_id,
            md5_of_body: r.md5_of_body,
            md5_of_attributes: r.md5_of_attributes,
            sequence_number: r.sequence_number,
            duplicate: r.duplicate,
        }
    }
}

/// A successful send-batch entry.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SendBatchSuccess {
    /// The caller's entry id.
    pub id: String,
    /// The send's answer.
    #[serde(flatten)]
    pub result: SendOutput,
}

/// A failed batch entry.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchFailureOutput {
    /// The caller's entry id.
    pub id: String,
    /// The error code, as in error responses.
    pub code: String,
    /// What went wrong.
    pub message: String,
}

/// The answer of a send batch.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SendBatchOutput {
    /// Entries stored.
    pub successful: Vec<SendBatchSuccess>,
    /// Entries refused, each on its own.
    pub failed: Vec<BatchFailureOutput>,
}

/// A successful entry of a delete or visibility batch.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchSuccess {
    /// The caller's entry id.
    pub id: String,
}

/// The answer of a delete or visibility batch.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchOutput {
    /// Entries done.
    pub successful: Vec<BatchSuccess>,
    /// Entries refused, each on its own.
    pub failed: Vec<BatchFailureOutput>,
}

/// A receive request.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReceiveInput {
    /// 1–10, default 1.
    #[schema(minimum = 1, maximum = 10)]
    pub max_messages: Option<u32>,
    /// 0–43200; default the queue's.
    #[schema(maximum = 43200)]
    pub visibility_timeout_seconds: Option<u32>,
    /// 0–20; default the queue's `receive_wait_seconds`.
    #[schema(maximum = 20)]
    pub wait_seconds: Option<u32>,
    /// FIFO retries (ignored on standard queues).
    pub request_attempt_id: Option<String>,
}

/// Why a message is in a dead-letter queue.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterInfo {
    /// The queue it was moved from.
    pub source_queue: String,
    /// `max_receive_count_exceeded`, or the reason a consumer gave when it moved the message.
    pub reason: String,
    /// Its receive count at the source when it moved.
    pub receive_count: u32,
    /// When it moved.
    #[schema(format = DateTime)]
    pub moved_at: String,
}

impl From<sluice_engine::DeadLetter> for DeadLetterInfo {
    fn from(dead: sluice_engine::DeadLetter) -> Self {
        DeadLetterInfo {
            source_queue: dead.source_queue.as_str().to_owned(),
            reason: dead.reason,
            receive_count: dead.receive_count,
            moved_at: rfc3339(dead.moved_at),
        }
    }
}

/// A consumer's request to move a received message to its queue's dead-letter queue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterInput {
    /// Why: 1–256 characters, no control characters.
    #[schema(min_length = 1, max_length = 256)]
    pub reason: String,
}

/// A message.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Message {
    /// The id given at send.
    pub message_id: String,
    /// Names this delivery (absent in peek answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt_handle: Option<String>,
    /// The body.
    pub body: String,
    /// MD5 of the body.
    pub md5_of_body: String,
    /// The attributes (`{}` when none).
    pub attributes: BTreeMap<String, Attribute>,
    /// MD5 of the attributes; present exactly when there are attributes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub md5_of_attributes: Option<String>,
    /// When it was sent.
    #[schema(format = DateTime)]
    pub sent_at: String,
    /// Deliveries so far.
    pub receive_count: u32,
    /// First delivery; `null` before it.
    #[schema(format = DateTime)]
    pub first_received_at: Option<String>,
    /// The sender's group id.
    pub group_id: Option<String>,
    /// FIFO only; `null` otherwise.
    pub deduplication_id: Option<String>,
    /// FIFO only; `null` otherwise.
    pub sequence_number: Option<String>,
    /// Where a dead-lettered message came from; `null` otherwise.
    pub dead_letter: Option<DeadLetterInfo>,
}

impl From<MessageView> for Message {
    fn from(m: MessageView) -> Self {
        Message {
            message_id: m.message_id,
            receipt_handle: m.receipt_handle,
            body: m.body,
            md5_of_body: m.md5_of_body,
            attributes: m
                .attributes
                .into_iter()
                .map(|(name, a)| {
                    (
                        name,
                        Attribute {
                            data_type: a.data_type,
                            value: a.value,
                        },
                    )
                })
                .collect(),
            md5_of_attributes: m.md5_of_attributes,
            sent_at: rfc3339(m.sent_at),
            receive_count: m.receive_count,
            first_received_at: m.first_received_at.map(rfc3339),
            group_id: m.group_id,
            deduplication_id: m.deduplication_id,
            sequence_number: m.sequence_number,
            dead_letter: m.dead_letter.map(Into::into),
        }
    }
}

/// Messages received or peeked.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MessageList {
    /// The messages.
    pub messages: Vec<Message>,
}

/// A delete-batch entry.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteBatchEntry {
    /// Unique in the batch: 1–80 of `[A-Za-z0-9_-]`.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,80}$")]
    pub id: String,
    /// From a receive.
    pub receipt_handle: String,
}

/// A batch of deletes.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteBatch {
    /// 1–10 entries.
    #[schema(min_items = 1, max_items = 10)]
    pub entries: Vec<DeleteBatchEntry>,
}

/// A visibility change.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VisibilityInput {
    /// 0–43200; 0 makes the message visible now.
    #[schema(maximum = 43200)]
    pub visibility_timeout_seconds: u32,
}

/// A visibility-batch entry.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VisibilityBatchEntry {
    /// Unique in the batch: 1–80 of `[A-Za-z0-9_-]`.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,80}$")]
    pub id: String,
    /// From a receive.
    pub receipt_handle: String,
    /// 0–43200.
    #[schema(maximum = 43200)]
    pub visibility_timeout_seconds: u32,
}

/// A batch of visibility changes.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VisibilityBatch {
    /// 1–10 entries.
    #[schema(min_items = 1, max_items = 10)]
    pub entries: Vec<VisibilityBatchEntry>,
}

/// Query of peek.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PeekQuery {
    /// `visible` (default), `in_flight` or `delayed`.
    pub state: Option<PeekState>,
    /// 1–100, default 10.
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
}

/// Which messages peek shows.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PeekState {
    /// Receivable now.
    Visible,
    /// Received and hidden.
    InFlight,
    /// Waiting for their delay.
    Delayed,
}

/// Per-tenant limits; `null` is unlimited.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotasBody {
    /// Most queues the tenant may own (enforced).
    pub max_queues: Option<u64>,
    /// Most topics (stored; topics are not built yet).
    pub max_topics: Option<u64>,
    /// Sustained requests per second, at least 1 (enforced: a token bucket over the tenant's
    /// `/v1` requests outside `/v1/admin`; past it, 429 `RateLimited` with `Retry-After`).
    #[schema(minimum = 1)]
    pub requests_per_second: Option<u64>,
    /// The bucket's size: requests admitted at once after a quiet spell, at least 1 (default:
    /// `requests_per_second`). Needs `requests_per_second`.
    #[schema(minimum = 1)]
    pub burst: Option<u64>,
    /// Most bytes of messages the tenant may store, summed over its queues' `stored_bytes`
    /// (enforced: a send, batch entry or publish whose copies would go past it is 429
    /// `QuotaExceeded` with `Retry-After`; deletes free bytes within seconds).
    pub max_stored_bytes: Option<u64>,
}

impl From<QuotasBody> for Quotas {
    fn from(q: QuotasBody) -> Self {
        Quotas {
            max_queues: q.max_queues,
            max_topics: q.max_topics,
            requests_per_second: q.requests_per_second,
            burst: q.burst,
            max_stored_bytes: q.max_stored_bytes,
        }
    }
}

impl From<Quotas> for QuotasBody {
    fn from(q: Quotas) -> Self {
        QuotasBody {
            max_queues: q.max_queues,
            max_topics: q.max_topics,
            requests_per_second: q.requests_per_second,
            burst: q.burst,
            max_stored_bytes: q.max_stored_bytes,
        }
    }
}

/// A tenant to create.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// 1–64 of `[a-z0-9_-]`.
    #[schema(pattern = "^[a-z0-9_-]{1,64}$")]
    pub id: String,
    /// Its limits (default: none).
    #[serde(default)]
    pub quotas: QuotasBody,
    /// Its AWS account id: 12 digits, unique (default: a random one; `000000000000` is the
    /// development tenant `default`'s).
    #[schema(pattern = "^[0-9]{12}$")]
    pub aws_account_id: Option<String>,
}

/// A tenant's new quotas.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTenant {
    /// Replaces the quotas.
    pub quotas: QuotasBody,
}

/// A tenant.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Tenant {
    /// Its id.
    pub id: String,
    /// Its limits.
    pub quotas: QuotasBody,
    /// When created (or first named by a token).
    #[schema(format = DateTime)]
    pub created_at: String,
    /// The 12-digit account id in its ARNs and queue URLs, and what STS `GetCallerIdentity`
    /// answers for its access keys.
    #[schema(pattern = "^[0-9]{12}$")]
    pub aws_account_id: String,
}

impl Tenant {
    /// A tenant's record with its AWS account id.
    pub fn new(t: TenantRecord, aws_account_id: String) -> Self {
        Tenant {
            id: t.id.as_str().to_owned(),
            quotas: t.quotas.into(),
            created_at: rfc3339(t.created_at),
            aws_account_id,
        }
    }
}

/// One page of tenants.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TenantList {
    /// Ordered by id.
    pub tenants: Vec<Tenant>,
    /// For the next page; `null` on the last.
    pub next_token: Option<String>,
}

/// A token to mint.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MintToken {
    /// Any of `queues:manage messages:send messages:consume topics:manage topics:publish`
    /// (not `admin`).
    pub scopes: Vec<String>,
    /// 60–31536000, default 3600.
    #[schema(minimum = 60, maximum = 31536000)]
    pub ttl_seconds: Option<u64>,
}

/// A minted token.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MintedToken {
    /// The bearer token.
    pub token: String,
    /// When it stops working.
    #[schema(format = DateTime)]
    pub expires_at: String,
}

/// Health and readiness answers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, or what is wrong.
    pub status: String,
}

/// The reusable error responses of the REST contract, shared by every operation that can give
/// them (`components.responses` in the spec). Each carries the one error shape, [`ErrorBody`](crate::error::ErrorBody);
/// an operation whose failure needs a more specific description documents that status inline.
pub mod responses {
    use crate::error::ErrorBody;
    use utoipa::openapi::content::ContentBuilder;
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::response::{Response, ResponseBuilder};
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    use utoipa::openapi::{Ref, RefOr};
    use utoipa::ToResponse;

    /// `ValidationError` or `MalformedRequest`: a path parameter, query parameter or body field
    /// is invalid, or the body is not valid JSON; the message names the field. Nothing changed.
    #[derive(ToResponse)]
    pub struct BadRequest(pub ErrorBody);

    /// `Unauthenticated`: no bearer token, or one that is malformed, expired or not signed by
    /// this server's key.
    #[derive(ToResponse)]
    pub struct Unauthenticated(pub ErrorBody);

    /// `Forbidden`: the token is valid but lacks the scope this operation needs (or, on
    /// `/v1/admin`, is not an admin token).
    #[derive(ToResponse)]
    pub struct Forbidden(pub ErrorBody);

    /// `QueueNotFound`: the tenant has no queue of this name.
    #[derive(ToResponse)]
    pub struct QueueNotFound(pub ErrorBody);

    /// `TenantNotFound`: no tenant has this id.
    #[derive(ToResponse)]
    pub struct TenantNotFound(pub ErrorBody);

    /// `TaskNotFound`: the tenant has no redrive task with this id.
    #[derive(ToResponse)]
    pub struct TaskNotFound(pub ErrorBody);

    /// `TopicNotFound`: the tenant has no topic of this name.
    #[derive(ToResponse)]
    pub struct TopicNotFound(pub ErrorBody);

    /// `SubscriptionNotFound`: the tenant has no subscription with this id.
    #[derive(ToResponse)]
    pub struct SubscriptionNotFound(pub ErrorBody);

    /// `PayloadTooLarge`: the request body is larger than this operation reads.
    #[derive(ToResponse)]
    pub struct PayloadTooLarge(pub ErrorBody);

    /// `UnsupportedMediaType`: a request body was sent without `Content-Type: application/json`.
    #[derive(ToResponse)]
    pub struct UnsupportedMediaType(pub ErrorBody);

    /// `RateLimited`, with `Retry-After`. Written by hand: the derive cannot declare a header.
    pub struct RateLimited;

    impl<'r> ToResponse<'r> for RateLimited {
        fn response() -> (&'r str, RefOr<Response>) {
            let retry_after = HeaderBuilder::new()
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(1)),
                ))
                .description(Some("Seconds to wait before retrying, at least 1"))
                .build();
            let response = ResponseBuilder::new()
                .description(
                    "`RateLimited`: the tenant's `requests_per_second` and `burst` admit no more \
                     requests for now (every authenticated `/v1` request outside `/v1/admin` \
                     spends one, refused ones too)",
                )
                .header("retry-after", retry_after)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build();
            ("RateLimited", RefOr::T(response))
        }
    }
}
