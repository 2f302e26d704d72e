//! Dead-letter queues over HTTP: policies in the queue config, the move after
//! `max_receive_count` receives, the dead-letter endpoint, retry backoff, and the refusals.

use crate::harness::{assert_error, tenant_token, Server};
use reqwest::Method;
use serde_json::{json, Value};

async fn receive(server: &Server, token: &str, queue: &str) -> Vec<Value> {
    let (status, answer) = server
        .call(
            Method::POST,
            &format!("/v1/queues/{queue}/messages/receive"),
            token,
            Some(json!({"max_messages": 10, "visibility_timeout_seconds": 0})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    answer["messages"].as_array().unwrap().clone()
}

async fn peek(server: &Server, token: &str, queue: &str) -> Vec<Value> {
    let (status, answer) = server
        .call(
            Method::GET,
            &format!("/v1/queues/{queue}/messages?state=visible"),
            token,
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    answer["messages"].as_array().unwrap().clone()
}

#[tokio::test]
async fn messages_received_too_often_move_to_the_dead_letter_queue() {
    let server = Server::start();
    let t = tenant_token("acme");
    assert_eq!(
        server
            .call(Method::PUT, "/v1/queues/orders-dlq", &t, None)
            .await
            .0,
        201
    );
    let policy = json!({"dead_letter_queue": "orders-dlq", "max_receive_count": 2});
    let (status, queue) = server
        .call(
            Method::PUT,
            "/v1/queues/orders",
            &t,
            Some(json!({"redrive_policy": policy})),
        )
        .await;
    assert_eq!(status, 201, "{queue}");
    assert_eq!(queue["config"]["redrive_policy"], policy);
    assert_eq!(queue["config"]["retry_backoff"], Value::Null);

    let (_, sent) = server
        .call(
            Method::POST,
            "/v1/queues/orders/messages",
            &t,
            Some(json!({"body": "poison"})),
        )
        .await;
    assert_eq!(receive(&server, &t, "orders").await.len(), 1);
    assert_eq!(receive(&server, &t, "orders").await.len(), 1);
    assert!(
        receive(&server, &t, "orders").await.is_empty(),
        "the third receive moves it instead"
    );

    let moved = peek(&server, &t, "orders-dlq").await;
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0]["message_id"], sent["message_id"]);
    assert_eq!(moved[0]["body"], "poison");
    assert_eq!(moved[0]["receive_count"], 0);
    let dead = &moved[0]["dead_letter"];
    assert_eq!(dead["source_queue"], "orders");
    assert_eq!(dead["reason"], "max_receive_count_exceeded");
    assert_eq!(dead["receive_count"], 2);
    assert!(dead["moved_at"].as_str().unwrap().ends_with('Z'));
    let (_, source) = server
        .call(Method::GET, "/v1/queues/orders", &t, None)
        .await;
    assert_eq!(source["stats"]["visible"], 0);

    let metrics = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("sluice_messages_total{")
                && line.contains("event=\"dead_lettered\"")
                && line.contains("queue=\"orders\"")
                && line.ends_with(" 1")),
        "dead_lettered counted on the source queue:\n{metrics}"
    );

    // The DLQ is in use: it cannot be deleted until the policy goes.
    let refused = server
        .call(Method::DELETE, "/v1/queues/orders-dlq", &t, None)
        .await;
    assert_error(&refused, 409, "Conflict");
    assert!(refused.1["error"]["message"]
        .as_str()
        .unwrap()
        .contains("orders"));
    let (status, _) = server
        .call(
            Method::PATCH,
            "/v1/queues/orders",
            &t,
            Some(json!({"redrive_policy": null})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        server
            .call(Method::DELETE, "/v1/queues/orders-dlq", &t, None)
            .await
            .0,
        204
    );
}

#[tokio::test]
async fn a_consumer_dead_letters_a_message_with_a_reason() {
    let server = Server::start();
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/dlq", &t, None).await;
    server.call(Method::PUT, "/v1/queues/plain", &t, None).await;
    server
        .call(
            Method::PUT,
            "/v1/queues/jobs",
            &t,
            Some(json!({"redrive_policy": {"dead_letter_queue": "dlq", "max_receive_count": 10}})),
        )
        .await;
    for queue in ["jobs", "plain"] {
        server
            .call(
                Method::POST,
                &format!("/v1/queues/{queue}/messages"),
                &t,
                Some(json!({"body": "job"})),
            )
            .await;
    }
    let (_, received) = server
        .call(Method::POST, "/v1/queues/plain/messages/receive", &t, None)
        .await;
    let plain = received["messages"][0]["receipt_handle"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_error(
        &server
            .call(
                Method::POST,
                &format!("/v1/queues/plain/messages/{plain}/dead-letter"),
                &t,
                Some(json!({"reason": "bad"})),
            )
            .await,
        409,
        "Conflict",
    );

    let (_, received) = server
        .call(Method::POST, "/v1/queues/jobs/messages/receive", &t, None)
        .await;
    let handle = received["messages"][0]["receipt_handle"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/queues/jobs/messages/{handle}/dead-letter");
    for (body, field) in [
        (json!({}), "reason"),
        (json!({"reason": ""}), "reason"),
        (json!({"reason": "x".repeat(257)}), "reason"),
        (json!({"reason": "ok", "extra": 1}), "extra"),
    ] {
        let answer = server.call(Method::POST, &path, &t, Some(body)).await;
        assert_error(&answer, 400, "ValidationError");
        assert!(answer.1["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(field));
    }
    assert!(peek(&server, &t, "dlq").await.is_empty(), "nothing moved");

    let (status, _) = server
        .call(
            Method::POST,
            &path,
            &t,
            Some(json!({"reason": "schema v1 is gone"})),
        )
        .await;
    assert_eq!(status, 204);
    let moved = peek(&server, &t, "dlq").await;
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0]["dead_letter"]["reason"], "schema v1 is gone");
    assert_eq!(moved[0]["dead_letter"]["receive_count"], 1);
    assert_error(
        &server
            .call(Method::POST, &path, &t, Some(json!({"reason": "again"})))
            .await,
        410,
        "ReceiptHandleStale",
    );
}

#[tokio::test]
async fn invalid_policies_name_their_field_and_change_nothing() {
    let server = Server::start();
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/q", &t, None).await;
    server
        .call(Method::PUT, "/v1/queues/dlq.fifo", &t, None)
        .await;
    let (_, before) = server.call(Method::GET, "/v1/queues/q", &t, None).await;
    let cases = [
        (
            json!({"redrive_policy": {"dead_letter_queue": "missing", "max_receive_count": 3}}),
            "redrive_policy",
        ),
        (
            json!({"redrive_policy": {"dead_letter_queue": "q", "max_receive_count": 3}}),
            "redrive_policy",
        ),
        (
            json!({"redrive_policy": {"dead_letter_queue": "dlq.fifo", "max_receive_count": 3}}),
            "redrive_policy",
        ),
        (
            json!({"redrive_policy": {"dead_letter_queue": "dlq.fifo", "max_receive_count": 0}}),
            "redrive_policy",
        ),
        (
            json!({"redrive_policy": {"dead_letter_queue": "dlq.fifo"}}),
            "redrive_policy",
        ),
        (
            json!({"redrive_allow_policy": {"permission": "everyone"}}),
            "redrive_allow_policy",
        ),
        (
            json!({"redrive_allow_policy": {"permission": "by_queue"}}),
            "redrive_allow_policy",
        ),
        (
            json!({"redrive_allow_policy": {"permission": "deny_all", "source_queues": ["a"]}}),
            "redrive_allow_policy",
        ),
        (
            json!({"retry_backoff": {"base_seconds": 10}}),
            "retry_backoff",
        ),
        (
            json!({"retry_backoff": {"base_seconds": 10, "max_seconds": 5}}),
            "retry_backoff",
        ),
        (
            json!({"retry_backoff": {"base_seconds": 0, "max_seconds": 5}}),
            "retry_backoff",
        ),
    ];
    for (body, field) in cases {
        let answer = server
            .call(Method::PATCH, "/v1/queues/q", &t, Some(body.clone()))
            .await;
        assert_error(&answer, 400, "ValidationError");
        let message = answer.1["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{body}: {message}");
        let (_, after) = server.call(Method::GET, "/v1/queues/q", &t, None).await;
        assert_eq!(
            after["config"], before["config"],
            "{body} changed the queue"
        );
    }
    let backoff = json!({"base_seconds": 2, "max_seconds": 60});
    let (status, queue) = server
        .call(
            Method::PATCH,
            "/v1/queues/q",
            &t,
            Some(json!({"retry_backoff": backoff})),
        )
        .await;
    assert_eq!(status, 200, "{queue}");
    assert_eq!(
        queue["config"]["retry_backoff"],
        json!({"base_seconds": 2, "max_seconds": 60, "jitter": true})
    );
}
