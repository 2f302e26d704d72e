//! FIFO queues across gateways: every engine below is a separate `RedisEngine` (as two
//! gateways would have) over one shared `redis-server`, so group locks, deduplication records
//! and request attempt ids must live in Redis, not in any engine's memory. Also: many locked
//! groups, expired heads, and which keys a FIFO queue leaves behind after purge, expiry and
//! deletion.

use sluice_engine::{
    DeduplicationScope, HandleError, Messages, Millis, NewMessage, QueueConfig, QueueKey,
    QueueName, Queues, ReceiveOutcome, TenantId, Upkeep, DEDUPLICATION_WINDOW_MS,
    RECEIVE_ATTEMPT_WINDOW_MS,
};
use sluice_redis::{RedisEngine, RedisOptions};
use sluice_testkit::{shared_server, unique_prefix};
use std::collections::BTreeMap;
use std::time::Duration;

const NOW: Millis = 1_767_225_600_000;
const SECOND: Millis = 1000;

fn key(name: &str) -> QueueKey {
    QueueKey::new(
        TenantId::parse("acme").unwrap(),
        QueueName::parse(name).unwrap(),
    )
}

/// A FIFO message whose deduplication id is its body.
fn fifo(body: &str, group: &str, now: Millis) -> NewMessage {
    NewMessage {
        payload: None,
        message_id: format!("id-{body}-{now}"),
        body: body.to_owned(),
        attributes: BTreeMap::new(),
        visible_at: now,
        group_id: Some(group.to_owned()),
        deduplication_id: Some(body.to_owned()),
    }
}

fn config() -> QueueConfig {
    QueueConfig::with_defaults(262_144)
}

/// Two engines (two gateways) sharing one key prefix on the shared server, and the prefix.
async fn two_gateways(tag: &str) -> (RedisEngine, RedisEngine, String) {
    let url = shared_server().url();
    let prefix = unique_prefix(tag);
    let connect = || {
        RedisEngine::connect(
            &url,
            RedisOptions {
                key_prefix: prefix.clone(),
                ..RedisOptions::default()
            },
        )
    };
    (connect().await.unwrap(), connect().await.unwrap(), prefix)
}

fn bodies(outcome: &ReceiveOutcome) -> Vec<&str> {
    outcome
        .messages
        .iter()
        .map(|m| m.message.body.as_str())
        .collect()
}

fn handles(outcome: &ReceiveOutcome) -> Vec<String> {
    outcome
        .messages
        .iter()
        .map(|m| m.receipt_handle.clone())
        .collect()
}

/// The keys stored under a queue's hash tag, by their last part.
fn queue_keys(prefix: &str, name: &str) -> Vec<String> {
    let pattern = format!("{{{prefix}:acme:{name}}}:*");
    let mut keys: Vec<String> = shared_server()
        .query(&["KEYS", &pattern])
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|k| k.rsplit(':').next().unwrap().to_owned())
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_locked_through_one_gateway_is_locked_for_the_other() {
    let (a, b, _) = two_gateways("fifo-lock").await;
    let q = key("q.fifo");
    a.put_queue(&q, config(), NOW).await.unwrap();
    let batch = vec![
        fifo("a1", "a", NOW),
        fifo("a2", "a", NOW),
        fifo("b1", "b", NOW),
    ];
    a.send(&q, batch, NOW).await.unwrap();

    let first = a.receive(&q, 1, 30, None, NOW).await.unwrap();
    assert_eq!(bodies(&first), ["a1"]);
    let other = b.receive(&q, 10, 30, None, NOW).await.unwrap();
    assert_eq!(bodies(&other), ["b1"], "group a is in flight through A");
    assert!(b
        .receive(&q, 10, 30, None, NOW)
        .await
        .unwrap()
        .messages
        .is_empty());
    assert!(a
        .receive(&q, 10, 30, None, NOW)
        .await
        .unwrap()
        .messages
        .is_empty());

    // Deleting a1 through B releases group a, and wakes a long poll waiting on A.
    let mut listener = a.listen(&q).await.unwrap();
    let answers = b.delete(&q, &handles(&first), NOW + 1).await.unwrap();
    assert_eq!(answers, vec![Ok(())]);
    tokio::time::timeout(Duration::from_millis(500), listener.changed())
        .await
        .expect("a delete that releases a group wakes listeners on other gateways");
    let next = a.receive(&q, 10, 30, None, NOW + 1).await.unwrap();
    assert_eq!(bodies(&next), ["a2"]);

    // a2's visibility ends: B gets it again (before anything sent later in its group), and
    // A's handle is stale.
    b.send(&q, vec![fifo("a3", "a", NOW + 2)], NOW + 2)
        .await
        .unwrap();
    let later = NOW + 31 * SECOND;
    let again = b.receive(&q, 1, 30, None, later).await.unwrap();
    assert_eq!(bodies(&again), ["a2"]);
    assert_eq!(again.messages[0].message.receive_count, 2);
    assert_eq!(
        a.delete(&q, &handles(&next), later).await.unwrap(),
        vec![Err(HandleError::Stale)]
    );
    // Changing the visibility to 0 through A releases it at once; B gets the whole run.
    a.change_visibility(&q, &[(handles(&again)[0].clone(), 0)], later)
        .await
        .unwrap();
    let run = b.receive(&q, 10, 30, None, later).await.unwrap();
    assert_eq!(bodies(&run), ["a2", "a3", "b1"]);
    // The hint names when the first group in flight is released.
    let hint = a.receive(&q, 10, 30, None, later).await.unwrap();
    assert!(hint.messages.is_empty());
    assert_eq!(hint.next_visible_at, Some(later + 30 * SECOND));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deduplication_records_are_shared_by_gateways() {
    let (a, b, prefix) = two_gateways("fifo-dedup").await;
    let q = key("q.fifo");
    a.put_queue(&q, config(), NOW).await.unwrap();
    let original = a.send(&q, vec![fifo("m", "g", NOW)], NOW).await.unwrap()[0]
        .clone()
        .unwrap();
    assert!(!original.duplicate);

    let again = b
        .send(&q, vec![fifo("m", "other-group", NOW + 1)], NOW + 1)
        .await
        .unwrap()[0]
        .clone()
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(
        (again.message_id.as_str(), again.seq),
        (original.message_id.as_str(), original.seq)
    );
    // Received and deleted through B: still a duplicate through A.
    let got = b.receive(&q, 10, 30, None, NOW + 2).await.unwrap();
    assert_eq!(bodies(&got), ["m"]);
    assert_eq!(
        got.messages[0].message.deduplication_id.as_deref(),
        Some("m")
    );
    b.delete(&q, &handles(&got), NOW + 2).await.unwrap();
    let after_delete = a
        .send(&q, vec![fifo("m", "g", NOW + 3)], NOW + 3)
        .await
        .unwrap();
    assert!(after_delete[0].as_ref().unwrap().duplicate);

    // A purge keeps the records (a retried send must not come back after a purge either).
    b.purge(&q).await.unwrap();
    assert_eq!(queue_keys(&prefix, "q.fifo"), ["dedup", "dedup-at", "meta"]);
    let after_purge = a
        .send(&q, vec![fifo("m", "g", NOW + 4)], NOW + 4)
        .await
        .unwrap();
    assert!(after_purge[0].as_ref().unwrap().duplicate);

    // Past the window the id is new; the sweep forgets records past it.
    let past = NOW + DEDUPLICATION_WINDOW_MS;
    let fresh = b.send(&q, vec![fifo("m", "g", past)], past).await.unwrap();
    let fresh = fresh[0].as_ref().unwrap();
    assert!(!fresh.duplicate && fresh.seq > original.seq);
    a.send(&q, vec![fifo("n", "g", past)], past).await.unwrap();
    a.expire(past + DEDUPLICATION_WINDOW_MS).await.unwrap();
    let records = shared_server()
        .query(&["HLEN", &format!("{{{prefix}:acme:q.fifo}}:dedup")])
        .unwrap();
    assert_eq!(records, "0");

    // Scope message_group: the same id in another group is another message.
    let by_group = key("by-group.fifo");
    let mut scoped = config();
    scoped.deduplication_scope = DeduplicationScope::MessageGroup;
    a.put_queue(&by_group, scoped, NOW).await.unwrap();
    let answers = b
        .send(
            &by_group,
            vec![
                fifo("m", "g1", NOW),
                fifo("m", "g2", NOW),
                fifo("m", "g1", NOW),
            ],
            NOW,
        )
        .await
        .unwrap();
    let duplicate: Vec<bool> = answers
        .iter()
        .map(|a| a.as_ref().unwrap().duplicate)
        .collect();
    assert_eq!(duplicate, [false, false, true]);
    // A full queue still answers duplicates (they store nothing).
    let mut full = config();
    full.max_depth = Some(1);
    let small = key("small.fifo");
    a.put_queue(&small, full, NOW).await.unwrap();
    let answers = a
        .send(
            &small,
            vec![
                fifo("x", "g", NOW),
                fifo("y", "g", NOW),
                fifo("x", "g", NOW),
            ],
            NOW,
        )
        .await
        .unwrap();
    assert!(!answers[0].as_ref().unwrap().duplicate);
    assert!(answers[1].is_err());
    assert!(answers[2].as_ref().unwrap().duplicate);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_attempt_id_answers_the_same_through_another_gateway() {
    let (a, b, _) = two_gateways("fifo-attempt").await;
    let q = key("q.fifo");
    a.put_queue(&q, config(), NOW).await.unwrap();
    let batch = vec![
        fifo("a1", "a", NOW),
        fifo("a2", "a", NOW),
        fifo("b1", "b", NOW),
    ];
    a.send(&q, batch, NOW).await.unwrap();

    // Nothing answered yet: an empty answer is not remembered (a long poll retries with the
    // same id until something comes).
    let empty = key("empty.fifo");
    a.put_queue(&empty, config(), NOW).await.unwrap();
    assert!(a
        .receive(&empty, 10, 30, Some("poll"), NOW)
        .await
        .unwrap()
        .messages
        .is_empty());
    a.send(&empty, vec![fifo("late", "g", NOW)], NOW)
        .await
        .unwrap();
    let polled = b
        .receive(&empty, 10, 30, Some("poll"), NOW + 1)
        .await
        .unwrap();
    assert_eq!(bodies(&polled), ["late"]);

    let first = a.receive(&q, 2, 30, Some("try-1"), NOW).await.unwrap();
    assert_eq!(bodies(&first), ["a1", "a2"]);
    let retried = b
        .receive(&q, 2, 30, Some("try-1"), NOW + SECOND)
        .await
        .unwrap();
    assert_eq!(retried, first, "same messages, counts and handles");
    // Nothing changed: b1 is still there for another attempt, a is still locked.
    let other = b
        .receive(&q, 10, 30, Some("try-2"), NOW + SECOND)
        .await
        .unwrap();
    assert_eq!(bodies(&other), ["b1"]);
    assert_eq!(other.messages[0].message.receive_count, 1);
    // The replayed handles work.
    assert_eq!(
        a.delete(&q, &handles(&retried)[..1], NOW + 2 * SECOND)
            .await
            .unwrap(),
        vec![Ok(())]
    );
    // A message deleted since is left out of a replay.
    let replay = a
        .receive(&q, 2, 30, Some("try-1"), NOW + 3 * SECOND)
        .await
        .unwrap();
    assert_eq!(bodies(&replay), ["a2"]);
    assert_eq!(
        replay.messages[0].receipt_handle,
        first.messages[1].receipt_handle
    );

    // Past the window the id is new: a fresh receive (a2 came back when its timeout ended).
    let past = NOW + RECEIVE_ATTEMPT_WINDOW_MS;
    let fresh = b.receive(&q, 10, 30, Some("try-1"), past).await.unwrap();
    assert_eq!(bodies(&fresh), ["a2", "b1"]);
    assert_eq!(fresh.messages[0].message.receive_count, 2);

    // Standard queues ignore the id.
    let standard = key("standard");
    a.put_queue(&standard, config(), NOW).await.unwrap();
    let plain = |body: &str| NewMessage {
        payload: None,
        group_id: None,
        deduplication_id: None,
        ..fifo(body, "", NOW)
    };
    a.send(&standard, vec![plain("s1"), plain("s2")], NOW)
        .await
        .unwrap();
    let one = a.receive(&standard, 1, 30, Some("x"), NOW).await.unwrap();
    let two = b.receive(&standard, 1, 30, Some("x"), NOW).await.unwrap();
    assert_eq!((bodies(&one), bodies(&two)), (vec!["s1"], vec!["s2"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_locked_groups_do_not_hide_a_ready_one() {
    let (a, b, _) = two_gateways("fifo-many").await;
    let q = key("q.fifo");
    a.put_queue(&q, config(), NOW).await.unwrap();
    for chunk in 0..50 {
        let batch = (0..10)
            .map(|i| {
                let n = chunk * 10 + i;
                fifo(&format!("m{n}"), &format!("g{n}"), NOW)
            })
            .collect();
        a.send(&q, batch, NOW).await.unwrap();
    }
    // Every group in flight, oldest first, ten per receive.
    for chunk in 0..50 {
        let got = b.receive(&q, 10, 60, None, NOW).await.unwrap();
        let expected: Vec<String> = (0..10).map(|i| format!("m{}", chunk * 10 + i)).collect();
        assert_eq!(bodies(&got), expected);
    }
    a.send(
        &q,
        vec![fifo("late", "g0", NOW), fifo("new", "fresh", NOW)],
        NOW,
    )
    .await
    .unwrap();
    let got = a.receive(&q, 10, 60, None, NOW + 1).await.unwrap();
    assert_eq!(
        bodies(&got),
        ["new"],
        "g0 is in flight; the new group is not"
    );
    // When the timeouts end every group is ready again, oldest head first.
    let later = NOW + 60 * SECOND;
    let got = b.receive(&q, 10, 60, None, later).await.unwrap();
    assert_eq!(
        bodies(&got),
        ["m0", "late", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_fifo_queue_leaves_no_key_behind() {
    let (a, b, prefix) = two_gateways("fifo-keys").await;
    let q = key("q.fifo");
    a.put_queue(&q, config(), NOW).await.unwrap();
    let batch = vec![
        fifo("a1", "a", NOW),
        fifo("b1", "b", NOW + 5),
        fifo("c1", "c", NOW),
    ];
    a.send(&q, batch, NOW).await.unwrap();
    b.receive(&q, 1, 30, Some("attempt"), NOW).await.unwrap();
    assert_eq!(
        queue_keys(&prefix, "q.fifo"),
        [
            "attempt",
            "attempt-at",
            "dedup",
            "dedup-at",
            "gmsg",
            "group",
            "meta",
            "mgrp",
            "msg",
            "rcv",
            "ready",
            "rx",
            "sent",
            "size",
            "vis",
            "wait"
        ]
    );
    // Expiry removes the messages and forgets their groups.
    let mut short = config();
    short.message_retention_seconds = 60;
    a.put_queue(&q, short, NOW).await.unwrap();
    a.expire(NOW + 61 * SECOND).await.unwrap();
    assert_eq!(
        queue_keys(&prefix, "q.fifo"),
        ["attempt", "attempt-at", "dedup", "dedup-at", "meta"]
    );
    assert!(b.delete_queue(&q).await.unwrap());
    assert!(queue_keys(&prefix, "q.fifo").is_empty());
    // A new incarnation starts without the old deduplication records.
    a.put_queue(&q, config(), NOW).await.unwrap();
    let sent = a.send(&q, vec![fifo("a1", "a", NOW)], NOW).await.unwrap();
    assert!(!sent[0].as_ref().unwrap().duplicate);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_message_neither_blocks_nor_orders_its_group() {
    let (a, b, _) = two_gateways("fifo-expired").await;
    let q = key("q.fifo");
    let mut short = config();
    short.message_retention_seconds = 60;
    a.put_queue(&q, short, NOW).await.unwrap();
    // g1's head is the oldest message, received (in flight for an hour) and then expired.
    a.send(&q, vec![fifo("old", "g1", NOW)], NOW).await.unwrap();
    let held = a.receive(&q, 1, 3600, Some("held"), NOW).await.unwrap();
    assert_eq!(bodies(&held), ["old"]);
    let later = NOW + 30 * SECOND;
    a.send(
        &q,
        vec![fifo("a", "g0", later), fifo("b", "g1", later)],
        later,
    )
    .await
    .unwrap();
    // At 60 s the head of g1 has expired: g1 is free, and its next message is younger than
    // g0's head.
    let expired = NOW + 60 * SECOND;
    let got = b.receive(&q, 1, 30, None, expired).await.unwrap();
    assert_eq!(bodies(&got), ["a"]);
    let got = b.receive(&q, 1, 30, None, expired).await.unwrap();
    assert_eq!(bodies(&got), ["b"]);
    // A replay leaves the expired message out.
    let replay = a.receive(&q, 1, 3600, Some("held"), expired).await.unwrap();
    assert!(replay.messages.is_empty());
}
