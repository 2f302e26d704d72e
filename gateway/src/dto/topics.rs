//! The wire types of `/v1/topics` and `/v1/subscriptions`, with their schemas and conversions.

use super::{double_option, rfc3339, to_domain, Attribute, BatchFailureOutput};
use serde::{Deserialize, Serialize};
use sluice_services::{
    FilterScope, PublishRequest, PublishResult, SubscribeRequest, SubscriptionPatch,
    SubscriptionView, TopicConfigInput, TopicView,
};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// A topic's configuration in a `PUT`: omitted fields take their defaults.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TopicInput {
    /// FIFO topics only. Default false: a publish without a `deduplication_id` is refused;
    /// true: the body's SHA-256 stands in for it.
    pub content_based_deduplication: Option<bool>,
    /// At most 50.
    pub tags: Option<BTreeMap<String, String>>,
}

impl From<TopicInput> for TopicConfigInput {
    fn from(input: TopicInput) -> Self {
        TopicConfigInput {
            content_based_deduplication: input.content_based_deduplication,
            tags: input.tags,
        }
    }
}

/// A topic's configuration with defaults filled in.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicConfigOutput {
    /// FIFO topics only (absent on standard topics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_based_deduplication: Option<bool>,
    /// Labels.
    pub tags: BTreeMap<String, String>,
}

/// A topic.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Topic {
    /// Its name.
    pub name: String,
    /// `standard` or `fifo`.
    pub kind: String,
    /// The configuration in force.
    pub config: TopicConfigOutput,
    /// How many subscriptions it has.
    pub subscription_count: usize,
    /// When first created.
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When last configured.
    #[schema(format = DateTime)]
    pub updated_at: String,
}

impl From<TopicView> for Topic {
    fn from(view: TopicView) -> Self {
        let fifo = view.name.is_fifo();
        Topic {
            kind: if fifo { "fifo" } else { "standard" }.to_owned(),
            name: view.name.as_str().to_owned(),
            config: TopicConfigOutput {
                content_based_deduplication: fifo
                    .then_some(view.config.content_based_deduplication),
                tags: view.config.tags,
            },
            subscription_count: view.subscription_count,
            created_at: rfc3339(view.created_at),
            updated_at: rfc3339(view.updated_at),
        }
    }
}

/// One page of topics.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TopicList {
    /// Ordered by name.
    pub topics: Vec<Topic>,
    /// Pass as `next_token` for the next page; `null` on the last.
    pub next_token: Option<String>,
}

/// What a subscription's filter policy is matched against.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FilterPolicyScope {
    /// The message attributes (the default).
    Attributes,
    /// The body, which must be a JSON object.
    Body,
}

impl From<FilterScope> for FilterPolicyScope {
    fn from(scope: FilterScope) -> Self {
        match scope {
            FilterScope::Attributes => FilterPolicyScope::Attributes,
            FilterScope::Body => FilterPolicyScope::Body,
        }
    }
}

impl FilterPolicyScope {
    fn name(self) -> String {
        match self {
            FilterPolicyScope::Attributes => "attributes",
            FilterPolicyScope::Body => "body",
        }
        .to_owned()
    }
}

/// Body of `POST /v1/topics/{topic}/subscriptions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribeInput {
    /// A queue of the tenant, of the topic's kind (FIFO topics deliver only to FIFO queues).
    pub queue: String,
    /// An SNS filter policy (a JSON object); `null` or absent: every message matches.
    #[schema(value_type = Option<HashMap<String, serde_json::Value>>)]
    pub filter_policy: Option<serde_json::Value>,
    /// Default `attributes`.
    pub filter_policy_scope: Option<FilterPolicyScope>,
    /// Default false: copies carry the SNS-shaped notification envelope; true: the body and
    /// attributes as published.
    pub raw_delivery: Option<bool>,
    /// Where copies go that the queue cannot take (full, too large, deleted); a queue of the
    /// topic's kind. Default null: such copies count as `failed`.
    pub dead_letter_queue: Option<String>,
}

impl From<SubscribeInput> for SubscribeRequest {
    fn from(input: SubscribeInput) -> Self {
        SubscribeRequest {
            queue: input.queue,
            filter_policy: input.filter_policy,
            filter_policy_scope: input.filter_policy_scope.map(FilterPolicyScope::name),
            raw_delivery: input.raw_delivery,
            dead_letter_queue: input.dead_letter_queue,
            aws_attributes: BTreeMap::new(),
        }
    }
}

/// Body of `PATCH /v1/subscriptions/{id}`: only the fields given change.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionPatchInput {
    /// A new filter policy; `null` removes it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<HashMap<String, serde_json::Value>>, nullable)]
    pub filter_policy: Option<Option<serde_json::Value>>,
    /// What the policy is matched against.
    pub filter_policy_scope: Option<FilterPolicyScope>,
    /// Raw or enveloped delivery.
    pub raw_delivery: Option<bool>,
    /// A new dead-letter queue; `null` removes it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>, nullable)]
    pub dead_letter_queue: Option<Option<String>>,
}

impl From<SubscriptionPatchInput> for SubscriptionPatch {
    fn from(input: SubscriptionPatchInput) -> Self {
        SubscriptionPatch {
            filter_policy: input.filter_policy,
            filter_policy_scope: input.filter_policy_scope.map(FilterPolicyScope::name),
            raw_delivery: input.raw_delivery,
            dead_letter_queue: input.dead_letter_queue,
            aws_attributes: BTreeMap::new(),
        }
    }
}

/// A subscription's counters: each publication counts once.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SubscriptionStatsOutput {
    /// Copies that reached the queue.
    pub delivered: u64,
    /// Publications the filter policy did not match.
    pub filtered_out: u64,
    /// Copies the queue could not take (whether or not they went to the dead-letter queue).
    pub failed: u64,
}

/// A subscription: a topic delivering to one queue.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Subscription {
    /// Opaque and URL-safe.
    pub id: String,
    /// The topic.
    pub topic: String,
    /// The queue it delivers to.
    pub queue: String,
    /// The filter policy as given; `null`: every message matches.
    #[schema(value_type = Option<HashMap<String, serde_json::Value>>)]
    pub filter_policy: Option<serde_json::Value>,
    /// What the policy is matched against.
    pub filter_policy_scope: FilterPolicyScope,
    /// Whether copies are raw (body and attributes as published) or enveloped.
    pub raw_delivery: bool,
    /// Where copies go that the queue cannot take; `null`: they count as failed.
    pub dead_letter_queue: Option<String>,
    /// When it was made.
    #[schema(format = DateTime)]
    pub created_at: String,
    /// Its counters.
    pub stats: SubscriptionStatsOutput,
}

impl From<SubscriptionView> for Subscription {
    fn from(view: SubscriptionView) -> Self {
        Subscription {
            id: view.id,
            topic: view.topic.as_str().to_owned(),
            queue: view.queue.as_str().to_owned(),
            filter_policy: view.filter_policy,
            filter_policy_scope: view.filter_policy_scope.into(),
            raw_delivery: view.raw_delivery,
            dead_letter_queue: view.dead_letter_queue.map(|q| q.as_str().to_owned()),
            created_at: rfc3339(view.created_at),
            stats: SubscriptionStatsOutput {
                delivered: view.stats.delivered,
                filtered_out: view.stats.filtered_out,
                failed: view.stats.failed,
            },
        }
    }
}

/// One page of a topic's subscriptions.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SubscriptionList {
    /// Ordered by id.
    pub subscriptions: Vec<Subscription>,
    /// Pass as `next_token` for the next page; `null` on the last.
    pub next_token: Option<String>,
}

/// A message to publish.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishMessage {
    /// Non-empty UTF-8.
    #[schema(min_length = 1)]
    pub body: String,
    /// Up to 10 typed attributes (what `attributes`-scope filter policies match).
    pub attributes: Option<BTreeMap<String, Attribute>>,
    /// The envelope's `Subject`: 1–100 printable ASCII characters.
    #[schema(min_length = 1, max_length = 100)]
    pub subject: Option<String>,
    /// FIFO topics: required; every subscribed queue receives a group's messages in publish
    /// order. Standard topics: passed on to the copies.
    pub group_id: Option<String>,
    /// FIFO topics only: required unless the topic has `content_based_deduplication`; a
    /// publish repeating an id accepted in the last 5 minutes answers the original.
    pub deduplication_id: Option<String>,
}

impl From<PublishMessage> for PublishRequest {
    fn from(m: PublishMessage) -> Self {
        PublishRequest {
            body: m.body,
            attributes: to_domain(m.attributes),
            subject: m.subject,
            group_id: m.group_id,
            deduplication_id: m.deduplication_id,
        }
    }
}

/// A message in a publish batch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishBatchEntry {
    /// Unique in the batch: 1–80 of `[A-Za-z0-9_-]`.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,80}$")]
    pub id: String,
    /// Non-empty UTF-8.
    #[schema(min_length = 1)]
    pub body: String,
    /// Up to 10 typed attributes.
    pub attributes: Option<BTreeMap<String, Attribute>>,
    /// 1–100 printable ASCII characters.
    #[schema(min_length = 1, max_length = 100)]
    pub subject: Option<String>,
    /// FIFO topics: required.
    pub group_id: Option<String>,
    /// FIFO topics only.
    pub deduplication_id: Option<String>,
}

impl From<PublishBatchEntry> for sluice_services::PublishEntry {
    fn from(e: PublishBatchEntry) -> Self {
        sluice_services::PublishEntry {
            id: e.id,
            message: PublishRequest {
                body: e.body,
                attributes: to_domain(e.attributes),
                subject: e.subject,
                group_id: e.group_id,
                deduplication_id: e.deduplication_id,
            },
        }
    }
}

/// A batch of messages to publish.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishBatch {
    /// 1–10 entries.
    #[schema(min_items = 1, max_items = 10)]
    pub entries: Vec<PublishBatchEntry>,
}

/// What a publish answers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PublishOutput {
    /// The publication's id (the envelope's `MessageId`); each copy has its own id in its queue.
    pub message_id: String,
    /// FIFO topics only; `null` otherwise.
    pub sequence_number: Option<String>,
    /// A FIFO deduplication hit: the original's `message_id` and `sequence_number`; nothing
    /// new was delivered.
    pub duplicate: bool,
}

impl From<PublishResult> for PublishOutput {
    fn from(r: PublishResult) -> Self {
        PublishOutput {
            message_id: r.message_id,
            sequence_number: r.sequence_number,
            duplicate: r.duplicate,
        }
    }
}

/// A successful publish-batch entry.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PublishBatchSuccess {
    /// The caller's entry id.
    pub id: String,
    /// The publish's answer.
    #[serde(flatten)]
    pub result: PublishOutput,
}

/// The answer of a publish batch.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PublishBatchOutput {
    /// Entries published.
    pub successful: Vec<PublishBatchSuccess>,
    /// Entries refused, each on its own.
    pub failed: Vec<BatchFailureOutput>,
}
