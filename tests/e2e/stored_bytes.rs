//! The tenant quota `max_stored_bytes`, end to end on each engine: a tenant fills it exactly,
//! the next send is 429 `QuotaExceeded` with `Retry-After` naming the quota while other tenants
//! carry on, a batch is admitted entry by entry, a publish whose copies would not fit is refused
//! whole, and deletes and purges free bytes for sends within 5 s. Queue stats report each
//! queue's `stored_bytes`.

use crate::harness::{assert_error, tenant_token, token, Server};
use reqwest::Method;
use serde_json::{json, Value};
use sluice_testkit::{unique_prefix, RedisServer};
use std::time::{Duration, Instant};

/// How soon a delete must make room for sends again.
const FREED_WITHIN: Duration = Duration::from_secs(5);

async fn send(server: &Server, t: &str, queue: &str, bytes: usize) -> (u16, Value) {
    server
        .call(
            Method::POST,
            &format!("/v1/queues/{queue}/messages"),
            t,
            Some(json!({"body": "x".repeat(bytes)})),
        )
        .await
}

async fn stored_bytes(server: &Server, t: &str, queue: &str) -> u64 {
    let (status, queue) = server
        .call(Method::GET, &format!("/v1/queues/{queue}"), t, None)
        .await;
    assert_eq!(status, 200, "{queue}");
    queue["stats"]["stored_bytes"].as_u64().unwrap()
}

/// Sends `bytes` until one is accepted, failing if that takes [`FREED_WITHIN`]; each refusal
/// must be the quota's.
async fn send_once_freed(server: &Server, t: &str, queue: &str, bytes: usize) {
    let started = Instant::now();
    loop {
        let answer = send(server, t, queue, bytes).await;
        if answer.0 == 201 {
            return;
        }
        assert_error(&answer, 429, "QuotaExceeded");
        assert!(
            started.elapsed() < FREED_WITHIN,
            "freed bytes still refused after {FREED_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn quota_holds(server: &Server) {
    let admin = token(None, "admin");
    let created = server
        .call(
            Method::POST,
            "/v1/admin/tenants",
            &admin,
            Some(json!({"id": "capped", "quotas": {"max_stored_bytes": 1000}})),
        )
        .await;
    assert_eq!(created.0, 201, "{}", created.1);
    let t = tenant_token("capped");
    assert_eq!(
        server.call(Method::PUT, "/v1/queues/q", &t, None).await.0,
        201
    );

    // Exactly the quota fits; one byte more does not.
    for _ in 0..5 {
        let answer = send(server, &t, "q", 200).await;
        assert_eq!(answer.0, 201, "{}", answer.1);
    }
    assert_eq!(stored_bytes(server, &t, "q").await, 1000);
    let response = server
        .request(Method::POST, "/v1/queues/q/messages", &t)
        .json(&json!({"body": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After is whole seconds");
    assert!(retry_after >= 1);
    let body: Value = response.json().await.unwrap();
    assert_error(&(429, body.clone()), 429, "QuotaExceeded");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("max_stored_bytes") && message.contains("1000"),
        "{message}"
    );
    assert_eq!(stored_bytes(server, &t, "q").await, 1000, "nothing stored");

    // Other tenants are unaffected: one without the quota, one with room.
    for other in ["free", "roomy"] {
        let ot = tenant_token(other);
        if other == "roomy" {
            let created = server
                .call(
                    Method::POST,
                    "/v1/admin/tenants",
                    &admin,
                    Some(json!({"id": other, "quotas": {"max_stored_bytes": 100_000}})),
                )
                .await;
            assert_eq!(created.0, 201, "{}", created.1);
        }
        assert_eq!(
            server.call(Method::PUT, "/v1/queues/q", &ot, None).await.0,
            201
        );
        for _ in 0..6 {
            let answer = send(server, &ot, "q", 200).await;
            assert_eq!(answer.0, 201, "{other}: {}", answer.1);
        }
    }

    // Deleting two messages (400 bytes) makes room within seconds.
    let (status, got) = server
        .call(
            Method::POST,
            "/v1/queues/q/messages/receive",
            &t,
            Some(json!({"max_messages": 2, "visibility_timeout_seconds": 60})),
        )
        .await;
    assert_eq!(status, 200, "{got}");
    let handles: Vec<String> = got["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["receipt_handle"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(handles.len(), 2);
    let entries: Vec<Value> = handles
        .iter()
        .enumerate()
        .map(|(i, h)| json!({"id": format!("d{i}"), "receipt_handle": h}))
        .collect();
    let (status, deleted) = server
        .call(
            Method::POST,
            "/v1/queues/q/messages/delete",
            &t,
            Some(json!({"entries": entries})),
        )
        .await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(
        deleted["successful"].as_array().unwrap().len(),
        2,
        "{deleted}"
    );
    send_once_freed(server, &t, "q", 200).await;
    assert_eq!(stored_bytes(server, &t, "q").await, 800);

    // A batch is admitted entry by entry: 800 + 150 fits, another 150 does not, 10 more does.
    let (status, batch) = server
        .call(
            Method::POST,
            "/v1/queues/q/messages/batch",
            &t,
            Some(json!({"entries": [
                {"id": "a", "body": "a".repeat(150)},
                {"id": "b", "body": "b".repeat(150)},
                {"id": "c", "body": "c".repeat(10)},
            ]})),
        )
        .await;
    assert_eq!(status, 200, "{batch}");
    let successful: Vec<&str> = batch["successful"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(successful, ["a", "c"], "{batch}");
    assert_eq!(batch["failed"][0]["id"], "b", "{batch}");
    assert_eq!(batch["failed"][0]["code"], "QuotaExceeded", "{batch}");
    assert_eq!(stored_bytes(server, &t, "q").await, 960);

    // A publish is admitted by the size of the copies it would deliver: two raw copies of 30
    // bytes do not fit in the 40 left, two of 20 do.
    assert_eq!(
        server.call(Method::PUT, "/v1/queues/q2", &t, None).await.0,
        201
    );
    assert_eq!(
        server
            .call(Method::PUT, "/v1/topics/news", &t, None)
            .await
            .0,
        201
    );
    for queue in ["q", "q2"] {
        let (status, answer) = server
            .call(
                Method::POST,
                "/v1/topics/news/subscriptions",
                &t,
                Some(json!({"queue": queue, "raw_delivery": true})),
            )
            .await;
        assert_eq!(status, 201, "{answer}");
    }
    let publish = |bytes: usize| {
        server.call(
            Method::POST,
            "/v1/topics/news/messages",
            &t,
            Some(json!({"body": "p".repeat(bytes)})),
        )
    };
    assert_error(&publish(30).await, 429, "QuotaExceeded");
    assert_eq!(stored_bytes(server, &t, "q2").await, 0, "nothing delivered");
    let published = publish(20).await;
    assert_eq!(published.0, 201, "{}", published.1);
    assert_eq!(stored_bytes(server, &t, "q").await, 980);
    assert_eq!(stored_bytes(server, &t, "q2").await, 20);
    assert_error(&send(server, &t, "q", 1).await, 429, "QuotaExceeded");

    // A purge frees everything in the queue.
    let purged = server
        .call(Method::POST, "/v1/queues/q/purge", &t, None)
        .await;
    assert!(purged.0 == 200 || purged.0 == 204, "{}", purged.1);
    assert_eq!(stored_bytes(server, &t, "q").await, 0);
    send_once_freed(server, &t, "q", 900).await;
}

#[tokio::test]
async fn max_stored_bytes_is_enforced_on_the_embedded_engine() {
    quota_holds(&Server::start()).await;
}

#[tokio::test]
async fn max_stored_bytes_is_enforced_on_redis() {
    let redis = RedisServer::start().unwrap();
    let (_dir, server) =
        crate::harness::redis_gateway(&redis.url(), &unique_prefix("e2e-bytes"), &[]);
    quota_holds(&server).await;
}

/// Two gateways on one Redis: each admits against its own count of the tenant's bytes, so one
/// sees the other's sends (and deletes) at its next refresh, within seconds; until then it may
/// admit past the quota, by at most what it accepts in that time.
#[tokio::test]
async fn two_gateways_see_each_others_bytes_within_seconds() {
    let redis = RedisServer::start().unwrap();
    let prefix = unique_prefix("e2e-bytes2");
    let start_gateway = || crate::harness::redis_gateway(&redis.url(), &prefix, &[]);
    let (_a_dir, a) = start_gateway();
    let (_b_dir, b) = start_gateway();
    let created = a
        .call(
            Method::POST,
            "/v1/admin/tenants",
            &token(None, "admin"),
            Some(json!({"id": "shared", "quotas": {"max_stored_bytes": 1000}})),
        )
        .await;
    assert_eq!(created.0, 201, "{}", created.1);
    let t = tenant_token("shared");
    assert_eq!(a.call(Method::PUT, "/v1/queues/q", &t, None).await.0, 201);
    // B counts the tenant from here on.
    assert_eq!(send(&b, &t, "q", 100).await.0, 201);
    // A fills the rest: it summed the queues before its first admission.
    for _ in 0..9 {
        let answer = send(&a, &t, "q", 100).await;
        assert_eq!(answer.0, 201, "{}", answer.1);
    }
    assert_error(&send(&a, &t, "q", 1).await, 429, "QuotaExceeded");

    // B learns of A's sends at its next refresh; until then it may admit a few more.
    let started = Instant::now();
    let mut overshoot = 0;
    loop {
        let answer = send(&b, &t, "q", 10).await;
        if answer.0 == 429 {
            assert_error(&answer, 429, "QuotaExceeded");
            break;
        }
        assert_eq!(answer.0, 201, "{}", answer.1);
        overshoot += 10;
        assert!(
            started.elapsed() < FREED_WITHIN,
            "B still admits after {FREED_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stored_bytes(&a, &t, "q").await, 1000 + overshoot);

    // A purge through A frees room for sends through B within seconds.
    let purged = a.call(Method::POST, "/v1/queues/q/purge", &t, None).await;
    assert_eq!(purged.0, 204, "{}", purged.1);
    send_once_freed(&b, &t, "q", 900).await;
}

/// A malformed `max_stored_bytes` is a 400 naming the field, and changes nothing.
#[tokio::test]
async fn a_bad_max_stored_bytes_is_refused_naming_the_field() {
    let server = Server::start();
    let admin = token(None, "admin");
    let created = server
        .call(
            Method::POST,
            "/v1/admin/tenants",
            &admin,
            Some(json!({"id": "kept", "quotas": {"max_stored_bytes": 500}})),
        )
        .await;
    assert_eq!(created.0, 201, "{}", created.1);
    for bad in [json!(-1), json!("lots"), json!(1.5)] {
        for (method, path, id) in [
            (Method::POST, "/v1/admin/tenants", Some("other")),
            (Method::PATCH, "/v1/admin/tenants/kept", None),
        ] {
            let mut body = json!({"quotas": {"max_stored_bytes": bad}});
            if let Some(id) = id {
                body["id"] = json!(id);
            }
            let answer = server.call(method, path, &admin, Some(body)).await;
            assert_error(&answer, 400, "ValidationError");
            let message = answer.1["error"]["message"].as_str().unwrap();
            assert!(message.contains("max_stored_bytes"), "{bad}: {message}");
        }
    }
    let (status, kept) = server
        .call(Method::GET, "/v1/admin/tenants/kept", &admin, None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(kept["quotas"]["max_stored_bytes"], 500, "{kept}");
    assert_error(
        &server
            .call(Method::GET, "/v1/admin/tenants/other", &admin, None)
            .await,
        404,
        "TenantNotFound",
    );
}
