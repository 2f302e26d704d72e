//! Redrive task cases: a task moves what was in the DLQ when it started, at its rate, once;
//! it can be cancelled; only the gateway holding its lease works on it.

use super::*;
use sluice_services::{Limits, RedriveStatus, RedriveTask, Services};
use std::sync::Arc;

const ROUND_MS: u64 = 100;

fn dead_letters_to(dlq: &str) -> QueueConfigPatch {
    QueueConfigPatch {
        redrive_policy: Some(Some(sluice_services::RedrivePolicyInput {
            dead_letter_queue: dlq.to_owned(),
            max_receive_count: 1,
        })),
        ..QueueConfigPatch::default()
    }
}

impl Ctx {
    /// Sends `count` messages to `source` and receives until each was moved to its DLQ.
    async fn fill_dead_letters(&self, source: &str, count: usize) {
        for i in 0..count {
            self.send(source, &format!("{source}-{i}")).await;
        }
        for _ in 0..count + 2 {
            if self.stats(source).await == (0, 0, 0) {
                return;
            }
            self.receive(source, 10, 0).await;
        }
        assert_eq!(self.stats(source).await, (0, 0, 0), "all dead-lettered");
    }

    async fn task(&self, id: &str) -> RedriveTask {
        self.services
            .get_redrive_task(&self.tenant, id)
            .await
            .unwrap()
    }

    /// One round of the background job on `services` after a round's worth of time.
    async fn round(&self, services: &Services) {
        self.clock.advance(ROUND_MS);
        services.advance_redrive_tasks().await.unwrap();
    }
}

/// A task moves every message that was in the DLQ at its start back to its source, with its
/// receive count reset, counts those whose source is gone as failed and leaves them, leaves
/// later arrivals alone, and completes; one task per DLQ runs at a time.
pub async fn redrive_task_moves_what_was_there_and_completes(ctx: Ctx) {
    let t = &ctx.tenant;
    let s = &ctx.services;
    ctx.queue("dlq", QueueConfigPatch::default()).await;
    ctx.queue("src", dead_letters_to("dlq")).await;
    ctx.queue("gone", dead_letters_to("dlq")).await;
    ctx.fill_dead_letters("src", 4).await;
    ctx.fill_dead_letters("gone", 1).await;
    s.delete_queue(t, "gone").await.unwrap();

    let task = s.start_redrive(t, "dlq", None, None).await.unwrap();
    assert_eq!(task.status, RedriveStatus::Running);
    assert_eq!((task.to_move, task.moved, task.failed), (5, 0, 0));
    assert_eq!(task.max_messages_per_second, 500);
    assert!(matches!(
        s.start_redrive(t, "dlq", None, None).await,
        Err(ServiceError::Conflict(_))
    ));
    ctx.send("dlq", "late").await;

    for _ in 0..50 {
        if ctx.task(&task.id).await.status != RedriveStatus::Running {
            break;
        }
        ctx.round(s).await;
    }
    let done = ctx.task(&task.id).await;
    assert_eq!(done.status, RedriveStatus::Completed);
    assert_eq!((done.moved, done.failed), (4, 1));
    assert!(done.finished_at.is_some());
    let back = s
        .peek(t, "src", MessageState::Visible, Some(100))
        .await
        .unwrap();
    assert_eq!(bodies(&back), ["src-0", "src-1", "src-2", "src-3"]);
    assert!(back
        .iter()
        .all(|m| m.receive_count == 0 && m.dead_letter.is_none()));
    assert_eq!(
        bodies(
            &s.peek(t, "dlq", MessageState::Visible, Some(100))
                .await
                .unwrap()
        ),
        ["gone-0", "late"],
        "what could not move, and what came later, stayed"
    );

    let listed = s
        .list_redrive_tasks(t, Some("dlq"), None, None)
        .await
        .unwrap();
    assert_eq!(listed.tasks.len(), 1);
    assert_eq!(listed.tasks[0].id, task.id);
    assert!(s
        .list_redrive_tasks(t, Some("src"), None, None)
        .await
        .unwrap()
        .tasks
        .is_empty());
    assert!(matches!(
        s.cancel_redrive_task(t, &task.id).await,
        Err(ServiceError::Conflict(_))
    ));
    assert_eq!(
        s.get_redrive_task(t, "no-such-task").await,
        Err(ServiceError::TaskNotFound)
    );
    assert_eq!(
        s.get_redrive_task(&ctx.other_tenant, &task.id).await,
        Err(ServiceError::TaskNotFound),
        "another tenant's task is not found"
    );
    let again = s
        .start_redrive(t, "dlq", None, None)
        .await
        .expect("a finished task frees its DLQ");
    assert_eq!(again.to_move, 2);
    assert_eq!(
        field_of(s.start_redrive(t, "src", Some("dlq"), Some(501)).await),
        "max_messages_per_second"
    );
    assert_eq!(
        s.start_redrive(t, "src", Some("nowhere"), None).await,
        Err(ServiceError::QueueNotFound)
    );
    assert_eq!(
        s.start_redrive(t, "missing", None, None).await,
        Err(ServiceError::QueueNotFound)
    );
}

/// A task moves at most its rate, works only on the gateway holding its lease (another takes
/// over once the lease runs out), and a cancel stops it with what moved staying moved.
pub async fn redrive_task_keeps_its_rate_lease_and_cancel(ctx: Ctx) {
    let t = &ctx.tenant;
    let s = &ctx.services;
    ctx.queue("dlq", QueueConfigPatch::default()).await;
    ctx.queue("src", dead_letters_to("dlq")).await;
    ctx.queue("other", QueueConfigPatch::default()).await;
    ctx.fill_dead_letters("src", 40).await;

    let task = s
        .start_redrive(t, "dlq", Some("other"), Some(10))
        .await
        .unwrap();
    for _ in 0..10 {
        ctx.round(s).await;
    }
    let after_a_second = ctx.task(&task.id).await.moved;
    assert!(
        (9..=11).contains(&after_a_second),
        "10 per second for one second moved {after_a_second}"
    );

    // A second gateway over the same store waits while the first holds the lease...
    let second = Services::new(
        ctx.engine.clone(),
        Arc::new(ctx.clock.clone()),
        Limits::default(),
    );
    for _ in 0..5 {
        ctx.clock.advance(ROUND_MS);
        second.advance_redrive_tasks().await.unwrap();
    }
    assert_eq!(
        ctx.task(&task.id).await.moved,
        after_a_second,
        "the lease holder was idle, nobody else moved"
    );
    // ... and takes over once it runs out.
    ctx.clock.advance(10 * SECOND);
    for _ in 0..10 {
        ctx.round(&second).await;
    }
    let taken_over = ctx.task(&task.id).await.moved;
    assert!(taken_over > after_a_second, "the second gateway took over");
    // At most one second's worth saved up while idle, then one second of rounds.
    assert!(
        taken_over <= after_a_second + 21,
        "still at the task's rate: {after_a_second} then {taken_over}"
    );
    ctx.round(s).await;
    assert_eq!(
        ctx.task(&task.id).await.moved,
        taken_over,
        "the first gateway lost the lease"
    );

    s.cancel_redrive_task(t, &task.id).await.unwrap();
    s.cancel_redrive_task(t, &task.id)
        .await
        .expect("cancelling twice is fine");
    let cancelled = ctx.task(&task.id).await;
    assert_eq!(cancelled.status, RedriveStatus::Cancelled);
    for _ in 0..5 {
        ctx.round(&second).await;
    }
    assert_eq!(ctx.task(&task.id).await.moved, cancelled.moved);
    let moved = cancelled.moved as usize;
    assert_eq!(
        s.peek(t, "other", MessageState::Visible, Some(100))
            .await
            .unwrap()
            .len(),
        moved
    );
    assert_eq!(
        s.peek(t, "dlq", MessageState::Visible, Some(100))
            .await
            .unwrap()
            .len(),
        40 - moved,
        "every message is in exactly one queue"
    );
}
