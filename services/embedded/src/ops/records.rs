//! The services' small records (redrive tasks): read straight from the `records` table, and
//! written by compare-and-set under the catalog lock, so the version a write checks is the one
//! it replaces — nothing else writes records.

use crate::store::WriteOp;
use crate::EmbeddedEngine;
use sluice_engine::{EngineError, Record};

impl EmbeddedEngine {
    pub(crate) async fn get_record(
        &self,
        kind: &str,
        key: &str,
    ) -> Result<Option<Record>, EngineError> {
        self.store.read_record(kind, key)
    }

    pub(crate) async fn put_record(
        &self,
        kind: &str,
        key: &str,
        value: String,
        expected: Option<u64>,
    ) -> Result<Option<u64>, EngineError> {
        let _admin = self.admin.lock().await;
        let current = self.store.read_record(kind, key)?.map(|r| r.version);
        if current != expected {
            return Ok(None);
        }
        let version = expected.map_or(1, |v| v + 1);
        self.store
            .submit(vec![WriteOp::PutRecord {
                kind: kind.to_owned(),
                key: key.to_owned(),
                version,
                value,
            }])
            .wait()
            .await?;
        Ok(Some(version))
    }

    pub(crate) async fn delete_record(
        &self,
        kind: &str,
        key: &str,
        expected: u64,
    ) -> Result<bool, EngineError> {
        let _admin = self.admin.lock().await;
        let current = self.store.read_record(kind, key)?.map(|r| r.version);
        if current != Some(expected) {
            return Ok(false);
        }
        self.store
            .submit(vec![WriteOp::DeleteRecord {
                kind: kind.to_owned(),
                key: key.to_owned(),
            }])
            .wait()
            .await?;
        Ok(true)
    }

    pub(crate) async fn list_records(
        &self,
        kind: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Record)>, EngineError> {
        self.store.read_records(kind, prefix, after, limit)
    }
}
