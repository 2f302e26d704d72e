//! Tests of recovering from failed writes: a storage backend whose writes fail on demand stands
//! in for a full disk, so the commit thread's close, reopen, probe and carried removals are
//! exercised without touching the file system.

use super::*;
use redb::backends::InMemoryBackend;
use redb::StorageBackend;
use sluice_engine::{PayloadEventKind, PayloadRef};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An in-memory "file" that outlives each `Database` over it (as a file outlives a reopen) and
/// refuses to grow or be written while `full` is set. Harsher than a full disk, where rewriting
/// pages in place still works: here even reopening fails until the disk recovers.
#[derive(Debug, Clone)]
struct FlakyDisk {
    data: Arc<InMemoryBackend>,
    full: Arc<AtomicBool>,
}

impl FlakyDisk {
    fn new() -> Self {
        Self {
            data: Arc::new(InMemoryBackend::new()),
            full: Arc::new(AtomicBool::new(false)),
        }
    }

    fn set_full(&self, full: bool) {
        self.full.store(full, Ordering::SeqCst);
    }

    fn refuse(&self) -> Result<(), std::io::Error> {
        if self.full.load(Ordering::SeqCst) {
            Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
        } else {
            Ok(())
        }
    }

    fn engine(&self) -> EmbeddedEngine {
        let disk = self.clone();
        let open = move || {
            let db = redb::Builder::new()
                .create_with_backend(disk.clone())
                .map_err(store::storage)?;
            store::prepare(db, "flaky disk")
        };
        EmbeddedEngine::open_with(Box::new(open), EmbeddedOptions::default(), "flaky disk").unwrap()
    }
}

impl StorageBackend for FlakyDisk {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.data.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.data.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.refuse()?;
        self.data.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.refuse()?;
        self.data.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.refuse()?;
        self.data.write(offset, data)
    }
}

fn q() -> QueueKey {
    QueueKey::new(
        TenantId::parse("t").unwrap(),
        QueueName::parse("q").unwrap(),
    )
}

fn message(body: &str) -> NewMessage {
    NewMessage {
        payload: None,
        message_id: format!("id-{body}"),
        body: body.to_owned(),
        attributes: BTreeMap::new(),
        visible_at: 0,
        group_id: None,
        deduplication_id: None,
    }
}

async fn send(engine: &EmbeddedEngine, body: &str) -> Result<(), EngineError> {
    let answers = engine.send(&q(), vec![message(body)], 0).await?;
    assert!(answers[0].is_ok());
    Ok(())
}

/// Every visible body, hiding them for a minute.
async fn receive_all(engine: &EmbeddedEngine) -> Vec<(String, String)> {
    let mut got = Vec::new();
    loop {
        let outcome = engine.receive(&q(), 10, 60, None, 0).await.unwrap();
        if outcome.messages.is_empty() {
            got.sort();
            return got;
        }
        got.extend(
            outcome
                .messages
                .into_iter()
                .map(|m| (m.message.body, m.receipt_handle)),
        );
    }
}

fn bodies(received: &[(String, String)]) -> Vec<&str> {
    received.iter().map(|(body, _)| body.as_str()).collect()
}

/// Waits for the commit thread's probe to find the disk writable again.
async fn until_ready(engine: &EmbeddedEngine) {
    for _ in 0..500 {
        if engine.ping().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the engine did not recover: {:?}", engine.ping().await);
}

#[tokio::test]
async fn a_failed_commit_fails_only_its_writes_and_the_engine_recovers() {
    let disk = FlakyDisk::new();
    let engine = disk.engine();
    let config = QueueConfig::with_defaults(262_144);
    engine.put_queue(&q(), config.clone(), 0).await.unwrap();
    send(&engine, "before").await.unwrap();

    disk.set_full(true);
    for body in ["during-1", "during-2"] {
        let failed = send(&engine, body).await.unwrap_err();
        assert!(
            matches!(failed, EngineError::Unavailable(_)),
            "a full disk is an outage, not an internal error: {failed:?}"
        );
    }
    let other = QueueKey::new(
        TenantId::parse("t").unwrap(),
        QueueName::parse("other").unwrap(),
    );
    assert!(matches!(
        engine.put_queue(&other, config.clone(), 0).await,
        Err(EngineError::Unavailable(_))
    ));
    assert!(matches!(
        engine.ping().await,
        Err(EngineError::Unavailable(_))
    ));
    disk.set_full(false);
    until_ready(&engine).await;
    send(&engine, "after").await.unwrap();
    engine.put_queue(&other, config, 0).await.unwrap();
    assert_eq!(bodies(&receive_all(&engine).await), ["after", "before"]);

    // What was acknowledged is durable; what failed never reached the disk.
    drop(engine);
    let engine = disk.engine();
    assert_eq!(bodies(&receive_all(&engine).await), ["after", "before"]);
    assert!(engine.get_queue(&other, 0).await.unwrap().is_some());
}

#[tokio::test]
async fn a_delete_whose_commit_failed_is_written_by_the_next_commit() {
    let disk = FlakyDisk::new();
    let engine = disk.engine();
    engine
        .put_queue(&q(), QueueConfig::with_defaults(262_144), 0)
        .await
        .unwrap();
    send(&engine, "gone").await.unwrap();
    send(&engine, "kept").await.unwrap();
    let received = receive_all(&engine).await;
    let handle = received[0].1.clone();
    assert_eq!(received[0].0, "gone");

    disk.set_full(true);
    let failed = engine.delete(&q(), std::slice::from_ref(&handle), 0).await;
    assert!(
        matches!(failed, Err(EngineError::Unavailable(_))),
        "{failed:?}"
    );
    // A retry answers only once the removal is on disk: not while the disk is full.
    let retried = engine.delete(&q(), std::slice::from_ref(&handle), 0).await;
    assert!(
        matches!(retried, Err(EngineError::Unavailable(_))),
        "{retried:?}"
    );

    disk.set_full(false);
    until_ready(&engine).await;
    let retried = engine.delete(&q(), &[handle], 0).await.unwrap();
    assert!(retried[0].is_ok());
    drop(engine);
    let engine = disk.engine();
    assert_eq!(bodies(&receive_all(&engine).await), ["kept"]);
}

#[tokio::test]
async fn a_passing_failure_fails_no_later_request() {
    let disk = FlakyDisk::new();
    let engine = disk.engine();
    engine
        .put_queue(&q(), QueueConfig::with_defaults(262_144), 0)
        .await
        .unwrap();
    disk.set_full(true);
    assert!(matches!(
        send(&engine, "refused").await,
        Err(EngineError::Unavailable(_))
    ));
    disk.set_full(false);
    // No waiting for a probe: the next write tries again, and succeeds.
    send(&engine, "accepted").await.unwrap();
    assert!(engine.ping().await.is_ok());
    assert_eq!(bodies(&receive_all(&engine).await), ["accepted"]);
}

#[tokio::test]
async fn a_move_whose_commit_failed_leaves_the_message_in_its_source() {
    let disk = FlakyDisk::new();
    let engine = disk.engine();
    let dlq = QueueKey::new(
        TenantId::parse("t").unwrap(),
        QueueName::parse("dlq").unwrap(),
    );
    let config = QueueConfig::with_defaults(262_144);
    engine.put_queue(&dlq, config.clone(), 0).await.unwrap();
    let mut with_policy = config;
    with_policy.redrive_policy = Some(sluice_engine::RedrivePolicy {
        dead_letter_queue: dlq.name.clone(),
        max_receive_count: 1,
    });
    engine.put_queue(&q(), with_policy, 0).await.unwrap();
    send(&engine, "m").await.unwrap();
    let first = engine.receive(&q(), 1, 0, None, 0).await.unwrap();
    assert_eq!(first.messages.len(), 1);

    disk.set_full(true);
    let failed = engine.receive(&q(), 1, 0, None, 0).await;
    assert!(
        matches!(failed, Err(EngineError::Unavailable(_))),
        "{failed:?}"
    );
    let depth = |info: Option<QueueInfo>| {
        let s = info.unwrap().stats;
        s.visible + s.in_flight + s.delayed
    };
    assert_eq!(depth(engine.get_queue(&q(), 0).await.unwrap()), 1, "back");
    assert_eq!(depth(engine.get_queue(&dlq, 0).await.unwrap()), 0);

    disk.set_full(false);
    until_ready(&engine).await;
    let moved = engine.receive(&q(), 1, 0, None, 0).await.unwrap();
    assert_eq!((moved.messages.len(), moved.dead_lettered), (0, 1));
    assert_eq!(depth(engine.get_queue(&q(), 0).await.unwrap()), 0);
    assert_eq!(depth(engine.get_queue(&dlq, 0).await.unwrap()), 1);

    // On disk as in memory: once, in the dead-letter queue.
    drop(engine);
    let engine = disk.engine();
    assert_eq!(depth(engine.get_queue(&q(), 0).await.unwrap()), 0);
    let in_dlq = engine
        .peek(&dlq, MessageState::Visible, 10, 0)
        .await
        .unwrap();
    assert_eq!(in_dlq.len(), 1);
    assert_eq!(in_dlq[0].body, "m");
}

#[tokio::test]
async fn a_publish_whose_commit_failed_publishes_nothing() {
    use crate::publish_tests::{publication, to};
    use sluice_engine::{DeliveryOutcome, TopicKey};
    let disk = FlakyDisk::new();
    let engine = disk.engine();
    let fifo = QueueKey::new(
        TenantId::parse("t").unwrap(),
        QueueName::parse("q.fifo").unwrap(),
    );
    engine
        .put_queue(&fifo, QueueConfig::with_defaults(262_144), 0)
        .await
        .unwrap();
    let topic = TopicKey::new(
        TenantId::parse("t").unwrap(),
        QueueName::parse("t.fifo").unwrap(),
    );
    let copy = |id: &str, dedup: &str| publication(id, Some(dedup), vec![to("s", "q.fifo", id)]);
    let first = engine
        .publish(&topic, vec![copy("p1", "d1")], 0)
        .await
        .unwrap();
    let s1 = first[0].seq.unwrap();

    disk.set_full(true);
    let failed = engine.publish(&topic, vec![copy("p2", "d2")], 0).await;
    assert!(
        matches!(failed, Err(EngineError::Unavailable(_))),
        "{failed:?}"
    );
    let stats = engine.subscription_stats(&topic).await.unwrap();
    assert_eq!(stats["s"].delivered, 1, "counted only once durable");
    disk.set_full(false);
    until_ready(&engine).await;

    // Neither the copy nor the deduplication record was kept: the retry publishes anew, with a
    // later sequence number (the failed one's is never reused).
    let retried = engine
        .publish(&topic, vec![copy("p2", "d2")], 0)
        .await
        .unwrap();
    assert!(!retried[0].duplicate);
    assert_eq!(retried[0].outcomes[0].1, DeliveryOutcome::Delivered);
    assert!(retried[0].seq.unwrap() > s1 + 1);
    let ids = |messages: Vec<StoredMessage>| -> Vec<String> {
        messages.into_iter().map(|m| m.message_id).collect()
    };
    let peek = engine
        .peek(&fifo, MessageState::Visible, 10, 0)
        .await
        .unwrap();
    assert_eq!(ids(peek), ["p1", "p2"]);

    drop(engine);
    let engine = disk.engine();
    let peek = engine
        .peek(&fifo, MessageState::Visible, 10, 0)
        .await
        .unwrap();
    assert_eq!(ids(peek), ["p1", "p2"], "once each, also on disk");
    assert_eq!(
        engine.subscription_stats(&topic).await.unwrap()["s"].delivered,
        2
    );
}

/// Payload events follow what reached the disk: a send whose commit failed records no
/// `Added`; a delete whose commit failed is carried to the next commit and records one
/// `Released` there, however often it is retried; the events survive a restart until
/// acknowledged.
#[tokio::test]
async fn payload_events_follow_what_reached_the_disk() {
    let disk = FlakyDisk::new();
    let engine = disk.engine();
    engine
        .put_queue(&q(), QueueConfig::with_defaults(262_144), 0)
        .await
        .unwrap();
    let spilled = |body: &str| NewMessage {
        body: String::new(),
        payload: Some(PayloadRef {
            key: format!("t/{body}"),
            size: 10,
            enveloped: false,
        }),
        ..message(body)
    };
    let kinds = |batch: &PayloadEventBatch| {
        batch
            .events
            .iter()
            .map(|e| (e.kind, e.message_id.clone()))
            .collect::<Vec<_>>()
    };
    engine.send(&q(), vec![spilled("kept")], 0).await.unwrap();
    let handle = engine.receive(&q(), 1, 60, None, 0).await.unwrap().messages[0]
        .receipt_handle
        .clone();

    disk.set_full(true);
    assert!(engine.send(&q(), vec![spilled("lost")], 0).await.is_err());
    for _ in 0..2 {
        let failed = engine.delete(&q(), std::slice::from_ref(&handle), 0).await;
        assert!(
            matches!(failed, Err(EngineError::Unavailable(_))),
            "{failed:?}"
        );
    }
    disk.set_full(false);
    until_ready(&engine).await;
    let retried = engine.delete(&q(), &[handle], 0).await.unwrap();
    assert!(retried[0].is_ok());

    drop(engine);
    let engine = disk.engine();
    let batch = engine.payload_events(100).await.unwrap();
    assert_eq!(
        kinds(&batch),
        [
            (PayloadEventKind::Added, "id-kept".to_owned()),
            (PayloadEventKind::Released, "id-kept".to_owned()),
        ]
    );
    engine.ack_payload_events(&batch).await.unwrap();
    assert!(engine.payload_events(100).await.unwrap().events.is_empty());
}
