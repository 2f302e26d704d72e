//! `dead_letter`: moves a received message to its queue's dead-letter queue at once, on a
//! consumer's word (the move itself is `transfer.rs`'s).

use crate::delivery::own_handle;
use crate::ops::transfer::{Locked, Move};
use crate::EmbeddedEngine;
use sluice_engine::{DeadLetter, DeadLetterRefusal, EngineError, HandleError, Millis, QueueKey};

impl EmbeddedEngine {
    /// Answers once the move is durable. The handle is checked first (as a delete checks it),
    /// then the policy, then its dead-letter queue.
    pub(crate) async fn dead_letter(
        &self,
        key: &QueueKey,
        handle: &str,
        reason: &str,
        now: Millis,
    ) -> Result<Result<(), DeadLetterRefusal>, EngineError> {
        let entry = self.queue(key)?;
        let handle = match own_handle(handle, &self.handle_key, entry.uid) {
            Ok(handle) => handle,
            Err(e) => return Ok(Err(e.into())),
        };
        let policy = {
            let state = entry.live()?;
            if let Err(e) = state.check_current(&handle, now) {
                return Ok(Err(e.into()));
            }
            match &state.config.redrive_policy {
                Some(policy) => policy.clone(),
                None => return Ok(Err(DeadLetterRefusal::NoRedrivePolicy)),
            }
        };
        let dlq_key = QueueKey::new(key.tenant.clone(), policy.dead_letter_queue.clone());
        let Ok(dlq) = self.queue(&dlq_key) else {
            return Ok(Err(DeadLetterRefusal::DeadLetterQueueMissing));
        };
        let pending = {
            let mut locked = Locked::lock(&entry, &dlq);
            let source = locked.source();
            if source.deleted {
                return Err(EngineError::QueueNotFound);
            }
            // Checked again under the lock: a delivery or a delete may have come in between.
            if let Err(e) = source.check_current(&handle, now) {
                return Ok(Err(e.into()));
            }
            match &source.config.redrive_policy {
                None => return Ok(Err(DeadLetterRefusal::NoRedrivePolicy)),
                // Changed meanwhile to name another queue: that one is not the one locked.
                Some(p) if p.dead_letter_queue != policy.dead_letter_queue => {
                    return Ok(Err(DeadLetterRefusal::DeadLetterQueueMissing));
                }
                Some(_) => {}
            }
            if locked.destination().deleted {
                return Ok(Err(DeadLetterRefusal::DeadLetterQueueMissing));
            }
            let Some(taken) = locked.source().take(handle.seq, now) else {
                return Ok(Err(HandleError::Stale.into()));
            };
            let dead_letter = DeadLetter {
                source_queue: key.name.clone(),
                reason: reason.to_owned(),
                receive_count: taken.state.receive_count,
                moved_at: now,
            };
            let moves = vec![Move {
                taken,
                dead_letter: Some(dead_letter),
            }];
            self.submit_transfer(&entry, &dlq, locked.destination(), moves, now)
        };
        pending.wait().await?;
        Ok(Ok(()))
    }
}
