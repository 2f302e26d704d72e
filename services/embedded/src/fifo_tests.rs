//! FIFO queues through the engine: ordering and group locking end to end, deduplication
//! (window, scope, batches, concurrency, restarts) and receive attempts. The index-level
//! details (fairness, expiry, delays) are tested in `index.rs`.

use super::*;
use sluice_engine::{
    DeduplicationScope, ReceiptHandle, DEDUPLICATION_WINDOW_MS, RECEIVE_ATTEMPT_WINDOW_MS,
};
use std::collections::BTreeMap;
use tokio::task::JoinSet;

fn key(name: &str) -> QueueKey {
    QueueKey::new(
        TenantId::parse("t").unwrap(),
        QueueName::parse(name).unwrap(),
    )
}

fn open(dir: &Path) -> EmbeddedEngine {
    EmbeddedEngine::open(dir, EmbeddedOptions::default()).unwrap()
}

/// A FIFO message: body, group and deduplication id (the body when `None` is not asked for).
fn msg(body: &str, group: &str, dedup: Option<&str>, now: Millis) -> NewMessage {
    NewMessage {
        payload: None,
        message_id: format!("id-{body}"),
        body: body.to_owned(),
        attributes: BTreeMap::new(),
        visible_at: now,
        group_id: Some(group.to_owned()),
        deduplication_id: dedup.map(str::to_owned),
    }
}

async fn fifo_queue(engine: &EmbeddedEngine, name: &str, scope: DeduplicationScope) -> QueueKey {
    let q = key(name);
    let mut config = QueueConfig::with_defaults(262_144);
    config.deduplication_scope = scope;
    engine.put_queue(&q, config, 0).await.unwrap();
    q
}

async fn send_one(
    engine: &EmbeddedEngine,
    q: &QueueKey,
    m: NewMessage,
    now: Millis,
) -> SentMessage {
    engine.send(q, vec![m], now).await.unwrap()[0]
        .clone()
        .unwrap()
}

fn bodies(outcome: &ReceiveOutcome) -> Vec<&str> {
    outcome
        .messages
        .iter()
        .map(|m| m.message.body.as_str())
        .collect()
}

async fn depth(engine: &EmbeddedEngine, q: &QueueKey, now: Millis) -> u64 {
    let s = engine.get_queue(q, now).await.unwrap().unwrap().stats;
    s.visible + s.in_flight + s.delayed
}

#[tokio::test]
async fn groups_are_delivered_in_order_one_delivery_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let q = fifo_queue(&engine, "q.fifo", DeduplicationScope::Queue).await;
    let batch = ["a1", "a2", "b1", "a3", "c1"]
        .iter()
        .enumerate()
        .map(|(i, b)| msg(b, &b[..1], Some(&i.to_string()), 0))
        .collect();
    engine.send(&q, batch, 0).await.unwrap();

    let first = engine.receive(&q, 2, 30, None, 0).await.unwrap();
    assert_eq!(bodies(&first), ["a1", "a2"]);
    let m = &first.messages[0].message;
    assert_eq!(m.group_id.as_deref(), Some("a"));
    assert_eq!(m.deduplication_id.as_deref(), Some("0"));
    let second = engine.receive(&q, 10, 30, None, 0).await.unwrap();
    assert_eq!(bodies(&second), ["b1", "c1"]);
    assert_eq!(second.next_visible_at, Some(30_000));
    assert!(engine
        .receive(&q, 10, 30, None, 0)
        .await
        .unwrap()
        .messages
        .is_empty());

    // a2 back at once, a1 still in flight: `a` stays locked; a1's delete unlocks it, a2 first.
    let h = |o: &ReceiveOutcome, i: usize| o.messages[i].receipt_handle.clone();
    engine
        .change_visibility(&q, &[(h(&first, 1), 0)], 1)
        .await
        .unwrap();
    assert!(engine
        .receive(&q, 10, 30, None, 1)
        .await
        .unwrap()
        .messages
        .is_empty());
    let mut listener = engine.listen(&q).await.unwrap();
    engine.delete(&q, &[h(&first, 0)], 2).await.unwrap();
    // Deleting can make a group deliverable: long polls are woken.
    tokio::time::timeout(std::time::Duration::from_secs(5), listener.changed())
        .await
        .unwrap();
    let third = engine.receive(&q, 10, 30, None, 2).await.unwrap();
    assert_eq!(bodies(&third), ["a2", "a3"]);
    assert_eq!(third.messages[0].message.receive_count, 2);

    // After a restart everything is visible again, still in group order.
    drop(engine);
    let engine = open(dir.path());
    let all = engine.receive(&q, 10, 30, None, 3).await.unwrap();
    assert_eq!(bodies(&all), ["a2", "a3", "b1", "c1"]);
}

#[tokio::test]
async fn standard_queues_ignore_groups_and_deduplication() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let q = key("plain");
    engine
        .put_queue(&q, QueueConfig::with_defaults(1024), 0)
        .await
        .unwrap();
    let sent = engine
        .send(
            &q,
            vec![msg("x", "g", Some("d"), 0), msg("y", "g", Some("d"), 0)],
            0,
        )
        .await
        .unwrap();
    assert!(sent.iter().all(|s| !s.as_ref().unwrap().duplicate));
    let got = engine.receive(&q, 1, 30, Some("r"), 0).await.unwrap();
    assert_eq!(bodies(&got), ["x"]);
    assert_eq!(got.messages[0].message.deduplication_id, None);
    // Same group, first still in flight: a standard queue delivers anyway; the attempt id
    // does not replay.
    let got = engine.receive(&q, 1, 30, Some("r"), 0).await.unwrap();
    assert_eq!(bodies(&got), ["y"]);
}

#[tokio::test]
async fn a_deduplication_id_is_taken_for_the_window_even_after_delete() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let q = fifo_queue(&engine, "q.fifo", DeduplicationScope::Queue).await;
    let t0 = 1_000;
    let original = send_one(&engine, &q, msg("first", "g", Some("d"), t0), t0).await;
    assert!(!original.duplicate);

    let again = send_one(&engine, &q, msg("second", "h", Some("d"), t0 + 1), t0 + 1).await;
    assert_eq!(
        again,
        SentMessage {
            message_id: "id-first".into(),
            seq: original.seq,
            duplicate: true
        }
    );
    assert_eq!(depth(&engine, &q, t0).await, 1);

    // Received and deleted: still a duplicate until the window ends.
    let got = engine.receive(&q, 10, 30, None, t0 + 2).await.unwrap();
    assert_eq!(bodies(&got), ["first"]);
    let handle = got.messages[0].receipt_handle.clone();
    engine.delete(&q, &[handle], t0 + 3).await.unwrap();
    let last_moment = t0 + DEDUPLICATION_WINDOW_MS - 1;
    let again = send_one(
        &engine,
        &q,
        msg("third", "g", Some("d"), last_moment),
        last_moment,
    )
    .await;
    assert!(again.duplicate);
    assert_eq!(depth(&engine, &q, last_moment).await, 0);

    let after = t0 + DEDUPLICATION_WINDOW_MS;
    let fresh = send_one(&engine, &q, msg("fourth", "g", Some("d"), after), after).await;
    assert!(!fresh.duplicate);
    assert!(fresh.seq > original.seq);
    assert_eq!(fresh.message_id, "id-fourth");
    // And the new acceptance starts a new window.
    let again = send_one(
        &engine,
        &q,
        msg("fifth", "g", Some("d"), after + 1),
        after + 1,
    )
    .await;
    assert_eq!((again.seq, again.duplicate), (fresh.seq, true));
}

#[tokio::test]
async fn the_scope_decides_what_counts_as_the_same_id() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let per_queue = fifo_queue(&engine, "queue.fifo", DeduplicationScope::Queue).await;
    let per_group = fifo_queue(&engine, "group.fifo", DeduplicationScope::MessageGroup).await;
    for (q, other_group_is_duplicate) in [(&per_queue, true), (&per_group, false)] {
        let sent = engine
            .send(
                q,
                vec![
                    msg("a", "g1", Some("d"), 0),
                    msg("b", "g2", Some("d"), 0),
                    msg("c", "g1", Some("d"), 0),
                    msg("e", "g1", Some("other"), 0),
                ],
                0,
            )
            .await
            .unwrap();
        let dup: Vec<bool> = sent.iter().map(|s| s.as_ref().unwrap().duplicate).collect();
        assert_eq!(dup, [false, other_group_is_duplicate, true, false], "{q}");
        // A duplicate within the batch answers the first entry's id and seq.
        let first = sent[0].as_ref().unwrap();
        let third = sent[2].as_ref().unwrap();
        assert_eq!(
            (&third.message_id, third.seq),
            (&first.message_id, first.seq)
        );
        let expected_depth = if other_group_is_duplicate { 2 } else { 3 };
        assert_eq!(depth(&engine, q, 0).await, expected_depth);
    }
}

#[tokio::test]
async fn duplicates_do_not_count_towards_max_depth() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let q = key("full.fifo");
    let mut config = QueueConfig::with_defaults(1024);
    config.max_depth = Some(1);
    engine.put_queue(&q, config, 0).await.unwrap();
    let sent = engine
        .send(
            &q,
            vec![
                msg("a", "g", Some("x"), 0),
                msg("b", "g", Some("x"), 0),
                msg("c", "g", Some("y"), 0),
            ],
            0,
        )
        .await
        .unwrap();
    assert!(!sent[0].as_ref().unwrap().duplicate);
    assert!(sent[1].as_ref().unwrap().duplicate);
    assert_eq!(sent[2], Err(SendRejection::QueueFull));
    // A refused message took no deduplication id: once there is room, it is accepted.
    let got = engine.receive(&q, 1, 30, None, 0).await.unwrap();
    engine
        .delete(&q, &[got.messages[0].receipt_handle.clone()], 0)
        .await
        .unwrap();
    let retry = send_one(&engine, &q, msg("c", "g", Some("y"), 1), 1).await;
    assert!(!retry.duplicate);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_of_one_id_store_one_message() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(open(dir.path()));
    let q = fifo_queue(&engine, "q.fifo", DeduplicationScope::Queue).await;
    let mut tasks = JoinSet::new();
    for i in 0..32 {
        let (engine, q) = (Arc::clone(&engine), q.clone());
        tasks.spawn(async move {
            let m = msg(&format!("m{i}"), &format!("g{i}"), Some("same"), 0);
            send_one(&engine, &q, m, 0).await
        });
    }
    let mut answers = Vec::new();
    while let Some(done) = tasks.join_next().await {
        answers.push(done.unwrap());
    }
    assert_eq!(answers.iter().filter(|a| !a.duplicate).count(), 1);
    let original = answers.iter().find(|a| !a.duplicate).unwrap();
    assert!(answers
        .iter()
        .all(|a| a.seq == original.seq && a.message_id == original.message_id));
    let got = engine.receive(&q, 10, 30, None, 0).await.unwrap();
    assert_eq!(got.messages.len(), 1);
    assert_eq!(got.messages[0].message.message_id, original.message_id);
}

#[tokio::test]
async fn deduplication_survives_a_restart_until_its_window_ends() {
    let dir = tempfile::tempdir().unwrap();
    let q = key("q.fifo");
    let original = {
        let engine = open(dir.path());
        fifo_queue(&engine, "q.fifo", DeduplicationScope::MessageGroup).await;
        let original = send_one(&engine, &q, msg("a", "g", Some("d"), 0), 0).await;
        send_one(&engine, &q, msg("b", "g", Some("e"), 10), 10).await;
        original
    };
    {
        let engine = open(dir.path());
        let again = send_one(&engine, &q, msg("c", "g", Some("d"), 100), 100).await;
        assert_eq!(
            (again.message_id.as_str(), again.seq, again.duplicate),
            ("id-a", original.seq, true)
        );
        // Another group is another id space under this scope.
        assert!(
            !send_one(&engine, &q, msg("c", "h", Some("d"), 100), 100)
                .await
                .duplicate
        );
        // The sweep drops the records whose window is over, durably: `d` of `g` (sent at 0),
        // not `e` (sent at 10).
        engine.expire(DEDUPLICATION_WINDOW_MS + 5).await.unwrap();
    }
    let engine = open(dir.path());
    // (Asking at an earlier instant shows what the store still holds.)
    assert!(
        !send_one(&engine, &q, msg("x", "g", Some("d"), 50), 50)
            .await
            .duplicate
    );
    assert!(
        send_one(&engine, &q, msg("y", "g", Some("e"), 50), 50)
            .await
            .duplicate
    );
    // Deleting the queue deletes its records: a new queue of the same name starts afresh.
    engine.delete_queue(&q).await.unwrap();
    drop(engine);
    let engine = open(dir.path());
    fifo_queue(&engine, "q.fifo", DeduplicationScope::MessageGroup).await;
    assert!(
        !send_one(&engine, &q, msg("z", "g", Some("e"), 60), 60)
            .await
            .duplicate
    );
}

#[tokio::test]
async fn a_retried_receive_attempt_answers_the_same_deliveries() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let q = fifo_queue(&engine, "q.fifo", DeduplicationScope::Queue).await;
    // Nothing to answer is not remembered: a long poll asks again with the same id.
    let empty = engine.receive(&q, 10, 30, Some("r1"), 0).await.unwrap();
    assert!(empty.messages.is_empty());
    let batch = (0..4)
        .map(|i| {
            msg(
                &format!("m{i}"),
                &format!("g{}", i % 2),
                Some(&i.to_string()),
                0,
            )
        })
        .collect();
    engine.send(&q, batch, 0).await.unwrap();

    let first = engine.receive(&q, 1, 30, Some("r1"), 0).await.unwrap();
    assert_eq!(bodies(&first), ["m0"]);
    let stats = engine.get_queue(&q, 0).await.unwrap().unwrap().stats;
    let retry = engine.receive(&q, 10, 30, Some("r1"), 5).await.unwrap();
    assert_eq!(retry, first);
    assert_eq!(engine.get_queue(&q, 0).await.unwrap().unwrap().stats, stats);
    // The handle works as usual; a different attempt is a new receive.
    let other = engine.receive(&q, 10, 30, Some("r2"), 5).await.unwrap();
    assert_eq!(bodies(&other), ["m1", "m3"]);
    engine
        .change_visibility(&q, &[(first.messages[0].receipt_handle.clone(), 0)], 6)
        .await
        .unwrap();
    assert_eq!(
        engine.receive(&q, 10, 30, Some("r1"), 7).await.unwrap(),
        first
    );
    // Past the window the id is new again.
    let later = RECEIVE_ATTEMPT_WINDOW_MS;
    let fresh = engine.receive(&q, 10, 30, Some("r1"), later).await.unwrap();
    assert_eq!(bodies(&fresh), ["m0", "m2", "m1", "m3"]);
    assert_eq!(fresh.messages[0].message.receive_count, 2);
}

#[tokio::test]
async fn a_format_1_file_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let (uid, seq) = store::tests::write_format_1(&dir.path().join(DATABASE_FILE));
    let engine = open(dir.path());
    let q = key("old");
    let info = engine.get_queue(&q, 0).await.unwrap().unwrap();
    assert_eq!(info.config.visibility_timeout_seconds, 45);
    assert!(!info.config.content_based_deduplication);
    assert_eq!(info.config.deduplication_scope, DeduplicationScope::Queue);
    let got = engine.receive(&q, 10, 30, None, 0).await.unwrap();
    assert_eq!(bodies(&got), ["old body"]);
    let m = &got.messages[0];
    assert_eq!(
        (m.message.seq, m.message.deduplication_id.as_deref()),
        (seq, None)
    );
    assert_eq!(
        ReceiptHandle::decode(&m.receipt_handle, engine.handle_key())
            .unwrap()
            .queue_uid,
        uid
    );
    drop(engine);
    // Opened again, it is format 2 as written.
    let engine = open(dir.path());
    assert_eq!(depth(&engine, &q, 0).await, 1);
}

#[tokio::test]
async fn the_sweep_is_due_when_a_deduplication_record_or_attempt_ends() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let q = fifo_queue(&engine, "q.fifo", DeduplicationScope::Queue).await;
    assert_eq!(engine.queue_due.len(), 0);
    send_one(&engine, &q, msg("a", "g", Some("d"), 0), 0).await;
    // The record's window ends long before the message's retention.
    assert_eq!(engine.queue_due.first(), Some(DEDUPLICATION_WINDOW_MS));
    let got = engine.receive(&q, 1, 30, Some("r"), 1_000).await.unwrap();
    engine
        .delete(&q, &[got.messages[0].receipt_handle.clone()], 1_000)
        .await
        .unwrap();
    // The record is forgotten; the attempt remembered after it is due next.
    engine.expire(DEDUPLICATION_WINDOW_MS).await.unwrap();
    assert_eq!(
        engine.queue_due.first(),
        Some(1_000 + RECEIVE_ATTEMPT_WINDOW_MS)
    );
    engine
        .expire(1_000 + RECEIVE_ATTEMPT_WINDOW_MS)
        .await
        .unwrap();
    // Nothing is left to do: no message, no record, no attempt.
    assert_eq!(engine.queue_due.len(), 0);
    assert!(
        !send_one(
            &engine,
            &q,
            msg("b", "g", Some("d"), 0),
            DEDUPLICATION_WINDOW_MS
        )
        .await
        .duplicate
    );
}
