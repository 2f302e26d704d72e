//! FIFO queues over HTTP: group order, deduplication answers (200 with the original), sequence
//! numbers, and the FIFO-only fields.

use crate::harness::{assert_error, tenant_token, Server};
use reqwest::Method;
use serde_json::{json, Value};

#[tokio::test]
async fn fifo_queue_over_http() {
    let server = Server::start();
    let t = tenant_token("acme");
    let (status, queue) = server
        .call(
            Method::PUT,
            "/v1/queues/orders.fifo",
            &t,
            Some(json!({"content_based_deduplication": true})),
        )
        .await;
    assert_eq!(status, 201, "{queue}");
    assert_eq!(queue["kind"], "fifo");
    assert_eq!(queue["config"]["content_based_deduplication"], true);
    assert_eq!(queue["config"]["deduplication_scope"], "queue");

    let send = |body: Value| {
        server.call(
            Method::POST,
            "/v1/queues/orders.fifo/messages",
            &t,
            Some(body),
        )
    };
    let (status, first) =
        send(json!({"body": "a1", "group_id": "a", "deduplication_id": "a1"})).await;
    assert_eq!(status, 201, "{first}");
    assert!(first["sequence_number"]
        .as_str()
        .unwrap()
        .chars()
        .all(|c| c.is_ascii_digit()));
    let (status, duplicate) =
        send(json!({"body": "a1", "group_id": "a", "deduplication_id": "a1"})).await;
    assert_eq!(status, 200, "a deduplication hit answers 200: {duplicate}");
    assert_eq!(duplicate["duplicate"], true);
    assert_eq!(duplicate["message_id"], first["message_id"]);
    assert_eq!(duplicate["sequence_number"], first["sequence_number"]);
    // Content-based: no deduplication id needed.
    assert_eq!(send(json!({"body": "a2", "group_id": "a"})).await.0, 201);
    assert_eq!(send(json!({"body": "b1", "group_id": "b"})).await.0, 201);

    assert_error(
        &send(json!({"body": "x", "deduplication_id": "x"})).await,
        400,
        "ValidationError",
    );
    let refused = send(json!({"body": "x", "group_id": "a", "delay_seconds": 5})).await;
    assert_error(&refused, 400, "ValidationError");
    assert!(refused.1["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("delay_seconds"));

    let (_, got) = server
        .call(
            Method::POST,
            "/v1/queues/orders.fifo/messages/receive",
            &t,
            Some(json!({"max_messages": 10})),
        )
        .await;
    let bodies: Vec<&str> = got["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["a1", "a2", "b1"]);
    assert_eq!(got["messages"][0]["deduplication_id"], "a1");
    assert_eq!(
        got["messages"][0]["sequence_number"],
        first["sequence_number"]
    );
    assert_eq!(got["messages"][0]["group_id"], "a");

    // A standard queue refuses FIFO-only settings, naming them.
    let standard = server
        .call(
            Method::PUT,
            "/v1/queues/plain",
            &t,
            Some(json!({"content_based_deduplication": true})),
        )
        .await;
    assert_error(&standard, 400, "ValidationError");
    assert!(standard.1["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("content_based_deduplication"));
}
