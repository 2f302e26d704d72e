//! Stored bytes: every queue's [`QueueStats::stored_bytes`](sluice_engine::QueueStats) moves
//! with each way a message enters or leaves it (send, batch, fan-out copy, dead-letter move,
//! redrive, delete, purge, expiry, queue deletion) and always equals the sum of the sizes of
//! the unexpired messages it holds, as `max_message_bytes` counts them. The tenant quota
//! `max_stored_bytes` is enforced on these totals, so an engine whose count drifts lets a
//! tenant store past its quota or locks it out.

use super::*;
use sluice_engine::{message_size, Delivery, Publication, TopicKey};

impl Ctx {
    /// The queue's stored bytes as the engine reports them.
    async fn stored_bytes(&self, queue: &str) -> u64 {
        self.engine
            .get_queue(&self.key(queue), self.clock.now())
            .await
            .unwrap()
            .unwrap()
            .stats
            .stored_bytes
    }

    /// Checks the reported stored bytes against the messages a peek finds, and answers them.
    async fn stored_bytes_match(&self, queue: &str) -> u64 {
        let peeked: usize = self
            .peek_all(queue)
            .await
            .iter()
            .map(|m| message_size(&m.body, &m.attributes))
            .sum();
        let reported = self.stored_bytes(queue).await;
        assert_eq!(
            reported, peeked as u64,
            "{queue}: stored_bytes against the messages peeked"
        );
        reported
    }
}

/// A message with one attribute of each kind; its size counts the body, each attribute's name,
/// type and value, and a `Binary` value decoded (`aGVsbG8=` is 5 bytes).
fn sized(body: &str) -> SendRequest {
    let attribute = |data_type: &str, value: &str| MessageAttribute {
        data_type: data_type.into(),
        value: value.into(),
    };
    SendRequest {
        body: body.to_owned(),
        attributes: BTreeMap::from([
            ("kind".to_owned(), attribute("String", "order")),
            ("n".to_owned(), attribute("Number.int", "42")),
            ("raw".to_owned(), attribute("Binary", "aGVsbG8=")),
        ]),
        ..SendRequest::default()
    }
}

/// `sized(body)`'s size: body + "kind" "String" "order" + "n" "Number.int" "42" + "raw"
/// "Binary" and 5 decoded bytes.
fn size_of_sized(body: &str) -> u64 {
    (body.len() + (4 + 6 + 5) + (1 + 10 + 2) + (3 + 6 + 5)) as u64
}

/// Stored bytes follow sends, batches, deletes, purges, expiry, dead-letter moves and redrive
/// back, fan-out copies and queue deletion, on standard and FIFO queues, and always equal the
/// sizes of the messages peeked.
pub async fn stored_bytes_follow_every_add_and_removal(ctx: Ctx) {
    let (s, t) = (&ctx.services, &ctx.tenant);
    ctx.queue("q", QueueConfigPatch::default()).await;
    assert_eq!(ctx.stored_bytes_match("q").await, 0);

    // Send and batch (a delayed message counts too).
    s.send(t, "q", sized("first")).await.unwrap();
    assert_eq!(ctx.stored_bytes_match("q").await, size_of_sized("first"));
    let entries = ["b1", "batch two"]
        .iter()
        .map(|body| SendEntry {
            id: body.replace(' ', "-"),
            message: SendRequest {
                delay_seconds: Some(60),
                ..sized(body)
            },
        })
        .collect();
    let outcome = s.send_batch(t, "q", entries).await.unwrap();
    assert_eq!(outcome.successful.len(), 2);
    let all = size_of_sized("first") + size_of_sized("b1") + size_of_sized("batch two");
    assert_eq!(ctx.stored_bytes_match("q").await, all);

    // Delete frees the message's bytes; a repeated delete frees nothing more.
    let got = ctx.receive("q", 1, 30).await;
    assert_eq!(got[0].body, "first");
    s.delete_message(t, "q", &handle(&got[0])).await.unwrap();
    s.delete_message(t, "q", &handle(&got[0])).await.unwrap();
    let left = all - size_of_sized("first");
    assert_eq!(ctx.stored_bytes_match("q").await, left);

    // Purge empties it.
    s.purge_queue(t, "q").await.unwrap();
    assert_eq!(ctx.stored_bytes_match("q").await, 0);

    // Expiry: the sweep takes the expired message's bytes with it.
    ctx.queue(
        "short",
        QueueConfigPatch {
            message_retention_seconds: Some(60),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    s.send(t, "short", sized("old")).await.unwrap();
    ctx.clock.advance(30 * SECOND);
    s.send(t, "short", sized("young")).await.unwrap();
    ctx.clock.advance(31 * SECOND);
    // An expired message no longer counts, swept or not.
    assert_eq!(
        ctx.stored_bytes_match("short").await,
        size_of_sized("young")
    );
    ctx.engine.expire(ctx.clock.now()).await.unwrap();
    assert_eq!(
        ctx.stored_bytes_match("short").await,
        size_of_sized("young")
    );

    // Dead-letter moves, automatic and on request: source −, destination +.
    ctx.queue("dlq", QueueConfigPatch::default()).await;
    ctx.queue(
        "src",
        QueueConfigPatch {
            redrive_policy: Some(Some(sluice_services::RedrivePolicyInput {
                dead_letter_queue: "dlq".into(),
                max_receive_count: 1,
            })),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    s.send(t, "src", sized("auto")).await.unwrap();
    s.send(t, "src", sized("asked")).await.unwrap();
    let both = size_of_sized("auto") + size_of_sized("asked");
    assert_eq!(ctx.stored_bytes_match("src").await, both);
    let got = ctx.receive("src", 10, 0).await;
    let asked = got.iter().find(|m| m.body == "asked").unwrap();
    s.dead_letter_message(t, "src", &handle(asked), "bad")
        .await
        .unwrap();
    let outcome = ctx
        .engine
        .receive(&ctx.key("src"), 10, 30, None, ctx.clock.now())
        .await
        .unwrap();
    assert_eq!(outcome.dead_lettered, 1, "the second receive moves `auto`");
    assert_eq!(ctx.stored_bytes_match("src").await, 0);
    assert_eq!(ctx.stored_bytes_match("dlq").await, both);

    // Redrive back: destination −, source +.
    let seqs: Vec<u64> = ctx
        .engine
        .peek(&ctx.key("dlq"), MessageState::Visible, 10, ctx.clock.now())
        .await
        .unwrap()
        .iter()
        .filter(|m| m.body == "auto")
        .map(|m| m.seq)
        .collect();
    ctx.engine
        .redrive(&ctx.key("dlq"), &seqs, None, ctx.clock.now())
        .await
        .unwrap();
    assert_eq!(ctx.stored_bytes_match("src").await, size_of_sized("auto"));
    assert_eq!(ctx.stored_bytes_match("dlq").await, size_of_sized("asked"));

    // Fan-out copies count as the rendered copy each queue stores (raw or enveloped).
    ctx.queue("raw", QueueConfigPatch::default()).await;
    ctx.queue("wrapped", QueueConfigPatch::default()).await;
    let delivery = |subscription: &str, queue: &str, raw: bool| Delivery {
        subscription_id: subscription.to_owned(),
        queue: QueueName::parse(queue).unwrap(),
        raw,
        dead_letter_queue: None,
        message_id: format!("copy-{subscription}"),
    };
    let sent = sized("news");
    let publication = Publication {
        payload: None,
        message_id: "p1".into(),
        body: sent.body.clone(),
        attributes: sent.attributes.clone(),
        subject: None,
        group_id: None,
        deduplication_id: None,
        topic_arn: "arn:aws:sns:us-east-1:000000000000:news".into(),
        timestamp: "2026-01-01T00:00:00.000Z".into(),
        deliveries: vec![
            delivery("news.a", "raw", true),
            delivery("news.b", "wrapped", false),
        ],
        filtered_out: Vec::new(),
    };
    let copy_size = |raw: bool| publication.render(&delivery("x", "raw", raw), None).size() as u64;
    let (raw_size, wrapped_size) = (copy_size(true), copy_size(false));
    let topic = TopicKey::new(t.clone(), QueueName::parse("news").unwrap());
    ctx.engine
        .publish(&topic, vec![publication.clone()], ctx.clock.now())
        .await
        .unwrap();
    assert_eq!(ctx.stored_bytes_match("raw").await, raw_size);
    assert_eq!(raw_size, size_of_sized("news"));
    assert_eq!(ctx.stored_bytes_match("wrapped").await, wrapped_size);

    // FIFO queues keep the same count.
    ctx.queue("f.fifo", QueueConfigPatch::default()).await;
    for (body, group) in [("f1", "a"), ("f2", "a"), ("f3", "b")] {
        s.send(
            t,
            "f.fifo",
            SendRequest {
                group_id: Some(group.into()),
                deduplication_id: Some(body.into()),
                ..sized(body)
            },
        )
        .await
        .unwrap();
    }
    let fifo_all = size_of_sized("f1") + size_of_sized("f2") + size_of_sized("f3");
    assert_eq!(ctx.stored_bytes_match("f.fifo").await, fifo_all);
    let got = ctx.receive("f.fifo", 10, 30).await;
    for m in &got {
        s.delete_message(t, "f.fifo", &handle(m)).await.unwrap();
    }
    let deleted: u64 = got.iter().map(|m| size_of_sized(&m.body)).sum();
    assert!(deleted > 0);
    assert_eq!(ctx.stored_bytes_match("f.fifo").await, fifo_all - deleted);

    // A queue deleted and created again starts from zero.
    s.delete_queue(t, "q").await.unwrap();
    ctx.queue("q", QueueConfigPatch::default()).await;
    s.send(t, "q", sized("again")).await.unwrap();
    s.delete_queue(t, "q").await.unwrap();
    ctx.queue("q", QueueConfigPatch::default()).await;
    assert_eq!(ctx.stored_bytes_match("q").await, 0);
}
