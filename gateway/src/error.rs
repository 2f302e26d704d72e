//! The gateway's one error type and the one table that maps every error to a status, a public
//! code and the JSON error shape of the REST contract. Also owns the request id each error
//! echoes.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use sluice_services::ServiceError;
use thiserror::Error;
use utoipa::ToSchema;

tokio::task_local! {
    /// The id of the request being served; set by the request-id middleware.
    pub static REQUEST_ID: String;
}

/// Everything a request can fail with.
#[derive(Debug, Error)]
pub enum ApiError {
    /// From the services.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// No usable token.
    #[error("{0}")]
    Unauthenticated(String),
    /// A valid token without the scope this endpoint needs.
    #[error("{0}")]
    Forbidden(String),
    /// The body is not JSON (or not the JSON we can read).
    #[error("{0}")]
    Malformed(String),
    /// The body is not `application/json`.
    #[error("the request body must be application/json")]
    UnsupportedMediaType,
    /// The body is larger than this endpoint reads.
    #[error("the request body is larger than {0} bytes")]
    BodyTooLarge(usize),
    /// The body did not arrive within the body timeout (seconds); the connection closes.
    #[error("the request body did not arrive within {0} seconds")]
    BodyTimeout(u64),
    /// No such route.
    #[error("no such route: {0}")]
    NoRoute(String),
    /// The route exists, the method does not.
    #[error("method not allowed on this route")]
    MethodNotAllowed,
}

/// The JSON shape of every error answer: branch on `error.code`, which is stable; quote
/// `error.request_id` when reporting a problem.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The error's code, message and the request id.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable machine-readable code: `ValidationError`, `MalformedRequest`,
    /// `Unauthenticated`, `Forbidden`, `QueueNotFound`, `TenantNotFound`, `TaskNotFound`,
    /// `TopicNotFound`, `SubscriptionNotFound`, `AccessKeyNotFound`, `NotFound`,
    /// `MethodNotAllowed`, `Conflict`, `PayloadTooLarge`, `UnsupportedMediaType`, `QueueFull`,
    /// `QuotaExceeded`, `RateLimited`, `ReceiptHandleInvalid`, `ReceiptHandleStale`, `Unavailable` or
    /// `Internal`.
    pub code: String,
    /// A human message; for validation errors it names the field.
    pub message: String,
    /// Equals the response's `x-request-id` header.
    pub request_id: String,
}

impl ApiError {
    /// The status, the public code and whether clients should back off (`Retry-After`).
    pub fn classify(&self) -> (StatusCode, &'static str, bool) {
        use ServiceError as S;
        match self {
            ApiError::Service(error) => match error {
                S::Validation { .. } => (StatusCode::BAD_REQUEST, "ValidationError", false),
                S::QueueNotFound => (StatusCode::NOT_FOUND, "QueueNotFound", false),
                S::TenantNotFound => (StatusCode::NOT_FOUND, "TenantNotFound", false),
                S::TaskNotFound => (StatusCode::NOT_FOUND, "TaskNotFound", false),
                S::AccessKeyNotFound => (StatusCode::NOT_FOUND, "AccessKeyNotFound", false),
                S::TopicNotFound => (StatusCode::NOT_FOUND, "TopicNotFound", false),
                S::SubscriptionNotFound => (StatusCode::NOT_FOUND, "SubscriptionNotFound", false),
                S::Conflict(_) => (StatusCode::CONFLICT, "Conflict", false),
                S::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "PayloadTooLarge", false),
                S::QueueFull => (StatusCode::TOO_MANY_REQUESTS, "QueueFull", true),
                S::QuotaExceeded(_) => (StatusCode::TOO_MANY_REQUESTS, "QuotaExceeded", true),
                S::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "RateLimited", true),
                S::TenantDeleted(_) => (StatusCode::UNAUTHORIZED, "Unauthenticated", false),
                S::ReceiptHandleInvalid => (StatusCode::BAD_REQUEST, "ReceiptHandleInvalid", false),
                S::ReceiptHandleStale => (StatusCode::GONE, "ReceiptHandleStale", false),
                S::Unavailable(_) | S::Overloaded(_) => {
                    (StatusCode::SERVICE_UNAVAILABLE, "Unavailable", true)
                }
                S::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "Internal", false),
            },
            ApiError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "Unauthenticated", false),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden", false),
            ApiError::Malformed(_) => (StatusCode::BAD_REQUEST, "MalformedRequest", false),
            ApiError::UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                false,
            ),
            ApiError::BodyTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "PayloadTooLarge", false),
            ApiError::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "RequestTimeout", false),
            ApiError::NoRoute(_) => (StatusCode::NOT_FOUND, "NotFound", false),
            ApiError::MethodNotAllowed => {
                (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", false)
            }
        }
    }

    /// The public code alone (used in batch failures).
    pub fn code(&self) -> &'static str {
        self.classify().1
    }

    /// The message the client sees. An internal error's text (store paths, addresses, engine
    /// details) is for operators, not callers: they get a generic message and the request id,
    /// and [`ApiError::log`] writes the cause under the same id.
    pub fn public_message(&self) -> String {
        match self {
            ApiError::Service(ServiceError::Internal(_)) => INTERNAL_MESSAGE.to_owned(),
            other => other.to_string(),
        }
    }

    /// Logs a server-side failure (5xx) with the request id, so an operator can find the cause
    /// of the answer a caller reports.
    pub fn log(&self, request_id: &str) {
        // Refusals under overload are counted (`sluice_overload_rejections_total`), not logged
        // one by one: a flood must not become a flood of log lines too.
        let overload = matches!(self, ApiError::Service(ServiceError::Overloaded(_)));
        if self.classify().0.is_server_error() && !overload {
            tracing::error!(request_id, error = %self, "request failed");
        }
    }
}

impl From<crate::body_budget::BodyError> for ApiError {
    fn from(error: crate::body_budget::BodyError) -> Self {
        use crate::body_budget::BodyError as B;
        match error {
            B::TooLarge(limit) => ApiError::BodyTooLarge(limit),
            B::TimedOut(seconds) => ApiError::BodyTimeout(seconds),
            // Counted as an overload refusal, answered 503 with `Retry-After`.
            error @ B::Busy => ApiError::Service(ServiceError::Overloaded(error.to_string())),
        }
    }
}

/// What a 500 answer says instead of the internal error's text.
const INTERNAL_MESSAGE: &str = "internal error; the server logged its cause under this request_id";

/// The id of the request being served, or a fresh one outside a request.
pub fn current_request_id() -> String {
    REQUEST_ID
        .try_with(Clone::clone)
        .unwrap_or_else(|_| uuid::Uuid::new_v4().to_string())
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, retry) = self.classify();
        let request_id = current_request_id();
        self.log(&request_id);
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message: self.public_message(),
                request_id,
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        if retry {
            let seconds = match &self {
                ApiError::Service(ServiceError::RateLimited {
                    retry_after_seconds,
                }) => (*retry_after_seconds).max(1),
                _ => 1,
            };
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still be on its way: the connection cannot be reused.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// Collects what the fmt subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    async fn render(error: ApiError, request_id: &str) -> (StatusCode, serde_json::Value, String) {
        let logs = Captured::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let response = tracing::subscriber::with_default(subscriber, || {
            REQUEST_ID.sync_scope(request_id.to_owned(), || error.into_response())
        });
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        (status, serde_json::from_slice(&bytes).unwrap(), logged)
    }

    #[tokio::test]
    async fn a_500_answers_a_generic_message_and_logs_the_cause_with_the_request_id() {
        let cause = "redb: /var/lib/sluice/data/store.redb: Input/output error (os error 5)";
        let (status, body, logged) = render(
            ApiError::Service(ServiceError::Internal(cause.into())),
            "req-500",
        )
        .await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["error"]["code"], "Internal");
        assert_eq!(body["error"]["request_id"], "req-500");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(!message.contains("redb"), "{message}");
        assert!(!message.contains("/var/lib"), "{message}");
        assert_eq!(message, INTERNAL_MESSAGE);
        assert!(logged.contains(cause), "{logged}");
        assert!(logged.contains("req-500"), "{logged}");
    }

    #[tokio::test]
    async fn client_errors_keep_their_message_and_are_not_logged() {
        let (status, body, logged) = render(
            ApiError::Service(ServiceError::invalid("limit", "must be between 1 and 1000")),
            "req-400",
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            body["error"]["message"],
            "limit: must be between 1 and 1000"
        );
        assert!(logged.is_empty(), "{logged}");
    }
}
