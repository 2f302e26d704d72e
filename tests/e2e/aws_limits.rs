//! What a request body may cost the gateway: the AWS endpoint refuses a missing, malformed or
//! unknown signature from the headers alone, before a byte of the body is read (and so holds
//! no upload of an unauthenticated client); each AWS action reads at most what it needs; and
//! past `--max-body-bytes-in-flight` a request (REST or AWS) is refused with 503 and
//! `Retry-After` until the bodies held are answered. Also the JSON protocol's strictness: a
//! member repeated in one object is refused, as REST refuses it.

use crate::aws_identity::{account_of, create_key, create_tenant, signed_request, AwsAnswer};
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
    tokio::time::timeout(within, read)
        .await
        .expect("answered without waiting for the body")
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

    // Signed and sent whole: over its bound in either protocol, within it as usual.
    let padding = "x".repeat(100 * 1024);
    let oversized = json!({"QueueUrl": queue_url, "AttributeNames": ["All"], "Padding": padding});
    let refused = sqs_json(&server, &key, "GetQueueAttributes", &oversized.to_string()).await;
    assert_eq!(refused.status, 413, "{}", refused.text);
    assert_eq!(
        json_type(&refused),
        "com.amazon.coral.service#RequestEntityTooLarge"
    );
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
    let rest_send = || async {
        let response = server
            .request(Method::POST, "/v1/queues/q/messages", &token)
            .json(&json!({"body": body}))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let retry_after = response.headers().get("retry-after").cloned();
        let value: serde_json::Value = response.json().await.unwrap();
        (status, retry_after, value)
    };
    let aws_send = || {
        let send = json!({"QueueUrl": queue_url, "MessageBody": body}).to_string();
        let key = &key;
        let server = &server;
        async move { sqs_json(server, key, "SendMessage", &send).await }
    };
    assert_eq!(rest_send().await.0, 201);

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
    let started = Instant::now();
    loop {
        let (status, retry_after, value) = rest_send().await;
        if status == 503 {
            assert_eq!(retry_after.as_ref().map(|v| v.as_bytes()), Some(&b"1"[..]));
            assert_error(&(status, value), 503, "Unavailable");
            break;
        }
        // The slow body's headers may not have been read yet.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "never refused: {status} {value}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = aws_send().await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(
        json_type(&refused),
        "com.amazon.coral.service#ServiceUnavailable"
    );
    assert_eq!(
        refused.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
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
        let (status, _, value) = rest_send().await;
        if status == 201 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "never recovered: {status} {value}"
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
