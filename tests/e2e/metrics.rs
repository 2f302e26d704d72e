//! `GET /metrics`: Prometheus text that parses, request metrics labelled by route template,
//! message counters by tenant, queue and event on each engine, queue gauges that follow the
//! queue's stats (stored bytes included), `--metrics-per-queue false`, and each engine's internals (commits, Redis
//! calls and errors, waiting long polls).

use crate::harness::{tenant_token, Server, SECRET};
use reqwest::Method;
use serde_json::{json, Value};
use sluice_testkit::{unique_prefix, RedisServer};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

type Labels = BTreeMap<String, String>;

/// One `name{labels} value` sample.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Labels,
    value: f64,
}

/// Parses the text format, failing on any line that is neither a comment nor a sample.
fn parse(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line:?}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value: {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, Labels::new()),
            Some((name, rest)) => {
                let body = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed labels: {line:?}"));
                (name, parse_labels(body, line))
            }
        };
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name: {line:?}"
        );
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    samples
}

fn parse_labels(mut body: &str, line: &str) -> Labels {
    let mut labels = Labels::new();
    while !body.is_empty() {
        let (key, rest) = body
            .split_once("=\"")
            .unwrap_or_else(|| panic!("bad label: {line:?}"));
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => {
                    if let Some((_, c)) = chars.next() {
                        value.push(if c == 'n' { '\n' } else { c });
                    }
                }
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => panic!("unterminated label value: {line:?}"),
            }
        };
        labels.insert(key.to_owned(), value);
        body = rest[end + 1..]
            .strip_prefix(',')
            .unwrap_or(&rest[end + 1..]);
    }
    labels
}

async fn scrape(server: &Server) -> Vec<Sample> {
    let response = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    parse(&response.text().await.unwrap())
}

/// The value of the series with exactly these labels.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: Labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    samples
        .iter()
        .find(|s| s.name == name && s.labels == wanted)
        .map(|s| s.value)
}

/// Scrapes until `done` holds, for at most 20 s (the sampler refreshes every few seconds).
async fn scrape_until(server: &Server, what: &str, done: impl Fn(&[Sample]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let samples = scrape(server).await;
        if done(&samples) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never: {what}; last scrape {samples:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn send(server: &Server, t: &str, queue: &str, body: Value) {
    let answer = server
        .call(
            Method::POST,
            &format!("/v1/queues/{queue}/messages"),
            t,
            Some(body),
        )
        .await;
    assert_eq!(answer.0, 201, "{}", answer.1);
}

/// Sends 5 (3 one by one, 2 in a batch), receives 3 in one call, deletes 2 (one alone, one in
/// a batch), dead-letters the third, has one more message moved to the DLQ by a receive, and
/// checks the counters.
async fn counters_count_messages(server: &Server) {
    let t = tenant_token("acme");
    for queue in ["dlq", "other"] {
        assert_eq!(
            server
                .call(Method::PUT, &format!("/v1/queues/{queue}"), &t, None)
                .await
                .0,
            201
        );
    }
    let policy = |max: u32| json!({"redrive_policy": {"dead_letter_queue": "dlq", "max_receive_count": max}});
    for (queue, max) in [("orders", 5), ("poison", 1)] {
        let path = format!("/v1/queues/{queue}");
        assert_eq!(
            server
                .call(Method::PUT, &path, &t, Some(policy(max)))
                .await
                .0,
            201
        );
    }
    for n in 0..3 {
        send(server, &t, "orders", json!({"body": format!("m{n}")})).await;
    }
    let batch = server
        .call(
            Method::POST,
            "/v1/queues/orders/messages/batch",
            &t,
            Some(json!({"entries": [{"id": "a", "body": "m3"}, {"id": "b", "body": "m4"}]})),
        )
        .await;
    assert_eq!(batch.0, 200, "{}", batch.1);
    let (status, got) = server
        .call(
            Method::POST,
            "/v1/queues/orders/messages/receive",
            &t,
            Some(json!({"max_messages": 3, "visibility_timeout_seconds": 600})),
        )
        .await;
    assert_eq!(status, 200, "{got}");
    let handles: Vec<String> = got["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["receipt_handle"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(handles.len(), 3, "{got}");
    // An empty receive of the other queue counts nothing.
    server
        .call(
            Method::POST,
            "/v1/queues/other/messages/receive",
            &t,
            Some(json!({"wait_seconds": 0})),
        )
        .await;
    let one = format!("/v1/queues/orders/messages/{}", handles[0]);
    assert_eq!(server.call(Method::DELETE, &one, &t, None).await.0, 204);
    let batch = server
        .call(
            Method::POST,
            "/v1/queues/orders/messages/delete",
            &t,
            Some(json!({"entries": [{"id": "x", "receipt_handle": handles[1]}]})),
        )
        .await;
    assert_eq!(
        batch.1["successful"].as_array().unwrap().len(),
        1,
        "{}",
        batch.1
    );
    let dead = format!("/v1/queues/orders/messages/{}/dead-letter", handles[2]);
    let reason = Some(json!({"reason": "bad"}));
    assert_eq!(server.call(Method::POST, &dead, &t, reason).await.0, 204);
    // Received once, then moved by the next receive instead of being delivered again.
    send(server, &t, "poison", json!({"body": "p"})).await;
    let receive = Some(json!({"visibility_timeout_seconds": 0}));
    for expected in [1, 0] {
        let (_, got) = server
            .call(
                Method::POST,
                "/v1/queues/poison/messages/receive",
                &t,
                receive.clone(),
            )
            .await;
        assert_eq!(got["messages"].as_array().unwrap().len(), expected, "{got}");
    }

    let samples = scrape(server).await;
    let messages = |queue: &str, event: &str| {
        value(
            &samples,
            "sluice_messages_total",
            &[("tenant", "acme"), ("queue", queue), ("event", event)],
        )
    };
    assert_eq!(messages("orders", "sent"), Some(5.0));
    assert_eq!(messages("orders", "received"), Some(3.0));
    assert_eq!(messages("orders", "deleted"), Some(2.0));
    assert_eq!(messages("orders", "dead_lettered"), Some(1.0));
    assert_eq!(messages("poison", "received"), Some(1.0));
    assert_eq!(messages("poison", "dead_lettered"), Some(1.0));
    assert_eq!(messages("dlq", "sent"), None, "a move is not a send");
    assert_eq!(messages("other", "sent"), None);
    assert_eq!(messages("other", "received"), None);
}

#[tokio::test]
async fn message_counters_by_tenant_queue_and_event() {
    let server = Server::start();
    counters_count_messages(&server).await;
}

fn redis_gateway(redis: &RedisServer) -> (tempfile::TempDir, Server) {
    crate::harness::redis_gateway(&redis.url(), &unique_prefix("e2e-metrics"), &[])
}

#[tokio::test]
async fn message_counters_on_redis() {
    let redis = RedisServer::start().unwrap();
    let (_dir, server) = redis_gateway(&redis);
    counters_count_messages(&server).await;
}

#[tokio::test]
async fn request_metrics_are_labelled_by_route_template() {
    let server = Server::start();
    let t = tenant_token("acme");
    assert_eq!(
        server.call(Method::PUT, "/v1/queues/q1", &t, None).await.0,
        201
    );
    for _ in 0..3 {
        send(&server, &t, "q1", json!({"body": "x"})).await;
    }
    let missing = server
        .call(
            Method::POST,
            "/v1/queues/nope/messages",
            &t,
            Some(json!({"body": "x"})),
        )
        .await;
    assert_eq!(missing.0, 404);
    assert_eq!(
        server.call(Method::GET, "/no/such/route", &t, None).await.0,
        404
    );

    let samples = scrape(&server).await;
    let route = "/v1/queues/{queue}/messages";
    let requests = |method: &str, route: &str, status: &str| {
        value(
            &samples,
            "sluice_http_requests_total",
            &[("method", method), ("route", route), ("status", status)],
        )
    };
    assert_eq!(requests("POST", route, "201"), Some(3.0));
    assert_eq!(requests("POST", route, "404"), Some(1.0));
    assert_eq!(requests("PUT", "/v1/queues/{queue}", "201"), Some(1.0));
    assert_eq!(requests("GET", "unmatched", "404"), Some(1.0));
    assert_eq!(
        value(
            &samples,
            "sluice_http_request_duration_seconds_count",
            &[("method", "POST"), ("route", route)]
        ),
        Some(4.0)
    );
    assert!(
        samples
            .iter()
            .any(|s| s.name == "sluice_http_request_duration_seconds_bucket"
                && s.labels.get("le").map(String::as_str) == Some("+Inf")),
        "a histogram, not a summary"
    );
    for s in &samples {
        if let Some(route) = s.labels.get("route") {
            assert!(
                !route.contains("q1") && !route.contains("nope") && !route.contains("/no/"),
                "a raw path as route label: {s:?}"
            );
        }
    }
}

fn gauge(samples: &[Sample], tenant: &str, queue: Option<&str>, state: &str) -> Option<f64> {
    let mut labels = vec![("tenant", tenant), ("state", state)];
    if let Some(queue) = queue {
        labels.push(("queue", queue));
    }
    value(samples, "sluice_queue_messages", &labels)
}

#[tokio::test]
async fn queue_gauges_follow_the_queue_stats_and_drop_deleted_queues() {
    gauges_follow_stats(&Server::start()).await;
}

#[tokio::test]
async fn queue_gauges_on_redis() {
    let redis = RedisServer::start().unwrap();
    let (_dir, server) = redis_gateway(&redis);
    gauges_follow_stats(&server).await;
}

/// 2 visible, 1 in flight, 1 delayed: the gauges match the queue's stats, an empty queue
/// reports 0 for every state, and a deleted queue's gauges go to 0 or away.
async fn gauges_follow_stats(server: &Server) {
    let t = tenant_token("acme");
    assert_eq!(
        server
            .call(Method::PUT, "/v1/queues/jobs", &t, None)
            .await
            .0,
        201
    );
    assert_eq!(
        server
            .call(Method::PUT, "/v1/queues/empty", &t, None)
            .await
            .0,
        201
    );
    for _ in 0..3 {
        send(server, &t, "jobs", json!({"body": "now"})).await;
    }
    send(
        server,
        &t,
        "jobs",
        json!({"body": "later", "delay_seconds": 600}),
    )
    .await;
    let (_, got) = server
        .call(
            Method::POST,
            "/v1/queues/jobs/messages/receive",
            &t,
            Some(json!({"visibility_timeout_seconds": 600})),
        )
        .await;
    assert_eq!(got["messages"].as_array().unwrap().len(), 1, "{got}");
    let (_, queue) = server.call(Method::GET, "/v1/queues/jobs", &t, None).await;
    let stats = &queue["stats"];
    assert_eq!(
        (&stats["visible"], &stats["in_flight"], &stats["delayed"]),
        (&json!(2), &json!(1), &json!(1)),
        "{queue}"
    );

    // "now" three times and "later": the bytes of every message, whatever its state.
    assert_eq!(stats["stored_bytes"], json!(3 * 3 + 5), "{queue}");
    let stored = |s: &[Sample], queue: &str| {
        value(
            s,
            "sluice_queue_stored_bytes",
            &[("tenant", "acme"), ("queue", queue)],
        )
    };

    let jobs = Some("jobs");
    scrape_until(server, "gauges equal the queue's stats", |s| {
        gauge(s, "acme", jobs, "visible") == Some(2.0)
            && gauge(s, "acme", jobs, "in_flight") == Some(1.0)
            && gauge(s, "acme", jobs, "delayed") == Some(1.0)
            && stored(s, "jobs") == Some(14.0)
    })
    .await;
    let samples = scrape(server).await;
    for state in ["visible", "in_flight", "delayed"] {
        assert_eq!(
            gauge(&samples, "acme", Some("empty"), state),
            Some(0.0),
            "{state}"
        );
    }
    let age = |s: &[Sample], queue: &str| {
        value(
            s,
            "sluice_queue_oldest_message_age_seconds",
            &[("tenant", "acme"), ("queue", queue)],
        )
    };
    assert!(age(&samples, "jobs").is_some_and(|a| (0.0..60.0).contains(&a)));
    assert_eq!(age(&samples, "empty"), Some(0.0));
    assert_eq!(stored(&samples, "empty"), Some(0.0));

    assert_eq!(
        server
            .call(Method::DELETE, "/v1/queues/jobs", &t, None)
            .await
            .0,
        204
    );
    scrape_until(server, "a deleted queue's gauges are 0 or gone", |s| {
        ["visible", "in_flight", "delayed"]
            .iter()
            .all(|state| gauge(s, "acme", jobs, state).unwrap_or(0.0) == 0.0)
            && age(s, "jobs").unwrap_or(0.0) == 0.0
            && stored(s, "jobs").unwrap_or(0.0) == 0.0
    })
    .await;
}

#[tokio::test]
async fn metrics_per_queue_false_drops_the_queue_label() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(
        dir.path(),
        &["--jwt-secret", SECRET, "--metrics-per-queue", "false"],
    );
    let t = tenant_token("acme");
    for queue in ["a", "b"] {
        assert_eq!(
            server
                .call(Method::PUT, &format!("/v1/queues/{queue}"), &t, None)
                .await
                .0,
            201
        );
    }
    send(&server, &t, "a", json!({"body": "1"})).await;
    send(&server, &t, "a", json!({"body": "2"})).await;
    send(&server, &t, "b", json!({"body": "3"})).await;
    scrape_until(&server, "the tenant's gauge adds its queues up", |s| {
        gauge(s, "acme", None, "visible") == Some(3.0)
            && value(s, "sluice_queue_stored_bytes", &[("tenant", "acme")]) == Some(3.0)
    })
    .await;
    let samples = scrape(&server).await;
    assert_eq!(
        value(
            &samples,
            "sluice_messages_total",
            &[("tenant", "acme"), ("event", "sent")]
        ),
        Some(3.0)
    );
    let labelled: Vec<_> = samples
        .iter()
        .filter(|s| s.labels.contains_key("queue"))
        .collect();
    assert!(
        labelled.is_empty(),
        "series with a queue label: {labelled:?}"
    );
}

/// More queues than the sampler lists in one page: every page is walked.
#[tokio::test]
async fn the_sampler_walks_every_page_of_queues() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(
        dir.path(),
        &["--jwt-secret", SECRET, "--metrics-per-queue", "false"],
    );
    let t = tenant_token("many");
    for n in 0..130 {
        let queue = format!("q{n:03}");
        let path = format!("/v1/queues/{queue}");
        assert_eq!(server.call(Method::PUT, &path, &t, None).await.0, 201);
        send(&server, &t, &queue, json!({"body": "x"})).await;
    }
    scrape_until(&server, "130 visible messages over 130 queues", |s| {
        gauge(s, "many", None, "visible") == Some(130.0)
    })
    .await;
}

/// Whether a histogram `name` has recorded at least one observation.
fn observed(samples: &[Sample], name: &str) -> bool {
    value(samples, &format!("{name}_count"), &[]).is_some_and(|count| count >= 1.0)
}

/// A long poll counts in `sluice_long_polls_waiting` while it waits, and stops counting when
/// a send answers it.
async fn long_polls_waiting_follow_a_poll(server: &Server) {
    let t = tenant_token("acme");
    assert_eq!(
        server.call(Method::PUT, "/v1/queues/q", &t, None).await.0,
        201
    );
    let poll = server
        .request(Method::POST, "/v1/queues/q/messages/receive", &t)
        .json(&json!({"wait_seconds": 20}))
        .send();
    let poll = tokio::spawn(poll);
    scrape_until(server, "one long poll waiting", |s| {
        value(s, "sluice_long_polls_waiting", &[]) == Some(1.0)
    })
    .await;
    send(server, &t, "q", json!({"body": "wake"})).await;
    let answered = poll.await.unwrap().unwrap();
    assert_eq!(answered.status(), 200);
    scrape_until(server, "no long poll waiting", |s| {
        value(s, "sluice_long_polls_waiting", &[]) == Some(0.0)
    })
    .await;
}

#[tokio::test]
async fn embedded_engine_internals_commits_and_long_polls() {
    let server = Server::start();
    long_polls_waiting_follow_a_poll(&server).await;
    let samples = scrape(&server).await;
    assert!(
        observed(&samples, "sluice_embedded_commit_duration_seconds"),
        "{samples:#?}"
    );
    assert!(
        observed(&samples, "sluice_embedded_commit_batch_jobs"),
        "{samples:#?}"
    );
    // Buckets, not a summary, so that latencies add up across gateways.
    assert!(samples
        .iter()
        .any(|s| s.name == "sluice_embedded_commit_duration_seconds_bucket"));
    // The retention sweep's first round comes a second after start.
    scrape_until(&server, "a round of retention expiry counted", |s| {
        value(
            s,
            "sluice_background_runs_total",
            &[("job", "retention_expiry"), ("outcome", "ok")],
        )
        .is_some_and(|n| n >= 1.0)
    })
    .await;
}

#[tokio::test]
async fn redis_engine_internals_calls_and_errors() {
    let redis = RedisServer::start().unwrap();
    let (_dir, server) = redis_gateway(&redis);
    long_polls_waiting_follow_a_poll(&server).await;
    let samples = scrape(&server).await;
    assert!(
        observed(&samples, "sluice_redis_call_duration_seconds"),
        "{samples:#?}"
    );
    assert_eq!(
        value(
            &samples,
            "sluice_redis_errors_total",
            &[("kind", "unavailable")]
        ),
        None,
        "no errors while Redis answers"
    );
    redis.stop();
    let t = tenant_token("acme");
    let answer = server
        .call(
            Method::POST,
            "/v1/queues/q/messages",
            &t,
            Some(json!({"body": "during the outage"})),
        )
        .await;
    assert_eq!(answer.0, 503, "{}", answer.1);
    scrape_until(&server, "a Redis error counted", |s| {
        value(s, "sluice_redis_errors_total", &[("kind", "unavailable")]).is_some_and(|n| n >= 1.0)
    })
    .await;
}
