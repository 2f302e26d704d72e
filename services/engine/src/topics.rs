//! What a topic publish hands an engine and what it answers: the publication, one
//! [`Delivery`] per subscription whose filter matched, and how each copy is rendered (raw, or
//! in the SNS-shaped notification envelope) so that every engine — and every retry of an
//! interrupted fan-out — writes byte-for-byte the same copy.

use crate::{message_size_with_payload, MessageAttribute, PayloadRef, QueueName, TenantId};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A topic of one tenant. Topic names follow the queue rules; a name ending in `.fifo` makes a
/// FIFO topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TopicKey {
    /// The owner.
    pub tenant: TenantId,
    /// The topic's name.
    pub name: QueueName,
}

impl TopicKey {
    /// Pairs a tenant and a topic name.
    pub fn new(tenant: TenantId, name: QueueName) -> Self {
        Self { tenant, name }
    }

    /// Whether this is a FIFO topic.
    pub fn is_fifo(&self) -> bool {
        self.name.is_fifo()
    }
}

impl fmt::Display for TopicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.name)
    }
}

/// One message published to a topic, as the services validated it, with the subscriptions
/// that are to receive a copy (their filters matched) and those whose filters did not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publication {
    /// The topic-level message id (what the publisher is answered, and the envelope's
    /// `MessageId`). Every copy has its own queue-level id ([`Delivery::message_id`]).
    pub message_id: String,
    /// The UTF-8 body (empty when `payload` holds it).
    pub body: String,
    /// Typed attributes by name.
    pub attributes: BTreeMap<String, MessageAttribute>,
    /// The body kept in a payload store, shared by every copy.
    #[serde(default)]
    pub payload: Option<PayloadRef>,
    /// The envelope's `Subject`, if the publisher gave one.
    pub subject: Option<String>,
    /// Passed on to every copy (FIFO topics: required, the unit of ordering).
    pub group_id: Option<String>,
    /// FIFO topics: required (the services fill it in for content-based deduplication);
    /// deduplicates publishes topic-wide for [`DEDUPLICATION_WINDOW_MS`](crate::DEDUPLICATION_WINDOW_MS)
    /// and is passed on to every copy.
    pub deduplication_id: Option<String>,
    /// The envelope's `TopicArn`.
    pub topic_arn: String,
    /// The envelope's `Timestamp`: the publish time as RFC 3339 with milliseconds.
    pub timestamp: String,
    /// One per subscription whose filter matched, each to get exactly one copy.
    pub deliveries: Vec<Delivery>,
    /// The ids of the subscriptions whose filters did not match (counted in their stats).
    pub filtered_out: Vec<String>,
}

/// Where one copy of a publication goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The subscription this copy is for: with the publication's message id, what makes a
    /// delivery idempotent.
    pub subscription_id: String,
    /// The queue the copy goes to (same tenant, the topic's kind).
    pub queue: QueueName,
    /// Raw delivery: the body and attributes unchanged; otherwise the notification envelope.
    pub raw: bool,
    /// Where a copy goes that the queue cannot take (missing, full, too large); `None`: such a
    /// copy is counted as failed.
    pub dead_letter_queue: Option<QueueName>,
    /// The copy's message id in the queue.
    pub message_id: String,
}

/// A copy as it is stored in a queue: rendered by [`Publication::render`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedCopy {
    /// The queue message's body.
    pub body: String,
    /// The queue message's attributes (none for an enveloped copy: they are inside the body).
    pub attributes: BTreeMap<String, MessageAttribute>,
    /// The publication's payload: same key and size for every copy, `enveloped` when the copy
    /// is (its envelope's `Message` is then empty).
    pub payload: Option<PayloadRef>,
}

impl RenderedCopy {
    /// The copy's size as SQS counts a message, its payload included (what a queue's
    /// `max_message_bytes` bounds and `stored_bytes` sums).
    pub fn size(&self) -> usize {
        message_size_with_payload(&self.body, &self.attributes, self.payload.as_ref())
    }
}

/// A message's size as SQS counts it: the body plus each attribute's name, type and value
/// (`Binary` values decoded).
pub fn message_size(body: &str, attributes: &BTreeMap<String, MessageAttribute>) -> usize {
    body.len()
        + attributes
            .iter()
            .map(|(name, attribute)| {
                let value = if attribute.data_type.starts_with("Binary") {
                    base64::engine::general_purpose::STANDARD
                        .decode(&attribute.value)
                        .map_or(attribute.value.len(), |bytes| bytes.len())
                } else {
                    attribute.value.len()
                };
                name.len() + attribute.data_type.len() + value
            })
            .sum::<usize>()
}

impl Publication {
    /// The copy `delivery` gets. `seq` is the topic's sequence number for this publication
    /// (FIFO topics; it goes into the envelope's `SequenceNumber`), `None` on standard topics.
    /// A pure function of its inputs, so a repeated delivery writes the same copy.
    pub fn render(&self, delivery: &Delivery, seq: Option<u64>) -> RenderedCopy {
        let payload = self.payload.as_ref().map(|p| PayloadRef {
            enveloped: !delivery.raw,
            ..p.clone()
        });
        if delivery.raw {
            return RenderedCopy {
                body: self.body.clone(),
                attributes: self.attributes.clone(),
                payload,
            };
        }
        let mut envelope = serde_json::Map::new();
        envelope.insert("Type".into(), "Notification".into());
        envelope.insert("MessageId".into(), self.message_id.clone().into());
        if let Some(seq) = seq {
            envelope.insert("SequenceNumber".into(), seq.to_string().into());
        }
        envelope.insert("TopicArn".into(), self.topic_arn.clone().into());
        if let Some(subject) = &self.subject {
            envelope.insert("Subject".into(), subject.clone().into());
        }
        envelope.insert("Message".into(), self.body.clone().into());
        envelope.insert("Timestamp".into(), self.timestamp.clone().into());
        if !self.attributes.is_empty() {
            let attributes = self
                .attributes
                .iter()
                .map(|(name, attribute)| {
                    let mut value = serde_json::Map::new();
                    value.insert("Type".into(), attribute.data_type.clone().into());
                    value.insert("Value".into(), attribute.value.clone().into());
                    (name.clone(), serde_json::Value::Object(value))
                })
                .collect();
            envelope.insert(
                "MessageAttributes".into(),
                serde_json::Value::Object(attributes),
            );
        }
        RenderedCopy {
            body: serde_json::Value::Object(envelope).to_string(),
            attributes: BTreeMap::new(),
            payload,
        }
    }
}

/// What became of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryOutcome {
    /// The copy is in the subscription's queue.
    Delivered,
    /// The queue could not take it; the copy is in the subscription's dead-letter queue
    /// (counted as failed).
    DeadLettered(DeliveryFailure),
    /// The queue could not take it and there was no dead-letter queue to take it instead
    /// (counted as failed).
    Failed(DeliveryFailure),
    /// Durably recorded, not yet carried out when the publish answered (the store failed
    /// part way): background recovery delivers it, exactly once.
    Pending,
}

/// Why a queue did not take a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryFailure {
    /// The queue does not exist (deleted since the subscription was made).
    QueueMissing,
    /// The queue holds `max_depth` messages.
    QueueFull,
    /// The copy is larger than the queue's `max_message_bytes`.
    TooLarge,
}

/// The answer for one publication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The publication's message id (for a duplicate: the original's).
    pub message_id: String,
    /// FIFO topics: the topic's sequence number (for a duplicate: the original's); strictly
    /// increasing per topic incarnation. `None` on standard topics.
    pub seq: Option<u64>,
    /// A FIFO deduplication hit: nothing was published or delivered.
    pub duplicate: bool,
    /// One per delivery of the publication, in order: `(subscription id, outcome)`. Empty for
    /// a duplicate.
    pub outcomes: Vec<(String, DeliveryOutcome)>,
}

/// A subscription's counters, kept by the engine per topic. Each publication counts once per
/// subscription, also when its fan-out was interrupted and completed by recovery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionStats {
    /// Copies that reached the subscription's queue.
    pub delivered: u64,
    /// Publications whose filter did not match.
    pub filtered_out: u64,
    /// Copies the queue could not take (whether or not they went to a dead-letter queue).
    pub failed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publication() -> Publication {
        let mut attributes = BTreeMap::new();
        attributes.insert(
            "colour".to_owned(),
            MessageAttribute {
                data_type: "String".into(),
                value: "red".into(),
            },
        );
        attributes.insert(
            "blob".to_owned(),
            MessageAttribute {
                data_type: "Binary".into(),
                value: "AAEC".into(),
            },
        );
        Publication {
            message_id: "m-1".into(),
            body: "he said \"hi\"".into(),
            attributes,
            subject: Some("greeting".into()),
            group_id: Some("g".into()),
            deduplication_id: Some("d".into()),
            topic_arn: "arn:aws:sns:us-east-1:000000000000:t.fifo".into(),
            timestamp: "2026-12-04T10:00:00.000Z".into(),
            payload: None,
            deliveries: Vec::new(),
            filtered_out: Vec::new(),
        }
    }

    fn delivery(raw: bool) -> Delivery {
        Delivery {
            subscription_id: "s".into(),
            queue: QueueName::parse("q.fifo").expect("valid name"),
            raw,
            dead_letter_queue: None,
            message_id: "c-1".into(),
        }
    }

    #[test]
    fn raw_copies_keep_body_and_attributes() {
        let p = publication();
        let copy = p.render(&delivery(true), Some(7));
        assert_eq!(copy.body, p.body);
        assert_eq!(copy.attributes, p.attributes);
        // Binary values count decoded: "AAEC" is three bytes.
        assert_eq!(
            copy.size(),
            p.body.len() + "colour".len() + 6 + 3 + "blob".len() + 6 + 3
        );
    }

    #[test]
    fn envelopes_carry_sns_fields_and_no_queue_attributes() {
        let p = publication();
        let copy = p.render(&delivery(false), Some(7));
        assert!(copy.attributes.is_empty());
        let json: serde_json::Value = serde_json::from_str(&copy.body).expect("JSON");
        assert_eq!(json["Type"], "Notification");
        assert_eq!(json["MessageId"], "m-1");
        assert_eq!(json["SequenceNumber"], "7");
        assert_eq!(json["TopicArn"], p.topic_arn);
        assert_eq!(json["Subject"], "greeting");
        assert_eq!(json["Message"], p.body);
        assert_eq!(json["Timestamp"], p.timestamp);
        assert_eq!(json["MessageAttributes"]["colour"]["Type"], "String");
        assert_eq!(json["MessageAttributes"]["colour"]["Value"], "red");
        assert_eq!(json["MessageAttributes"]["blob"]["Value"], "AAEC");
        // Rendering is deterministic: a repeated delivery writes the same bytes.
        assert_eq!(copy, p.render(&delivery(false), Some(7)));
    }

    #[test]
    fn copies_share_the_payload_and_count_its_size() {
        let mut p = publication();
        p.body.clear();
        p.payload = Some(PayloadRef {
            key: "t/0123456789abcdef0123456789abcdef".into(),
            size: 1000,
            enveloped: false,
        });
        let raw = p.render(&delivery(true), Some(7));
        let enveloped = p.render(&delivery(false), Some(7));
        let (raw_ref, env_ref) = (
            raw.payload.clone().unwrap(),
            enveloped.payload.clone().unwrap(),
        );
        assert_eq!(
            (raw_ref.key.as_str(), raw_ref.size),
            ("t/0123456789abcdef0123456789abcdef", 1000)
        );
        assert_eq!((env_ref.key, env_ref.size), (raw_ref.key, raw_ref.size));
        assert!(!raw_ref.enveloped && env_ref.enveloped);
        assert_eq!(raw.body, "");
        let json: serde_json::Value = serde_json::from_str(&enveloped.body).expect("JSON");
        assert_eq!(json["Message"], "");
        assert_eq!(raw.size(), message_size("", &p.attributes) + 1000);
        assert_eq!(enveloped.size(), enveloped.body.len() + 1000);
    }

    #[test]
    fn envelopes_omit_what_was_not_given() {
        let mut p = publication();
        p.subject = None;
        p.attributes.clear();
        let copy = p.render(&delivery(false), None);
        let json: serde_json::Value = serde_json::from_str(&copy.body).expect("JSON");
        let object = json.as_object().expect("object");
        assert!(!object.contains_key("Subject"));
        assert!(!object.contains_key("MessageAttributes"));
        assert!(!object.contains_key("SequenceNumber"));
    }
}
