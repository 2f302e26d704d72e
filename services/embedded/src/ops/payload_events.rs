//! Reading and acknowledging the payload events the other operations record.

use crate::EmbeddedEngine;
use sluice_engine::{EngineError, PayloadEventBatch};

impl EmbeddedEngine {
    /// No operation records events yet: nothing to read.
    pub(crate) async fn payload_events(
        &self,
        _limit: usize,
    ) -> Result<PayloadEventBatch, EngineError> {
        Ok(PayloadEventBatch::default())
    }

    /// Nothing was read, so there is nothing to forget.
    pub(crate) async fn ack_payload_events(
        &self,
        _batch: &PayloadEventBatch,
    ) -> Result<(), EngineError> {
        Ok(())
    }
}
