//! Message cases ([`Messages`](sluice_engine::Messages)) on standard queues: send, receive, delete, visibility, handles, delays, purge, long polls, peeks and batches.

use super::*;

/// Sent messages are received with their body, digests and attributes, and deleted for good.
pub async fn send_receive_delete(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    let mut attributes = BTreeMap::new();
    attributes.insert(
        "kind".to_owned(),
        MessageAttribute {
            data_type: "String".into(),
            value: "order".into(),
        },
    );
    let sent = ctx
        .services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                body: "one".into(),
                attributes: attributes.clone(),
                ..SendRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(sent.md5_of_body, "f97c5d29941bfb1b2fdab0874906ab82");
    assert!(sent.md5_of_attributes.is_some());
    ctx.send("q", "two").await;
    ctx.send("q", "three").await;

    let got = ctx.receive("q", 10, 30).await;
    assert_eq!(bodies(&got), ["one", "three", "two"]);
    let one = got.iter().find(|m| m.body == "one").unwrap();
    assert_eq!(one.message_id, sent.message_id);
    assert_eq!(one.attributes, attributes);
    assert_eq!(one.md5_of_attributes, sent.md5_of_attributes);
    assert_eq!(one.receive_count, 1);
    assert_eq!(one.sent_at, crate::START);
    assert!(got
        .iter()
        .all(|m| m.md5_of_body == sluice_services::md5_of_body(&m.body)));
    assert!(got
        .iter()
        .find(|m| m.body == "two")
        .unwrap()
        .md5_of_attributes
        .is_none());

    for message in &got {
        ctx.services
            .delete_message(&ctx.tenant, "q", &handle(message))
            .await
            .unwrap();
    }
    ctx.clock.advance(31 * SECOND);
    assert!(
        ctx.receive("q", 10, 30).await.is_empty(),
        "deleted messages never come back"
    );
    assert_eq!(ctx.stats("q").await, (0, 0, 0));
}

/// A message not deleted within its visibility timeout is delivered again, with a higher
/// receive count and the first receive time kept.
pub async fn visibility_expiry_redelivers_with_counts(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    ctx.send("q", "m").await;
    ctx.clock.advance(2 * SECOND);
    let first = ctx.receive("q", 1, 30).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].receive_count, 1);
    assert_eq!(first[0].first_received_at, Some(crate::START + 2 * SECOND));
    assert!(
        ctx.receive("q", 1, 30).await.is_empty(),
        "hidden while in flight"
    );
    ctx.clock.advance(30 * SECOND - 1);
    assert!(
        ctx.receive("q", 1, 30).await.is_empty(),
        "hidden until the timeout ends"
    );
    ctx.clock.advance(1);
    let second = ctx.receive("q", 1, 30).await;
    assert_eq!(second.len(), 1, "visible again once the timeout ends");
    assert_eq!(second[0].message_id, first[0].message_id);
    assert_eq!(second[0].receive_count, 2);
    assert_eq!(second[0].first_received_at, Some(crate::START + 2 * SECOND));
    assert_ne!(handle(&second[0]), handle(&first[0]));

    // The default visibility timeout is the queue's.
    ctx.services
        .patch_queue(
            &ctx.tenant,
            "q",
            QueueConfigPatch {
                visibility_timeout_seconds: Some(5),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    ctx.clock.advance(30 * SECOND);
    let third = ctx
        .services
        .receive(&ctx.tenant, "q", ReceiveRequest::default())
        .await
        .unwrap();
    assert_eq!(third[0].receive_count, 3);
    ctx.clock.advance(5 * SECOND);
    assert_eq!(ctx.receive("q", 1, 30).await.len(), 1);
}

/// Changing visibility extends or shortens the hidden period; 0 makes the message visible now.
pub async fn change_visibility_extends_and_zero_makes_visible(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    ctx.send("q", "m").await;
    let got = ctx.receive("q", 1, 10).await;
    let h = handle(&got[0]);
    ctx.services
        .change_visibility(&ctx.tenant, "q", &h, 100)
        .await
        .unwrap();
    ctx.clock.advance(50 * SECOND);
    assert!(
        ctx.receive("q", 1, 10).await.is_empty(),
        "extended past the original 10 s"
    );
    assert_eq!(ctx.stats("q").await, (0, 1, 0));
    ctx.services
        .change_visibility(&ctx.tenant, "q", &h, 0)
        .await
        .unwrap();
    assert_eq!(ctx.stats("q").await, (1, 0, 0));
    let again = ctx.receive("q", 1, 10).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].receive_count, 2);

    // Batch form, with one bad entry failing alone.
    let h2 = handle(&again[0]);
    let outcome = ctx
        .services
        .change_visibility_batch(
            &ctx.tenant,
            "q",
            vec![
                ChangeVisibilityEntry {
                    id: "ok".into(),
                    receipt_handle: h2,
                    visibility_timeout_seconds: 0,
                },
                ChangeVisibilityEntry {
                    id: "bad".into(),
                    receipt_handle: "garbage".into(),
                    visibility_timeout_seconds: 0,
                },
            ],
        )
        .await
        .unwrap();
    assert_eq!(outcome.successful.len(), 1);
    assert_eq!(outcome.failed.len(), 1);
    assert_eq!(outcome.failed[0].id, "bad");
    assert_eq!(outcome.failed[0].error, ServiceError::ReceiptHandleInvalid);
    assert_eq!(ctx.receive("q", 1, 10).await.len(), 1);
}

/// Handles: foreign ones are invalid, superseded ones stale; a handle outlives its timeout
/// until the next delivery; deleting twice with the latest handle is safe.
pub async fn receipt_handles_stale_invalid_and_idempotent_delete(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    ctx.queue("other", QueueConfigPatch::default()).await;
    ctx.send("q", "m").await;
    ctx.send("other", "x").await;
    let foreign = handle(&ctx.receive("other", 1, 30).await[0]);
    let first = handle(&ctx.receive("q", 1, 5).await[0]);

    for bad in ["", "garbage", foreign.as_str()] {
        assert_eq!(
            ctx.services.delete_message(&ctx.tenant, "q", bad).await,
            Err(ServiceError::ReceiptHandleInvalid),
            "{bad:?}"
        );
        assert_eq!(
            ctx.services
                .change_visibility(&ctx.tenant, "q", bad, 1)
                .await,
            Err(ServiceError::ReceiptHandleInvalid)
        );
    }

    // After the timeout, before a redelivery, the handle still works.
    ctx.clock.advance(6 * SECOND);
    ctx.services
        .change_visibility(&ctx.tenant, "q", &first, 0)
        .await
        .unwrap();
    let second = handle(&ctx.receive("q", 1, 5).await[0]);
    assert_eq!(
        ctx.services.delete_message(&ctx.tenant, "q", &first).await,
        Err(ServiceError::ReceiptHandleStale)
    );
    assert_eq!(
        ctx.services
            .change_visibility(&ctx.tenant, "q", &first, 0)
            .await,
        Err(ServiceError::ReceiptHandleStale)
    );
    ctx.clock.advance(6 * SECOND);
    ctx.services
        .delete_message(&ctx.tenant, "q", &second)
        .await
        .unwrap();
    ctx.services
        .delete_message(&ctx.tenant, "q", &second)
        .await
        .unwrap();
    assert_eq!(
        ctx.services
            .change_visibility(&ctx.tenant, "q", &second, 0)
            .await,
        Err(ServiceError::ReceiptHandleStale)
    );
    assert!(ctx.receive("q", 1, 5).await.is_empty());
}

/// Characters a receipt handle is written in (URL-safe base64), and a few it never contains.
const HANDLE_CHARS: &[u8] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=.~";

/// Handles cannot be forged: a real handle with any one character changed, handles made up or
/// spliced from real ones are `ReceiptHandleInvalid` for delete and change visibility (single
/// and batch), and act on no message, also not on one that is gone (which a real handle may
/// delete again with success). The real handles keep working.
pub async fn altered_or_invented_handles_are_invalid(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    for i in 0..6 {
        ctx.send("q", &format!("m{i}")).await;
    }
    let got = ctx.receive("q", 5, 30).await;
    assert_eq!(got.len(), 5);
    let handles: Vec<String> = got.iter().map(handle).collect();
    // A gone message: deleting it again succeeds with its own handle, never with a forged one.
    ctx.services
        .delete_message(&ctx.tenant, "q", &handles[0])
        .await
        .unwrap();
    let real = &handles[1];

    let mut forged: Vec<String> = Vec::new();
    let mut one_per_position = Vec::new();
    for i in 0..real.len() {
        for &c in HANDLE_CHARS {
            if c == real.as_bytes()[i] {
                continue;
            }
            let mut altered = real.clone().into_bytes();
            altered[i] = c;
            forged.push(String::from_utf8(altered).unwrap());
        }
        one_per_position.push(forged.last().unwrap().clone());
    }
    let half = real.len() / 2;
    let mut invented = vec![
        String::new(),
        "A".repeat(real.len()),
        "_".repeat(real.len()),
        real[..real.len() - 1].to_owned(),
        format!("{real}A"),
        real.chars().rev().collect(),
        // The front of one real handle with the back of another, both ways.
        format!("{}{}", &handles[2][..half], &handles[3][half..]),
        format!("{}{}", &handles[0][..half], &handles[1][half..]),
    ];
    forged.append(&mut invented.clone());
    one_per_position.append(&mut invented);

    // All at once through the engine: every answer is Invalid.
    let key = QueueKey::new(ctx.tenant.clone(), QueueName::parse("q").unwrap());
    let now = ctx.clock.now();
    let answers = ctx.engine.delete(&key, &forged, now).await.unwrap();
    assert_eq!(answers.len(), forged.len());
    for (text, answer) in forged.iter().zip(&answers) {
        assert_eq!(answer, &Err(HandleError::Invalid), "delete {text:?}");
    }
    let entries: Vec<(String, u32)> = forged.iter().map(|h| (h.clone(), 0)).collect();
    let answers = ctx
        .engine
        .change_visibility(&key, &entries, now)
        .await
        .unwrap();
    for (text, answer) in forged.iter().zip(&answers) {
        assert_eq!(answer, &Err(HandleError::Invalid), "visibility {text:?}");
    }

    // One by one and in batches through the services.
    for bad in &one_per_position {
        assert_eq!(
            ctx.services.delete_message(&ctx.tenant, "q", bad).await,
            Err(ServiceError::ReceiptHandleInvalid),
            "{bad:?}"
        );
        assert_eq!(
            ctx.services
                .change_visibility(&ctx.tenant, "q", bad, 0)
                .await,
            Err(ServiceError::ReceiptHandleInvalid),
            "{bad:?}"
        );
    }
    for chunk in one_per_position.chunks(10) {
        let deletes = chunk
            .iter()
            .enumerate()
            .map(|(i, h)| DeleteEntry {
                id: format!("e{i}"),
                receipt_handle: h.clone(),
            })
            .collect();
        let outcome = ctx
            .services
            .delete_batch(&ctx.tenant, "q", deletes)
            .await
            .unwrap();
        assert!(outcome.successful.is_empty());
        assert_eq!(outcome.failed.len(), chunk.len());
        assert!(outcome
            .failed
            .iter()
            .all(|f| f.error == ServiceError::ReceiptHandleInvalid));
        let changes = chunk
            .iter()
            .enumerate()
            .map(|(i, h)| ChangeVisibilityEntry {
                id: format!("e{i}"),
                receipt_handle: h.clone(),
                visibility_timeout_seconds: 0,
            })
            .collect();
        let outcome = ctx
            .services
            .change_visibility_batch(&ctx.tenant, "q", changes)
            .await
            .unwrap();
        assert!(outcome.successful.is_empty());
        assert!(outcome
            .failed
            .iter()
            .all(|f| f.error == ServiceError::ReceiptHandleInvalid));
    }

    // Nothing moved: four in flight, one never received.
    assert_eq!(ctx.stats("q").await, (1, 4, 0));
    // The real handles still work.
    ctx.services
        .change_visibility(&ctx.tenant, "q", real, 0)
        .await
        .unwrap();
    assert_eq!(ctx.stats("q").await, (2, 3, 0));
    for h in &handles {
        ctx.services
            .delete_message(&ctx.tenant, "q", h)
            .await
            .unwrap();
    }
    assert_eq!(bodies(&ctx.receive("q", 10, 30).await), ["m5"]);
}

/// The queue's delay holds every message back; a message's own delay overrides it.
pub async fn queue_delay_and_message_delay(ctx: Ctx) {
    ctx.queue(
        "q",
        QueueConfigPatch {
            delay_seconds: Some(5),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.send("q", "queue-delay").await;
    ctx.services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                delay_seconds: Some(0),
                ..text("no-delay")
            },
        )
        .await
        .unwrap();
    ctx.services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                delay_seconds: Some(900),
                ..text("max-delay")
            },
        )
        .await
        .unwrap();
    assert_eq!(ctx.stats("q").await, (1, 0, 2));
    assert_eq!(bodies(&ctx.receive("q", 10, 3600).await), ["no-delay"]);
    ctx.clock.advance(5 * SECOND - 1);
    assert!(ctx.receive("q", 10, 3600).await.is_empty());
    ctx.clock.advance(1);
    assert_eq!(bodies(&ctx.receive("q", 10, 3600).await), ["queue-delay"]);
    ctx.clock.advance(895 * SECOND - 1);
    assert!(ctx.receive("q", 10, 3600).await.is_empty());
    ctx.clock.advance(1);
    assert_eq!(bodies(&ctx.receive("q", 10, 3600).await), ["max-delay"]);

    let too_long = ctx
        .services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                delay_seconds: Some(901),
                ..text("x")
            },
        )
        .await;
    assert!(
        matches!(too_long, Err(ServiceError::Validation { ref field, .. }) if field == "delay_seconds")
    );
}

/// `deliver_at` schedules delivery at an absolute time; a past time delivers now; combined
/// with `delay_seconds` it is refused.
pub async fn deliver_at_schedules_delivery(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    let at = |offset_seconds: i64| {
        let millis = crate::START as i64 + offset_seconds * 1000;
        chrono_free_rfc3339(millis)
    };
    for (body, when) in [("in-an-hour", at(3600)), ("in-the-past", at(-3600))] {
        ctx.services
            .send(
                &ctx.tenant,
                "q",
                SendRequest {
                    deliver_at: Some(when),
                    ..text(body)
                },
            )
            .await
            .unwrap();
    }
    let now = ctx.receive("q", 10, 30).await;
    assert_eq!(bodies(&now), ["in-the-past"]);
    ctx.services
        .delete_message(&ctx.tenant, "q", &handle(&now[0]))
        .await
        .unwrap();
    ctx.clock.advance(3600 * SECOND - 1);
    assert!(ctx.receive("q", 10, 30).await.is_empty());
    ctx.clock.advance(1);
    assert_eq!(bodies(&ctx.receive("q", 10, 30).await), ["in-an-hour"]);

    let both = ctx
        .services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                deliver_at: Some(at(10)),
                delay_seconds: Some(1),
                ..text("x")
            },
        )
        .await;
    assert!(matches!(both, Err(ServiceError::Validation { .. })));
    let beyond_retention = ctx
        .services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                deliver_at: Some(at(345_600 + 3600 + 1)),
                ..text("x")
            },
        )
        .await;
    assert!(
        matches!(beyond_retention, Err(ServiceError::Validation { ref field, .. }) if field == "deliver_at")
    );
}

/// Purge removes visible, in-flight and delayed messages.
pub async fn purge_removes_every_state(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    ctx.send("q", "visible").await;
    ctx.send("q", "in-flight").await;
    ctx.receive("q", 1, 30).await;
    ctx.services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                delay_seconds: Some(60),
                ..text("delayed")
            },
        )
        .await
        .unwrap();
    assert_eq!(ctx.stats("q").await, (1, 1, 1));
    ctx.services.purge_queue(&ctx.tenant, "q").await.unwrap();
    assert_eq!(ctx.stats("q").await, (0, 0, 0));
    ctx.clock.advance(3600 * SECOND);
    assert!(ctx.receive("q", 10, 30).await.is_empty());
    ctx.send("q", "after").await;
    assert_eq!(bodies(&ctx.receive("q", 10, 30).await), ["after"]);
    assert_eq!(
        ctx.services.purge_queue(&ctx.tenant, "missing").await,
        Err(ServiceError::QueueNotFound)
    );
}

/// A waiting receive returns as soon as a message is sent, without the clock moving.
pub async fn long_poll_is_woken_by_a_send(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    let services = ctx.services.clone();
    let tenant = ctx.tenant.clone();
    let waiting = tokio::spawn(async move {
        services
            .receive(
                &tenant,
                "q",
                ReceiveRequest {
                    wait_seconds: Some(20),
                    ..ReceiveRequest::default()
                },
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "nothing to receive yet");
    ctx.send("q", "wake").await;
    // The manual clock never moves here: only the send can have woken the receive.
    let got = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the send wakes the waiting receive")
        .unwrap()
        .unwrap();
    assert_eq!(bodies(&got), ["wake"]);
}

/// A long poll with nothing to receive answers empty once `wait_seconds` have passed.
pub async fn long_poll_answers_empty_after_wait(ctx: Ctx) {
    ctx.queue(
        "q",
        QueueConfigPatch {
            receive_wait_seconds: Some(5),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    let services = ctx.services.clone();
    let tenant = ctx.tenant.clone();
    // The queue's receive_wait_seconds is the default wait.
    let waiting = tokio::spawn(async move {
        services
            .receive(&tenant, "q", ReceiveRequest::default())
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    ctx.clock.advance(5 * SECOND - 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiting.is_finished(),
        "still waiting before wait_seconds have passed"
    );
    ctx.clock.advance(1);
    let got = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("answers once the wait ends")
        .unwrap()
        .unwrap();
    assert!(got.is_empty());
}

/// A long poll returns a delayed message as soon as its delay ends.
pub async fn long_poll_returns_a_delayed_message_when_its_delay_ends(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    ctx.services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                delay_seconds: Some(3),
                ..text("later")
            },
        )
        .await
        .unwrap();
    let services = ctx.services.clone();
    let tenant = ctx.tenant.clone();
    let waiting = tokio::spawn(async move {
        services
            .receive(
                &tenant,
                "q",
                ReceiveRequest {
                    wait_seconds: Some(20),
                    ..ReceiveRequest::default()
                },
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    ctx.clock.advance(3 * SECOND);
    let got = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the end of the delay wakes the receive")
        .unwrap()
        .unwrap();
    assert_eq!(bodies(&got), ["later"]);
}

/// Past `max_depth`, sends are refused rather than silently queued.
pub async fn max_depth_refuses_excess_sends(ctx: Ctx) {
    ctx.queue(
        "q",
        QueueConfigPatch {
            max_depth: Some(Some(3)),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.send("q", "1").await;
    ctx.send("q", "2").await;
    let batch = ctx
        .services
        .send_batch(
            &ctx.tenant,
            "q",
            vec![
                SendEntry {
                    id: "a".into(),
                    message: text("3"),
                },
                SendEntry {
                    id: "b".into(),
                    message: text("4"),
                },
            ],
        )
        .await
        .unwrap();
    assert_eq!(batch.successful.len(), 1);
    assert_eq!(batch.failed.len(), 1);
    assert_eq!(batch.failed[0].error, ServiceError::QueueFull);
    assert_eq!(
        ctx.services.send(&ctx.tenant, "q", text("5")).await,
        Err(ServiceError::QueueFull)
    );
    let got = ctx.receive("q", 1, 30).await;
    assert_eq!(
        ctx.services.send(&ctx.tenant, "q", text("6")).await,
        Err(ServiceError::QueueFull),
        "in-flight messages count towards the depth"
    );
    ctx.services
        .delete_message(&ctx.tenant, "q", &handle(&got[0]))
        .await
        .unwrap();
    ctx.send("q", "7").await;
}

/// In a batch, a bad entry fails alone; malformed or duplicate ids fail the whole batch.
pub async fn batch_entries_fail_alone(ctx: Ctx) {
    ctx.queue(
        "q",
        QueueConfigPatch {
            max_message_bytes: Some(1024),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    let batch = ctx
        .services
        .send_batch(
            &ctx.tenant,
            "q",
            vec![
                SendEntry {
                    id: "good".into(),
                    message: text("fine"),
                },
                SendEntry {
                    id: "empty".into(),
                    message: text(""),
                },
                SendEntry {
                    id: "big".into(),
                    message: text(&"x".repeat(1025)),
                },
                SendEntry {
                    id: "exact".into(),
                    message: text(&"y".repeat(1024)),
                },
            ],
        )
        .await
        .unwrap();
    let ok: Vec<&str> = batch.successful.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ok, ["good", "exact"]);
    let failed: BTreeMap<&str, &ServiceError> = batch
        .failed
        .iter()
        .map(|f| (f.id.as_str(), &f.error))
        .collect();
    assert!(
        matches!(failed["empty"], ServiceError::Validation { field, .. } if field == "entries[1].body")
    );
    assert!(matches!(failed["big"], ServiceError::PayloadTooLarge(_)));
    assert_eq!(ctx.stats("q").await, (2, 0, 0));

    for ids in [vec!["a", "a"], vec!["a", "b c"], vec![]] {
        let entries = ids
            .iter()
            .map(|id| SendEntry {
                id: (*id).into(),
                message: text("m"),
            })
            .collect();
        assert!(matches!(
            ctx.services.send_batch(&ctx.tenant, "q", entries).await,
            Err(ServiceError::Validation { .. })
        ));
    }
    let eleven = (0..11)
        .map(|i| SendEntry {
            id: format!("e{i}"),
            message: text("m"),
        })
        .collect();
    assert!(ctx
        .services
        .send_batch(&ctx.tenant, "q", eleven)
        .await
        .is_err());
    assert_eq!(
        ctx.stats("q").await,
        (2, 0, 0),
        "refused batches change nothing"
    );

    let got = ctx.receive("q", 10, 30).await;
    let mut entries: Vec<DeleteEntry> = got
        .iter()
        .enumerate()
        .map(|(i, m)| DeleteEntry {
            id: format!("d{i}"),
            receipt_handle: handle(m),
        })
        .collect();
    entries.push(DeleteEntry {
        id: "junk".into(),
        receipt_handle: "junk".into(),
    });
    let deleted = ctx
        .services
        .delete_batch(&ctx.tenant, "q", entries)
        .await
        .unwrap();
    assert_eq!(deleted.successful.len(), 2);
    assert_eq!(deleted.failed.len(), 1);
    assert_eq!(deleted.failed[0].error, ServiceError::ReceiptHandleInvalid);
    assert_eq!(ctx.stats("q").await, (0, 0, 0));
}

/// Peek shows messages by state and changes nothing: no receive count, no hiding.
pub async fn peek_changes_nothing(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    ctx.send("q", "a").await;
    ctx.send("q", "b").await;
    ctx.send("q", "c").await;
    ctx.services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                delay_seconds: Some(60),
                ..text("d")
            },
        )
        .await
        .unwrap();
    let peeked = ctx
        .services
        .peek(&ctx.tenant, "q", MessageState::Visible, None)
        .await
        .unwrap();
    assert_eq!(
        peeked.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    assert!(peeked
        .iter()
        .all(|m| m.receipt_handle.is_none() && m.receive_count == 0));
    let limited = ctx
        .services
        .peek(&ctx.tenant, "q", MessageState::Visible, Some(2))
        .await
        .unwrap();
    assert_eq!(limited.len(), 2);
    let delayed = ctx
        .services
        .peek(&ctx.tenant, "q", MessageState::Delayed, None)
        .await
        .unwrap();
    assert_eq!(bodies(&delayed), ["d"]);
    assert_eq!(ctx.stats("q").await, (3, 0, 1));
    let got = ctx.receive("q", 1, 30).await;
    assert_eq!(
        got[0].receive_count, 1,
        "peeking did not count as a delivery"
    );
    let in_flight = ctx
        .services
        .peek(&ctx.tenant, "q", MessageState::InFlight, None)
        .await
        .unwrap();
    assert_eq!(in_flight.len(), 1);
    assert_eq!(in_flight[0].message_id, got[0].message_id);
    assert!(ctx
        .services
        .peek(&ctx.tenant, "q", MessageState::Visible, Some(101))
        .await
        .is_err());
}
