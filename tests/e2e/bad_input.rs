//! Bad input gets a clear 4xx naming the field, in our error shape, and changes nothing.

use crate::harness::{assert_error, tenant_token, Server};
use reqwest::Method;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::time::Duration;

async fn stats(server: &Server, token: &str) -> Value {
    let (status, queue) = server.call(Method::GET, "/v1/queues/q", token, None).await;
    assert_eq!(status, 200, "the server still serves");
    json!([queue["stats"], queue["config"]])
}

#[tokio::test]
async fn refused_requests_name_the_field_and_change_nothing() {
    let server = Server::start();
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/q", &t, None).await;
    server
        .call(
            Method::POST,
            "/v1/queues/q/messages",
            &t,
            Some(json!({"body": "keep"})),
        )
        .await;
    let before = stats(&server, &t).await;

    let eleven: Vec<Value> = (0..11)
        .map(|i| json!({"id": format!("e{i}"), "body": "x"}))
        .collect();
    let cases: Vec<(Method, &str, Value, &str)> = vec![
        (Method::POST, "/v1/queues/q/messages", json!({"body": "x", "colour": "red"}), "colour"),
        (Method::POST, "/v1/queues/q/messages", json!({}), "body"),
        (Method::POST, "/v1/queues/q/messages", json!({"body": ""}), "body"),
        (Method::POST, "/v1/queues/q/messages", json!({"body": 5}), "body"),
        (Method::POST, "/v1/queues/q/messages", json!({"body": "x", "delay_seconds": 901}), "delay_seconds"),
        (Method::POST, "/v1/queues/q/messages", json!({"body": "x", "delay_seconds": -1}), "delay_seconds"),
        (Method::POST, "/v1/queues/q/messages", json!({"body": "x", "delay_seconds": 1, "deliver_at": "2030-01-01T00:00:00Z"}), "deliver_at"),
        (Method::POST, "/v1/queues/q/messages", json!({"body": "x", "deliver_at": "tomorrow"}), "deliver_at"),
        (Method::POST, "/v1/queues/q/messages", json!({"body": "x", "deduplication_id": "d"}), "deduplication_id"),
        (Method::POST, "/v1/queues/q/messages", json!({"body": "x", "attributes": {"AWS.x": {"type": "String", "value": "v"}}}), "attributes.AWS.x"),
        (Method::POST, "/v1/queues/q/messages", json!({"body": "x", "attributes": {"n": {"type": "Number", "value": "NaN"}}}), "attributes.n.value"),
        (Method::POST, "/v1/queues/q/messages", json!({"body": "x", "attributes": {"n": {"type": "Text", "value": "v"}}}), "attributes.n.type"),
        (Method::POST, "/v1/queues/q/messages/batch", json!({"entries": eleven}), "entries"),
        (Method::POST, "/v1/queues/q/messages/batch", json!({"entries": []}), "entries"),
        (Method::POST, "/v1/queues/q/messages/batch", json!({"entries": [{"id": "a", "body": "x"}, {"id": "a", "body": "y"}]}), "entries[1].id"),
        (Method::POST, "/v1/queues/q/messages/batch", json!({"entries": [{"id": "bad id!", "body": "x"}]}), "entries[0].id"),
        (Method::POST, "/v1/queues/q/messages/receive", json!({"max_messages": 11}), "max_messages"),
        (Method::POST, "/v1/queues/q/messages/receive", json!({"wait_seconds": 21}), "wait_seconds"),
        (Method::POST, "/v1/queues/q/messages/receive", json!({"visibility_timeout_seconds": 43201}), "visibility_timeout_seconds"),
        (Method::POST, "/v1/queues/q/messages/delete", json!({"entries": [{"id": "a", "receipt_handle": "h", "extra": 1}]}), "entries[0].extra"),
        (Method::PATCH, "/v1/queues/q", json!({"visibility_timeout_seconds": 43201}), "visibility_timeout_seconds"),
        (Method::PATCH, "/v1/queues/q", json!({"message_retention_seconds": 59}), "message_retention_seconds"),
        (Method::PATCH, "/v1/queues/q", json!({"max_message_bytes": 1023}), "max_message_bytes"),
        (Method::PATCH, "/v1/queues/q", json!({"receive_wait_seconds": 21}), "receive_wait_seconds"),
        (Method::PATCH, "/v1/queues/q", json!({"content_based_deduplication": true}), "content_based_deduplication"),
        (Method::PATCH, "/v1/queues/q", json!({"redrive_policy": {"dead_letter_queue": "dlq", "max_receive_count": 3}}), "redrive_policy"),
        (Method::PATCH, "/v1/queues/q", json!({"redrive_allow_policy": {"permission": "some"}}), "redrive_allow_policy"),
        (Method::PATCH, "/v1/queues/q", json!({"retry_backoff": {"base_seconds": 5}}), "retry_backoff"),
        (Method::PATCH, "/v1/queues/q", json!({"visiblity_timeout_seconds": 5}), "visiblity_timeout_seconds"),
        (Method::PUT, "/v1/queues/bad%20name", json!({}), "queue"),
        (Method::PUT, "/v1/queues/orders.fifo", json!({"deduplication_scope": "tenant"}), "deduplication_scope"),
        (Method::PUT, "/v1/queues/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", json!({}), "queue"),
        (Method::GET, "/v1/queues?limit=0", Value::Null, "limit"),
        (Method::GET, "/v1/queues?limit=abc", Value::Null, "limit"),
        (Method::GET, "/v1/queues?next_token=forged", Value::Null, "next_token"),
        (Method::GET, "/v1/queues/q/messages?state=sleeping", Value::Null, "state"),
        (Method::GET, "/v1/queues/q/messages?limit=101", Value::Null, "limit"),
    ];
    for (method, path, body, field) in cases {
        let body = if body.is_null() { None } else { Some(body) };
        let answer = server.call(method.clone(), path, &t, body.clone()).await;
        assert_error(&answer, 400, "ValidationError");
        let message = answer.1["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(field),
            "{method} {path} {body:?}: {message:?} should name {field}"
        );
        assert_eq!(
            stats(&server, &t).await,
            before,
            "{method} {path} changed something"
        );
    }
    let (_, list) = server.call(Method::GET, "/v1/queues", &t, None).await;
    assert_eq!(
        list["queues"].as_array().unwrap().len(),
        1,
        "no queue was created"
    );
}

#[tokio::test]
async fn malformed_bodies_answer_in_our_shape() {
    let server = Server::start();
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/q", &t, None).await;
    let before = stats(&server, &t).await;
    for raw in [
        "{\"body\": ",
        "not json",
        "{\"body\": \"x\"} trailing",
        "[1,2",
    ] {
        let response = server
            .request(Method::POST, "/v1/queues/q/messages", &t)
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .unwrap();
        assert_error(
            &crate::harness::decode(response).await,
            400,
            "MalformedRequest",
        );
    }
    let empty = server
        .request(Method::POST, "/v1/queues/q/messages", &t)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_error(
        &crate::harness::decode(empty).await,
        400,
        "MalformedRequest",
    );
    let not_json = server
        .request(Method::POST, "/v1/queues/q/messages", &t)
        .header("content-type", "text/plain")
        .body("{\"body\": \"x\"}")
        .send()
        .await
        .unwrap();
    assert_error(
        &crate::harness::decode(not_json).await,
        415,
        "UnsupportedMediaType",
    );
    assert_eq!(stats(&server, &t).await, before);
}

#[tokio::test]
async fn oversized_messages_and_bodies_answer_413() {
    let server = Server::start();
    let t = tenant_token("acme");
    server
        .call(
            Method::PUT,
            "/v1/queues/q",
            &t,
            Some(json!({"max_message_bytes": 2048})),
        )
        .await;
    let before = stats(&server, &t).await;

    // Body plus attributes over the queue's limit.
    let big = "x".repeat(2000);
    let answer = server
        .call(
            Method::POST,
            "/v1/queues/q/messages",
            &t,
            Some(json!({"body": big, "attributes": {"name": {"type": "String", "value": "y".repeat(60)}}})),
        )
        .await;
    assert_error(&answer, 413, "PayloadTooLarge");
    let fits = server
        .call(
            Method::POST,
            "/v1/queues/q/messages",
            &t,
            Some(json!({"body": "x".repeat(2048)})),
        )
        .await;
    assert_eq!(fits.0, 201);
    let (_, batch) = server
        .call(
            Method::POST,
            "/v1/queues/q/messages/batch",
            &t,
            Some(json!({"entries": [{"id": "big", "body": "x".repeat(3000)}, {"id": "ok", "body": "y"}]})),
        )
        .await;
    assert_eq!(batch["failed"][0]["code"], "PayloadTooLarge");
    assert_eq!(batch["successful"][0]["id"], "ok");
    server
        .call(Method::POST, "/v1/queues/q/purge", &t, None)
        .await;
    assert_eq!(stats(&server, &t).await, before);

    // A declared length over the server's limit is refused before the body is sent at all:
    // the answer arrives although the client has written only the headers.
    let address = server.base.strip_prefix("http://").unwrap().to_owned();
    let token = t.clone();
    let raw = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "POST /v1/queues/q/messages HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n\
             content-type: application/json\r\ncontent-length: 104857600\r\n\r\n{{\"body\": \"",
        )
        .unwrap();
        let mut answer = vec![0u8; 4096];
        let n = stream.read(&mut answer).unwrap();
        String::from_utf8_lossy(&answer[..n]).into_owned()
    })
    .await
    .unwrap();
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
    assert!(raw.contains("PayloadTooLarge"), "{raw}");

    // A chunked body with no declared length is cut off at the limit: the server answers 413
    // or, having stopped reading, closes the connection while the client is still writing.
    let chunks = futures_body(8 * 1024 * 1024);
    // Its own client, so the connection the server closes is not reused by later requests.
    let sent = reqwest::Client::new()
        .post(server.url("/v1/queues/q/messages"))
        .header("authorization", format!("Bearer {t}"))
        .header("content-type", "application/json")
        .body(chunks)
        .send()
        .await;
    match sent {
        Ok(response) => assert_eq!(response.status(), 413),
        Err(error) => assert!(error.is_request(), "{error}"),
    }
    assert_eq!(stats(&server, &t).await, before);
}

/// A streamed body of `size` bytes without a content-length.
fn futures_body(size: usize) -> reqwest::Body {
    let chunk = vec![b' '; 64 * 1024];
    let stream = futures_util::stream::iter(
        (0..size / chunk.len()).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
    );
    reqwest::Body::wrap_stream(stream)
}

#[tokio::test]
async fn repeated_keys_and_parameters_are_refused_naming_them() {
    let server = Server::start();
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/q", &t, None).await;
    let before = stats(&server, &t).await;
    let string = r#"{"type": "String", "value": "v"}"#;
    let cases: Vec<(Method, &str, String, &str)> = vec![
        (
            Method::POST,
            "/v1/queues/q/messages",
            r#"{"body": "a", "body": "b"}"#.into(),
            "body",
        ),
        (
            Method::POST,
            "/v1/queues/q/messages",
            format!(r#"{{"body": "x", "attributes": {{"k": {string}, "k": {string}}}}}"#),
            "attributes.k",
        ),
        (
            Method::POST,
            "/v1/queues/q/messages",
            r#"{"body": "x", "attributes": {"k": {"type": "String", "value": "a", "value": "b"}}}"#
                .into(),
            "attributes.k.value",
        ),
        (
            Method::POST,
            "/v1/queues/q/messages/batch",
            r#"{"entries": [{"id": "a", "body": "x"}, {"id": "b", "body": "x", "id": "c"}]}"#
                .into(),
            "entries[1].id",
        ),
        (
            Method::PATCH,
            "/v1/queues/q",
            r#"{"visibility_timeout_seconds": 5, "visibility_timeout_seconds": 6}"#.into(),
            "visibility_timeout_seconds",
        ),
        (
            Method::PATCH,
            "/v1/queues/q",
            r#"{"tags": {"team": "a", "team": "b"}}"#.into(),
            "tags.team",
        ),
        (
            Method::PUT,
            "/v1/queues/other",
            r#"{"tags": {"team": "a", "team": "b"}}"#.into(),
            "tags.team",
        ),
    ];
    for (method, path, raw, field) in cases {
        let response = server
            .request(method.clone(), path, &t)
            .header("content-type", "application/json")
            .body(raw.clone())
            .send()
            .await
            .unwrap();
        let answer = crate::harness::decode(response).await;
        assert_error(&answer, 400, "ValidationError");
        let message = answer.1["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{field}: ")),
            "{method} {path} {raw}: {message:?} should name {field}"
        );
        assert_eq!(stats(&server, &t).await, before, "{method} {path} {raw}");
    }
    // A repeated query parameter is named, not reported as the body.
    let answer = server
        .call(Method::GET, "/v1/queues?limit=1&limit=2", &t, None)
        .await;
    assert_error(&answer, 400, "ValidationError");
    let message = answer.1["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("limit: "), "{message}");
    let (_, list) = server.call(Method::GET, "/v1/queues", &t, None).await;
    assert_eq!(
        list["queues"].as_array().unwrap().len(),
        1,
        "no queue created"
    );
}

#[tokio::test]
async fn number_attributes_follow_sqs_precision_and_range() {
    let server = Server::start();
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/q", &t, None).await;
    let before = stats(&server, &t).await;
    let send = |value: String| {
        let body = json!({"body": "x", "attributes": {"n": {"type": "Number", "value": value}}});
        server.call(Method::POST, "/v1/queues/q/messages", &t, Some(body))
    };
    for bad in [
        format!("1{}", "2".repeat(38)),
        format!("-0.000{}", "9".repeat(39)),
        "1".repeat(100_000),
        "1e127".into(),
        "1e-129".into(),
    ] {
        let answer = send(bad.clone()).await;
        assert_error(&answer, 400, "ValidationError");
        let message = answer.1["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("attributes.n.value: "),
            "{}: {message}",
            &bad[..bad.len().min(50)]
        );
        assert_eq!(stats(&server, &t).await, before);
    }
    for good in [
        "2".repeat(38),
        format!("-0.000{}", "9".repeat(38)),
        "1e126".into(),
        "-1e-128".into(),
    ] {
        let (status, answer) = send(good.clone()).await;
        assert_eq!(status, 201, "{good}: {answer}");
    }
}
