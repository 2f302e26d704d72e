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

    let metrics = server.metrics_text().await;
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

#[tokio::test]
async fn a_redrive_task_moves_dead_letters_back_at_its_rate() {
    let server = Server::start();
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/dlq", &t, None).await;
    server
        .call(
            Method::PUT,
            "/v1/queues/work",
            &t,
            Some(json!({"redrive_policy": {"dead_letter_queue": "dlq", "max_receive_count": 1}})),
        )
        .await;
    let entries: Vec<Value> = (0..10)
        .map(|i| json!({"id": format!("e{i}"), "body": format!("m{i}")}))
        .collect();
    for _ in 0..3 {
        server
            .call(
                Method::POST,
                "/v1/queues/work/messages/batch",
                &t,
                Some(json!({"entries": entries})),
            )
            .await;
    }
    // Every message once delivered, then moved by a later receive.
    for _ in 0..10 {
        receive(&server, &t, "work").await;
    }
    let (_, dlq) = server.call(Method::GET, "/v1/queues/dlq", &t, None).await;
    assert_eq!(dlq["stats"]["visible"], 30, "{dlq}");

    let started = std::time::Instant::now();
    let (status, task) = server
        .call(
            Method::POST,
            "/v1/queues/dlq/redrive",
            &t,
            Some(json!({"max_messages_per_second": 20})),
        )
        .await;
    assert_eq!(status, 202, "{task}");
    assert_eq!(task["status"], "running");
    assert_eq!(task["to_move"], 30);
    assert_eq!(task["destination"], Value::Null);
    let id = task["id"].as_str().unwrap().to_owned();
    assert_error(
        &server
            .call(Method::POST, "/v1/queues/dlq/redrive", &t, None)
            .await,
        409,
        "Conflict",
    );
    let finished = loop {
        let (_, task) = server
            .call(Method::GET, &format!("/v1/redrive-tasks/{id}"), &t, None)
            .await;
        if task["status"] != "running" {
            break task;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the task never finished: {task}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let elapsed = started.elapsed();
    assert_eq!(finished["status"], "completed", "{finished}");
    assert_eq!(finished["moved"], 30);
    assert_eq!(finished["failed"], 0);
    assert!(finished["finished_at"].as_str().unwrap().ends_with('Z'));
    // 30 messages at 20 per second, with at most one second's worth at once: never faster.
    assert!(
        elapsed >= std::time::Duration::from_millis(1400),
        "30 messages at 20/s took only {elapsed:?}"
    );
    let back = peek(&server, &t, "work").await;
    assert_eq!(back.len(), 10, "peek answers 10 by default");
    assert!(back
        .iter()
        .all(|m| m["dead_letter"].is_null() && m["receive_count"] == 0));
    let (_, work) = server.call(Method::GET, "/v1/queues/work", &t, None).await;
    assert_eq!(work["stats"]["visible"], 30);

    let (_, list) = server
        .call(Method::GET, "/v1/redrive-tasks?queue=dlq", &t, None)
        .await;
    assert_eq!(list["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(list["tasks"][0]["id"], id.as_str());
    assert_error(
        &server
            .call(Method::DELETE, &format!("/v1/redrive-tasks/{id}"), &t, None)
            .await,
        409,
        "Conflict",
    );
    assert_error(
        &server
            .call(Method::GET, "/v1/redrive-tasks/nope", &t, None)
            .await,
        404,
        "TaskNotFound",
    );
    let other = tenant_token("other");
    assert_error(
        &server
            .call(
                Method::GET,
                &format!("/v1/redrive-tasks/{id}"),
                &other,
                None,
            )
            .await,
        404,
        "TaskNotFound",
    );
}
