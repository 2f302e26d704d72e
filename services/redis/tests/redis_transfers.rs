//! Moves between queues across a crash: a move interrupted after its intent, or after its
//! apply, is completed exactly once by `recover_transfers` (standalone and Cluster, where the
//! two queues live in different slots); one whose dead-letter queue vanished meanwhile goes
//! back exactly as it was, one applied before its destination was deleted stays moved; several
//! engines recovering at once never duplicate a message. A payload message whose source queue
//! (or tenant) is deleted while its move is pending is released exactly once — by the settle
//! of the deletion's "maybe released" entry if the apply never ran, by its destination if it
//! did — however many readers settle the entry and however late.

use sluice_engine::{
    DeadLetter, MessageState, Messages, Millis, NewMessage, PayloadEventKind, PayloadRef, Payloads,
    QueueConfig, QueueKey, QueueName, Queues, RedrivePolicy, StoredMessage, TenantId, Tenants,
    Transfers,
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

/// How a move's source queue goes while the move's intent is pending.
#[derive(Clone, Copy)]
enum SourceGoes {
    QueueDeleted,
    TenantDeleted,
}

const BIG: &str = "acme/000000000000000000000000000000bb";

/// "src" (dead-letter queue "dlq") with one received payload message "id-big" whose move to
/// "dlq" stopped at `crash`; then "src" goes. Answers the intents a live mover would still
/// hold.
async fn payload_move_whose_source_went(
    engine: &RedisEngine,
    crash: CrashPoint,
    goes: SourceGoes,
) -> Vec<(String, Vec<u8>)> {
    engine
        .put_queue(&key("dlq"), QueueConfig::with_defaults(262_144), NOW)
        .await
        .unwrap();
    engine
        .put_queue(&key("src"), with_dlq("dlq"), NOW)
        .await
        .unwrap();
    let payload = PayloadRef {
        key: BIG.into(),
        size: 2048,
        enveloped: false,
    };
    let spilled = NewMessage {
        body: String::new(),
        payload: Some(payload),
        ..message("big")
    };
    engine.send(&key("src"), vec![spilled], NOW).await.unwrap();
    let got = engine.receive(&key("src"), 1, 30, None, NOW).await.unwrap();
    let handle = got.messages[0].receipt_handle.clone();
    engine
        .dead_letter_interrupted(&key("src"), &handle, "bad", NOW, crash)
        .await
        .unwrap()
        .unwrap();
    let held = engine.pending_moves(&key("src")).await.unwrap();
    assert_eq!(held.len(), 1, "the intent is pending");
    match goes {
        SourceGoes::QueueDeleted => assert!(engine.delete_queue(&key("src")).await.unwrap()),
        SourceGoes::TenantDeleted => {
            // (The tenant has no record here: the answer is about that; its queues, the
            // dead-letter queue too, go.)
            engine
                .delete_tenant(&TenantId::parse("acme").unwrap(), NOW)
                .await
                .unwrap();
        }
    }
    held
}

/// `(added?, message id)` of every event read and acknowledged until none is left, sorted.
async fn drain(engine: &RedisEngine) -> Vec<(bool, String)> {
    let mut all = Vec::new();
    loop {
        let batch = engine.payload_events(100).await.unwrap();
        if batch.events.is_empty() {
            break;
        }
        all.extend(
            batch
                .events
                .iter()
                .map(|e| (e.kind == PayloadEventKind::Added, e.message_id.clone())),
        );
        engine.ack_payload_events(&batch).await.unwrap();
    }
    all.sort();
    all
}

fn released(id: &str) -> (bool, String) {
    (false, id.to_owned())
}

fn added(id: &str) -> (bool, String) {
    (true, id.to_owned())
}

/// The move's intent was recorded, its source went (queue or tenant deletion), and the apply
/// never ran: the message is gone, so its payload is released exactly once — and a mover that
/// still held the intent and applies it late inserts nothing.
async fn a_payload_move_whose_source_went_before_its_apply_is_released(
    url: &str,
    goes: SourceGoes,
) {
    let engine = engine(url, &unique_prefix("settle-void")).await;
    let held = payload_move_whose_source_went(&engine, CrashPoint::AfterIntent, goes).await;
    assert_eq!(
        drain(&engine).await,
        [released("id-big"), added("id-big")],
        "released once, not leaked"
    );
    if let SourceGoes::QueueDeleted = goes {
        engine.finish_moves(&key("src"), &held, NOW).await.unwrap();
        assert!(
            all(&engine, &key("dlq"), NOW).await.is_empty(),
            "a late apply of a released move inserts nothing"
        );
    }
    let later = NOW + RECOVERY_GRACE_MS;
    engine.recover_transfers(later).await.unwrap();
    assert_eq!(drain(&engine).await, [], "nothing more, ever");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_move_whose_source_was_deleted_before_its_apply_is_released_once() {
    let url = shared_server().url();
    a_payload_move_whose_source_went_before_its_apply_is_released(&url, SourceGoes::QueueDeleted)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_payload_move_whose_source_was_deleted_before_its_apply_is_released_once() {
    let url = shared_cluster().url();
    a_payload_move_whose_source_went_before_its_apply_is_released(&url, SourceGoes::QueueDeleted)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_move_whose_tenant_was_deleted_before_its_apply_is_released_once() {
    let url = shared_cluster().url();
    a_payload_move_whose_source_went_before_its_apply_is_released(&url, SourceGoes::TenantDeleted)
        .await;
}

/// The move was applied, then its source was deleted before the ack: the destination holds
/// the message, so the source's deletion releases nothing; the destination's deletion
/// releases it, once.
async fn a_payload_move_applied_before_its_source_went_is_not_released(url: &str) {
    let engine = engine(url, &unique_prefix("settle-held")).await;
    payload_move_whose_source_went(&engine, CrashPoint::AfterApply, SourceGoes::QueueDeleted).await;
    assert_eq!(drain(&engine).await, [added("id-big")], "still held");
    let moved = all(&engine, &key("dlq"), NOW).await;
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].payload.as_ref().map(|p| p.key.as_str()), Some(BIG));
    assert!(engine.delete_queue(&key("dlq")).await.unwrap());
    assert_eq!(drain(&engine).await, [released("id-big")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_move_applied_before_its_source_was_deleted_is_not_released() {
    a_payload_move_applied_before_its_source_went_is_not_released(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_payload_move_applied_before_its_source_was_deleted_is_not_released() {
    a_payload_move_applied_before_its_source_went_is_not_released(&shared_cluster().url()).await;
}

/// Two gateways read the deleted source's log before either acknowledges: both settle its
/// entry, and one `Released` is recorded in all.
async fn two_readers_settle_an_entry_once(url: &str) {
    let prefix = unique_prefix("settle-twice");
    let (a, b) = (engine(url, &prefix).await, engine(url, &prefix).await);
    payload_move_whose_source_went(&a, CrashPoint::AfterIntent, SourceGoes::QueueDeleted).await;
    let first = a.payload_events(100).await.unwrap();
    // Reads after the first settle: it sees the Released that settle recorded, and settles
    // the same entry again.
    let second = b.payload_events(100).await.unwrap();
    let count = |batch: &sluice_engine::PayloadEventBatch| {
        batch
            .events
            .iter()
            .filter(|e| e.kind == PayloadEventKind::Released)
            .count()
    };
    assert!(count(&first) <= 1);
    assert_eq!(count(&second), 1, "recorded once, though settled twice");
    a.ack_payload_events(&first).await.unwrap();
    b.ack_payload_events(&second).await.unwrap();
    assert_eq!(drain(&a).await, [], "nothing left for anyone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_readers_settle_a_deleted_sources_entry_once() {
    two_readers_settle_an_entry_once(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_two_readers_settle_a_deleted_sources_entry_once() {
    two_readers_settle_an_entry_once(&shared_cluster().url()).await;
}

/// The move was applied, its source deleted, and the deletion's entry read only after the
/// destination forgot the apply's transfer id (a day later: readers were stopped): the
/// destination still holds the message, so nothing is released until it lets it go.
async fn a_late_settle_does_not_release_what_its_destination_holds(url: &str) {
    let engine = engine(url, &unique_prefix("settle-late")).await;
    payload_move_whose_source_went(&engine, CrashPoint::AfterApply, SourceGoes::QueueDeleted).await;
    // Another move into "dlq" past the applied-id window (a day) trims the ids before it.
    let later = NOW + 24 * 60 * 60 * 1000 + 60_000;
    engine
        .put_queue(&key("src2"), with_dlq("dlq"), NOW)
        .await
        .unwrap();
    engine
        .send(&key("src2"), vec![message("other")], NOW)
        .await
        .unwrap();
    let got = engine
        .receive(&key("src2"), 1, 30, None, later)
        .await
        .unwrap();
    engine
        .dead_letter_interrupted(
            &key("src2"),
            &got.messages[0].receipt_handle,
            "bad",
            later,
            CrashPoint::AfterApply,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(drain(&engine).await, [added("id-big")], "still held");
    assert_eq!(all(&engine, &key("dlq"), later).await.len(), 2);
    assert!(engine.delete_queue(&key("dlq")).await.unwrap());
    assert_eq!(drain(&engine).await, [released("id-big")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_settle_does_not_release_a_message_its_destination_holds() {
    a_late_settle_does_not_release_what_its_destination_holds(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_late_settle_does_not_release_a_message_its_destination_holds() {
    a_late_settle_does_not_release_what_its_destination_holds(&shared_cluster().url()).await;
}
