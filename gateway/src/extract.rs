//! Request extractors whose failures answer in our error shape: JSON bodies (media type, size
//! limit enforced before buffering, malformed versus invalid), path and query parameters.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{header, request::Parts};
use serde::de::DeserializeOwned;
use std::marker::PhantomData;

/// How many bytes an endpoint reads at most.
pub trait BodyLimit {
    /// The limit under the server's configuration.
    fn limit(state: &AppState) -> usize;
}

const SLACK: usize = 64 * 1024;

/// Bodies of single sends: the largest message plus 64 KiB for JSON and attributes.
pub struct SendLimit;
impl BodyLimit for SendLimit {
    fn limit(state: &AppState) -> usize {
        state.services.limits().max_message_bytes as usize + SLACK
    }
}

/// Bodies of send batches: ten of the largest messages plus 64 KiB.
pub struct BatchLimit;
impl BodyLimit for BatchLimit {
    fn limit(state: &AppState) -> usize {
        10 * state.services.limits().max_message_bytes as usize + SLACK
    }
}

/// Everything else: configuration, receives, handles.
pub struct SmallLimit;
impl BodyLimit for SmallLimit {
    fn limit(_: &AppState) -> usize {
        SLACK
    }
}

/// A JSON body of type `T`, read up to the limit `L`. An empty body reads as `{}` when
/// `EMPTY_OK` (endpoints whose fields are all optional).
pub struct Json<T, L = SmallLimit, const EMPTY_OK: bool = false>(pub T, pub PhantomData<L>);

impl<T, L, const EMPTY_OK: bool> FromRequest<AppState> for Json<T, L, EMPTY_OK>
where
    T: DeserializeOwned,
    L: BodyLimit,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = L::limit(state);
        let headers = request.headers();
        let declared_length = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared_length.is_some_and(|length| length > limit as u64) {
            return Err(ApiError::BodyTooLarge(limit));
        }
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let is_json = content_type.as_deref().is_some_and(|ct| {
            let essence = ct.split(';').next().unwrap_or("").trim();
            essence.eq_ignore_ascii_case("application/json")
        });
        let bytes = axum::body::to_bytes(request.into_body(), limit)
            .await
            .map_err(|error| match crate::serve::body_timed_out(&error) {
                Some(after) => ApiError::BodyTimeout(after.as_secs()),
                None => ApiError::BodyTooLarge(limit),
            })?;
        if bytes.is_empty() && EMPTY_OK && content_type.is_none() {
            return parse(b"{}").map(|value| Json(value, PhantomData));
        }
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        if EMPTY_OK && (bytes.is_empty() || bytes.trim_ascii() == b"null") {
            return parse(b"{}").map(|value| Json(value, PhantomData));
        }
        parse(&bytes).map(|value| Json(value, PhantomData))
    }
}

/// Syntax errors are `MalformedRequest`; well-formed JSON of the wrong shape is a
/// `ValidationError` naming the field by its path.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Parsing to a value first tells malformed JSON from JSON of the wrong shape even where
    // serde would stop at a type error before reaching the syntax error.
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::Malformed(format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::Service(sluice_services::ServiceError::invalid(
            "body",
            "must be a JSON object",
        )));
    }
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        validation_error(&path, &error.into_inner().to_string())
    })
}

/// Builds a validation error whose field is the JSON path, completed with the field serde
/// names in "unknown field `x`" or "missing field `x`".
fn validation_error(path: &str, message: &str) -> ApiError {
    let message = message
        .split(" at line ")
        .next()
        .unwrap_or(message)
        .to_owned();
    let named = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
        .and_then(|rest| rest.split('`').next());
    let base = if path == "." { "" } else { path };
    let field = match (base, named) {
        (base, Some(name)) if base == name || base.ends_with(&format!(".{name}")) => {
            base.to_owned()
        }
        ("", Some(name)) => name.to_owned(),
        (base, Some(name)) => format!("{base}.{name}"),
        ("", None) => "body".to_owned(),
        (base, None) => base.to_owned(),
    };
    ApiError::Service(sluice_services::ServiceError::invalid(field, message))
}

/// Path parameters; a failure to read them is a malformed request.
pub struct PathParams<T>(pub T);

impl<T, S> FromRequestParts<S> for PathParams<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| PathParams(value))
            .map_err(|rejection| ApiError::Malformed(rejection.body_text()))
    }
}

/// Query parameters; a value of the wrong type is a validation error naming it.
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        let deserializer =
            serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer)
            .map(Query)
            .map_err(|error| {
                let path = error.path().to_string();
                validation_error(&path, &error.into_inner().to_string())
            })
    }
}
