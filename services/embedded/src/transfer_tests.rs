//! Moves between queues through the engine, where the embedded engine has something of its own
//! to get right: a move survives a restart with the message in exactly one queue and its
//! dead-letter record kept, a format-2 file opens, moves in opposite directions never deadlock
//! nor lose or duplicate a message. The shared rules are the conformance suite's.

use super::*;
use sluice_engine::{DeadLetter, ReceiptHandle, RedrivePolicy};
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

fn message(body: &str, group: Option<&str>) -> NewMessage {
    NewMessage {
        payload: None,
        message_id: format!("id-{body}"),
        body: body.to_owned(),
        attributes: BTreeMap::new(),
        visible_at: 0,
        group_id: group.map(str::to_owned),
        deduplication_id: group.map(|_| format!("d-{body}")),
    }
}

/// Creates `name`, moving to `dead_letter_queue` after `max_receive_count` receives if given.
async fn queue(engine: &EmbeddedEngine, name: &str, dead_letter_queue: Option<(&str, u32)>) {
    let mut config = QueueConfig::with_defaults(262_144);
    config.redrive_policy = dead_letter_queue.map(|(dlq, max_receive_count)| RedrivePolicy {
        dead_letter_queue: QueueName::parse(dlq).unwrap(),
        max_receive_count,
    });
    engine.put_queue(&key(name), config, 0).await.unwrap();
}

async fn send(engine: &EmbeddedEngine, name: &str, body: &str, now: Millis) -> u64 {
    let group = name.ends_with(".fifo").then_some("g");
    engine
        .send(&key(name), vec![message(body, group)], now)
        .await
        .unwrap()[0]
        .clone()
        .unwrap()
        .seq
}

/// Every message of the queue, whatever its state, lowest seq first.
async fn all(engine: &EmbeddedEngine, name: &str, now: Millis) -> Vec<StoredMessage> {
    let mut out = Vec::new();
    for state in [
        MessageState::Visible,
        MessageState::InFlight,
        MessageState::Delayed,
    ] {
        out.extend(engine.peek(&key(name), state, 1000, now).await.unwrap());
    }
    out.sort_by_key(|m| m.seq);
    out
}

fn bodies(messages: &[StoredMessage]) -> Vec<&str> {
    messages.iter().map(|m| m.body.as_str()).collect()
}

#[tokio::test]
async fn moves_survive_a_restart_with_each_message_in_exactly_one_queue() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    queue(&engine, "dlq", None).await;
    queue(&engine, "src", Some(("dlq", 1))).await;
    queue(&engine, "dlq.fifo", None).await;
    queue(&engine, "src.fifo", Some(("dlq.fifo", 1))).await;
    for body in ["auto", "asked", "redriven", "stays"] {
        send(&engine, "src", body, 0).await;
    }
    send(&engine, "src.fifo", "f", 0).await;

    // "auto" moves on its second receive; "asked" on the consumer's word; "redriven" moves
    // there and back.
    let first = engine.receive(&key("src"), 10, 60, None, 10).await.unwrap();
    let handle_of = |body: &str| {
        first
            .messages
            .iter()
            .find(|m| m.message.body == body)
            .unwrap()
            .receipt_handle
            .clone()
    };
    for body in ["asked", "redriven"] {
        let moved = engine
            .dead_letter(&key("src"), &handle_of(body), "unparsable", 20)
            .await
            .unwrap();
        assert_eq!(moved, Ok(()));
    }
    let stays = handle_of("stays");
    engine
        .change_visibility(&key("src"), &[(handle_of("auto"), 0)], 30)
        .await
        .unwrap()[0]
        .unwrap();
    let moved = engine.receive(&key("src"), 10, 60, None, 30).await.unwrap();
    assert_eq!((moved.messages.len(), moved.dead_lettered), (0, 1));
    let redriven = all(&engine, "dlq", 40)
        .await
        .into_iter()
        .find(|m| m.body == "redriven")
        .unwrap();
    let outcome = engine
        .redrive(&key("dlq"), &[redriven.seq], None, 40)
        .await
        .unwrap();
    assert_eq!(outcome, [RedriveOutcome::Moved]);
    assert_eq!(
        engine
            .receive(&key("src.fifo"), 1, 0, None, 50)
            .await
            .unwrap()
            .messages
            .len(),
        1
    );
    let moved = engine
        .receive(&key("src.fifo"), 1, 0, None, 60)
        .await
        .unwrap();
    assert_eq!(moved.dead_lettered, 1);
    let before: Vec<Vec<StoredMessage>> = {
        let mut v = Vec::new();
        for name in ["src", "dlq", "src.fifo", "dlq.fifo"] {
            v.push(all(&engine, name, 1_000_000).await);
        }
        v
    };
    drop(engine);

    let engine = open(dir.path());
    let src = all(&engine, "src", 1_000_000).await;
    let dlq = all(&engine, "dlq", 1_000_000).await;
    assert_eq!(
        bodies(&src),
        ["stays", "redriven"],
        "the redriven one at the end"
    );
    assert_eq!(bodies(&dlq), ["asked", "auto"]);
    assert!(src.iter().all(|m| m.dead_letter.is_none()));
    assert_eq!(
        dlq[0].dead_letter,
        Some(DeadLetter {
            source_queue: QueueName::parse("src").unwrap(),
            reason: "unparsable".into(),
            receive_count: 1,
            moved_at: 20,
        })
    );
    assert_eq!(
        dlq[1].dead_letter,
        Some(DeadLetter {
            source_queue: QueueName::parse("src").unwrap(),
            reason: DeadLetter::MAX_RECEIVE_COUNT_EXCEEDED.into(),
            receive_count: 1,
            moved_at: 30,
        })
    );
    assert!(dlq.iter().all(|m| m.sent_at == 0), "standard keeps sent_at");
    let fifo = all(&engine, "dlq.fifo", 1_000_000).await;
    assert_eq!(bodies(&fifo), ["f"]);
    assert_eq!(fifo[0].sent_at, 60, "FIFO restarts retention at the move");
    assert_eq!(fifo[0].group_id.as_deref(), Some("g"));
    assert_eq!(fifo[0].deduplication_id.as_deref(), Some("d-f"));
    assert!(all(&engine, "src.fifo", 1_000_000).await.is_empty());
    // Everything but receive bookkeeping (reset by a restart) reads back as before it.
    for (name, before) in ["src", "dlq", "src.fifo", "dlq.fifo"]
        .into_iter()
        .zip(before)
    {
        let after = all(&engine, name, 1_000_000).await;
        let strip = |m: &StoredMessage| {
            (
                m.seq,
                m.message_id.clone(),
                m.sent_at,
                m.dead_letter.clone(),
            )
        };
        assert_eq!(
            after.iter().map(strip).collect::<Vec<_>>(),
            before.iter().map(strip).collect::<Vec<_>>(),
            "{name}"
        );
    }
    // Seqs handed out by moves are never handed out again.
    let next = send(&engine, "dlq", "later", 2_000).await;
    assert!(dlq.iter().all(|m| m.seq < next));
    // The handle of the message that stayed is stale after the restart, as any handle is.
    assert_eq!(
        engine
            .dead_letter(&key("src"), &stays, "late", 2_000)
            .await
            .unwrap(),
        Err(DeadLetterRefusal::Handle(HandleError::Stale))
    );
}

#[tokio::test]
async fn a_redriven_message_in_flight_loses_its_handle() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    queue(&engine, "a", None).await;
    queue(&engine, "b", None).await;
    let seq = send(&engine, "a", "m", 0).await;
    let got = engine.receive(&key("a"), 1, 60, None, 0).await.unwrap();
    let handle = got.messages[0].receipt_handle.clone();
    let b = QueueName::parse("b").unwrap();
    let outcome = engine
        .redrive(&key("a"), &[seq, seq], Some(&b), 1)
        .await
        .unwrap();
    assert_eq!(outcome, [RedriveOutcome::Moved, RedriveOutcome::Gone]);
    assert_eq!(
        engine
            .change_visibility(&key("a"), &[(handle, 0)], 2)
            .await
            .unwrap(),
        [Err(HandleError::Stale)]
    );
    let moved = all(&engine, "b", 2).await;
    assert_eq!(bodies(&moved), ["m"]);
    assert_eq!(
        (moved[0].receive_count, moved[0].first_received_at),
        (0, None)
    );
    // Visible at once in its destination.
    let got = engine.receive(&key("b"), 1, 60, None, 2).await.unwrap();
    assert_eq!(got.messages.len(), 1);
}

#[tokio::test]
async fn a_move_wakes_the_destinations_long_polls() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    queue(&engine, "dlq", None).await;
    queue(&engine, "src", Some(("dlq", 1))).await;
    send(&engine, "src", "m", 0).await;
    let handle = engine
        .receive(&key("src"), 1, 60, None, 0)
        .await
        .unwrap()
        .messages[0]
        .receipt_handle
        .clone();
    let mut listener = engine.listen(&key("dlq")).await.unwrap();
    engine
        .dead_letter(&key("src"), &handle, "bad", 1)
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), listener.changed())
        .await
        .expect("the dead-letter queue's listener fires");
}

#[tokio::test]
async fn a_format_2_file_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let (uid, seq) = store::tests::write_format_2(&dir.path().join(DATABASE_FILE));
    let engine = open(dir.path());
    let q = key("old.fifo");
    let info = engine.get_queue(&q, 0).await.unwrap().unwrap();
    let c = &info.config;
    assert_eq!(c.visibility_timeout_seconds, 45);
    assert!(c.content_based_deduplication);
    assert_eq!(
        c.deduplication_scope,
        sluice_engine::DeduplicationScope::MessageGroup
    );
    assert_eq!(c.max_depth, Some(10));
    assert_eq!(c.tags.get("team").map(String::as_str), Some("a"));
    assert_eq!(
        (&c.redrive_policy, &c.redrive_allow_policy, &c.retry_backoff),
        (&None, &None, &None)
    );
    // Its deduplication record still holds.
    let dup = NewMessage {
        payload: None,
        deduplication_id: Some("d".into()),
        ..message("again", Some("g"))
    };
    let answer = engine.send(&q, vec![dup], 1).await.unwrap()[0]
        .clone()
        .unwrap();
    assert!(answer.duplicate);
    let got = engine.receive(&q, 10, 30, None, 1).await.unwrap();
    assert_eq!(got.messages.len(), 1);
    let m = &got.messages[0].message;
    assert_eq!(
        (m.seq, m.body.as_str(), m.dead_letter.as_ref()),
        (seq, "old body", None)
    );
    assert_eq!(m.group_id.as_deref(), Some("g"));
    assert_eq!(
        ReceiptHandle::decode(&got.messages[0].receipt_handle, engine.handle_key())
            .unwrap()
            .queue_uid,
        uid
    );
    drop(engine);
    // Opened again, it is format 3 as written, and a moved message's record round-trips.
    let engine = open(dir.path());
    assert_eq!(all(&engine, "old.fifo", 1).await.len(), 1);
}

/// Two queues, each the other's dead-letter queue, with receives and redrives racing in both
/// directions: no deadlock, and every message is in exactly one of them at the end (also after
/// a restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moves_in_opposite_directions_neither_deadlock_nor_lose_messages() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(open(dir.path()));
    queue(&engine, "a", Some(("b", 1))).await;
    queue(&engine, "b", Some(("a", 1))).await;
    for i in 0..20 {
        send(&engine, "a", &format!("a{i}"), 0).await;
        send(&engine, "b", &format!("b{i}"), 0).await;
    }
    let mut tasks = JoinSet::new();
    for (from, to) in [("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")] {
        let engine = Arc::clone(&engine);
        tasks.spawn(async move {
            let to = QueueName::parse(to).unwrap();
            for round in 0..50 {
                // Visibility 0: each message received once is moved by the next receive.
                engine.receive(&key(from), 10, 0, None, 0).await.unwrap();
                if round % 5 == 0 {
                    let seqs: Vec<u64> =
                        all(&engine, from, 0).await.iter().map(|m| m.seq).collect();
                    engine
                        .redrive(&key(from), &seqs, Some(&to), 0)
                        .await
                        .unwrap();
                }
            }
        });
    }
    let joined = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    })
    .await;
    assert!(joined.is_ok(), "moves deadlocked");
    let count = |engine: Arc<EmbeddedEngine>| async move {
        let mut ids: Vec<String> = Vec::new();
        for name in ["a", "b"] {
            ids.extend(
                all(&engine, name, 0)
                    .await
                    .into_iter()
                    .map(|m| m.message_id),
            );
            let s = engine
                .get_queue(&key(name), 0)
                .await
                .unwrap()
                .unwrap()
                .stats;
            let peeked = all(&engine, name, 0).await.len() as u64;
            assert_eq!(
                s.visible + s.in_flight + s.delayed,
                peeked,
                "{name}: stats agree"
            );
        }
        ids.sort();
        ids
    };
    let expected: Vec<String> = {
        let mut v: Vec<String> = (0..20)
            .flat_map(|i| [format!("id-a{i}"), format!("id-b{i}")])
            .collect();
        v.sort();
        v
    };
    assert_eq!(count(Arc::clone(&engine)).await, expected);
    drop(engine);
    let engine = Arc::new(open(dir.path()));
    assert_eq!(count(engine).await, expected, "the same on disk");
}

#[tokio::test]
async fn a_redrive_into_a_fifo_queue_files_messages_under_their_groups() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    queue(&engine, "plain", None).await;
    queue(&engine, "ordered.fifo", None).await;
    let mut seqs = Vec::new();
    for (body, group) in [("x1", "x"), ("y1", "y")] {
        let sent = engine
            .send(&key("plain"), vec![message(body, Some(group))], 0)
            .await
            .unwrap();
        seqs.push(sent[0].clone().unwrap().seq);
    }
    let into = QueueName::parse("ordered.fifo").unwrap();
    let outcome = engine
        .redrive(&key("plain"), &seqs, Some(&into), 1)
        .await
        .unwrap();
    assert_eq!(outcome, [RedriveOutcome::Moved, RedriveOutcome::Moved]);
    // With x1 in flight, its group waits, but y's does not.
    let first = engine
        .receive(&key("ordered.fifo"), 1, 60, None, 1)
        .await
        .unwrap();
    assert_eq!(first.messages[0].message.body, "x1");
    let second = engine
        .receive(&key("ordered.fifo"), 1, 60, None, 1)
        .await
        .unwrap();
    assert_eq!(second.messages.len(), 1, "y is another group");
    assert_eq!(second.messages[0].message.group_id.as_deref(), Some("y"));
}
