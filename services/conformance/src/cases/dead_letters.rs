//! Dead-letter cases: the move after `max_receive_count` receives, the move on a consumer's
//! word, redrive back out of a dead-letter queue, retry backoff, and the policy rules.

use super::*;
use crate::START;
use sluice_engine::{DeadLetter, RedriveOutcome};
use sluice_services::{RedriveAllowPolicyInput, RedrivePolicyInput, RetryBackoffInput};

fn redrive_to(dlq: &str, max_receive_count: u32) -> QueueConfigPatch {
    QueueConfigPatch {
        redrive_policy: Some(Some(RedrivePolicyInput {
            dead_letter_queue: dlq.to_owned(),
            max_receive_count,
        })),
        ..QueueConfigPatch::default()
    }
}

fn no_redrive_policy() -> QueueConfigPatch {
    QueueConfigPatch {
        redrive_policy: Some(None),
        ..QueueConfigPatch::default()
    }
}

fn with_attribute(body: &str) -> SendRequest {
    SendRequest {
        body: body.to_owned(),
        attributes: BTreeMap::from([(
            "kind".to_owned(),
            MessageAttribute {
                data_type: "String".into(),
                value: "order".into(),
            },
        )]),
        ..SendRequest::default()
    }
}

impl Ctx {
    pub(super) fn key(&self, queue: &str) -> QueueKey {
        QueueKey::new(self.tenant.clone(), QueueName::parse(queue).unwrap())
    }

    pub(super) async fn peek_all(&self, queue: &str) -> Vec<MessageView> {
        let mut all = Vec::new();
        for state in [
            MessageState::Visible,
            MessageState::InFlight,
            MessageState::Delayed,
        ] {
            all.extend(
                self.services
                    .peek(&self.tenant, queue, state, Some(100))
                    .await
                    .unwrap(),
            );
        }
        all
    }
}

/// A message received `max_receive_count` times and not deleted is moved to the DLQ by the
/// next receive, keeping its id, body, attributes and `sent_at` (standard), with its count
/// reset and a `dead_letter` record.
pub async fn receives_past_max_receive_count_move_to_the_dead_letter_queue(ctx: Ctx) {
    ctx.queue("dlq", QueueConfigPatch::default()).await;
    ctx.queue("src", redrive_to("dlq", 2)).await;
    let sent = ctx
        .services
        .send(&ctx.tenant, "src", with_attribute("m"))
        .await
        .unwrap();
    ctx.clock.advance(SECOND);
    for expected_count in 1..=2 {
        let got = ctx.receive("src", 1, 0).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].receive_count, expected_count);
    }
    ctx.clock.advance(SECOND);
    let moved_at = ctx.clock.now();
    let outcome = ctx
        .engine
        .receive(&ctx.key("src"), 1, 0, None, moved_at)
        .await
        .unwrap();
    assert!(outcome.messages.is_empty(), "the third receive moves it");
    assert_eq!(outcome.dead_lettered, 1);
    assert_eq!(ctx.stats("src").await, (0, 0, 0));
    assert!(ctx.receive("src", 10, 0).await.is_empty());

    let in_dlq = ctx.peek_all("dlq").await;
    assert_eq!(in_dlq.len(), 1, "exactly one copy, in the DLQ");
    let m = &in_dlq[0];
    assert_eq!(m.message_id, sent.message_id);
    assert_eq!(m.body, "m");
    assert_eq!(m.md5_of_attributes, sent.md5_of_attributes);
    assert_eq!(m.sent_at, START, "a standard DLQ keeps sent_at");
    assert_eq!(m.receive_count, 0);
    assert_eq!(
        m.dead_letter,
        Some(DeadLetter {
            source_queue: QueueName::parse("src").unwrap(),
            reason: DeadLetter::MAX_RECEIVE_COUNT_EXCEEDED.into(),
            receive_count: 2,
            moved_at,
        })
    );
    let again = ctx.receive("dlq", 1, 30).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].receive_count, 1);
    assert!(again[0].dead_letter.is_some());
}

/// Moves take no notice of the DLQ's `max_depth` (losing dead letters would be worse); a
/// policy whose DLQ is gone leaves messages where they are, delivered as usual; a queue named
/// as another's DLQ cannot be deleted until the policy goes.
pub async fn dead_letter_queue_full_missing_or_still_referenced(ctx: Ctx) {
    ctx.queue(
        "dlq",
        QueueConfigPatch {
            max_depth: Some(Some(1)),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.send("dlq", "already there").await;
    ctx.queue("src", redrive_to("dlq", 1)).await;
    ctx.send("src", "m").await;
    assert_eq!(ctx.receive("src", 1, 0).await.len(), 1);
    assert!(ctx.receive("src", 1, 0).await.is_empty());
    assert_eq!(
        ctx.stats("dlq").await,
        (2, 0, 0),
        "a full DLQ still takes it"
    );

    match ctx.services.delete_queue(&ctx.tenant, "dlq").await {
        Err(ServiceError::Conflict(message)) => assert!(message.contains("src"), "{message}"),
        other => panic!("deleting a DLQ in use must conflict, got {other:?}"),
    }
    assert_eq!(ctx.stats("dlq").await, (2, 0, 0), "nothing was deleted");

    // The DLQ vanishes under the policy (the engine alone does not refuse it).
    assert!(ctx.engine.delete_queue(&ctx.key("dlq")).await.unwrap());
    ctx.send("src", "n").await;
    let mut deliveries = 0;
    for _ in 0..10 {
        deliveries += ctx.receive("src", 1, 0).await.len();
        assert_eq!(ctx.stats("src").await, (1, 0, 0), "never lost");
    }
    assert!(
        deliveries >= 9,
        "no DLQ: delivered as usual (at most one receive leaves it out), got {deliveries}"
    );

    ctx.services
        .patch_queue(&ctx.tenant, "src", no_redrive_policy())
        .await
        .unwrap();
    ctx.queue("dlq2", QueueConfigPatch::default()).await;
    ctx.services
        .patch_queue(&ctx.tenant, "src", redrive_to("dlq2", 5))
        .await
        .unwrap();
    ctx.services
        .patch_queue(&ctx.tenant, "src", no_redrive_policy())
        .await
        .unwrap();
    ctx.services
        .delete_queue(&ctx.tenant, "dlq2")
        .await
        .expect("once no policy names it, a DLQ can be deleted");
}

/// A consumer may move a message it received to the DLQ at once, with its own reason; the
/// handle rules are those of a delete, and a queue without a policy refuses.
pub async fn dead_letter_on_request_moves_at_once(ctx: Ctx) {
    let t = &ctx.tenant;
    let s = &ctx.services;
    ctx.queue("plain", QueueConfigPatch::default()).await;
    ctx.send("plain", "p").await;
    let plain = handle(&ctx.receive("plain", 1, 30).await[0]);
    assert!(matches!(
        s.dead_letter_message(t, "plain", &plain, "bad").await,
        Err(ServiceError::Conflict(_))
    ));
    assert_eq!(ctx.stats("plain").await, (0, 1, 0), "nothing moved");

    ctx.queue("dlq", QueueConfigPatch::default()).await;
    ctx.queue("src", redrive_to("dlq", 5)).await;
    ctx.send("src", "m").await;
    let h = handle(&ctx.receive("src", 1, 30).await[0]);
    assert_eq!(
        field_of(s.dead_letter_message(t, "src", &h, "").await),
        "reason"
    );
    assert_eq!(
        field_of(s.dead_letter_message(t, "src", &h, &"x".repeat(257)).await),
        "reason"
    );
    assert_eq!(
        s.dead_letter_message(t, "src", "garbage", "bad").await,
        Err(ServiceError::ReceiptHandleInvalid)
    );
    assert_eq!(ctx.stats("src").await, (0, 1, 0), "bad input moved nothing");

    ctx.clock.advance(SECOND);
    s.dead_letter_message(t, "src", &h, "cannot parse the payload")
        .await
        .unwrap();
    assert_eq!(ctx.stats("src").await, (0, 0, 0));
    let in_dlq = ctx.peek_all("dlq").await;
    assert_eq!(in_dlq.len(), 1);
    assert_eq!(
        in_dlq[0].dead_letter,
        Some(DeadLetter {
            source_queue: QueueName::parse("src").unwrap(),
            reason: "cannot parse the payload".into(),
            receive_count: 1,
            moved_at: ctx.clock.now(),
        })
    );
    assert_eq!(
        s.dead_letter_message(t, "src", &h, "again").await,
        Err(ServiceError::ReceiptHandleStale),
        "the message is gone from the source"
    );

    ctx.send("src", "n").await;
    let first = handle(&ctx.receive("src", 1, 0).await[0]);
    let _second = handle(&ctx.receive("src", 1, 0).await[0]);
    assert_eq!(
        s.dead_letter_message(t, "src", &first, "late").await,
        Err(ServiceError::ReceiptHandleStale),
        "an earlier delivery's handle"
    );
    assert_eq!(ctx.stats("dlq").await, (1, 0, 0));
}

/// FIFO: messages moved from one group keep their order in a FIFO DLQ, get new sequence
/// numbers there, keep their group and deduplication ids, and never meet deduplication.
pub async fn fifo_dead_letters_keep_group_order(ctx: Ctx) {
    ctx.queue("dlq.fifo", QueueConfigPatch::default()).await;
    ctx.queue("src.fifo", redrive_to("dlq.fifo", 1)).await;
    let fifo = |body: &str, group: &str| SendRequest {
        body: body.to_owned(),
        group_id: Some(group.to_owned()),
        deduplication_id: Some(format!("d-{body}")),
        ..SendRequest::default()
    };
    // Its deduplication id equals a1's: the move must not be taken for a duplicate.
    ctx.services
        .send(&ctx.tenant, "dlq.fifo", fifo("a1", "other"))
        .await
        .unwrap();
    for (body, group) in [("a1", "g"), ("a2", "g"), ("b1", "h"), ("a3", "g")] {
        ctx.services
            .send(&ctx.tenant, "src.fifo", fifo(body, group))
            .await
            .unwrap();
    }
    // Receive with no visibility timeout and never delete: each message is delivered once,
    // then moved by a later receive.
    let mut delivered = Vec::new();
    for _ in 0..20 {
        if ctx.stats("src.fifo").await == (0, 0, 0) {
            break;
        }
        for m in ctx.receive("src.fifo", 10, 0).await {
            assert_eq!(
                m.receive_count, 1,
                "{} is delivered once, then moved",
                m.body
            );
            delivered.push(m.body);
        }
    }
    assert_eq!(ctx.stats("src.fifo").await, (0, 0, 0));
    assert_eq!(delivered.len(), 4);

    let in_dlq = ctx.receive("dlq.fifo", 10, 30).await;
    assert_eq!(in_dlq.len(), 5, "{:?}", bodies(&in_dlq));
    let group_g: Vec<&MessageView> = in_dlq
        .iter()
        .filter(|m| m.group_id.as_deref() == Some("g"))
        .collect();
    let order: Vec<&str> = group_g.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(order, ["a1", "a2", "a3"], "group order kept in the DLQ");
    let seqs: Vec<u128> = group_g
        .iter()
        .map(|m| m.sequence_number.as_deref().unwrap().parse().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    for m in &group_g {
        assert_eq!(
            m.deduplication_id.as_deref(),
            Some(&*format!("d-{}", m.body))
        );
        let dead = m.dead_letter.as_ref().unwrap();
        assert_eq!(dead.source_queue.as_str(), "src.fifo");
        assert_eq!(dead.reason, DeadLetter::MAX_RECEIVE_COUNT_EXCEEDED);
        assert_eq!(
            m.sent_at, dead.moved_at,
            "a FIFO DLQ restarts retention at the move"
        );
    }
}

/// Redrive moves messages out of a DLQ: back to their source (or to a named queue), with their
/// id, a receive count of 0 and no `dead_letter`; a message with nowhere to go stays.
pub async fn redrive_moves_dead_letters_back(ctx: Ctx) {
    let t = &ctx.tenant;
    ctx.queue("dlq", QueueConfigPatch::default()).await;
    ctx.queue("src", redrive_to("dlq", 5)).await;
    ctx.queue("gone", redrive_to("dlq", 5)).await;
    ctx.queue("other", QueueConfigPatch::default()).await;
    for (queue, body) in [("src", "m1"), ("src", "m2"), ("gone", "m3")] {
        ctx.send(queue, body).await;
        let h = handle(&ctx.receive(queue, 1, 30).await[0]);
        ctx.services
            .dead_letter_message(t, queue, &h, "test")
            .await
            .unwrap();
    }
    ctx.send("dlq", "sent directly").await;
    ctx.services.delete_queue(t, "gone").await.unwrap();
    let by_body: BTreeMap<String, (u64, String)> = ctx
        .engine
        .peek(&ctx.key("dlq"), MessageState::Visible, 100, ctx.clock.now())
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.body, (m.seq, m.message_id)))
        .collect();
    assert_eq!(by_body.len(), 4);
    let seq = |body: &str| by_body[body].0;

    let dlq = ctx.key("dlq");
    let now = ctx.clock.now();
    let outcomes = ctx
        .engine
        .redrive(
            &dlq,
            &[seq("m1"), seq("m3"), seq("sent directly")],
            None,
            now,
        )
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        [
            RedriveOutcome::Moved,
            RedriveOutcome::DestinationMissing,
            RedriveOutcome::DestinationMissing
        ]
    );
    let back = ctx.peek_all("src").await;
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].body, "m1");
    assert_eq!(back[0].message_id, by_body["m1"].1);
    assert_eq!(back[0].receive_count, 0);
    assert_eq!(back[0].dead_letter, None);
    assert_eq!(ctx.receive("src", 1, 30).await.len(), 1, "visible at once");

    let named = QueueName::parse("other").unwrap();
    let missing = QueueName::parse("nowhere").unwrap();
    assert_eq!(
        ctx.engine
            .redrive(&dlq, &[seq("m2"), seq("m1")], Some(&named), now)
            .await
            .unwrap(),
        [RedriveOutcome::Moved, RedriveOutcome::Gone]
    );
    assert_eq!(
        ctx.engine
            .redrive(&dlq, &[seq("m3")], Some(&missing), now)
            .await
            .unwrap(),
        [RedriveOutcome::DestinationMissing]
    );
    assert_eq!(bodies(&ctx.peek_all("other").await), ["m2"]);
    assert_eq!(
        bodies(&ctx.peek_all("dlq").await),
        ["m3", "sent directly"],
        "what could not move stayed"
    );
}

/// Retry backoff adds min(max, base × 2^(k−2)) to the visibility timeout of the k-th delivery
/// (k ≥ 2), drawn from its upper half with jitter; a change of visibility sets the time asked.
pub async fn retry_backoff_spaces_redeliveries(ctx: Ctx) {
    let backoff = |base_seconds: u32, max_seconds: u32, jitter: bool| QueueConfigPatch {
        retry_backoff: Some(Some(RetryBackoffInput {
            base_seconds,
            max_seconds: Some(max_seconds),
            jitter: Some(jitter),
        })),
        ..QueueConfigPatch::default()
    };
    ctx.queue("steady", backoff(20, 50, false)).await;
    ctx.send("steady", "m").await;
    // Hidden for 10 s + b(k): b = 0, 20, 40, 50 (capped).
    for hidden_seconds in [10, 30, 50, 60] {
        assert_eq!(ctx.receive("steady", 1, 10).await.len(), 1);
        ctx.clock.advance(hidden_seconds * SECOND - 1);
        assert!(
            ctx.receive("steady", 1, 10).await.is_empty(),
            "still hidden just before {hidden_seconds} s"
        );
        ctx.clock.advance(1);
    }
    let h = handle(&ctx.receive("steady", 1, 10).await[0]);
    ctx.services
        .change_visibility(&ctx.tenant, "steady", &h, 5)
        .await
        .unwrap();
    ctx.clock.advance(5 * SECOND);
    assert_eq!(
        ctx.receive("steady", 1, 10).await.len(),
        1,
        "a change of visibility is exact"
    );

    ctx.queue("jittered", backoff(100, 100, true)).await;
    ctx.send("jittered", "j").await;
    assert_eq!(ctx.receive("jittered", 1, 10).await.len(), 1);
    ctx.clock.advance(10 * SECOND);
    assert_eq!(ctx.receive("jittered", 1, 10).await.len(), 1);
    // The second delivery hides it for 10 s + [50 s, 100 s].
    ctx.clock.advance(60 * SECOND - 1);
    assert!(ctx.receive("jittered", 1, 10).await.is_empty());
    ctx.clock.advance(50 * SECOND + 1);
    assert_eq!(ctx.receive("jittered", 1, 10).await.len(), 1);
}

/// Every invalid policy is a validation error naming its field and changes nothing; valid ones
/// read back as set.
pub async fn redrive_policies_are_validated(ctx: Ctx) {
    let t = &ctx.tenant;
    let s = &ctx.services;
    ctx.queue("dlq", QueueConfigPatch::default()).await;
    ctx.queue("dlq.fifo", QueueConfigPatch::default()).await;
    ctx.queue(
        "closed",
        QueueConfigPatch {
            redrive_allow_policy: Some(Some(RedriveAllowPolicyInput {
                permission: "deny_all".into(),
                source_queues: None,
            })),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.queue(
        "picky",
        QueueConfigPatch {
            redrive_allow_policy: Some(Some(RedriveAllowPolicyInput {
                permission: "by_queue".into(),
                source_queues: Some(vec!["chosen".into()]),
            })),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    let allow = |permission: &str, sources: Option<Vec<&str>>| QueueConfigPatch {
        redrive_allow_policy: Some(Some(RedriveAllowPolicyInput {
            permission: permission.into(),
            source_queues: sources.map(|v| v.into_iter().map(str::to_owned).collect()),
        })),
        ..QueueConfigPatch::default()
    };
    let backoff = |base: u32, max: Option<u32>| QueueConfigPatch {
        retry_backoff: Some(Some(RetryBackoffInput {
            base_seconds: base,
            max_seconds: max,
            jitter: None,
        })),
        ..QueueConfigPatch::default()
    };
    let eleven: Vec<String> = (0..11).map(|i| format!("q{i}")).collect();
    let cases: Vec<(&str, QueueConfigPatch, &str)> = vec![
        (
            "q",
            redrive_to("dlq", 0),
            "redrive_policy.max_receive_count",
        ),
        (
            "q",
            redrive_to("dlq", 1001),
            "redrive_policy.max_receive_count",
        ),
        (
            "q",
            redrive_to("bad name!", 3),
            "redrive_policy.dead_letter_queue",
        ),
        (
            "q",
            redrive_to("missing", 3),
            "redrive_policy.dead_letter_queue",
        ),
        ("q", redrive_to("q", 3), "redrive_policy.dead_letter_queue"),
        (
            "q",
            redrive_to("dlq.fifo", 3),
            "redrive_policy.dead_letter_queue",
        ),
        (
            "q.fifo",
            redrive_to("dlq", 3),
            "redrive_policy.dead_letter_queue",
        ),
        (
            "q",
            redrive_to("closed", 3),
            "redrive_policy.dead_letter_queue",
        ),
        (
            "q",
            redrive_to("picky", 3),
            "redrive_policy.dead_letter_queue",
        ),
        ("q", allow("some", None), "redrive_allow_policy.permission"),
        (
            "q",
            allow("by_queue", None),
            "redrive_allow_policy.source_queues",
        ),
        (
            "q",
            allow("by_queue", Some(vec![])),
            "redrive_allow_policy.source_queues",
        ),
        (
            "q",
            allow(
                "by_queue",
                Some(eleven.iter().map(String::as_str).collect()),
            ),
            "redrive_allow_policy.source_queues",
        ),
        (
            "q",
            allow("allow_all", Some(vec!["a"])),
            "redrive_allow_policy.source_queues",
        ),
        (
            "q",
            allow("by_queue", Some(vec!["no way"])),
            "redrive_allow_policy.source_queues[0]",
        ),
        ("q", backoff(0, Some(10)), "retry_backoff.base_seconds"),
        (
            "q",
            backoff(43_201, Some(43_201)),
            "retry_backoff.base_seconds",
        ),
        ("q", backoff(10, None), "retry_backoff.max_seconds"),
        ("q", backoff(10, Some(9)), "retry_backoff.max_seconds"),
        ("q", backoff(10, Some(43_201)), "retry_backoff.max_seconds"),
    ];
    for (queue, patch, field) in cases {
        assert_eq!(field_of(s.put_queue(t, queue, patch.clone()).await), field);
        assert_eq!(
            s.get_queue(t, queue).await,
            Err(ServiceError::QueueNotFound),
            "a refused PUT creates nothing"
        );
        if queue == "q" {
            ctx.queue("existing", QueueConfigPatch::default()).await;
            let before = s.get_queue(t, "existing").await.unwrap().config;
            assert_eq!(field_of(s.patch_queue(t, "existing", patch).await), field);
            assert_eq!(s.get_queue(t, "existing").await.unwrap().config, before);
            assert!(ctx.engine.delete_queue(&ctx.key("existing")).await.unwrap());
        }
    }

    // Valid policies read back as set.
    let (chosen, _) = s
        .put_queue(t, "chosen", redrive_to("picky", 7))
        .await
        .unwrap();
    let policy = chosen.config.redrive_policy.unwrap();
    assert_eq!(policy.dead_letter_queue.as_str(), "picky");
    assert_eq!(policy.max_receive_count, 7);
    let (with_backoff, _) = s.put_queue(t, "b", backoff(3, Some(30))).await.unwrap();
    assert_eq!(
        with_backoff.config.retry_backoff,
        Some(sluice_engine::RetryBackoff {
            base_seconds: 3,
            max_seconds: 30,
            jitter: true
        })
    );
    assert_eq!(
        s.get_queue(t, "picky")
            .await
            .unwrap()
            .config
            .redrive_allow_policy,
        Some(sluice_engine::RedriveAllowPolicy::ByQueue(vec![
            QueueName::parse("chosen").unwrap()
        ]))
    );
}

/// A message moved into a standard DLQ keeps its `sent_at`, so the DLQ's retention counts from
/// the original send: the expiry sweep removes it then, even though the DLQ was swept (empty)
/// just before the move.
pub async fn dead_letters_expire_from_their_original_send(ctx: Ctx) {
    ctx.queue(
        "dlq",
        QueueConfigPatch {
            message_retention_seconds: Some(60),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.queue("src", redrive_to("dlq", 5)).await;
    ctx.send("src", "old").await;
    ctx.clock.advance(SECOND);
    ctx.engine.expire(ctx.clock.now()).await.unwrap();
    ctx.clock.advance(9 * SECOND);
    let h = handle(&ctx.receive("src", 1, 30).await[0]);
    ctx.services
        .dead_letter_message(&ctx.tenant, "src", &h, "test")
        .await
        .unwrap();
    assert_eq!(ctx.stats("dlq").await, (1, 0, 0));
    // 60 s after the original send (and 50 s after the move) its retention in the DLQ ends.
    ctx.clock.advance(50 * SECOND);
    assert_eq!(ctx.engine.expire(ctx.clock.now()).await.unwrap(), 1);
    assert_eq!(ctx.stats("dlq").await, (0, 0, 0));
    assert!(ctx.peek_all("dlq").await.is_empty());
}
