//! Topics over HTTP: topic and subscription administration, publishing with filter policies,
//! raw and enveloped copies, FIFO topics, scopes, tenant isolation and bad input.

use crate::harness::{assert_error, tenant_token, token, Server};
use reqwest::Method;
use serde_json::{json, Value};

async fn put(server: &Server, t: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    server.call(Method::PUT, path, t, body).await
}

async fn post(server: &Server, t: &str, path: &str, body: Value) -> (u16, Value) {
    server.call(Method::POST, path, t, Some(body)).await
}

async fn receive_all(server: &Server, t: &str, queue: &str) -> Vec<Value> {
    let (status, answer) = post(
        server,
        t,
        &format!("/v1/queues/{queue}/messages/receive"),
        json!({"max_messages": 10, "visibility_timeout_seconds": 60}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    answer["messages"].as_array().unwrap().clone()
}

async fn subscribe(server: &Server, t: &str, topic: &str, body: Value) -> (u16, Value) {
    post(
        server,
        t,
        &format!("/v1/topics/{topic}/subscriptions"),
        body,
    )
    .await
}

#[tokio::test]
async fn topics_are_created_listed_replaced_and_deleted() {
    let server = Server::start();
    let t = tenant_token("acme");
    let (status, topic) = put(
        &server,
        &t,
        "/v1/topics/news",
        Some(json!({"tags": {"team": "a"}})),
    )
    .await;
    assert_eq!(status, 201, "{topic}");
    assert_eq!(topic["name"], "news");
    assert_eq!(topic["kind"], "standard");
    assert_eq!(topic["config"]["tags"]["team"], "a");
    assert!(topic["config"].get("content_based_deduplication").is_none());
    assert_eq!(topic["subscription_count"], 0);
    let (status, replaced) = put(&server, &t, "/v1/topics/news", None).await;
    assert_eq!(status, 200);
    assert_eq!(replaced["created_at"], topic["created_at"]);
    assert_eq!(
        replaced["config"]["tags"],
        json!({}),
        "PUT resets omitted fields"
    );

    let (status, fifo) = put(
        &server,
        &t,
        "/v1/topics/orders.fifo",
        Some(json!({"content_based_deduplication": true})),
    )
    .await;
    assert_eq!(status, 201, "{fifo}");
    assert_eq!(fifo["kind"], "fifo");
    assert_eq!(fifo["config"]["content_based_deduplication"], true);
    for name in ["a1", "a2", "a3"] {
        assert_eq!(
            put(&server, &t, &format!("/v1/topics/{name}"), None)
                .await
                .0,
            201
        );
    }
    let (_, page) = server
        .call(Method::GET, "/v1/topics?limit=2", &t, None)
        .await;
    let names: Vec<&str> = page["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["a1", "a2"]);
    let next = page["next_token"].as_str().unwrap();
    let (_, rest) = server
        .call(
            Method::GET,
            &format!("/v1/topics?limit=10&next_token={next}"),
            &t,
            None,
        )
        .await;
    let names: Vec<&str> = rest["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["a3", "news", "orders.fifo"]);
    assert_eq!(rest["next_token"], Value::Null);

    assert_eq!(
        server
            .call(Method::DELETE, "/v1/topics/a1", &t, None)
            .await
            .0,
        204
    );
    assert_error(
        &server.call(Method::GET, "/v1/topics/a1", &t, None).await,
        404,
        "TopicNotFound",
    );
    assert_error(
        &server.call(Method::DELETE, "/v1/topics/a1", &t, None).await,
        404,
        "TopicNotFound",
    );
}

#[tokio::test]
async fn subscriptions_are_idempotent_checked_patched_and_removed() {
    let server = Server::start();
    let t = tenant_token("acme");
    put(&server, &t, "/v1/topics/news", None).await;
    put(&server, &t, "/v1/queues/inbox", None).await;
    put(&server, &t, "/v1/queues/other.fifo", None).await;
    let body =
        json!({"queue": "inbox", "filter_policy": {"kind": ["order"]}, "raw_delivery": true});
    let (status, sub) = subscribe(&server, &t, "news", body.clone()).await;
    assert_eq!(status, 201, "{sub}");
    assert_eq!(sub["topic"], "news");
    assert_eq!(sub["queue"], "inbox");
    assert_eq!(sub["filter_policy_scope"], "attributes");
    assert_eq!(sub["raw_delivery"], true);
    assert_eq!(
        sub["stats"],
        json!({"delivered": 0, "filtered_out": 0, "failed": 0})
    );
    let id = sub["id"].as_str().unwrap().to_owned();

    let (status, again) = subscribe(&server, &t, "news", body).await;
    assert_eq!(status, 200, "identical: the existing subscription");
    assert_eq!(again["id"], id.as_str());
    assert_error(
        &subscribe(&server, &t, "news", json!({"queue": "inbox"})).await,
        409,
        "Conflict",
    );
    assert_error(
        &subscribe(&server, &t, "news", json!({"queue": "nope"})).await,
        404,
        "QueueNotFound",
    );
    assert_error(
        &subscribe(&server, &t, "gone", json!({"queue": "inbox"})).await,
        404,
        "TopicNotFound",
    );
    let kind = subscribe(&server, &t, "news", json!({"queue": "other.fifo"})).await;
    assert_error(&kind, 400, "ValidationError");
    assert!(
        kind.1["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("queue:"),
        "{}",
        kind.1
    );
    let bad = subscribe(
        &server,
        &t,
        "news",
        json!({"queue": "inbox", "filter_policy": {"kind": "order"}}),
    )
    .await;
    assert_error(&bad, 400, "ValidationError");
    assert!(
        bad.1["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("filter_policy:"),
        "{}",
        bad.1
    );

    let (status, patched) = server
        .call(
            Method::PATCH,
            &format!("/v1/subscriptions/{id}"),
            &t,
            Some(json!({"filter_policy": null, "raw_delivery": false})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["filter_policy"], Value::Null);
    assert_eq!(patched["raw_delivery"], false);
    let (_, listed) = server
        .call(Method::GET, "/v1/topics/news/subscriptions", &t, None)
        .await;
    assert_eq!(listed["subscriptions"][0]["id"], id.as_str());
    let (_, topic) = server.call(Method::GET, "/v1/topics/news", &t, None).await;
    assert_eq!(topic["subscription_count"], 1);

    assert_eq!(
        server
            .call(Method::DELETE, &format!("/v1/subscriptions/{id}"), &t, None)
            .await
            .0,
        204
    );
    assert_error(
        &server
            .call(Method::GET, &format!("/v1/subscriptions/{id}"), &t, None)
            .await,
        404,
        "SubscriptionNotFound",
    );
    assert_error(
        &server
            .call(Method::GET, "/v1/subscriptions/not-an-id", &t, None)
            .await,
        404,
        "SubscriptionNotFound",
    );
}

#[tokio::test]
async fn publishing_fans_out_through_filter_policies() {
    let server = Server::start();
    let t = tenant_token("acme");
    put(&server, &t, "/v1/topics/orders", None).await;
    for q in ["all-raw", "all-env", "big-orders", "gifts"] {
        put(&server, &t, &format!("/v1/queues/{q}"), None).await;
    }
    subscribe(
        &server,
        &t,
        "orders",
        json!({"queue": "all-raw", "raw_delivery": true}),
    )
    .await;
    subscribe(&server, &t, "orders", json!({"queue": "all-env"})).await;
    let (_, big) = subscribe(
        &server,
        &t,
        "orders",
        json!({"queue": "big-orders", "filter_policy": {"amount": [{"numeric": [">=", 100]}]}}),
    )
    .await;
    subscribe(
        &server,
        &t,
        "orders",
        json!({"queue": "gifts", "filter_policy_scope": "body",
        "filter_policy": {"order": {"kind": [{"prefix": "gift"}]}}}),
    )
    .await;

    let attrs = json!({"amount": {"type": "Number", "value": "250"}});
    let (status, published) = post(&server, &t, "/v1/topics/orders/messages",
        json!({"body": "{\"order\": {\"kind\": \"gift-card\"}}", "attributes": attrs, "subject": "New order"})).await;
    assert_eq!(status, 201, "{published}");
    assert_eq!(published["duplicate"], false);
    assert_eq!(published["sequence_number"], Value::Null);
    let (status, small) = post(
        &server,
        &t,
        "/v1/topics/orders/messages",
        json!({"body": "plain", "attributes": {"amount": {"type": "Number", "value": "5"}}}),
    )
    .await;
    assert_eq!(status, 201, "{small}");

    let raw = receive_all(&server, &t, "all-raw").await;
    assert_eq!(raw.len(), 2);
    let first = raw
        .iter()
        .find(|m| m["body"] == "{\"order\": {\"kind\": \"gift-card\"}}")
        .unwrap();
    assert_eq!(
        first["attributes"], attrs,
        "raw copies keep their attributes"
    );
    assert_ne!(
        first["message_id"], published["message_id"],
        "each copy has its own id"
    );

    let enveloped = receive_all(&server, &t, "all-env").await;
    assert_eq!(enveloped.len(), 2);
    let envelope: Value = enveloped
        .iter()
        .map(|m| serde_json::from_str::<Value>(m["body"].as_str().unwrap()).unwrap())
        .find(|e| e["MessageId"] == published["message_id"])
        .unwrap();
    assert_eq!(envelope["Type"], "Notification");
    assert_eq!(envelope["Subject"], "New order");
    assert_eq!(
        envelope["Message"],
        "{\"order\": {\"kind\": \"gift-card\"}}"
    );
    assert_eq!(
        envelope["MessageAttributes"]["amount"],
        json!({"Type": "Number", "Value": "250"})
    );
    assert!(envelope["TopicArn"]
        .as_str()
        .unwrap()
        .starts_with("arn:aws:sns:us-east-1:"));
    assert!(envelope["TopicArn"].as_str().unwrap().ends_with(":orders"));
    assert!(envelope["Timestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        enveloped[0]["attributes"],
        json!({}),
        "enveloped copies carry no queue attributes"
    );

    assert_eq!(
        receive_all(&server, &t, "big-orders").await.len(),
        1,
        "only amount >= 100"
    );
    assert_eq!(
        receive_all(&server, &t, "gifts").await.len(),
        1,
        "body scope: only the gift"
    );
    let (_, stats) = server
        .call(
            Method::GET,
            &format!("/v1/subscriptions/{}", big["id"].as_str().unwrap()),
            &t,
            None,
        )
        .await;
    assert_eq!(
        stats["stats"],
        json!({"delivered": 1, "filtered_out": 1, "failed": 0})
    );

    // A batch: each entry on its own; a bad one fails alone.
    let (status, batch) = post(
        &server,
        &t,
        "/v1/topics/orders/messages/batch",
        json!({"entries": [
            {"id": "a", "body": "one"},
            {"id": "b", "body": "two", "subject": ""},
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{batch}");
    assert_eq!(batch["successful"][0]["id"], "a");
    assert_eq!(batch["failed"][0]["id"], "b");
    assert_eq!(batch["failed"][0]["code"], "ValidationError");
    assert_eq!(receive_all(&server, &t, "all-raw").await.len(), 1);

    let metrics = server.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_topic_deliveries_total{")
                && l.contains("outcome=\"filtered_out\"")
                && l.contains("topic=\"orders\"")),
        "{metrics}"
    );
}

#[tokio::test]
async fn fifo_topics_number_deduplicate_and_keep_order() {
    let server = Server::start();
    let t = tenant_token("acme");
    put(&server, &t, "/v1/topics/orders.fifo", None).await;
    put(&server, &t, "/v1/queues/ship.fifo", None).await;
    assert_eq!(
        subscribe(
            &server,
            &t,
            "orders.fifo",
            json!({"queue": "ship.fifo", "raw_delivery": true})
        )
        .await
        .0,
        201
    );
    assert_error(
        &post(
            &server,
            &t,
            "/v1/topics/orders.fifo/messages",
            json!({"body": "x", "deduplication_id": "d"}),
        )
        .await,
        400,
        "ValidationError",
    );
    let missing = post(
        &server,
        &t,
        "/v1/topics/orders.fifo/messages",
        json!({"body": "x", "group_id": "g"}),
    )
    .await;
    assert_error(&missing, 400, "ValidationError");
    assert!(missing.1["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("deduplication_id"));

    let mut numbers = Vec::new();
    for i in 0..5 {
        let (status, answer) = post(
            &server,
            &t,
            "/v1/topics/orders.fifo/messages",
            json!({"body": format!("m{i}"), "group_id": "g", "deduplication_id": format!("d{i}")}),
        )
        .await;
        assert_eq!(status, 201, "{answer}");
        numbers.push(
            answer["sequence_number"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap(),
        );
    }
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    let (status, dup) = post(
        &server,
        &t,
        "/v1/topics/orders.fifo/messages",
        json!({"body": "again", "group_id": "g", "deduplication_id": "d1"}),
    )
    .await;
    assert_eq!(status, 200, "{dup}");
    assert_eq!(dup["duplicate"], true);
    assert_eq!(dup["sequence_number"], numbers[1].to_string());

    let copies = receive_all(&server, &t, "ship.fifo").await;
    let bodies: Vec<&str> = copies.iter().map(|m| m["body"].as_str().unwrap()).collect();
    assert_eq!(bodies, vec!["m0", "m1", "m2", "m3", "m4"]);
    assert_eq!(copies[0]["group_id"], "g");
    assert_eq!(copies[0]["deduplication_id"], "d0");
}

#[tokio::test]
async fn scopes_and_tenants_are_enforced() {
    let server = Server::start();
    let t = tenant_token("acme");
    put(&server, &t, "/v1/topics/news", None).await;
    put(&server, &t, "/v1/queues/inbox", None).await;
    let (_, sub) = subscribe(&server, &t, "news", json!({"queue": "inbox"})).await;
    let id = sub["id"].as_str().unwrap();

    let publisher = token(Some("acme"), "topics:publish");
    assert_eq!(
        server
            .call(Method::GET, "/v1/topics/news", &publisher, None)
            .await
            .0,
        200
    );
    assert_error(
        &put(&server, &publisher, "/v1/topics/x", None).await,
        403,
        "Forbidden",
    );
    assert_error(
        &subscribe(&server, &publisher, "news", json!({"queue": "inbox"})).await,
        403,
        "Forbidden",
    );
    assert_eq!(
        post(
            &server,
            &publisher,
            "/v1/topics/news/messages",
            json!({"body": "hi"})
        )
        .await
        .0,
        201
    );
    let sender = token(Some("acme"), "messages:send queues:manage");
    assert_error(
        &post(
            &server,
            &sender,
            "/v1/topics/news/messages",
            json!({"body": "hi"}),
        )
        .await,
        403,
        "Forbidden",
    );
    assert_error(
        &server.call(Method::GET, "/v1/topics", &sender, None).await,
        403,
        "Forbidden",
    );

    // Another tenant sees none of it, and cannot subscribe its topic to acme's queue.
    let other = tenant_token("globex");
    assert_error(
        &server
            .call(Method::GET, "/v1/topics/news", &other, None)
            .await,
        404,
        "TopicNotFound",
    );
    assert_error(
        &post(
            &server,
            &other,
            "/v1/topics/news/messages",
            json!({"body": "x"}),
        )
        .await,
        404,
        "TopicNotFound",
    );
    assert_error(
        &server
            .call(
                Method::GET,
                &format!("/v1/subscriptions/{id}"),
                &other,
                None,
            )
            .await,
        404,
        "SubscriptionNotFound",
    );
    assert_error(
        &server
            .call(
                Method::DELETE,
                &format!("/v1/subscriptions/{id}"),
                &other,
                None,
            )
            .await,
        404,
        "SubscriptionNotFound",
    );
    put(&server, &other, "/v1/topics/news", None).await;
    assert_error(
        &subscribe(&server, &other, "news", json!({"queue": "inbox"})).await,
        404,
        "QueueNotFound",
    );
    let (_, listed) = server.call(Method::GET, "/v1/topics", &other, None).await;
    assert_eq!(listed["topics"].as_array().unwrap().len(), 1);
    assert_eq!(listed["topics"][0]["subscription_count"], 0);
}

#[tokio::test]
async fn deleting_a_queue_or_the_tenant_removes_subscriptions_and_topics() {
    let server = Server::start();
    let t = tenant_token("acme");
    put(&server, &t, "/v1/topics/news", None).await;
    put(&server, &t, "/v1/queues/inbox", None).await;
    put(&server, &t, "/v1/queues/keep", None).await;
    let (_, gone) = subscribe(&server, &t, "news", json!({"queue": "inbox"})).await;
    subscribe(&server, &t, "news", json!({"queue": "keep"})).await;
    assert_eq!(
        server
            .call(Method::DELETE, "/v1/queues/inbox", &t, None)
            .await
            .0,
        204
    );
    assert_error(
        &server
            .call(
                Method::GET,
                &format!("/v1/subscriptions/{}", gone["id"].as_str().unwrap()),
                &t,
                None,
            )
            .await,
        404,
        "SubscriptionNotFound",
    );
    let (_, topic) = server.call(Method::GET, "/v1/topics/news", &t, None).await;
    assert_eq!(topic["subscription_count"], 1);

    let admin = token(None, "admin");
    assert_eq!(
        server
            .call(Method::DELETE, "/v1/admin/tenants/acme", &admin, None)
            .await
            .0,
        204
    );
    // Tokens of the deletion's second are refused: re-create the tenant and mint one.
    let created = post(&server, &admin, "/v1/admin/tenants", json!({"id": "acme"})).await;
    assert_eq!(created.0, 201, "{}", created.1);
    let (status, minted) = post(
        &server,
        &admin,
        "/v1/admin/tenants/acme/tokens",
        json!({"scopes": ["topics:manage"]}),
    )
    .await;
    assert_eq!(status, 201, "{minted}");
    let fresh = minted["token"].as_str().unwrap();
    let (status, listed) = server.call(Method::GET, "/v1/topics", fresh, None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed["topics"],
        json!([]),
        "the tenant's topics went with it"
    );
}

#[tokio::test]
async fn bad_topic_input_names_the_field_and_changes_nothing() {
    let server = Server::start();
    let t = tenant_token("acme");
    put(&server, &t, "/v1/topics/news", None).await;
    let cases = [
        (Method::PUT, "/v1/topics/bad name", json!({}), "topic"),
        (
            Method::PUT,
            "/v1/topics/plain",
            json!({"content_based_deduplication": true}),
            "content_based_deduplication",
        ),
        (
            Method::POST,
            "/v1/topics/news/messages",
            json!({"body": "x", "deduplication_id": "d"}),
            "deduplication_id",
        ),
        (
            Method::POST,
            "/v1/topics/news/messages",
            json!({"body": "x", "subject": "a\nb"}),
            "subject",
        ),
        (
            Method::POST,
            "/v1/topics/news/messages",
            json!({"body": ""}),
            "body",
        ),
        (
            Method::POST,
            "/v1/topics/news/subscriptions",
            json!({"queue": "q", "filter_policy_scope": "everything"}),
            "filter_policy_scope",
        ),
    ];
    for (method, path, body, field) in cases {
        let answer = server
            .call(method.clone(), path, &t, Some(body.clone()))
            .await;
        assert_eq!(answer.0, 400, "{method} {path} {body}: {}", answer.1);
        let message = answer.1["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(field),
            "{path} {body}: {message} should name {field}"
        );
    }
    let (_, listed) = server.call(Method::GET, "/v1/topics", &t, None).await;
    assert_eq!(
        listed["topics"].as_array().unwrap().len(),
        1,
        "nothing was created"
    );
}

/// The fan-out crash test: publishers publish to a topic with five subscriptions (two of them
/// filtered) while the server is SIGKILLed four times (and, on Redis, Redis itself once);
/// afterwards every acknowledged publish has exactly one copy in each matching queue, and no
/// publish (acknowledged or not) has two copies anywhere.
pub(crate) async fn publishes_survive_kills(
    dir: &std::path::Path,
    args: &[&str],
    redis: Option<&sluice_testkit::RedisServer>,
) {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    const TARGET: usize = 5000;
    let t = tenant_token("acme");
    let mut server = Server::start_in(dir, args);
    put(&server, &t, "/v1/topics/events", None).await;
    // (queue, filter on the `kind` attribute, raw delivery)
    let subscriptions = [
        ("all-1", None, true),
        ("all-2", None, false),
        ("kind-a", Some("a"), true),
        ("kind-b", Some("b"), true),
        ("all-3", None, true),
    ];
    for (queue, kind, raw) in subscriptions {
        put(&server, &t, &format!("/v1/queues/{queue}"), None).await;
        let mut body = json!({"queue": queue, "raw_delivery": raw});
        if let Some(kind) = kind {
            body["filter_policy"] = json!({"kind": [kind]});
        }
        assert_eq!(subscribe(&server, &t, "events", body).await.0, 201);
    }

    // Publishers that follow the server across restarts; a publish that fails is not retried
    // (its body is never used again), so an unacknowledged one may be delivered or not.
    let base = Arc::new(Mutex::new(server.base.clone()));
    let acknowledged: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let publishers: Vec<_> = (0..4)
        .map(|p| {
            let (base, acknowledged, stop, token) =
                (base.clone(), acknowledged.clone(), stop.clone(), t.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut n: u64 = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let body = format!("p{p}-{n}");
                    let kind = if n.is_multiple_of(2) { "a" } else { "b" };
                    let url = format!("{}/v1/topics/events/messages", base.lock().unwrap());
                    let answer = client
                        .post(url)
                        .header("authorization", format!("Bearer {token}"))
                        .json(&json!({"body": body, "attributes": {"kind": {"type": "String", "value": kind}}}))
                        .timeout(Duration::from_secs(5))
                        .send()
                        .await;
                    match answer {
                        Ok(a) if a.status() == 201 => acknowledged.lock().unwrap().push(body),
                        _ => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
            })
        })
        .collect();
    let acked = || acknowledged.lock().unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(120);
    for (kill, mark) in [800, 1800, 2800, 3800].into_iter().enumerate() {
        while acked() < mark {
            assert!(Instant::now() < deadline, "publishing stopped below {mark}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        server.kill();
        if let (1, Some(redis)) = (kill, redis) {
            redis.kill();
            redis.restart().unwrap();
        }
        server = Server::start_in(dir, args);
        *base.lock().unwrap() = server.base.clone();
    }
    while acked() < TARGET {
        assert!(
            Instant::now() < deadline,
            "publishing stopped below {TARGET}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for publisher in publishers {
        publisher.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();

    // Which queues each acknowledged publish must reach.
    let expected = |queue: &str, body: &str| -> bool {
        let n: usize = body.rsplit('-').next().unwrap().parse().unwrap();
        let kind = if n.is_multiple_of(2) { "a" } else { "b" };
        match queue {
            "kind-a" => kind == "a",
            "kind-b" => kind == "b",
            _ => true,
        }
    };
    // Wait until each queue holds at least its acknowledged copies (recovery of interrupted
    // fan-outs included), then long enough for a late duplicate to show (recovery grace).
    let depth = |queue: &'static str| {
        let request = server.request(Method::GET, &format!("/v1/queues/{queue}"), &t);
        async move {
            let (status, answer) = crate::harness::decode(request.send().await.unwrap()).await;
            (status == 200).then(|| answer["stats"]["visible"].as_u64().unwrap_or(0) as usize)
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    for (queue, _, _) in subscriptions {
        let want = acknowledged.iter().filter(|b| expected(queue, b)).count();
        while depth(queue).await.unwrap_or(0) < want {
            assert!(
                Instant::now() < deadline,
                "{queue} never got its {want} copies"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(7)).await;

    let mut report = BTreeMap::new();
    for (queue, _, raw) in subscriptions {
        let mut copies: HashMap<String, usize> = HashMap::new();
        for body in crate::harness::drain(&server, queue, &t).await {
            let published = if raw {
                body
            } else {
                let envelope: Value = serde_json::from_str(&body).unwrap();
                envelope["Message"].as_str().unwrap().to_owned()
            };
            *copies.entry(published).or_default() += 1;
        }
        let lost = acknowledged
            .iter()
            .filter(|b| expected(queue, b) && !copies.contains_key(*b))
            .count();
        let duplicated = copies.values().filter(|n| **n > 1).count();
        report.insert(queue, (lost, duplicated));
    }
    eprintln!(
        "fan-out crash test: {} acknowledged publishes; (lost, duplicated) per queue: {report:?}",
        acknowledged.len()
    );
    assert!(
        report.values().all(|r| *r == (0, 0)),
        "copies lost or duplicated: {report:?}"
    );
}

/// The fan-out crash test on the embedded engine (a publish and its copies are one commit).
#[tokio::test]
async fn acknowledged_publishes_survive_kills() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--jwt-secret", crate::harness::SECRET];
    publishes_survive_kills(dir.path(), &args, None).await;
}

#[tokio::test]
async fn max_topics_is_enforced() {
    let server = Server::start();
    let admin = token(None, "admin");
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/admin/tenants",
            &admin,
            Some(json!({"id": "small", "quotas": {"max_topics": 2}})),
        )
        .await;
    assert_eq!(status, 201);
    let t = tenant_token("small");
    assert_eq!(put(&server, &t, "/v1/topics/one", None).await.0, 201);
    assert_eq!(put(&server, &t, "/v1/topics/two", None).await.0, 201);
    let response = server
        .request(Method::PUT, "/v1/topics/three", &t)
        .send()
        .await
        .unwrap();
    let retry_after = response.headers().get("retry-after").cloned();
    let answer = crate::harness::decode(response).await;
    assert_error(&answer, 429, "QuotaExceeded");
    assert!(retry_after.is_some(), "a 429 carries Retry-After");
    // Replacing an existing topic is not a creation; another tenant is not limited.
    assert_eq!(put(&server, &t, "/v1/topics/two", None).await.0, 200);
    assert_eq!(
        put(&server, &tenant_token("big"), "/v1/topics/three", None)
            .await
            .0,
        201
    );
    assert_eq!(
        server
            .call(Method::DELETE, "/v1/topics/one", &t, None)
            .await
            .0,
        204
    );
    assert_eq!(put(&server, &t, "/v1/topics/three", None).await.0, 201);
}

/// A deleted and re-created topic delivers to its new subscriptions only (its record starts
/// its versions again, which the compiled-policy cache once took for the old incarnation):
/// the first publish reaches `a`, the second `b` alone, and `b`'s counters say so.
pub(crate) async fn recreated_topic_delivers_to_its_own_subscriptions(server: &Server) {
    let t = tenant_token("acme");
    for queue in ["a", "b"] {
        let (status, answer) = put(server, &t, &format!("/v1/queues/{queue}"), None).await;
        assert_eq!(status, 201, "{answer}");
    }
    let publish = |body: &'static str| {
        let t = t.clone();
        async move {
            let answer = post(server, &t, "/v1/topics/t/messages", json!({ "body": body })).await;
            assert_eq!(answer.0, 201, "{}", answer.1);
        }
    };
    assert_eq!(put(server, &t, "/v1/topics/t", None).await.0, 201);
    let (status, _) = subscribe(server, &t, "t", json!({"queue": "a", "raw_delivery": true})).await;
    assert_eq!(status, 201);
    publish("first").await;

    let (status, _) = server.call(Method::DELETE, "/v1/topics/t", &t, None).await;
    assert_eq!(status, 204);
    assert_eq!(put(server, &t, "/v1/topics/t", None).await.0, 201);
    let (status, sub) =
        subscribe(server, &t, "t", json!({"queue": "b", "raw_delivery": true})).await;
    assert_eq!(status, 201, "{sub}");
    publish("second").await;

    let bodies = |messages: Vec<Value>| -> Vec<String> {
        messages
            .iter()
            .map(|m| m["body"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(bodies(receive_all(server, &t, "a").await), ["first"]);
    assert_eq!(bodies(receive_all(server, &t, "b").await), ["second"]);
    let id = sub["id"].as_str().unwrap();
    let (_, sub) = server
        .call(Method::GET, &format!("/v1/subscriptions/{id}"), &t, None)
        .await;
    assert_eq!(sub["stats"]["delivered"], 1, "{sub}");
}

#[tokio::test]
async fn a_recreated_topic_delivers_to_its_own_subscriptions() {
    let server = Server::start();
    recreated_topic_delivers_to_its_own_subscriptions(&server).await;
}
