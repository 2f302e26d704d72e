//! Dead letters: moving a received message to its queue's dead-letter queue on a consumer's
//! word (the automatic move after `max_receive_count` receives happens inside the engine's
//! receive), with the rules of the REST contract for the reason.

use crate::metrics::Event;
use crate::queues::queue_key;
use crate::{ServiceError, Services};
use sluice_engine::{DeadLetterRefusal, TenantId};

/// The longest reason a consumer may give, in characters.
const MAX_REASON_CHARS: usize = 256;

impl Services {
    /// Moves the message received under `receipt_handle` to the queue's dead-letter queue at
    /// once, recording `reason` (1–256 characters): a permanent failure needs no more retries.
    /// A queue without a redrive policy (or whose dead-letter queue is gone) is a `Conflict`;
    /// a handle of an earlier delivery, or of a message already deleted, is stale.
    pub async fn dead_letter_message(
        &self,
        tenant: &TenantId,
        queue: &str,
        receipt_handle: &str,
        reason: &str,
    ) -> Result<(), ServiceError> {
        let key = queue_key(tenant, queue)?;
        let chars = reason.chars().count();
        if chars == 0 || chars > MAX_REASON_CHARS {
            return Err(ServiceError::invalid(
                "reason",
                format!("must be 1-{MAX_REASON_CHARS} characters, got {chars}"),
            ));
        }
        if reason.chars().any(char::is_control) {
            return Err(ServiceError::invalid(
                "reason",
                "must not contain control characters",
            ));
        }
        let answer = self
            .engine
            .dead_letter(&key, receipt_handle, reason, self.clock.now())
            .await?;
        match answer {
            Ok(()) => {
                self.metric_labels.count(&key, Event::DeadLettered, 1);
                Ok(())
            }
            Err(DeadLetterRefusal::Handle(error)) => Err(error.into()),
            Err(DeadLetterRefusal::NoRedrivePolicy) => Err(ServiceError::Conflict(format!(
                "{} has no redrive_policy, so there is no dead-letter queue to move to",
                key.name
            ))),
            Err(DeadLetterRefusal::DeadLetterQueueMissing) => Err(ServiceError::Conflict(format!(
                "the dead-letter queue of {} does not exist",
                key.name
            ))),
        }
    }
}
