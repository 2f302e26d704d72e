//! FIFO queue cases: send rules, deduplication, group order and locking, receive attempts.

use super::*;

fn fifo(body: &str, group: &str, dedup: &str) -> SendRequest {
    SendRequest {
        body: body.to_owned(),
        group_id: Some(group.to_owned()),
        deduplication_id: Some(dedup.to_owned()),
        ..SendRequest::default()
    }
}

impl Ctx {
    async fn fifo_queue(&self, name: &str, patch: QueueConfigPatch) {
        let (view, created) = self
            .services
            .put_queue(&self.tenant, name, patch)
            .await
            .unwrap();
        assert!(created);
        assert!(view.name.is_fifo());
    }

    async fn send_fifo(&self, queue: &str, body: &str, group: &str) -> sluice_services::SendResult {
        self.services
            .send(&self.tenant, queue, fifo(body, group, body))
            .await
            .unwrap()
    }
}

/// FIFO sends need a group id and a deduplication id (unless content-based), refuse their
/// own delays, and get strictly increasing sequence numbers.
pub async fn fifo_send_rules_and_sequence_numbers(ctx: Ctx) {
    ctx.fifo_queue("q.fifo", QueueConfigPatch::default()).await;
    let s = &ctx.services;
    let t = &ctx.tenant;
    let no_group = SendRequest {
        deduplication_id: Some("d".into()),
        ..text("x")
    };
    assert_eq!(field_of(s.send(t, "q.fifo", no_group).await), "group_id");
    let no_dedup = SendRequest {
        group_id: Some("g".into()),
        ..text("x")
    };
    assert_eq!(
        field_of(s.send(t, "q.fifo", no_dedup).await),
        "deduplication_id"
    );
    let delayed = SendRequest {
        delay_seconds: Some(5),
        ..fifo("x", "g", "d")
    };
    assert_eq!(
        field_of(s.send(t, "q.fifo", delayed).await),
        "delay_seconds"
    );
    let scheduled = SendRequest {
        deliver_at: Some(chrono_free_rfc3339(crate::START as i64 + 60_000)),
        ..fifo("x", "g", "d")
    };
    assert_eq!(field_of(s.send(t, "q.fifo", scheduled).await), "deliver_at");
    assert_eq!(
        ctx.stats("q.fifo").await,
        (0, 0, 0),
        "refused sends change nothing"
    );

    let mut last: Option<u128> = None;
    for i in 0..5 {
        let sent = ctx
            .send_fifo(
                "q.fifo",
                &format!("m{i}"),
                if i % 2 == 0 { "a" } else { "b" },
            )
            .await;
        assert!(!sent.duplicate);
        let sequence = sent
            .sequence_number
            .expect("FIFO sends have sequence numbers");
        assert!(sequence.chars().all(|c| c.is_ascii_digit()), "{sequence}");
        let n: u128 = sequence.parse().unwrap();
        assert!(last.is_none_or(|l| n > l), "strictly increasing");
        last = Some(n);
    }
    let got = ctx.receive("q.fifo", 10, 30).await;
    assert!(got
        .iter()
        .all(|m| m.sequence_number.is_some() && m.deduplication_id.is_some()));

    // A queue-level delay is allowed and holds every message back.
    ctx.fifo_queue(
        "slow.fifo",
        QueueConfigPatch {
            delay_seconds: Some(5),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.send_fifo("slow.fifo", "late", "g").await;
    assert!(ctx.receive("slow.fifo", 10, 30).await.is_empty());
    ctx.clock.advance(5 * SECOND);
    assert_eq!(bodies(&ctx.receive("slow.fifo", 10, 30).await), ["late"]);
}

/// A deduplication id seen in the last five minutes answers the original message and enqueues
/// nothing, also after the original was deleted; after five minutes it is new again.
pub async fn fifo_deduplication_window(ctx: Ctx) {
    ctx.fifo_queue("q.fifo", QueueConfigPatch::default()).await;
    let s = &ctx.services;
    let t = &ctx.tenant;
    let first = s.send(t, "q.fifo", fifo("one", "g", "id-1")).await.unwrap();
    ctx.clock.advance(60 * SECOND);
    let again = s
        .send(t, "q.fifo", fifo("one again", "g", "id-1"))
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.message_id, first.message_id);
    assert_eq!(again.sequence_number, first.sequence_number);
    assert_eq!(ctx.stats("q.fifo").await, (1, 0, 0));

    let got = ctx.receive("q.fifo", 10, 30).await;
    assert_eq!(bodies(&got), ["one"]);
    ctx.services
        .delete_message(t, "q.fifo", &handle(&got[0]))
        .await
        .unwrap();
    let after_delete = s.send(t, "q.fifo", fifo("one", "g", "id-1")).await.unwrap();
    assert!(
        after_delete.duplicate,
        "still a duplicate after the original was deleted"
    );
    assert_eq!(ctx.stats("q.fifo").await, (0, 0, 0));

    // Five minutes after the first acceptance the id is new again.
    ctx.clock.advance(4 * 60 * SECOND - 1);
    assert!(
        s.send(t, "q.fifo", fifo("x", "g", "id-1"))
            .await
            .unwrap()
            .duplicate
    );
    ctx.clock.advance(1);
    let fresh = s
        .send(t, "q.fifo", fifo("fresh", "g", "id-1"))
        .await
        .unwrap();
    assert!(!fresh.duplicate);
    assert_ne!(fresh.message_id, first.message_id);

    // Two entries of one batch with one id make one message.
    let batch = s
        .send_batch(
            t,
            "q.fifo",
            vec![
                SendEntry {
                    id: "a".into(),
                    message: fifo("b1", "g", "batch-id"),
                },
                SendEntry {
                    id: "b".into(),
                    message: fifo("b2", "g", "batch-id"),
                },
            ],
        )
        .await
        .unwrap();
    assert_eq!(batch.successful.len(), 2);
    let (first_entry, second_entry) = (&batch.successful[0].1, &batch.successful[1].1);
    assert!(!first_entry.duplicate && second_entry.duplicate);
    assert_eq!(first_entry.message_id, second_entry.message_id);
    assert_eq!(
        bodies(&ctx.receive("q.fifo", 10, 30).await),
        ["b1", "fresh"]
    );
}

/// Deduplication scopes: per queue by default, per message group when configured; content-based
/// deduplication uses the body.
pub async fn fifo_deduplication_scope_and_content(ctx: Ctx) {
    ctx.fifo_queue("queue-scope.fifo", QueueConfigPatch::default())
        .await;
    ctx.fifo_queue(
        "group-scope.fifo",
        QueueConfigPatch {
            deduplication_scope: Some("message_group".into()),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    let s = &ctx.services;
    let t = &ctx.tenant;
    for queue in ["queue-scope.fifo", "group-scope.fifo"] {
        s.send(t, queue, fifo("in a", "a", "same")).await.unwrap();
        s.send(t, queue, fifo("in b", "b", "same")).await.unwrap();
    }
    assert_eq!(ctx.stats("queue-scope.fifo").await.0, 1);
    assert_eq!(ctx.stats("group-scope.fifo").await.0, 2);
    let view = s.get_queue(t, "group-scope.fifo").await.unwrap();
    assert_eq!(
        view.config.deduplication_scope,
        sluice_engine::DeduplicationScope::MessageGroup
    );

    ctx.fifo_queue(
        "content.fifo",
        QueueConfigPatch {
            content_based_deduplication: Some(true),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    let by_body = |body: &str| SendRequest {
        group_id: Some("g".into()),
        ..text(body)
    };
    let first = s
        .send(t, "content.fifo", by_body("same body"))
        .await
        .unwrap();
    let second = s
        .send(t, "content.fifo", by_body("same body"))
        .await
        .unwrap();
    let other = s
        .send(t, "content.fifo", by_body("other body"))
        .await
        .unwrap();
    assert!(!first.duplicate && second.duplicate && !other.duplicate);
    assert_eq!(second.message_id, first.message_id);
    let got = ctx.receive("content.fifo", 10, 30).await;
    let sha256_of_body = hex::encode(sha2::Sha256::digest(b"same body"));
    assert_eq!(
        got[0].deduplication_id.as_deref(),
        Some(sha256_of_body.as_str())
    );
    // An explicit id still wins over the body.
    let explicit = s
        .send(
            t,
            "content.fifo",
            SendRequest {
                deduplication_id: Some("x".into()),
                ..by_body("same body")
            },
        )
        .await
        .unwrap();
    assert!(!explicit.duplicate);
}

/// Within a group, messages come in send order; a group with a message in flight delivers
/// nothing more until it is deleted or visible again (and then it comes first); other groups
/// proceed meanwhile.
pub async fn fifo_group_order_and_locking(ctx: Ctx) {
    ctx.fifo_queue("q.fifo", QueueConfigPatch::default()).await;
    for body in ["a1", "a2", "a3"] {
        ctx.send_fifo("q.fifo", body, "a").await;
    }
    ctx.send_fifo("q.fifo", "b1", "b").await;

    let first = ctx.receive("q.fifo", 1, 30).await;
    assert_eq!(bodies(&first), ["a1"]);
    let second = ctx.receive("q.fifo", 1, 30).await;
    assert_eq!(
        bodies(&second),
        ["b1"],
        "group a is locked while a1 is in flight"
    );
    assert!(
        ctx.receive("q.fifo", 10, 30).await.is_empty(),
        "both groups are locked"
    );

    ctx.services
        .delete_message(&ctx.tenant, "q.fifo", &handle(&first[0]))
        .await
        .unwrap();
    let next = ctx.receive("q.fifo", 1, 30).await;
    assert_eq!(bodies(&next), ["a2"]);
    // a2's visibility ends: it comes again, before a3.
    ctx.clock.advance(30 * SECOND);
    let again = ctx.receive("q.fifo", 1, 30).await;
    assert_eq!(bodies(&again), ["a2"]);
    assert_eq!(again[0].receive_count, 2);
    // Changing visibility to 0 releases the group at once.
    ctx.services
        .change_visibility(&ctx.tenant, "q.fifo", &handle(&again[0]), 0)
        .await
        .unwrap();
    let after_release = ctx.receive("q.fifo", 10, 30).await;
    let order: Vec<&str> = after_release.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(
        order[..2],
        ["a2", "a3"],
        "one receive returns a group's messages in order"
    );
    // b1 was still in flight until its timeout, which passed with the clock advance above.
    assert!(order.contains(&"b1"));
}

/// One receive returns several messages of a group in order, groups oldest head first; and a
/// message's group is served before later messages of a busier group.
pub async fn fifo_groups_are_served_oldest_head_first(ctx: Ctx) {
    ctx.fifo_queue("q.fifo", QueueConfigPatch::default()).await;
    // A busy group sends before and after a quiet one.
    for i in 0..5 {
        ctx.send_fifo("q.fifo", &format!("busy-{i}"), "busy").await;
    }
    ctx.send_fifo("q.fifo", "quiet-0", "quiet").await;
    for i in 5..10 {
        ctx.send_fifo("q.fifo", &format!("busy-{i}"), "busy").await;
    }
    // A consumer taking one message at a time and deleting it at once.
    let mut order = Vec::new();
    for _ in 0..11 {
        let got = ctx.receive("q.fifo", 1, 30).await;
        assert_eq!(got.len(), 1);
        order.push(got[0].body.clone());
        ctx.services
            .delete_message(&ctx.tenant, "q.fifo", &handle(&got[0]))
            .await
            .unwrap();
    }
    let quiet_at = order.iter().position(|b| b == "quiet-0").unwrap();
    assert_eq!(
        quiet_at, 5,
        "the quiet group is served before busy messages sent after it: {order:?}"
    );
    let busy: Vec<&String> = order.iter().filter(|b| b.starts_with("busy")).collect();
    let expected: Vec<String> = (0..10).map(|i| format!("busy-{i}")).collect();
    assert_eq!(busy, expected.iter().collect::<Vec<_>>());

    // Batches: heads ordered by age, each group's run in order.
    for (body, group) in [("x1", "x"), ("y1", "y"), ("x2", "x"), ("y2", "y")] {
        ctx.send_fifo("q.fifo", body, group).await;
    }
    let got = ctx.receive("q.fifo", 10, 30).await;
    let got: Vec<&str> = got.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(got, ["x1", "x2", "y1", "y2"]);
}

/// A receive retried with the same `request_attempt_id` answers the same messages with the same
/// receipt handles.
pub async fn fifo_receive_attempt_id_returns_the_same_answer(ctx: Ctx) {
    ctx.fifo_queue("q.fifo", QueueConfigPatch::default()).await;
    ctx.send_fifo("q.fifo", "a1", "a").await;
    ctx.send_fifo("q.fifo", "b1", "b").await;
    let attempt = |id: &str| ReceiveRequest {
        max_messages: Some(1),
        visibility_timeout_seconds: Some(30),
        wait_seconds: Some(0),
        request_attempt_id: Some(id.to_owned()),
    };
    let first = ctx
        .services
        .receive(&ctx.tenant, "q.fifo", attempt("try-1"))
        .await
        .unwrap();
    assert_eq!(bodies(&first), ["a1"]);
    ctx.clock.advance(2 * SECOND);
    let retried = ctx
        .services
        .receive(&ctx.tenant, "q.fifo", attempt("try-1"))
        .await
        .unwrap();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].message_id, first[0].message_id);
    assert_eq!(retried[0].receipt_handle, first[0].receipt_handle);
    assert_eq!(retried[0].receive_count, 1, "a retry is not a new delivery");
    let other = ctx
        .services
        .receive(&ctx.tenant, "q.fifo", attempt("try-2"))
        .await
        .unwrap();
    assert_eq!(bodies(&other), ["b1"]);
    ctx.services
        .delete_message(&ctx.tenant, "q.fifo", &handle(&first[0]))
        .await
        .unwrap();
}
