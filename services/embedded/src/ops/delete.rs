//! `delete`: removes messages by receipt handle from the index and from disk.

use crate::delivery::own_handle;
use crate::store::WriteOp;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, HandleError, Millis, QueueKey};

impl EmbeddedEngine {
    /// Answers each handle once the removals are durable.
    pub(crate) async fn delete(
        &self,
        key: &QueueKey,
        handles: &[String],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        let entry = self.queue(key)?;
        let (answers, pending) = {
            let mut state = entry.live()?;
            let mut removed = Vec::new();
            let answers: Vec<Result<(), HandleError>> = handles
                .iter()
                .map(|text| {
                    let handle = own_handle(text, &self.handle_key, entry.uid)?;
                    if state.delete(&handle, now)? {
                        removed.push(handle.seq);
                    }
                    Ok(())
                })
                .collect();
            let pending = if !removed.is_empty() {
                Some(self.store.submit(vec![WriteOp::Delete {
                    uid: entry.uid,
                    seqs: removed,
                }]))
            } else if self.store.is_degraded() {
                // A retry of a delete whose commit failed finds the message gone from the index
                // while its removal is still carried: answer once a commit has written it.
                Some(self.store.submit(Vec::new()))
            } else {
                None
            };
            (answers, pending)
        };
        if let Some(pending) = pending {
            pending.wait().await?;
        }
        Ok(answers)
    }
}
