//! The store's receipt-handle key: generated the first time a file is opened, kept in it, so
//! handles issued before a restart are still recognised as this store's afterwards (they are
//! stale then, not foreign).
//!
//! It lives in a table of its own (`secrets`, `&str` → bytes). Adding a table changes no
//! record, so the storage format version stays: a build that predates it ignores the table, and
//! a file without it gets a key when opened.

use redb::{Database, ReadableTable, TableDefinition};
use sluice_engine::{EngineError, HandleKey};

use crate::store::internal;

const SECRETS: TableDefinition<&str, &[u8]> = TableDefinition::new("secrets");
const HANDLE_KEY: &str = "receipt_handle_key";

/// The file's handle key, created (durably) if it has none. Call before the commit thread
/// starts: it writes in a transaction of its own.
pub(crate) fn handle_key(db: &Database) -> Result<HandleKey, EngineError> {
    let txn = db.begin_write().map_err(internal)?;
    let stored = {
        let mut table = txn.open_table(SECRETS).map_err(internal)?;
        let found = table
            .get(HANDLE_KEY)
            .map_err(internal)?
            .map(|v| v.value().to_vec());
        match found {
            Some(bytes) => bytes,
            None => {
                let fresh = HandleKey::random_bytes();
                table
                    .insert(HANDLE_KEY, fresh.as_slice())
                    .map_err(internal)?;
                fresh.to_vec()
            }
        }
    };
    txn.commit().map_err(internal)?;
    HandleKey::from_bytes(&stored).ok_or_else(|| {
        EngineError::Internal(format!(
            "corrupt receipt handle key: {} bytes, expected {}",
            stored.len(),
            HandleKey::BYTES
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::ReceiptHandle;

    #[test]
    fn the_key_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.redb");
        let h = ReceiptHandle {
            queue_uid: 1,
            seq: 2,
            delivery: 3,
        };
        let text = {
            let db = Database::create(&path).unwrap();
            h.encode(&handle_key(&db).unwrap())
        };
        let db = Database::create(&path).unwrap();
        assert_eq!(
            ReceiptHandle::decode(&text, &handle_key(&db).unwrap()),
            Some(h)
        );
        let other = Database::create(dir.path().join("other.redb")).unwrap();
        assert_eq!(
            ReceiptHandle::decode(&text, &handle_key(&other).unwrap()),
            None
        );
    }
}
