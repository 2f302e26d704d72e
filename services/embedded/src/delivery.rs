//! What the message operations share to hand messages out and take handles back: reading
//! picked messages from disk, checking that a receipt handle is this queue's, and converting
//! timeouts to milliseconds.

use crate::message::Picked;
use crate::store::StoredParts;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, HandleError, HandleKey, Millis, ReceiptHandle, StoredMessage};

/// A duration in seconds, as the engine's millisecond clock counts it.
pub(crate) fn seconds(s: u32) -> Millis {
    Millis::from(s) * 1000
}

/// Decodes a handle, checks its tag and that it was issued by this queue incarnation.
pub(crate) fn own_handle(
    text: &str,
    key: &HandleKey,
    uid: u64,
) -> Result<ReceiptHandle, HandleError> {
    match ReceiptHandle::decode(text, key) {
        Some(h) if h.queue_uid == uid => Ok(h),
        _ => Err(HandleError::Invalid),
    }
}

impl EmbeddedEngine {
    /// Reads the stored parts of picked messages; drops any deleted since they were picked.
    pub(crate) fn load_messages(
        &self,
        uid: u64,
        picked: &[Picked],
    ) -> Result<Vec<(Picked, StoredMessage)>, EngineError> {
        let seqs: Vec<u64> = picked.iter().map(|p| p.seq).collect();
        let records = self.store.read_messages(uid, &seqs)?;
        Ok(picked
            .iter()
            .zip(records)
            .filter_map(|(p, record)| {
                let StoredParts {
                    meta,
                    body,
                    payload,
                } = record?;
                let message = StoredMessage {
                    payload,
                    message_id: meta.message_id,
                    body: body.body,
                    attributes: body.attributes,
                    sent_at: meta.sent_at,
                    receive_count: p.state.receive_count,
                    first_received_at: p.state.first_received_at(),
                    group_id: meta.group_id,
                    deduplication_id: meta.deduplication_id,
                    seq: p.seq,
                    dead_letter: meta.dead_letter,
                };
                Some((*p, message))
            })
            .collect())
    }
}
