//! Topic publishing: the fan-out of a publication to one queue per delivery. The topic and
//! each queue live in different cluster slots, so no script may touch them all; a fan-out is
//! the "copy" form of the transfer protocol (`transfers.rs`), in steps, each atomic in one slot
//! and repeatable:
//!
//! 1. **Register** the topic in the due index of fan-outs (`{P}:fanouts`, registries' slot),
//!    scored now + [`RECOVERY_GRACE_MS`] (`fanout_registry.rs`).
//! 2. **Commit** (`publish.lua`, topic slot): per publication the FIFO deduplication check
//!    and sequence number, the filtered-out counts and the outbox entry (the publication as
//!    JSON with its seq and publish time). Once this answers, the publication is durable:
//!    `publish` answers `Ok` from here on, whatever fails later.
//! 3. **Apply** (`fanout_apply.lua`, each destination queue's slot): the copies into one queue
//!    in one call, idempotent by `<publication message id>/<subscription id>`. A copy the
//!    queue refuses (missing, full, too large) goes to the delivery's dead-letter queue by the
//!    same idempotent apply there, which ignores depth and size.
//! 4. **Ack** (`fanout_ack.lua`, topic slot): forgets the entry and counts its deliveries,
//!    only if it was still pending, so each delivery counts once whoever acknowledges.
//!
//! **Order.** A FIFO topic's commit answers every entry still pending (lower numbers); the
//! publisher delivers those first, in order, then its own, so a queue never receives seq n+1
//! before seq n: whoever applies n+1 has applied n, or seen it acknowledged. Applies are
//! idempotent, so doing another gateway's work is harmless. A standard topic's publisher
//! delivers its own entries, and any pending ones past the grace among the oldest few.
//!
//! **Recovery** ([`recover_publications`](RedisEngine::recover_publications)): every gateway
//! runs it about once a second; it reads the topics due by now, delivers their entries older
//! than the grace in order, acknowledges them, and drops the due entry once the outbox is
//! empty (if nobody registered the topic since it looked). A crash after 1 leaves a spurious
//! due entry; after 2, an entry that recovery delivers; after some applies, an entry whose
//! applies recovery repeats (no-ops where made, the same refusal where refused) before the ack.

use super::fanout_ack::Ack;
use super::fanout_apply::{Applied, ApplyMode, CopyIn, FANOUT_APPLIED_WINDOW_MS};
use super::payload_events::payload_tag;
use super::publish::PENDING_LIMIT;
use super::transfer_registry::RecoveryIndex;
use super::transfers::RECOVERY_GRACE_MS;
use crate::codec::{from_json, to_json, StoredBody};
use crate::keys::Keys;
use crate::RedisEngine;
use futures_util::future::join_all;
use sluice_engine::{
    DeliveryFailure, DeliveryOutcome, EngineError, Millis, Publication, Published, QueueKey,
    QueueName, TopicKey,
};
use std::collections::BTreeMap;

/// How many due topics one recovery pass looks at.
const RECOVERY_BATCH: usize = 64;

/// Where a publish stops, for tests that play a crash between its steps.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishCrash {
    /// After the commit, before any apply.
    AfterCommit,
    /// After the applies into the first destination queue (by name) only.
    AfterSomeApplies,
    /// After every apply, before the ack.
    AfterApplies,
}

/// A pending outbox entry.
pub(crate) struct Entry {
    pub id: String,
    pub published_at: Millis,
    /// The topic's sequence number (FIFO topics).
    pub seq: Option<u64>,
    pub publication: Publication,
}

impl Entry {
    /// An entry as the outbox stores it: `<published_at> <seq (0: none)> <publication JSON>`.
    pub(crate) fn parse(id: String, value: &str) -> Result<Self, EngineError> {
        let corrupt = || EngineError::Internal(format!("corrupt outbox entry {id:?}"));
        let mut parts = value.splitn(3, ' ');
        let published_at = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(corrupt)?;
        let seq: u64 = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(corrupt)?;
        let publication = from_json(parts.next().ok_or_else(corrupt)?.as_bytes())?;
        Ok(Self {
            id,
            published_at,
            seq: (seq != 0).then_some(seq),
            publication,
        })
    }

    /// The copy of delivery `d`, as its queue stores it.
    fn copy(&self, d: usize) -> Result<CopyIn, EngineError> {
        let p = &self.publication;
        let delivery = &p.deliveries[d];
        let rendered = p.render(delivery, self.seq);
        let size = rendered.size();
        let payload_tag = payload_tag(&delivery.message_id, rendered.payload.as_ref());
        Ok(CopyIn {
            apply_id: format!("{}/{}", p.message_id, delivery.subscription_id),
            msg: to_json(&StoredBody {
                message_id: delivery.message_id.clone(),
                body: rendered.body,
                attributes: rendered.attributes,
                group_id: p.group_id.clone(),
                deduplication_id: p.deduplication_id.clone(),
                dead_letter: None,
                payload: rendered.payload,
            })?,
            size,
            sent_at: self.published_at,
            group: p.group_id.clone(),
            payload_tag,
        })
    }
}

/// A delivery of one entry: (entry index, delivery index).
type Slot = (usize, usize);

impl RedisEngine {
    /// Applies the copies of `slots` into `queue` in order.
    async fn apply_slots(
        &self,
        tenant: &sluice_engine::TenantId,
        entries: &[Entry],
        queue: &QueueName,
        slots: &[(Slot, Option<DeliveryFailure>)],
        mode: ApplyMode,
        now: Millis,
    ) -> Result<Vec<Applied>, EngineError> {
        let copies = slots
            .iter()
            .map(|((e, d), _)| entries[*e].copy(*d))
            .collect::<Result<Vec<_>, _>>()?;
        let key = QueueKey::new(tenant.clone(), queue.clone());
        self.fanout_apply(&key, &copies, mode, now).await
    }

    /// Makes every delivery of `entries` (in order per queue; one apply call per queue, the
    /// queues at once), then the dead letters of the refused ones. Answers each delivery's
    /// outcome: `Pending` where the store failed (recovery completes it).
    async fn deliver(
        &self,
        topic: &TopicKey,
        entries: &[Entry],
        now: Millis,
        crash: Option<PublishCrash>,
    ) -> Vec<Vec<DeliveryOutcome>> {
        let mut outcomes: Vec<Vec<DeliveryOutcome>> = entries
            .iter()
            .map(|e| vec![DeliveryOutcome::Pending; e.publication.deliveries.len()])
            .collect();
        if crash == Some(PublishCrash::AfterCommit) {
            return outcomes;
        }
        let settled = self.dead_lettered_before(topic, entries, now).await;
        let mut by_queue: BTreeMap<&QueueName, Vec<(Slot, Option<DeliveryFailure>)>> =
            BTreeMap::new();
        for (e, entry) in entries.iter().enumerate() {
            for (d, delivery) in entry.publication.deliveries.iter().enumerate() {
                if settled.contains(&(e, d)) {
                    // Which refusal sent it there is not known now; nobody is answered it.
                    outcomes[e][d] = DeliveryOutcome::DeadLettered(DeliveryFailure::QueueMissing);
                    continue;
                }
                by_queue
                    .entry(&delivery.queue)
                    .or_default()
                    .push(((e, d), None));
            }
        }
        let queues = match crash {
            Some(PublishCrash::AfterSomeApplies) => 1,
            _ => by_queue.len(),
        };
        let applied = join_all(
            by_queue
                .iter()
                .take(queues)
                .map(|(queue, slots)| async move {
                    let result = self
                        .apply_slots(&topic.tenant, entries, queue, slots, ApplyMode::Copy, now)
                        .await;
                    (*queue, slots, result)
                }),
        )
        .await;
        let mut refused: BTreeMap<&QueueName, Vec<(Slot, Option<DeliveryFailure>)>> =
            BTreeMap::new();
        for (queue, slots, result) in applied {
            let answers = match result {
                Ok(answers) => answers,
                Err(e) => {
                    tracing::warn!(%topic, queue = %queue, "fan-out apply failed: {e}");
                    continue;
                }
            };
            for (((e, d), _), answer) in slots.iter().zip(answers) {
                let delivery = &entries[*e].publication.deliveries[*d];
                outcomes[*e][*d] = match (answer, &delivery.dead_letter_queue) {
                    (Applied::Made, _) => DeliveryOutcome::Delivered,
                    (Applied::Refused(why), Some(dlq)) => {
                        refused.entry(dlq).or_default().push(((*e, *d), Some(why)));
                        continue;
                    }
                    (Applied::Refused(why), None) => DeliveryOutcome::Failed(why),
                };
            }
        }
        if crash == Some(PublishCrash::AfterSomeApplies) {
            return outcomes;
        }
        let dead = join_all(refused.iter().map(|(dlq, slots)| async move {
            let result = self
                .apply_slots(&topic.tenant, entries, dlq, slots, ApplyMode::Dead, now)
                .await;
            (*dlq, slots, result)
        }))
        .await;
        for (dlq, slots, result) in dead {
            let made = match result {
                Ok(answers) => answers,
                Err(e) => {
                    tracing::warn!(%topic, queue = %dlq, "fan-out dead-letter apply failed: {e}");
                    continue;
                }
            };
            for (((e, d), why), answer) in slots.iter().zip(made) {
                let why = why.unwrap_or(DeliveryFailure::QueueMissing);
                outcomes[*e][*d] = match answer {
                    Applied::Made => DeliveryOutcome::DeadLettered(why),
                    Applied::Refused(_) => DeliveryOutcome::Failed(why),
                };
            }
        }
        outcomes
    }

    /// The deliveries of entries past the grace (whose publisher likely died part way) that
    /// are already in their dead-letter queue: one `ZMSCORE` per dead-letter queue. Without
    /// this look a copy whose queue was missing when it was dead-lettered would reach the
    /// queue too if it was created before recovery came (the queue's own refusal markers
    /// cover a full queue and a too large copy, not a missing queue). A failed look only
    /// leaves that narrow case open.
    async fn dead_lettered_before(
        &self,
        topic: &TopicKey,
        entries: &[Entry],
        now: Millis,
    ) -> std::collections::BTreeSet<Slot> {
        let mut by_dlq: BTreeMap<&QueueName, Vec<(Slot, String)>> = BTreeMap::new();
        for (e, entry) in entries.iter().enumerate() {
            if entry.published_at + RECOVERY_GRACE_MS > now {
                continue;
            }
            let p = &entry.publication;
            for (d, delivery) in p.deliveries.iter().enumerate() {
                if let Some(dlq) = &delivery.dead_letter_queue {
                    by_dlq.entry(dlq).or_default().push((
                        (e, d),
                        format!("{}/{}", p.message_id, delivery.subscription_id),
                    ));
                }
            }
        }
        let looks = join_all(by_dlq.into_iter().map(|(dlq, slots)| async move {
            let key = QueueKey::new(topic.tenant.clone(), dlq.clone());
            let mut look = redis::cmd("ZMSCORE");
            look.arg(self.keys.applied_ids(&key));
            for (_, id) in &slots {
                look.arg(id);
            }
            (slots, self.redis.query::<Vec<Option<f64>>>(&look).await)
        }))
        .await;
        let mut settled = std::collections::BTreeSet::new();
        for (slots, scores) in looks {
            match scores {
                Ok(scores) => settled.extend(
                    slots
                        .into_iter()
                        .zip(scores)
                        .filter(|(_, score)| score.is_some())
                        .map(|(slot, _)| slot.0),
                ),
                Err(e) => tracing::warn!(%topic, "looking for earlier dead letters failed: {e}"),
            }
        }
        settled
    }

    /// Acknowledges the entries whose every delivery has its outcome; answers how many
    /// deliveries the entries forgotten by this call had.
    async fn acknowledge(
        &self,
        topic: &TopicKey,
        entries: &[Entry],
        outcomes: &[Vec<DeliveryOutcome>],
    ) -> Result<u64, EngineError> {
        let acks: Vec<Ack> = entries
            .iter()
            .zip(outcomes)
            .filter(|(_, o)| !o.contains(&DeliveryOutcome::Pending))
            .map(|(entry, o)| {
                let deliveries = entry
                    .publication
                    .deliveries
                    .iter()
                    .zip(o)
                    .map(|(d, o)| {
                        // A copy no queue took leaves for good: its payload is released.
                        let release = match o {
                            DeliveryOutcome::Failed(_) => {
                                payload_tag(&d.message_id, entry.publication.payload.as_ref())
                            }
                            _ => String::new(),
                        };
                        (
                            d.subscription_id.clone(),
                            *o == DeliveryOutcome::Delivered,
                            release,
                        )
                    })
                    .collect();
                (entry.id.clone(), deliveries)
            })
            .collect();
        self.fanout_ack(topic, &acks).await
    }

    /// [`Publishing::publish`](sluice_engine::Publishing::publish), optionally stopped at
    /// `crash` (tests play a crash between steps with it).
    pub(crate) async fn publish_until(
        &self,
        topic: &TopicKey,
        publications: Vec<Publication>,
        now: Millis,
        crash: Option<PublishCrash>,
    ) -> Result<Vec<Published>, EngineError> {
        if publications.is_empty() {
            return Ok(Vec::new());
        }
        self.register_fanout(topic, now + RECOVERY_GRACE_MS).await?;
        let committed = self.publish_commit(topic, &publications, now).await?;
        // Durable from here on: whatever fails now is Pending, for recovery to finish.
        let mut entries = Vec::new();
        for (id, value) in committed.pending {
            match Entry::parse(id, &value) {
                Ok(entry) => entries.push(entry),
                // Gone meanwhile (''), or unreadable: recovery reports the latter.
                Err(_) => continue,
            }
        }
        let fifo = topic.is_fifo();
        // On a FIFO topic, our own entries may go only after every earlier one.
        let ours_now = !fifo || committed.complete;
        let mut own = Vec::with_capacity(publications.len());
        for (publication, recorded) in publications.into_iter().zip(&committed.recorded) {
            match &recorded.entry {
                Some(id) if ours_now => {
                    own.push(Some(entries.len()));
                    entries.push(Entry {
                        id: id.clone(),
                        published_at: now,
                        seq: recorded.seq,
                        publication,
                    });
                }
                Some(_) => own.push(None),
                None => own.push(None),
            }
        }
        let outcomes = self.deliver(topic, &entries, now, crash).await;
        if crash.is_none() {
            if let Err(e) = self.acknowledge(topic, &entries, &outcomes).await {
                // The copies are made; recovery acknowledges (and counts) them.
                tracing::warn!(%topic, "fan-out ack failed: {e}");
            }
        }
        let answers = committed
            .recorded
            .into_iter()
            .zip(own)
            .map(|(recorded, at)| {
                let outcomes = match (&recorded.entry, at) {
                    (Some(_), Some(i)) => entries[i]
                        .publication
                        .deliveries
                        .iter()
                        .zip(&outcomes[i])
                        .map(|(d, o)| (d.subscription_id.clone(), *o))
                        .collect(),
                    _ => Vec::new(),
                };
                Published {
                    message_id: recorded.message_id,
                    seq: recorded.seq,
                    duplicate: recorded.duplicate,
                    outcomes,
                }
            })
            .collect();
        Ok(answers)
    }

    /// Finishes every pending entry of a deleted tenant's topic before its outbox goes, once
    /// the tenant's queues are gone: each copy not applied yet fails (its queue and dead-letter
    /// queue are missing), so the ack releases its payload; the copies applied before were
    /// released with their queue. Without this, a payload whose copies were still pending would
    /// never be released. A pass that cannot finish an entry fails the deletion (retried).
    pub(crate) async fn settle_deleted_topic(
        &self,
        topic: &TopicKey,
        now: Millis,
    ) -> Result<(), EngineError> {
        loop {
            let (more, pending) = self.fanout_pending(topic, PENDING_LIMIT).await?;
            let entries: Vec<Entry> = pending
                .into_iter()
                .filter(|(_, value)| !value.is_empty())
                .filter_map(|(id, value)| Entry::parse(id, &value).ok())
                .collect();
            if entries.is_empty() {
                return Ok(());
            }
            let outcomes = self.deliver(topic, &entries, now, None).await;
            self.acknowledge(topic, &entries, &outcomes).await?;
            if outcomes
                .iter()
                .any(|o| o.contains(&DeliveryOutcome::Pending))
            {
                return Err(EngineError::Unavailable(format!(
                    "could not finish the pending fan-outs of {topic}"
                )));
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// Completes the fan-outs of the topics due by `now` (a bounded batch); answers how many
    /// deliveries it made. A topic whose recovery fails is logged and left due for the next
    /// pass; the others are still recovered.
    pub(crate) async fn recover_publications(&self, now: Millis) -> Result<u64, EngineError> {
        let mut made = 0;
        let mut failure = None;
        for (topic_id, token) in self
            .due_for_recovery(RecoveryIndex::Fanouts, now, RECOVERY_BATCH)
            .await?
        {
            match self.recover_topic(&topic_id, &token, now).await {
                Ok(n) => made += n,
                Err(e) => {
                    tracing::warn!(topic = topic_id, "recovering fan-outs failed: {e}");
                    failure = Some(e);
                }
            }
        }
        match failure {
            Some(e) if made == 0 => Err(e),
            _ => Ok(made),
        }
    }

    /// Recovery of one due topic: delivers its entries past the grace in order and
    /// acknowledges them, then files it again for what remains, or drops its due entry if the
    /// outbox is empty and nobody registered the topic since.
    async fn recover_topic(
        &self,
        topic_id: &str,
        token: &str,
        now: Millis,
    ) -> Result<u64, EngineError> {
        let Some(topic) = Keys::parse_topic_id(topic_id) else {
            self.unregister_recovery(RecoveryIndex::Fanouts, topic_id, token)
                .await?;
            return Ok(0);
        };
        let (more, pending) = self.fanout_pending(&topic, PENDING_LIMIT).await?;
        let mut ripe = Vec::new();
        // The first entry within its grace: the later ones wait for it (entries are in order).
        let mut young: Option<Millis> = None;
        let mut unreadable = false;
        for (id, value) in pending {
            if value.is_empty() {
                continue;
            }
            match Entry::parse(id.clone(), &value) {
                Ok(entry) if entry.published_at + RECOVERY_GRACE_MS <= now => {
                    if entry.published_at + FANOUT_APPLIED_WINDOW_MS <= now {
                        // Queues may have forgotten its applies: a copy made before may repeat.
                        tracing::warn!(
                            topic = topic_id,
                            entry = entry.id,
                            "completing a fan-out older than the applied-id window"
                        );
                    }
                    ripe.push(entry)
                }
                Ok(entry) => {
                    young = Some(entry.published_at + RECOVERY_GRACE_MS);
                    break;
                }
                // Kept for an operator to look at; it must not block the topic's others.
                Err(e) => {
                    tracing::error!(topic = topic_id, entry = id, "unreadable outbox entry: {e}");
                    unreadable = true;
                }
            }
        }
        let mut made = 0;
        if !ripe.is_empty() {
            let outcomes = self.deliver(&topic, &ripe, now, None).await;
            made = self.acknowledge(&topic, &ripe, &outcomes).await?;
            if outcomes
                .iter()
                .any(|o| o.contains(&DeliveryOutcome::Pending))
            {
                // Left due as it is: the next pass tries again.
                return Ok(made);
            }
            tracing::warn!(
                topic = topic_id,
                entries = ripe.len(),
                made,
                "completed interrupted fan-outs"
            );
        }
        // Look again: for the young entry, at once if more remain than were read, and after a
        // grace for unreadable ones (so they do not make every pass look).
        let again = if more {
            Some(now)
        } else if unreadable {
            Some(young.map_or(now + RECOVERY_GRACE_MS, |y| y.min(now + RECOVERY_GRACE_MS)))
        } else {
            young
        };
        match again {
            Some(at) => self.register_fanout(&topic, at).await?,
            None => {
                self.unregister_recovery(RecoveryIndex::Fanouts, topic_id, token)
                    .await?
            }
        }
        Ok(made)
    }
}
