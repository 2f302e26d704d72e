//! Publishing through the engine, where the embedded engine has something of its own to get
//! right: a publish survives a restart whole (copies, FIFO sequence number, deduplication
//! records, counters), deleting a topic or its tenant is durable too, an older file gains the
//! topic tables, concurrent publishes of one deduplication id make one publication, and
//! publishes racing moves over the same queues never deadlock. Failed commits are
//! `failure_tests.rs`'s; the shared rules are the conformance suite's.

use super::*;
use sluice_engine::{Delivery, DeliveryOutcome, Publication, RedrivePolicy, SubscriptionStats};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::task::JoinSet;

fn tenant() -> TenantId {
    TenantId::parse("t").unwrap()
}

fn key(name: &str) -> QueueKey {
    QueueKey::new(tenant(), QueueName::parse(name).unwrap())
}

fn topic(name: &str) -> TopicKey {
    TopicKey::new(tenant(), QueueName::parse(name).unwrap())
}

fn open(dir: &Path) -> EmbeddedEngine {
    EmbeddedEngine::open(dir, EmbeddedOptions::default()).unwrap()
}

async fn queue(engine: &EmbeddedEngine, name: &str) {
    engine
        .put_queue(&key(name), QueueConfig::with_defaults(262_144), 0)
        .await
        .unwrap();
}

pub(crate) fn to(subscription: &str, queue: &str, copy_id: &str) -> Delivery {
    Delivery {
        subscription_id: subscription.to_owned(),
        queue: QueueName::parse(queue).unwrap(),
        raw: false,
        dead_letter_queue: None,
        message_id: copy_id.to_owned(),
    }
}

/// A publication (FIFO fields set when `dedup` is given).
pub(crate) fn publication(id: &str, dedup: Option<&str>, deliveries: Vec<Delivery>) -> Publication {
    Publication {
        payload: None,
        message_id: id.to_owned(),
        body: format!("body of {id}"),
        attributes: BTreeMap::new(),
        subject: None,
        group_id: dedup.map(|_| "g".to_owned()),
        deduplication_id: dedup.map(str::to_owned),
        topic_arn: "arn:aws:sns:us-east-1:000000000000:t".into(),
        timestamp: "2026-01-01T00:00:00.000Z".into(),
        deliveries,
        filtered_out: Vec::new(),
    }
}

/// The message ids in the queue, whatever their state, lowest seq first.
async fn ids(engine: &EmbeddedEngine, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for state in [
        MessageState::Visible,
        MessageState::InFlight,
        MessageState::Delayed,
    ] {
        out.extend(engine.peek(&key(name), state, 1000, 0).await.unwrap());
    }
    out.sort_by_key(|m| m.seq);
    out.into_iter().map(|m| m.message_id).collect()
}

fn delivered(n: u64) -> SubscriptionStats {
    SubscriptionStats {
        delivered: n,
        filtered_out: 0,
        failed: 0,
    }
}

#[tokio::test]
async fn a_publish_survives_a_restart_whole() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    queue(&engine, "q.fifo").await;
    let t = topic("orders.fifo");
    let mut first = publication("p1", Some("d1"), vec![to("s", "q.fifo", "c1")]);
    first.filtered_out = vec!["other".into()];
    let answer = engine.publish(&t, vec![first], 0).await.unwrap();
    let s1 = answer[0].seq.unwrap();
    drop(engine);

    let engine = open(dir.path());
    assert_eq!(ids(&engine, "q.fifo").await, vec!["c1"]);
    let stats = engine.subscription_stats(&t).await.unwrap();
    assert_eq!(stats["s"], delivered(1));
    assert_eq!(stats["other"].filtered_out, 1);
    // The deduplication record came back with the copies...
    let again = engine
        .publish(
            &t,
            vec![publication("p2", Some("d1"), vec![to("s", "q.fifo", "c2")])],
            1,
        )
        .await
        .unwrap();
    assert!(again[0].duplicate);
    assert_eq!(
        (again[0].message_id.as_str(), again[0].seq),
        ("p1", Some(s1))
    );
    // ...and the sequence number goes on from where it was.
    let next = engine
        .publish(
            &t,
            vec![publication("p3", Some("d3"), vec![to("s", "q.fifo", "c3")])],
            1,
        )
        .await
        .unwrap();
    assert!(next[0].seq.unwrap() > s1);
    drop(engine);

    let engine = open(dir.path());
    assert_eq!(ids(&engine, "q.fifo").await, vec!["c1", "c3"]);
    assert_eq!(
        engine.subscription_stats(&t).await.unwrap()["s"],
        delivered(2)
    );
}

#[tokio::test]
async fn deleting_a_topic_or_its_tenant_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    queue(&engine, "q.fifo").await;
    let (gone, kept) = (topic("gone.fifo"), topic("kept.fifo"));
    for t in [&gone, &kept] {
        let p = publication(
            "p1",
            Some("d"),
            vec![to("s", "q.fifo", &format!("c-{}", t.name))],
        );
        engine.publish(t, vec![p], 0).await.unwrap();
    }
    assert!(engine.delete_topic(&gone).await.unwrap());
    drop(engine);

    let engine = open(dir.path());
    assert!(engine.subscription_stats(&gone).await.unwrap().is_empty());
    assert!(!engine.delete_topic(&gone).await.unwrap(), "nothing left");
    let p = publication("p2", Some("d"), vec![to("s", "q.fifo", "c-again")]);
    assert!(!engine.publish(&gone, vec![p], 1).await.unwrap()[0].duplicate);
    assert_eq!(
        engine.subscription_stats(&kept).await.unwrap()["s"],
        delivered(1)
    );

    // Deleting the tenant forgets every topic of it, in memory and on disk; another tenant's
    // topic of the same name keeps its state (`t0` is the key range's bound: "t/" to "t0").
    let other = TopicKey::new(TenantId::parse("t0").unwrap(), kept.name.clone());
    engine
        .publish(&other, vec![publication("p", Some("d"), Vec::new())], 1)
        .await
        .unwrap();
    let mut counted = publication("p", Some("x"), Vec::new());
    counted.filtered_out = vec!["s".into()];
    engine.publish(&other, vec![counted], 1).await.unwrap();
    engine.delete_tenant(&tenant(), 2).await.unwrap();
    for t in [&gone, &kept] {
        assert!(engine.subscription_stats(t).await.unwrap().is_empty());
    }
    drop(engine);
    let engine = open(dir.path());
    for t in [&gone, &kept] {
        assert!(engine.subscription_stats(t).await.unwrap().is_empty());
        assert!(!engine.delete_topic(t).await.unwrap());
    }
    assert_eq!(
        engine.subscription_stats(&other).await.unwrap()["s"].filtered_out,
        1
    );
    let duplicate = engine
        .publish(
            &other,
            vec![publication("p-again", Some("d"), Vec::new())],
            3,
        )
        .await
        .unwrap();
    assert!(
        duplicate[0].duplicate,
        "the other tenant's records are kept"
    );
}

#[tokio::test]
async fn a_file_without_topic_tables_gains_them() {
    let dir = tempfile::tempdir().unwrap();
    // Format 2 predates the topic tables (as format 3 files written before them do).
    store::tests::write_format_2(&dir.path().join(DATABASE_FILE));
    let engine = open(dir.path());
    let t = topic("t.fifo");
    let p = publication("p1", Some("d"), vec![to("s", "old.fifo", "c1")]);
    let answer = engine.publish(&t, vec![p], 0).await.unwrap();
    assert_eq!(answer[0].outcomes[0].1, DeliveryOutcome::Delivered);
    drop(engine);
    let engine = open(dir.path());
    assert_eq!(ids(&engine, "old.fifo").await, vec!["id-old", "c1"]);
    assert_eq!(
        engine.subscription_stats(&t).await.unwrap()["s"],
        delivered(1)
    );
}

/// Publishes to two topics naming two queues in opposite orders (each the other's dead-letter
/// queue and its deliveries' dead-letter queue) race redrives between the same queues: no
/// deadlock, and every copy arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn publishes_and_moves_over_the_same_queues_never_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(open(dir.path()));
    for (name, dlq) in [("a", "b"), ("b", "a")] {
        let mut config = QueueConfig::with_defaults(262_144);
        config.redrive_policy = Some(RedrivePolicy {
            dead_letter_queue: QueueName::parse(dlq).unwrap(),
            max_receive_count: 1,
        });
        engine.put_queue(&key(name), config, 0).await.unwrap();
    }
    let rounds = 50;
    let mut tasks = JoinSet::new();
    for (t, order) in [("ab", ["a", "b"]), ("ba", ["b", "a"])] {
        let engine = Arc::clone(&engine);
        tasks.spawn(async move {
            for i in 0..rounds {
                let deliveries = order
                    .iter()
                    .enumerate()
                    .map(|(n, q)| {
                        let mut d = to(&format!("s{n}"), q, &format!("{t}-{i}-{q}"));
                        d.dead_letter_queue = Some(QueueName::parse(order[1 - n]).unwrap());
                        d
                    })
                    .collect();
                let p = publication(&format!("{t}-{i}"), None, deliveries);
                engine.publish(&topic(t), vec![p], 0).await.unwrap();
            }
        });
    }
    for (from, to_queue) in [("a", "b"), ("b", "a")] {
        let engine = Arc::clone(&engine);
        tasks.spawn(async move {
            for _ in 0..rounds {
                let scan = engine.message_seqs(&key(from), 0, 10).await.unwrap();
                let destination = QueueName::parse(to_queue).unwrap();
                engine
                    .redrive(&key(from), &scan.seqs, Some(&destination), 0)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
            }
        });
    }
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    })
    .await
    .expect("no deadlock");
    let mut all = ids(&engine, "a").await;
    all.extend(ids(&engine, "b").await);
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(
        (before, all.len()),
        (4 * rounds, 4 * rounds),
        "each copy once"
    );
}

/// Concurrent publishes of one deduplication id (each answered only once the one it
/// duplicates is durable): one publication, one copy, every answer naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_publishes_of_one_id_make_one_publication() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(open(dir.path()));
    queue(&engine, "q.fifo").await;
    let mut tasks = JoinSet::new();
    for i in 0..32 {
        let engine = Arc::clone(&engine);
        tasks.spawn(async move {
            let p = publication(
                &format!("p{i}"),
                Some("d"),
                vec![to("s", "q.fifo", &format!("c{i}"))],
            );
            engine
                .publish(&topic("t.fifo"), vec![p], 0)
                .await
                .unwrap()
                .remove(0)
        });
    }
    let mut answers = Vec::new();
    while let Some(done) = tasks.join_next().await {
        answers.push(done.unwrap());
    }
    let originals: Vec<_> = answers.iter().filter(|a| !a.duplicate).collect();
    assert_eq!(originals.len(), 1);
    let original = (originals[0].message_id.clone(), originals[0].seq);
    for a in &answers {
        assert_eq!((a.message_id.clone(), a.seq), original);
    }
    assert_eq!(ids(&engine, "q.fifo").await.len(), 1);
    assert_eq!(
        engine.subscription_stats(&topic("t.fifo")).await.unwrap()["s"],
        delivered(1)
    );
}

#[tokio::test]
async fn the_sweep_forgets_an_idle_topics_deduplication_records() {
    use sluice_engine::DEDUPLICATION_WINDOW_MS;
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let t = topic("t.fifo");
    let p = publication("p1", Some("d"), Vec::new());
    engine.publish(&t, vec![p], 0).await.unwrap();
    engine.expire(DEDUPLICATION_WINDOW_MS - 1).await.unwrap();
    drop(engine);
    let file = dir.path().join(DATABASE_FILE);
    assert_eq!(
        store::tests::topic_dedup_rows(&file),
        1,
        "still in its window"
    );

    let engine = open(dir.path());
    engine.expire(DEDUPLICATION_WINDOW_MS).await.unwrap();
    drop(engine);
    assert_eq!(store::tests::topic_dedup_rows(&file), 0);
    let engine = open(dir.path());
    let again = publication("p2", Some("d"), Vec::new());
    let answer = engine
        .publish(&t, vec![again], DEDUPLICATION_WINDOW_MS)
        .await
        .unwrap();
    assert!(!answer[0].duplicate);
    assert!(answer[0].seq.unwrap() > 1, "the sequence number stays");
}
