//! Moves between queues across a crash: a move interrupted after its intent, or after its
//! apply, is completed exactly once by `recover_transfers` (standalone and Cluster, where the
//! two queues live in different slots); one whose dead-letter queue vanished meanwhile goes
//! back exactly as it was, one applied before its destination was deleted stays moved; several
//! engines recovering at once never duplicate a message.

use sluice_engine::{
    DeadLetter, MessageState, Messages, Millis, NewMessage, PayloadEventKind, PayloadRef, Payloads,
    QueueConfig, QueueKey, QueueName, Queues, RedrivePolicy, StoredMessage, TenantId, Transfers,
};
use sluice_redis::{CrashPoint, RedisEngine, RedisOptions, RECOVERY_GRACE_MS};
use sluice_testkit::{shared_cluster, shared_server, unique_prefix};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

const NOW: Millis = 1_767_225_600_000;

fn key(name: &str) -> QueueKey {
    QueueKey::new(
        TenantId::parse("acme").unwrap(),
        QueueName::parse(name).unwrap(),
    )
}

fn message(body: &str) -> NewMessage {
    NewMessage {
        payload: None,
        message_id: format!("id-{body}"),
        body: body.to_owned(),
        attributes: BTreeMap::new(),
        visible_at: NOW,
        group_id: None,
        deduplication_id: None,
    }
}

fn with_dlq(dlq: &str) -> QueueConfig {
    QueueConfig {
        redrive_policy: Some(RedrivePolicy {
            dead_letter_queue: QueueName::parse(dlq).unwrap(),
            max_receive_count: 5,
        }),
        ..QueueConfig::with_defaults(262_144)
    }
}

async fn engine(url: &str, prefix: &str) -> RedisEngine {
    let options = RedisOptions {
        key_prefix: prefix.to_owned(),
        ..RedisOptions::default()
    };
    RedisEngine::connect(url, options)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// Every message of a queue, whatever its state.
async fn all(engine: &RedisEngine, q: &QueueKey, now: Millis) -> Vec<StoredMessage> {
    let mut found = Vec::new();
    for state in [
        MessageState::Visible,
        MessageState::InFlight,
        MessageState::Delayed,
    ] {
        found.extend(engine.peek(q, state, 1000, now).await.unwrap());
    }
    found
}

/// A source queue "src" with one received message and a DLQ "dlq"; answers the handle.
async fn one_received(engine: &RedisEngine, body: &str) -> String {
    engine
        .put_queue(&key("dlq"), QueueConfig::with_defaults(262_144), NOW)
        .await
        .unwrap();
    engine
        .put_queue(&key("src"), with_dlq("dlq"), NOW)
        .await
        .unwrap();
    engine
        .send(&key("src"), vec![message(body)], NOW)
        .await
        .unwrap();
    let got = engine.receive(&key("src"), 1, 30, None, NOW).await.unwrap();
    got.messages[0].receipt_handle.clone()
}

async fn interrupted_after_intent_is_completed_once(url: &str) {
    let engine = engine(url, &unique_prefix("crash-intent")).await;
    let handle = one_received(&engine, "m").await;
    engine
        .dead_letter_interrupted(&key("src"), &handle, "bad", NOW, CrashPoint::AfterIntent)
        .await
        .unwrap()
        .unwrap();
    assert!(all(&engine, &key("src"), NOW).await.is_empty());
    assert!(
        all(&engine, &key("dlq"), NOW).await.is_empty(),
        "in neither queue until recovery"
    );
    assert_eq!(
        engine.recover_transfers(NOW).await.unwrap(),
        0,
        "a move within its grace may still be live: left alone"
    );
    let later = NOW + RECOVERY_GRACE_MS;
    assert_eq!(engine.recover_transfers(later).await.unwrap(), 1);
    let moved = all(&engine, &key("dlq"), later).await;
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].message_id, "id-m");
    assert_eq!(moved[0].receive_count, 0);
    assert_eq!(
        moved[0].dead_letter,
        Some(DeadLetter {
            source_queue: QueueName::parse("src").unwrap(),
            reason: "bad".into(),
            receive_count: 1,
            moved_at: NOW,
        })
    );
    assert!(all(&engine, &key("src"), later).await.is_empty());
    assert_eq!(engine.recover_transfers(later + 60_000).await.unwrap(), 0);
    assert_eq!(all(&engine, &key("dlq"), later).await.len(), 1, "once");
}

async fn interrupted_after_apply_is_not_duplicated(url: &str) {
    let engine = engine(url, &unique_prefix("crash-apply")).await;
    let handle = one_received(&engine, "m").await;
    engine
        .dead_letter_interrupted(&key("src"), &handle, "bad", NOW, CrashPoint::AfterApply)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(all(&engine, &key("dlq"), NOW).await.len(), 1, "applied");
    let later = NOW + RECOVERY_GRACE_MS;
    assert_eq!(
        engine.recover_transfers(later).await.unwrap(),
        1,
        "recovery acknowledges the applied move"
    );
    assert_eq!(engine.recover_transfers(later).await.unwrap(), 0);
    let moved = all(&engine, &key("dlq"), later).await;
    assert_eq!(moved.len(), 1, "the repeated apply added nothing");
    assert!(all(&engine, &key("src"), later).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_interrupted_after_its_intent_is_completed_once() {
    interrupted_after_intent_is_completed_once(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_interrupted_after_its_apply_is_not_duplicated() {
    interrupted_after_apply_is_not_duplicated(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_move_interrupted_after_its_intent_is_completed_once() {
    interrupted_after_intent_is_completed_once(&shared_cluster().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_move_interrupted_after_its_apply_is_not_duplicated() {
    interrupted_after_apply_is_not_duplicated(&shared_cluster().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_puts_a_message_back_when_its_dead_letter_queue_vanished() {
    let engine = engine(&shared_server().url(), &unique_prefix("crash-revert")).await;
    let handle = one_received(&engine, "m").await;
    let before = all(&engine, &key("src"), NOW).await;
    engine
        .dead_letter_interrupted(&key("src"), &handle, "bad", NOW, CrashPoint::AfterIntent)
        .await
        .unwrap()
        .unwrap();
    assert!(engine.delete_queue(&key("dlq")).await.unwrap());
    let later = NOW + RECOVERY_GRACE_MS;
    assert_eq!(engine.recover_transfers(later).await.unwrap(), 1);
    assert_eq!(
        all(&engine, &key("src"), NOW).await,
        before,
        "back exactly as it was: same seq, counts and state"
    );
    assert_eq!(
        engine
            .delete(&key("src"), std::slice::from_ref(&handle), later)
            .await
            .unwrap(),
        [Ok(())],
        "its delivery's handle still names it"
    );
    assert!(all(&engine, &key("src"), later).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_recovering_at_once_complete_each_move_once() {
    let url = shared_cluster().url();
    let prefix = unique_prefix("crash-race");
    let first = Arc::new(engine(&url, &prefix).await);
    let second = Arc::new(engine(&url, &prefix).await);
    first
        .put_queue(&key("dlq"), QueueConfig::with_defaults(262_144), NOW)
        .await
        .unwrap();
    first
        .put_queue(&key("src"), with_dlq("dlq"), NOW)
        .await
        .unwrap();
    let bodies: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    first
        .send(
            &key("src"),
            bodies.iter().map(|b| message(b)).collect(),
            NOW,
        )
        .await
        .unwrap();
    let got = first.receive(&key("src"), 20, 30, None, NOW).await.unwrap();
    assert_eq!(got.messages.len(), 20);
    for (i, m) in got.messages.iter().enumerate() {
        let crash = if i % 2 == 0 {
            CrashPoint::AfterIntent
        } else {
            CrashPoint::AfterApply
        };
        first
            .dead_letter_interrupted(&key("src"), &m.receipt_handle, "bad", NOW, crash)
            .await
            .unwrap()
            .unwrap();
    }
    let later = NOW + RECOVERY_GRACE_MS;
    let mut completed = 0;
    for _ in 0..3 {
        let (a, b) = tokio::join!(
            first.recover_transfers(later),
            second.recover_transfers(later)
        );
        completed += a.unwrap() + b.unwrap();
    }
    assert_eq!(completed, 20, "each move counted by exactly one engine");
    let moved = all(&first, &key("dlq"), later).await;
    let ids: HashSet<&str> = moved.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(moved.len(), 20, "no copies");
    assert_eq!(ids.len(), 20);
    assert!(all(&first, &key("src"), later).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_moves_leave_nothing_for_recovery() {
    let server = shared_server();
    let prefix = unique_prefix("crash-none");
    let engine = engine(&server.url(), &prefix).await;
    let handle = one_received(&engine, "m").await;
    engine
        .dead_letter(&key("src"), &handle, "bad", NOW)
        .await
        .unwrap()
        .unwrap();
    let due = format!("{{{prefix}}}:transfers");
    assert_eq!(server.query(&["ZCARD", &due]).unwrap(), "1", "registered");
    let later = NOW + RECOVERY_GRACE_MS;
    assert_eq!(engine.recover_transfers(later).await.unwrap(), 0);
    assert_eq!(
        server.query(&["ZCARD", &due]).unwrap(),
        "0",
        "the spurious due entry is dropped"
    );
    assert_eq!(all(&engine, &key("dlq"), later).await.len(), 1);
}

/// Redrive takes a message in flight too: its delivery's handle no longer changes anything in
/// the source, and the message arrives fresh (never received, no dead-letter record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_moves_a_message_in_flight_and_voids_its_handle() {
    let engine = engine(&shared_cluster().url(), &unique_prefix("redrive-flight")).await;
    engine
        .put_queue(&key("dlq"), QueueConfig::with_defaults(262_144), NOW)
        .await
        .unwrap();
    engine
        .put_queue(&key("back"), QueueConfig::with_defaults(262_144), NOW)
        .await
        .unwrap();
    engine
        .send(&key("dlq"), vec![message("m")], NOW)
        .await
        .unwrap();
    let got = engine.receive(&key("dlq"), 1, 30, None, NOW).await.unwrap();
    let (seq, handle) = (
        got.messages[0].message.seq,
        got.messages[0].receipt_handle.clone(),
    );
    let back = QueueName::parse("back").unwrap();
    assert_eq!(
        engine
            .redrive(&key("dlq"), &[seq], Some(&back), NOW)
            .await
            .unwrap(),
        [sluice_engine::RedriveOutcome::Moved]
    );
    assert_eq!(
        engine
            .change_visibility(&key("dlq"), &[(handle, 0)], NOW)
            .await
            .unwrap(),
        [Err(sluice_engine::HandleError::Stale)]
    );
    let arrived = all(&engine, &key("back"), NOW).await;
    assert_eq!(arrived.len(), 1);
    assert_eq!(
        (arrived[0].receive_count, &arrived[0].dead_letter),
        (0, &None)
    );
    assert_eq!(
        engine
            .receive(&key("back"), 1, 30, None, NOW)
            .await
            .unwrap()
            .messages
            .len(),
        1,
        "visible at once"
    );
}

/// On Cluster, a FIFO move interrupted after its intent lets the rest of the group go on, and
/// recovery puts the message at the end of the FIFO dead-letter queue with its group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_an_interrupted_fifo_move_is_recovered_into_its_group() {
    let engine = engine(&shared_cluster().url(), &unique_prefix("crash-fifo")).await;
    engine
        .put_queue(&key("dlq.fifo"), QueueConfig::with_defaults(262_144), NOW)
        .await
        .unwrap();
    engine
        .put_queue(&key("src.fifo"), with_dlq("dlq.fifo"), NOW)
        .await
        .unwrap();
    let fifo = |body: &str| NewMessage {
        payload: None,
        group_id: Some("g".into()),
        deduplication_id: Some(body.into()),
        ..message(body)
    };
    engine
        .send(&key("src.fifo"), vec![fifo("a"), fifo("b")], NOW)
        .await
        .unwrap();
    let got = engine
        .receive(&key("src.fifo"), 1, 30, None, NOW)
        .await
        .unwrap();
    assert_eq!(got.messages[0].message.body, "a");
    engine
        .dead_letter_interrupted(
            &key("src.fifo"),
            &got.messages[0].receipt_handle,
            "bad",
            NOW + 1_000,
            CrashPoint::AfterIntent,
        )
        .await
        .unwrap()
        .unwrap();
    let next = engine
        .receive(&key("src.fifo"), 10, 30, None, NOW + 1_000)
        .await
        .unwrap();
    assert_eq!(next.messages.len(), 1);
    assert_eq!(next.messages[0].message.body, "b", "the group goes on");
    let later = NOW + 1_000 + RECOVERY_GRACE_MS;
    assert_eq!(engine.recover_transfers(later).await.unwrap(), 1);
    let moved = engine
        .receive(&key("dlq.fifo"), 10, 30, None, later)
        .await
        .unwrap();
    assert_eq!(moved.messages.len(), 1);
    let m = &moved.messages[0].message;
    assert_eq!((m.body.as_str(), m.group_id.as_deref()), ("a", Some("g")));
    assert_eq!(
        m.sent_at,
        NOW + 1_000,
        "a FIFO DLQ restarts retention at the move"
    );
    assert_eq!(m.dead_letter.as_ref().unwrap().receive_count, 1);
}

/// A payload message whose move was applied, then whose dead-letter queue was deleted before
/// the move's ack, stays moved (deleted with that queue): recovery does not put it back in its
/// source, and its payload is added once and released once, by the deletion.
async fn a_move_applied_before_its_destination_went_stays_moved(url: &str) {
    let engine = engine(url, &unique_prefix("crash-payload")).await;
    engine
        .put_queue(&key("dlq"), QueueConfig::with_defaults(262_144), NOW)
        .await
        .unwrap();
    engine
        .put_queue(&key("src"), with_dlq("dlq"), NOW)
        .await
        .unwrap();
    let payload = PayloadRef {
        key: "acme/000000000000000000000000000000aa".into(),
        size: 2048,
        enveloped: false,
    };
    let spilled = NewMessage {
        body: String::new(),
        payload: Some(payload.clone()),
        ..message("big")
    };
    engine.send(&key("src"), vec![spilled], NOW).await.unwrap();
    let got = engine.receive(&key("src"), 1, 30, None, NOW).await.unwrap();
    let handle = got.messages[0].receipt_handle.clone();
    assert_eq!(got.messages[0].message.payload, Some(payload.clone()));
    engine
        .dead_letter_interrupted(&key("src"), &handle, "bad", NOW, CrashPoint::AfterApply)
        .await
        .unwrap()
        .unwrap();
    let moved = all(&engine, &key("dlq"), NOW).await;
    assert_eq!(
        moved[0].payload,
        Some(payload.clone()),
        "the move carries it"
    );
    assert!(engine.delete_queue(&key("dlq")).await.unwrap());
    let later = NOW + RECOVERY_GRACE_MS;
    engine.recover_transfers(later).await.unwrap();
    assert!(
        all(&engine, &key("src"), later).await.is_empty(),
        "not resurrected in its source"
    );
    let batch = engine.payload_events(100).await.unwrap();
    // (Two logs, the source's and the destination's: no order between them.)
    let mut kinds: Vec<(bool, &str)> = batch
        .events
        .iter()
        .map(|e| (e.kind == PayloadEventKind::Added, e.message_id.as_str()))
        .collect();
    kinds.sort();
    assert_eq!(kinds, [(false, "id-big"), (true, "id-big")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_applied_before_its_destination_was_deleted_stays_moved() {
    a_move_applied_before_its_destination_went_stays_moved(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_move_applied_before_its_destination_was_deleted_stays_moved() {
    a_move_applied_before_its_destination_went_stays_moved(&shared_cluster().url()).await;
}
