//! Publishing cases: a topic's fan-out to one queue per delivery, the form of the copies,
//! failures that stay with their delivery, FIFO topics' sequence numbers, deduplication and
//! order, and the subscriptions' counters — all through the engine's `Publishing` capability
//! (the services match filter policies and name the deliveries).

use super::*;
use crate::START;
use sluice_engine::{
    Delivery, DeliveryFailure, DeliveryOutcome, Publication, Published, SubscriptionStats,
    TopicKey, DEDUPLICATION_WINDOW_MS,
};

impl Ctx {
    fn topic(&self, name: &str) -> TopicKey {
        TopicKey::new(self.tenant.clone(), QueueName::parse(name).unwrap())
    }

    async fn publish(&self, topic: &TopicKey, publications: Vec<Publication>) -> Vec<Published> {
        self.engine
            .publish(topic, publications, self.clock.now())
            .await
            .unwrap()
    }

    async fn stats_of(&self, topic: &TopicKey, subscription: &str) -> SubscriptionStats {
        self.engine
            .subscription_stats(topic)
            .await
            .unwrap()
            .get(subscription)
            .copied()
            .unwrap_or_default()
    }
}

fn publication(id: &str, body: &str, deliveries: Vec<Delivery>) -> Publication {
    Publication {
        payload: None,
        message_id: id.to_owned(),
        body: body.to_owned(),
        attributes: BTreeMap::from([(
            "colour".to_owned(),
            MessageAttribute {
                data_type: "String".into(),
                value: "red".into(),
            },
        )]),
        subject: Some("news".into()),
        group_id: None,
        deduplication_id: None,
        topic_arn: "arn:aws:sns:us-east-1:000000000000:news".into(),
        timestamp: "2026-01-01T00:00:00.000Z".into(),
        deliveries,
        filtered_out: Vec::new(),
    }
}

fn to(subscription: &str, queue: &str, raw: bool, copy_id: &str) -> Delivery {
    Delivery {
        subscription_id: subscription.to_owned(),
        queue: QueueName::parse(queue).unwrap(),
        raw,
        dead_letter_queue: None,
        message_id: copy_id.to_owned(),
    }
}

fn fifo_publication(id: &str, group: &str, dedup: &str, deliveries: Vec<Delivery>) -> Publication {
    Publication {
        payload: None,
        group_id: Some(group.to_owned()),
        deduplication_id: Some(dedup.to_owned()),
        ..publication(id, &format!("{group}:{id}"), deliveries)
    }
}

fn outcomes(published: &Published) -> Vec<DeliveryOutcome> {
    published.outcomes.iter().map(|(_, o)| *o).collect()
}

/// Each delivery gets one copy, raw or enveloped as asked, under its own message id; filtered
/// subscriptions get nothing and are counted; publishing wakes the queues' listeners.
pub async fn publish_delivers_one_copy_per_delivery(ctx: Ctx) {
    for q in ["raw", "enveloped", "filtered"] {
        ctx.queue(q, QueueConfigPatch::default()).await;
    }
    let topic = ctx.topic("news");
    let mut listener = ctx.engine.listen(&ctx.key("raw")).await.unwrap();
    let mut p = publication(
        "pub-1",
        "hello \"world\"",
        vec![
            to("s-raw", "raw", true, "copy-raw"),
            to("s-env", "enveloped", false, "copy-env"),
        ],
    );
    p.filtered_out = vec!["s-filtered".into()];
    let answer = ctx.publish(&topic, vec![p.clone()]).await;
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0].message_id, "pub-1");
    assert_eq!(
        answer[0].seq, None,
        "standard topics have no sequence numbers"
    );
    assert!(!answer[0].duplicate);
    assert_eq!(
        answer[0].outcomes,
        vec![
            ("s-raw".to_owned(), DeliveryOutcome::Delivered),
            ("s-env".to_owned(), DeliveryOutcome::Delivered),
        ]
    );
    tokio::time::timeout(Duration::from_secs(5), listener.changed())
        .await
        .expect("a delivery wakes the queue's listeners");

    let raw = ctx.receive("raw", 10, 30).await;
    assert_eq!(raw.len(), 1, "exactly one copy");
    assert_eq!(raw[0].message_id, "copy-raw");
    assert_eq!(raw[0].body, p.body);
    assert_eq!(raw[0].attributes, p.attributes);
    assert_eq!(raw[0].sent_at, START);
    assert_eq!(raw[0].receive_count, 1);

    let enveloped = ctx.receive("enveloped", 10, 30).await;
    assert_eq!(enveloped.len(), 1, "exactly one copy");
    assert_eq!(enveloped[0].message_id, "copy-env");
    assert!(enveloped[0].attributes.is_empty());
    let expected = p.render(&p.deliveries[1], None);
    assert_eq!(enveloped[0].body, expected.body);

    assert!(ctx.receive("filtered", 10, 30).await.is_empty());
    let stats = |delivered, filtered_out| SubscriptionStats {
        delivered,
        filtered_out,
        failed: 0,
    };
    assert_eq!(ctx.stats_of(&topic, "s-raw").await, stats(1, 0));
    assert_eq!(ctx.stats_of(&topic, "s-env").await, stats(1, 0));
    assert_eq!(ctx.stats_of(&topic, "s-filtered").await, stats(0, 1));

    // A publication matching nothing is still published; a batch is answered in order.
    let none = publication("pub-2", "nobody", Vec::new());
    let two = publication("pub-3", "again", vec![to("s-raw", "raw", true, "copy-3")]);
    let answer = ctx.publish(&topic, vec![none, two]).await;
    assert_eq!(answer[0].message_id, "pub-2");
    assert!(answer[0].outcomes.is_empty());
    assert_eq!(answer[1].message_id, "pub-3");
    assert_eq!(outcomes(&answer[1]), vec![DeliveryOutcome::Delivered]);
    assert_eq!(ctx.stats_of(&topic, "s-raw").await, stats(2, 0));
}

/// A queue that is missing, full or too small for the copy does not take it; the copy goes to
/// the delivery's dead-letter queue if there is one, and the other deliveries are made.
pub async fn publish_failures_stay_with_their_delivery(ctx: Ctx) {
    ctx.queue(
        "full",
        QueueConfigPatch {
            max_depth: Some(Some(1)),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.send("full", "already here").await;
    ctx.queue(
        "small",
        QueueConfigPatch {
            max_message_bytes: Some(1024),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.queue(
        "dlq",
        QueueConfigPatch {
            max_depth: Some(Some(1)),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.queue("fine", QueueConfigPatch::default()).await;
    let topic = ctx.topic("alerts");
    let body = "x".repeat(2000);
    let mut to_small = to("s-small", "small", false, "c-small");
    to_small.dead_letter_queue = Some(QueueName::parse("dlq").unwrap());
    let mut to_full = to("s-full", "full", true, "c-full");
    // The dead-letter queue is full too: it takes dead letters all the same.
    to_full.dead_letter_queue = Some(QueueName::parse("dlq").unwrap());
    let p = publication(
        "pub-1",
        &body,
        vec![
            to("s-missing", "missing", true, "c-missing"),
            to_full,
            to_small,
            to("s-fine", "fine", true, "c-fine"),
        ],
    );
    let answer = ctx.publish(&topic, vec![p.clone()]).await;
    assert_eq!(
        outcomes(&answer[0]),
        vec![
            DeliveryOutcome::Failed(DeliveryFailure::QueueMissing),
            DeliveryOutcome::DeadLettered(DeliveryFailure::QueueFull),
            DeliveryOutcome::DeadLettered(DeliveryFailure::TooLarge),
            DeliveryOutcome::Delivered,
        ]
    );
    assert_eq!(
        bodies(&ctx.receive("fine", 10, 30).await),
        vec![body.as_str()]
    );
    assert_eq!(bodies(&ctx.peek_all("full").await), vec!["already here"]);
    assert!(ctx.peek_all("small").await.is_empty());
    // The dead-letter queue holds both copies in the form each subscription asked for.
    let mut in_dlq = ctx.peek_all("dlq").await;
    in_dlq.sort_by(|a, b| a.message_id.cmp(&b.message_id));
    assert_eq!(in_dlq.len(), 2);
    assert_eq!(in_dlq[0].message_id, "c-full");
    assert_eq!(in_dlq[0].body, body);
    assert_eq!(in_dlq[1].message_id, "c-small");
    assert_eq!(in_dlq[1].body, p.render(&p.deliveries[2], None).body);
    let failed = SubscriptionStats {
        delivered: 0,
        filtered_out: 0,
        failed: 1,
    };
    for s in ["s-missing", "s-full", "s-small"] {
        assert_eq!(ctx.stats_of(&topic, s).await, failed, "{s}");
    }
    assert_eq!(ctx.stats_of(&topic, "s-fine").await.delivered, 1);
}

/// Copies wait out the queue's delay and belong to the topic's tenant: a queue name that
/// exists only in another tenant is missing.
pub async fn copies_follow_their_queue_and_tenant(ctx: Ctx) {
    ctx.queue(
        "slow",
        QueueConfigPatch {
            delay_seconds: Some(10),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.services
        .put_queue(&ctx.other_tenant, "elsewhere", QueueConfigPatch::default())
        .await
        .unwrap();
    let topic = ctx.topic("t");
    let answer = ctx
        .publish(
            &topic,
            vec![publication(
                "p",
                "body",
                vec![
                    to("s1", "slow", true, "c1"),
                    to("s2", "elsewhere", true, "c2"),
                ],
            )],
        )
        .await;
    assert_eq!(
        outcomes(&answer[0]),
        vec![
            DeliveryOutcome::Delivered,
            DeliveryOutcome::Failed(DeliveryFailure::QueueMissing)
        ]
    );
    assert_eq!(ctx.stats("slow").await, (0, 0, 1), "delayed by the queue");
    ctx.clock.advance(10 * SECOND);
    assert_eq!(bodies(&ctx.receive("slow", 10, 30).await), vec!["body"]);
    let other = ctx
        .services
        .peek(
            &ctx.other_tenant,
            "elsewhere",
            MessageState::Visible,
            Some(10),
        )
        .await
        .unwrap();
    assert!(other.is_empty(), "nothing reaches another tenant's queue");
}

/// FIFO topics number publications, deduplicate them for five minutes, and pass group and
/// deduplication ids on to every copy, in order.
pub async fn fifo_topic_sequence_numbers_and_deduplication(ctx: Ctx) {
    ctx.queue("a.fifo", QueueConfigPatch::default()).await;
    ctx.queue("b.fifo", QueueConfigPatch::default()).await;
    let topic = ctx.topic("orders.fifo");
    let deliver = |n: &str| {
        vec![
            to("s-a", "a.fifo", true, &format!("a-{n}")),
            to("s-b", "b.fifo", false, &format!("b-{n}")),
        ]
    };
    let answer = ctx
        .publish(
            &topic,
            vec![
                fifo_publication("p1", "g", "d1", deliver("1")),
                fifo_publication("p2", "g", "d2", deliver("2")),
                // The same id twice in one call makes one publication.
                fifo_publication("p3", "g", "d1", deliver("3")),
            ],
        )
        .await;
    let s1 = answer[0].seq.expect("FIFO topics number publications");
    let s2 = answer[1].seq.unwrap();
    assert!(s2 > s1);
    assert!(!answer[0].duplicate && !answer[1].duplicate);
    assert_eq!(answer[2].message_id, "p1");
    assert_eq!(answer[2].seq, Some(s1));
    assert!(answer[2].duplicate);
    assert!(
        answer[2].outcomes.is_empty(),
        "a duplicate delivers nothing"
    );

    // Within the window, a later call is a duplicate too; after it, the id publishes anew.
    ctx.clock.advance(DEDUPLICATION_WINDOW_MS - 1);
    let again = ctx
        .publish(
            &topic,
            vec![fifo_publication("p4", "g", "d2", deliver("4"))],
        )
        .await;
    assert!(again[0].duplicate);
    assert_eq!(
        (again[0].message_id.as_str(), again[0].seq),
        ("p2", Some(s2))
    );
    ctx.clock.advance(2);
    let later = ctx
        .publish(
            &topic,
            vec![fifo_publication("p5", "g", "d2", deliver("5"))],
        )
        .await;
    assert!(!later[0].duplicate);
    let s5 = later[0].seq.unwrap();
    assert!(s5 > s2);

    let a = ctx.receive("a.fifo", 10, 30).await;
    assert_eq!(
        a.iter().map(|m| m.message_id.as_str()).collect::<Vec<_>>(),
        vec!["a-1", "a-2", "a-5"],
        "one copy per publication, in publish order"
    );
    assert_eq!(a[0].group_id.as_deref(), Some("g"));
    assert_eq!(a[0].deduplication_id.as_deref(), Some("d1"));
    let b = ctx.receive("b.fifo", 10, 30).await;
    let numbers: Vec<String> = b
        .iter()
        .map(|m| {
            let envelope: serde_json::Value = serde_json::from_str(&m.body).unwrap();
            envelope["SequenceNumber"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        numbers,
        vec![s1.to_string(), s2.to_string(), s5.to_string()]
    );
    let stats = ctx.stats_of(&topic, "s-b").await;
    assert_eq!(stats.delivered, 3, "duplicates are not counted");
}

/// Several publishers at once on one FIFO topic: every queue receives each group's copies in
/// the topic's sequence order, exactly once each.
pub async fn fifo_topic_order_holds_under_concurrent_publishers(ctx: Ctx) {
    ctx.queue("x.fifo", QueueConfigPatch::default()).await;
    ctx.queue("y.fifo", QueueConfigPatch::default()).await;
    let topic = ctx.topic("busy.fifo");
    let publishers = 6;
    let each = 25;
    let mut tasks = Vec::new();
    for p in 0..publishers {
        let engine = ctx.engine.clone();
        let now = ctx.clock.now();
        let topic = topic.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..each {
                let id = format!("p{p}-{i}");
                let group = format!("g{}", i % 3);
                let deliveries = vec![
                    to("s-x", "x.fifo", false, &format!("x-{id}")),
                    to("s-y", "y.fifo", false, &format!("y-{id}")),
                ];
                let publication = fifo_publication(&id, &group, &id, deliveries);
                let answer = engine
                    .publish(&topic, vec![publication], now)
                    .await
                    .unwrap();
                assert_eq!(
                    outcomes(&answer[0]),
                    vec![DeliveryOutcome::Delivered, DeliveryOutcome::Delivered]
                );
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for queue in ["x.fifo", "y.fifo"] {
        let mut by_group: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut total = 0;
        loop {
            let got = ctx.receive(queue, 10, 300).await;
            if got.is_empty() {
                break;
            }
            let handles: Vec<DeleteEntry> = got
                .iter()
                .enumerate()
                .map(|(i, m)| DeleteEntry {
                    id: i.to_string(),
                    receipt_handle: handle(m),
                })
                .collect();
            for m in &got {
                let envelope: serde_json::Value = serde_json::from_str(&m.body).unwrap();
                let seq: u64 = envelope["SequenceNumber"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                by_group
                    .entry(m.group_id.clone().unwrap())
                    .or_default()
                    .push(seq);
            }
            total += got.len();
            ctx.services
                .delete_batch(&ctx.tenant, queue, handles)
                .await
                .unwrap();
        }
        assert_eq!(
            total,
            publishers * each,
            "{queue}: one copy per publication"
        );
        for (group, seqs) in by_group {
            let mut sorted = seqs.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(
                seqs, sorted,
                "{queue}, group {group}: copies in sequence order"
            );
        }
    }
}

/// Deleting a topic forgets its sequence numbers, deduplication records and counters; copies
/// already delivered stay in their queues.
pub async fn deleting_a_topic_forgets_its_state(ctx: Ctx) {
    ctx.queue("q.fifo", QueueConfigPatch::default()).await;
    let topic = ctx.topic("gone.fifo");
    let first = ctx
        .publish(
            &topic,
            vec![fifo_publication(
                "p1",
                "g",
                "d",
                vec![to("s", "q.fifo", true, "c1")],
            )],
        )
        .await;
    assert!(ctx.engine.delete_topic(&topic).await.unwrap());
    assert!(!ctx
        .engine
        .delete_topic(&ctx.topic("never.fifo"))
        .await
        .unwrap());
    assert!(ctx
        .engine
        .subscription_stats(&topic)
        .await
        .unwrap()
        .is_empty());
    let second = ctx
        .publish(
            &topic,
            vec![fifo_publication(
                "p2",
                "g",
                "d",
                vec![to("s", "q.fifo", true, "c2")],
            )],
        )
        .await;
    assert!(
        !second[0].duplicate,
        "deduplication records went with the topic"
    );
    assert!(second[0].seq.is_some());
    let _ = first;
    let ids: Vec<String> = ctx
        .peek_all("q.fifo")
        .await
        .into_iter()
        .map(|m| m.message_id)
        .collect();
    assert_eq!(ids, vec!["c1", "c2"]);
}
