//! Overload bounds: past `max_in_flight_requests` or `max_waiting_polls`, requests are refused
//! at once with 503 and `Retry-After` instead of queueing; the probes still answer.

use crate::harness::{tenant_token, Server, SECRET};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Waits (by scraping, never by sleeping a guessed time) until `waiting` long polls wait.
async fn until_waiting(server: &Server, waiting: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = server.metrics_text().await;
        if text
            .lines()
            .any(|line| line == format!("sluice_long_polls_waiting {waiting}"))
        {
            return;
        }
        assert!(Instant::now() < deadline, "never {waiting} polls waiting");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn long_poll(server: &Server, token: &str, seconds: u32) -> tokio::task::JoinHandle<(u16, Value)> {
    let request = server
        .request(Method::POST, "/v1/queues/q/messages/receive", token)
        .json(&json!({"wait_seconds": seconds}));
    tokio::spawn(async move { crate::harness::decode(request.send().await.unwrap()).await })
}

async fn refused_with_retry_after(response: reqwest::Response) {
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "Unavailable", "{body}");
}

#[tokio::test]
async fn past_max_in_flight_requests_a_request_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(
        dir.path(),
        &["--jwt-secret", SECRET, "--max-in-flight-requests", "2"],
    );
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/q", &t, None).await;
    let polls = [long_poll(&server, &t, 3), long_poll(&server, &t, 3)];
    until_waiting(&server, 2).await;

    let started = Instant::now();
    refused_with_retry_after(
        server
            .request(Method::GET, "/v1/queues/q", &t)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once"
    );
    assert_eq!(
        server.probe("/healthz").await,
        200,
        "probes are not refused"
    );
    assert_eq!(server.probe("/readyz").await, 200);

    for poll in polls {
        assert_eq!(poll.await.unwrap().0, 200);
    }
    assert_eq!(
        server.call(Method::GET, "/v1/queues/q", &t, None).await.0,
        200,
        "served again once the polls answered"
    );
    let metrics = server.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_overload_rejections_total{reason=\"in_flight\"}")),
        "{metrics}"
    );
}

#[tokio::test]
async fn past_max_waiting_polls_a_long_poll_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(
        dir.path(),
        &["--jwt-secret", SECRET, "--max-waiting-polls", "1"],
    );
    let t = tenant_token("acme");
    server.call(Method::PUT, "/v1/queues/q", &t, None).await;
    let waiting = long_poll(&server, &t, 10);
    until_waiting(&server, 1).await;

    let started = Instant::now();
    refused_with_retry_after(
        server
            .request(Method::POST, "/v1/queues/q/messages/receive", &t)
            .json(&json!({"wait_seconds": 10}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once"
    );
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/queues/q/messages/receive",
            &t,
            Some(json!({"wait_seconds": 0})),
        )
        .await;
    assert_eq!(status, 200, "a receive that does not wait is served");

    server
        .call(
            Method::POST,
            "/v1/queues/q/messages",
            &t,
            Some(json!({"body": "for the waiting poll"})),
        )
        .await;
    let (status, answer) = waiting.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(answer["messages"][0]["body"], "for the waiting poll");
}
