//! Stopping a gateway: readiness fails at once and a waiting long poll answers without waiting
//! out its time. The clock is manual and never moves, so only the stop can end the wait.

use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{ManualClock, TenantId};
use sluice_services::{Limits, QueueConfigPatch, ReceiveRequest, Services};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_fails_readiness_and_answers_waiting_long_polls() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(EmbeddedEngine::open(dir.path(), EmbeddedOptions::default()).unwrap());
    let clock = ManualClock::new(1_000_000_000_000);
    let services = Services::new(engine, Arc::new(clock), Limits::default());
    let tenant = TenantId::parse("acme").unwrap();
    services.ensure_tenant(&tenant, None).await.unwrap();
    services
        .put_queue(&tenant, "q", QueueConfigPatch::default())
        .await
        .unwrap();
    services.ready().await.unwrap();

    let polling = services.clone();
    let poll_tenant = tenant.clone();
    let poll = tokio::spawn(async move {
        let request = ReceiveRequest {
            wait_seconds: Some(20),
            ..ReceiveRequest::default()
        };
        polling.receive(&poll_tenant, "q", request).await
    });
    // The poll is waiting: time never moves, so nothing but the stop can end it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!poll.is_finished(), "the long poll waits");

    services.begin_stopping();
    let answer = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the stop answered the long poll")
        .unwrap()
        .unwrap();
    assert!(answer.is_empty());
    let readiness = services.ready().await;
    assert!(readiness.is_err(), "{readiness:?}");
    // Polls that arrive while stopping answer at once too.
    let late = ReceiveRequest {
        wait_seconds: Some(20),
        ..ReceiveRequest::default()
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), services.receive(&tenant, "q", late))
        .await
        .expect("a poll while stopping does not wait")
        .unwrap();
    assert!(answer.is_empty());
}
