//! Payload cases: a message whose body is in a payload store carries its [`PayloadRef`]
//! unchanged through send, receive, peek, dead-letter moves, redrive and fan-out copies, and
//! counts its size; and the engine records exactly one `Added` per committed message with a
//! payload and one `Released` per such message that leaves the store for good (never for a
//! move, a FIFO duplicate or a message without payload), read and acknowledged through
//! [`Payloads`](sluice_engine::Payloads). A payload store frees objects from these events, so
//! a missing event leaks an object and an extra one frees an object still in use.

use super::*;
use sluice_engine::{
    message_size_with_payload, Delivery, DeliveryFailure, DeliveryOutcome, NewMessage,
    PayloadEvent, PayloadEventBatch, PayloadEventKind, PayloadRef, Publication, StoredMessage,
    TopicKey,
};
use sluice_services::RedrivePolicyInput;

impl Ctx {
    /// A payload reference of this case's tenant.
    fn payload(&self, n: u64) -> PayloadRef {
        PayloadRef {
            key: format!("{}/{n:032x}", self.tenant),
            size: 1000 + n,
            enveloped: false,
        }
    }

    /// Sends messages straight to the engine (the services' send spills nothing itself).
    async fn send_raw(&self, queue: &str, messages: Vec<NewMessage>) -> Vec<(String, bool)> {
        self.engine
            .send(&self.key(queue), messages, self.clock.now())
            .await
            .unwrap()
            .into_iter()
            .map(|r| {
                let sent = r.unwrap();
                (sent.message_id, sent.duplicate)
            })
            .collect()
    }

    fn spilled(&self, id: &str, n: u64) -> NewMessage {
        NewMessage {
            message_id: id.to_owned(),
            body: String::new(),
            attributes: BTreeMap::new(),
            visible_at: self.clock.now(),
            group_id: None,
            deduplication_id: None,
            payload: Some(self.payload(n)),
        }
    }

    fn plain(&self, id: &str) -> NewMessage {
        NewMessage {
            payload: None,
            body: "inline".into(),
            ..self.spilled(id, 0)
        }
    }

    /// Every message the engine holds in `queue`, in any state.
    async fn peek_engine(&self, queue: &str) -> Vec<StoredMessage> {
        let mut all = Vec::new();
        for state in [
            MessageState::Visible,
            MessageState::InFlight,
            MessageState::Delayed,
        ] {
            let peeked = self
                .engine
                .peek(&self.key(queue), state, 100, self.clock.now())
                .await
                .unwrap();
            all.extend(peeked);
        }
        all
    }

    async fn queue_bytes(&self, queue: &str) -> u64 {
        self.engine
            .get_queue(&self.key(queue), self.clock.now())
            .await
            .unwrap()
            .unwrap()
            .stats
            .stored_bytes
    }

    /// Reads and acknowledges every recorded event; answers them sorted (engines order events
    /// only within one queue).
    async fn drain_events(&self) -> Vec<Event> {
        let mut all = Vec::new();
        loop {
            let batch = self.engine.payload_events(7).await.unwrap();
            if batch.events.is_empty() {
                break;
            }
            all.extend(batch.events.iter().cloned().map(event_tuple));
            self.engine.ack_payload_events(&batch).await.unwrap();
        }
        all.sort();
        all
    }
}

/// An event as `(kind, key, message id)`, comparable and sortable.
type Event = (&'static str, String, String);

fn event_tuple(e: PayloadEvent) -> Event {
    let kind = match e.kind {
        PayloadEventKind::Added => "added",
        PayloadEventKind::Released => "released",
    };
    (kind, e.key, e.message_id)
}

fn added(p: &PayloadRef, id: &str) -> Event {
    ("added", p.key.clone(), id.to_owned())
}

fn released(p: &PayloadRef, id: &str) -> Event {
    ("released", p.key.clone(), id.to_owned())
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

fn redrive_to(dlq: &str) -> QueueConfigPatch {
    QueueConfigPatch {
        redrive_policy: Some(Some(RedrivePolicyInput {
            dead_letter_queue: dlq.to_owned(),
            max_receive_count: 1,
        })),
        ..QueueConfigPatch::default()
    }
}

fn spilled_publication(payload: PayloadRef, deliveries: Vec<Delivery>) -> Publication {
    Publication {
        message_id: "pub-1".into(),
        body: String::new(),
        attributes: BTreeMap::new(),
        payload: Some(payload),
        subject: None,
        group_id: None,
        deduplication_id: None,
        topic_arn: "arn:aws:sns:us-east-1:000000000000:big".into(),
        timestamp: "2026-01-01T00:00:00.000Z".into(),
        deliveries,
        filtered_out: Vec::new(),
    }
}

fn delivery(subscription: &str, queue: &str, raw: bool) -> Delivery {
    Delivery {
        subscription_id: subscription.to_owned(),
        queue: QueueName::parse(queue).unwrap(),
        raw,
        dead_letter_queue: None,
        message_id: format!("copy-{subscription}"),
    }
}

/// A payload reference comes back from receive and peek as sent, stays with its message
/// through a dead-letter move (automatic and on request) and a redrive, counts its size in
/// `stored_bytes`; a publication's copies carry it with `enveloped` = !raw, the envelope's
/// `Message` empty, and its size counts against `max_message_bytes`.
pub async fn payload_refs_travel_with_their_message(ctx: Ctx) {
    ctx.queue("dlq", QueueConfigPatch::default()).await;
    ctx.queue("src", redrive_to("dlq")).await;
    let (a, b) = (ctx.payload(1), ctx.payload(2));
    ctx.send_raw(
        "src",
        vec![
            ctx.spilled("m-a", 1),
            ctx.spilled("m-b", 2),
            ctx.plain("m-c"),
        ],
    )
    .await;
    let inline = message_size_with_payload("inline", &BTreeMap::new(), None) as u64;
    assert_eq!(
        ctx.queue_bytes("src").await,
        a.size + b.size + inline,
        "stored_bytes counts each payload's size"
    );
    let peeked = ctx.peek_engine("src").await;
    let payload_of = |messages: &[StoredMessage], id: &str| {
        messages
            .iter()
            .find(|m| m.message_id == id)
            .unwrap_or_else(|| panic!("{id} is there"))
            .payload
            .clone()
    };
    assert_eq!(payload_of(&peeked, "m-a"), Some(a.clone()));
    assert_eq!(payload_of(&peeked, "m-c"), None);

    let got = ctx
        .engine
        .receive(&ctx.key("src"), 10, 0, None, ctx.clock.now())
        .await
        .unwrap();
    let received: Vec<StoredMessage> = got.messages.iter().map(|r| r.message.clone()).collect();
    assert_eq!(received.len(), 3);
    assert_eq!(payload_of(&received, "m-a"), Some(a.clone()));
    assert_eq!(payload_of(&received, "m-b"), Some(b.clone()));
    assert_eq!(payload_of(&received, "m-c"), None);
    let b_handle = got
        .messages
        .iter()
        .find(|r| r.message.message_id == "m-b")
        .unwrap()
        .receipt_handle
        .clone();
    ctx.engine
        .dead_letter(&ctx.key("src"), &b_handle, "bad", ctx.clock.now())
        .await
        .unwrap()
        .unwrap();
    // The second receive moves the rest (received once already) to the DLQ.
    let moved = ctx
        .engine
        .receive(&ctx.key("src"), 10, 30, None, ctx.clock.now())
        .await
        .unwrap();
    assert_eq!(moved.dead_lettered, 2);
    let in_dlq = ctx.peek_engine("dlq").await;
    assert_eq!(in_dlq.len(), 3);
    assert_eq!(payload_of(&in_dlq, "m-a"), Some(a.clone()));
    assert_eq!(payload_of(&in_dlq, "m-b"), Some(b.clone()));
    assert_eq!(payload_of(&in_dlq, "m-c"), None);
    assert_eq!(ctx.queue_bytes("src").await, 0);
    assert_eq!(ctx.queue_bytes("dlq").await, a.size + b.size + inline);

    let seqs: Vec<u64> = in_dlq.iter().map(|m| m.seq).collect();
    ctx.engine
        .redrive(&ctx.key("dlq"), &seqs, None, ctx.clock.now())
        .await
        .unwrap();
    let back = ctx
        .engine
        .receive(&ctx.key("src"), 10, 30, None, ctx.clock.now())
        .await
        .unwrap();
    let back: Vec<StoredMessage> = back.messages.into_iter().map(|r| r.message).collect();
    assert_eq!(back.len(), 3, "every message is back in its source");
    assert_eq!(payload_of(&back, "m-a"), Some(a.clone()));
    assert_eq!(payload_of(&back, "m-b"), Some(b.clone()));
    assert_eq!(payload_of(&back, "m-c"), None);
    assert_eq!(ctx.queue_bytes("src").await, a.size + b.size + inline);

    // FIFO queues keep the reference too.
    ctx.queue("f.fifo", QueueConfigPatch::default()).await;
    ctx.send_raw(
        "f.fifo",
        vec![NewMessage {
            group_id: Some("g".into()),
            deduplication_id: Some("d".into()),
            ..ctx.spilled("m-f", 3)
        }],
    )
    .await;
    let got = ctx
        .engine
        .receive(&ctx.key("f.fifo"), 10, 30, None, ctx.clock.now())
        .await
        .unwrap();
    assert_eq!(got.messages[0].message.payload, Some(ctx.payload(3)));

    // Copies of a publication: one key and size, enveloped = !raw, an empty `Message`.
    ctx.queue("raw", QueueConfigPatch::default()).await;
    ctx.queue("wrapped", QueueConfigPatch::default()).await;
    ctx.queue(
        "small",
        QueueConfigPatch {
            max_message_bytes: Some(1024),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    let big = PayloadRef {
        size: 5000,
        ..ctx.payload(4)
    };
    let publication = spilled_publication(
        big.clone(),
        vec![
            delivery("s-raw", "raw", true),
            delivery("s-env", "wrapped", false),
            delivery("s-small", "small", true),
        ],
    );
    let topic = TopicKey::new(ctx.tenant.clone(), QueueName::parse("big").unwrap());
    let answer = ctx
        .engine
        .publish(&topic, vec![publication.clone()], ctx.clock.now())
        .await
        .unwrap();
    assert_eq!(
        answer[0].outcomes,
        vec![
            ("s-raw".to_owned(), DeliveryOutcome::Delivered),
            ("s-env".to_owned(), DeliveryOutcome::Delivered),
            (
                "s-small".to_owned(),
                DeliveryOutcome::Failed(DeliveryFailure::TooLarge)
            ),
        ],
        "a copy's payload counts against max_message_bytes"
    );
    let raw = ctx.peek_engine("raw").await;
    assert_eq!(raw[0].body, "");
    assert_eq!(raw[0].payload, Some(big.clone()));
    let wrapped = ctx.peek_engine("wrapped").await;
    assert_eq!(
        wrapped[0].payload,
        Some(PayloadRef {
            enveloped: true,
            ..big.clone()
        })
    );
    let envelope: serde_json::Value = serde_json::from_str(&wrapped[0].body).unwrap();
    assert_eq!(envelope["Message"], "");
    assert_eq!(envelope["MessageId"], "pub-1");
    assert_eq!(ctx.queue_bytes("raw").await, big.size);
    assert_eq!(
        ctx.queue_bytes("wrapped").await,
        wrapped[0].body.len() as u64 + big.size
    );
}

/// Exactly one `Added` per committed message with a payload (sends, each copy of a
/// publication) and one `Released` per such message that leaves for good (delete, purge,
/// expiry, queue deletion, tenant deletion, a copy no queue took); nothing for moves, FIFO
/// duplicates (of sends and of publications), repeated deletes or messages without payload.
pub async fn payload_events_follow_adds_and_releases(ctx: Ctx) {
    let (s, t) = (&ctx.services, &ctx.tenant);
    ctx.queue("q", QueueConfigPatch::default()).await;
    assert_eq!(ctx.drain_events().await, vec![]);
    let p = |n| ctx.payload(n);

    // Sends: one Added each, none for the plain message.
    ctx.send_raw(
        "q",
        vec![
            ctx.spilled("m1", 1),
            ctx.spilled("m2", 2),
            ctx.plain("plain"),
        ],
    )
    .await;
    assert_eq!(
        ctx.drain_events().await,
        sorted(vec![added(&p(1), "m1"), added(&p(2), "m2")])
    );

    // Delete: one Released; deleting again, or a plain message, records nothing.
    let got = ctx
        .engine
        .receive(&ctx.key("q"), 10, 30, None, ctx.clock.now())
        .await
        .unwrap();
    for r in &got.messages {
        if r.message.message_id != "m2" {
            for _ in 0..2 {
                let answer = ctx
                    .engine
                    .delete(
                        &ctx.key("q"),
                        std::slice::from_ref(&r.receipt_handle),
                        ctx.clock.now(),
                    )
                    .await
                    .unwrap();
                assert_eq!(answer, vec![Ok(())]);
            }
        }
    }
    assert_eq!(ctx.drain_events().await, vec![released(&p(1), "m1")]);

    // Purge: the rest.
    s.purge_queue(t, "q").await.unwrap();
    assert_eq!(ctx.drain_events().await, vec![released(&p(2), "m2")]);

    // FIFO: a duplicate records nothing.
    ctx.queue("f.fifo", QueueConfigPatch::default()).await;
    let fifo = |id: &str, n| NewMessage {
        group_id: Some("g".into()),
        deduplication_id: Some("same".into()),
        ..ctx.spilled(id, n)
    };
    let sent = ctx.send_raw("f.fifo", vec![fifo("f1", 3)]).await;
    assert_eq!(sent, vec![("f1".to_owned(), false)]);
    let again = ctx.send_raw("f.fifo", vec![fifo("f2", 4)]).await;
    assert_eq!(again, vec![("f1".to_owned(), true)]);
    assert_eq!(ctx.drain_events().await, vec![added(&p(3), "f1")]);

    // Expiry.
    ctx.queue(
        "short",
        QueueConfigPatch {
            message_retention_seconds: Some(60),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.send_raw("short", vec![ctx.spilled("old", 5)]).await;
    assert_eq!(ctx.drain_events().await, vec![added(&p(5), "old")]);
    ctx.clock.advance(61 * SECOND);
    ctx.engine.expire(ctx.clock.now()).await.unwrap();
    assert_eq!(ctx.drain_events().await, vec![released(&p(5), "old")]);

    // Moves (automatic, on request, redrive) record nothing.
    ctx.queue("dlq", QueueConfigPatch::default()).await;
    ctx.queue("src", redrive_to("dlq")).await;
    ctx.send_raw("src", vec![ctx.spilled("d1", 6), ctx.spilled("d2", 7)])
        .await;
    let got = ctx
        .engine
        .receive(&ctx.key("src"), 10, 0, None, ctx.clock.now())
        .await
        .unwrap();
    let d1 = got
        .messages
        .iter()
        .find(|r| r.message.message_id == "d1")
        .unwrap();
    ctx.engine
        .dead_letter(&ctx.key("src"), &d1.receipt_handle, "bad", ctx.clock.now())
        .await
        .unwrap()
        .unwrap();
    let moved = ctx
        .engine
        .receive(&ctx.key("src"), 10, 30, None, ctx.clock.now())
        .await
        .unwrap();
    assert_eq!(moved.dead_lettered, 1);
    let seqs: Vec<u64> = ctx
        .peek_engine("dlq")
        .await
        .iter()
        .filter(|m| m.message_id == "d1")
        .map(|m| m.seq)
        .collect();
    ctx.engine
        .redrive(&ctx.key("dlq"), &seqs, None, ctx.clock.now())
        .await
        .unwrap();
    assert_eq!(
        ctx.drain_events().await,
        sorted(vec![added(&p(6), "d1"), added(&p(7), "d2")]),
        "only the sends: the moves record nothing"
    );

    // Queue deletion releases every payload message it held (d2 in the DLQ, d1 in src).
    // (Straight to the engine: the services refuse to delete a queue still named as a DLQ.)
    assert!(ctx.engine.delete_queue(&ctx.key("dlq")).await.unwrap());
    assert_eq!(ctx.drain_events().await, vec![released(&p(7), "d2")]);

    // A publication: one Added per copy at the publish; a copy no queue took is released.
    ctx.queue("a", QueueConfigPatch::default()).await;
    ctx.queue("b", QueueConfigPatch::default()).await;
    let shared = p(8);
    let publication = spilled_publication(
        shared.clone(),
        vec![
            delivery("s-a", "a", true),
            delivery("s-b", "b", false),
            delivery("s-gone", "missing", true),
        ],
    );
    let topic = TopicKey::new(t.clone(), QueueName::parse("big").unwrap());
    let answer = ctx
        .engine
        .publish(&topic, vec![publication], ctx.clock.now())
        .await
        .unwrap();
    assert_eq!(
        answer[0].outcomes[2].1,
        DeliveryOutcome::Failed(DeliveryFailure::QueueMissing)
    );
    assert_eq!(
        ctx.drain_events().await,
        sorted(vec![
            added(&shared, "copy-s-a"),
            added(&shared, "copy-s-b"),
            added(&shared, "copy-s-gone"),
            released(&shared, "copy-s-gone"),
        ])
    );

    // A FIFO topic's duplicate publication delivers nothing and records nothing.
    let fifo_topic = TopicKey::new(t.clone(), QueueName::parse("big.fifo").unwrap());
    let fifo_publication = Publication {
        message_id: "pub-f".into(),
        group_id: Some("g".into()),
        deduplication_id: Some("same-pub".into()),
        ..spilled_publication(p(9), vec![delivery("s-f", "f.fifo", true)])
    };
    for retry in [false, true] {
        let answer = ctx
            .engine
            .publish(&fifo_topic, vec![fifo_publication.clone()], ctx.clock.now())
            .await
            .unwrap();
        assert_eq!(answer[0].duplicate, retry);
    }
    assert_eq!(ctx.drain_events().await, vec![added(&p(9), "copy-s-f")]);

    // Tenant deletion releases what every queue held.
    ctx.engine.delete_tenant(t, ctx.clock.now()).await.unwrap();
    assert_eq!(
        ctx.drain_events().await,
        sorted(vec![
            released(&p(3), "f1"),
            released(&p(9), "copy-s-f"),
            released(&p(6), "d1"),
            released(&shared, "copy-s-a"),
            released(&shared, "copy-s-b"),
        ])
    );
}

/// Acknowledging forgets exactly the batch: twice is harmless, and two readers that read the
/// same events and both acknowledge drop nothing recorded after their reads.
pub async fn payload_event_acks_are_idempotent(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    ctx.send_raw("q", vec![ctx.spilled("m1", 1), ctx.spilled("m2", 2)])
        .await;
    let first = ctx.engine.payload_events(100).await.unwrap();
    let second = ctx.engine.payload_events(100).await.unwrap();
    assert_eq!(first.events.len(), 2);
    assert_eq!(second.events, first.events, "unacknowledged events stay");
    let limited = ctx.engine.payload_events(1).await.unwrap();
    assert!(!limited.events.is_empty() && limited.events.len() <= 2);

    ctx.send_raw("q", vec![ctx.spilled("m3", 3)]).await;
    ctx.engine.ack_payload_events(&first).await.unwrap();
    ctx.engine.ack_payload_events(&first).await.unwrap();
    ctx.engine.ack_payload_events(&second).await.unwrap();
    ctx.engine.ack_payload_events(&limited).await.unwrap();
    let rest = ctx.engine.payload_events(100).await.unwrap();
    assert_eq!(
        rest.events.into_iter().map(event_tuple).collect::<Vec<_>>(),
        vec![added(&ctx.payload(3), "m3")],
        "what was recorded after the reads survives every acknowledgement of them"
    );
    ctx.engine
        .ack_payload_events(&PayloadEventBatch::default())
        .await
        .unwrap();
    assert_eq!(ctx.drain_events().await.len(), 1);
    assert_eq!(ctx.drain_events().await, vec![]);
}
