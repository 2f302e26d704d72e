//! The services' small records (redrive tasks): compare-and-set writes by script
//! (`record_put.lua`, `record_delete.lua`), reads by plain commands. All records of a kind live
//! in one hash beside a zset of their keys for ordered listing, under the registries' tag:
//! they are few, and never on a message's path.

use crate::conn::Call;
use crate::{scripts, RedisEngine};
use sluice_engine::{EngineError, Record};

fn parse(stored: &str) -> Result<Record, EngineError> {
    let (version, value) = stored
        .split_once(' ')
        .and_then(|(v, rest)| Some((v.parse().ok()?, rest)))
        .ok_or_else(|| EngineError::Internal("unreadable record in Redis".into()))?;
    Ok(Record {
        version,
        value: value.to_owned(),
    })
}

impl RedisEngine {
    pub(crate) async fn get_record(
        &self,
        kind: &str,
        key: &str,
    ) -> Result<Option<Record>, EngineError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.keys.records(kind)).arg(key);
        let stored: Option<String> = self.redis.query(&cmd).await?;
        stored.as_deref().map(parse).transpose()
    }

    pub(crate) async fn put_record(
        &self,
        kind: &str,
        key: &str,
        value: String,
        expected: Option<u64>,
    ) -> Result<Option<u64>, EngineError> {
        let mut call = Call::new(
            &scripts::RECORD_PUT,
            [self.keys.records(kind), self.keys.record_keys(kind)],
        );
        call.arg(key)
            .arg(value)
            .arg(expected.map(|v| v.to_string()).unwrap_or_default());
        let version: u64 = redis::from_redis_value(self.redis.eval(&call, true).await?)
            .map_err(|e| EngineError::Internal(format!("unexpected reply from Redis: {e}")))?;
        Ok((version > 0).then_some(version))
    }

    pub(crate) async fn delete_record(
        &self,
        kind: &str,
        key: &str,
        expected: u64,
    ) -> Result<bool, EngineError> {
        let mut call = Call::new(
            &scripts::RECORD_DELETE,
            [self.keys.records(kind), self.keys.record_keys(kind)],
        );
        call.arg(key).arg(expected);
        let removed: i64 = redis::from_redis_value(self.redis.eval(&call, true).await?)
            .map_err(|e| EngineError::Internal(format!("unexpected reply from Redis: {e}")))?;
        Ok(removed == 1)
    }

    pub(crate) async fn list_records(
        &self,
        kind: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Record)>, EngineError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let start = match after {
            Some(after) if after >= prefix => format!("({after}"),
            _ => format!("[{prefix}"),
        };
        let mut range = redis::cmd("ZRANGEBYLEX");
        range
            .arg(self.keys.record_keys(kind))
            .arg(start)
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(limit);
        let keys: Vec<String> = self.redis.query(&range).await?;
        let keys: Vec<String> = keys
            .into_iter()
            .take_while(|k| k.starts_with(prefix))
            .collect();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut get = redis::cmd("HMGET");
        get.arg(self.keys.records(kind)).arg(&keys);
        let values: Vec<Option<String>> = self.redis.query(&get).await?;
        // A record deleted between the two reads is simply not listed.
        keys.into_iter()
            .zip(values)
            .filter_map(|(key, value)| value.map(|v| parse(&v).map(|r| (key, r))))
            .collect()
    }
}
