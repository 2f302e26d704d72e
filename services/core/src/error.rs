//! The services' error type: a short list of kinds, each of which the gateway maps to exactly
//! one status and public code.

use sluice_engine::{EngineError, HandleError, SendRejection};
use thiserror::Error;

/// Why a service call failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ServiceError {
    /// A value is out of range or malformed; `field` names it as the caller wrote it.
    #[error("{field}: {message}")]
    Validation {
        /// The offending field (a JSON path such as `entries[2].body`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The queue does not exist (or is another tenant's).
    #[error("queue not found")]
    QueueNotFound,
    /// The topic does not exist (or is another tenant's).
    #[error("topic not found")]
    TopicNotFound,
    /// No subscription of the tenant has that id.
    #[error("subscription not found")]
    SubscriptionNotFound,
    /// The tenant does not exist.
    #[error("tenant not found")]
    TenantNotFound,
    /// The tenant holds no access key with that id.
    #[error("access key not found")]
    AccessKeyNotFound,
    /// No redrive task of the tenant has that id.
    #[error("redrive task not found")]
    TaskNotFound,
    /// The request conflicts with the current state.
    #[error("{0}")]
    Conflict(String),
    /// A message is larger than its queue accepts.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The queue is at its `max_depth`.
    #[error("queue is full: it holds max_depth messages")]
    QueueFull,
    /// A tenant quota would be exceeded.
    #[error("{0}")]
    QuotaExceeded(String),
    /// The tenant sent more requests than its `requests_per_second` and `burst` allow.
    #[error("rate limited: this tenant's requests_per_second is exhausted; retry in {retry_after_seconds} s")]
    RateLimited {
        /// Whole seconds until a request would be admitted (at least 1).
        retry_after_seconds: u64,
    },
    /// The tenant was deleted after the caller's token was issued (or while the request ran):
    /// the token no longer names it.
    #[error("{0}")]
    TenantDeleted(String),
    /// The receipt handle is not one of this queue's.
    #[error("receipt handle is not valid for this queue")]
    ReceiptHandleInvalid,
    /// The message was delivered again (or deleted) since the handle was issued.
    #[error("receipt handle is stale: the message was delivered again or deleted")]
    ReceiptHandleStale,
    /// The gateway is at one of its overload bounds (requests in flight, long polls waiting):
    /// refused at once rather than queued; retrying shortly, or elsewhere, may succeed.
    #[error("{0}")]
    Overloaded(String),
    /// The store is unreachable for now.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// An unexpected failure.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ServiceError {
    /// A validation error naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Validation {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<EngineError> for ServiceError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::QueueNotFound => Self::QueueNotFound,
            EngineError::TenantNotFound => Self::TenantNotFound,
            EngineError::AlreadyExists(what) => Self::Conflict(format!("{what} already exists")),
            EngineError::QuotaExceeded { tenant, max_queues } => Self::QuotaExceeded(format!(
                "tenant {tenant} may own at most {max_queues} queues"
            )),
            EngineError::TenantDeleted { deleted_at } => Self::TenantDeleted(format!(
                "the tenant was deleted at {}; tokens issued before then (or without an iat \
                 claim) no longer name it",
                chrono::DateTime::from_timestamp_millis(deleted_at as i64)
                    .unwrap_or_default()
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            )),
            EngineError::Unavailable(why) => Self::Unavailable(why),
            EngineError::Internal(why) => Self::Internal(why),
        }
    }
}

impl From<HandleError> for ServiceError {
    fn from(error: HandleError) -> Self {
        match error {
            HandleError::Invalid => Self::ReceiptHandleInvalid,
            HandleError::Stale => Self::ReceiptHandleStale,
        }
    }
}

impl From<SendRejection> for ServiceError {
    fn from(error: SendRejection) -> Self {
        match error {
            SendRejection::QueueFull => Self::QueueFull,
        }
    }
}
