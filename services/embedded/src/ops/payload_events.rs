//! `payload_events` / `ack_payload_events`: reading and forgetting the payload events that the
//! message operations record in the `payload_events` table, in the transaction of the change
//! each describes (`store.rs` says which operation records what).
//!
//! A batch's cursor is the highest event seq it holds (one element, decimal; empty for an
//! empty batch). Seqs are handed out by the commit thread in commit order and never reused, so
//! a read sees a prefix of the log and acknowledging "everything up to the cursor" forgets only
//! events the batch held: twice, or after a concurrent reader's larger acknowledgement, it
//! drops nothing else.

use crate::store::WriteOp;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, PayloadEventBatch};

impl EmbeddedEngine {
    pub(crate) async fn payload_events(
        &self,
        limit: usize,
    ) -> Result<PayloadEventBatch, EngineError> {
        let events = self.store.read_payload_events(limit)?;
        let cursor = events
            .last()
            .map(|(seq, _)| vec![seq.to_string()])
            .unwrap_or_default();
        Ok(PayloadEventBatch {
            events: events.into_iter().map(|(_, event)| event).collect(),
            cursor,
        })
    }

    pub(crate) async fn ack_payload_events(
        &self,
        batch: &PayloadEventBatch,
    ) -> Result<(), EngineError> {
        let Some(upto) = batch
            .cursor
            .iter()
            .filter_map(|c| c.parse::<u64>().ok())
            .max()
        else {
            return Ok(());
        };
        self.store
            .submit(vec![WriteOp::AckPayloadEvents { upto }])
            .wait()
            .await
    }
}
