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
    /// `Unauthenticated`, `Forbidden`, `QueueNotFound`, `TenantNotFound`, `NotFound`,
    /// `MethodNotAllowed`, `Conflict`, `PayloadTooLarge`, `UnsupportedMediaType`, `QueueFull`,
    /// `QuotaExceeded`, `ReceiptHandleInvalid`, `ReceiptHandleStale`, `Unavailable` or
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
                S::Conflict(_) => (StatusCode::CONFLICT, "Conflict", false),
                S::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "PayloadTooLarge", false),
                S::QueueFull => (StatusCode::TOO_MANY_REQUESTS, "QueueFull", true),
                S::QuotaExceeded(_) => (StatusCode::TOO_MANY_REQUESTS, "QuotaExceeded", true),
                S::ReceiptHandleInvalid => (StatusCode::BAD_REQUEST, "ReceiptHandleInvalid", false),
                S::ReceiptHandleStale => (StatusCode::GONE, "ReceiptHandleStale", false),
                S::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "Unavailable", true),
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
}

/// The id of the request being served, or a fresh one outside a request.
pub fn current_request_id() -> String {
    REQUEST_ID
        .try_with(Clone::clone)
        .unwrap_or_else(|_| uuid::Uuid::new_v4().to_string())
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, retry) = self.classify();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message: self.to_string(),
                request_id: current_request_id(),
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        if retry {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
