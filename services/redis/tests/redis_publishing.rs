//! Topic fan-outs across a crash: a publish interrupted after its commit, after some applies
//! or after every apply is completed by `recover_publications` with every delivery made
//! exactly once and counted once (standalone and Cluster, where the topic and its queues live
//! in different slots); a refusal stays a refusal when recovery repeats it; FIFO topics keep
//! sequence order whoever delivers; several engines recovering at once deliver once, and
//! record a payload publication's events once.

use sluice_engine::{
    Clock, Delivery, DeliveryFailure, DeliveryOutcome, ManualClock, MessageState, Messages, Millis,
    NewMessage, PayloadEventBatch, PayloadEventKind, PayloadRef, Payloads, Publication, Publishing,
    QueueConfig, QueueKey, QueueName, Queues, StoredMessage, SubscriptionStats, TenantId, Tenants,
    TopicKey,
};
use sluice_redis::{PublishCrash, RedisEngine, RedisOptions, RECOVERY_GRACE_MS};
use sluice_testkit::{shared_cluster, shared_server, unique_prefix};
use std::collections::BTreeMap;
use std::sync::Arc;

const START: Millis = 1_767_225_600_000;

fn tenant() -> TenantId {
    TenantId::parse("acme").unwrap()
}

fn key(name: &str) -> QueueKey {
    QueueKey::new(tenant(), QueueName::parse(name).unwrap())
}

fn topic(name: &str) -> TopicKey {
    TopicKey::new(tenant(), QueueName::parse(name).unwrap())
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

async fn queue(engine: &RedisEngine, name: &str, max_depth: Option<u64>, now: Millis) {
    let config = QueueConfig {
        max_depth,
        ..QueueConfig::with_defaults(262_144)
    };
    engine.put_queue(&key(name), config, now).await.unwrap();
}

fn to(subscription: &str, queue: &str, copy_id: &str) -> Delivery {
    Delivery {
        subscription_id: subscription.to_owned(),
        queue: QueueName::parse(queue).unwrap(),
        raw: false,
        dead_letter_queue: None,
        message_id: copy_id.to_owned(),
    }
}

fn publication(id: &str, deliveries: Vec<Delivery>) -> Publication {
    Publication {
        payload: None,
        message_id: id.to_owned(),
        body: format!("body of {id}"),
        attributes: BTreeMap::new(),
        subject: None,
        group_id: None,
        deduplication_id: None,
        topic_arn: "arn:aws:sns:us-east-1:000000000000:t".into(),
        timestamp: "2026-01-01T00:00:00.000Z".into(),
        deliveries,
        filtered_out: Vec::new(),
    }
}

fn fifo(id: &str, deliveries: Vec<Delivery>) -> Publication {
    Publication {
        payload: None,
        group_id: Some("g".into()),
        deduplication_id: Some(id.to_owned()),
        ..publication(id, deliveries)
    }
}

/// Every message of a queue, whatever its state, in seq order.
async fn all(engine: &RedisEngine, name: &str, now: Millis) -> Vec<StoredMessage> {
    let mut found = Vec::new();
    for state in [
        MessageState::Visible,
        MessageState::InFlight,
        MessageState::Delayed,
    ] {
        found.extend(engine.peek(&key(name), state, 1000, now).await.unwrap());
    }
    found.sort_by_key(|m| m.seq);
    found
}

fn ids(messages: &[StoredMessage]) -> Vec<&str> {
    messages.iter().map(|m| m.message_id.as_str()).collect()
}

/// The topic's sequence number in an enveloped copy.
fn seq_of(m: &StoredMessage) -> u64 {
    let envelope: serde_json::Value = serde_json::from_str(&m.body).unwrap();
    envelope["SequenceNumber"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn stats(engine: &RedisEngine, t: &TopicKey, subscription: &str) -> SubscriptionStats {
    engine
        .subscription_stats(t)
        .await
        .unwrap()
        .get(subscription)
        .copied()
        .unwrap_or_default()
}

fn delivered(n: u64) -> SubscriptionStats {
    SubscriptionStats {
        delivered: n,
        ..SubscriptionStats::default()
    }
}

async fn interrupted_after_commit_is_delivered_once(url: &str) {
    let clock = ManualClock::new(START);
    let engine = engine(url, &unique_prefix("pub-commit")).await;
    queue(&engine, "a", None, clock.now()).await;
    queue(&engine, "b", None, clock.now()).await;
    let t = topic("news");
    let mut p = publication("p1", vec![to("s-a", "a", "ca"), to("s-b", "b", "cb")]);
    p.filtered_out = vec!["s-f".into()];
    let answer = engine
        .publish_interrupted(&t, vec![p], clock.now(), PublishCrash::AfterCommit)
        .await
        .unwrap();
    assert_eq!(answer[0].message_id, "p1");
    assert_eq!(
        answer[0].outcomes,
        vec![
            ("s-a".to_owned(), DeliveryOutcome::Pending),
            ("s-b".to_owned(), DeliveryOutcome::Pending)
        ]
    );
    assert!(all(&engine, "a", clock.now()).await.is_empty());
    assert_eq!(
        stats(&engine, &t, "s-f").await.filtered_out,
        1,
        "counted at commit"
    );
    assert_eq!(
        engine.recover_publications(clock.now()).await.unwrap(),
        0,
        "a fan-out within its grace may still be live: left alone"
    );
    // Deleting the topic forgets its counters, not the publications already answered.
    assert!(engine.delete_topic(&t).await.unwrap());
    clock.advance(RECOVERY_GRACE_MS);
    assert_eq!(engine.recover_publications(clock.now()).await.unwrap(), 2);
    assert_eq!(ids(&all(&engine, "a", clock.now()).await), vec!["ca"]);
    assert_eq!(ids(&all(&engine, "b", clock.now()).await), vec!["cb"]);
    let copy = &all(&engine, "a", clock.now()).await[0];
    assert_eq!(copy.sent_at, START, "sent at the publish");
    assert_eq!(stats(&engine, &t, "s-a").await, delivered(1));
    assert_eq!(stats(&engine, &t, "s-b").await, delivered(1));
    clock.advance(60_000);
    assert_eq!(engine.recover_publications(clock.now()).await.unwrap(), 0);
    assert_eq!(all(&engine, "a", clock.now()).await.len(), 1, "once");
    assert_eq!(
        stats(&engine, &t, "s-a").await,
        delivered(1),
        "counted once"
    );
}

/// The first queue by name ("a-full") refuses its copy before the crash; the queue has room
/// again by the time recovery comes: the refusal stands, and the copy goes to the dead-letter
/// queue only.
async fn interrupted_after_some_applies_is_completed_once(url: &str) {
    let clock = ManualClock::new(START);
    let engine = engine(url, &unique_prefix("pub-some")).await;
    queue(&engine, "a-full", Some(1), clock.now()).await;
    queue(&engine, "b", None, clock.now()).await;
    queue(&engine, "z-dlq", None, clock.now()).await;
    engine
        .send(
            &key("a-full"),
            vec![NewMessage {
                payload: None,
                message_id: "old".into(),
                body: "already here".into(),
                attributes: BTreeMap::new(),
                visible_at: clock.now(),
                group_id: None,
                deduplication_id: None,
            }],
            clock.now(),
        )
        .await
        .unwrap();
    let t = topic("alerts");
    let mut to_full = to("s-full", "a-full", "c-full");
    to_full.dead_letter_queue = Some(QueueName::parse("z-dlq").unwrap());
    let p = publication("p1", vec![to_full, to("s-b", "b", "c-b")]);
    let answer = engine
        .publish_interrupted(&t, vec![p], clock.now(), PublishCrash::AfterSomeApplies)
        .await
        .unwrap();
    assert!(answer[0]
        .outcomes
        .iter()
        .all(|(_, o)| *o == DeliveryOutcome::Pending));
    assert!(all(&engine, "z-dlq", clock.now()).await.is_empty());
    assert!(all(&engine, "b", clock.now()).await.is_empty());
    engine.purge(&key("a-full")).await.unwrap();
    clock.advance(RECOVERY_GRACE_MS);
    assert_eq!(engine.recover_publications(clock.now()).await.unwrap(), 2);
    assert!(
        all(&engine, "a-full", clock.now()).await.is_empty(),
        "a refusal stays a refusal"
    );
    assert_eq!(
        ids(&all(&engine, "z-dlq", clock.now()).await),
        vec!["c-full"]
    );
    assert_eq!(ids(&all(&engine, "b", clock.now()).await), vec!["c-b"]);
    assert_eq!(
        stats(&engine, &t, "s-full").await,
        SubscriptionStats {
            failed: 1,
            ..SubscriptionStats::default()
        }
    );
    assert_eq!(stats(&engine, &t, "s-b").await, delivered(1));
    assert_eq!(engine.recover_publications(clock.now()).await.unwrap(), 0);
}

async fn interrupted_after_applies_counts_once(url: &str) {
    let clock = ManualClock::new(START);
    let engine = engine(url, &unique_prefix("pub-applies")).await;
    queue(&engine, "a", None, clock.now()).await;
    let t = topic("t");
    let answer = engine
        .publish_interrupted(
            &t,
            vec![
                publication("p1", vec![to("s", "a", "c1")]),
                publication("p2", vec![to("s", "a", "c2")]),
            ],
            clock.now(),
            PublishCrash::AfterApplies,
        )
        .await
        .unwrap();
    assert_eq!(
        answer[0].outcomes,
        vec![("s".to_owned(), DeliveryOutcome::Delivered)],
        "made, not yet acknowledged"
    );
    assert_eq!(ids(&all(&engine, "a", clock.now()).await), vec!["c1", "c2"]);
    assert_eq!(
        stats(&engine, &t, "s").await,
        delivered(0),
        "counted at the ack"
    );
    clock.advance(RECOVERY_GRACE_MS);
    assert_eq!(engine.recover_publications(clock.now()).await.unwrap(), 2);
    assert_eq!(engine.recover_publications(clock.now()).await.unwrap(), 0);
    assert_eq!(
        ids(&all(&engine, "a", clock.now()).await),
        vec!["c1", "c2"],
        "the repeated applies added nothing"
    );
    assert_eq!(stats(&engine, &t, "s").await, delivered(2));
}

/// A FIFO publication whose publisher died after the commit is delivered by the next
/// publisher, before its own: the queue never sees seq n+1 before seq n.
async fn fifo_order_holds_across_a_crash(url: &str) {
    let clock = ManualClock::new(START);
    let prefix = unique_prefix("pub-fifo");
    let dead = engine(url, &prefix).await;
    let live = engine(url, &prefix).await;
    queue(&live, "q.fifo", None, clock.now()).await;
    let t = topic("orders.fifo");
    let first = dead
        .publish_interrupted(
            &t,
            vec![fifo("p1", vec![to("s", "q.fifo", "c1")])],
            clock.now(),
            PublishCrash::AfterCommit,
        )
        .await
        .unwrap();
    clock.advance(10);
    let second = live
        .publish(
            &t,
            vec![fifo("p2", vec![to("s", "q.fifo", "c2")])],
            clock.now(),
        )
        .await
        .unwrap();
    assert!(second[0].seq > first[0].seq);
    assert_eq!(
        second[0].outcomes,
        vec![("s".to_owned(), DeliveryOutcome::Delivered)]
    );
    let copies = all(&live, "q.fifo", clock.now()).await;
    assert_eq!(ids(&copies), vec!["c1", "c2"], "the earlier seq first");
    assert_eq!(
        copies.iter().map(seq_of).collect::<Vec<_>>(),
        vec![first[0].seq.unwrap(), second[0].seq.unwrap()]
    );
    assert_eq!(stats(&live, &t, "s").await, delivered(2));
    clock.advance(RECOVERY_GRACE_MS);
    assert_eq!(
        live.recover_publications(clock.now()).await.unwrap(),
        0,
        "the live publisher finished the dead one's fan-out"
    );
    assert_eq!(stats(&live, &t, "s").await, delivered(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_interrupted_after_its_commit_is_delivered_once() {
    interrupted_after_commit_is_delivered_once(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_publish_interrupted_after_its_commit_is_delivered_once() {
    interrupted_after_commit_is_delivered_once(&shared_cluster().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_interrupted_after_some_applies_is_completed_once() {
    interrupted_after_some_applies_is_completed_once(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_publish_interrupted_after_some_applies_is_completed_once() {
    interrupted_after_some_applies_is_completed_once(&shared_cluster().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_interrupted_after_its_applies_counts_once() {
    interrupted_after_applies_counts_once(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_publish_interrupted_after_its_applies_counts_once() {
    interrupted_after_applies_counts_once(&shared_cluster().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_order_holds_across_a_crashed_publisher() {
    fifo_order_holds_across_a_crash(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_fifo_order_holds_across_a_crashed_publisher() {
    fifo_order_holds_across_a_crash(&shared_cluster().url()).await;
}

/// On Cluster, with the topic and its queues in different slots: twenty FIFO publications
/// interrupted at every step, recovered by two engines at once, each delivery made and counted
/// by exactly one of them, every queue in sequence order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_two_engines_recovering_at_once_deliver_each_copy_once() {
    let cluster = shared_cluster();
    let prefix = unique_prefix("pub-race");
    let clock = ManualClock::new(START);
    let first = Arc::new(engine(&cluster.url(), &prefix).await);
    let second = Arc::new(engine(&cluster.url(), &prefix).await);
    let queues = ["x.fifo", "y.fifo", "z.fifo"];
    for q in queues {
        queue(&first, q, None, clock.now()).await;
    }
    let t = topic("busy.fifo");
    let slot = |k: &str| -> String {
        cluster.nodes()[0]
            .query(&["CLUSTER", "KEYSLOT", k])
            .unwrap()
    };
    let topic_slot = slot(&format!("{{{prefix}:acme:topic:busy.fifo}}:outbox"));
    for q in queues {
        assert_ne!(
            slot(&format!("{{{prefix}:acme:{q}}}:meta")),
            topic_slot,
            "{q} shares the topic's slot"
        );
    }
    let crashes = [
        PublishCrash::AfterCommit,
        PublishCrash::AfterSomeApplies,
        PublishCrash::AfterApplies,
    ];
    let mut seqs = Vec::new();
    for i in 0..20 {
        let id = format!("p{i}");
        let deliveries = queues
            .iter()
            .map(|q| to(&format!("s-{q}"), q, &format!("{q}-{id}")))
            .collect();
        let answer = first
            .publish_interrupted(&t, vec![fifo(&id, deliveries)], clock.now(), crashes[i % 3])
            .await
            .unwrap();
        seqs.push(answer[0].seq.unwrap());
        clock.advance(1);
    }
    clock.advance(RECOVERY_GRACE_MS);
    let mut made = 0;
    for _ in 0..3 {
        let (a, b) = tokio::join!(
            first.recover_publications(clock.now()),
            second.recover_publications(clock.now())
        );
        made += a.unwrap() + b.unwrap();
    }
    assert_eq!(made, 60, "each delivery counted by exactly one engine");
    for q in queues {
        let copies = all(&first, q, clock.now()).await;
        assert_eq!(copies.len(), 20, "{q}: one copy per publication");
        assert_eq!(
            copies.iter().map(seq_of).collect::<Vec<_>>(),
            seqs,
            "{q}: in sequence order"
        );
        assert_eq!(stats(&first, &t, &format!("s-{q}")).await, delivered(20));
    }
}

/// A publish that finished leaves a due entry that recovery drops after one look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_publishes_leave_nothing_for_recovery() {
    let server = shared_server();
    let prefix = unique_prefix("pub-none");
    let engine = engine(&server.url(), &prefix).await;
    queue(&engine, "a", None, START).await;
    let t = topic("t");
    let answer = engine
        .publish(&t, vec![publication("p", vec![to("s", "a", "c")])], START)
        .await
        .unwrap();
    assert_eq!(answer[0].outcomes[0].1, DeliveryOutcome::Delivered);
    let due = format!("{{{prefix}}}:fanouts");
    assert_eq!(server.query(&["ZCARD", &due]).unwrap(), "1", "registered");
    let outbox = format!("{{{prefix}:acme:topic:t}}:outbox");
    assert_eq!(
        server.query(&["EXISTS", &outbox]).unwrap(),
        "0",
        "acknowledged"
    );
    assert_eq!(
        engine
            .recover_publications(START + RECOVERY_GRACE_MS)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        server.query(&["ZCARD", &due]).unwrap(),
        "0",
        "the spurious due entry is dropped"
    );
    assert_eq!(all(&engine, "a", START).await.len(), 1);
    // The copy's apply id is remembered for an hour (scored as if applied 23 h earlier, so
    // the queue's one 24-hour trim forgets it in its time).
    let applied = format!("{{{prefix}:acme:a}}:applied");
    assert_eq!(
        server.query(&["ZSCORE", &applied, "p/s"]).unwrap(),
        (START - 23 * 3_600_000).to_string()
    );
}

/// A dead-lettered copy whose dead-letter queue is missing too is counted as failed, and a
/// missing queue is answered as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dead_letter_queue_fails_the_delivery() {
    let engine = engine(&shared_server().url(), &unique_prefix("pub-nodlq")).await;
    let t = topic("t");
    let mut d = to("s", "gone", "c");
    d.dead_letter_queue = Some(QueueName::parse("gone-too").unwrap());
    let answer = engine
        .publish(&t, vec![publication("p", vec![d])], START)
        .await
        .unwrap();
    assert_eq!(
        answer[0].outcomes[0].1,
        DeliveryOutcome::Failed(DeliveryFailure::QueueMissing)
    );
    assert_eq!(stats(&engine, &t, "s").await.failed, 1);
}

/// Deleting a tenant forgets its topics' state, pending publications included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_tenant_forgets_its_topics() {
    let server = shared_server();
    let prefix = unique_prefix("pub-tenant");
    let engine = engine(&server.url(), &prefix).await;
    queue(&engine, "q.fifo", None, START).await;
    let t = topic("gone.fifo");
    engine
        .publish(&t, vec![fifo("p1", vec![to("s", "q.fifo", "c1")])], START)
        .await
        .unwrap();
    engine
        .publish_interrupted(
            &t,
            vec![fifo("p2", vec![to("s", "q.fifo", "c2")])],
            START,
            PublishCrash::AfterCommit,
        )
        .await
        .unwrap();
    // No tenant record was made here: the answer says so, the topics go all the same.
    engine.delete_tenant(&tenant(), START + 1).await.unwrap();
    let tag = format!("{{{prefix}:acme:topic:gone.fifo}}");
    for part in [
        "meta",
        "counters",
        "dedup",
        "dedup-at",
        "outbox",
        "outbox-order",
    ] {
        assert_eq!(
            server.query(&["EXISTS", &format!("{tag}:{part}")]).unwrap(),
            "0",
            "{part}"
        );
    }
    assert_eq!(
        server
            .query(&["EXISTS", &format!("{{{prefix}}}:tenant:acme:topics")])
            .unwrap(),
        "0"
    );
    assert_eq!(
        engine
            .recover_publications(START + RECOVERY_GRACE_MS)
            .await
            .unwrap(),
        0,
        "nothing left to deliver"
    );
}

/// A store failure after the commit answers `Ok`, with `Pending` for the deliveries it could
/// not confirm; recovery makes them, and the deliveries made already are not repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_the_commit_answers_pending() {
    let server = shared_server();
    let prefix = unique_prefix("pub-fail");
    let clock = ManualClock::new(START);
    let engine = engine(&server.url(), &prefix).await;
    queue(&engine, "a", None, clock.now()).await;
    queue(&engine, "b", None, clock.now()).await;
    // An unreadable configuration makes every apply into "b" fail.
    let meta = format!("{{{prefix}:acme:b}}:meta");
    server
        .query(&["HSET", &meta, "config", "not json"])
        .unwrap();
    let t = topic("t");
    let answer = engine
        .publish(
            &t,
            vec![publication(
                "p",
                vec![to("s-a", "a", "ca"), to("s-b", "b", "cb")],
            )],
            clock.now(),
        )
        .await
        .expect("recorded, so no error");
    assert_eq!(
        answer[0].outcomes,
        vec![
            ("s-a".to_owned(), DeliveryOutcome::Delivered),
            ("s-b".to_owned(), DeliveryOutcome::Pending)
        ]
    );
    assert_eq!(
        stats(&engine, &t, "s-a").await,
        delivered(0),
        "not acknowledged yet"
    );
    queue(&engine, "b", None, clock.now()).await;
    clock.advance(RECOVERY_GRACE_MS);
    assert_eq!(engine.recover_publications(clock.now()).await.unwrap(), 2);
    assert_eq!(ids(&all(&engine, "a", clock.now()).await), vec!["ca"]);
    assert_eq!(ids(&all(&engine, "b", clock.now()).await), vec!["cb"]);
    assert_eq!(stats(&engine, &t, "s-a").await, delivered(1));
    assert_eq!(stats(&engine, &t, "s-b").await, delivered(1));
}

/// On a busy standard topic, whose due entry keeps moving, the next publishers deliver what a
/// dead publisher left once it is past the grace (and not before: it may still be live).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishers_finish_a_dead_publishers_fan_out_on_a_busy_topic() {
    let clock = ManualClock::new(START);
    let engine = engine(&shared_cluster().url(), &unique_prefix("pub-busy")).await;
    queue(&engine, "a", None, clock.now()).await;
    let t = topic("busy");
    let one = |id: &str| vec![publication(id, vec![to("s", "a", &format!("c-{id}"))])];
    engine
        .publish_interrupted(&t, one("p1"), clock.now(), PublishCrash::AfterCommit)
        .await
        .unwrap();
    clock.advance(1);
    engine.publish(&t, one("p2"), clock.now()).await.unwrap();
    let mut got: Vec<String> = all(&engine, "a", clock.now())
        .await
        .into_iter()
        .map(|m| m.message_id)
        .collect();
    assert_eq!(got, vec!["c-p2"], "within its grace p1 is left alone");
    clock.advance(RECOVERY_GRACE_MS);
    engine.publish(&t, one("p3"), clock.now()).await.unwrap();
    got = all(&engine, "a", clock.now())
        .await
        .into_iter()
        .map(|m| m.message_id)
        .collect();
    got.sort();
    assert_eq!(got, vec!["c-p1", "c-p2", "c-p3"]);
    assert_eq!(stats(&engine, &t, "s").await, delivered(3));
    clock.advance(10 * RECOVERY_GRACE_MS);
    assert_eq!(engine.recover_publications(clock.now()).await.unwrap(), 0);
    assert_eq!(stats(&engine, &t, "s").await, delivered(3));
}

/// A copy dead-lettered because its queue was missing stays the only copy when the queue is
/// created before recovery completes the fan-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_dead_lettered_for_a_missing_queue_is_not_delivered_again() {
    let clock = ManualClock::new(START);
    let engine = engine(&shared_cluster().url(), &unique_prefix("pub-late")).await;
    queue(&engine, "dlq", None, clock.now()).await;
    let t = topic("t");
    let mut d = to("s", "late", "c");
    d.dead_letter_queue = Some(QueueName::parse("dlq").unwrap());
    engine
        .publish_interrupted(
            &t,
            vec![publication("p", vec![d])],
            clock.now(),
            PublishCrash::AfterApplies,
        )
        .await
        .unwrap();
    assert_eq!(ids(&all(&engine, "dlq", clock.now()).await), vec!["c"]);
    queue(&engine, "late", None, clock.now()).await;
    clock.advance(RECOVERY_GRACE_MS);
    assert_eq!(engine.recover_publications(clock.now()).await.unwrap(), 1);
    assert!(
        all(&engine, "late", clock.now()).await.is_empty(),
        "one copy only"
    );
    assert_eq!(ids(&all(&engine, "dlq", clock.now()).await), vec!["c"]);
    assert_eq!(stats(&engine, &t, "s").await.failed, 1);
}

/// A fan-out with a payload interrupted after some applies and finished by two engines
/// recovering at once records each payload event once: one `Added` per copy at the commit, one
/// `Released` for the copy no queue took, nothing for the applies recovery repeats.
async fn payload_events_are_recorded_once_across_a_crash(url: &str) {
    let prefix = unique_prefix("pub-payload");
    let clock = ManualClock::new(START);
    let first = engine(url, &prefix).await;
    let second = engine(url, &prefix).await;
    queue(&first, "a", None, clock.now()).await;
    queue(&first, "b", None, clock.now()).await;
    let t = topic("big");
    let payload = PayloadRef {
        key: "acme/0123456789abcdef0123456789abcdef".into(),
        size: 4096,
        enveloped: false,
    };
    let p = Publication {
        body: String::new(),
        payload: Some(payload.clone()),
        ..publication(
            "p1",
            vec![
                to("s-a", "a", "c-a"),
                to("s-b", "b", "c-b"),
                to("s-gone", "gone", "c-gone"),
            ],
        )
    };
    first
        .publish_interrupted(&t, vec![p], clock.now(), PublishCrash::AfterSomeApplies)
        .await
        .unwrap();
    clock.advance(RECOVERY_GRACE_MS);
    for _ in 0..2 {
        let (a, b) = tokio::join!(
            first.recover_publications(clock.now()),
            second.recover_publications(clock.now())
        );
        a.unwrap();
        b.unwrap();
    }
    let events = |batch: PayloadEventBatch| {
        let mut out: Vec<(bool, String, String)> = batch
            .events
            .into_iter()
            .map(|e| (e.kind == PayloadEventKind::Added, e.key, e.message_id))
            .collect();
        out.sort();
        out
    };
    let batch = second.payload_events(100).await.unwrap();
    first.ack_payload_events(&batch).await.unwrap();
    let object = payload.key.clone();
    assert_eq!(
        events(batch),
        vec![
            (false, object.clone(), "c-gone".to_owned()),
            (true, object.clone(), "c-a".to_owned()),
            (true, object.clone(), "c-b".to_owned()),
            (true, object.clone(), "c-gone".to_owned()),
        ]
    );
    for q in ["a", "b"] {
        let copies = all(&first, q, clock.now()).await;
        assert_eq!(copies.len(), 1, "{q}: one copy");
        assert_eq!(copies[0].payload.as_ref().map(|p| &p.key), Some(&object));
    }
    // Deleting a queue releases its copy, once, from its own log.
    assert!(first.delete_queue(&key("a")).await.unwrap());
    assert!(!second.delete_queue(&key("a")).await.unwrap());
    let batch = first.payload_events(100).await.unwrap();
    second.ack_payload_events(&batch).await.unwrap();
    assert_eq!(events(batch), vec![(false, object, "c-a".to_owned())]);
    assert!(first.payload_events(100).await.unwrap().events.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_events_are_recorded_once_across_a_crashed_fan_out() {
    payload_events_are_recorded_once_across_a_crash(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_payload_events_are_recorded_once_across_a_crashed_fan_out() {
    payload_events_are_recorded_once_across_a_crash(&shared_cluster().url()).await;
}

/// A tenant deleted while a fan-out with a payload is pending releases every copy once: the
/// ones applied with their queue, the ones not applied yet by the fan-out's ack, which the
/// deletion runs once the queues are gone.
async fn tenant_deletion_releases_pending_copies(url: &str) {
    let clock = ManualClock::new(START);
    let engine = engine(url, &unique_prefix("pub-tenant-payload")).await;
    queue(&engine, "a", None, clock.now()).await;
    queue(&engine, "b", None, clock.now()).await;
    let object = "acme/00000000000000000000000000000001".to_owned();
    let p = Publication {
        body: String::new(),
        payload: Some(PayloadRef {
            key: object.clone(),
            size: 100,
            enveloped: false,
        }),
        ..publication("p1", vec![to("s-a", "a", "c-a"), to("s-b", "b", "c-b")])
    };
    engine
        .publish_interrupted(
            &topic("big"),
            vec![p],
            clock.now(),
            PublishCrash::AfterSomeApplies,
        )
        .await
        .unwrap();
    assert_eq!(
        all(&engine, "a", clock.now()).await.len() + all(&engine, "b", clock.now()).await.len(),
        1,
        "one copy applied before the crash"
    );
    engine.delete_tenant(&tenant(), clock.now()).await.unwrap();
    let batch = engine.payload_events(100).await.unwrap();
    let mut events: Vec<(bool, String, String)> = batch
        .events
        .into_iter()
        .map(|e| (e.kind == PayloadEventKind::Added, e.key, e.message_id))
        .collect();
    events.sort();
    assert_eq!(
        events,
        vec![
            (false, object.clone(), "c-a".to_owned()),
            (false, object.clone(), "c-b".to_owned()),
            (true, object.clone(), "c-a".to_owned()),
            (true, object, "c-b".to_owned()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_deletion_releases_the_copies_of_a_pending_fan_out() {
    tenant_deletion_releases_pending_copies(&shared_server().url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_tenant_deletion_releases_the_copies_of_a_pending_fan_out() {
    tenant_deletion_releases_pending_copies(&shared_cluster().url()).await;
}
