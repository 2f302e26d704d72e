//! The Queues and Messages sections of the REST contract, over HTTP.

use crate::harness::{assert_error, tenant_token, Server};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[tokio::test]
async fn queue_lifecycle_over_http() {
    let server = Server::start();
    let t = tenant_token("acme");

    let (status, queue) = server
        .call(Method::PUT, "/v1/queues/orders", &t, None)
        .await;
    assert_eq!(status, 201, "{queue}");
    assert_eq!(queue["name"], "orders");
    assert_eq!(queue["kind"], "standard");
    assert_eq!(queue["config"]["visibility_timeout_seconds"], 30);
    assert_eq!(queue["config"]["message_retention_seconds"], 345_600);
    assert_eq!(queue["config"]["max_message_bytes"], 1_048_576);
    assert_eq!(queue["config"]["max_depth"], Value::Null);
    assert!(queue["config"].get("content_based_deduplication").is_none());
    assert_eq!(
        queue["stats"],
        json!({"visible": 0, "in_flight": 0, "delayed": 0, "oldest_age_seconds": null, "stored_bytes": 0})
    );
    let created_at = queue["created_at"].as_str().unwrap().to_owned();
    assert!(
        created_at.ends_with('Z') && created_at.len() == 24,
        "{created_at}"
    );

    let body = json!({"visibility_timeout_seconds": 60, "tags": {"team": "shop"}});
    let (status, replaced) = server
        .call(Method::PUT, "/v1/queues/orders", &t, Some(body))
        .await;
    assert_eq!(status, 200);
    assert_eq!(replaced["created_at"], created_at.as_str());
    assert_eq!(replaced["config"]["visibility_timeout_seconds"], 60);

    let (status, patched) = server
        .call(
            Method::PATCH,
            "/v1/queues/orders",
            &t,
            Some(json!({"delay_seconds": 2})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(patched["config"]["visibility_timeout_seconds"], 60);
    assert_eq!(patched["config"]["delay_seconds"], 2);
    assert_eq!(patched["config"]["tags"]["team"], "shop");

    for name in ["a", "b", "c"] {
        assert_eq!(
            server
                .call(Method::PUT, &format!("/v1/queues/{name}"), &t, None)
                .await
                .0,
            201
        );
    }
    let (status, page) = server
        .call(Method::GET, "/v1/queues?limit=2", &t, None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(page["queues"].as_array().unwrap().len(), 2);
    assert_eq!(page["queues"][0]["name"], "a");
    let next = page["next_token"].as_str().unwrap().to_owned();
    let (_, rest) = server
        .call(
            Method::GET,
            &format!("/v1/queues?limit=2&next_token={next}"),
            &t,
            None,
        )
        .await;
    let names: Vec<&str> = rest["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c", "orders"]);
    assert_eq!(rest["next_token"], Value::Null);
    let (_, filtered) = server
        .call(Method::GET, "/v1/queues?prefix=or", &t, None)
        .await;
    assert_eq!(filtered["queues"].as_array().unwrap().len(), 1);
    assert!(filtered["queues"][0]["stats"].is_object());

    assert_eq!(
        server
            .call(Method::DELETE, "/v1/queues/a", &t, None)
            .await
            .0,
        204
    );
    assert_error(
        &server.call(Method::GET, "/v1/queues/a", &t, None).await,
        404,
        "QueueNotFound",
    );
    assert_error(
        &server.call(Method::DELETE, "/v1/queues/a", &t, None).await,
        404,
        "QueueNotFound",
    );
}

#[tokio::test]
async fn messages_send_receive_delete_visibility_peek_purge() {
    let server = Server::start();
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/jobs", &t, None).await;
    let path = |suffix: &str| format!("/v1/queues/jobs{suffix}");

    let (status, sent) = server
        .call(
            Method::POST,
            &path("/messages"),
            &t,
            Some(json!({"body": "hello", "attributes": {"n": {"type": "Number", "value": "42"}}, "group_id": "g1"})),
        )
        .await;
    assert_eq!(status, 201, "{sent}");
    assert_eq!(sent["md5_of_body"], "5d41402abc4b2a76b9719d911017c592");
    assert!(sent["md5_of_attributes"].is_string());
    assert_eq!(sent["duplicate"], false);
    assert_eq!(sent["sequence_number"], Value::Null);

    let (status, batch) = server
        .call(
            Method::POST,
            &path("/messages/batch"),
            &t,
            Some(json!({"entries": [{"id": "a", "body": "one"}, {"id": "b", "body": ""}, {"id": "c", "body": "two"}]})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(batch["successful"].as_array().unwrap().len(), 2);
    assert_eq!(batch["successful"][0]["id"], "a");
    assert!(batch["successful"][0]["message_id"].is_string());
    assert_eq!(
        batch["failed"],
        json!([{"id": "b", "code": "ValidationError", "message": batch["failed"][0]["message"]}])
    );
    assert!(batch["failed"][0]["message"]
        .as_str()
        .unwrap()
        .contains("entries[1].body"));

    let (status, peeked) = server
        .call(
            Method::GET,
            &path("/messages?state=visible&limit=2"),
            &t,
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(peeked["messages"].as_array().unwrap().len(), 2);
    assert!(peeked["messages"][0].get("receipt_handle").is_none());

    let (status, received) = server
        .call(
            Method::POST,
            &path("/messages/receive"),
            &t,
            Some(json!({"max_messages": 10, "visibility_timeout_seconds": 60})),
        )
        .await;
    assert_eq!(status, 200);
    let messages = received["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 3);
    let hello = messages.iter().find(|m| m["body"] == "hello").unwrap();
    assert_eq!(hello["message_id"], sent["message_id"]);
    assert_eq!(
        hello["attributes"],
        json!({"n": {"type": "Number", "value": "42"}})
    );
    assert_eq!(hello["md5_of_attributes"], sent["md5_of_attributes"]);
    assert_eq!(hello["receive_count"], 1);
    assert_eq!(hello["group_id"], "g1");
    assert!(hello["first_received_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(hello["dead_letter"], Value::Null);
    let plain = messages.iter().find(|m| m["body"] == "one").unwrap();
    assert_eq!(plain["attributes"], json!({}));
    assert!(plain.get("md5_of_attributes").is_none());

    let (_, stats) = server.call(Method::GET, "/v1/queues/jobs", &t, None).await;
    assert_eq!(stats["stats"]["in_flight"], 3);
    let (_, in_flight) = server
        .call(Method::GET, &path("/messages?state=in_flight"), &t, None)
        .await;
    assert_eq!(in_flight["messages"].as_array().unwrap().len(), 3);

    let handle = |m: &Value| m["receipt_handle"].as_str().unwrap().to_owned();
    let h_hello = handle(hello);
    // Single delete, and again (retries are safe).
    assert_eq!(
        server
            .call(
                Method::DELETE,
                &path(&format!("/messages/{h_hello}")),
                &t,
                None
            )
            .await
            .0,
        204
    );
    assert_eq!(
        server
            .call(
                Method::DELETE,
                &path(&format!("/messages/{h_hello}")),
                &t,
                None
            )
            .await
            .0,
        204
    );
    assert_error(
        &server
            .call(
                Method::PATCH,
                &path(&format!("/messages/{h_hello}")),
                &t,
                Some(json!({"visibility_timeout_seconds": 5})),
            )
            .await,
        410,
        "ReceiptHandleStale",
    );
    assert_error(
        &server
            .call(Method::DELETE, &path("/messages/not-a-handle"), &t, None)
            .await,
        400,
        "ReceiptHandleInvalid",
    );

    // Visibility 0 makes a message receivable at once; its old handle is then stale.
    let one = messages.iter().find(|m| m["body"] == "one").unwrap();
    let h_one = handle(one);
    assert_eq!(
        server
            .call(
                Method::PATCH,
                &path(&format!("/messages/{h_one}")),
                &t,
                Some(json!({"visibility_timeout_seconds": 0}))
            )
            .await
            .0,
        204
    );
    let (_, again) = server
        .call(
            Method::POST,
            &path("/messages/receive"),
            &t,
            Some(json!({})),
        )
        .await;
    assert_eq!(again["messages"][0]["body"], "one");
    assert_eq!(again["messages"][0]["receive_count"], 2);
    assert_error(
        &server
            .call(
                Method::DELETE,
                &path(&format!("/messages/{h_one}")),
                &t,
                None,
            )
            .await,
        410,
        "ReceiptHandleStale",
    );

    let two = messages.iter().find(|m| m["body"] == "two").unwrap();
    let (status, vis) = server
        .call(
            Method::POST,
            &path("/messages/visibility"),
            &t,
            Some(json!({"entries": [
                {"id": "x", "receipt_handle": handle(two), "visibility_timeout_seconds": 0},
                {"id": "y", "receipt_handle": "bogus", "visibility_timeout_seconds": 0}]})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(vis["successful"], json!([{"id": "x"}]));
    assert_eq!(vis["failed"][0]["code"], "ReceiptHandleInvalid");

    let (_, latest) = server
        .call(
            Method::POST,
            &path("/messages/receive"),
            &t,
            Some(json!({"max_messages": 10})),
        )
        .await;
    let handles: Vec<Value> = latest["messages"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, m)| json!({"id": format!("d{i}"), "receipt_handle": handle(m)}))
        .collect();
    let mut entries = handles.clone();
    entries.push(json!({"id": "old", "receipt_handle": h_one}));
    let (status, deleted) = server
        .call(
            Method::POST,
            &path("/messages/delete"),
            &t,
            Some(json!({"entries": entries})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        deleted["successful"].as_array().unwrap().len(),
        handles.len()
    );
    assert_eq!(deleted["failed"][0]["code"], "ReceiptHandleStale");

    // Purge removes what is left, whatever its state.
    server
        .call(
            Method::POST,
            &path("/messages"),
            &t,
            Some(json!({"body": "later", "delay_seconds": 600})),
        )
        .await;
    server
        .call(
            Method::POST,
            &path("/messages"),
            &t,
            Some(json!({"body": "now"})),
        )
        .await;
    let (_, before) = server.call(Method::GET, "/v1/queues/jobs", &t, None).await;
    assert_eq!(before["stats"]["delayed"], 1);
    assert_eq!(
        server.call(Method::POST, &path("/purge"), &t, None).await.0,
        204
    );
    let (_, after) = server.call(Method::GET, "/v1/queues/jobs", &t, None).await;
    assert_eq!(
        after["stats"],
        json!({"visible": 0, "in_flight": 0, "delayed": 0, "oldest_age_seconds": null, "stored_bytes": 0})
    );
}

#[tokio::test]
async fn long_poll_is_woken_by_a_send_and_times_out_empty() {
    let server = Server::start();
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/wake", &t, None).await;

    let started = Instant::now();
    let (status, empty) = server
        .call(
            Method::POST,
            "/v1/queues/wake/messages/receive",
            &t,
            Some(json!({"wait_seconds": 1})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(empty["messages"], json!([]));
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        started.elapsed()
    );

    let waiter = {
        let request = server
            .request(Method::POST, "/v1/queues/wake/messages/receive", &t)
            .json(&json!({"wait_seconds": 20}));
        tokio::spawn(async move {
            let started = Instant::now();
            let response = request.send().await.unwrap();
            (started.elapsed(), response.json::<Value>().await.unwrap())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent_at = Instant::now();
    server
        .call(
            Method::POST,
            "/v1/queues/wake/messages",
            &t,
            Some(json!({"body": "ping"})),
        )
        .await;
    let (waited, answer) = waiter.await.unwrap();
    assert_eq!(answer["messages"][0]["body"], "ping");
    assert!(
        waited < Duration::from_secs(5),
        "woken by the send, not the 20 s timeout: {waited:?}"
    );
    assert!(sent_at.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn request_ids_are_echoed_or_made() {
    let server = Server::start();
    let t = tenant_token("acme");
    let response = server
        .request(Method::GET, "/v1/queues/missing", &t)
        .header("x-request-id", "trace-123")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "trace-123");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["request_id"], "trace-123");

    let too_long = "x".repeat(129);
    let response = server
        .request(Method::GET, "/v1/queues/missing", &t)
        .header("x-request-id", too_long.as_str())
        .send()
        .await
        .unwrap();
    let made = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(made, too_long);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["request_id"], made.as_str());

    let response = server
        .client
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert!(response.headers().contains_key("x-request-id"));
    assert_eq!(response.status(), 200);
    assert_eq!(server.probe("/readyz").await, 200);

    assert_error(
        &crate::harness::decode(
            server
                .client
                .get(server.url("/v2/nothing"))
                .send()
                .await
                .unwrap(),
        )
        .await,
        404,
        "NotFound",
    );
    assert_error(
        &crate::harness::decode(
            server
                .client
                .post(server.url("/healthz"))
                .send()
                .await
                .unwrap(),
        )
        .await,
        405,
        "MethodNotAllowed",
    );
}

#[tokio::test]
async fn max_depth_answers_429_with_retry_after() {
    let server = Server::start();
    let t = tenant_token("acme");
    server
        .call(
            Method::PUT,
            "/v1/queues/small",
            &t,
            Some(json!({"max_depth": 1})),
        )
        .await;
    assert_eq!(
        server
            .call(
                Method::POST,
                "/v1/queues/small/messages",
                &t,
                Some(json!({"body": "1"}))
            )
            .await
            .0,
        201
    );
    let response = server
        .request(Method::POST, "/v1/queues/small/messages", &t)
        .json(&json!({"body": "2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "QueueFull");
}

/// A receipt handle cannot be forged: the handle of a real delivery with any one character
/// changed answers 400 `ReceiptHandleInvalid` on every endpoint that takes handles, whatever
/// message the change would name (one in flight, one already deleted, one never sent), and
/// acts on nothing; the real handles keep working.
#[tokio::test]
async fn a_receipt_handle_altered_in_any_character_is_refused() {
    let server = Server::start();
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/forge", &t, None).await;
    for body in ["a", "b", "c"] {
        let (status, _) = server
            .call(
                Method::POST,
                "/v1/queues/forge/messages",
                &t,
                Some(json!({"body": body})),
            )
            .await;
        assert_eq!(status, 201);
    }
    let (_, got) = server
        .call(
            Method::POST,
            "/v1/queues/forge/messages/receive",
            &t,
            Some(json!({"max_messages": 10, "visibility_timeout_seconds": 600})),
        )
        .await;
    let messages = got["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    let handle_of = |body: &str| {
        messages.iter().find(|m| m["body"] == body).unwrap()["receipt_handle"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (a, b, c) = (handle_of("a"), handle_of("b"), handle_of("c"));
    let message = |h: &str| format!("/v1/queues/forge/messages/{h}");
    // `a` is gone: deleting a gone message succeeds, which made forged handles answer 204.
    assert_eq!(
        server.call(Method::DELETE, &message(&a), &t, None).await.0,
        204
    );

    let mut forged = Vec::new();
    for i in 0..b.len() {
        let mut altered = b.clone().into_bytes();
        altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
        forged.push(String::from_utf8(altered).unwrap());
    }
    forged.push("A".repeat(b.len()));
    for bad in &forged {
        assert_error(
            &server.call(Method::DELETE, &message(bad), &t, None).await,
            400,
            "ReceiptHandleInvalid",
        );
        assert_error(
            &server
                .call(
                    Method::PATCH,
                    &message(bad),
                    &t,
                    Some(json!({"visibility_timeout_seconds": 0})),
                )
                .await,
            400,
            "ReceiptHandleInvalid",
        );
    }
    for chunk in forged.chunks(10) {
        let deletes: Vec<Value> = chunk
            .iter()
            .enumerate()
            .map(|(i, h)| json!({"id": format!("e{i}"), "receipt_handle": h}))
            .collect();
        let (status, answer) = server
            .call(
                Method::POST,
                "/v1/queues/forge/messages/delete",
                &t,
                Some(json!({"entries": deletes})),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["successful"], json!([]), "{answer}");
        let failed = answer["failed"].as_array().unwrap();
        assert_eq!(failed.len(), chunk.len());
        assert!(
            failed.iter().all(|f| f["code"] == "ReceiptHandleInvalid"),
            "{answer}"
        );
        let changes: Vec<Value> = chunk
            .iter()
            .enumerate()
            .map(|(i, h)| {
                json!({"id": format!("e{i}"), "receipt_handle": h, "visibility_timeout_seconds": 0})
            })
            .collect();
        let (status, answer) = server
            .call(
                Method::POST,
                "/v1/queues/forge/messages/visibility",
                &t,
                Some(json!({"entries": changes})),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["successful"], json!([]), "{answer}");
        let failed = answer["failed"].as_array().unwrap();
        assert!(
            failed.iter().all(|f| f["code"] == "ReceiptHandleInvalid"),
            "{answer}"
        );
    }

    // Nothing moved: `b` and `c` are still in flight.
    let (_, queue) = server.call(Method::GET, "/v1/queues/forge", &t, None).await;
    assert_eq!(queue["stats"]["in_flight"], 2, "{queue}");
    assert_eq!(queue["stats"]["visible"], 0, "{queue}");
    // The real handles still work: `b` comes back at once and is deleted with its new handle.
    let (status, _) = server
        .call(
            Method::PATCH,
            &message(&b),
            &t,
            Some(json!({"visibility_timeout_seconds": 0})),
        )
        .await;
    assert_eq!(status, 204);
    let (_, again) = server
        .call(
            Method::POST,
            "/v1/queues/forge/messages/receive",
            &t,
            Some(json!({"max_messages": 10})),
        )
        .await;
    assert_eq!(again["messages"][0]["body"], "b", "{again}");
    let b2 = again["messages"][0]["receipt_handle"].as_str().unwrap();
    assert_eq!(
        server.call(Method::DELETE, &message(b2), &t, None).await.0,
        204
    );
    assert_eq!(
        server.call(Method::DELETE, &message(&c), &t, None).await.0,
        204
    );
    let (_, queue) = server.call(Method::GET, "/v1/queues/forge", &t, None).await;
    assert_eq!(queue["stats"]["in_flight"], 0, "{queue}");
    assert_eq!(queue["stats"]["visible"], 0, "{queue}");
}
