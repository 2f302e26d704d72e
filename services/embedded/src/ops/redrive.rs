//! `redrive`: moves messages out of a queue (typically a dead-letter queue) by seq, each to a
//! named queue or back to the queue its dead-letter record names (the move itself is
//! `transfer.rs`'s).

use crate::ops::transfer::{Locked, Move};
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Millis, QueueKey, QueueName, RedriveOutcome};
use std::collections::BTreeMap;

impl EmbeddedEngine {
    /// One answer per seq, in order, once every move is durable.
    pub(crate) async fn redrive(
        &self,
        from: &QueueKey,
        seqs: &[u64],
        destination: Option<&QueueName>,
        now: Millis,
    ) -> Result<Vec<RedriveOutcome>, EngineError> {
        let entry = self.queue(from)?;
        // A deleted queue answers not found before anything about its messages.
        drop(entry.live()?);
        let mut outcomes = vec![RedriveOutcome::Gone; seqs.len()];
        // The records say where each message came from (they never change while stored); a
        // message not on disk is gone.
        let records = self.store.read_meta(entry.uid, seqs)?;
        // Per destination: the index of each seq going there, and its group as stored.
        let mut by_destination: BTreeMap<QueueName, Vec<(usize, Option<String>)>> = BTreeMap::new();
        for (i, record) in records.into_iter().enumerate() {
            let Some(meta) = record else { continue };
            let target = match destination {
                Some(name) => Some(name.clone()),
                None => meta.dead_letter.map(|d| d.source_queue),
            };
            match target {
                Some(name) => by_destination
                    .entry(name)
                    .or_default()
                    .push((i, meta.group_id)),
                None => outcomes[i] = RedriveOutcome::DestinationMissing,
            }
        }
        let mut pending = Vec::new();
        for (name, indexes) in by_destination {
            let target = QueueKey::new(from.tenant.clone(), name);
            let Ok(into) = self.queue(&target) else {
                for (i, _) in indexes {
                    outcomes[i] = RedriveOutcome::DestinationMissing;
                }
                continue;
            };
            let mut locked = Locked::lock(&entry, &into);
            if locked.source().deleted {
                return Err(EngineError::QueueNotFound);
            }
            if locked.destination().deleted {
                for (i, _) in indexes {
                    outcomes[i] = RedriveOutcome::DestinationMissing;
                }
                continue;
            }
            let mut moves = Vec::new();
            for (i, group) in indexes {
                // Whatever its state: a delivery in flight loses its handle. A seq named twice
                // moves once; the second finds it gone.
                if let Some(mut taken) = locked.source().take(seqs[i], now) {
                    // A standard queue keeps no groups in memory; a FIFO destination needs it.
                    taken.group = taken.group.or(group);
                    moves.push(Move {
                        taken,
                        dead_letter: None,
                    });
                    outcomes[i] = RedriveOutcome::Moved;
                }
            }
            if !moves.is_empty() {
                pending.push(self.submit_transfer(&entry, &into, locked.destination(), moves, now));
            }
        }
        for p in pending {
            p.wait().await?;
        }
        Ok(outcomes)
    }
}
