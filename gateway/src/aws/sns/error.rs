//! SNS's errors: the one table of codes and statuses the SNS endpoint answers (from AWS's
//! model of the service), and the mapping of the services' errors and the Query codec's onto
//! them. The identity errors every service shares (signature, throttling, internal) stay
//! [`AwsError`]s.

use crate::aws::query::{error_answer, QueryError};
use crate::aws::AwsError;
use axum::http::StatusCode;
use axum::response::Response;
use sluice_services::ServiceError;

/// An SNS error, answered with SNS's code and status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnsError {
    /// A parameter is missing, malformed or not acceptable (400).
    InvalidParameter(String),
    /// The topic or subscription does not exist in the caller's account (404).
    NotFound(String),
    /// `TagResource` and friends: the resource does not exist (404).
    ResourceNotFound(String),
    /// The key lacks the scope the action needs (403).
    AuthorizationError(String),
    /// The tenant owns as many topics as its quota allows (403).
    TopicLimitExceeded(String),
    /// The topic has as many subscriptions as allowed (403).
    SubscriptionLimitExceeded(String),
    /// A batch without entries (400).
    EmptyBatchRequest,
    /// A batch of more than ten entries (400).
    TooManyEntriesInBatchRequest(usize),
    /// Two entries of a batch share an id (400).
    BatchEntryIdsNotDistinct(String),
    /// An entry id that is not 1-80 of letters, digits, `-` and `_` (400).
    InvalidBatchEntryId(String),
    /// The batch's messages together are larger than one message may be (400).
    BatchRequestTooLong {
        /// Their size, body and attributes counted as for one message.
        size: usize,
        /// The most one message (and so one batch) may be.
        limit: u32,
    },
    /// An error every AWS service answers alike.
    Aws(AwsError),
}

impl SnsError {
    /// `InvalidParameter` for `parameter`, with AWS's wording.
    pub fn invalid(parameter: &str, reason: impl std::fmt::Display) -> Self {
        Self::InvalidParameter(format!("Invalid parameter: {parameter} Reason: {reason}"))
    }

    /// Status, code, whether the sender is at fault, and the message.
    pub fn classify(&self) -> (StatusCode, &'static str, bool, String) {
        let sender = |status, code, message: &String| (status, code, true, message.clone());
        match self {
            Self::InvalidParameter(m) => sender(StatusCode::BAD_REQUEST, "InvalidParameter", m),
            Self::NotFound(m) => sender(StatusCode::NOT_FOUND, "NotFound", m),
            Self::ResourceNotFound(m) => sender(StatusCode::NOT_FOUND, "ResourceNotFound", m),
            Self::AuthorizationError(m) => sender(StatusCode::FORBIDDEN, "AuthorizationError", m),
            Self::TopicLimitExceeded(m) => sender(StatusCode::FORBIDDEN, "TopicLimitExceeded", m),
            Self::SubscriptionLimitExceeded(m) => {
                sender(StatusCode::FORBIDDEN, "SubscriptionLimitExceeded", m)
            }
            Self::EmptyBatchRequest => sender(
                StatusCode::BAD_REQUEST,
                "EmptyBatchRequest",
                &"The batch request doesn't contain any entries.".to_owned(),
            ),
            Self::TooManyEntriesInBatchRequest(n) => sender(
                StatusCode::BAD_REQUEST,
                "TooManyEntriesInBatchRequest",
                &format!("The batch request contains {n} entries; the most is 10."),
            ),
            Self::BatchEntryIdsNotDistinct(id) => sender(
                StatusCode::BAD_REQUEST,
                "BatchEntryIdsNotDistinct",
                &format!("Two or more batch entries in the request have the same Id {id:?}."),
            ),
            Self::InvalidBatchEntryId(id) => sender(
                StatusCode::BAD_REQUEST,
                "InvalidBatchEntryId",
                &format!(
                    "The Id {id:?} of a batch entry is not 1-80 letters, digits, '-' and '_'."
                ),
            ),
            Self::BatchRequestTooLong { size, limit } => sender(
                StatusCode::BAD_REQUEST,
                "BatchRequestTooLong",
                &format!(
                    "The length of all the messages put together is {size} bytes, more than the limit of {limit} bytes."
                ),
            ),
            Self::Aws(error) => error.classify(),
        }
    }

    /// The Query protocol's XML error answer.
    pub fn response(&self) -> Response {
        let (status, code, sender, message) = self.classify();
        error_answer("sns", status, code, sender, &message)
    }

    /// A service error of `Subscribe`: its quota is the topic's subscriptions.
    pub fn of_subscribe(error: ServiceError) -> Self {
        match error {
            ServiceError::QuotaExceeded(m) => Self::SubscriptionLimitExceeded(m),
            ServiceError::Conflict(_) => Self::invalid(
                "Attributes",
                "Subscription already exists with different attributes",
            ),
            other => other.into(),
        }
    }

    /// A service error of the tagging actions: a missing topic is `ResourceNotFound`.
    pub fn of_tagging(error: ServiceError) -> Self {
        match error {
            ServiceError::TopicNotFound => Self::ResourceNotFound("Resource does not exist".into()),
            other => other.into(),
        }
    }
}

impl From<AwsError> for SnsError {
    fn from(error: AwsError) -> Self {
        Self::Aws(error)
    }
}

impl From<QueryError> for SnsError {
    fn from(error: QueryError) -> Self {
        match &error {
            QueryError::Missing(name) => Self::invalid(name, "The parameter is required."),
            QueryError::Invalid { name, reason } => Self::invalid(name, reason),
        }
    }
}

impl From<ServiceError> for SnsError {
    fn from(error: ServiceError) -> Self {
        use ServiceError as S;
        match error {
            S::Validation { field, message } => Self::invalid(&parameter_name(&field), message),
            S::TopicNotFound => Self::NotFound("Topic does not exist".into()),
            S::SubscriptionNotFound => Self::NotFound("Subscription does not exist".into()),
            S::QueueNotFound => {
                Self::NotFound("Endpoint: the queue does not exist in this account".into())
            }
            S::PayloadTooLarge(m) => Self::invalid("Message", format!("Message too long: {m}")),
            S::QuotaExceeded(m) => Self::TopicLimitExceeded(m),
            S::Conflict(m) => Self::InvalidParameter(m),
            other => Self::Aws(other.into()),
        }
    }
}

/// SNS's name of a field the services named in their REST terms (`body`, `group_id`,
/// `entries[2].subject`, …).
fn parameter_name(field: &str) -> String {
    if let Some(rest) = field.strip_prefix("entries[") {
        if let Some((index, inner)) = rest.split_once("].") {
            let n = index.parse::<usize>().map_or(0, |i| i + 1);
            return format!(
                "PublishBatchRequestEntries.member.{n}.{}",
                parameter_name(inner)
            );
        }
    }
    let head = field.split(['.', '[']).next().unwrap_or(field);
    let name = match head {
        "topic" => "Name",
        "body" => "Message",
        "subject" => "Subject",
        "group_id" => "MessageGroupId",
        "deduplication_id" => "MessageDeduplicationId",
        "attributes" => "MessageAttributes",
        "filter_policy" => "FilterPolicy",
        "filter_policy_scope" => "FilterPolicyScope",
        "raw_delivery" => "RawMessageDelivery",
        "dead_letter_queue" => "RedrivePolicy",
        "queue" => "Endpoint",
        "tags" => "Tags",
        "content_based_deduplication" => "ContentBasedDeduplication",
        "next_token" => "NextToken",
        other => other,
    };
    match field.strip_prefix(head) {
        Some(rest) if head == "attributes" && !rest.is_empty() => format!("{name}{rest}"),
        _ => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_fields_are_named_as_sns_names_them() {
        assert_eq!(parameter_name("body"), "Message");
        assert_eq!(parameter_name("filter_policy"), "FilterPolicy");
        assert_eq!(
            parameter_name("attributes.color"),
            "MessageAttributes.color"
        );
        assert_eq!(
            parameter_name("entries[1].group_id"),
            "PublishBatchRequestEntries.member.2.MessageGroupId"
        );
    }

    #[test]
    fn codes_and_statuses_follow_the_sns_model() {
        let cases = [
            (SnsError::from(ServiceError::TopicNotFound), 404, "NotFound"),
            (
                SnsError::from(ServiceError::invalid("filter_policy", "bad")),
                400,
                "InvalidParameter",
            ),
            (
                SnsError::of_subscribe(ServiceError::QuotaExceeded("x".into())),
                403,
                "SubscriptionLimitExceeded",
            ),
            (
                SnsError::from(ServiceError::QuotaExceeded("x".into())),
                403,
                "TopicLimitExceeded",
            ),
            (
                SnsError::of_tagging(ServiceError::TopicNotFound),
                404,
                "ResourceNotFound",
            ),
            (SnsError::EmptyBatchRequest, 400, "EmptyBatchRequest"),
        ];
        for (error, status, code) in cases {
            let (s, c, sender, _) = error.classify();
            assert_eq!((s.as_u16(), c, sender), (status, code, true), "{error:?}");
        }
    }
}
