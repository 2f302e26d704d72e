//! The payload ledger: one `Records` record per payload object the services wrote, naming the
//! messages that will refer to it. It is written after the object and before the engine commit
//! that refers to it, so every object a send or publish uploads is in the ledger unless the
//! process died between the upload and this write (the orphan sweep finds those by listing the
//! store); the garbage collector reads it to tell an object still awaiting its commit from one
//! nothing refers to.
//!
//! Record: kind [`KIND`], key = the payload key, value JSON
//! `{"holders": ["<message id>", ...], "created_at": <ms since epoch>, "committed": false}`.

use crate::ServiceError;
use serde::{Deserialize, Serialize};
use sluice_engine::{Engine, Millis};
use sluice_payload::PayloadKey;

/// The `Records` kind of ledger records.
pub(crate) const KIND: &str = "payload";

/// What the ledger knows of one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LedgerRecord {
    /// The queue-level message ids of every message that will refer to the object: a send's
    /// message id, or each delivery's id for a publish.
    pub(crate) holders: Vec<String>,
    /// When the object was written (ms since the epoch).
    pub(crate) created_at: Millis,
    /// Whether the engine commit referring to it is known to have happened. Written `false`;
    /// the garbage collector is what learns otherwise.
    pub(crate) committed: bool,
}

impl LedgerRecord {
    /// A record for an object just written, for messages not committed yet.
    pub(crate) fn uncommitted(holders: Vec<String>, created_at: Millis) -> Self {
        Self {
            holders,
            created_at,
            committed: false,
        }
    }
}

fn encode(record: &LedgerRecord) -> Result<String, ServiceError> {
    serde_json::to_string(record)
        .map_err(|e| ServiceError::Internal(format!("payload ledger record: {e}")))
}

/// Records a new object; answers the record's version. A record already there under this key
/// (keys are 128 random bits, so only a repeated call) is a conflict.
pub(crate) async fn create(
    engine: &dyn Engine,
    key: &PayloadKey,
    record: &LedgerRecord,
) -> Result<u64, ServiceError> {
    engine
        .put_record(KIND, key.as_str(), encode(record)?, None)
        .await?
        .ok_or_else(|| ServiceError::Conflict(format!("payload ledger: {key} is recorded already")))
}

/// The record of `key` and its version, if there is one.
pub(crate) async fn read(
    engine: &dyn Engine,
    key: &PayloadKey,
) -> Result<Option<(u64, LedgerRecord)>, ServiceError> {
    let Some(stored) = engine.get_record(KIND, key.as_str()).await? else {
        return Ok(None);
    };
    let record = serde_json::from_str(&stored.value).map_err(|e| {
        ServiceError::Internal(format!("payload ledger: record of {key} unreadable: {e}"))
    })?;
    Ok(Some((stored.version, record)))
}

/// Replaces the record of `key` if it is still at `version`; answers the new version, or
/// `None` if another write came first.
pub(crate) async fn update(
    engine: &dyn Engine,
    key: &PayloadKey,
    record: &LedgerRecord,
    version: u64,
) -> Result<Option<u64>, ServiceError> {
    Ok(engine
        .put_record(KIND, key.as_str(), encode(record)?, Some(version))
        .await?)
}

/// Removes the record of `key` if it is still at `version`; answers whether it did.
pub(crate) async fn remove(
    engine: &dyn Engine,
    key: &PayloadKey,
    version: u64,
) -> Result<bool, ServiceError> {
    Ok(engine.delete_record(KIND, key.as_str(), version).await?)
}

/// Up to `limit` records in key order after `after` (a payload key), for sweeps. Records whose
/// key or value cannot be read are skipped with a warning: they name nothing this version
/// wrote.
pub(crate) async fn list(
    engine: &dyn Engine,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<(PayloadKey, u64, LedgerRecord)>, ServiceError> {
    let page = engine.list_records(KIND, "", after, limit).await?;
    Ok(page
        .into_iter()
        .filter_map(|(key, stored)| {
            let parsed = PayloadKey::parse(&key)
                .ok()
                .zip(serde_json::from_str::<LedgerRecord>(&stored.value).ok());
            if parsed.is_none() {
                tracing::warn!(key, "skipping an unreadable payload ledger record");
            }
            parsed.map(|(key, record)| (key, stored.version, record))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_have_the_shape_the_collector_reads() {
        let record = LedgerRecord::uncommitted(vec!["m-1".into(), "m-2".into()], 1234);
        let value: serde_json::Value = serde_json::from_str(&encode(&record).unwrap()).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"holders": ["m-1", "m-2"], "created_at": 1234, "committed": false})
        );
    }
}
