//! AWS Signature Version 4, header form: parsing `Authorization: AWS4-HMAC-SHA256 …` and
//! verifying it against an access key's secret. The one SigV4 module every AWS-compatible
//! service of the gateway shares.
//!
//! The canonical request follows AWS's rules for every service but S3: the path has its dot
//! segments removed and is URI-encoded again (so `%20` signs as `%2520`), query parameters are
//! decoded, re-encoded with only the unreserved characters left bare and sorted, each signed
//! header's values are trimmed, inner runs of spaces collapsed and joined with `,`, and the
//! payload hash is the SHA-256 of the body (an `x-amz-content-sha256` header is signed as
//! sent, and must be the body's hash). Time: `x-amz-date` (or `Date`) within
//! [`MAX_SKEW_MS`] of now, and the credential scope's date is that day. The signature is
//! compared in constant time.

use super::AwsError;
use axum::http::{HeaderMap, Method, Uri};

impl<'a> Request<'a> {
    /// The parts of a request as received.
    pub fn new(method: &'a Method, uri: &'a Uri, headers: &'a HeaderMap, body: &'a [u8]) -> Self {
        Request {
            method,
            path: uri.path(),
            query: uri.query().unwrap_or_default(),
            authority: uri.authority().map(|a| a.as_str()),
            headers,
            body,
        }
    }
}
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// The one algorithm accepted.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// How far a request's time may be from the server's, either way: AWS's 15 minutes.
pub const MAX_SKEW_MS: u64 = 15 * 60 * 1000;

/// A parsed `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// The access key id of the credential.
    pub access_key_id: String,
    /// The credential scope's date, `YYYYMMDD`.
    pub date: String,
    /// The credential scope's region.
    pub region: String,
    /// The credential scope's service (`sts`, `sqs`, `sns`).
    pub service: String,
    /// The signed header names, `;`-separated and lower-case, as the client sent them.
    pub signed_headers: String,
    /// The signature, lower-case hex.
    pub signature: String,
}

/// Whether the request carries a SigV4 `Authorization` header (of any shape).
pub fn is_sigv4(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("AWS4-"))
}

fn incomplete(message: impl Into<String>) -> AwsError {
    AwsError::IncompleteSignature(message.into())
}

/// Parses the `Authorization` header: `MissingAuthenticationToken` without one,
/// `IncompleteSignature` when it is not a complete `AWS4-HMAC-SHA256` header or does not sign
/// `host`.
pub fn parse_authorization(headers: &HeaderMap) -> Result<Authorization, AwsError> {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Err(AwsError::MissingAuthenticationToken);
    };
    let value = value
        .to_str()
        .map_err(|_| incomplete("the Authorization header is not ASCII"))?
        .trim();
    let Some(rest) = value.strip_prefix(ALGORITHM) else {
        return Err(incomplete(format!(
            "Unsupported AWS 'algorithm': the Authorization header must start with {ALGORITHM}"
        )));
    };
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let Some((name, value)) = part.trim().split_once('=') else {
            return Err(incomplete(format!(
                "Authorization header requires each component as key=value, got {:?}",
                part.trim()
            )));
        };
        match name.trim() {
            "Credential" => credential = Some(value.trim()),
            "SignedHeaders" => signed_headers = Some(value.trim()),
            "Signature" => signature = Some(value.trim()),
            _ => {}
        }
    }
    let missing = |name: &str| {
        incomplete(format!(
            "Authorization header requires '{name}' parameter. Authorization={value}"
        ))
    };
    let credential = credential.ok_or_else(|| missing("Credential"))?;
    let signed_headers = signed_headers.ok_or_else(|| missing("SignedHeaders"))?;
    let signature = signature.ok_or_else(|| missing("Signature"))?;
    let parts: Vec<&str> = credential.split('/').collect();
    let [access_key_id, date, region, service, terminator] = parts[..] else {
        return Err(incomplete(format!(
            "Credential must have exactly 5 slash-delimited elements, e.g. \
             keyid/date/region/service/term, got '{credential}'"
        )));
    };
    if access_key_id.is_empty() {
        return Err(incomplete("Credential names no access key id"));
    }
    if terminator != "aws4_request" {
        return Err(AwsError::SignatureDoesNotMatch(format!(
            "Credential should be scoped with a valid terminator: 'aws4_request', not '{terminator}'."
        )));
    }
    if signed_headers.is_empty() {
        return Err(missing("SignedHeaders"));
    }
    // AWS requires the host to be signed: otherwise a captured signature would hold for any
    // host the request is sent to.
    if !signed_headers.split(';').any(|name| name == "host") {
        return Err(incomplete(
            "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.",
        ));
    }
    Ok(Authorization {
        access_key_id: access_key_id.to_owned(),
        date: date.to_owned(),
        region: region.to_owned(),
        service: service.to_owned(),
        signed_headers: signed_headers.to_owned(),
        signature: signature.to_ascii_lowercase(),
    })
}

/// What a verification needs from the request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The method.
    pub method: &'a Method,
    /// The path as received (still percent-encoded).
    pub path: &'a str,
    /// The query as received (still percent-encoded; empty if none).
    pub query: &'a str,
    /// The URI's authority, for a signed `host` the headers lack (HTTP/2).
    pub authority: Option<&'a str>,
    /// Every header.
    pub headers: &'a HeaderMap,
    /// The whole body.
    pub body: &'a [u8],
}

/// Verifies `auth` (already parsed from `request`) with the key's `secret`, for a server in
/// `region` at `now_ms`. Errors are AWS's: `SignatureDoesNotMatch` for a wrong signature, a
/// time outside the skew, a scope of another day or region, or a body whose hash is not the
/// signed one; `IncompleteSignature` when the request has no usable date.
pub fn verify(
    request: Request<'_>,
    auth: &Authorization,
    secret: &str,
    region: &str,
    now_ms: u64,
) -> Result<(), AwsError> {
    let (amz_date, request_ms) = request_time(request.headers)?;
    let server = format_amz_date(now_ms);
    if request_ms + MAX_SKEW_MS < now_ms {
        return Err(AwsError::SignatureDoesNotMatch(format!(
            "Signature expired: {amz_date} is now earlier than {} ({server} - 15 min.)",
            format_amz_date(now_ms - MAX_SKEW_MS)
        )));
    }
    if request_ms > now_ms + MAX_SKEW_MS {
        return Err(AwsError::SignatureDoesNotMatch(format!(
            "Signature not yet current: {amz_date} is still later than {} ({server} + 15 min.)",
            format_amz_date(now_ms + MAX_SKEW_MS)
        )));
    }
    if auth.date != amz_date[..8] {
        return Err(AwsError::SignatureDoesNotMatch(format!(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{}' != '{}', from '{amz_date}'.",
            auth.date,
            &amz_date[..8]
        )));
    }
    if auth.region != region {
        return Err(AwsError::SignatureDoesNotMatch(format!(
            "Credential should be scoped to a valid region, not '{}'. This server's region is '{region}'.",
            auth.region
        )));
    }
    let body_hash = hex::encode(Sha256::digest(request.body));
    let payload_hash = match request.headers.get("x-amz-content-sha256") {
        Some(claimed) => {
            let claimed = claimed.to_str().unwrap_or_default();
            if !claimed.eq_ignore_ascii_case(&body_hash) {
                return Err(AwsError::SignatureDoesNotMatch(
                    "The provided 'x-amz-content-sha256' header does not match what was computed."
                        .into(),
                ));
            }
            claimed.to_owned()
        }
        None => body_hash,
    };
    let canonical = canonical_request(request, &auth.signed_headers, &payload_hash);
    let scope = format!(
        "{}/{}/{}/aws4_request",
        auth.date, auth.region, auth.service
    );
    let string_to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let Ok(provided) = hex::decode(&auth.signature) else {
        return Err(AwsError::signature_mismatch());
    };
    let key = signing_key(secret, &auth.date, &auth.region, &auth.service);
    let mut mac = hmac(&key);
    mac.update(string_to_sign.as_bytes());
    // `verify_slice` compares in constant time.
    mac.verify_slice(&provided)
        .map_err(|_| AwsError::signature_mismatch())
}

fn hmac(key: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length.
    <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!())
}

fn hmac_bytes(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = hmac(key);
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// The key a day's signatures for one region and service are made with.
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> Vec<u8> {
    let k_date = hmac_bytes(format!("AWS4{secret}").as_bytes(), date);
    let k_region = hmac_bytes(&k_date, region);
    let k_service = hmac_bytes(&k_region, service);
    hmac_bytes(&k_service, "aws4_request")
}

/// The request's time as `YYYYMMDD'T'HHMMSS'Z'` and in milliseconds: `x-amz-date`, else
/// `Date` (RFC 1123).
fn request_time(headers: &HeaderMap) -> Result<(String, u64), AwsError> {
    if let Some(value) = headers.get("x-amz-date") {
        let text = value.to_str().unwrap_or_default();
        let parsed = chrono::NaiveDateTime::parse_from_str(text, "%Y%m%dT%H%M%SZ")
            .map_err(|_| incomplete(format!("X-Amz-Date {text:?} is not YYYYMMDD'T'HHMMSS'Z'")))?;
        let ms = u64::try_from(parsed.and_utc().timestamp_millis())
            .map_err(|_| incomplete(format!("X-Amz-Date {text:?} is before 1970")))?;
        return Ok((text.to_owned(), ms));
    }
    if let Some(value) = headers.get(axum::http::header::DATE) {
        let text = value.to_str().unwrap_or_default();
        let parsed = chrono::DateTime::parse_from_rfc2822(text)
            .map_err(|_| incomplete(format!("Date {text:?} is not an RFC 1123 date")))?;
        let ms = u64::try_from(parsed.timestamp_millis())
            .map_err(|_| incomplete(format!("Date {text:?} is before 1970")))?;
        return Ok((format_amz_date(ms), ms));
    }
    Err(incomplete(
        "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
    ))
}

/// Milliseconds as `YYYYMMDD'T'HHMMSS'Z'`.
pub fn format_amz_date(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .format("%Y%m%dT%H%M%SZ")
        .to_string()
}

/// The canonical request AWS signs.
pub fn canonical_request(request: Request<'_>, signed_headers: &str, payload_hash: &str) -> String {
    let mut out = String::new();
    out.push_str(request.method.as_str());
    out.push('\n');
    out.push_str(&encode(&normalize_path(request.path), true));
    out.push('\n');
    out.push_str(&canonical_query(request.query));
    out.push('\n');
    for name in signed_headers.split(';') {
        out.push_str(name);
        out.push(':');
        out.push_str(&header_value(request, name));
        out.push('\n');
    }
    out.push('\n');
    out.push_str(signed_headers);
    out.push('\n');
    out.push_str(payload_hash);
    out
}

/// The signed value of one header: every value trimmed, inner runs of spaces collapsed, joined
/// with `,`. A signed `host` that is not among the headers (HTTP/2) is the URI's authority.
fn header_value(request: Request<'_>, name: &str) -> String {
    let values: Vec<String> = request
        .headers
        .get_all(name)
        .iter()
        .map(|v| collapse_spaces(&String::from_utf8_lossy(v.as_bytes())))
        .collect();
    if values.is_empty() && name == "host" {
        return request.authority.unwrap_or_default().to_owned();
    }
    values.join(",")
}

fn collapse_spaces(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Removes dot segments and empty segments (RFC 3986 5.2.4, as AWS normalises paths).
fn normalize_path(path: &str) -> String {
    if path.is_empty() {
        return "/".to_owned();
    }
    let absolute = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    };
    if !(absolute.contains('.') || absolute.contains("//")) {
        return absolute;
    }
    let mut segments: Vec<&str> = Vec::new();
    for segment in absolute.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            other => segments.push(other),
        }
    }
    let mut result = format!("/{}", segments.join("/"));
    let ends_with_slash = ["/", "/.", "/./", "/..", "/../"]
        .iter()
        .any(|s| absolute.ends_with(s));
    if ends_with_slash && !result.ends_with('/') {
        result.push('/');
    }
    result
}

/// Percent-encodes every byte but the unreserved ones (and `/` when `keep_slash`), upper-case
/// hex, as AWS's `UriEncode`.
fn encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && byte == b'/')
        {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The query's parameters decoded, re-encoded strictly and sorted by name, then value.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (encode(&k, false), encode(&v, false)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests;
