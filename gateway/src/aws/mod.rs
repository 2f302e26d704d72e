//! The AWS-compatible endpoint: `POST /` for requests that carry a SigV4 `Authorization`
//! header, an SQS `X-Amz-Target` or a form body (everything else at `/` answers as before).
//! Each request is authenticated once here ([`sigv4`]: the key's secret, AWS's errors), then
//! dispatched on the credential scope's service to one module per service, whose operations
//! are an enum of AWS-named actions answered from one `match`.
//!
//! Nothing of the body is read before the headers have named a known key: a missing or
//! malformed signature and an unknown key id are answered at once, so an unauthenticated
//! client cannot make the gateway hold its upload. The body is then read up to its action's
//! bound ([`limits`]) within the gateway's body budget (`body_budget.rs`).
//!
//! The service is told apart by `X-Amz-Target` (`AmazonSQS.*`: SQS's JSON protocol), then by
//! the credential scope's service: [`sqs`] (JSON 1.0 and Query), [`sns`] (Query), [`sts`]
//! (`GetCallerIdentity`); every other service answers `InvalidAction` in the Query protocol's
//! XML error shape. [`query`] holds what the Query-protocol services share.
//!
//! A request's key, its tenant's quotas and account id are read from the store once per
//! second at most per gateway (the services' identity cache): deleting a key or a tenant
//! through one gateway refuses its signatures there at once and on every other gateway within
//! one second.

pub mod limits;
pub mod query;
pub mod sigv4;
pub mod sns;
pub mod sqs;
pub mod sts;

use crate::body_budget::BodyError;
use crate::error::{current_request_id, ApiError};
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sluice_services::{AccessKey, ServiceError};

/// An AWS error, named and answered as AWS does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AwsError {
    /// No `Authorization` header (and no presigned query).
    MissingAuthenticationToken,
    /// An `Authorization` header that is not a complete SigV4 one, or no usable date.
    IncompleteSignature(String),
    /// The access key id is not one of ours.
    InvalidClientTokenId,
    /// The signature, its time, its scope or the body's hash is wrong.
    SignatureDoesNotMatch(String),
    /// The key lacks the scope the action needs.
    AccessDenied(String),
    /// No `Action` parameter.
    MissingAction,
    /// The action (or the service) is not served.
    InvalidAction(String),
    /// The body is larger than the action may send (the bound, in bytes).
    RequestEntityTooLarge(usize),
    /// The body did not arrive within the body timeout (seconds).
    RequestTimeout(u64),
    /// The tenant's request rate is exhausted.
    RequestThrottled(String),
    /// The store is unavailable or overloaded.
    ServiceUnavailable(String),
    /// Anything else: the cause is logged under the request id.
    InternalFailure,
}

impl AwsError {
    /// A wrong signature, with AWS's message.
    pub fn signature_mismatch() -> Self {
        Self::SignatureDoesNotMatch(
            "The request signature we calculated does not match the signature you provided. \
             Check your AWS Secret Access Key and signing method. Consult the service \
             documentation for details."
                .into(),
        )
    }

    /// Status, code, whether the sender is at fault, and the message.
    pub fn classify(&self) -> (StatusCode, &'static str, bool, String) {
        match self {
            Self::MissingAuthenticationToken => (
                StatusCode::FORBIDDEN,
                "MissingAuthenticationToken",
                true,
                "Request is missing Authentication Token".into(),
            ),
            Self::IncompleteSignature(m) => (
                StatusCode::BAD_REQUEST,
                "IncompleteSignature",
                true,
                m.clone(),
            ),
            Self::InvalidClientTokenId => (
                StatusCode::FORBIDDEN,
                "InvalidClientTokenId",
                true,
                "The security token included in the request is invalid.".into(),
            ),
            Self::SignatureDoesNotMatch(m) => (
                StatusCode::FORBIDDEN,
                "SignatureDoesNotMatch",
                true,
                m.clone(),
            ),
            Self::AccessDenied(m) => (StatusCode::FORBIDDEN, "AccessDenied", true, m.clone()),
            Self::MissingAction => (
                StatusCode::BAD_REQUEST,
                "MissingAction",
                true,
                "The request must contain the parameter Action.".into(),
            ),
            Self::InvalidAction(m) => (StatusCode::BAD_REQUEST, "InvalidAction", true, m.clone()),
            Self::RequestEntityTooLarge(limit) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                true,
                format!("The request body is larger than this action accepts ({limit} bytes)."),
            ),
            Self::RequestTimeout(seconds) => (
                StatusCode::REQUEST_TIMEOUT,
                "RequestTimeout",
                true,
                format!("The request body did not arrive within {seconds} seconds."),
            ),
            Self::RequestThrottled(m) => {
                (StatusCode::BAD_REQUEST, "RequestThrottled", true, m.clone())
            }
            Self::ServiceUnavailable(m) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                false,
                m.clone(),
            ),
            Self::InternalFailure => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalFailure",
                false,
                "internal error; the server logged its cause under this request id".into(),
            ),
        }
    }

    /// The Query protocol's XML error answer, in the namespace of `service`.
    pub fn query_response(&self, service: &str) -> Response {
        let (status, code, sender, message) = self.classify();
        query::error_answer(service, status, code, sender, &message)
    }
}

impl From<ServiceError> for AwsError {
    fn from(error: ServiceError) -> Self {
        use ServiceError as S;
        match error {
            S::RateLimited {
                retry_after_seconds,
            } => Self::RequestThrottled(format!(
                "Rate exceeded: this tenant's requests_per_second is exhausted; retry in {retry_after_seconds} s"
            )),
            S::Unavailable(m) | S::Overloaded(m) => Self::ServiceUnavailable(m),
            S::TenantDeleted(_) | S::TenantNotFound => Self::InvalidClientTokenId,
            S::Internal(cause) => {
                tracing::error!(request_id = current_request_id(), error = %cause, "AWS request failed");
                Self::InternalFailure
            }
            // The identity slice meets no other service error; each gets its AWS name with
            // the operations that raise it.
            error @ (S::Validation { .. }
            | S::QueueNotFound
            | S::TopicNotFound
            | S::SubscriptionNotFound
            | S::AccessKeyNotFound
            | S::TaskNotFound
            | S::Conflict(_)
            | S::PayloadTooLarge(_)
            | S::QueueFull
            | S::QuotaExceeded(_)
            | S::ReceiptHandleInvalid
            | S::ReceiptHandleStale) => {
                tracing::error!(request_id = current_request_id(), %error, "unmapped service error on the AWS endpoint");
                Self::InternalFailure
            }
        }
    }
}

impl From<BodyError> for AwsError {
    fn from(error: BodyError) -> Self {
        match error {
            BodyError::TooLarge(limit) => Self::RequestEntityTooLarge(limit),
            BodyError::TimedOut(seconds) => Self::RequestTimeout(seconds),
            error @ BodyError::Busy => Self::ServiceUnavailable(error.to_string()),
        }
    }
}

/// The XML namespace of a service's Query answers.
pub fn namespace(service: &str) -> &'static str {
    match service {
        "sqs" => "http://queue.amazonaws.com/doc/2012-11-05/",
        "sns" => "http://sns.amazonaws.com/doc/2010-03-31/",
        _ => "https://sts.amazonaws.com/doc/2011-06-15/",
    }
}

/// An XML answer with AWS's request-id header.
pub fn xml_response(status: StatusCode, body: String, request_id: &str) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/xml"));
    if let Ok(value) = HeaderValue::from_str(request_id) {
        headers.insert("x-amzn-requestid", value);
    }
    response
}

/// Escapes text for XML element content and attributes. A carriage return is written as a
/// character reference, since XML parsers turn a literal one into a line feed and a message
/// body must read back byte-for-byte.
pub fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#xD;"),
            c => out.push(c),
        }
    }
    out
}

/// Who signed a request: the access key (its tenant and scopes) after verification.
#[derive(Debug, Clone)]
pub struct AwsCaller {
    /// The verified key.
    pub key: AccessKey,
    /// The tenant's AWS account id.
    pub account_id: String,
}

fn is_form(request: &Request) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
        })
}

/// `POST /`: an AWS request if it carries SigV4, an SQS `X-Amz-Target` or is a Query-protocol
/// form; otherwise the `NotFound` every unknown route answers. A 503 answer carries
/// `Retry-After`, as REST's do.
pub async fn entry(State(state): State<AppState>, request: Request) -> Response {
    let mut response = serve(&state, request).await;
    if response.status() == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .entry(header::RETRY_AFTER)
            .or_insert(HeaderValue::from_static("1"));
    }
    response
}

/// Everything the headers can decide is decided before a byte of the body is read: whether
/// this is an AWS request, a missing or malformed signature (`MissingAuthenticationToken`,
/// `IncompleteSignature`), a key id that names no key (`InvalidClientTokenId`), and the body's
/// bound ([`limits`]). Only then is the body read (within the gateway's body budget), the
/// signature verified over it, and the request dispatched.
async fn serve(state: &AppState, request: Request) -> Response {
    let sigv4 = sigv4::is_sigv4(request.headers());
    let form = is_form(&request);
    let target = request
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // The action of an SQS JSON request. Without a signature it is still an AWS request: it is
    // answered `MissingAuthenticationToken` below.
    let sqs_json = target
        .as_deref()
        .and_then(|t| t.strip_prefix(sqs::TARGET_PREFIX))
        .map(str::to_owned);
    if !sigv4 && !form && sqs_json.is_none() {
        return ApiError::NoRoute(request.uri().path().to_owned()).into_response();
    }
    let (parts, body) = request.into_parts();
    // Errors before the service is known answer in the protocol the client speaks.
    let fail = |error: AwsError, service: &str| match &sqs_json {
        Some(_) => sqs::codec::error_response(sqs::Protocol::Json, &error.into()),
        None => error.query_response(service),
    };
    let auth = match sigv4::parse_authorization(&parts.headers) {
        Ok(auth) => auth,
        Err(error) => return fail(error, "sts"),
    };
    let service = auth.service.clone();
    let identity = match identify(state, &auth).await {
        Ok(identity) => identity,
        Err(error) => return fail(error, &service),
    };
    let class = match &sqs_json {
        Some(action) => limits::action_class("sqs", action),
        None => limits::service_class(&service),
    };
    let limit = class.bytes(state);
    let body = match crate::body_budget::read_body(
        &parts.headers,
        &parts.extensions,
        body,
        limit,
        &state.body_budget,
    )
    .await
    {
        Ok(body) => axum::body::Bytes::from(body),
        Err(error) => return fail(error.into(), &service),
    };
    let mut params: Vec<(String, String)> =
        form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    if form {
        params.extend(form_urlencoded::parse(&body).into_owned());
    }
    let action = params
        .iter()
        .find(|(k, _)| k == "Action")
        .map(|(_, v)| v.clone());
    let caller = match authenticate(
        state,
        sigv4::Request::new(&parts.method, &parts.uri, &parts.headers, &body),
        &auth,
        identity,
    )
    .await
    {
        Ok(caller) => caller,
        Err(error) => return fail(error, &service),
    };
    // A Query body was read up to its service's largest bound; its action's may be smaller.
    if sqs_json.is_none() {
        let action_limit =
            limits::action_class(&service, action.as_deref().unwrap_or_default()).bytes(state);
        if body.len() > action_limit {
            return fail(AwsError::RequestEntityTooLarge(action_limit), &service);
        }
    }
    let version = params
        .iter()
        .find(|(k, _)| k == "Version")
        .map(|(_, v)| v.clone());
    if let Some(sqs_action) = sqs_json {
        let call = sqs::Call {
            protocol: sqs::Protocol::Json,
            action: Some(sqs_action),
            version,
            body,
            params: query::Params::default(),
            path: parts.uri.path().to_owned(),
        };
        return sqs::handle(state, &caller, call).await;
    }
    match (service.as_str(), action) {
        ("sqs", action) => {
            let call = sqs::Call {
                protocol: sqs::Protocol::Query,
                action,
                version,
                body: axum::body::Bytes::new(),
                params: query::Params::new(params),
                path: parts.uri.path().to_owned(),
            };
            sqs::handle(state, &caller, call).await
        }
        ("sts", Some(action)) => sts::handle(&caller, &action, version.as_deref()),
        ("sts", None) => AwsError::MissingAction.query_response(&service),
        ("sns", _) => sns::handle(state, &caller, &params).await,
        (_, action) => AwsError::InvalidAction(format!(
            "Could not find operation {} for version {}: Sluice does not serve the {service} service",
            action.as_deref().or(target.as_deref()).unwrap_or("(none)"),
            version.as_deref().unwrap_or("(none)")
        ))
        .query_response(&service),
    }
}

/// The key the `Authorization` header names, with its tenant's quotas and account id, from
/// the services' short-lived identity cache ([`sluice_services::AWS_IDENTITY_TTL`]), so a key
/// revoked through another gateway is still found here until its entry expires.
async fn identify(
    state: &AppState,
    auth: &sigv4::Authorization,
) -> Result<sluice_services::AwsIdentity, AwsError> {
    state
        .services
        .aws_identity(&auth.access_key_id)
        .await?
        .ok_or(AwsError::InvalidClientTokenId)
}

/// Verifies the request's signature with its key and admits it against the tenant's rate.
async fn authenticate(
    state: &AppState,
    request: sigv4::Request<'_>,
    auth: &sigv4::Authorization,
    identity: sluice_services::AwsIdentity,
) -> Result<AwsCaller, AwsError> {
    let services = &state.services;
    sigv4::verify(
        request,
        auth,
        &identity.key.secret_access_key,
        services.aws_region(),
        services.clock().now(),
    )?;
    services
        .admit_request(&identity.key.tenant, &identity.quotas)
        .await?;
    Ok(AwsCaller {
        key: identity.key,
        account_id: identity.account_id,
    })
}
