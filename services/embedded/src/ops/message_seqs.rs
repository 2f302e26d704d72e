//! `message_seqs`: the seqs of a queue's stored messages in order, from the in-memory index.

use crate::EmbeddedEngine;
use sluice_engine::{EngineError, QueueKey, SeqScan};

impl EmbeddedEngine {
    /// Answers from memory; every stored message is in the index, so the scan always reaches
    /// as far as it answers (or the end).
    pub(crate) async fn message_seqs(
        &self,
        key: &QueueKey,
        after: u64,
        limit: usize,
    ) -> Result<SeqScan, EngineError> {
        let entry = self.queue(key)?;
        let state = entry.live()?;
        let last_seq = state.next_seq().saturating_sub(1);
        let seqs = state.seqs_after(after, limit);
        let scanned_to = if seqs.len() < limit {
            last_seq.max(after)
        } else {
            seqs.last().copied().unwrap_or(after)
        };
        Ok(SeqScan {
            seqs,
            scanned_to,
            last_seq,
        })
    }
}
