//! The cases. Each states one guarantee and checks it through the services and the engine.
#![allow(clippy::unwrap_used)]

use crate::Ctx;
use sha2::Digest;
use sluice_engine::{
    Clock, HandleError, MessageAttribute, MessageState, QueueKey, QueueName, Quotas, TenantId,
};
use sluice_services::{
    ChangeVisibilityEntry, DeleteEntry, MessageView, QueueConfigPatch, ReceiveRequest, SendEntry,
    SendRequest, ServiceError,
};
use std::collections::BTreeMap;
use std::time::Duration;

const SECOND: u64 = 1000;

fn text(body: &str) -> SendRequest {
    SendRequest {
        body: body.to_owned(),
        ..SendRequest::default()
    }
}

fn receive_n(max: u32, visibility: u32) -> ReceiveRequest {
    ReceiveRequest {
        max_messages: Some(max),
        visibility_timeout_seconds: Some(visibility),
        wait_seconds: Some(0),
        request_attempt_id: None,
    }
}

fn bodies(messages: &[MessageView]) -> Vec<&str> {
    let mut out: Vec<&str> = messages.iter().map(|m| m.body.as_str()).collect();
    out.sort();
    out
}

fn handle(message: &MessageView) -> String {
    message
        .receipt_handle
        .clone()
        .expect("a received message carries a handle")
}

impl Ctx {
    async fn queue(&self, name: &str, patch: QueueConfigPatch) {
        let (_, created) = self
            .services
            .put_queue(&self.tenant, name, patch)
            .await
            .unwrap();
        assert!(created, "{name} should be new");
    }

    async fn send(&self, queue: &str, body: &str) {
        self.services
            .send(&self.tenant, queue, text(body))
            .await
            .unwrap();
    }

    async fn receive(&self, queue: &str, max: u32, visibility: u32) -> Vec<MessageView> {
        self.services
            .receive(&self.tenant, queue, receive_n(max, visibility))
            .await
            .unwrap()
    }

    async fn stats(&self, queue: &str) -> (u64, u64, u64) {
        let view = self.services.get_queue(&self.tenant, queue).await.unwrap();
        (view.stats.visible, view.stats.in_flight, view.stats.delayed)
    }
}

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

/// Nothing is delivered after its retention period; expiry removes it from the counts.
pub async fn retention_expires_messages(ctx: Ctx) {
    ctx.queue(
        "q",
        QueueConfigPatch {
            message_retention_seconds: Some(60),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    ctx.send("q", "old").await;
    ctx.clock.advance(30 * SECOND);
    ctx.send("q", "young").await;
    let got = ctx.receive("q", 10, 5).await;
    assert_eq!(bodies(&got), ["old", "young"]);
    ctx.clock.advance(30 * SECOND);
    let got = ctx.receive("q", 10, 5).await;
    assert_eq!(
        bodies(&got),
        ["young"],
        "the first message's retention ended at 60 s"
    );
    ctx.clock.advance(30 * SECOND);
    let expired = ctx.engine.expire(ctx.clock.now()).await.unwrap();
    assert!(
        expired <= 1,
        "at most the young message remained to expire, got {expired}"
    );
    assert_eq!(ctx.stats("q").await, (0, 0, 0));
    assert!(ctx.receive("q", 10, 5).await.is_empty());
    let view = ctx.services.get_queue(&ctx.tenant, "q").await.unwrap();
    assert_eq!(view.oldest_age_seconds, None);
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

/// Formats epoch milliseconds as RFC 3339 UTC without a date library (civil-from-days).
fn chrono_free_rfc3339(millis: i64) -> String {
    let days = millis.div_euclid(86_400_000);
    let rest = millis.rem_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
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

/// Deleting a queue removes it and its messages; a queue re-created under the same name starts
/// empty and refuses the old queue's handles.
pub async fn delete_queue_removes_messages_and_handles(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    ctx.send("q", "m").await;
    ctx.send("q", "n").await;
    let old = handle(&ctx.receive("q", 1, 30).await[0]);
    ctx.services.delete_queue(&ctx.tenant, "q").await.unwrap();
    assert_eq!(
        ctx.services.get_queue(&ctx.tenant, "q").await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        ctx.services.send(&ctx.tenant, "q", text("x")).await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        ctx.services.delete_queue(&ctx.tenant, "q").await,
        Err(ServiceError::QueueNotFound)
    );
    ctx.queue("q", QueueConfigPatch::default()).await;
    assert_eq!(ctx.stats("q").await, (0, 0, 0));
    assert!(ctx.receive("q", 10, 30).await.is_empty());
    assert_eq!(
        ctx.services.delete_message(&ctx.tenant, "q", &old).await,
        Err(ServiceError::ReceiptHandleInvalid)
    );
}

/// Stats count each state and the oldest message's age.
pub async fn stats_count_each_state(ctx: Ctx) {
    ctx.queue("q", QueueConfigPatch::default()).await;
    let view = ctx.services.get_queue(&ctx.tenant, "q").await.unwrap();
    assert_eq!(view.oldest_age_seconds, None);
    for i in 0..4 {
        ctx.send("q", &format!("v{i}")).await;
    }
    ctx.clock.advance(10 * SECOND);
    ctx.services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                delay_seconds: Some(30),
                ..text("d")
            },
        )
        .await
        .unwrap();
    ctx.receive("q", 3, 30).await;
    let view = ctx.services.get_queue(&ctx.tenant, "q").await.unwrap();
    assert_eq!(
        (view.stats.visible, view.stats.in_flight, view.stats.delayed),
        (1, 3, 1)
    );
    assert_eq!(view.oldest_age_seconds, Some(10));
    let listed = ctx
        .services
        .list_queues(&ctx.tenant, "", None, None)
        .await
        .unwrap();
    assert_eq!(listed.queues[0].stats, view.stats);
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

/// `PUT` on an existing queue replaces the whole configuration (omitted fields reset) and
/// keeps `created_at` and the messages.
pub async fn put_replaces_config_and_keeps_messages(ctx: Ctx) {
    let (first, created) = ctx
        .services
        .put_queue(
            &ctx.tenant,
            "q",
            QueueConfigPatch {
                visibility_timeout_seconds: Some(99),
                delay_seconds: Some(7),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    assert!(created);
    assert_eq!(first.config.visibility_timeout_seconds, 99);
    ctx.services
        .send(
            &ctx.tenant,
            "q",
            SendRequest {
                delay_seconds: Some(0),
                ..text("kept")
            },
        )
        .await
        .unwrap();
    ctx.clock.advance(SECOND);
    let (second, created) = ctx
        .services
        .put_queue(
            &ctx.tenant,
            "q",
            QueueConfigPatch {
                receive_wait_seconds: Some(3),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(second.created_at, first.created_at);
    assert_eq!(second.updated_at, crate::START + SECOND);
    assert_eq!(
        second.config.visibility_timeout_seconds, 30,
        "reset to its default"
    );
    assert_eq!(second.config.delay_seconds, 0);
    assert_eq!(second.config.receive_wait_seconds, 3);
    assert_eq!(second.stats.visible, 1);
    assert_eq!(bodies(&ctx.receive("q", 10, 30).await), ["kept"]);
}

/// `PATCH` changes only the fields it names.
pub async fn patch_changes_only_given_fields(ctx: Ctx) {
    ctx.queue(
        "q",
        QueueConfigPatch {
            visibility_timeout_seconds: Some(99),
            max_depth: Some(Some(10)),
            ..QueueConfigPatch::default()
        },
    )
    .await;
    let patched = ctx
        .services
        .patch_queue(
            &ctx.tenant,
            "q",
            QueueConfigPatch {
                delay_seconds: Some(4),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(patched.config.visibility_timeout_seconds, 99);
    assert_eq!(patched.config.delay_seconds, 4);
    assert_eq!(patched.config.max_depth, Some(10));
    let cleared = ctx
        .services
        .patch_queue(
            &ctx.tenant,
            "q",
            QueueConfigPatch {
                max_depth: Some(None),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(cleared.config.max_depth, None);
    assert_eq!(
        ctx.services
            .patch_queue(&ctx.tenant, "missing", QueueConfigPatch::default())
            .await,
        Err(ServiceError::QueueNotFound)
    );
}

/// Listing is ordered by name, filtered by prefix and paged with tokens we issued.
pub async fn list_queues_pages_by_name_with_prefix(ctx: Ctx) {
    for name in ["b-2", "a-1", "b-1", "c", "b-3"] {
        ctx.queue(name, QueueConfigPatch::default()).await;
    }
    let names = |page: &sluice_services::QueuePage| {
        page.queues
            .iter()
            .map(|q| q.name.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    let all = ctx
        .services
        .list_queues(&ctx.tenant, "", None, None)
        .await
        .unwrap();
    assert_eq!(names(&all), ["a-1", "b-1", "b-2", "b-3", "c"]);
    assert_eq!(all.next_token, None);
    let first = ctx
        .services
        .list_queues(&ctx.tenant, "b-", Some(2), None)
        .await
        .unwrap();
    assert_eq!(names(&first), ["b-1", "b-2"]);
    let token = first.next_token.clone().expect("a second page");
    let second = ctx
        .services
        .list_queues(&ctx.tenant, "b-", Some(2), Some(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), ["b-3"]);
    assert_eq!(second.next_token, None);
    for bad in [Some(0), Some(1001)] {
        assert!(ctx
            .services
            .list_queues(&ctx.tenant, "", bad, None)
            .await
            .is_err());
    }
    assert!(matches!(
        ctx.services.list_queues(&ctx.tenant, "", None, Some("not-ours")).await,
        Err(ServiceError::Validation { ref field, .. }) if field == "next_token"
    ));
}

/// Nothing one tenant names reaches another tenant's queue: it answers as absent.
pub async fn tenants_cannot_reach_each_others_queues(ctx: Ctx) {
    ctx.queue("shared-name", QueueConfigPatch::default()).await;
    ctx.send("shared-name", "secret").await;
    let mine = handle(&ctx.receive("shared-name", 1, 0).await[0]);
    let other: &TenantId = &ctx.other_tenant;
    let s = &ctx.services;
    assert_eq!(
        s.get_queue(other, "shared-name").await,
        Err(ServiceError::QueueNotFound)
    );
    assert!(s
        .list_queues(other, "", None, None)
        .await
        .unwrap()
        .queues
        .is_empty());
    assert_eq!(
        s.send(other, "shared-name", text("x")).await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        s.receive(other, "shared-name", receive_n(10, 0)).await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        s.peek(other, "shared-name", MessageState::Visible, None)
            .await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        s.purge_queue(other, "shared-name").await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        s.delete_message(other, "shared-name", &mine).await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        s.delete_queue(other, "shared-name").await,
        Err(ServiceError::QueueNotFound)
    );

    // The other tenant's own queue of the same name is a different queue.
    let (_, created) = s
        .put_queue(other, "shared-name", QueueConfigPatch::default())
        .await
        .unwrap();
    assert!(created);
    assert_eq!(
        s.delete_message(other, "shared-name", &mine).await,
        Err(ServiceError::ReceiptHandleInvalid)
    );
    assert!(s
        .receive(other, "shared-name", receive_n(10, 0))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(bodies(&ctx.receive("shared-name", 10, 0).await), ["secret"]);
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

/// Tenants: create, conflict, implicit tenants, quotas, list, delete with all resources.
pub async fn tenant_administration(ctx: Ctx) {
    let id = ctx.tenant.as_str().to_owned();
    let quotas = Quotas {
        max_queues: Some(2),
        ..Quotas::default()
    };
    let created = ctx
        .services
        .create_tenant(&id, quotas.clone())
        .await
        .unwrap();
    assert_eq!(created.quotas, quotas);
    assert!(matches!(
        ctx.services.create_tenant(&id, Quotas::default()).await,
        Err(ServiceError::Conflict(_))
    ));
    assert_eq!(ctx.services.get_tenant(&id).await.unwrap().quotas, quotas);

    ctx.queue("one", QueueConfigPatch::default()).await;
    ctx.queue("two", QueueConfigPatch::default()).await;
    assert!(matches!(
        ctx.services
            .put_queue(&ctx.tenant, "three", QueueConfigPatch::default())
            .await,
        Err(ServiceError::QuotaExceeded(_))
    ));
    // Replacing an existing queue's configuration is not a new queue.
    ctx.services
        .put_queue(&ctx.tenant, "two", QueueConfigPatch::default())
        .await
        .unwrap();

    // A tenant named only by a token exists once used.
    let implicit = ctx.other_tenant.as_str().to_owned();
    assert_eq!(
        ctx.services.get_tenant(&implicit).await,
        Err(ServiceError::TenantNotFound)
    );
    ctx.services
        .ensure_tenant(&ctx.other_tenant, None)
        .await
        .unwrap();
    ctx.services
        .ensure_tenant(&ctx.other_tenant, None)
        .await
        .unwrap();
    assert!(ctx.services.get_tenant(&implicit).await.is_ok());
    assert!(matches!(
        ctx.services
            .create_tenant(&implicit, Quotas::default())
            .await,
        Err(ServiceError::Conflict(_))
    ));
    let mut listed = Vec::new();
    let mut token = None;
    loop {
        let page = ctx
            .services
            .list_tenants(Some(1), token.as_deref())
            .await
            .unwrap();
        listed.extend(page.tenants.into_iter().map(|t| t.id.as_str().to_owned()));
        match page.next_token {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    assert!(listed.contains(&id) && listed.contains(&implicit));
    assert!(
        listed.windows(2).all(|w| w[0] < w[1]),
        "ordered by id: {listed:?}"
    );

    ctx.services.delete_tenant(&id).await.unwrap();
    assert_eq!(
        ctx.services.get_tenant(&id).await,
        Err(ServiceError::TenantNotFound)
    );
    assert_eq!(
        ctx.services.get_queue(&ctx.tenant, "one").await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        ctx.services.delete_tenant(&id).await,
        Err(ServiceError::TenantNotFound)
    );
}

fn field_of<T>(result: Result<T, ServiceError>) -> String {
    match result {
        Err(ServiceError::Validation { field, .. }) => field,
        Err(other) => panic!("expected a validation error, got {other:?}"),
        Ok(_) => panic!("expected a validation error, got success"),
    }
}

/// Refused input names the field and changes nothing.
pub async fn invalid_input_changes_nothing(ctx: Ctx) {
    let s = &ctx.services;
    let t = &ctx.tenant;
    let patch = |f: fn(&mut QueueConfigPatch)| {
        let mut p = QueueConfigPatch::default();
        f(&mut p);
        p
    };
    assert_eq!(
        field_of(
            s.put_queue(t, "bad name", QueueConfigPatch::default())
                .await
        ),
        "queue"
    );
    assert_eq!(
        field_of(
            s.put_queue(
                t,
                "q.fifo",
                QueueConfigPatch {
                    deduplication_scope: Some("tenant".into()),
                    ..QueueConfigPatch::default()
                }
            )
            .await
        ),
        "deduplication_scope"
    );
    for (p, field) in [
        (
            patch(|p| p.visibility_timeout_seconds = Some(43_201)),
            "visibility_timeout_seconds",
        ),
        (
            patch(|p| p.message_retention_seconds = Some(59)),
            "message_retention_seconds",
        ),
        (patch(|p| p.delay_seconds = Some(901)), "delay_seconds"),
        (
            patch(|p| p.receive_wait_seconds = Some(21)),
            "receive_wait_seconds",
        ),
        (
            patch(|p| p.max_message_bytes = Some(1023)),
            "max_message_bytes",
        ),
        (
            patch(|p| p.max_message_bytes = Some(1_048_577)),
            "max_message_bytes",
        ),
        (
            patch(|p| p.content_based_deduplication = Some(true)),
            "content_based_deduplication",
        ),
        (patch(|p| p.redrive_policy_given = true), "redrive_policy"),
    ] {
        assert_eq!(field_of(s.put_queue(t, "q", p).await), field);
    }
    assert_eq!(
        s.get_queue(t, "q").await,
        Err(ServiceError::QueueNotFound),
        "nothing was created"
    );

    ctx.queue("q", QueueConfigPatch::default()).await;
    assert_eq!(
        field_of(
            s.patch_queue(t, "q", patch(|p| p.delay_seconds = Some(1000)))
                .await
        ),
        "delay_seconds"
    );
    assert_eq!(s.get_queue(t, "q").await.unwrap().config.delay_seconds, 0);
    assert_eq!(
        field_of(
            s.send(
                t,
                "q",
                SendRequest {
                    deduplication_id: Some("d".into()),
                    ..text("m")
                }
            )
            .await
        ),
        "deduplication_id"
    );
    assert_eq!(field_of(s.send(t, "q", text("")).await), "body");
    for (request, field) in [
        (receive_n(0, 30), "max_messages"),
        (receive_n(11, 30), "max_messages"),
        (receive_n(1, 43_201), "visibility_timeout_seconds"),
        (
            ReceiveRequest {
                wait_seconds: Some(21),
                ..ReceiveRequest::default()
            },
            "wait_seconds",
        ),
    ] {
        assert_eq!(field_of(s.receive(t, "q", request).await), field);
    }
    assert_eq!(ctx.stats("q").await, (0, 0, 0));
}

// ---------------------------------------------------------------------------------------------
// FIFO queues
// ---------------------------------------------------------------------------------------------

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

/// `max_queues` holds under concurrency: of 50 simultaneous creations against a quota of 2,
/// exactly 2 succeed and the others are `QuotaExceeded`, changing nothing.
pub async fn max_queues_holds_under_concurrent_creation(ctx: Ctx) {
    let id = ctx.tenant.as_str().to_owned();
    let quotas = Quotas {
        max_queues: Some(2),
        ..Quotas::default()
    };
    ctx.services.create_tenant(&id, quotas).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..50 {
        let (services, tenant) = (ctx.services.clone(), ctx.tenant.clone());
        tasks.spawn(async move {
            services
                .put_queue(&tenant, &format!("q-{n:02}"), QueueConfigPatch::default())
                .await
        });
    }
    let (mut created, mut refused) = (0, 0);
    while let Some(answer) = tasks.join_next().await {
        match answer.unwrap() {
            Ok((_, true)) => created += 1,
            Err(ServiceError::QuotaExceeded(_)) => refused += 1,
            other => panic!("expected created or QuotaExceeded, got {other:?}"),
        }
    }
    assert_eq!((created, refused), (2, 48));
    let listed = ctx
        .services
        .list_queues(&ctx.tenant, "", None, None)
        .await
        .unwrap();
    assert_eq!(listed.queues.len(), 2);
    assert_eq!(ctx.engine.count_queues(&ctx.tenant).await.unwrap(), 2);
    // Replacing one of them is no creation, so it is not refused.
    let name = listed.queues[0].name.as_str().to_owned();
    let (_, again) = ctx
        .services
        .put_queue(&ctx.tenant, &name, QueueConfigPatch::default())
        .await
        .unwrap();
    assert!(!again);
}

/// Deleting a tenant while its queues are being created leaves no queue that answers but is
/// not listed: once the deletion answers, none of the tenant's queues answers at all, and the
/// registries agree (nothing listed or counted). Many rounds, to meet many interleavings.
pub async fn tenant_deletion_races_queue_creation(ctx: Ctx) {
    const ROUNDS: usize = 20;
    const CREATORS: usize = 6;
    const NAMES: usize = 6;
    for round in 0..ROUNDS {
        let tenant = TenantId::parse(&format!("{}-r{round}", ctx.tenant)).unwrap();
        ctx.services
            .create_tenant(tenant.as_str(), Quotas::default())
            .await
            .unwrap();
        // Something for the deletion to walk.
        ctx.services
            .put_queue(&tenant, "n0-0", QueueConfigPatch::default())
            .await
            .unwrap();
        let started = std::sync::Arc::new(tokio::sync::Barrier::new(CREATORS + 1));
        let mut creators = tokio::task::JoinSet::new();
        for c in 0..CREATORS {
            let (services, tenant, started) =
                (ctx.services.clone(), tenant.clone(), started.clone());
            creators.spawn(async move {
                started.wait().await;
                for n in 0..NAMES {
                    // Creations and replacements both, of names the walk has and has not seen.
                    let name = format!("n{}-{c}", n % 3);
                    match services
                        .put_queue(&tenant, &name, QueueConfigPatch::default())
                        .await
                    {
                        Ok(_) | Err(ServiceError::TenantDeleted(_)) => {}
                        Err(other) => panic!("put {name}: {other:?}"),
                    }
                    let _ = services.send(&tenant, &name, text("m")).await;
                }
            });
        }
        started.wait().await;
        ctx.services.delete_tenant(tenant.as_str()).await.unwrap();
        while let Some(done) = creators.join_next().await {
            done.unwrap();
        }

        let listed: Vec<String> = ctx
            .services
            .list_queues(&tenant, "", Some(1000), None)
            .await
            .unwrap()
            .queues
            .into_iter()
            .map(|q| q.name.as_str().to_owned())
            .collect();
        let mut answering = Vec::new();
        for n in 0..3 {
            for c in 0..CREATORS {
                let name = format!("n{n}-{c}");
                let answers = ctx.services.get_queue(&tenant, &name).await.is_ok()
                    || ctx.services.send(&tenant, &name, text("m")).await.is_ok();
                if answers {
                    assert!(
                        listed.contains(&name),
                        "round {round}: {name} answers but is not listed ({listed:?})"
                    );
                    answering.push(name);
                }
            }
        }
        assert_eq!(
            answering,
            Vec::<String>::new(),
            "round {round}: queues that outlived the deletion of their tenant"
        );
        // A second deletion reaches whatever is still registered.
        let _ = ctx.services.delete_tenant(tenant.as_str()).await;
        assert_eq!(ctx.engine.count_queues(&tenant).await.unwrap(), 0);
    }
}

/// Deleting a tenant revokes the tokens issued until then: they do not re-create it (with
/// default quotas or otherwise), and its queues cannot be created. A token issued after the
/// deletion re-creates it fresh; old tokens stay refused, also once it is re-created through
/// the admin API.
pub async fn deleted_tenant_refuses_tokens_issued_before(ctx: Ctx) {
    let s = &ctx.services;
    let t = &ctx.tenant;
    let id = t.as_str();
    let seconds = |ms: u64| ms / SECOND;
    let quotas = Quotas {
        max_queues: Some(1),
        ..Quotas::default()
    };
    s.create_tenant(id, quotas.clone()).await.unwrap();
    let issued = seconds(ctx.clock.now());
    s.ensure_tenant(t, Some(issued)).await.unwrap();
    s.ensure_tenant(t, None).await.unwrap();
    ctx.queue("q", QueueConfigPatch::default()).await;
    assert_eq!(s.first_valid_issue_second(t).await.unwrap(), None);

    ctx.clock.advance(10 * SECOND + 500);
    let deleted_at = ctx.clock.now();
    s.delete_tenant(id).await.unwrap();
    assert_eq!(
        s.first_valid_issue_second(t).await.unwrap(),
        Some(seconds(deleted_at) + 1)
    );
    ctx.clock.advance(5 * SECOND);
    // Before the deletion, in its very second (token times are whole seconds), or undated.
    for iat in [Some(issued), Some(seconds(deleted_at)), None] {
        assert!(
            matches!(
                s.ensure_tenant(t, iat).await,
                Err(ServiceError::TenantDeleted(_))
            ),
            "iat {iat:?}"
        );
    }
    assert_eq!(s.get_tenant(id).await, Err(ServiceError::TenantNotFound));
    assert!(matches!(
        s.put_queue(t, "q", QueueConfigPatch::default()).await,
        Err(ServiceError::TenantDeleted(_))
    ));
    assert_eq!(s.get_queue(t, "q").await, Err(ServiceError::QueueNotFound));

    // A token issued after the deletion: a fresh tenant, default quotas, no queues.
    let fresh = seconds(deleted_at) + 1;
    s.ensure_tenant(t, Some(fresh)).await.unwrap();
    assert_eq!(s.get_tenant(id).await.unwrap().quotas, Quotas::default());
    ctx.queue("q", QueueConfigPatch::default()).await;
    ctx.queue("r", QueueConfigPatch::default()).await;
    assert!(matches!(
        s.ensure_tenant(t, Some(issued)).await,
        Err(ServiceError::TenantDeleted(_))
    ));

    // Deleted again, then re-created by the admin API: old tokens stay refused.
    ctx.clock.advance(5 * SECOND);
    s.delete_tenant(id).await.unwrap();
    s.create_tenant(id, quotas.clone()).await.unwrap();
    assert!(matches!(
        s.ensure_tenant(t, Some(fresh)).await,
        Err(ServiceError::TenantDeleted(_))
    ));
    let newest = s.first_valid_issue_second(t).await.unwrap().unwrap();
    s.ensure_tenant(t, Some(newest)).await.unwrap();
    assert_eq!(s.get_tenant(id).await.unwrap().quotas, quotas);
    ctx.queue("q", QueueConfigPatch::default()).await;
}
