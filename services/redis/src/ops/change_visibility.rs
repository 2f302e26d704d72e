//! Changing the visibility timeout of a batch of received messages (`change_visibility.lua`).

use super::calls::{not_found, seconds};
use super::handles::{delivery_token, handle_error, member};
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, HandleError, Millis, QueueKey, ReceiptHandle};

impl RedisEngine {
    pub(crate) async fn change_visibility(
        &self,
        key: &QueueKey,
        entries: &[(String, u32)],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        let queue_id = Keys::queue_id(key);
        let mut call = self.queue_call(&scripts::CHANGE_VISIBILITY, key);
        call.arg(now)
            .arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id));
        let decoded: Vec<Option<(ReceiptHandle, u32)>> = entries
            .iter()
            .map(|(h, t)| ReceiptHandle::decode(h, &self.handle_key).map(|h| (h, *t)))
            .collect();
        for (h, timeout) in decoded.iter().flatten() {
            call.arg(h.queue_uid.to_string())
                .arg(member(h.seq))
                .arg(delivery_token(h.delivery))
                .arg(seconds(*timeout));
        }
        let mut reply = not_found(self.run_queue(key, &call, false).await?)?;
        let mut woke = false;
        let answers = decoded
            .into_iter()
            .map(|entry| match entry {
                None => Ok(Err(HandleError::Invalid)),
                Some((_, timeout)) => {
                    let answer = handle_error(reply.int()?);
                    woke |= answer.is_ok() && timeout == 0;
                    Ok(answer)
                }
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        if woke {
            self.wakers.wake(&queue_id);
        }
        Ok(answers)
    }
}
