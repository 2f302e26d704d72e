//! What a request body may cost the gateway: the AWS endpoint refuses a missing, malformed or
//! unknown signature from the headers alone, before a byte of the body is read (and so holds
//! no upload of an unauthenticated client); each AWS action reads at most what it needs; and
//! past `--max-body-bytes-in-flight` a request (REST or AWS) is refused with 503 and
//! `Retry-After` until the bodies held are answered. Also the JSON protocol's strictness: a
//! member repeated in one object is refused, as REST refuses it.

use crate::aws_identity::{
    account_of, create_key, create_tenant, signature_headers, signed_request, AwsAnswer,
};
use crate::harness::{assert_error, tenant_token, Server, SECRET};
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FORM: &str = "application/x-www-form-urlencoded; charset=utf-8";
const JSON: &str = "application/x-amz-json-1.0";

/// An answer read off a raw connection: status, lower-cased head, body.
struct Raw {
    status: u16,
    head: String,
    body: String,
}

/// Opens a connection and sends `POST {path}` with `headers` and a `Content-Length` of
/// `length`, but no body.
async fn headers_only(
    server: &Server,
    path: &str,
    headers: &[(&str, &str)],
    length: usize,
) -> TcpStream {
    let address = server.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).await.unwrap();
    let mut head =
        format!("POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-length: {length}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// Reads one answer, failing if it does not come within `within`.
async fn answer(stream: &mut TcpStream, within: Duration) -> Raw {
    try_answer(stream, within)
        .await
        .expect("answered without waiting for the body")
}

/// Reads one answer if it comes within `within`.
async fn try_answer(stream: &mut TcpStream, within: Duration) -> Option<Raw> {
    let read = async {
        let mut buffer = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            buffer.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buffer).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let head = head.to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if body.len() >= length {
                    break;
                }
            }
        }
        let text = String::from_utf8_lossy(&buffer).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no answer: {text:?}"));
        Raw {
            status,
            head: head.to_ascii_lowercase(),
            body: body.to_owned(),
        }
    };
    tokio::time::timeout(within, read).await.ok()
}

/// The process's resident memory, in bytes.
fn rss(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// Request headers, and the status and AWS code they are answered with.
type Case<'a> = (&'a [(&'a str, &'a str)], u16, &'a str);

/// An `Authorization` header in SigV4's shape for `key_id`, with a signature nobody checked.
fn unchecked_signature(key_id: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential={key_id}/20260101/us-east-1/sqs/aws4_request, \
         SignedHeaders=content-type;host;x-amz-date, Signature={}",
        "0".repeat(64)
    )
}

#[tokio::test]
async fn unauthenticated_uploads_are_refused_before_their_body_is_read() {
    // 64 MiB messages: before, every AWS body could be 192 MiB, read before the signature.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(
        dir.path(),
        &["--jwt-secret", SECRET, "--max-message-bytes", "67108864"],
    );
    let length = 150 * 1024 * 1024;
    let unknown = unchecked_signature("AKIAUNKNOWNKEY000000");
    let garbage_query = [
        ("content-type", FORM),
        ("authorization", "AWS4-HMAC-SHA256 garbage"),
    ];
    let cases: [Case; 5] = [
        (&[("content-type", FORM)], 403, "MissingAuthenticationToken"),
        (&garbage_query, 400, "IncompleteSignature"),
        (
            &[("content-type", FORM), ("authorization", &unknown)],
            403,
            "InvalidClientTokenId",
        ),
        (
            &[
                ("content-type", JSON),
                ("x-amz-target", "AmazonSQS.SendMessage"),
            ],
            403,
            "MissingAuthenticationToken",
        ),
        (
            &[
                ("content-type", JSON),
                ("x-amz-target", "AmazonSQS.SendMessage"),
                ("authorization", &unknown),
            ],
            403,
            "InvalidClientTokenId",
        ),
    ];
    // Uploads held open by clients the headers did not authenticate cost the gateway nothing.
    let before = rss(&server);
    let mut uploads = Vec::new();
    for _ in 0..6 {
        let mut stream = headers_only(
            &server,
            "/",
            &[("content-type", FORM), ("authorization", &unknown)],
            length,
        )
        .await;
        uploads.push(tokio::spawn(async move {
            // Whatever the gateway takes of 40 MiB within 3 s, then the connection stays open.
            let block = vec![b'a'; 1024 * 1024];
            let _ = tokio::time::timeout(Duration::from_secs(3), async {
                for _ in 0..40 {
                    if stream.write_all(&block).await.is_err() {
                        break;
                    }
                }
            })
            .await;
            stream
        }));
    }
    let mut held = Vec::new();
    for upload in uploads {
        held.push(upload.await.unwrap());
    }
    let after = rss(&server);
    eprintln!(
        "RSS with 6 unauthenticated uploads held open: {} MiB before, {} MiB after",
        before >> 20,
        after >> 20
    );
    assert!(
        after < before + 48 * 1024 * 1024,
        "RSS grew from {before} to {after} bytes"
    );
    drop(held);

    for (headers, status, code) in cases {
        let mut stream = headers_only(&server, "/", headers, length).await;
        let raw = answer(&mut stream, Duration::from_secs(3)).await;
        assert_eq!(raw.status, status, "{code}: {}", raw.body);
        assert!(
            raw.body.contains(code) || raw.head.contains(&code.to_ascii_lowercase()),
            "{code}: {} {}",
            raw.head,
            raw.body
        );
    }
}

struct Key {
    id: String,
    secret: String,
    account: String,
}

async fn tenant_with_key(server: &Server, tenant: &str) -> Key {
    let (status, created) = create_tenant(server, json!({"id": tenant})).await;
    assert_eq!(status, 201, "{created}");
    let (status, key) = create_key(
        server,
        tenant,
        json!({"scopes": ["queues:manage", "messages:send", "messages:consume"]}),
    )
    .await;
    assert_eq!(status, 201, "{key}");
    Key {
        id: key["access_key_id"].as_str().unwrap().to_owned(),
        secret: key["secret_access_key"].as_str().unwrap().to_owned(),
        account: account_of(&created),
    }
}

async fn sqs_json(server: &Server, key: &Key, action: &str, body: &str) -> AwsAnswer {
    let target = format!("AmazonSQS.{action}");
    signed_request(
        server,
        (&key.id, &key.secret),
        "sqs",
        "/",
        &[("content-type", JSON), ("x-amz-target", &target)],
        body,
        SystemTime::now(),
    )
    .await
}

/// An SQS JSON request for `action`, signed over `body` as an SDK signs it, of which only the
/// headers are sent: the answer to a refusal made from them (within 3 s).
async fn signed_headers_only(server: &Server, key: &Key, action: &str, body: &str) -> Raw {
    let target = format!("AmazonSQS.{action}");
    let request = [("content-type", JSON), ("x-amz-target", target.as_str())];
    let signature = signature_headers(
        server,
        (&key.id, &key.secret),
        "sqs",
        "/",
        &request,
        body,
        SystemTime::now(),
    );
    let mut headers = request.to_vec();
    headers.extend(signature.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let mut stream = headers_only(server, "/", &headers, body.len()).await;
    answer(&mut stream, Duration::from_secs(3)).await
}

fn json_type(answer: &AwsAnswer) -> String {
    let value: serde_json::Value =
        serde_json::from_str(&answer.text).unwrap_or_else(|e| panic!("{e}: {}", answer.text));
    value["__type"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn each_aws_action_reads_no_more_than_it_needs() {
    let server = Server::start();
    let key = tenant_with_key(&server, "limits").await;
    let created = sqs_json(&server, &key, "CreateQueue", r#"{"QueueName": "q"}"#).await;
    assert_eq!(created.status, 200, "{}", created.text);
    let queue_url = format!("{}/{}/q", server.base, key.account);

    // A GetQueueAttributes declaring 1 MiB is refused from its headers: it needs 64 KiB.
    let signature = unchecked_signature(&key.id);
    let mut stream = headers_only(
        &server,
        "/",
        &[
            ("content-type", JSON),
            ("x-amz-target", "AmazonSQS.GetQueueAttributes"),
            ("authorization", &signature),
        ],
        1024 * 1024,
    )
    .await;
    let raw = answer(&mut stream, Duration::from_secs(3)).await;
    assert_eq!(raw.status, 413, "{}", raw.body);
    assert!(raw.body.contains("RequestEntityTooLarge"), "{}", raw.body);

    // Correctly signed over its whole body, and still over its bound: refused from its headers
    // too. (The body is never sent: a client still writing it when the refusal closes the
    // connection may see a broken pipe instead of the answer.)
    let padding = "x".repeat(100 * 1024);
    let oversized =
        json!({"QueueUrl": queue_url, "AttributeNames": ["All"], "Padding": padding}).to_string();
    let refused = signed_headers_only(&server, &key, "GetQueueAttributes", &oversized).await;
    assert_eq!(refused.status, 413, "{}", refused.body);
    assert!(
        refused
            .body
            .contains("com.amazon.coral.service#RequestEntityTooLarge"),
        "{}",
        refused.body
    );
    // The Query protocol names its action in the body, so the body is read (within the
    // service's largest bound) and then refused by the action's own.
    let form = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("Action", "GetQueueAttributes"),
            ("Version", "2012-11-05"),
            ("QueueUrl", queue_url.as_str()),
            ("AttributeName.1", "All"),
            ("Padding", padding.as_str()),
        ])
        .finish();
    let query = signed_request(
        &server,
        (&key.id, &key.secret),
        "sqs",
        "/",
        &[("content-type", FORM)],
        &form,
        SystemTime::now(),
    )
    .await;
    query.assert_error(413, "RequestEntityTooLarge");
    let small = json!({"QueueUrl": queue_url, "AttributeNames": ["All"]});
    let read = sqs_json(&server, &key, "GetQueueAttributes", &small.to_string()).await;
    assert_eq!(read.status, 200, "{}", read.text);
    // A send of the same size is within its own bound.
    let send = json!({"QueueUrl": queue_url, "MessageBody": padding});
    let sent = sqs_json(&server, &key, "SendMessage", &send.to_string()).await;
    assert_eq!(sent.status, 200, "{}", sent.text);
}

#[tokio::test]
async fn a_repeated_json_member_is_refused() {
    let server = Server::start();
    let key = tenant_with_key(&server, "strict").await;
    let created = sqs_json(&server, &key, "CreateQueue", r#"{"QueueName": "q"}"#).await;
    assert_eq!(created.status, 200, "{}", created.text);
    let queue_url = format!("{}/{}/q", server.base, key.account);
    let body = format!(
        r#"{{"QueueUrl": "{queue_url}", "MessageBody": "first", "MessageBody": "second"}}"#
    );
    let refused = sqs_json(&server, &key, "SendMessage", &body).await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert_eq!(
        json_type(&refused),
        "com.amazon.coral.service#SerializationException"
    );
    assert!(refused.text.contains("MessageBody"), "{}", refused.text);
    let received = sqs_json(
        &server,
        &key,
        "ReceiveMessage",
        &json!({"QueueUrl": queue_url}).to_string(),
    )
    .await;
    assert!(!received.text.contains("second"), "{}", received.text);
}

#[tokio::test]
async fn past_the_body_budget_requests_wait_for_room_with_503_and_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(
        dir.path(),
        &[
            "--jwt-secret",
            SECRET,
            "--max-body-bytes-in-flight",
            "1048576",
        ],
    );
    let token = tenant_token("budget");
    server.call(Method::PUT, "/v1/queues/q", &token, None).await;
    let key = tenant_with_key(&server, "budget-aws").await;
    let created = sqs_json(&server, &key, "CreateQueue", r#"{"QueueName": "q"}"#).await;
    assert_eq!(created.status, 200, "{}", created.text);
    let queue_url = format!("{}/{}/q", server.base, key.account);
    let body = "b".repeat(200 * 1024);
    let rest_body = json!({ "body": body }).to_string();
    // A refusal made from the headers closes the connection while a client may still be
    // writing the body: that client sees a broken pipe, not the answer (`None` here).
    let rest_send = || async {
        let response = server
            .request(Method::POST, "/v1/queues/q/messages", &token)
            .header("content-type", "application/json")
            .body(rest_body.clone())
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        let value: serde_json::Value = response.json().await.ok()?;
        Some((status, value))
    };
    let aws_body = json!({"QueueUrl": queue_url, "MessageBody": body}).to_string();
    let aws_send = || sqs_json(&server, &key, "SendMessage", &aws_body);
    assert_eq!(rest_send().await.map(|(status, _)| status), Some(201));

    // A client holds 900 KB of the 1 MiB budget with a body it is slow to send.
    let bearer = format!("Bearer {token}");
    let mut slow = headers_only(
        &server,
        "/v1/queues/q/messages",
        &[
            ("content-type", "application/json"),
            ("authorization", &bearer),
        ],
        900_000,
    )
    .await;
    slow.write_all(b"{\"body\": \"").await.unwrap();
    // Sends whose bodies do not fit are refused from their headers: the probes send none.
    let rest_headers = [
        ("content-type", "application/json"),
        ("authorization", bearer.as_str()),
    ];
    let started = Instant::now();
    let refused = loop {
        let mut probe = headers_only(
            &server,
            "/v1/queues/q/messages",
            &rest_headers,
            rest_body.len(),
        )
        .await;
        // No answer yet: the slow body's headers were not read yet, so this one waits for its
        // body instead.
        if let Some(raw) = try_answer(&mut probe, Duration::from_millis(500)).await {
            break raw;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never refused");
    };
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.head.contains("retry-after: 1"), "{}", refused.head);
    let value: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
    assert_error(&(503, value), 503, "Unavailable");
    let refused = signed_headers_only(&server, &key, "SendMessage", &aws_body).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(
        refused
            .body
            .contains("com.amazon.coral.service#ServiceUnavailable"),
        "{}",
        refused.body
    );
    assert!(refused.head.contains("retry-after: 1"), "{}", refused.head);
    // A body larger than the whole budget could never be held: too large, not a retry (a
    // 400 KB message escaped as `\u0001` is 2.4 MB of JSON, within the send's own bound).
    let mut large = headers_only(
        &server,
        "/v1/queues/q/messages",
        &[
            ("content-type", "application/json"),
            ("authorization", &bearer),
        ],
        2_400_000,
    )
    .await;
    let raw = answer(&mut large, Duration::from_secs(3)).await;
    assert_eq!(raw.status, 413, "{}", raw.body);
    assert!(raw.body.contains("PayloadTooLarge"), "{}", raw.body);

    // Once the slow client goes, its bytes are given back.
    drop(slow);
    let started = Instant::now();
    loop {
        let answer = rest_send().await;
        if matches!(answer, Some((201, _))) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "never recovered: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sent = aws_send().await;
    assert_eq!(sent.status, 200, "{}", sent.text);
    let metrics = server.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_overload_rejections_total{reason=\"body_bytes\"}")),
        "{metrics}"
    );
}
