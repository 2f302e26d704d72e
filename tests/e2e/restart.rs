//! Durability across a crash and a stop: SIGKILL (or SIGTERM) the server mid-stream and
//! restart it on the same data folder.

use crate::harness::{
    assert_error, assert_none_lost, drain, stream_sends, tenant_token, Server, SECRET,
};
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How the server is stopped in the middle of a send stream.
enum Stop {
    /// SIGKILL: no chance to flush or shut down.
    Kill,
    /// SIGTERM: the server must finish what is in flight and exit 0 within 10 s.
    Terminate,
}

/// Streams sends from 8 producers, stops the server once 200 are acknowledged, restarts it on
/// the same data folder and checks that every acknowledged send is there.
async fn acknowledged_sends_survive(stop: Stop) {
    let dir = tempfile::tempdir().unwrap();
    let t = tenant_token("acme");
    let mut server = Server::start_in(dir.path(), &["--jwt-secret", SECRET]);
    server
        .call(Method::PUT, "/v1/queues/durable", &t, None)
        .await;

    let (acknowledged, producers) = stream_sends(&server, "durable", &t, 8, usize::MAX);
    let running = Instant::now() + Duration::from_secs(30);
    while acknowledged.lock().unwrap().len() < 200 {
        assert!(Instant::now() < running, "the stream did not get going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    match stop {
        Stop::Kill => server.kill(),
        Stop::Terminate => {
            let status = server.terminate().await;
            assert!(status.success(), "a stop exits 0: {status:?}");
        }
    }
    for producer in producers {
        producer.await.unwrap();
    }
    let acknowledged: Vec<String> = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() > 50,
        "the stream was running: {} sends",
        acknowledged.len()
    );

    let server = Server::start_in(dir.path(), &["--jwt-secret", SECRET]);
    let received = drain(&server, "durable", &t).await;
    assert_none_lost(&acknowledged, &received);
}

#[tokio::test]
async fn every_acknowledged_send_survives_sigkill_mid_stream() {
    acknowledged_sends_survive(Stop::Kill).await;
}

#[tokio::test]
async fn sigterm_mid_stream_exits_cleanly_and_keeps_every_acknowledged_send() {
    acknowledged_sends_survive(Stop::Terminate).await;
}

#[tokio::test]
async fn deletes_stay_deleted_and_in_flight_messages_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let t = tenant_token("acme");
    let mut server = Server::start_in(dir.path(), &["--jwt-secret", SECRET]);
    server
        .call(
            Method::PUT,
            "/v1/queues/durable",
            &t,
            Some(json!({"visibility_timeout_seconds": 600, "delay_seconds": 0})),
        )
        .await;
    for batch in 0..3 {
        let entries: Vec<Value> = (0..10)
            .map(|i| json!({"id": format!("m{i}"), "body": format!("b{batch}-{i}")}))
            .collect();
        let (status, _) = server
            .call(
                Method::POST,
                "/v1/queues/durable/messages/batch",
                &t,
                Some(json!({"entries": entries})),
            )
            .await;
        assert_eq!(status, 200);
    }
    let (_, got) = server
        .call(
            Method::POST,
            "/v1/queues/durable/messages/receive",
            &t,
            Some(json!({"max_messages": 10})),
        )
        .await;
    let (_, got2) = server
        .call(
            Method::POST,
            "/v1/queues/durable/messages/receive",
            &t,
            Some(json!({"max_messages": 10})),
        )
        .await;
    let mut in_flight: Vec<Value> = got["messages"].as_array().unwrap().clone();
    in_flight.extend(got2["messages"].as_array().unwrap().iter().cloned());
    assert_eq!(in_flight.len(), 20);
    let (to_delete, kept_in_flight) = in_flight.split_at(10);
    let entries: Vec<Value> = to_delete
        .iter()
        .enumerate()
        .map(|(i, m)| json!({"id": format!("d{i}"), "receipt_handle": m["receipt_handle"]}))
        .collect();
    let (_, deleted) = server
        .call(
            Method::POST,
            "/v1/queues/durable/messages/delete",
            &t,
            Some(json!({"entries": entries})),
        )
        .await;
    assert_eq!(deleted["successful"].as_array().unwrap().len(), 10);
    let (_, config_change) = server
        .call(
            Method::PATCH,
            "/v1/queues/durable",
            &t,
            Some(json!({"tags": {"survives": "yes"}})),
        )
        .await;
    assert_eq!(config_change["config"]["tags"]["survives"], "yes");

    server.kill();
    let server = Server::start_in(dir.path(), &["--jwt-secret", SECRET]);
    let (_, queue) = server
        .call(Method::GET, "/v1/queues/durable", &t, None)
        .await;
    assert_eq!(queue["config"]["tags"]["survives"], "yes");
    assert_eq!(queue["config"]["visibility_timeout_seconds"], 600);
    assert_eq!(
        queue["stats"]["visible"], 20,
        "in-flight messages are visible again: {queue}"
    );
    assert_eq!(queue["stats"]["in_flight"], 0);
    // Handles from before the crash are still recognised as this store's (its handle key is in
    // the data folder): stale for a message that came back, success for one deleted.
    let handle = |m: &Value| m["receipt_handle"].as_str().unwrap().to_owned();
    assert_error(
        &server
            .call(
                Method::PATCH,
                &format!("/v1/queues/durable/messages/{}", handle(&kept_in_flight[0])),
                &t,
                Some(json!({"visibility_timeout_seconds": 0})),
            )
            .await,
        410,
        "ReceiptHandleStale",
    );
    let (status, _) = server
        .call(
            Method::DELETE,
            &format!("/v1/queues/durable/messages/{}", handle(&to_delete[0])),
            &t,
            None,
        )
        .await;
    assert_eq!(status, 204);
    let received: HashSet<String> = drain(&server, "durable", &t).await.into_iter().collect();
    assert_eq!(received.len(), 20);
    for message in to_delete {
        assert!(
            !received.contains(message["body"].as_str().unwrap()),
            "a deleted message came back"
        );
    }
    for message in kept_in_flight {
        assert!(received.contains(message["body"].as_str().unwrap()));
    }
}

/// Sends `count` messages `m<n>` to `queue` in batches of 10 from 4 concurrent senders,
/// asserting each is acknowledged.
async fn send_numbered(server: &Server, queue: &str, token: &str, count: usize) -> Vec<String> {
    let senders = (0..4).map(|sender| {
        let (client, url, token) = (
            server.client.clone(),
            server.url(&format!("/v1/queues/{queue}/messages/batch")),
            token.to_owned(),
        );
        tokio::spawn(async move {
            let mut bodies = Vec::new();
            for batch in (sender * 10..count).step_by(40) {
                let entries: Vec<Value> = (batch..(batch + 10).min(count))
                    .map(|n| json!({"id": format!("e{n}"), "body": format!("m{n}")}))
                    .collect();
                let answer: Value = client
                    .post(&url)
                    .header("authorization", format!("Bearer {token}"))
                    .json(&json!({"entries": entries}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(answer["failed"], json!([]), "{answer}");
                bodies.extend(
                    entries
                        .iter()
                        .map(|e| e["body"].as_str().unwrap().to_owned()),
                );
            }
            bodies
        })
    });
    let mut all = Vec::new();
    for sender in senders {
        all.extend(sender.await.unwrap());
    }
    all
}

/// 10,000 messages through a queue with `max_receive_count` 1 and consumers that never delete,
/// so every message is moved to the DLQ by some receive, while the server is SIGKILLed (and
/// restarted) five times as the DLQ fills, moves under way: afterwards each message is in
/// exactly one of the two queues.
#[tokio::test]
async fn dead_letter_moves_survive_repeated_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    dead_letter_moves_survive_kills(dir.path(), &["--jwt-secret", SECRET], None).await;
}

/// The body of the dead-letter crash tests: gateways started on `dir` with `args`; with
/// `redis`, the Redis server (which must persist every write) is SIGKILLed and restarted too,
/// at the third of the five gateway kills.
pub(crate) async fn dead_letter_moves_survive_kills(
    dir: &std::path::Path,
    args: &[&str],
    redis: Option<&sluice_testkit::RedisServer>,
) {
    let t = tenant_token("acme");
    let mut server = Server::start_in(dir, args);
    server.dead_lettering_queues(&t).await;
    let sent = send_numbered(&server, "work", &t, 10_000).await;
    assert_eq!(sent.len(), 10_000);

    // Consumers that receive and never delete, following the server across restarts.
    let base = std::sync::Arc::new(std::sync::Mutex::new(server.base.clone()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumers: Vec<_> = (0..4)
        .map(|_| {
            let (base, stop, token) = (base.clone(), stop.clone(), t.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let url = format!("{}/v1/queues/work/messages/receive", base.lock().unwrap());
                    let answer = client
                        .post(url)
                        .header("authorization", format!("Bearer {token}"))
                        .json(&json!({"max_messages": 10}))
                        .timeout(Duration::from_secs(5))
                        .send()
                        .await;
                    if !answer.is_ok_and(|a| a.status() == 200) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            })
        })
        .collect();
    let depth = |server: &Server, queue: &'static str| {
        let request = server.request(Method::GET, &format!("/v1/queues/{queue}"), &t);
        async move {
            let (status, answer) = crate::harness::decode(request.send().await.unwrap()).await;
            let s = &answer["stats"];
            (status == 200).then(|| {
                s["visible"].as_u64().unwrap_or(0)
                    + s["in_flight"].as_u64().unwrap_or(0)
                    + s["delayed"].as_u64().unwrap_or(0)
            })
        }
    };
    // Kill as the DLQ fills past each mark, so that moves are under way at every kill.
    let deadline = Instant::now() + Duration::from_secs(90);
    for (kill, mark) in [500, 2500, 4500, 6500, 8500].into_iter().enumerate() {
        while depth(&server, "dlq").await.unwrap_or(0) < mark {
            assert!(Instant::now() < deadline, "moves stopped below {mark}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        server.kill();
        if let (2, Some(redis)) = (kill, redis) {
            redis.kill();
            redis.restart().unwrap();
        }
        server = Server::start_in(dir, args);
        *base.lock().unwrap() = server.base.clone();
    }
    // Let the consumers move the rest, and recovery finish the moves the kills interrupted.
    let deadline = Instant::now() + Duration::from_secs(90);
    while !(depth(&server, "work").await == Some(0) && depth(&server, "dlq").await == Some(10_000))
    {
        assert!(Instant::now() < deadline, "the moves never settled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for consumer in consumers {
        consumer.await.unwrap();
    }
    server.kill();

    let server = Server::start_in(dir, args);
    let in_work = drain(&server, "work", &t).await;
    let in_dlq = drain(&server, "dlq", &t).await;
    let mut everywhere = in_work.clone();
    everywhere.extend(in_dlq.iter().cloned());
    assert!(
        in_work.is_empty(),
        "every message moved: {} left",
        in_work.len()
    );
    assert_eq!(in_dlq.len(), 10_000);
    assert_none_lost(&sent, &everywhere);
}

/// A redrive task survives SIGKILLs of the server: after each restart it goes on (once the
/// dead process's lease runs out) and completes, every message in exactly one queue.
#[tokio::test]
async fn a_redrive_task_interrupted_by_sigkill_moves_each_message_once() {
    let dir = tempfile::tempdir().unwrap();
    redrive_task_survives_kills(dir.path(), &["--jwt-secret", SECRET]).await;
}

/// The body of the redrive crash tests: gateways on `dir` with `args`, SIGKILLed twice while a
/// task moves 1,500 messages.
pub(crate) async fn redrive_task_survives_kills(dir: &std::path::Path, args: &[&str]) {
    let t = tenant_token("acme");
    let mut server = Server::start_in(dir, args);
    server.call(Method::PUT, "/v1/queues/dlq", &t, None).await;
    server.call(Method::PUT, "/v1/queues/back", &t, None).await;
    let sent = send_numbered(&server, "dlq", &t, 1500).await;
    let (status, task) = server
        .call(
            Method::POST,
            "/v1/queues/dlq/redrive",
            &t,
            Some(json!({"destination": "back", "max_messages_per_second": 500})),
        )
        .await;
    assert_eq!(status, 202, "{task}");
    let id = task["id"].as_str().unwrap().to_owned();
    let task_path = format!("/v1/redrive-tasks/{id}");
    let deadline = Instant::now() + Duration::from_secs(90);
    for mark in [300, 900] {
        loop {
            let (_, task) = server.call(Method::GET, &task_path, &t, None).await;
            if task["moved"].as_u64().unwrap_or(0) >= mark {
                break;
            }
            assert!(Instant::now() < deadline, "the task stalled: {task}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        server.kill();
        server = Server::start_in(dir, args);
    }
    let finished = loop {
        let (_, task) = server.call(Method::GET, &task_path, &t, None).await;
        if task["status"] != "running" {
            break task;
        }
        assert!(Instant::now() < deadline, "the task never finished: {task}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(finished["status"], "completed", "{finished}");
    // A kill between a round's moves and its progress write loses only the count.
    assert!(finished["moved"].as_u64().unwrap() <= 1500, "{finished}");
    server.await_settled(&["back", "dlq"], 1500, &t).await;
    let back = drain(&server, "back", &t).await;
    let left = drain(&server, "dlq", &t).await;
    assert!(left.is_empty(), "{} left in the DLQ", left.len());
    assert_none_lost(&sent, &back);
}
