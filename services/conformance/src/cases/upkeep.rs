//! Background work cases ([`Upkeep`](sluice_engine::Upkeep)): the retention sweep.

use super::*;

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
