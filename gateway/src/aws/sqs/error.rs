//! SQS's errors: one table from each to its HTTP status, its Query-protocol code (also the
//! `x-amzn-query-error` header of JSON answers) and its JSON `__type`, and the one mapping
//! from the services' errors.

use crate::aws::AwsError;
use axum::http::StatusCode;
use sluice_services::ServiceError;

/// An SQS error, named as AWS names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqsError {
    /// Authentication, throttling, unknown actions and failures shared with the other services.
    Common(AwsError),
    /// The queue (URL, name or ARN) names no queue of the caller's account.
    QueueDoesNotExist,
    /// `CreateQueue` of an existing name with other attributes.
    QueueNameExists(String),
    /// A parameter's value is out of range or malformed.
    InvalidParameterValue(String),
    /// A required parameter is missing.
    MissingParameter(String),
    /// An attribute name that does not exist or cannot be set.
    InvalidAttributeName(String),
    /// An attribute value that cannot be used.
    InvalidAttributeValue(String),
    /// A receipt handle that is not one of the queue's current ones.
    ReceiptHandleIsInvalid(String),
    /// A visibility change of a message that is not in flight.
    MessageNotInflight,
    /// Two batch entries share an id.
    BatchEntryIdsNotDistinct(String),
    /// A batch without entries.
    EmptyBatchRequest,
    /// A batch of more than ten entries.
    TooManyEntriesInBatchRequest(usize),
    /// A batch entry id that is not 1–80 of `[A-Za-z0-9_-]`.
    InvalidBatchEntryId(String),
    /// A batch whose messages together exceed the largest message.
    BatchRequestTooLong(String),
    /// The queue is full or a tenant quota is reached.
    OverLimit(String),
    /// A message move task that does not exist.
    ResourceNotFound(String),
    /// What Sluice refuses although SQS would do it.
    UnsupportedOperation(String),
    /// A JSON body that does not parse, or a member of the wrong type.
    Serialization(String),
}

/// How an error is answered.
pub struct Described {
    /// The HTTP status.
    pub status: StatusCode,
    /// The Query code, also sent in `x-amzn-query-error`.
    pub query_code: &'static str,
    /// The JSON `__type`.
    pub json_type: String,
    /// Whether the caller is at fault.
    pub sender: bool,
    /// The message.
    pub message: String,
}

impl SqsError {
    /// Status, codes and message.
    pub fn describe(&self) -> Described {
        let bad = StatusCode::BAD_REQUEST;
        let modeled = |status, query_code: &'static str, shape: &str, message: String| Described {
            status,
            query_code,
            json_type: format!("com.amazonaws.sqs#{shape}"),
            sender: true,
            message,
        };
        match self {
            Self::Common(error) => {
                let (status, code, sender, message) = error.classify();
                Described {
                    status,
                    query_code: code,
                    json_type: format!("com.amazon.coral.service#{code}"),
                    sender,
                    message,
                }
            }
            Self::QueueDoesNotExist => modeled(
                bad,
                "AWS.SimpleQueueService.NonExistentQueue",
                "QueueDoesNotExist",
                "The specified queue does not exist.".into(),
            ),
            Self::QueueNameExists(m) => {
                modeled(bad, "QueueAlreadyExists", "QueueNameExists", m.clone())
            }
            Self::InvalidParameterValue(m) => modeled(
                bad,
                "InvalidParameterValue",
                "InvalidParameterValue",
                m.clone(),
            ),
            Self::MissingParameter(m) => {
                modeled(bad, "MissingParameter", "MissingParameter", m.clone())
            }
            Self::InvalidAttributeName(m) => modeled(
                bad,
                "InvalidAttributeName",
                "InvalidAttributeName",
                m.clone(),
            ),
            Self::InvalidAttributeValue(m) => modeled(
                bad,
                "InvalidAttributeValue",
                "InvalidAttributeValue",
                m.clone(),
            ),
            Self::ReceiptHandleIsInvalid(m) => modeled(
                StatusCode::NOT_FOUND,
                "ReceiptHandleIsInvalid",
                "ReceiptHandleIsInvalid",
                m.clone(),
            ),
            Self::MessageNotInflight => modeled(
                bad,
                "AWS.SimpleQueueService.MessageNotInflight",
                "MessageNotInflight",
                "The message referred to isn't in flight.".into(),
            ),
            Self::BatchEntryIdsNotDistinct(id) => modeled(
                bad,
                "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
                "BatchEntryIdsNotDistinct",
                format!("Id {id} repeated."),
            ),
            Self::EmptyBatchRequest => modeled(
                bad,
                "AWS.SimpleQueueService.EmptyBatchRequest",
                "EmptyBatchRequest",
                "There should be at least one entry in the request.".into(),
            ),
            Self::TooManyEntriesInBatchRequest(n) => modeled(
                bad,
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                "TooManyEntriesInBatchRequest",
                format!("Maximum number of entries per request are 10. You have sent {n}."),
            ),
            Self::InvalidBatchEntryId(m) => modeled(
                bad,
                "AWS.SimpleQueueService.InvalidBatchEntryId",
                "InvalidBatchEntryId",
                m.clone(),
            ),
            Self::BatchRequestTooLong(m) => modeled(
                bad,
                "AWS.SimpleQueueService.BatchRequestTooLong",
                "BatchRequestTooLong",
                m.clone(),
            ),
            Self::OverLimit(m) => {
                modeled(StatusCode::FORBIDDEN, "OverLimit", "OverLimit", m.clone())
            }
            Self::ResourceNotFound(m) => modeled(
                StatusCode::NOT_FOUND,
                "ResourceNotFoundException",
                "ResourceNotFoundException",
                m.clone(),
            ),
            Self::UnsupportedOperation(m) => modeled(
                bad,
                "AWS.SimpleQueueService.UnsupportedOperation",
                "UnsupportedOperation",
                m.clone(),
            ),
            Self::Serialization(m) => Described {
                status: bad,
                query_code: "MalformedQueryString",
                json_type: "com.amazon.coral.service#SerializationException".into(),
                sender: true,
                message: m.clone(),
            },
        }
    }

    /// The code a failed batch entry carries.
    pub fn entry_code(&self) -> &'static str {
        self.describe().query_code
    }
}

impl From<AwsError> for SqsError {
    fn from(error: AwsError) -> Self {
        Self::Common(error)
    }
}

impl From<crate::aws::query::QueryError> for SqsError {
    fn from(error: crate::aws::query::QueryError) -> Self {
        use crate::aws::query::QueryError as Q;
        match error {
            Q::Missing(_) => Self::MissingParameter(error.to_string()),
            Q::Invalid { .. } => Self::InvalidParameterValue(error.to_string()),
        }
    }
}

/// The SQS name of a field the services name in the REST API's terms
/// (`visibility_timeout_seconds` → `VisibilityTimeout`, `entries[1].body` →
/// `Entries.2.MessageBody`), so an SQS client reads the parameter it sent.
pub fn aws_field(field: &str) -> String {
    field
        .split('.')
        .map(|segment| {
            if let Some(index) = segment
                .strip_prefix("entries[")
                .and_then(|rest| rest.strip_suffix(']'))
                .and_then(|n| n.parse::<usize>().ok())
            {
                return format!("Entries.{}", index + 1);
            }
            let (name, index) = match segment.split_once('[') {
                Some((name, rest)) => (name, Some(rest.trim_end_matches(']'))),
                None => (segment, None),
            };
            let aws = match name {
                "visibility_timeout_seconds" => "VisibilityTimeout",
                "message_retention_seconds" => "MessageRetentionPeriod",
                "delay_seconds" => "DelaySeconds",
                "receive_wait_seconds" => "ReceiveMessageWaitTimeSeconds",
                "max_message_bytes" => "MaximumMessageSize",
                "redrive_policy" => "RedrivePolicy",
                "dead_letter_queue" => "deadLetterTargetArn",
                "max_receive_count" => "maxReceiveCount",
                "redrive_allow_policy" => "RedriveAllowPolicy",
                "source_queues" => "sourceQueueArns",
                "permission" => "redrivePermission",
                "content_based_deduplication" => "ContentBasedDeduplication",
                "deduplication_scope" => "DeduplicationScope",
                "tags" => "Tags",
                "queue" => "QueueName",
                "body" => "MessageBody",
                "attributes" => "MessageAttributes",
                "type" => "DataType",
                "value" => "Value",
                "group_id" => "MessageGroupId",
                "deduplication_id" => "MessageDeduplicationId",
                "max_messages" => "MaxNumberOfMessages",
                "wait_seconds" => "WaitTimeSeconds",
                "request_attempt_id" => "ReceiveRequestAttemptId",
                "max_messages_per_second" => "MaxNumberOfMessagesPerSecond",
                "destination" => "DestinationArn",
                "next_token" => "NextToken",
                "limit" => "MaxResults",
                other => other,
            };
            match index {
                Some(index) => format!("{aws}[{index}]"),
                None => aws.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// A services error met while applying queue attributes: a refused value is
/// `InvalidAttributeValue` naming the attribute, as SQS answers `CreateQueue` and
/// `SetQueueAttributes`.
pub fn attribute_error(error: ServiceError) -> SqsError {
    match error {
        ServiceError::Validation { field, message } if field != "queue" => {
            SqsError::InvalidAttributeValue(format!(
                "Invalid value for the parameter {}. Reason: {message}",
                aws_field(&field)
            ))
        }
        other => other.into(),
    }
}

impl From<ServiceError> for SqsError {
    fn from(error: ServiceError) -> Self {
        use ServiceError as S;
        match error {
            S::Validation { field, message } => Self::InvalidParameterValue(format!(
                "Value for parameter {} is invalid. Reason: {message}",
                aws_field(&field)
            )),
            S::QueueNotFound => Self::QueueDoesNotExist,
            S::PayloadTooLarge(m) => Self::InvalidParameterValue(format!(
                "One or more parameters are invalid. Reason: {m}"
            )),
            S::QueueFull | S::QuotaExceeded(_) => Self::OverLimit(error.to_string()),
            S::ReceiptHandleInvalid => {
                Self::ReceiptHandleIsInvalid("The input receipt handle is invalid.".into())
            }
            S::ReceiptHandleStale => Self::ReceiptHandleIsInvalid(
                "The receipt handle has expired: the message was received again or deleted.".into(),
            ),
            S::TaskNotFound => Self::ResourceNotFound("The task handle does not exist.".into()),
            S::Conflict(m) => Self::UnsupportedOperation(m),
            error @ (S::RateLimited { .. }
            | S::Unavailable(_)
            | S::Overloaded(_)
            | S::TenantDeleted(_)
            | S::TenantNotFound
            | S::Internal(_)
            | S::TopicNotFound
            | S::SubscriptionNotFound
            | S::AccessKeyNotFound) => Self::Common(AwsError::from(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_fields_are_named_as_sqs_names_them() {
        for (rest, aws) in [
            ("visibility_timeout_seconds", "VisibilityTimeout"),
            (
                "redrive_policy.max_receive_count",
                "RedrivePolicy.maxReceiveCount",
            ),
            (
                "redrive_allow_policy.source_queues[2]",
                "RedriveAllowPolicy.sourceQueueArns[2]",
            ),
            ("entries[0].body", "Entries.1.MessageBody"),
            (
                "entries[3].attributes.color.type",
                "Entries.4.MessageAttributes.color.DataType",
            ),
            ("group_id", "MessageGroupId"),
            ("tags.k", "Tags.k"),
        ] {
            assert_eq!(aws_field(rest), aws, "{rest}");
        }
    }
}
