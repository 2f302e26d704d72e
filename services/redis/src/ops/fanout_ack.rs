//! The ack of a fan-out (`fanout_ack.lua`): in the topic's slot, forgets outbox entries whose
//! deliveries were all made and counts them, once per entry whoever acknowledges.

use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, TopicKey};

/// One entry to acknowledge: its id and, per delivery, the subscription, whether the copy
/// reached the subscription's queue (`false`: counted as failed) and the payload tag of a copy
/// no queue took (released with the entry; empty: nothing to release).
pub(crate) type Ack = (String, Vec<(String, bool, String)>);

impl RedisEngine {
    /// Acknowledges `acks`; answers how many deliveries the entries forgotten now had.
    pub(crate) async fn fanout_ack(
        &self,
        topic: &TopicKey,
        acks: &[Ack],
    ) -> Result<u64, EngineError> {
        if acks.is_empty() {
            return Ok(0);
        }
        let mut call = self.topic_call(&scripts::FANOUT_ACK, topic);
        for (entry, deliveries) in acks {
            call.arg(entry).arg(deliveries.len());
            for (subscription, delivered, release) in deliveries {
                call.arg(subscription)
                    .arg(if *delivered { "delivered" } else { "failed" })
                    .arg(release);
            }
        }
        let reply = self.redis.eval(&call, false).await;
        // A copy no queue took released its payload into the topic's log.
        self.topic_payload_log_touched(topic);
        match reply? {
            redis::Value::Int(n) => u64::try_from(n)
                .map_err(|_| EngineError::Internal("fanout_ack: negative count".into())),
            other => Err(EngineError::Internal(format!(
                "unexpected reply from Redis: expected an integer, got {other:?}"
            ))),
        }
    }
}
