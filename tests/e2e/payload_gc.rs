//! Payload collection end to end: a spilled body's object is removed once no message refers
//! to it — after a delete, a purge, retention expiry, a queue's or a tenant's deletion — within
//! the contract's 60 s, is kept by moves between queues (a dead-letter move, a redrive) and
//! shared by every copy of a publish until the last copy goes, and an object whose send never
//! committed (the gateway dies between the upload and the commit) is removed after the orphan
//! grace. On the embedded engine with the local store and on Redis with an S3 server (moto),
//! counting objects in the folder or bucket itself.

use crate::harness::{binary, tenant_token, token, Server, SECRET};
use crate::payloads::{bucket, put_queue, receive, redis_s3_gateway, Objects, THRESHOLD};
use reqwest::Method;
use serde_json::{json, Value};
use sluice_testkit::S3Server;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the contract allows between a message's removal and its object's.
const COLLECTED_WITHIN: Duration = Duration::from_secs(60);

fn big(tag: &str) -> String {
    format!("{tag}:{}", "x".repeat(4096))
}

/// A gateway that spills, and its objects, counted by the test on its own.
struct Spilling {
    server: Server,
    objects: Objects,
    _keep: Vec<Box<dyn std::any::Any>>,
}

/// The embedded engine with its default local store (`<data>/payloads`).
fn embedded() -> Spilling {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(
        dir.path(),
        &["--jwt-secret", SECRET, "--spill-threshold-bytes", THRESHOLD],
    );
    Spilling {
        server,
        objects: Objects::Folder(dir.path().join("payloads")),
        _keep: vec![Box::new(dir)],
    }
}

/// Redis with an S3 store on a moto server of its own.
async fn redis_s3(name: &str) -> Spilling {
    let s3 = S3Server::start().unwrap();
    let store = bucket(&s3.endpoint(), name, "sluice").await;
    let (dir, server) = redis_s3_gateway(&s3.endpoint(), name, "sluice");
    Spilling {
        server,
        objects: Objects::Bucket(store),
        _keep: vec![Box::new(dir), Box::new(s3)],
    }
}

/// Waits until the store holds `expected` objects, failing after [`COLLECTED_WITHIN`] (plus
/// `extra`, for removals that themselves take time, such as retention expiry).
async fn await_objects(objects: &Objects, expected: usize, extra: Duration, what: &str) {
    let deadline = Instant::now() + COLLECTED_WITHIN + extra;
    loop {
        let found = objects.count().await;
        if found == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {found} objects, expected {expected}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the collector has finished `rounds` more rounds, so that an object still there
/// afterwards was kept, not merely not reached yet.
async fn await_collection_rounds(server: &Server, rounds: u64) {
    let count = |text: String| -> u64 {
        text.lines()
            .filter(|line| {
                line.starts_with("sluice_background_runs_total{")
                    && line.contains("job=\"payload_collection\"")
                    && line.contains("outcome=\"ok\"")
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let start = count(server.metrics_text().await);
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(server.metrics_text().await) < start + rounds {
        assert!(Instant::now() < deadline, "the payload collector stopped");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn send(server: &Server, t: &str, queue: &str, body: &str) {
    let (status, answer) = server
        .call(
            Method::POST,
            &format!("/v1/queues/{queue}/messages"),
            t,
            Some(json!({ "body": body })),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
}

async fn delete(server: &Server, t: &str, queue: &str, message: &Value) {
    let handle = message["receipt_handle"].as_str().unwrap();
    let (status, answer) = server
        .call(
            Method::DELETE,
            &format!("/v1/queues/{queue}/messages/{handle}"),
            t,
            None,
        )
        .await;
    assert_eq!(status, 204, "{answer}");
}

async fn every_removal_frees_its_object(spilling: Spilling) {
    let (server, objects) = (&spilling.server, &spilling.objects);
    let t = tenant_token("acme");
    put_queue(server, &t, "q", json!({})).await;

    send(server, &t, "q", &big("deleted")).await;
    send(server, &t, "q", "small bodies stay in the engine").await;
    assert_eq!(objects.count().await, 1, "one object per spilled body");
    let received = receive(server, &t, "q").await;
    assert_eq!(received.len(), 2);
    for message in &received {
        delete(server, &t, "q", message).await;
    }
    await_objects(objects, 0, Duration::ZERO, "after a delete").await;

    for n in 0..3 {
        send(server, &t, "q", &big(&format!("purged {n}"))).await;
    }
    assert_eq!(objects.count().await, 3);
    let (status, _) = server
        .call(Method::POST, "/v1/queues/q/purge", &t, None)
        .await;
    assert_eq!(status, 204);
    await_objects(objects, 0, Duration::ZERO, "after a purge").await;

    // Moves keep the object: to the DLQ on the receive past `max_receive_count`, and back by
    // a redrive task; the body reads back whole at each stop.
    server.dead_lettering_queues(&t).await;
    let body = big("moved");
    send(server, &t, "work", &body).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.message_count("dlq", &t).await == 0 {
        assert!(Instant::now() < deadline, "never dead-lettered");
        let (status, _) = server
            .call(
                Method::POST,
                "/v1/queues/work/messages/receive",
                &t,
                Some(json!({"max_messages": 10, "visibility_timeout_seconds": 0})),
            )
            .await;
        assert_eq!(status, 200);
    }
    await_collection_rounds(server, 2).await;
    assert_eq!(
        objects.count().await,
        1,
        "a dead-letter move keeps the object"
    );
    let (status, task) = server
        .call(
            Method::POST,
            "/v1/queues/dlq/redrive",
            &t,
            Some(json!({"destination": "q"})),
        )
        .await;
    assert_eq!(status, 202, "{task}");
    server.await_settled(&["q"], 1, &t).await;
    await_collection_rounds(server, 2).await;
    assert_eq!(objects.count().await, 1, "a redrive keeps the object");
    let back = receive(server, &t, "q").await;
    assert_eq!(back.len(), 1);
    assert_eq!(back[0]["body"], body);
    delete(server, &t, "q", &back[0]).await;
    await_objects(objects, 0, Duration::ZERO, "after deleting a moved message").await;

    for n in 0..2 {
        send(server, &t, "q", &big(&format!("queue deleted {n}"))).await;
    }
    let (status, _) = server.call(Method::DELETE, "/v1/queues/q", &t, None).await;
    assert_eq!(status, 204);
    await_objects(objects, 0, Duration::ZERO, "after a queue deletion").await;

    let admin = token(None, "admin");
    let (status, answer) = server
        .call(
            Method::POST,
            "/v1/admin/tenants",
            &admin,
            Some(json!({"id": "leaving"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let leaving = tenant_token("leaving");
    put_queue(server, &leaving, "q", json!({})).await;
    for n in 0..2 {
        send(server, &leaving, "q", &big(&format!("tenant deleted {n}"))).await;
    }
    let (status, _) = server
        .call(Method::DELETE, "/v1/admin/tenants/leaving", &admin, None)
        .await;
    assert_eq!(status, 204);
    await_objects(objects, 0, Duration::ZERO, "after a tenant deletion").await;
}

#[tokio::test]
async fn every_removal_frees_its_object_embedded_local() {
    every_removal_frees_its_object(embedded()).await;
}

#[tokio::test]
async fn every_removal_frees_its_object_redis_s3() {
    every_removal_frees_its_object(redis_s3("gc-removals").await).await;
}

/// Retention expiry (60 s at least) frees the object too.
async fn expiry_frees_its_object(spilling: Spilling) {
    let (server, objects) = (&spilling.server, &spilling.objects);
    let t = tenant_token("acme");
    put_queue(
        server,
        &t,
        "short",
        json!({"message_retention_seconds": 60}),
    )
    .await;
    send(server, &t, "short", &big("expires")).await;
    assert_eq!(objects.count().await, 1);
    await_objects(
        objects,
        0,
        Duration::from_secs(60),
        "after retention expiry",
    )
    .await;
    assert_eq!(server.message_count("short", &t).await, 0);
}

#[tokio::test]
async fn expiry_frees_its_object_embedded_local() {
    expiry_frees_its_object(embedded()).await;
}

#[tokio::test]
async fn expiry_frees_its_object_redis_s3() {
    expiry_frees_its_object(redis_s3("gc-expiry").await).await;
}

/// A publish to five subscriptions (raw and enveloped) stores one object, which every copy
/// reads, and which goes only once the fifth copy is deleted.
async fn copies_share_one_object(spilling: Spilling) {
    let (server, objects) = (&spilling.server, &spilling.objects);
    let t = tenant_token("acme");
    let (status, answer) = server.call(Method::PUT, "/v1/topics/news", &t, None).await;
    assert_eq!(status, 201, "{answer}");
    for n in 0..5 {
        let queue = format!("sub{n}");
        put_queue(server, &t, &queue, json!({})).await;
        let (status, answer) = server
            .call(
                Method::POST,
                "/v1/topics/news/subscriptions",
                &t,
                Some(json!({"queue": queue, "raw_delivery": n % 2 == 0})),
            )
            .await;
        assert_eq!(status, 201, "{answer}");
    }
    let body = big("published");
    let (status, answer) = server
        .call(
            Method::POST,
            "/v1/topics/news/messages",
            &t,
            Some(json!({ "body": body })),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    server
        .await_settled(&["sub0", "sub1", "sub2", "sub3", "sub4"], 5, &t)
        .await;
    assert_eq!(objects.count().await, 1, "one object for every copy");
    for n in 0..5 {
        let queue = format!("sub{n}");
        let copies = receive(server, &t, &queue).await;
        assert_eq!(copies.len(), 1);
        let read = copies[0]["body"].as_str().unwrap();
        if n % 2 == 0 {
            assert_eq!(read, body, "a raw copy is the body");
        } else {
            let envelope: Value = serde_json::from_str(read).unwrap();
            assert_eq!(
                envelope["Message"], body,
                "an enveloped copy holds the body"
            );
        }
        delete(server, &t, &queue, &copies[0]).await;
        if n < 4 {
            await_collection_rounds(server, 2).await;
            assert_eq!(
                objects.count().await,
                1,
                "kept while {} copies remain",
                4 - n
            );
        }
    }
    await_objects(objects, 0, Duration::ZERO, "after the fifth copy's delete").await;
}

#[tokio::test]
async fn copies_share_one_object_embedded_local() {
    copies_share_one_object(embedded()).await;
}

#[tokio::test]
async fn copies_share_one_object_redis_s3() {
    copies_share_one_object(redis_s3("gc-copies").await).await;
}

/// The gateway dies right after uploading a body (and, once, right after recording it), before
/// the engine commit: the object is an orphan, and a gateway on the same data folder removes
/// it once the grace has passed — while a committed message's object, older than the grace
/// too, stays.
#[tokio::test]
async fn an_upload_whose_send_never_committed_goes_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let objects = Objects::Folder(dir.path().join("payloads"));
    let t = tenant_token("acme");
    for (n, failpoint) in ["payload-after-upload", "payload-after-record"]
        .iter()
        .enumerate()
    {
        let mut command = Command::new(binary());
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .args(["--jwt-secret", SECRET, "--spill-threshold-bytes", THRESHOLD])
            .env_remove("SLUICE_CONFIG")
            .env("SLUICE_LOG", "error")
            .env("SLUICE_TEST_FAILPOINT", *failpoint)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut doomed = Server::spawn(command);
        if n == 0 {
            put_queue(&doomed, &t, "q", json!({})).await;
        }
        let sent = doomed
            .request(Method::POST, "/v1/queues/q/messages", &t)
            .json(&json!({"body": big("never committed")}))
            .send()
            .await;
        assert!(sent.is_err(), "the gateway died mid-send ({failpoint})");
        let _ = doomed.child.wait();
    }
    assert_eq!(objects.count().await, 2, "two orphans left behind");

    let server = Server::start_in(
        dir.path(),
        &[
            "--jwt-secret",
            SECRET,
            "--spill-threshold-bytes",
            THRESHOLD,
            "--payload-orphan-grace-seconds",
            "2",
        ],
    );
    assert_eq!(
        server.message_count("q", &t).await,
        0,
        "nothing was committed"
    );
    let body = big("committed");
    send(&server, &t, "q", &body).await;
    await_objects(&objects, 1, Duration::ZERO, "orphans after the grace").await;
    // Past the grace and a few more rounds, the committed message still has its object.
    tokio::time::sleep(Duration::from_secs(3)).await;
    await_collection_rounds(&server, 2).await;
    let received = receive(&server, &t, "q").await;
    assert_eq!(received.len(), 1);
    assert_eq!(received[0]["body"], body);
}
