//! Sluice on Redis, end to end: stateless gateways sharing one Redis (or a Cluster), outages
//! answered with 503 and recovered from without help, and acknowledged sends surviving a
//! crash of `redis-server` itself.

use crate::harness::{
    assert_error, assert_none_lost, drain, redis_gateway, stream_sends, tenant_token, Server,
    SECRET,
};
use reqwest::Method;
use serde_json::json;
use sluice_testkit::{unique_prefix, RedisCluster, RedisServer};
use std::time::{Duration, Instant};

/// Sends through one gateway, receives through the other, and measures how fast a long poll
/// waiting on the second is woken by a send through the first.
async fn two_gateways_share_queues(store: &str) {
    let prefix = unique_prefix("e2e");
    let (_a_dir, a) = redis_gateway(store, &prefix, &[]);
    let (_b_dir, b) = redis_gateway(store, &prefix, &[]);
    let t = tenant_token("acme");
    assert_eq!(
        a.call(Method::PUT, "/v1/queues/shared", &t, None).await.0,
        201
    );
    assert_eq!(
        b.call(Method::PUT, "/v1/queues/shared", &t, None).await.0,
        200,
        "B sees A's queue"
    );
    a.call(
        Method::POST,
        "/v1/queues/shared/messages",
        &t,
        Some(json!({"body": "via a"})),
    )
    .await;
    let (_, got) = b
        .call(
            Method::POST,
            "/v1/queues/shared/messages/receive",
            &t,
            Some(json!({"max_messages": 10})),
        )
        .await;
    assert_eq!(got["messages"][0]["body"], "via a");
    let handle = got["messages"][0]["receipt_handle"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        a.call(
            Method::DELETE,
            &format!("/v1/queues/shared/messages/{handle}"),
            &t,
            None
        )
        .await
        .0,
        204
    );

    let mut wake_delays = Vec::new();
    for round in 0..3 {
        let waiter = {
            let request = b
                .request(Method::POST, "/v1/queues/shared/messages/receive", &t)
                .json(&json!({"wait_seconds": 10}));
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                let answered = Instant::now();
                (
                    answered,
                    response.json::<serde_json::Value>().await.unwrap(),
                )
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let body = format!("wake {round}");
        a.call(
            Method::POST,
            "/v1/queues/shared/messages",
            &t,
            Some(json!({"body": body})),
        )
        .await;
        let sent = Instant::now();
        let (answered, answer) = waiter.await.unwrap();
        assert_eq!(answer["messages"][0]["body"], body.as_str());
        wake_delays.push(answered.saturating_duration_since(sent));
        let handle = answer["messages"][0]["receipt_handle"]
            .as_str()
            .unwrap()
            .to_owned();
        b.call(
            Method::DELETE,
            &format!("/v1/queues/shared/messages/{handle}"),
            &t,
            None,
        )
        .await;
    }
    wake_delays.sort();
    let median = wake_delays[1];
    assert!(
        median < Duration::from_millis(100),
        "a long poll on one gateway is woken within 100 ms by a send through another: {wake_delays:?}"
    );
}

#[tokio::test]
async fn two_gateways_on_one_redis() {
    let redis = RedisServer::start().unwrap();
    two_gateways_share_queues(&redis.url()).await;
}

#[tokio::test]
async fn two_gateways_on_a_redis_cluster() {
    let cluster = RedisCluster::start(3).unwrap();
    two_gateways_share_queues(&cluster.url()).await;
}

#[tokio::test]
async fn an_outage_answers_503_and_recovers_by_itself() {
    let redis =
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let (_dir, server) = redis_gateway(&redis.url(), "outage", &["--redis-timeout-ms", "1000"]);
    let t = tenant_token("acme");
    assert_eq!(
        server.call(Method::PUT, "/v1/queues/q", &t, None).await.0,
        201
    );
    assert_eq!(server.probe("/readyz").await, 200);

    redis.stop();
    let started = Instant::now();
    assert_eq!(server.probe("/readyz").await, 503);
    let response = server
        .request(Method::POST, "/v1/queues/q/messages", &t)
        .json(&json!({"body": "during the outage"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let (status, body) = crate::harness::decode(response).await;
    assert_error(&(status, body), 503, "Unavailable");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answers are bounded by the timeout: {:?}",
        started.elapsed()
    );
    assert_eq!(server.probe("/healthz").await, 200, "alive throughout");

    redis.restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let answer = server
            .call(
                Method::POST,
                "/v1/queues/q/messages",
                &t,
                Some(json!({"body": "after"})),
            )
            .await;
        if answer.0 == 201 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not recover: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(server.probe("/readyz").await, 200);
    let (_, got) = server
        .call(
            Method::POST,
            "/v1/queues/q/messages/receive",
            &t,
            Some(json!({"max_messages": 10})),
        )
        .await;
    assert_eq!(got["messages"][0]["body"], "after");
}

#[tokio::test]
async fn acknowledged_sends_survive_a_redis_crash_with_appendfsync_always() {
    let redis =
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let (_dir, server) = redis_gateway(&redis.url(), "durable", &["--redis-timeout-ms", "2000"]);
    let t = tenant_token("acme");
    assert_eq!(
        server.call(Method::PUT, "/v1/queues/d", &t, None).await.0,
        201
    );

    let (acknowledged, producers) = stream_sends(&server, "d", &t, 6, 2000);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    redis.kill();
    for producer in producers {
        producer.await.unwrap();
    }
    let acknowledged: Vec<String> = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() > 20,
        "the stream was running: {} sends",
        acknowledged.len()
    );

    redis.restart().unwrap();
    let received = drain(&server, "d", &t).await;
    assert_none_lost(&acknowledged, &received);
}

/// The dead-letter crash test on Redis with every write fsynced: the gateway SIGKILLed five
/// times mid-moves and Redis itself once; afterwards (recovery having finished the moves the
/// kills interrupted) each message is in exactly one of the two queues.
#[tokio::test]
async fn dead_letter_moves_survive_gateway_and_redis_kills() {
    let redis =
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = redis.url();
    let prefix = unique_prefix("dlq-crash");
    let args = [
        "--jwt-secret",
        SECRET,
        "--store",
        url.as_str(),
        "--redis-key-prefix",
        prefix.as_str(),
        "--redis-timeout-ms",
        "2000",
    ];
    crate::restart::dead_letter_moves_survive_kills(dir.path(), &args, Some(&redis)).await;
}

/// The redrive crash test on Redis: a task SIGKILLed twice with its gateway resumes on the
/// restarted one and moves each message once.
#[tokio::test]
async fn a_redrive_task_survives_gateway_kills_on_redis() {
    let redis =
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (url, prefix) = (redis.url(), unique_prefix("redrive-crash"));
    let args = [
        "--jwt-secret",
        SECRET,
        "--store",
        url.as_str(),
        "--redis-key-prefix",
        prefix.as_str(),
    ];
    crate::restart::redrive_task_survives_kills(dir.path(), &args).await;
}

/// The fan-out crash test on Redis with every write fsynced: the gateway SIGKILLed four times
/// mid-publish and Redis once; recovery completes the interrupted fan-outs, and every
/// acknowledged publish has exactly one copy in each matching queue.
#[tokio::test]
async fn acknowledged_publishes_survive_gateway_and_redis_kills() {
    let redis =
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (url, prefix) = (redis.url(), unique_prefix("fanout-crash"));
    let args = [
        "--jwt-secret",
        SECRET,
        "--store",
        url.as_str(),
        "--redis-key-prefix",
        prefix.as_str(),
        "--redis-timeout-ms",
        "2000",
    ];
    crate::topics::publishes_survive_kills(dir.path(), &args, Some(&redis)).await;
}

#[test]
fn refuses_a_redis_that_evicts_keys() {
    let redis = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(crate::harness::binary())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--jwt-secret",
            SECRET,
            "--store",
            &redis.url(),
            "--data-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("noeviction"), "{stderr}");
}

/// Fills `dlq` with `count` dead letters of `work` (which must dead-letter after one
/// receive with no visibility timeout): sends them, then receives until every one moved.
async fn fill_dead_letters(server: &Server, token: &str, count: usize) {
    for batch in (0..count).step_by(10) {
        let entries: Vec<serde_json::Value> = (batch..(batch + 10).min(count))
            .map(|n| json!({"id": format!("e{n}"), "body": format!("m{n}")}))
            .collect();
        server
            .call(
                Method::POST,
                "/v1/queues/work/messages/batch",
                token,
                Some(json!({"entries": entries})),
            )
            .await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, work) = server
            .call(Method::GET, "/v1/queues/work", token, None)
            .await;
        if work["stats"]["visible"] == 0 && work["stats"]["in_flight"] == 0 {
            // The last moves may still be on their way into the DLQ.
            server.await_settled(&["dlq"], count as u64, token).await;
            return;
        }
        assert!(Instant::now() < deadline, "never all dead-lettered: {work}");
        server
            .call(
                Method::POST,
                "/v1/queues/work/messages/receive",
                token,
                Some(json!({"max_messages": 10})),
            )
            .await;
    }
}

/// Two gateways on one Redis both run the redrive job: the task moves each message once, at
/// its rate (within 10 %), whichever gateway holds it.
#[tokio::test]
async fn two_gateways_run_a_redrive_task_once_at_its_rate() {
    let redis = RedisServer::start().unwrap();
    let prefix = unique_prefix("redrive");
    let (_a_dir, a) = redis_gateway(&redis.url(), &prefix, &[]);
    let (_b_dir, b) = redis_gateway(&redis.url(), &prefix, &[]);
    let t = tenant_token("acme");
    a.dead_lettering_queues(&t).await;
    b.call(Method::PUT, "/v1/queues/back", &t, None).await;
    for (count, rate) in [(30_u64, 10_u64), (1000, 500)] {
        fill_dead_letters(&a, &t, count as usize).await;
        let (status, task) = a
            .call(
                Method::POST,
                "/v1/queues/dlq/redrive",
                &t,
                Some(json!({"destination": "back", "max_messages_per_second": rate})),
            )
            .await;
        assert_eq!(status, 202, "{task}");
        let started = Instant::now();
        let id = task["id"].as_str().unwrap().to_owned();
        let finished = loop {
            // Read through the other gateway: the task is in the store, not in a process.
            let (_, task) = b
                .call(Method::GET, &format!("/v1/redrive-tasks/{id}"), &t, None)
                .await;
            if task["status"] != "running" {
                break task;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "{task}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let elapsed = started.elapsed().as_secs_f64();
        assert_eq!(finished["status"], "completed", "{finished}");
        // Exact: a gateway takes a free lease by compare-and-set before moving, so only one
        // works on the task (the count could fall short only if a round outlasted the 5 s
        // lease, or a gateway died between its moves and its progress write).
        assert_eq!(finished["moved"].as_u64(), Some(count), "{finished}");
        let achieved = count as f64 / elapsed;
        assert!(
            (0.9..=1.1).contains(&(achieved / rate as f64)),
            "{count} at {rate}/s took {elapsed:.2} s: {achieved:.1}/s"
        );
        a.await_settled(&["back", "dlq"], count, &t).await;
        assert_eq!(
            a.message_count("dlq", &t).await,
            0,
            "all moved out of the DLQ"
        );
        let moved = drain(&a, "back", &t).await;
        let distinct: std::collections::HashSet<&String> = moved.iter().collect();
        assert_eq!(moved.len(), count as usize, "each message moved once");
        assert_eq!(distinct.len(), count as usize);
        // Empty `back` again for the next round.
        a.call(Method::POST, "/v1/queues/back/purge", &t, None)
            .await;
    }
}

#[tokio::test]
async fn a_recreated_topic_delivers_to_its_own_subscriptions_on_redis() {
    let redis = RedisServer::start().unwrap();
    let (_dir, server) = redis_gateway(&redis.url(), &unique_prefix("recreate"), &[]);
    crate::topics::recreated_topic_delivers_to_its_own_subscriptions(&server).await;
}
