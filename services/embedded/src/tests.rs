//! Tests of what is specific to the embedded engine: group commit and surviving a re-open.
//! The semantics shared by every engine are the conformance suite's business.

use super::*;
use sluice_engine::{MessageAttribute, ReceiptHandle};
use std::collections::BTreeMap;
use tokio::task::JoinSet;

fn key(tenant: &str, name: &str) -> QueueKey {
    QueueKey::new(
        TenantId::parse(tenant).unwrap(),
        QueueName::parse(name).unwrap(),
    )
}

fn message(body: &str, visible_at: Millis) -> NewMessage {
    NewMessage {
        payload: None,
        message_id: format!("id-{body}"),
        body: body.to_owned(),
        attributes: BTreeMap::new(),
        visible_at,
        group_id: None,
        deduplication_id: None,
    }
}

fn open(dir: &Path, commit_mode: CommitMode) -> EmbeddedEngine {
    EmbeddedEngine::open(dir, EmbeddedOptions { commit_mode }).unwrap()
}

async fn sends_in_parallel(engine: &Arc<EmbeddedEngine>, q: &QueueKey, n: usize) {
    let mut tasks = JoinSet::new();
    for i in 0..n {
        let engine = Arc::clone(engine);
        let q = q.clone();
        tasks.spawn(async move {
            let answers = engine
                .send(&q, vec![message(&format!("m{i}"), 0)], 0)
                .await
                .unwrap();
            assert!(answers[0].is_ok());
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(open(dir.path(), CommitMode::Group));
    let q = key("t", "q");
    engine
        .put_queue(&q, QueueConfig::with_defaults(262_144), 0)
        .await
        .unwrap();

    let before = engine.commit_count();
    sends_in_parallel(&engine, &q, 64).await;
    let commits = engine.commit_count() - before;
    assert!(commits >= 1);
    assert!(commits <= 16, "64 concurrent sends took {commits} commits");

    let info = engine.get_queue(&q, 0).await.unwrap().unwrap();
    assert_eq!(info.stats.visible, 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_each_write_commits_every_send() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(open(dir.path(), CommitMode::FsyncEachWrite));
    let q = key("t", "q");
    engine
        .put_queue(&q, QueueConfig::with_defaults(262_144), 0)
        .await
        .unwrap();
    let before = engine.commit_count();
    sends_in_parallel(&engine, &q, 16).await;
    assert_eq!(engine.commit_count() - before, 16);
}

#[tokio::test]
async fn reopen_keeps_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let q = key("acme", "orders");
    let other = key("acme", "other");
    let mut config = QueueConfig::with_defaults(262_144);
    config.visibility_timeout_seconds = 45;
    config.tags.insert("team".into(), "billing".into());
    let tenant = TenantRecord {
        id: TenantId::parse("acme").unwrap(),
        quotas: Quotas {
            max_queues: Some(7),
            ..Quotas::default()
        },
        created_at: 5,
    };

    let (kept_seq, deleted_handle, uid) = {
        let engine = open(dir.path(), CommitMode::Group);
        engine.create_tenant(tenant.clone()).await.unwrap();
        engine.put_queue(&q, config.clone(), 10).await.unwrap();
        engine
            .put_queue(&other, QueueConfig::with_defaults(1024), 10)
            .await
            .unwrap();
        engine.delete_queue(&other).await.unwrap();
        let mut attributes = BTreeMap::new();
        attributes.insert(
            "kind".to_owned(),
            MessageAttribute {
                data_type: "String".into(),
                value: "x".into(),
            },
        );
        let mut first = message("kept", 1_000);
        first.attributes = attributes;
        first.group_id = Some("g".into());
        let sent = engine
            .send(
                &q,
                vec![first, message("deleted", 1_000), message("delayed", 9_000)],
                1_000,
            )
            .await
            .unwrap();
        let got = engine.receive(&q, 2, 30, None, 1_000).await.unwrap();
        assert_eq!(got.messages.len(), 2);
        let deleted_handle = got.messages[1].receipt_handle.clone();
        let answers = engine
            .delete(&q, std::slice::from_ref(&deleted_handle), 1_000)
            .await
            .unwrap();
        assert_eq!(answers, vec![Ok(())]);
        let uid = ReceiptHandle::decode(&deleted_handle, engine.handle_key())
            .unwrap()
            .queue_uid;
        (sent[0].clone().unwrap().seq, deleted_handle, uid)
    };

    let engine = open(dir.path(), CommitMode::Group);
    assert_eq!(
        engine.get_tenant(&tenant.id).await.unwrap(),
        Some(tenant.clone())
    );
    let info = engine.get_queue(&q, 2_000).await.unwrap().unwrap();
    assert_eq!(info.config, config);
    assert_eq!((info.created_at, info.updated_at), (10, 10));
    // The received-but-not-deleted message is visible again; the delayed one is still delayed.
    assert_eq!(info.stats.visible, 1);
    assert_eq!(info.stats.in_flight, 0);
    assert_eq!(info.stats.delayed, 1);
    assert_eq!(engine.get_queue(&other, 2_000).await.unwrap(), None);
    assert_eq!(engine.count_queues(&tenant.id).await.unwrap(), 1);

    let got = engine.receive(&q, 10, 30, None, 2_000).await.unwrap();
    assert_eq!(got.messages.len(), 1);
    let m = &got.messages[0].message;
    assert_eq!(m.body, "kept");
    assert_eq!(m.message_id, "id-kept");
    assert_eq!(m.seq, kept_seq);
    assert_eq!(m.sent_at, 1_000);
    assert_eq!(m.receive_count, 1);
    assert_eq!(m.group_id.as_deref(), Some("g"));
    assert_eq!(m.attributes["kind"].value, "x");

    // The delete's handle still answers Ok (the message is gone), handles stay this queue's.
    let answers = engine.delete(&q, &[deleted_handle], 2_000).await.unwrap();
    assert_eq!(answers, vec![Ok(())]);
    assert_eq!(
        got.messages[0].receipt_handle.len(),
        sluice_engine::HANDLE_CHARS
    );
    assert_eq!(
        ReceiptHandle::decode(&got.messages[0].receipt_handle, engine.handle_key())
            .unwrap()
            .queue_uid,
        uid
    );

    // Sequence numbers keep growing across restarts.
    let sent = engine
        .send(&q, vec![message("after", 2_000)], 2_000)
        .await
        .unwrap();
    assert!(sent[0].clone().unwrap().seq > kept_seq + 2);
}

#[tokio::test]
async fn seqs_never_go_back_even_when_the_queue_was_emptied() {
    let dir = tempfile::tempdir().unwrap();
    let q = key("t", "q");
    let first = {
        let engine = open(dir.path(), CommitMode::Group);
        engine
            .put_queue(&q, QueueConfig::with_defaults(1024), 0)
            .await
            .unwrap();
        let sent = engine.send(&q, vec![message("a", 0)], 0).await.unwrap();
        engine.purge(&q).await.unwrap();
        sent[0].clone().unwrap().seq
    };
    let engine = open(dir.path(), CommitMode::Group);
    assert_eq!(
        engine
            .get_queue(&q, 0)
            .await
            .unwrap()
            .unwrap()
            .stats
            .visible,
        0
    );
    let sent = engine.send(&q, vec![message("b", 0)], 0).await.unwrap();
    assert!(sent[0].clone().unwrap().seq > first);
}

#[tokio::test]
async fn deleting_a_tenant_removes_its_queues_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let t = TenantId::parse("gone").unwrap();
    let q = key("gone", "q");
    let keep = key("stay", "q");
    {
        let engine = open(dir.path(), CommitMode::Group);
        engine.ensure_tenant(&t, None, 1).await.unwrap();
        for k in [&q, &keep] {
            engine
                .put_queue(k, QueueConfig::with_defaults(1024), 0)
                .await
                .unwrap();
            engine.send(k, vec![message("m", 0)], 0).await.unwrap();
        }
        assert!(engine.delete_tenant(&t, 5_000).await.unwrap());
        assert!(!engine.delete_tenant(&t, 6_000).await.unwrap());
    }
    let engine = open(dir.path(), CommitMode::Group);
    assert_eq!(engine.get_tenant(&t).await.unwrap(), None);
    // The tombstone is on disk: tokens issued before the deletion stay refused.
    assert_eq!(engine.tenant_deleted_at(&t).await.unwrap(), Some(5_000));
    assert_eq!(
        engine.ensure_tenant(&t, Some(5_000), 7_000).await,
        Err(EngineError::TenantDeleted { deleted_at: 5_000 })
    );
    assert_eq!(engine.get_tenant(&t).await.unwrap(), None);
    assert_eq!(engine.get_queue(&q, 0).await.unwrap(), None);
    assert_eq!(engine.count_queues(&t).await.unwrap(), 0);
    let info = engine.get_queue(&keep, 0).await.unwrap().unwrap();
    assert_eq!(info.stats.visible, 1);
}

#[tokio::test]
async fn expired_messages_are_deleted_durably() {
    let dir = tempfile::tempdir().unwrap();
    let q = key("t", "q");
    let mut config = QueueConfig::with_defaults(1024);
    config.message_retention_seconds = 60;
    {
        let engine = open(dir.path(), CommitMode::Group);
        engine.put_queue(&q, config, 0).await.unwrap();
        engine
            .send(&q, vec![message("old", 0), message("old2", 0)], 0)
            .await
            .unwrap();
        engine
            .send(&q, vec![message("young", 50_000)], 50_000)
            .await
            .unwrap();
        assert_eq!(engine.expire(60_000).await.unwrap(), 2);
        assert_eq!(engine.expire(60_000).await.unwrap(), 0);
    }
    let engine = open(dir.path(), CommitMode::Group);
    let info = engine.get_queue(&q, 0).await.unwrap().unwrap();
    assert_eq!(info.stats.delayed + info.stats.visible, 1);
    assert_eq!(info.stats.oldest_sent_at, Some(50_000));
}

#[tokio::test]
async fn the_sweep_visits_only_queues_with_something_due() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = QueueConfig::with_defaults(1024);
    config.message_retention_seconds = 60;
    let (busy, drained, idle) = (key("t", "busy"), key("t", "drained"), key("t", "idle"));
    {
        let engine = open(dir.path(), CommitMode::Group);
        for q in [&busy, &drained, &idle] {
            engine.put_queue(q, config.clone(), 0).await.unwrap();
        }
        // Empty queues are filed nowhere: a round costs them nothing.
        assert_eq!(engine.queue_due.len(), 0);
        engine.send(&busy, vec![message("a", 0)], 0).await.unwrap();
        engine
            .send(&busy, vec![message("b", 0)], 1_000)
            .await
            .unwrap();
        engine
            .send(&drained, vec![message("c", 0)], 2_000)
            .await
            .unwrap();
        // Filed under its oldest message's expiry; a later send does not file it again.
        assert_eq!(engine.queue_due.len(), 2);
        assert_eq!(engine.queue_due.first(), Some(60_000));
        // A shorter retention brings the expiry forward: filed there too.
        let mut shorter = config.clone();
        shorter.message_retention_seconds = 30;
        engine.put_queue(&drained, shorter, 2_000).await.unwrap();
        assert_eq!(engine.queue_due.first(), Some(32_000));
        // Its consumer takes the message: the entry stays, costs one look, and goes (the one
        // under the old retention's expiry too, in its turn).
        let got = engine.receive(&drained, 1, 30, None, 3_000).await.unwrap();
        let handle = got.messages[0].receipt_handle.clone();
        engine.delete(&drained, &[handle], 3_000).await.unwrap();
        assert_eq!(engine.expire(32_000).await.unwrap(), 0);
        assert_eq!(engine.queue_due.len(), 2);
        // Due: expired, and filed again under the next message's expiry.
        assert_eq!(engine.expire(60_000).await.unwrap(), 1);
        assert_eq!(engine.queue_due.first(), Some(61_000));
        assert_eq!(engine.expire(62_000).await.unwrap(), 1);
        assert_eq!(engine.queue_due.len(), 0);
        engine
            .send(&busy, vec![message("e", 0)], 1_000)
            .await
            .unwrap();
    }
    // Re-opened: filed from what was loaded.
    let engine = open(dir.path(), CommitMode::Group);
    assert_eq!(engine.queue_due.first(), Some(61_000));
    assert_eq!(engine.expire(60_999).await.unwrap(), 0);
    assert_eq!(engine.expire(61_000).await.unwrap(), 1);
    assert_eq!(engine.queue_due.len(), 0);
    // A deleted queue is taken out.
    engine
        .send(&idle, vec![message("d", 0)], 5_000)
        .await
        .unwrap();
    assert_eq!(engine.queue_due.len(), 1);
    engine.delete_queue(&idle).await.unwrap();
    assert_eq!(engine.queue_due.len(), 0);
}

#[tokio::test]
async fn a_listener_wakes_on_send_and_on_queue_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), CommitMode::Group);
    let q = key("t", "q");
    engine
        .put_queue(&q, QueueConfig::with_defaults(1024), 0)
        .await
        .unwrap();
    let mut listener = engine.listen(&q).await.unwrap();
    engine.send(&q, vec![message("m", 0)], 0).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), listener.changed())
        .await
        .unwrap();
    let mut listener = engine.listen(&q).await.unwrap();
    engine.delete_queue(&q).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), listener.changed())
        .await
        .unwrap();
    assert_eq!(
        engine.listen(&q).await.unwrap_err(),
        EngineError::QueueNotFound
    );
}

#[tokio::test]
async fn the_same_directory_cannot_be_opened_twice() {
    let dir = tempfile::tempdir().unwrap();
    let _engine = open(dir.path(), CommitMode::Group);
    assert!(EmbeddedEngine::open(dir.path(), EmbeddedOptions::default()).is_err());
}

#[tokio::test]
async fn a_send_cancelled_while_committing_still_lands_in_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), CommitMode::Group);
    let q = key("t", "q");
    let mut config = QueueConfig::with_defaults(1024);
    config.max_depth = Some(2);
    engine.put_queue(&q, config, 0).await.unwrap();
    // Park the commit thread so the send below cannot complete while it is being polled.
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let parked = engine.store.submit_then(Vec::new(), move |_| {
        let _ = gate.recv();
    });
    // Polled once (which submits the write), then dropped: a client that hung up.
    let cancelled = tokio::time::timeout(
        std::time::Duration::ZERO,
        engine.send(&q, vec![message("orphan?", 0)], 0),
    )
    .await;
    assert!(cancelled.is_err());
    release.send(()).unwrap();
    parked.wait().await.unwrap();
    // A later write commits after the cancelled one, so by its answer the first is indexed.
    engine.send(&q, vec![message("next", 0)], 0).await.unwrap();
    let info = engine.get_queue(&q, 0).await.unwrap().unwrap();
    assert_eq!(info.stats.visible, 2);
    // And the reservation was released: the queue is exactly full, not over-counted.
    let answers = engine.send(&q, vec![message("full", 0)], 0).await.unwrap();
    assert_eq!(answers, vec![Err(SendRejection::QueueFull)]);
    let got = engine.receive(&q, 10, 30, None, 0).await.unwrap();
    let bodies: Vec<&str> = got
        .messages
        .iter()
        .map(|m| m.message.body.as_str())
        .collect();
    assert_eq!(bodies, ["orphan?", "next"]);
}

/// A queue's delivery numbers count its own deliveries only: however much another tenant
/// receives in between, the numbers in one queue's handles advance by one per delivery, so
/// they reveal nothing of other tenants' traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_numbers_do_not_count_other_tenants_deliveries() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), CommitMode::Group);
    let (mine, theirs) = (key("me", "q"), key("them", "q"));
    for q in [&mine, &theirs] {
        engine
            .put_queue(q, QueueConfig::with_defaults(1024), 0)
            .await
            .unwrap();
    }
    engine.send(&mine, vec![message("a", 0)], 0).await.unwrap();
    let bodies: Vec<NewMessage> = (0..50).map(|i| message(&format!("t{i}"), 0)).collect();
    engine.send(&theirs, bodies, 0).await.unwrap();

    let delivery = |text: &str| {
        ReceiptHandle::decode(text, engine.handle_key())
            .unwrap()
            .delivery
    };
    let mut numbers = Vec::new();
    for round in 0..3 {
        // Visibility 0: the message is receivable again at once, each receive a new delivery.
        let got = engine.receive(&mine, 1, 0, None, 0).await.unwrap();
        numbers.push(delivery(&got.messages[0].receipt_handle));
        let other = engine.receive(&theirs, 10 * (round + 1), 0, None, 0).await;
        assert!(!other.unwrap().messages.is_empty());
    }
    assert_eq!(
        numbers,
        [
            numbers[0],
            numbers[0].wrapping_add(1),
            numbers[0].wrapping_add(2)
        ],
        "the other tenant's receives show in my handles"
    );
}
