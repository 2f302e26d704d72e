//! The intent step of a move (`transfer_out.lua`): in the source queue's slot, the message
//! leaves every structure of its queue and its full record is kept under the transfer id.

use super::handles::{delivery_token, member};
use crate::codec::from_json;
use crate::keys::Keys;
use crate::{scripts, RedisEngine};
use serde::Deserialize;
use sluice_engine::{EngineError, Millis, QueueKey, ReceiptHandle};

/// What a move's intent records: everything a revert needs to put the message back as it was,
/// and everything the apply needs to insert it at its destination. Numbers stay the text the
/// script read, so nothing is rounded on the way.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Intent {
    /// The message's JSON at the source, as stored.
    pub msg: String,
    /// Its `sent_at` at the source.
    pub sent: String,
    /// Its receive record at the source (`count:first:delivery`), if it was received.
    pub rx: Option<String>,
    /// Its group (FIFO sources).
    pub grp: Option<String>,
    /// The destination queue; empty: the source its dead-letter record names.
    pub dest: String,
    /// The dead-letter reason to set; `None`: clear the record (a redrive).
    pub reason: Option<String>,
    /// When the intent was recorded (the move's time).
    pub at: String,
}

fn number(text: &str, what: &str) -> Result<Millis, EngineError> {
    text.parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n >= 0.0)
        .map(|n| n as Millis)
        .ok_or_else(|| EngineError::Internal(format!("corrupt move intent: {what} {text:?}")))
}

impl Intent {
    pub(crate) fn moved_at(&self) -> Result<Millis, EngineError> {
        number(&self.at, "time")
    }

    pub(crate) fn sent_at(&self) -> Result<Millis, EngineError> {
        number(&self.sent, "sent_at")
    }

    /// The receive count at the source when it left.
    pub(crate) fn receive_count(&self) -> u32 {
        self.rx
            .as_deref()
            .and_then(|rx| rx.split(':').next())
            .and_then(|count| count.parse().ok())
            .unwrap_or(0)
    }
}

/// Which messages an intent call names, and what each must still satisfy.
pub(crate) enum Selection<'a> {
    /// A consumer's handle: the delivery it names must be the latest.
    Handle(&'a ReceiptHandle),
    /// Receive's moves: still receivable and received at least this many times.
    Exhausted { seqs: &'a [u64], min_count: u32 },
    /// Redrive: whatever their state.
    Seqs(&'a [u64]),
}

/// Why a message named in an intent call did not leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotOut {
    /// The handle names another incarnation of the queue.
    Invalid,
    /// The handle is an earlier delivery's, or the message is gone.
    Gone,
    /// Received meanwhile: it no longer qualifies for an automatic move.
    Unqualified,
}

impl RedisEngine {
    /// Records intents for the selected messages (one fresh transfer id each) and removes them
    /// from `key`. The caller registers the queue in the due index first. `None`: no such
    /// queue.
    pub(crate) async fn transfer_out(
        &self,
        key: &QueueKey,
        selection: Selection<'_>,
        destination: Option<&str>,
        reason: Option<&str>,
        now: Millis,
    ) -> Result<Option<Vec<Result<(String, Intent), NotOut>>>, EngineError> {
        let queue_id = Keys::queue_id(key);
        let mut call = self.queue_call(&scripts::TRANSFER_OUT, key);
        call.arg(now)
            .arg(self.keys.wake_channel())
            .arg(self.wakers.payload(&queue_id));
        let mut ids = Vec::new();
        let fresh_id = || hex::encode(rand::random::<[u8; 16]>());
        match selection {
            Selection::Handle(h) => {
                call.arg("handle").arg("");
                push_tail(&mut call, destination, reason);
                let id = fresh_id();
                call.arg(&id)
                    .arg(h.queue_uid.to_string())
                    .arg(member(h.seq))
                    .arg(delivery_token(h.delivery));
                ids.push(id);
            }
            Selection::Exhausted { seqs, min_count } => {
                call.arg("auto").arg(min_count);
                push_tail(&mut call, destination, reason);
                for seq in seqs {
                    let id = fresh_id();
                    call.arg(&id).arg(member(*seq));
                    ids.push(id);
                }
            }
            Selection::Seqs(seqs) => {
                call.arg("seq").arg("");
                push_tail(&mut call, destination, reason);
                for seq in seqs {
                    let id = fresh_id();
                    call.arg(&id).arg(member(*seq));
                    ids.push(id);
                }
            }
        }
        let Some(mut reply) = self.run_queue(key, &call, true).await? else {
            return Ok(None);
        };
        let mut answers = Vec::with_capacity(ids.len());
        for id in ids {
            let code = reply.int()?;
            let record = reply.bytes()?;
            answers.push(match code {
                0 => Ok((id, from_json::<Intent>(&record)?)),
                1 => Err(NotOut::Invalid),
                3 => Err(NotOut::Unqualified),
                _ => Err(NotOut::Gone),
            });
        }
        if key.name.is_fifo() {
            // A group whose head left may deliver now.
            self.wakers.wake(&queue_id);
        }
        Ok(Some(answers))
    }
}

fn push_tail(call: &mut crate::conn::Call, destination: Option<&str>, reason: Option<&str>) {
    call.arg(destination.unwrap_or_default())
        .arg(reason.unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_read_what_the_script_writes() {
        let json = br#"{"msg":"{\"i\":\"x\",\"b\":\"\\u00e9\\/\"}","seq":"0000000000000007","vis":"5","rcv":"5","sent":"1767225600000","rx":"3:10:4-7","dest":"","at":"1767225601000"}"#;
        let intent: Intent = from_json(json).unwrap();
        assert_eq!(intent.receive_count(), 3);
        assert_eq!(intent.sent_at().unwrap(), 1_767_225_600_000);
        assert_eq!(intent.moved_at().unwrap(), 1_767_225_601_000);
        assert_eq!(intent.reason, None);
        let body: crate::codec::StoredBody = from_json(intent.msg.as_bytes()).unwrap();
        assert_eq!(body.body, "é/");
    }
}
