//! `change_visibility`: moves in-flight messages' visibility, in memory only.

use crate::delivery::{own_handle, seconds};
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, HandleError, Millis, QueueKey};

impl EmbeddedEngine {
    /// Answers each handle; nothing is written to disk.
    pub(crate) async fn change_visibility(
        &self,
        key: &QueueKey,
        entries: &[(String, u32)],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        let entry = self.queue(key)?;
        let mut state = entry.live()?;
        Ok(entries
            .iter()
            .map(|(text, timeout)| {
                let handle = own_handle(text, &self.handle_key, entry.uid)?;
                state.change_visibility(&handle, seconds(*timeout), now)
            })
            .collect())
    }
}
