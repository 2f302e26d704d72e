//! Payload garbage collection: removes a spilled body's object once no message refers to it,
//! and objects whose message never committed.
//!
//! What it works from:
//! - the **ledger** (`payload_ledger.rs`): one record per object, written by the send or
//!   publish before the engine commit, naming every message that is to refer to the object
//!   (its *holders*) and whether one of them was seen committed;
//! - the engine's **payload events**, recorded in the same atomic step as the change they
//!   describe: `Added` when a message with a payload commits, `Released` when one leaves the
//!   store for good (delete, purge, expiry, queue or tenant deletion, a fan-out copy no queue
//!   took). Moves record nothing: the message still refers to the object from another queue.
//!
//! Each round drains the events: `Added` marks the object's record committed, `Released`
//! takes the message off the record's holders, and an object left without holders is deleted,
//! then its record. Only once the events are drained does a round look for orphans, at most
//! every [`orphan_sweep_period`]: records older than the grace that never saw a commit (the
//! gateway failed between writing the record and the engine commit, or the commit failed
//! ambiguously) and records left without holders (a collection cut short between deleting
//! the object and the record) lose their object and record; objects older than the grace with
//! no record (the gateway failed between the upload and the record) are deleted. A record
//! still uncommitted after a full drain and the grace has no committed message: the engine
//! records `Added` in the commit itself, so a commit made before the drain is seen by it, and
//! one made after it would have had to wait longer than the grace after its record.
//!
//! Every step is idempotent — taking a holder off twice changes nothing, deleting a deleted
//! object succeeds, records change by compare-and-set — so several gateways may collect over
//! one store at once: they may read the same events, and whichever acknowledges them first
//! wins nothing the other needed. A store or engine failure fails the round before the events
//! are acknowledged, so they are read again on the next round (after the supervisor's
//! backoff): nothing is lost while the object store is down.

use crate::payload_ledger::{self, LedgerRecord};
use crate::payloads::unavailable;
use crate::{ServiceError, Services};
use sluice_engine::{Millis, PayloadEvent, PayloadEventKind};
use sluice_payload::{PayloadKey, PayloadStore};
use std::time::Duration;

/// How often collection runs: objects go within about this plus one round of their last
/// message's removal (the contract allows 60 s).
pub(crate) const COLLECT_PERIOD: Duration = Duration::from_secs(5);

/// Events read per engine call.
const EVENT_BATCH: usize = 1_000;

/// Batches drained in one round at most, so a backlog cannot hold one round for long (the
/// next round goes on with it).
const MAX_BATCHES_PER_ROUND: usize = 50;

/// Records and objects looked at per page of an orphan sweep.
const SWEEP_PAGE: usize = 500;

/// How often the orphan sweeps run: a quarter of the grace, between 1 s and 10 minutes — an
/// orphan goes within about 1.25 × the grace, and a long grace does not mean listing the whole
/// ledger and bucket every few seconds.
pub(crate) fn orphan_sweep_period(grace: Duration) -> Duration {
    (grace / 4).clamp(Duration::from_secs(1), Duration::from_secs(600))
}

/// What a collecting gateway keeps from round to round.
#[derive(Debug, Default)]
pub(crate) struct CollectorState {
    /// When the orphan sweeps last ran (none yet: they run once the events are first drained).
    last_sweep: Option<Millis>,
}

impl Services {
    /// One round of payload collection (the background job; see the module docs). Does
    /// nothing when no payload store is configured.
    pub(crate) async fn collect_payloads_once(
        &self,
        state: &mut CollectorState,
    ) -> Result<(), ServiceError> {
        let Some(settings) = self.payload_settings() else {
            return Ok(());
        };
        let store = settings.store.as_ref();
        let mut drained = false;
        for _ in 0..MAX_BATCHES_PER_ROUND {
            let batch = self.engine.payload_events(EVENT_BATCH).await?;
            if batch.events.is_empty() {
                drained = true;
                break;
            }
            for event in &batch.events {
                self.apply_payload_event(store, event).await?;
            }
            self.engine.ack_payload_events(&batch).await?;
        }
        if !drained {
            return Ok(());
        }
        let now = self.clock.now();
        let period = orphan_sweep_period(settings.orphan_grace);
        if state
            .last_sweep
            .is_some_and(|last| now < last.saturating_add(millis(period)))
        {
            return Ok(());
        }
        let cutoff = now.saturating_sub(millis(settings.orphan_grace));
        self.sweep_ledger(store, cutoff).await?;
        self.sweep_unrecorded_objects(store, cutoff).await?;
        state.last_sweep = Some(now);
        Ok(())
    }

    async fn apply_payload_event(
        &self,
        store: &dyn PayloadStore,
        event: &PayloadEvent,
    ) -> Result<(), ServiceError> {
        // A key the engine holds was written by these services; one that does not parse
        // names no object this collector could remove.
        let Ok(key) = PayloadKey::parse(&event.key) else {
            tracing::warn!(key = %event.key, "payload event names a malformed key; skipped");
            return Ok(());
        };
        loop {
            let Some((version, mut entry)) =
                payload_ledger::read(self.engine.as_ref(), &key).await?
            else {
                // No record: collected already (or the object never had one, which the
                // listing sweep would remove after the grace anyway). A `Released` makes
                // sure the object is gone; deleting a missing one is harmless.
                if event.kind == PayloadEventKind::Released {
                    delete_object(store, &key).await?;
                }
                return Ok(());
            };
            let changed = match event.kind {
                PayloadEventKind::Added => !std::mem::replace(&mut entry.committed, true),
                PayloadEventKind::Released => {
                    let before = entry.holders.len();
                    entry.holders.retain(|holder| holder != &event.message_id);
                    entry.holders.len() != before
                }
            };
            if entry.holders.is_empty() {
                if self.remove_object(store, &key, version).await? {
                    return Ok(());
                }
                continue;
            }
            if !changed
                || payload_ledger::update(self.engine.as_ref(), &key, &entry, version)
                    .await?
                    .is_some()
            {
                return Ok(());
            }
            // Another gateway changed the record since it was read: read it again.
        }
    }

    /// Deletes the object, then its record if it is still at `version`; answers whether the
    /// record went (`false`: it changed meanwhile, and the caller looks again).
    async fn remove_object(
        &self,
        store: &dyn PayloadStore,
        key: &PayloadKey,
        version: u64,
    ) -> Result<bool, ServiceError> {
        delete_object(store, key).await?;
        let removed = payload_ledger::remove(self.engine.as_ref(), key, version).await?;
        if removed {
            crate::metrics::count_payload_objects_removed(1);
        }
        Ok(removed)
    }

    /// Removes the objects of records older than `cutoff` that never saw their message commit,
    /// and of records left without holders.
    async fn sweep_ledger(
        &self,
        store: &dyn PayloadStore,
        cutoff: Millis,
    ) -> Result<(), ServiceError> {
        let mut after: Option<String> = None;
        loop {
            let page =
                payload_ledger::list(self.engine.as_ref(), after.as_deref(), SWEEP_PAGE).await?;
            let Some((last, _, _)) = page.last() else {
                return Ok(());
            };
            after = Some(last.as_str().to_owned());
            let full = page.len() == SWEEP_PAGE;
            for (key, version, entry) in page {
                if !is_orphaned(&entry, cutoff) {
                    continue;
                }
                if self.remove_object(store, &key, version).await? {
                    tracing::info!(key = %key, "collected the object of a send that never committed");
                }
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// Deletes objects written before `cutoff` that no ledger record names.
    async fn sweep_unrecorded_objects(
        &self,
        store: &dyn PayloadStore,
        cutoff: Millis,
    ) -> Result<(), ServiceError> {
        let mut after: Option<String> = None;
        loop {
            let page = store
                .list(after.as_deref(), SWEEP_PAGE)
                .await
                .map_err(|error| unavailable("list", error))?;
            for object in page.objects {
                if object.written_at >= cutoff {
                    continue;
                }
                if payload_ledger::read(self.engine.as_ref(), &object.key)
                    .await?
                    .is_none()
                {
                    delete_object(store, &object.key).await?;
                    crate::metrics::count_payload_objects_removed(1);
                    tracing::info!(key = %object.key, "collected an object no message refers to");
                }
            }
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(()),
            }
        }
    }
}

/// Whether a record's object can go without waiting for an event: no holder is left, or it
/// is older than the grace and no holder ever committed.
fn is_orphaned(entry: &LedgerRecord, cutoff: Millis) -> bool {
    entry.holders.is_empty() || (!entry.committed && entry.created_at < cutoff)
}

async fn delete_object(store: &dyn PayloadStore, key: &PayloadKey) -> Result<(), ServiceError> {
    store
        .delete(key)
        .await
        .map_err(|error| unavailable("delete", error))
}

fn millis(duration: Duration) -> Millis {
    Millis::try_from(duration.as_millis()).unwrap_or(Millis::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(holders: &[&str], committed: bool, created_at: Millis) -> LedgerRecord {
        LedgerRecord {
            holders: holders.iter().map(|h| (*h).to_owned()).collect(),
            created_at,
            committed,
        }
    }

    #[test]
    fn only_uncommitted_records_past_the_grace_or_holderless_ones_are_orphans() {
        assert!(is_orphaned(&entry(&["m"], false, 99), 100));
        assert!(!is_orphaned(&entry(&["m"], false, 100), 100));
        assert!(!is_orphaned(&entry(&["m"], true, 0), 100));
        assert!(is_orphaned(&entry(&[], true, 500), 100));
    }

    #[test]
    fn sweeps_run_on_a_quarter_of_the_grace_within_bounds() {
        assert_eq!(
            orphan_sweep_period(Duration::from_secs(3600)),
            Duration::from_secs(600)
        );
        assert_eq!(
            orphan_sweep_period(Duration::from_secs(60)),
            Duration::from_secs(15)
        );
        assert_eq!(
            orphan_sweep_period(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
    }
}
