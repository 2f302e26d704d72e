//! Queue attributes as SQS names them, to and from the queue configuration: the attributes
//! Sluice acts on become a [`QueueConfigPatch`]; those it stores without acting on (`Policy`,
//! `KmsMasterKeyId`, …) are kept byte for byte as the queue's opaque attributes; the read-only
//! ones (`QueueArn`, counts, timestamps) are computed on reading.

use super::SqsError;
use serde_json::{json, Value};
use sluice_engine::{DeduplicationScope, RedriveAllowPolicy};
use sluice_services::{
    QueueConfigPatch, QueueView, RedriveAllowPolicyInput, RedrivePolicyInput,
    MAX_OPAQUE_VALUE_BYTES,
};
use std::collections::BTreeMap;

/// Attributes stored and echoed, never acted on.
pub const OPAQUE: [&str; 5] = [
    "Policy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
    "FifoThroughputLimit",
];

/// Attributes computed on reading; setting one is `InvalidAttributeName`.
pub const READ_ONLY: [&str; 6] = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
];

/// Attributes that map onto the configuration.
pub const CONFIGURED: [&str; 10] = [
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "RedrivePolicy",
    "RedriveAllowPolicy",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
];

/// How queue names and ARNs translate for the caller's account.
pub struct Names {
    /// `arn:aws:sqs:{region}:{account}:`.
    pub arn_prefix: String,
}

impl Names {
    /// The ARN of a queue of the account.
    pub fn arn(&self, queue: &str) -> String {
        format!("{}{queue}", self.arn_prefix)
    }

    /// The queue an ARN of the account names.
    fn queue_of(&self, arn: &str, attribute: &str) -> Result<String, SqsError> {
        arn.strip_prefix(&self.arn_prefix)
            .filter(|name| !name.is_empty() && !name.contains(':'))
            .map(str::to_owned)
            .ok_or_else(|| {
                invalid_value(
                    attribute,
                    arn,
                    "it must be the ARN of a queue of this account",
                )
            })
    }
}

fn invalid_value(attribute: &str, value: &str, reason: &str) -> SqsError {
    SqsError::InvalidAttributeValue(format!(
        "Invalid value for the parameter {attribute}: {value:?}. Reason: {reason}"
    ))
}

fn seconds(attribute: &str, value: &str) -> Result<u32, SqsError> {
    value
        .trim()
        .parse()
        .map_err(|_| invalid_value(attribute, value, "must be a non-negative integer"))
}

fn boolean(attribute: &str, value: &str) -> Result<bool, SqsError> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid_value(attribute, value, "must be true or false")),
    }
}

/// A checked set of attributes: the configuration change and the opaque values (`None`
/// removes one).
#[derive(Debug, Default)]
pub struct Parsed {
    /// The configuration change.
    pub patch: QueueConfigPatch,
    /// Opaque attributes to set or remove.
    pub opaque: BTreeMap<String, Option<String>>,
    /// `FifoQueue`, when given.
    pub fifo: Option<bool>,
}

/// Checks attributes given to `CreateQueue` or `SetQueueAttributes`. An empty value resets a
/// configured attribute to its default and removes an opaque one.
pub fn parse(attributes: &BTreeMap<String, String>, names: &Names) -> Result<Parsed, SqsError> {
    let mut parsed = Parsed::default();
    for (name, value) in attributes {
        let name = name.as_str();
        if OPAQUE.contains(&name) {
            if value.len() > MAX_OPAQUE_VALUE_BYTES {
                return Err(invalid_value(
                    name,
                    &value.chars().take(40).collect::<String>(),
                    &format!("must be at most {MAX_OPAQUE_VALUE_BYTES} bytes"),
                ));
            }
            let value = (!value.is_empty()).then(|| value.clone());
            parsed.opaque.insert(name.to_owned(), value);
            continue;
        }
        if !CONFIGURED.contains(&name) {
            return Err(SqsError::InvalidAttributeName(format!(
                "Unknown Attribute {name}."
            )));
        }
        let empty = value.is_empty();
        let patch = &mut parsed.patch;
        match name {
            "DelaySeconds" => {
                patch.delay_seconds = Some(if empty { 0 } else { seconds(name, value)? })
            }
            "MaximumMessageSize" => {
                patch.max_message_bytes = (!empty).then(|| seconds(name, value)).transpose()?
            }
            "MessageRetentionPeriod" => {
                patch.message_retention_seconds = Some(if empty {
                    345_600
                } else {
                    seconds(name, value)?
                })
            }
            "ReceiveMessageWaitTimeSeconds" => {
                patch.receive_wait_seconds = Some(if empty { 0 } else { seconds(name, value)? })
            }
            "VisibilityTimeout" => {
                patch.visibility_timeout_seconds =
                    Some(if empty { 30 } else { seconds(name, value)? })
            }
            "FifoQueue" => parsed.fifo = Some(boolean(name, value)?),
            "ContentBasedDeduplication" => {
                patch.content_based_deduplication = Some(!empty && boolean(name, value)?)
            }
            "DeduplicationScope" => {
                patch.deduplication_scope = Some(
                    match value.as_str() {
                        "queue" | "" => "queue",
                        "messageGroup" => "message_group",
                        _ => {
                            return Err(invalid_value(name, value, "must be queue or messageGroup"))
                        }
                    }
                    .to_owned(),
                )
            }
            "RedrivePolicy" => {
                patch.redrive_policy = Some(if empty {
                    None
                } else {
                    Some(redrive_policy(value, names)?)
                })
            }
            "RedriveAllowPolicy" => {
                patch.redrive_allow_policy = Some(if empty {
                    None
                } else {
                    Some(redrive_allow_policy(value, names)?)
                })
            }
            _ => {
                return Err(SqsError::InvalidAttributeName(format!(
                    "Unknown Attribute {name}."
                )))
            }
        }
    }
    Ok(parsed)
}

fn redrive_policy(value: &str, names: &Names) -> Result<RedrivePolicyInput, SqsError> {
    let attribute = "RedrivePolicy";
    let json: Value = serde_json::from_str(value)
        .map_err(|_| invalid_value(attribute, value, "it is not JSON"))?;
    let arn = json["deadLetterTargetArn"]
        .as_str()
        .ok_or_else(|| invalid_value(attribute, value, "deadLetterTargetArn is missing"))?;
    let count = match &json["maxReceiveCount"] {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .and_then(|n| u32::try_from(n).ok())
    .ok_or_else(|| {
        invalid_value(
            attribute,
            value,
            "maxReceiveCount must be an integer from 1 to 1000",
        )
    })?;
    Ok(RedrivePolicyInput {
        dead_letter_queue: names.queue_of(arn, attribute)?,
        max_receive_count: count,
    })
}

fn redrive_allow_policy(value: &str, names: &Names) -> Result<RedriveAllowPolicyInput, SqsError> {
    let attribute = "RedriveAllowPolicy";
    let json: Value = serde_json::from_str(value)
        .map_err(|_| invalid_value(attribute, value, "it is not JSON"))?;
    let permission = match json["redrivePermission"].as_str() {
        Some("allowAll") => "allow_all",
        Some("denyAll") => "deny_all",
        Some("byQueue") => "by_queue",
        _ => {
            return Err(invalid_value(
                attribute,
                value,
                "redrivePermission must be allowAll, denyAll or byQueue",
            ))
        }
    };
    let source_queues = match json.get("sourceQueueArns") {
        None | Some(Value::Null) => None,
        Some(Value::Array(arns)) => Some(
            arns.iter()
                .map(|arn| {
                    arn.as_str()
                        .ok_or_else(|| {
                            invalid_value(attribute, value, "sourceQueueArns holds ARNs")
                        })
                        .and_then(|arn| names.queue_of(arn, attribute))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(invalid_value(
                attribute,
                value,
                "sourceQueueArns must be a list",
            ))
        }
    };
    Ok(RedriveAllowPolicyInput {
        permission: permission.to_owned(),
        source_queues,
    })
}

/// Every attribute of a queue, by SQS's name.
pub fn all(
    view: &QueueView,
    opaque: &BTreeMap<String, String>,
    names: &Names,
) -> BTreeMap<String, String> {
    let config = &view.config;
    let mut out = BTreeMap::new();
    let mut put = |name: &str, value: String| {
        out.insert(name.to_owned(), value);
    };
    put("QueueArn", names.arn(view.name.as_str()));
    put(
        "ApproximateNumberOfMessages",
        view.stats.visible.to_string(),
    );
    put(
        "ApproximateNumberOfMessagesNotVisible",
        view.stats.in_flight.to_string(),
    );
    put(
        "ApproximateNumberOfMessagesDelayed",
        view.stats.delayed.to_string(),
    );
    put("CreatedTimestamp", (view.created_at / 1000).to_string());
    put(
        "LastModifiedTimestamp",
        (view.updated_at / 1000).to_string(),
    );
    put("DelaySeconds", config.delay_seconds.to_string());
    put("MaximumMessageSize", config.max_message_bytes.to_string());
    put(
        "MessageRetentionPeriod",
        config.message_retention_seconds.to_string(),
    );
    put(
        "ReceiveMessageWaitTimeSeconds",
        config.receive_wait_seconds.to_string(),
    );
    put(
        "VisibilityTimeout",
        config.visibility_timeout_seconds.to_string(),
    );
    if let Some(policy) = &config.redrive_policy {
        put(
            "RedrivePolicy",
            json!({
                "deadLetterTargetArn": names.arn(policy.dead_letter_queue.as_str()),
                "maxReceiveCount": policy.max_receive_count,
            })
            .to_string(),
        );
    }
    if let Some(policy) = &config.redrive_allow_policy {
        let value = match policy {
            RedriveAllowPolicy::AllowAll => json!({"redrivePermission": "allowAll"}),
            RedriveAllowPolicy::DenyAll => json!({"redrivePermission": "denyAll"}),
            RedriveAllowPolicy::ByQueue(queues) => json!({
                "redrivePermission": "byQueue",
                "sourceQueueArns": queues.iter().map(|q| names.arn(q.as_str())).collect::<Vec<_>>(),
            }),
        };
        put("RedriveAllowPolicy", value.to_string());
    }
    if view.name.is_fifo() {
        put("FifoQueue", "true".into());
        put(
            "ContentBasedDeduplication",
            config.content_based_deduplication.to_string(),
        );
        put(
            "DeduplicationScope",
            match config.deduplication_scope {
                DeduplicationScope::Queue => "queue",
                DeduplicationScope::MessageGroup => "messageGroup",
            }
            .into(),
        );
    }
    for (name, value) in opaque {
        put(name, value.clone());
    }
    out
}

/// Whether `requested` (attributes given to `CreateQueue`) agree with the queue's current
/// `attributes`: values compared as SQS compares them (JSON policies by content).
pub fn agree(requested: &BTreeMap<String, String>, current: &BTreeMap<String, String>) -> bool {
    requested.iter().all(|(name, value)| {
        let now = current.get(name).map(String::as_str).unwrap_or_default();
        if value == now {
            return true;
        }
        match name.as_str() {
            "RedrivePolicy" | "RedriveAllowPolicy" | "Policy" => {
                normalized_json(value).is_some() && normalized_json(value) == normalized_json(now)
            }
            "FifoQueue" | "ContentBasedDeduplication" | "SqsManagedSseEnabled" => {
                value.eq_ignore_ascii_case(now)
                    || (value.eq_ignore_ascii_case("false") && now.is_empty())
            }
            _ => false,
        }
    })
}

fn normalized_json(text: &str) -> Option<Value> {
    let mut value: Value = serde_json::from_str(text).ok()?;
    // `maxReceiveCount` may be given as text; it reads back as a number.
    if let Some(count) = value.get_mut("maxReceiveCount") {
        if let Some(n) = count.as_str().and_then(|s| s.trim().parse::<u64>().ok()) {
            *count = Value::from(n);
        }
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        Names {
            arn_prefix: "arn:aws:sqs:us-east-1:111122223333:".into(),
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn redrive_policies_take_counts_as_numbers_or_text_and_only_own_arns() {
        for count in ["5", "\"5\""] {
            let parsed = parse(
                &map(&[(
                    "RedrivePolicy",
                    &format!(
                        r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:111122223333:dlq","maxReceiveCount":{count}}}"#
                    ),
                )]),
                &names(),
            )
            .unwrap();
            let policy = parsed.patch.redrive_policy.unwrap().unwrap();
            assert_eq!(
                (policy.dead_letter_queue.as_str(), policy.max_receive_count),
                ("dlq", 5)
            );
        }
        let foreign = parse(
            &map(&[(
                "RedrivePolicy",
                r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:999999999999:dlq","maxReceiveCount":5}"#,
            )]),
            &names(),
        );
        assert!(matches!(foreign, Err(SqsError::InvalidAttributeValue(_))));
        let cleared = parse(&map(&[("RedrivePolicy", "")]), &names()).unwrap();
        assert!(matches!(cleared.patch.redrive_policy, Some(None)));
    }

    #[test]
    fn opaque_attributes_are_kept_as_given_and_unknown_names_refused() {
        let parsed = parse(
            &map(&[("Policy", " {\"a\" : 1} "), ("KmsMasterKeyId", "")]),
            &names(),
        )
        .unwrap();
        assert_eq!(parsed.opaque["Policy"].as_deref(), Some(" {\"a\" : 1} "));
        assert_eq!(parsed.opaque["KmsMasterKeyId"], None);
        assert!(matches!(
            parse(&map(&[("QueueArn", "x")]), &names()),
            Err(SqsError::InvalidAttributeName(_))
        ));
    }

    #[test]
    fn create_queue_compares_policies_by_content() {
        let current = map(&[
            (
                "RedrivePolicy",
                r#"{"deadLetterTargetArn":"arn:x","maxReceiveCount":3}"#,
            ),
            ("VisibilityTimeout", "30"),
        ]);
        assert!(agree(
            &map(&[(
                "RedrivePolicy",
                r#"{ "maxReceiveCount": "3", "deadLetterTargetArn": "arn:x" }"#
            )]),
            &current
        ));
        assert!(agree(&map(&[("FifoQueue", "false")]), &current));
        assert!(!agree(&map(&[("VisibilityTimeout", "31")]), &current));
        assert!(!agree(&map(&[("Policy", "{}")]), &current));
    }
}
