//! Request extractors whose failures answer in our error shape: JSON bodies (media type, size
//! limit enforced before buffering, bytes charged to the gateway's body budget, malformed
//! versus invalid, duplicate keys refused at every depth — `strict`, which the AWS endpoint's
//! JSON protocol shares), path and query parameters.

use crate::body_budget::read_body;
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

/// How much larger than a message its JSON may be: `"`, `\\`, tab and newline take two bytes
/// escaped, and clients that escape all non-ASCII text (`\u00e9`, surrogate pairs) write up to
/// three bytes per byte of UTF-8. A body that fits `max_message_bytes` always fits its limit.
const JSON_ESCAPING: usize = 3;

/// The most a request may take to carry one of the largest messages, escaped.
pub fn message_request_limit(state: &AppState) -> usize {
    JSON_ESCAPING * state.services.limits().max_message_bytes as usize + SLACK
}

/// Bodies of single sends and publishes: the largest message, escaped, plus 64 KiB for the
/// rest of the JSON and the attributes.
pub struct SendLimit;
impl BodyLimit for SendLimit {
    fn limit(state: &AppState) -> usize {
        message_request_limit(state)
    }
}

/// Bodies of send and publish batches: ten of the largest messages, escaped, plus 64 KiB.
pub struct BatchLimit;
impl BodyLimit for BatchLimit {
    fn limit(state: &AppState) -> usize {
        10 * JSON_ESCAPING * state.services.limits().max_message_bytes as usize + SLACK
    }
}

/// Subscriptions: a filter policy may be up to 256 KiB, plus 64 KiB for the rest.
pub struct PolicyLimit;
impl BodyLimit for PolicyLimit {
    fn limit(_: &AppState) -> usize {
        256 * 1024 + SLACK
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
        let (parts, body) = request.into_parts();
        let headers = &parts.headers;
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let is_json = content_type.as_deref().is_some_and(|ct| {
            let essence = ct.split(';').next().unwrap_or("").trim();
            essence.eq_ignore_ascii_case("application/json")
        });
        let bytes = read_body(headers, &parts.extensions, body, limit, &state.body_budget).await?;
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

/// Syntax errors are `MalformedRequest`; well-formed JSON of the wrong shape, or with a key
/// repeated in one object, is a `ValidationError` naming the field by its path.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Parsing to a value first tells malformed JSON from JSON of the wrong shape even where
    // serde would stop at a type error before reaching the syntax error.
    let value = strict::from_slice(bytes).map_err(|error| match error {
        strict::Error::Duplicate(path) => ApiError::Service(
            sluice_services::ServiceError::invalid(path, "this key appears twice in its object"),
        ),
        strict::Error::Syntax(e) => ApiError::Malformed(format!("the body is not valid JSON: {e}")),
    })?;
    if !value.is_object() {
        return Err(ApiError::Service(sluice_services::ServiceError::invalid(
            "body",
            "must be a JSON object",
        )));
    }
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        validation_error(&path, &error.into_inner().to_string(), "body")
    })
}

/// Builds a validation error whose field is the JSON path, completed with the field serde
/// names in "unknown field `x`", "missing field `x`" or "duplicate field `x`"; `whole` names
/// the input when neither says more.
fn validation_error(path: &str, message: &str, whole: &str) -> ApiError {
    let message = message
        .split(" at line ")
        .next()
        .unwrap_or(message)
        .to_owned();
    let named = ["unknown field `", "missing field `", "duplicate field `"]
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
        ("", None) => whole.to_owned(),
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
                validation_error(&path, &error.into_inner().to_string(), "query")
            })
    }
}

/// Reading JSON into a [`serde_json::Value`] while refusing a key repeated within one object.
/// `serde_json` keeps the last of repeated keys silently, so `{"body": "a", "body": "b"}` or two
/// `attributes` of one name would be read as whatever the last one says, while another parser
/// in front of us (a proxy, a signature check, an audit log) may have read the first.
pub(crate) mod strict {
    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Number, Value};
    use std::cell::RefCell;
    use std::fmt;

    /// Why the bytes could not be read.
    pub(crate) enum Error {
        /// Not JSON.
        Syntax(serde_json::Error),
        /// A key appears twice in one object; the path to it, as `entries[0].attributes.a`.
        Duplicate(String),
    }

    enum Segment {
        Key(String),
        Index(usize),
    }

    /// Parses `bytes` as one JSON value, refusing duplicate keys at any depth.
    pub(crate) fn from_slice(bytes: &[u8]) -> Result<Value, Error> {
        // On a duplicate the innermost visitor records the key and each enclosing one adds its
        // own key or index while the error unwinds: the happy path builds no path at all.
        let duplicate = RefCell::new(None);
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let parsed = Strict(&duplicate)
            .deserialize(&mut deserializer)
            .and_then(|value| deserializer.end().map(|()| value));
        match (parsed, duplicate.into_inner()) {
            (Ok(value), _) => Ok(value),
            (Err(_), Some(mut segments)) => {
                segments.reverse();
                Err(Error::Duplicate(render(&segments)))
            }
            (Err(e), None) => Err(Error::Syntax(e)),
        }
    }

    fn render(segments: &[Segment]) -> String {
        let mut path = String::new();
        for segment in segments {
            match segment {
                Segment::Key(key) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                Segment::Index(index) => path.push_str(&format!("[{index}]")),
            }
        }
        path
    }

    /// The innermost segment first; `None` until a duplicate is found.
    type Found = RefCell<Option<Vec<Segment>>>;

    struct Strict<'a>(&'a Found);

    impl Strict<'_> {
        fn unwinding(&self, segment: Segment) {
            if let Some(segments) = self.0.borrow_mut().as_mut() {
                segments.push(segment);
            }
        }
    }

    impl<'de> DeserializeSeed<'de> for Strict<'_> {
        type Value = Value;

        fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
            deserializer.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Strict<'_> {
        type Value = Value;

        fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
            formatter.write_str("any JSON value")
        }

        fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
            Ok(Value::Bool(value))
        }

        fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
            Ok(Value::Number(value.into()))
        }

        fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
            Ok(Value::Number(value.into()))
        }

        fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
            Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
        }

        fn visit_str<E>(self, value: &str) -> Result<Value, E> {
            Ok(Value::String(value.to_owned()))
        }

        fn visit_string<E>(self, value: String) -> Result<Value, E> {
            Ok(Value::String(value))
        }

        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }

        fn visit_none<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }

        fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
            self.deserialize(deserializer)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
            loop {
                match seq.next_element_seed(Strict(self.0)) {
                    Ok(Some(item)) => items.push(item),
                    Ok(None) => return Ok(Value::Array(items)),
                    Err(e) => {
                        self.unwinding(Segment::Index(items.len()));
                        return Err(e);
                    }
                }
            }
        }

        fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
            let mut map = Map::new();
            while let Some(key) = access.next_key::<String>()? {
                if map.contains_key(&key) {
                    *self.0.borrow_mut() = Some(vec![Segment::Key(key)]);
                    return Err(de::Error::custom("duplicate key"));
                }
                match access.next_value_seed(Strict(self.0)) {
                    Ok(value) => {
                        map.insert(key, value);
                    }
                    Err(e) => {
                        self.unwinding(Segment::Key(key));
                        return Err(e);
                    }
                }
            }
            Ok(Value::Object(map))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn duplicate(text: &str) -> Option<String> {
            match from_slice(text.as_bytes()) {
                Err(Error::Duplicate(path)) => Some(path),
                Err(Error::Syntax(e)) => panic!("{text}: {e}"),
                Ok(_) => None,
            }
        }

        #[test]
        fn duplicates_are_found_at_any_depth_and_named_by_path() {
            assert_eq!(duplicate(r#"{"a": 1, "a": 2}"#).as_deref(), Some("a"));
            assert_eq!(
                duplicate(r#"{"entries": [{"id": "x"}, {"id": "y", "body": "", "id": "z"}]}"#)
                    .as_deref(),
                Some("entries[1].id")
            );
            assert_eq!(
                duplicate(r#"{"attributes": {"k": {"type": "String", "value": "v"}, "k": {}}}"#)
                    .as_deref(),
                Some("attributes.k")
            );
            assert_eq!(
                duplicate(r#"[[{"x": 1, "x": 1}]]"#).as_deref(),
                Some("[0][0].x")
            );
            // The same key in sibling objects is no duplicate; escapes are decoded first.
            assert_eq!(duplicate(r#"{"a": {"k": 1}, "b": {"k": 1}}"#), None);
            assert_eq!(duplicate(r#"{"k": 1, "\u006b": 2}"#).as_deref(), Some("k"));
        }

        #[test]
        fn values_read_as_serde_json_reads_them() {
            let text = r#"{"s": "x\n", "n": -1, "u": 18446744073709551615, "f": 1.5, "b": true,
                "z": null, "a": [1, {"k": []}], "o": {}}"#;
            let strict = match from_slice(text.as_bytes()) {
                Ok(value) => value,
                Err(_) => panic!("valid JSON"),
            };
            let plain: Value = serde_json::from_str(text).unwrap();
            assert_eq!(strict, plain);
            for bad in ["", "{", r#"{"a": 1} x"#, "[1,]", "1e999"] {
                assert!(
                    matches!(from_slice(bad.as_bytes()), Err(Error::Syntax(_))),
                    "{bad}"
                );
            }
        }
    }
}
