//! Moves of messages between two queues (dead letters and redrive), which in a cluster live
//! in different slots: no script may touch both, so a move is a transfer in steps, each one
//! atomic in one slot, made safe against a crash between any two of them:
//!
//! 1. **Register** the source queue in the due index (`{P}:transfers`, registries' slot),
//!    scored by when recovery should look (now + [`RECOVERY_GRACE_MS`]).
//! 2. **Intent** (`transfer_out.lua`, source slot): the message leaves every structure of the
//!    source and its full record is kept under a fresh random transfer id in the source's
//!    `out` hash.
//! 3. **Apply** (`transfer_apply.lua`, destination slot): the message is inserted as new,
//!    unless this transfer id was applied there before (idempotent). A missing destination
//!    answers so, and the caller runs the **revert** (`transfer_revert.lua`, source slot)
//!    instead: the message goes back exactly as it was and the intent is forgotten.
//! 4. **Ack** (one `HDEL`, source slot): the intent is forgotten.
//!
//! A crash after 1 leaves a spurious due entry (recovery finds no intent and drops it); after
//! 2, an intent and its due entry, which [`recover`](RedisEngine::recover_transfers) completes
//! (apply then ack, or revert); after 3, an applied intent, which recovery applies again (a
//! no-op: the id is known) and acknowledges. Recovery only completes intents older than the
//! grace, so it does not race a live move, and every step repeats harmlessly, so several
//! gateways may recover at once.
//!
//! A source deleted with intents pending takes them with it; the payload of such a message is
//! settled in the destination's slot (`transfer_settle.rs`, see `payload_events.rs`), which
//! voids the transfer id there if the apply has not run, so a mover still holding the intent
//! applies nothing afterwards.

use super::transfer_apply::Arrival;
use super::transfer_out::{Intent, NotOut, Selection};
use super::transfer_registry::RecoveryIndex;
use crate::codec::{from_json, to_json, StoredBody};
use crate::keys::Keys;
use crate::RedisEngine;
use sluice_engine::{
    message_size_with_payload, DeadLetter, DeadLetterRefusal, EngineError, HandleError, Millis,
    QueueKey, QueueName, ReceiptHandle, RedriveOutcome,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// How old an intent must be before recovery completes it: a live move finishes well within
/// this, so recovery does not race it (and it absorbs clock differences between gateways).
pub const RECOVERY_GRACE_MS: Millis = 5_000;

/// How many due queues one recovery pass looks at.
const RECOVERY_BATCH: usize = 64;

/// How long a receive remembers that a queue's dead-letter queue is missing, so that it
/// delivers as usual instead of trying (and reverting) a move on every call.
pub(crate) const MISSING_DLQ_TTL: Duration = Duration::from_secs(1);

/// Where a move stops, for tests that play a crash between its steps.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// After the intent is recorded, before the apply.
    AfterIntent,
    /// After the apply, before the ack.
    AfterApply,
}

/// What became of one recorded intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Completion {
    Moved,
    DestinationMissing,
    /// Stopped at a crash point (tests only).
    Interrupted,
}

impl RedisEngine {
    /// Carries out intents recorded in `source`: groups them by destination, applies each
    /// group, reverts those whose destination is missing and acknowledges the others. Answers
    /// each intent's completion, in order, and how many intents this call finished (restored
    /// or forgot): what recovery counts, exactly once per move across gateways.
    async fn complete(
        &self,
        source: &QueueKey,
        intents: &[(String, Intent)],
        now: Millis,
        crash: Option<CrashPoint>,
    ) -> Result<(Vec<Completion>, u64), EngineError> {
        let mut outcome = vec![Completion::DestinationMissing; intents.len()];
        if crash == Some(CrashPoint::AfterIntent) {
            return Ok((vec![Completion::Interrupted; intents.len()], 0));
        }
        let mut by_destination: BTreeMap<QueueName, Vec<(usize, Arrival)>> = BTreeMap::new();
        for (i, (id, intent)) in intents.iter().enumerate() {
            let mut body: StoredBody = from_json(intent.msg.as_bytes())?;
            let destination = match intent.dest.as_str() {
                "" => body.dead_letter.as_ref().map(|d| d.source_queue.clone()),
                name => QueueName::parse(name).ok(),
            };
            let Some(destination) = destination else {
                continue;
            };
            let moved_at = intent.moved_at()?;
            body.dead_letter = intent.reason.as_ref().map(|reason| DeadLetter {
                source_queue: source.name.clone(),
                reason: reason.clone(),
                receive_count: intent.receive_count(),
                moved_at,
            });
            // Into a FIFO queue a move restarts retention: it joins the end of the queue.
            let sent_at = if destination.is_fifo() {
                moved_at
            } else {
                intent.sent_at()?
            };
            by_destination.entry(destination).or_default().push((
                i,
                Arrival {
                    transfer_id: id.clone(),
                    size: message_size_with_payload(
                        &body.body,
                        &body.attributes,
                        body.payload.as_ref(),
                    ),
                    payload_tag: super::payload_events::payload_tag(
                        &body.message_id,
                        body.payload.as_ref(),
                    ),
                    msg: to_json(&body)?,
                    sent_at,
                    group: intent.grp.clone(),
                },
            ));
        }
        for (name, arrivals) in by_destination {
            let destination = QueueKey::new(source.tenant.clone(), name);
            let (indexes, arrivals): (Vec<usize>, Vec<Arrival>) = arrivals.into_iter().unzip();
            match self.transfer_apply(&destination, &arrivals, now).await? {
                // Inserted now or by an earlier apply of the same transfer: moved either way.
                Ok(_) => {
                    for i in indexes {
                        outcome[i] = Completion::Moved;
                    }
                }
                // Gone: a message applied before the deletion went with it (moved, then
                // deleted); the others go back to the source.
                Err(applied) => {
                    for (i, applied) in indexes.into_iter().zip(applied) {
                        if applied {
                            outcome[i] = Completion::Moved;
                        }
                    }
                }
            }
        }
        if crash == Some(CrashPoint::AfterApply) {
            return Ok((vec![Completion::Interrupted; intents.len()], 0));
        }
        let ids = |wanted: Completion| -> Vec<&str> {
            intents
                .iter()
                .zip(&outcome)
                .filter(|(_, c)| **c == wanted)
                .map(|((id, _), _)| id.as_str())
                .collect()
        };
        let mut done = self
            .transfer_revert(source, &ids(Completion::DestinationMissing), now)
            .await?;
        done += self.transfer_ack(source, &ids(Completion::Moved)).await?;
        Ok((outcome, done))
    }

    /// Completes intents read from `source` earlier (tests: a mover that outlives its source).
    pub(crate) async fn complete_held(
        &self,
        source: &QueueKey,
        intents: &[(String, Vec<u8>)],
        now: Millis,
    ) -> Result<u64, EngineError> {
        let intents = intents
            .iter()
            .map(|(id, json)| Ok((id.clone(), from_json::<Intent>(json)?)))
            .collect::<Result<Vec<_>, EngineError>>()?;
        let (_, done) = self.complete(source, &intents, now, None).await?;
        Ok(done)
    }

    /// Receive's moves: the messages receive.lua answered as exhausted go to the policy's
    /// dead-letter queue. Answers how many moved.
    pub(crate) async fn move_exhausted(
        &self,
        key: &QueueKey,
        seqs: &[u64],
        now: Millis,
    ) -> Result<u64, EngineError> {
        let Some(policy) = self
            .queue_config(key)
            .await?
            .and_then(|config| config.redrive_policy)
        else {
            return Ok(0);
        };
        self.register_transfers(&Keys::queue_id(key), now + RECOVERY_GRACE_MS)
            .await?;
        let selection = Selection::Exhausted {
            seqs,
            min_count: policy.max_receive_count,
        };
        let Some(out) = self
            .transfer_out(
                key,
                selection,
                Some(policy.dead_letter_queue.as_str()),
                Some(DeadLetter::MAX_RECEIVE_COUNT_EXCEEDED),
                now,
            )
            .await?
        else {
            return Err(EngineError::QueueNotFound);
        };
        let intents: Vec<(String, Intent)> = out.into_iter().flatten().collect();
        let (completions, _) = self.complete(key, &intents, now, None).await?;
        if completions.contains(&Completion::DestinationMissing) {
            self.missing_dlqs.insert(key.clone(), ());
        }
        Ok(completions
            .iter()
            .filter(|c| **c == Completion::Moved)
            .count() as u64)
    }

    /// [`Transfers::dead_letter`](sluice_engine::Transfers::dead_letter), optionally stopped
    /// at `crash` (tests play a crash between steps with it).
    pub(crate) async fn dead_letter_until(
        &self,
        key: &QueueKey,
        handle: &str,
        reason: &str,
        now: Millis,
        crash: Option<CrashPoint>,
    ) -> Result<Result<(), DeadLetterRefusal>, EngineError> {
        let Some(config) = self.queue_config(key).await? else {
            return Err(EngineError::QueueNotFound);
        };
        let Some(handle) = ReceiptHandle::decode(handle, &self.handle_key) else {
            return Ok(Err(HandleError::Invalid.into()));
        };
        let Some(policy) = config.redrive_policy else {
            return Ok(Err(DeadLetterRefusal::NoRedrivePolicy));
        };
        let dlq = QueueKey::new(key.tenant.clone(), policy.dead_letter_queue.clone());
        if self.queue_config(&dlq).await?.is_none() {
            return Ok(Err(DeadLetterRefusal::DeadLetterQueueMissing));
        }
        self.register_transfers(&Keys::queue_id(key), now + RECOVERY_GRACE_MS)
            .await?;
        let out = self
            .transfer_out(
                key,
                Selection::Handle(&handle),
                Some(policy.dead_letter_queue.as_str()),
                Some(reason),
                now,
            )
            .await?
            .ok_or(EngineError::QueueNotFound)?;
        let intents = match out.into_iter().next() {
            Some(Ok(intent)) => vec![intent],
            Some(Err(NotOut::Invalid)) => return Ok(Err(HandleError::Invalid.into())),
            _ => return Ok(Err(HandleError::Stale.into())),
        };
        let (completions, _) = self.complete(key, &intents, now, crash).await?;
        Ok(match completions.first() {
            Some(Completion::DestinationMissing) => Err(DeadLetterRefusal::DeadLetterQueueMissing),
            _ => Ok(()),
        })
    }

    pub(crate) async fn redrive(
        &self,
        from: &QueueKey,
        seqs: &[u64],
        destination: Option<&QueueName>,
        now: Millis,
    ) -> Result<Vec<RedriveOutcome>, EngineError> {
        if seqs.is_empty() {
            return match self.queue_config(from).await? {
                Some(_) => Ok(Vec::new()),
                None => Err(EngineError::QueueNotFound),
            };
        }
        self.register_transfers(&Keys::queue_id(from), now + RECOVERY_GRACE_MS)
            .await?;
        let out = self
            .transfer_out(
                from,
                Selection::Seqs(seqs),
                destination.map(QueueName::as_str),
                None,
                now,
            )
            .await?
            .ok_or(EngineError::QueueNotFound)?;
        let mut answers = vec![RedriveOutcome::Gone; out.len()];
        let mut positions = Vec::new();
        let mut intents = Vec::new();
        for (i, answer) in out.into_iter().enumerate() {
            if let Ok(intent) = answer {
                positions.push(i);
                intents.push(intent);
            }
        }
        let (completions, _) = self.complete(from, &intents, now, None).await?;
        for (i, completion) in positions.into_iter().zip(completions) {
            answers[i] = match completion {
                Completion::DestinationMissing => RedriveOutcome::DestinationMissing,
                _ => RedriveOutcome::Moved,
            };
        }
        Ok(answers)
    }

    /// Completes intents older than the grace in the queues due by `now` (a bounded batch);
    /// answers how many it finished (moved or restored). A queue whose recovery fails is
    /// logged and left due for the next pass; the others are still recovered.
    pub(crate) async fn recover_transfers(&self, now: Millis) -> Result<u64, EngineError> {
        let mut completed = 0;
        let mut failure = None;
        for (queue_id, token) in self
            .due_for_recovery(RecoveryIndex::Transfers, now, RECOVERY_BATCH)
            .await?
        {
            match self.recover_queue(&queue_id, &token, now).await {
                Ok(done) => completed += done,
                Err(e) => {
                    tracing::warn!(queue = queue_id, "recovering moves failed: {e}");
                    failure = Some(e);
                }
            }
        }
        match failure {
            Some(e) if completed == 0 => Err(e),
            _ => Ok(completed),
        }
    }

    /// Recovery of one due queue: completes its ripe intents, then files it again for those
    /// still within their grace, or drops its due entry if nobody registered it since.
    async fn recover_queue(
        &self,
        queue_id: &str,
        token: &str,
        now: Millis,
    ) -> Result<u64, EngineError> {
        let Some(key) = Keys::parse_queue_id(queue_id) else {
            self.unregister_recovery(RecoveryIndex::Transfers, queue_id, token)
                .await?;
            return Ok(0);
        };
        let mut ripe = Vec::new();
        let mut youngest: Option<Millis> = None;
        for (id, json) in self.transfer_intents(&key).await? {
            let read = from_json::<Intent>(&json).and_then(|i| Ok((i.moved_at()?, i)));
            match read {
                Ok((at, intent)) if at + RECOVERY_GRACE_MS <= now => ripe.push((id, intent)),
                Ok((at, _)) => youngest = youngest.max(Some(at)),
                // Kept for an operator to look at; it must not block the queue's other moves.
                Err(e) => tracing::error!(
                    queue = queue_id,
                    transfer = id,
                    "unreadable move intent: {e}"
                ),
            }
        }
        let mut completed = 0;
        if !ripe.is_empty() {
            let (_, done) = self.complete(&key, &ripe, now, None).await?;
            completed = done;
            tracing::warn!(
                queue = queue_id,
                intents = ripe.len(),
                completed,
                "completed interrupted moves"
            );
        }
        match youngest {
            // Still within their grace: look again once it ends.
            Some(at) => {
                self.register_transfers(queue_id, at + RECOVERY_GRACE_MS)
                    .await?
            }
            None => {
                self.unregister_recovery(RecoveryIndex::Transfers, queue_id, token)
                    .await?
            }
        }
        Ok(completed)
    }
}
