//! Topics and subscriptions: their catalog, filter-policy matching and publishing.
//!
//! The catalog is one record per topic in the engine's [`Records`](sluice_engine::Records)
//! (kind `topic`, key `<tenant>/<topic>`), holding the topic's configuration and its
//! subscriptions, written by compare-and-set: so subscribing is atomic against concurrent
//! subscribes (one subscription per queue, at most [`MAX_SUBSCRIPTIONS`]) on every engine and
//! across gateways. A subscription's id is `<topic>.<random>`, so it leads to its record
//! without an index.
//!
//! A publish reads the topic's record (one store read), matches each subscription's filter
//! policy — compiled once per record version and cached by `topic_policies`, never re-parsed
//! per message — and hands the engine the publication with one delivery per match
//! ([`Publishing`](sluice_engine::Publishing)), which makes it durable and fans it out. The
//! attributes the AWS endpoint stores here are bounded by `topic_attributes`, so the record a
//! publish reads stays small.

use crate::metrics::Event;
use crate::payloads::{published_nothing, stored_nothing};
use crate::queues::{decode_page_token, encode_page_token, page_limit, validate_tags};
use crate::topic_attributes::check_stored_attributes;
use crate::topic_policies::{heavy_match, CompiledSubscription, Matchable};
use crate::validate::{
    fifo_deduplication_id, validate_attributes, validate_body, validate_token_id,
};
use crate::{ServiceError, Services};
use serde::{Deserialize, Serialize};
use sluice_engine::{
    Delivery, DeliveryOutcome, MessageAttribute, Millis, Publication, Published, QueueKey,
    QueueName, SubscriptionStats, TenantId, TopicKey,
};
use sluice_filter::{FilterPolicy, FilterScope};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The most subscriptions one topic may have.
pub const MAX_SUBSCRIPTIONS: usize = 1000;

/// The `Records` kind of topic records.
const TOPIC_RECORDS: &str = "topic";

/// How often a compare-and-set write of a topic record is retried when another writer got
/// there first.
const CAS_ATTEMPTS: usize = 16;

const TOKEN_PREFIX: &str = "tp1:";
const SUBSCRIPTION_TOKEN_PREFIX: &str = "sb1:";
const ALL_SUBSCRIPTIONS_TOKEN_PREFIX: &str = "sa1:";

/// A topic's configuration with defaults filled in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    /// FIFO topics only: a publish without a deduplication id uses the SHA-256 of its body.
    #[serde(default)]
    pub content_based_deduplication: bool,
    /// Free-form labels (at most 50).
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// A topic's configuration as the caller wrote it (`PUT`: omitted fields take defaults).
#[derive(Debug, Clone, Default)]
pub struct TopicConfigInput {
    /// FIFO only.
    pub content_based_deduplication: Option<bool>,
    /// Labels.
    pub tags: Option<BTreeMap<String, String>>,
}

/// A topic as the services answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicView {
    /// Its name.
    pub name: QueueName,
    /// Its configuration.
    pub config: TopicConfig,
    /// How many subscriptions it has.
    pub subscription_count: usize,
    /// When first created.
    pub created_at: Millis,
    /// When last configured.
    pub updated_at: Millis,
    /// Attributes the AWS endpoint stores without acting on them (`DisplayName`, `Policy`,
    /// …), kept as written so they read back byte-for-byte.
    pub aws_attributes: BTreeMap<String, String>,
}

/// One page of a topic listing.
#[derive(Debug, Clone)]
pub struct TopicPage {
    /// The topics, by name.
    pub topics: Vec<TopicView>,
    /// Where the next page starts, if there is one.
    pub next_token: Option<String>,
}

/// A subscription as the caller asks for it.
#[derive(Debug, Clone, Default)]
pub struct SubscribeRequest {
    /// The queue to deliver to (same tenant, the topic's kind).
    pub queue: String,
    /// An SNS filter policy, or none (everything matches).
    pub filter_policy: Option<serde_json::Value>,
    /// `attributes` (default) or `body`.
    pub filter_policy_scope: Option<String>,
    /// Deliver body and attributes as they are instead of the notification envelope.
    pub raw_delivery: Option<bool>,
    /// Where copies go that the queue cannot take.
    pub dead_letter_queue: Option<String>,
    /// Attributes the AWS endpoint stores without acting on them, kept as written. Part of
    /// the settings a repeated subscribe must match.
    pub aws_attributes: BTreeMap<String, String>,
}

/// The fields `PATCH` may change; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct SubscriptionPatch {
    /// `Some(None)` removes the policy.
    pub filter_policy: Option<Option<serde_json::Value>>,
    /// `attributes` or `body`.
    pub filter_policy_scope: Option<String>,
    /// Raw or enveloped delivery.
    pub raw_delivery: Option<bool>,
    /// `Some(None)` removes the dead-letter queue.
    pub dead_letter_queue: Option<Option<String>>,
    /// AWS-endpoint attributes to set (`Some`) or remove (`None`); the others stay.
    pub aws_attributes: BTreeMap<String, Option<String>>,
}

/// A change to a topic's configuration made attribute by attribute (the AWS endpoint's
/// `SetTopicAttributes`, `TagResource`, `UntagResource`); what is not named stays.
#[derive(Debug, Clone, Default)]
pub struct TopicChange {
    /// FIFO topics only.
    pub content_based_deduplication: Option<bool>,
    /// AWS-endpoint attributes to set (`Some`) or remove (`None`).
    pub aws_attributes: BTreeMap<String, Option<String>>,
    /// Tags to add or overwrite.
    pub add_tags: BTreeMap<String, String>,
    /// Tag keys to remove (absent ones are ignored).
    pub remove_tags: Vec<String>,
}

/// A subscription as the services answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionView {
    /// Opaque, URL-safe.
    pub id: String,
    /// The topic.
    pub topic: QueueName,
    /// The queue it delivers to.
    pub queue: QueueName,
    /// The filter policy as given.
    pub filter_policy: Option<serde_json::Value>,
    /// What the policy is matched against.
    pub filter_policy_scope: FilterScope,
    /// Raw or enveloped delivery.
    pub raw_delivery: bool,
    /// Where copies go that the queue cannot take.
    pub dead_letter_queue: Option<QueueName>,
    /// When it was made.
    pub created_at: Millis,
    /// Its counters.
    pub stats: SubscriptionStats,
    /// Attributes the AWS endpoint stores without acting on them, as written.
    pub aws_attributes: BTreeMap<String, String>,
}

/// One page of a topic's subscriptions.
#[derive(Debug, Clone)]
pub struct SubscriptionPage {
    /// The subscriptions, by id.
    pub subscriptions: Vec<SubscriptionView>,
    /// Where the next page starts, if there is one.
    pub next_token: Option<String>,
}

/// A message to publish, as the caller wrote it.
#[derive(Debug, Clone, Default)]
pub struct PublishRequest {
    /// The UTF-8 body.
    pub body: String,
    /// Typed attributes (at most 10).
    pub attributes: BTreeMap<String, MessageAttribute>,
    /// The envelope's subject: 1–100 printable ASCII characters.
    pub subject: Option<String>,
    /// FIFO topics: required; standard topics: passed on.
    pub group_id: Option<String>,
    /// FIFO topics only: required unless the topic has content-based deduplication.
    pub deduplication_id: Option<String>,
}

/// What a publish answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishResult {
    /// The publication's id (a duplicate: the original's).
    pub message_id: String,
    /// FIFO topics: the topic's sequence number, decimal digits.
    pub sequence_number: Option<String>,
    /// A FIFO deduplication hit: nothing new was delivered.
    pub duplicate: bool,
}

/// One entry of a publish batch.
#[derive(Debug, Clone)]
pub struct PublishEntry {
    /// The caller's id for the entry.
    pub id: String,
    /// The message.
    pub message: PublishRequest,
}

/// The stored record of one topic.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TopicRecord {
    config: TopicConfig,
    created_at: Millis,
    updated_at: Millis,
    pub(crate) subscriptions: Vec<SubscriptionRecord>,
    /// Records written before the AWS endpoint have none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    aws_attributes: BTreeMap<String, String>,
}

/// The stored form of one subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SubscriptionRecord {
    pub(crate) id: String,
    pub(crate) queue: QueueName,
    pub(crate) filter_policy: Option<serde_json::Value>,
    pub(crate) filter_policy_scope: FilterScope,
    pub(crate) raw_delivery: bool,
    pub(crate) dead_letter_queue: Option<QueueName>,
    created_at: Millis,
    /// Records written before the AWS endpoint have none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    aws_attributes: BTreeMap<String, String>,
}

impl SubscriptionRecord {
    /// Whether `other` asks for the same delivery (everything but id and creation time).
    fn same_settings(&self, other: &SubscriptionRecord) -> bool {
        self.queue == other.queue
            && self.filter_policy == other.filter_policy
            && self.filter_policy_scope == other.filter_policy_scope
            && self.raw_delivery == other.raw_delivery
            && self.dead_letter_queue == other.dead_letter_queue
            && self.aws_attributes == other.aws_attributes
    }
}

fn parse_topic_name(name: &str) -> Result<QueueName, ServiceError> {
    QueueName::parse(name).map_err(|e| ServiceError::invalid("topic", e.0))
}

fn topic_key(tenant: &TenantId, name: &str) -> Result<TopicKey, ServiceError> {
    Ok(TopicKey::new(tenant.clone(), parse_topic_name(name)?))
}

fn record_key(topic: &TopicKey) -> String {
    format!("{}/{}", topic.tenant, topic.name)
}

fn parse_scope(field: &str, scope: Option<&str>) -> Result<FilterScope, ServiceError> {
    match scope {
        None | Some("attributes") => Ok(FilterScope::Attributes),
        Some("body") => Ok(FilterScope::Body),
        Some(other) => Err(ServiceError::invalid(
            field,
            format!("must be \"attributes\" or \"body\", got {other:?}"),
        )),
    }
}

/// Validates a policy for its scope with SNS's rules: the error names `filter_policy`.
fn check_policy(policy: &serde_json::Value, scope: FilterScope) -> Result<(), ServiceError> {
    FilterPolicy::parse(policy, scope).map(|_| ()).map_err(|e| {
        let text = e.to_string();
        let message = text.strip_prefix("filter_policy: ").unwrap_or(&text);
        ServiceError::invalid("filter_policy", message)
    })
}

/// A subject: 1–100 printable ASCII characters.
fn check_subject(field: &str, subject: &str) -> Result<(), ServiceError> {
    let printable = |c: char| c.is_ascii_graphic() || c == ' ';
    if subject.is_empty() || subject.len() > 100 || !subject.chars().all(printable) {
        return Err(ServiceError::invalid(
            field,
            "must be 1-100 printable ASCII characters",
        ));
    }
    Ok(())
}

impl Services {
    /// The topic's record and its version; `TopicNotFound` if there is none.
    async fn topic_record(&self, topic: &TopicKey) -> Result<(u64, TopicRecord), ServiceError> {
        let record = self
            .engine
            .get_record(TOPIC_RECORDS, &record_key(topic))
            .await?
            .ok_or(ServiceError::TopicNotFound)?;
        let parsed = serde_json::from_str(&record.value)
            .map_err(|e| ServiceError::Internal(format!("topic record {topic}: {e}")))?;
        Ok((record.version, parsed))
    }

    /// Writes a topic record if it is still at `expected`; `false` if another write came first.
    async fn write_topic_record(
        &self,
        topic: &TopicKey,
        record: &TopicRecord,
        expected: Option<u64>,
    ) -> Result<bool, ServiceError> {
        let value = serde_json::to_string(record)
            .map_err(|e| ServiceError::Internal(format!("topic record {topic}: {e}")))?;
        Ok(self
            .engine
            .put_record(TOPIC_RECORDS, &record_key(topic), value, expected)
            .await?
            .is_some())
    }

    /// Reads, changes and writes a topic record by compare-and-set, retrying when another
    /// writer came first. `change` may refuse (its error is answered) or answer a value.
    async fn update_topic<T>(
        &self,
        topic: &TopicKey,
        mut change: impl FnMut(&mut TopicRecord) -> Result<T, ServiceError>,
    ) -> Result<T, ServiceError> {
        for _ in 0..CAS_ATTEMPTS {
            let (version, mut record) = self.topic_record(topic).await?;
            let answer = change(&mut record)?;
            if self
                .write_topic_record(topic, &record, Some(version))
                .await?
            {
                return Ok(answer);
            }
        }
        Err(ServiceError::Unavailable(format!(
            "topic {} is being changed by many requests at once; retry",
            topic.name
        )))
    }

    fn topic_view(name: QueueName, record: &TopicRecord) -> TopicView {
        TopicView {
            name,
            config: record.config.clone(),
            subscription_count: record.subscriptions.len(),
            created_at: record.created_at,
            updated_at: record.updated_at,
            aws_attributes: record.aws_attributes.clone(),
        }
    }

    /// `PUT`: creates the topic (answering `true`) or replaces its configuration, keeping its
    /// subscriptions. A creation past the tenant's `max_topics` is `QuotaExceeded`.
    pub async fn put_topic(
        &self,
        tenant: &TenantId,
        name: &str,
        input: TopicConfigInput,
    ) -> Result<(TopicView, bool), ServiceError> {
        self.write_topic(tenant, name, input, None).await
    }

    /// Creates the topic with `aws_attributes` (answering `true`); an existing topic is
    /// answered as it is, unchanged, for the caller to compare (SNS's `CreateTopic`).
    pub async fn create_topic(
        &self,
        tenant: &TenantId,
        name: &str,
        input: TopicConfigInput,
        aws_attributes: BTreeMap<String, String>,
    ) -> Result<(TopicView, bool), ServiceError> {
        self.write_topic(tenant, name, input, Some(aws_attributes))
            .await
    }

    /// `put_topic` (`create_only` = `None`: an existing topic's configuration is replaced) and
    /// `create_topic` (`Some(attributes)`: an existing topic is left alone).
    async fn write_topic(
        &self,
        tenant: &TenantId,
        name: &str,
        input: TopicConfigInput,
        create_only: Option<BTreeMap<String, String>>,
    ) -> Result<(TopicView, bool), ServiceError> {
        let topic = topic_key(tenant, name)?;
        if input.content_based_deduplication.is_some() && !topic.is_fifo() {
            return Err(ServiceError::invalid(
                "content_based_deduplication",
                "applies to FIFO topics only",
            ));
        }
        let tags = input.tags.unwrap_or_default();
        validate_tags(&tags)?;
        if let Some(attributes) = &create_only {
            check_stored_attributes(attributes.iter().map(|(k, v)| (k, Some(v))))?;
        }
        let config = TopicConfig {
            content_based_deduplication: input.content_based_deduplication.unwrap_or(false),
            tags,
        };
        let now = self.clock.now();
        for _ in 0..CAS_ATTEMPTS {
            match self.topic_record(&topic).await {
                Ok((_, record)) if create_only.is_some() => {
                    return Ok((Self::topic_view(topic.name, &record), false));
                }
                Ok((version, mut record)) => {
                    record.config = config.clone();
                    record.updated_at = now;
                    if self
                        .write_topic_record(&topic, &record, Some(version))
                        .await?
                    {
                        return Ok((Self::topic_view(topic.name, &record), false));
                    }
                }
                Err(ServiceError::TopicNotFound) => {
                    self.check_topic_quota(tenant).await?;
                    let record = TopicRecord {
                        config: config.clone(),
                        created_at: now,
                        updated_at: now,
                        subscriptions: Vec::new(),
                        aws_attributes: create_only.clone().unwrap_or_default(),
                    };
                    if self.write_topic_record(&topic, &record, None).await? {
                        return Ok((Self::topic_view(topic.name, &record), true));
                    }
                }
                Err(other) => return Err(other),
            }
        }
        Err(ServiceError::Unavailable(format!(
            "topic {} is being changed by many requests at once; retry",
            topic.name
        )))
    }

    /// `max_topics`: counted before a creation. Creations racing on several gateways may each
    /// see the count below the quota, so the quota can be passed by as many as race.
    async fn check_topic_quota(&self, tenant: &TenantId) -> Result<(), ServiceError> {
        let Some(max) = self
            .engine
            .get_tenant(tenant)
            .await?
            .and_then(|t| t.quotas.max_topics)
        else {
            return Ok(());
        };
        let limit = usize::try_from(max).unwrap_or(usize::MAX).saturating_add(1);
        let owned = self
            .engine
            .list_records(TOPIC_RECORDS, &format!("{tenant}/"), None, limit)
            .await?
            .len();
        if owned as u64 >= max {
            return Err(ServiceError::QuotaExceeded(format!(
                "tenant {tenant} may own at most {max} topics"
            )));
        }
        Ok(())
    }

    /// One topic.
    pub async fn get_topic(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<TopicView, ServiceError> {
        let topic = topic_key(tenant, name)?;
        let (_, record) = self.topic_record(&topic).await?;
        Ok(Self::topic_view(topic.name, &record))
    }

    /// Changes some of a topic's settings (see [`TopicChange`]), leaving the others.
    pub async fn change_topic(
        &self,
        tenant: &TenantId,
        name: &str,
        change: TopicChange,
    ) -> Result<TopicView, ServiceError> {
        let topic = topic_key(tenant, name)?;
        if change.content_based_deduplication.is_some() && !topic.is_fifo() {
            return Err(ServiceError::invalid(
                "content_based_deduplication",
                "applies to FIFO topics only",
            ));
        }
        check_stored_attributes(change.aws_attributes.iter().map(|(k, v)| (k, v.as_ref())))?;
        let now = self.clock.now();
        let record = self
            .update_topic(&topic, |record| {
                if let Some(on) = change.content_based_deduplication {
                    record.config.content_based_deduplication = on;
                }
                for (name, value) in &change.aws_attributes {
                    match value {
                        Some(value) => record.aws_attributes.insert(name.clone(), value.clone()),
                        None => record.aws_attributes.remove(name),
                    };
                }
                let mut tags = record.config.tags.clone();
                tags.extend(change.add_tags.clone());
                for key in &change.remove_tags {
                    tags.remove(key);
                }
                validate_tags(&tags)?;
                record.config.tags = tags;
                record.updated_at = now;
                Ok(record.clone())
            })
            .await?;
        Ok(Self::topic_view(topic.name, &record))
    }

    /// A page of the tenant's topics by name.
    pub async fn list_topics(
        &self,
        tenant: &TenantId,
        limit: Option<u32>,
        next_token: Option<&str>,
    ) -> Result<TopicPage, ServiceError> {
        let limit = page_limit(limit)?;
        let prefix = format!("{tenant}/");
        let after = match next_token {
            Some(token) => {
                let name = decode_page_token(TOKEN_PREFIX, token)?;
                Some(format!(
                    "{prefix}{}",
                    parse_topic_name(&name).map_err(|_| {
                        ServiceError::invalid("next_token", "is not a token this server issued")
                    })?
                ))
            }
            None => None,
        };
        let mut records = self
            .engine
            .list_records(TOPIC_RECORDS, &prefix, after.as_deref(), limit + 1)
            .await?;
        let more = records.len() > limit;
        records.truncate(limit);
        let mut topics = Vec::with_capacity(records.len());
        for (key, record) in records {
            let Some(name) = key
                .strip_prefix(&prefix)
                .and_then(|n| QueueName::parse(n).ok())
            else {
                continue;
            };
            let parsed: TopicRecord = serde_json::from_str(&record.value)
                .map_err(|e| ServiceError::Internal(format!("topic record {key}: {e}")))?;
            topics.push(Self::topic_view(name, &parsed));
        }
        let next_token = match (more, topics.last()) {
            (true, Some(last)) => Some(encode_page_token(TOKEN_PREFIX, last.name.as_str())),
            _ => None,
        };
        Ok(TopicPage { topics, next_token })
    }

    /// Deletes a topic and its subscriptions; copies already delivered stay in their queues.
    pub async fn delete_topic(&self, tenant: &TenantId, name: &str) -> Result<(), ServiceError> {
        let topic = topic_key(tenant, name)?;
        self.delete_topic_key(&topic).await
    }

    async fn delete_topic_key(&self, topic: &TopicKey) -> Result<(), ServiceError> {
        for _ in 0..CAS_ATTEMPTS {
            let (version, _) = self.topic_record(topic).await?;
            if self
                .engine
                .delete_record(TOPIC_RECORDS, &record_key(topic), version)
                .await?
            {
                self.engine.delete_topic(topic).await?;
                return Ok(());
            }
        }
        Err(ServiceError::Unavailable(format!(
            "topic {} is being changed by many requests at once; retry",
            topic.name
        )))
    }

    /// Deletes every topic of a tenant (part of deleting the tenant).
    pub(crate) async fn delete_tenant_topics(&self, tenant: &TenantId) -> Result<(), ServiceError> {
        let prefix = format!("{tenant}/");
        loop {
            let page = self
                .engine
                .list_records(TOPIC_RECORDS, &prefix, None, 100)
                .await?;
            if page.is_empty() {
                return Ok(());
            }
            for (key, _) in page {
                let Some(name) = key
                    .strip_prefix(&prefix)
                    .and_then(|n| QueueName::parse(n).ok())
                else {
                    continue;
                };
                match self
                    .delete_topic_key(&TopicKey::new(tenant.clone(), name))
                    .await
                {
                    Ok(()) | Err(ServiceError::TopicNotFound) => {}
                    Err(other) => return Err(other),
                }
            }
        }
    }

    /// Removes the subscriptions that deliver to `queue` from every topic of its tenant (part
    /// of deleting the queue).
    pub(crate) async fn unsubscribe_queue(&self, queue: &QueueKey) -> Result<(), ServiceError> {
        let prefix = format!("{}/", queue.tenant);
        let mut after: Option<String> = None;
        loop {
            let page = self
                .engine
                .list_records(TOPIC_RECORDS, &prefix, after.as_deref(), 100)
                .await?;
            let done = page.len() < 100;
            after = page.last().map(|(key, _)| key.clone());
            for (key, record) in page {
                let delivers_there = serde_json::from_str::<TopicRecord>(&record.value)
                    .is_ok_and(|r| r.subscriptions.iter().any(|s| s.queue == queue.name));
                let Some(name) = key
                    .strip_prefix(&prefix)
                    .and_then(|n| QueueName::parse(n).ok())
                else {
                    continue;
                };
                if delivers_there {
                    let topic = TopicKey::new(queue.tenant.clone(), name);
                    match self
                        .update_topic(&topic, |r| {
                            r.subscriptions.retain(|s| s.queue != queue.name);
                            Ok(())
                        })
                        .await
                    {
                        Ok(()) | Err(ServiceError::TopicNotFound) => {}
                        Err(other) => return Err(other),
                    }
                }
            }
            if done {
                return Ok(());
            }
        }
    }

    /// Checks that `name` is a queue of the tenant of the topic's kind; `field` names it.
    async fn check_subscribed_queue(
        &self,
        topic: &TopicKey,
        field: &str,
        name: &str,
    ) -> Result<QueueName, ServiceError> {
        let queue = QueueName::parse(name).map_err(|e| ServiceError::invalid(field, e.0))?;
        if queue.is_fifo() != topic.is_fifo() {
            return Err(ServiceError::invalid(
                field,
                format!(
                    "{queue} is a {} queue; a {} topic delivers only to {} queues",
                    if queue.is_fifo() { "FIFO" } else { "standard" },
                    if topic.is_fifo() { "FIFO" } else { "standard" },
                    if topic.is_fifo() { "FIFO" } else { "standard" },
                ),
            ));
        }
        let key = QueueKey::new(topic.tenant.clone(), queue.clone());
        if self.engine.queue_config(&key).await?.is_none() {
            return Err(if field == "queue" {
                ServiceError::QueueNotFound
            } else {
                ServiceError::invalid(field, format!("the queue {queue} does not exist"))
            });
        }
        Ok(queue)
    }

    async fn subscription_view(
        &self,
        topic: &TopicKey,
        record: SubscriptionRecord,
    ) -> Result<SubscriptionView, ServiceError> {
        let stats = self
            .engine
            .subscription_stats(topic)
            .await?
            .remove(&record.id)
            .unwrap_or_default();
        Ok(Self::view_with(topic, record, stats))
    }

    fn view_with(
        topic: &TopicKey,
        record: SubscriptionRecord,
        stats: SubscriptionStats,
    ) -> SubscriptionView {
        SubscriptionView {
            id: record.id,
            topic: topic.name.clone(),
            queue: record.queue,
            filter_policy: record.filter_policy,
            filter_policy_scope: record.filter_policy_scope,
            raw_delivery: record.raw_delivery,
            dead_letter_queue: record.dead_letter_queue,
            created_at: record.created_at,
            stats,
            aws_attributes: record.aws_attributes,
        }
    }

    /// Subscribes a queue to a topic. Answers the subscription and whether it is new: the same
    /// queue subscribed again with the same settings answers the existing subscription; with
    /// other settings it is a `Conflict`.
    pub async fn subscribe(
        &self,
        tenant: &TenantId,
        topic_name: &str,
        request: SubscribeRequest,
    ) -> Result<(SubscriptionView, bool), ServiceError> {
        let topic = topic_key(tenant, topic_name)?;
        let scope = parse_scope(
            "filter_policy_scope",
            request.filter_policy_scope.as_deref(),
        )?;
        if let Some(policy) = &request.filter_policy {
            check_policy(policy, scope)?;
        }
        check_stored_attributes(request.aws_attributes.iter().map(|(k, v)| (k, Some(v))))?;
        // The topic first: a missing topic is the answer whatever the queue.
        self.topic_record(&topic).await?;
        let queue = self
            .check_subscribed_queue(&topic, "queue", &request.queue)
            .await?;
        let dead_letter_queue = match &request.dead_letter_queue {
            Some(name) => Some(
                self.check_subscribed_queue(&topic, "dead_letter_queue", name)
                    .await?,
            ),
            None => None,
        };
        let wanted = SubscriptionRecord {
            id: format!("{}.{}", topic.name, uuid::Uuid::new_v4().simple()),
            queue,
            filter_policy: request.filter_policy,
            filter_policy_scope: scope,
            raw_delivery: request.raw_delivery.unwrap_or(false),
            dead_letter_queue,
            created_at: self.clock.now(),
            aws_attributes: request.aws_attributes,
        };
        let (record, created) = self
            .update_topic(&topic, |record| {
                if let Some(existing) = record
                    .subscriptions
                    .iter()
                    .find(|s| s.queue == wanted.queue)
                {
                    return if existing.same_settings(&wanted) {
                        Ok((existing.clone(), false))
                    } else {
                        Err(ServiceError::Conflict(format!(
                            "the queue {} is already subscribed to {} with other settings \
                             (subscription {}); change it with PATCH",
                            wanted.queue, topic.name, existing.id
                        )))
                    };
                }
                if record.subscriptions.len() >= MAX_SUBSCRIPTIONS {
                    return Err(ServiceError::QuotaExceeded(format!(
                        "a topic may have at most {MAX_SUBSCRIPTIONS} subscriptions"
                    )));
                }
                record.subscriptions.push(wanted.clone());
                Ok((wanted.clone(), true))
            })
            .await?;
        Ok((self.subscription_view(&topic, record).await?, created))
    }

    /// The topic a subscription id belongs to, in the caller's tenant.
    fn subscription_topic(tenant: &TenantId, id: &str) -> Result<TopicKey, ServiceError> {
        id.rsplit_once('.')
            .and_then(|(topic, _)| QueueName::parse(topic).ok())
            .map(|name| TopicKey::new(tenant.clone(), name))
            .ok_or(ServiceError::SubscriptionNotFound)
    }

    /// One subscription with its counters.
    pub async fn get_subscription(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<SubscriptionView, ServiceError> {
        let topic = Self::subscription_topic(tenant, id)?;
        let (_, record) = self
            .topic_record(&topic)
            .await
            .map_err(not_found_as_subscription)?;
        let found = record
            .subscriptions
            .into_iter()
            .find(|s| s.id == id)
            .ok_or(ServiceError::SubscriptionNotFound)?;
        self.subscription_view(&topic, found).await
    }

    /// Changes a subscription's policy, scope, raw delivery or dead-letter queue.
    pub async fn patch_subscription(
        &self,
        tenant: &TenantId,
        id: &str,
        patch: SubscriptionPatch,
    ) -> Result<SubscriptionView, ServiceError> {
        let topic = Self::subscription_topic(tenant, id)?;
        check_stored_attributes(patch.aws_attributes.iter().map(|(k, v)| (k, v.as_ref())))?;
        let scope = match &patch.filter_policy_scope {
            Some(scope) => Some(parse_scope("filter_policy_scope", Some(scope))?),
            None => None,
        };
        let dead_letter_queue = match &patch.dead_letter_queue {
            Some(Some(name)) => Some(Some(
                self.check_subscribed_queue(&topic, "dead_letter_queue", name)
                    .await?,
            )),
            Some(None) => Some(None),
            None => None,
        };
        let changed = self
            .update_topic(&topic, |record| {
                let subscription = record
                    .subscriptions
                    .iter_mut()
                    .find(|s| s.id == id)
                    .ok_or(ServiceError::SubscriptionNotFound)?;
                let mut next = subscription.clone();
                if let Some(policy) = &patch.filter_policy {
                    next.filter_policy = policy.clone();
                }
                if let Some(scope) = scope {
                    next.filter_policy_scope = scope;
                }
                if let Some(raw) = patch.raw_delivery {
                    next.raw_delivery = raw;
                }
                if let Some(dlq) = &dead_letter_queue {
                    next.dead_letter_queue = dlq.clone();
                }
                for (name, value) in &patch.aws_attributes {
                    match value {
                        Some(value) => next.aws_attributes.insert(name.clone(), value.clone()),
                        None => next.aws_attributes.remove(name),
                    };
                }
                if let Some(policy) = &next.filter_policy {
                    check_policy(policy, next.filter_policy_scope)?;
                }
                *subscription = next.clone();
                Ok(next)
            })
            .await
            .map_err(not_found_as_subscription)?;
        self.subscription_view(&topic, changed).await
    }

    /// Removes a subscription.
    pub async fn unsubscribe(&self, tenant: &TenantId, id: &str) -> Result<(), ServiceError> {
        let topic = Self::subscription_topic(tenant, id)?;
        self.update_topic(&topic, |record| {
            let before = record.subscriptions.len();
            record.subscriptions.retain(|s| s.id != id);
            if record.subscriptions.len() == before {
                return Err(ServiceError::SubscriptionNotFound);
            }
            Ok(())
        })
        .await
        .map_err(not_found_as_subscription)
    }

    /// A page of a topic's subscriptions, by id, with their counters.
    pub async fn list_subscriptions(
        &self,
        tenant: &TenantId,
        topic_name: &str,
        limit: Option<u32>,
        next_token: Option<&str>,
    ) -> Result<SubscriptionPage, ServiceError> {
        let topic = topic_key(tenant, topic_name)?;
        let limit = page_limit(limit)?;
        let after = next_token
            .map(|token| decode_page_token(SUBSCRIPTION_TOKEN_PREFIX, token))
            .transpose()?;
        let (_, record) = self.topic_record(&topic).await?;
        let mut subscriptions = record.subscriptions;
        subscriptions.sort_by(|a, b| a.id.cmp(&b.id));
        let mut page: Vec<SubscriptionRecord> = subscriptions
            .into_iter()
            .filter(|s| {
                after
                    .as_ref()
                    .is_none_or(|after| s.id.as_str() > after.as_str())
            })
            .take(limit + 1)
            .collect();
        let more = page.len() > limit;
        page.truncate(limit);
        let next_token = match (more, page.last()) {
            (true, Some(last)) => Some(encode_page_token(SUBSCRIPTION_TOKEN_PREFIX, &last.id)),
            _ => None,
        };
        let mut stats = self.engine.subscription_stats(&topic).await?;
        Ok(SubscriptionPage {
            subscriptions: page
                .into_iter()
                .map(|s| {
                    let counted = stats.remove(&s.id).unwrap_or_default();
                    Self::view_with(&topic, s, counted)
                })
                .collect(),
            next_token,
        })
    }

    /// A page of all the tenant's subscriptions, topic by topic (by name), each topic's by id.
    pub async fn list_tenant_subscriptions(
        &self,
        tenant: &TenantId,
        limit: Option<u32>,
        next_token: Option<&str>,
    ) -> Result<SubscriptionPage, ServiceError> {
        let limit = page_limit(limit)?;
        let prefix = format!("{tenant}/");
        let mut found: Vec<(TopicKey, SubscriptionRecord)> = Vec::new();
        let by_id = |record: TopicRecord| {
            let mut subscriptions = record.subscriptions;
            subscriptions.sort_by(|a, b| a.id.cmp(&b.id));
            subscriptions
        };
        let mut after_key = None;
        if let Some(token) = next_token {
            let last = decode_page_token(ALL_SUBSCRIPTIONS_TOKEN_PREFIX, token)?;
            let topic = Self::subscription_topic(tenant, &last).map_err(|_| {
                ServiceError::invalid("next_token", "is not a token this server issued")
            })?;
            // The rest of the token's topic, then the topics after it.
            match self.topic_record(&topic).await {
                Ok((_, record)) => found.extend(
                    by_id(record)
                        .into_iter()
                        .filter(|s| s.id > last)
                        .map(|s| (topic.clone(), s)),
                ),
                Err(ServiceError::TopicNotFound) => {}
                Err(other) => return Err(other),
            }
            after_key = Some(record_key(&topic));
        }
        while found.len() <= limit {
            let page = self
                .engine
                .list_records(TOPIC_RECORDS, &prefix, after_key.as_deref(), 100)
                .await?;
            let done = page.len() < 100;
            for (key, record) in page {
                let name = key
                    .strip_prefix(&prefix)
                    .and_then(|n| QueueName::parse(n).ok());
                after_key = Some(key.clone());
                let Some(name) = name else { continue };
                let parsed: TopicRecord = serde_json::from_str(&record.value)
                    .map_err(|e| ServiceError::Internal(format!("topic record {key}: {e}")))?;
                let topic = TopicKey::new(tenant.clone(), name);
                found.extend(by_id(parsed).into_iter().map(|s| (topic.clone(), s)));
            }
            if done {
                break;
            }
        }
        let more = found.len() > limit;
        found.truncate(limit);
        let next_token = match (more, found.last()) {
            (true, Some((_, last))) => {
                Some(encode_page_token(ALL_SUBSCRIPTIONS_TOKEN_PREFIX, &last.id))
            }
            _ => None,
        };
        let mut stats: HashMap<TopicKey, BTreeMap<String, SubscriptionStats>> = HashMap::new();
        let mut subscriptions = Vec::with_capacity(found.len());
        for (topic, record) in found {
            if !stats.contains_key(&topic) {
                let counted = self.engine.subscription_stats(&topic).await?;
                stats.insert(topic.clone(), counted);
            }
            let counted = stats
                .get_mut(&topic)
                .and_then(|s| s.remove(&record.id))
                .unwrap_or_default();
            subscriptions.push(Self::view_with(&topic, record, counted));
        }
        Ok(SubscriptionPage {
            subscriptions,
            next_token,
        })
    }

    /// Checks one message for a topic and turns it into a publication with one delivery per
    /// matching subscription. `field` prefixes the names of offending fields.
    #[allow(clippy::too_many_arguments)]
    fn prepare_publication(
        &self,
        field: &str,
        topic: &TopicKey,
        config: &TopicConfig,
        subscriptions: &[CompiledSubscription],
        request: PublishRequest,
        now: Millis,
        topic_arn: &str,
    ) -> Result<Publication, ServiceError> {
        let at = |name: &str| {
            if field.is_empty() {
                name.to_owned()
            } else {
                format!("{field}.{name}")
            }
        };
        validate_body(&at("body"), &request.body)?;
        validate_attributes(&at("attributes"), &request.attributes)?;
        if let Some(subject) = &request.subject {
            check_subject(&at("subject"), subject)?;
        }
        if let Some(group_id) = &request.group_id {
            validate_token_id(&at("group_id"), group_id)?;
        }
        if let Some(deduplication_id) = &request.deduplication_id {
            validate_token_id(&at("deduplication_id"), deduplication_id)?;
        }
        let deduplication_id = if topic.is_fifo() {
            if request.group_id.is_none() {
                return Err(ServiceError::invalid(
                    at("group_id"),
                    "is required on FIFO topics",
                ));
            }
            Some(fifo_deduplication_id(
                &at("deduplication_id"),
                request.deduplication_id.as_deref(),
                config.content_based_deduplication,
                &request.body,
                "topic",
            )?)
        } else {
            if request.deduplication_id.is_some() {
                return Err(ServiceError::invalid(
                    at("deduplication_id"),
                    "applies to FIFO topics only",
                ));
            }
            None
        };
        let size = sluice_engine::message_size(&request.body, &request.attributes);
        if size > self.limits.max_message_bytes as usize {
            return Err(ServiceError::PayloadTooLarge(format!(
                "{}: the message is {size} bytes (body plus attributes); this server accepts at most {}",
                at("body"),
                self.limits.max_message_bytes
            )));
        }
        let mut deliveries = Vec::new();
        let mut filtered_out = Vec::new();
        let matchable = Matchable::new(&request);
        for subscription in subscriptions {
            let record = &subscription.record;
            if matchable.matches(subscription) {
                deliveries.push(Delivery {
                    subscription_id: record.id.clone(),
                    queue: record.queue.clone(),
                    raw: record.raw_delivery,
                    dead_letter_queue: record.dead_letter_queue.clone(),
                    message_id: uuid::Uuid::new_v4().to_string(),
                });
            } else {
                filtered_out.push(record.id.clone());
            }
        }
        Ok(Publication {
            payload: None,
            message_id: uuid::Uuid::new_v4().to_string(),
            body: request.body,
            attributes: request.attributes,
            subject: request.subject,
            group_id: request.group_id,
            deduplication_id,
            topic_arn: topic_arn.to_owned(),
            timestamp: chrono::DateTime::from_timestamp_millis(now as i64)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            deliveries,
            filtered_out,
        })
    }

    /// [`Self::prepare_publication`], on a blocking thread when matching would take CPU that
    /// other requests' async workers need (a large body against body-scope policies).
    #[allow(clippy::too_many_arguments)]
    async fn prepare_off_workers(
        &self,
        field: String,
        topic: &TopicKey,
        config: &TopicConfig,
        subscriptions: &Arc<Vec<CompiledSubscription>>,
        request: PublishRequest,
        now: Millis,
        topic_arn: &str,
    ) -> Result<Publication, ServiceError> {
        if !heavy_match(subscriptions, &request) {
            return self.prepare_publication(
                &field,
                topic,
                config,
                subscriptions,
                request,
                now,
                topic_arn,
            );
        }
        let this = self.clone();
        let (topic, config) = (topic.clone(), config.clone());
        let (subscriptions, topic_arn) = (subscriptions.clone(), topic_arn.to_owned());
        tokio::task::spawn_blocking(move || {
            this.prepare_publication(
                &field,
                &topic,
                &config,
                &subscriptions,
                request,
                now,
                &topic_arn,
            )
        })
        .await
        .map_err(|e| ServiceError::Internal(format!("matching a publication: {e}")))?
    }

    /// The topic's ARN, with its tenant's AWS account id (assigned now if it has none yet).
    async fn topic_arn(&self, topic: &TopicKey) -> Result<String, ServiceError> {
        Ok(format!(
            "arn:aws:sns:{}:{}:{}",
            self.aws_region,
            self.tenant_account_id(&topic.tenant).await?,
            topic.name
        ))
    }

    /// Records what a publish delivered in the metrics.
    fn count_deliveries(
        &self,
        topic: &TopicKey,
        publications: &[Publication],
        answers: &[Published],
    ) {
        for (publication, answer) in publications.iter().zip(answers) {
            if answer.duplicate {
                continue;
            }
            crate::metrics::count_topic_delivery(
                topic,
                "filtered_out",
                publication.filtered_out.len() as u64,
            );
            for (delivery, (_, outcome)) in publication.deliveries.iter().zip(&answer.outcomes) {
                let queue = |name: &QueueName| QueueKey::new(topic.tenant.clone(), name.clone());
                match outcome {
                    DeliveryOutcome::Delivered => {
                        crate::metrics::count_topic_delivery(topic, "delivered", 1);
                        self.metric_labels
                            .count(&queue(&delivery.queue), Event::Sent, 1);
                    }
                    DeliveryOutcome::DeadLettered(_) => {
                        crate::metrics::count_topic_delivery(topic, "failed", 1);
                        if let Some(dlq) = &delivery.dead_letter_queue {
                            self.metric_labels.count(&queue(dlq), Event::Sent, 1);
                        }
                    }
                    DeliveryOutcome::Failed(_) => {
                        crate::metrics::count_topic_delivery(topic, "failed", 1);
                    }
                    // Counted by nobody: recovery completes it in the background.
                    DeliveryOutcome::Pending => {}
                }
            }
        }
    }

    async fn compiled_subscriptions(
        &self,
        topic: &TopicKey,
    ) -> Result<(TopicConfig, Arc<Vec<CompiledSubscription>>), ServiceError> {
        let (version, record) = self.topic_record(topic).await?;
        let compiled = self.policy_cache.compiled(topic, version, &record);
        Ok((record.config, compiled))
    }

    fn publish_result(answer: Published) -> PublishResult {
        PublishResult {
            message_id: answer.message_id,
            sequence_number: answer.seq.map(|seq| seq.to_string()),
            duplicate: answer.duplicate,
        }
    }

    /// Publishes one message: answers once it is durable (each matching subscription then gets
    /// exactly one copy, also if this process dies right after answering). A publish whose
    /// copies would take the tenant past its `max_stored_bytes` is
    /// [`ServiceError::QuotaExceeded`] and delivers nothing.
    pub async fn publish(
        &self,
        tenant: &TenantId,
        topic_name: &str,
        request: PublishRequest,
    ) -> Result<PublishResult, ServiceError> {
        let topic = topic_key(tenant, topic_name)?;
        let (config, subscriptions) = self.compiled_subscriptions(&topic).await?;
        let now = self.clock.now();
        let arn = self.topic_arn(&topic).await?;
        let mut publication = self
            .prepare_off_workers(
                String::new(),
                &topic,
                &config,
                &subscriptions,
                request,
                now,
                &arn,
            )
            .await?;
        let reserved = self
            .reserve_stored_bytes(tenant, self.copies_size(tenant, &publication))
            .await?;
        let spilled = match self.spill_publication(tenant, &mut publication, now).await {
            Ok(spilled) => spilled,
            Err(error) => {
                self.release_stored_bytes(tenant, reserved);
                return Err(error);
            }
        };
        let publications = vec![publication];
        let mut answers = match self.engine.publish(&topic, publications.clone(), now).await {
            Ok(answers) => answers,
            Err(error) => {
                self.release_stored_bytes(tenant, reserved);
                if stored_nothing(&error) {
                    self.discard_all([spilled]).await;
                }
                return Err(error.into());
            }
        };
        self.count_deliveries(&topic, &publications, &answers);
        if answers.first().is_none_or(|a| a.duplicate) {
            self.release_stored_bytes(tenant, reserved);
        }
        if answers.first().is_none_or(published_nothing) {
            self.discard_all([spilled]).await;
        }
        answers
            .pop()
            .map(Self::publish_result)
            .ok_or_else(|| ServiceError::Internal("engine answered no result for a publish".into()))
    }

    /// Publishes up to ten messages; each entry succeeds or fails on its own. Malformed or
    /// duplicate entry ids fail the whole batch.
    pub async fn publish_batch(
        &self,
        tenant: &TenantId,
        topic_name: &str,
        entries: Vec<PublishEntry>,
    ) -> Result<crate::BatchOutcome<PublishResult>, ServiceError> {
        crate::validate_batch_ids(entries.iter().map(|e| e.id.as_str()))?;
        let topic = topic_key(tenant, topic_name)?;
        let (config, subscriptions) = self.compiled_subscriptions(&topic).await?;
        let now = self.clock.now();
        let arn = self.topic_arn(&topic).await?;
        let mut failed = Vec::new();
        let mut ids = Vec::new();
        let mut publications = Vec::new();
        let mut reserved = Vec::new();
        for (index, entry) in entries.into_iter().enumerate() {
            let prepared = self
                .prepare_off_workers(
                    format!("entries[{index}]"),
                    &topic,
                    &config,
                    &subscriptions,
                    entry.message,
                    now,
                    &arn,
                )
                .await;
            match prepared {
                // Admitted against max_stored_bytes one by one, as a send batch's entries.
                Ok(publication) => match self
                    .reserve_stored_bytes(tenant, self.copies_size(tenant, &publication))
                    .await
                {
                    Ok(r) => {
                        ids.push(entry.id);
                        publications.push(publication);
                        reserved.push(r);
                    }
                    Err(error) => failed.push(crate::BatchFailure {
                        id: entry.id,
                        error,
                    }),
                },
                Err(error) => failed.push(crate::BatchFailure {
                    id: entry.id,
                    error,
                }),
            }
        }
        let mut successful = Vec::new();
        if !publications.is_empty() {
            let spills = publications
                .iter_mut()
                .map(|publication| self.spill_publication(tenant, publication, now));
            let spilled = match self.spill_all(spills).await {
                Ok(spilled) => spilled,
                Err(error) => {
                    for r in reserved {
                        self.release_stored_bytes(tenant, r);
                    }
                    return Err(error);
                }
            };
            let answers = match self.engine.publish(&topic, publications.clone(), now).await {
                Ok(answers) => answers,
                Err(error) => {
                    for r in reserved {
                        self.release_stored_bytes(tenant, r);
                    }
                    if stored_nothing(&error) {
                        self.discard_all(spilled).await;
                    }
                    return Err(error.into());
                }
            };
            self.count_deliveries(&topic, &publications, &answers);
            for (((id, answer), r), spilled) in
                ids.into_iter().zip(answers).zip(reserved).zip(spilled)
            {
                if answer.duplicate {
                    self.release_stored_bytes(tenant, r);
                }
                if published_nothing(&answer) {
                    self.discard_all([spilled]).await;
                }
                successful.push((id, Self::publish_result(answer)));
            }
        }
        Ok(crate::BatchOutcome { successful, failed })
    }

    /// One round of fan-out recovery: completes deliveries that a crash interrupted (only
    /// engines whose publish takes several steps have any).
    pub(crate) async fn recover_publications_once(&self) -> Result<(), ServiceError> {
        let delivered = self.engine.recover_publications(self.clock.now()).await?;
        if delivered > 0 {
            tracing::info!(delivered, "completed interrupted topic deliveries");
        }
        Ok(())
    }
}

fn not_found_as_subscription(error: ServiceError) -> ServiceError {
    match error {
        ServiceError::TopicNotFound => ServiceError::SubscriptionNotFound,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_written_before_aws_attributes_still_read_and_stay_unchanged() {
        let old = r#"{"config":{"content_based_deduplication":false,"tags":{}},"created_at":1,"updated_at":2,"subscriptions":[{"id":"news.ab","queue":"q","filter_policy":null,"filter_policy_scope":"attributes","raw_delivery":false,"dead_letter_queue":null,"created_at":3}]}"#;
        let record: TopicRecord = serde_json::from_str(old).unwrap();
        assert!(record.aws_attributes.is_empty());
        assert!(record.subscriptions[0].aws_attributes.is_empty());
        // Written back without the empty maps, so older gateways sharing a store read it too.
        let written = serde_json::to_value(&record).unwrap();
        assert_eq!(
            written,
            serde_json::from_str::<serde_json::Value>(old).unwrap()
        );
    }

    #[test]
    fn subjects_are_printable_ascii() {
        assert!(check_subject("subject", "Order shipped: #12").is_ok());
        assert!(check_subject("subject", "").is_err());
        assert!(check_subject("subject", &"x".repeat(101)).is_err());
        assert!(check_subject("subject", "tab\there").is_err());
        assert!(check_subject("subject", "café").is_err());
    }
}
