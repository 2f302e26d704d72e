//! The verifier against two oracles: requests signed by AWS's own `aws-sigv4` crate (random
//! keys, bodies, paths, queries and headers, each also tampered with), and the published
//! `aws-sig-v4-test-suite` vectors vendored in `vectors/` (the "normalize" cases).

use super::*;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use axum::http::{HeaderName, HeaderValue};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const REGION: &str = "us-east-1";

/// A signed request as it would arrive.
struct Signed {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Signed {
    fn request(&self) -> Request<'_> {
        Request::new(&self.method, &self.uri, &self.headers, &self.body)
    }

    fn verify(&self, secret: &str, now_ms: u64) -> Result<(), AwsError> {
        let auth = parse_authorization(&self.headers)?;
        verify(self.request(), &auth, secret, REGION, now_ms)
    }
}

fn ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// Signs a request with `aws-sigv4`, as an AWS SDK would.
fn sign_with_sdk(
    method: &str,
    path_and_query: &str,
    extra_headers: &[(String, String)],
    body: &[u8],
    (key_id, secret): (&str, &str),
    service: &str,
    time: SystemTime,
) -> Signed {
    let uri = format!("http://sluice.test:4566{path_and_query}");
    let mut headers = vec![("host".to_owned(), "sluice.test:4566".to_owned())];
    headers.extend(extra_headers.iter().cloned());
    let identity = Credentials::new(key_id, secret, None, None, "test").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(REGION)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
        .into();
    let signable = SignableRequest::new(
        method,
        uri.clone(),
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Bytes(body),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (instructions, _) = sign(signable, &params)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_parts();
    let mut request = http::Request::builder()
        .method(method)
        .uri(&uri)
        .body(())
        .unwrap_or_else(|e| panic!("{e}"));
    for (k, v) in &headers {
        request.headers_mut().append(
            HeaderName::from_bytes(k.as_bytes()).unwrap_or_else(|e| panic!("{e}")),
            HeaderValue::from_str(v).unwrap_or_else(|e| panic!("{e}")),
        );
    }
    instructions.apply_to_request_http1x(&mut request);
    let (parts, ()) = request.into_parts();
    Signed {
        method: parts.method,
        uri: parts.uri,
        headers: parts.headers,
        body: body.to_vec(),
    }
}

fn random_text(rng: &mut impl Rng, max: usize) -> String {
    const CHARS: &[char] = &[
        'a', 'Z', '0', '9', '-', '_', '.', '~', ' ', '/', '+', '=', '&', '%', '?', '#', 'é', 'ሴ',
        '*', '\'', '(', '!', ':', '@', ',', ';',
    ];
    let len = rng.gen_range(0..=max);
    (0..len)
        .map(|_| CHARS[rng.gen_range(0..CHARS.len())])
        .collect()
}

fn random_key(rng: &mut impl Rng) -> (String, String) {
    const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    const ANY: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let id: String = "AKIA"
        .chars()
        .chain((0..16).map(|_| UPPER[rng.gen_range(0..UPPER.len())] as char))
        .collect();
    let secret = (0..40)
        .map(|_| ANY[rng.gen_range(0..ANY.len())] as char)
        .collect();
    (id, secret)
}

/// A random request: path segments and query parameters percent-encoded as a client would,
/// a random body and a few random headers.
fn random_request(rng: &mut impl Rng) -> (String, String, Vec<(String, String)>, Vec<u8>) {
    let method = if rng.gen_bool(0.7) { "POST" } else { "GET" };
    let mut path = String::new();
    for _ in 0..rng.gen_range(0..4) {
        path.push('/');
        let segment = random_text(rng, 8);
        path.extend(form_urlencoded::byte_serialize(segment.as_bytes()));
    }
    if path.is_empty() || rng.gen_bool(0.2) {
        path.push('/');
    }
    let params: Vec<(String, String)> = (0..rng.gen_range(0..4))
        .map(|_| (random_text(rng, 6), random_text(rng, 6)))
        .collect();
    if !params.is_empty() {
        path.push('?');
        path.push_str(
            &form_urlencoded::Serializer::new(String::new())
                .extend_pairs(&params)
                .finish(),
        );
    }
    let mut headers = Vec::new();
    for i in 0..rng.gen_range(0..3) {
        let value: String = random_text(rng, 10)
            .chars()
            .filter(|c| c.is_ascii() && *c != '\u{7f}')
            .collect();
        headers.push((format!("x-test-{i}"), value.trim().to_owned()));
    }
    if method == "POST" {
        headers.push((
            "content-type".into(),
            "application/x-www-form-urlencoded; charset=utf-8".into(),
        ));
    }
    let body: Vec<u8> = if method == "POST" {
        (0..rng.gen_range(0..512))
            .map(|_| rng.gen::<u8>())
            .collect()
    } else {
        Vec::new()
    };
    (method.into(), path, headers, body)
}

#[test]
fn requests_signed_by_the_aws_sdk_verify_and_tampered_ones_do_not() {
    // Seeded, so that a failure reproduces.
    let mut rng = StdRng::seed_from_u64(0x5160_7e57);
    let now = SystemTime::now();
    for round in 0..300 {
        let (method, path, headers, body) = random_request(&mut rng);
        let (id, secret) = random_key(&mut rng);
        let service = ["sts", "sqs", "sns"][round % 3];
        let signed = sign_with_sdk(
            &method,
            &path,
            &headers,
            &body,
            (&id, &secret),
            service,
            now,
        );
        let context = format!("{method} {path} {headers:?} body {} bytes", body.len());
        assert_eq!(signed.verify(&secret, ms(now)), Ok(()), "{context}");
        // Within the skew either way.
        assert_eq!(signed.verify(&secret, ms(now) + MAX_SKEW_MS - 1000), Ok(()));
        assert_eq!(signed.verify(&secret, ms(now) - MAX_SKEW_MS + 1000), Ok(()));

        let (_, other_secret) = random_key(&mut rng);
        assert_eq!(
            signed.verify(&other_secret, ms(now)),
            Err(AwsError::signature_mismatch()),
            "{context}"
        );

        let mut tampered = Signed {
            body: signed.body.clone(),
            ..signed_clone(&signed)
        };
        tampered.body.push(b'x');
        assert_eq!(
            tampered.verify(&secret, ms(now)),
            Err(AwsError::signature_mismatch()),
            "body: {context}"
        );

        let mut tampered = signed_clone(&signed);
        let date = format_amz_date(ms(now) + 1000);
        tampered.headers.insert(
            "x-amz-date",
            HeaderValue::from_str(&date).unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(
            tampered.verify(&secret, ms(now)),
            Err(AwsError::signature_mismatch()),
            "date: {context}"
        );

        if let Some((name, value)) = headers.first() {
            let mut tampered = signed_clone(&signed);
            tampered.headers.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap_or_else(|e| panic!("{e}")),
                HeaderValue::from_str(&format!("{value}!")).unwrap_or_else(|e| panic!("{e}")),
            );
            assert_eq!(
                tampered.verify(&secret, ms(now)),
                Err(AwsError::signature_mismatch()),
                "header: {context}"
            );
        }

        let mut tampered = signed_clone(&signed);
        // A segment added at the end: one added in front could be undone by the path's own
        // dot segments ("/moved/.." normalises to "/" as "/.." does).
        let path = signed.uri.path();
        let separator = if path.ends_with('/') { "" } else { "/" };
        let query = signed
            .uri
            .query()
            .map_or(String::new(), |q| format!("?{q}"));
        let moved = format!("{path}{separator}moved{query}");
        tampered.uri = moved.parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            tampered.verify(&secret, ms(now)),
            Err(AwsError::signature_mismatch()),
            "path: {context}"
        );
    }
}

fn signed_clone(signed: &Signed) -> Signed {
    Signed {
        method: signed.method.clone(),
        uri: signed.uri.clone(),
        headers: signed.headers.clone(),
        body: signed.body.clone(),
    }
}

#[test]
fn a_declared_payload_hash_is_signed_and_must_be_the_bodys() {
    let now = SystemTime::now();
    let body = b"Action=GetCallerIdentity&Version=2011-06-15";
    let key = (
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    );
    let hash = hex::encode(Sha256::digest(body));
    let headers = vec![("x-amz-content-sha256".to_owned(), hash)];
    let signed = sign_with_sdk("POST", "/", &headers, body, key, "sts", now);
    assert_eq!(signed.verify(key.1, ms(now)), Ok(()));
    let mut tampered = signed_clone(&signed);
    tampered.body = b"Action=GetCallerIdentity&Version=2011-06-16".to_vec();
    assert!(matches!(
        tampered.verify(key.1, ms(now)),
        Err(AwsError::SignatureDoesNotMatch(m)) if m.contains("x-amz-content-sha256")
    ));
}

#[test]
fn requests_outside_the_skew_are_refused_as_aws_does() {
    let now = SystemTime::now();
    let key = (
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    );
    let old = now - Duration::from_secs(16 * 60);
    let signed = sign_with_sdk("POST", "/", &[], b"", key, "sts", old);
    match signed.verify(key.1, ms(now)) {
        Err(AwsError::SignatureDoesNotMatch(m)) => {
            assert!(m.starts_with("Signature expired"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    let future = now + Duration::from_secs(16 * 60);
    let signed = sign_with_sdk("POST", "/", &[], b"", key, "sts", future);
    match signed.verify(key.1, ms(now)) {
        Err(AwsError::SignatureDoesNotMatch(m)) => {
            assert!(m.starts_with("Signature not yet current"), "{m}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn another_region_is_refused() {
    let now = SystemTime::now();
    let key = (
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    );
    let signed = sign_with_sdk("POST", "/", &[], b"", key, "sts", now);
    let auth = parse_authorization(&signed.headers).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(matches!(
        verify(signed.request(), &auth, key.1, "eu-west-1", ms(now)),
        Err(AwsError::SignatureDoesNotMatch(m)) if m.contains("region")
    ));
}

#[test]
fn malformed_authorization_headers_are_named() {
    let headers = |value: &str| {
        let mut map = HeaderMap::new();
        map.insert(
            axum::http::header::AUTHORIZATION,
            HeaderValue::from_str(value).unwrap_or_else(|e| panic!("{e}")),
        );
        map
    };
    assert_eq!(
        parse_authorization(&HeaderMap::new()),
        Err(AwsError::MissingAuthenticationToken)
    );
    for bad in [
        "AWS4-HMAC-SHA256",
        "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/sts/aws4_request",
        "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/sts, SignedHeaders=host, Signature=00",
        "AWS4-ECDSA-P256-SHA256 Credential=AKID/20150830/sts/aws4_request, SignedHeaders=host, Signature=00",
        "Bearer abc",
    ] {
        assert!(
            matches!(
                parse_authorization(&headers(bad)),
                Err(AwsError::IncompleteSignature(_))
            ),
            "{bad}"
        );
    }
    let parsed = parse_authorization(&headers(
        "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/sts/aws4_request, SignedHeaders=host;x-amz-date, Signature=ABCD",
    ))
    .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(parsed.access_key_id, "AKID");
    assert_eq!(parsed.service, "sts");
    assert_eq!(parsed.signature, "abcd");
}

#[test]
fn a_signature_that_does_not_sign_host_is_refused() {
    let headers = |signed: &str| {
        let mut map = HeaderMap::new();
        let value = format!(
            "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/sqs/aws4_request, \
             SignedHeaders={signed}, Signature=abcd"
        );
        map.insert(
            axum::http::header::AUTHORIZATION,
            HeaderValue::from_str(&value).unwrap_or_else(|e| panic!("{e}")),
        );
        map
    };
    for signed in [
        "x-amz-date",
        "content-type;x-amz-date",
        "hosts;x-amz-date",
        "x-host",
    ] {
        match parse_authorization(&headers(signed)) {
            Err(AwsError::IncompleteSignature(m)) => {
                assert!(m.contains("'Host'"), "{signed}: {m}")
            }
            other => panic!("{signed}: {other:?}"),
        }
    }
    for signed in ["host", "content-type;host;x-amz-date", "host;x-amz-date"] {
        assert!(parse_authorization(&headers(signed)).is_ok(), "{signed}");
    }
    // A request an SDK signed, its host then dropped from the list, is refused before its
    // signature is computed.
    let now = SystemTime::now();
    let key = ("AKID", "secret");
    let mut signed = sign_with_sdk("POST", "/", &[], b"", key, "sqs", now);
    let value = signed.headers[axum::http::header::AUTHORIZATION]
        .to_str()
        .unwrap_or_default()
        .replace("SignedHeaders=host;", "SignedHeaders=");
    signed.headers.insert(
        axum::http::header::AUTHORIZATION,
        HeaderValue::from_str(&value).unwrap_or_else(|e| panic!("{e}")),
    );
    assert!(
        matches!(
            signed.verify(key.1, ms(now)),
            Err(AwsError::IncompleteSignature(_))
        ),
        "{value}"
    );
}

/// One vector of the published suite: its request as signed and its context.
struct Vector {
    name: String,
    method: Method,
    path: String,
    query: String,
    headers: HeaderMap,
    body: Vec<u8>,
    secret: String,
    now_ms: u64,
}

fn read_vector(dir: &std::path::Path) -> Vector {
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{dir:?}/{file}: {e}"))
    };
    let context: serde_json::Value =
        serde_json::from_str(&read("context.json")).unwrap_or_else(|e| panic!("{e}"));
    let signed = read("header-signed-request.txt");
    let (head, body) = signed.split_once("\n\n").unwrap_or((&signed, ""));
    let mut lines = head.lines();
    let request_line = lines.next().unwrap_or_default();
    let (method, rest) = request_line.split_once(' ').unwrap_or_default();
    let target = rest.strip_suffix(" HTTP/1.1").unwrap_or(rest);
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').unwrap_or_else(|| panic!("{line}"));
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap_or_else(|e| panic!("{e}")),
            HeaderValue::from_str(value).unwrap_or_else(|e| panic!("{e}")),
        );
    }
    let timestamp = context["timestamp"].as_str().unwrap_or_default();
    let now = chrono::DateTime::parse_from_rfc3339(timestamp).unwrap_or_else(|e| panic!("{e}"));
    Vector {
        name: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        method: method.parse().unwrap_or_else(|e| panic!("{e}")),
        path: path.to_owned(),
        query: query.to_owned(),
        headers,
        body: body.as_bytes().to_vec(),
        secret: context["credentials"]["secret_access_key"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        now_ms: now.timestamp_millis() as u64,
    }
}

#[test]
fn the_published_aws_test_suite_verifies() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/aws/sigv4/vectors");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{root:?}: {e}"))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 25, "{} vectors", dirs.len());
    for dir in dirs {
        let vector = read_vector(&dir);
        let request = Request {
            method: &vector.method,
            path: &vector.path,
            query: &vector.query,
            authority: None,
            headers: &vector.headers,
            body: &vector.body,
        };
        let auth = parse_authorization(&vector.headers)
            .unwrap_or_else(|e| panic!("{}: {e:?}", vector.name));
        assert_eq!(
            verify(request, &auth, &vector.secret, REGION, vector.now_ms),
            Ok(()),
            "{}",
            vector.name
        );
        let mut body = vector.body.clone();
        body.extend_from_slice(b"tampered");
        let tampered = Request {
            body: &body,
            ..request
        };
        assert!(
            verify(tampered, &auth, &vector.secret, REGION, vector.now_ms).is_err(),
            "{}",
            vector.name
        );
    }
}
