//! What the engine stores in Redis values, and how it reads script replies.
//!
//! A message's immutable part (id, body, attributes, group, deduplication id, and its
//! dead-letter record while it is in a dead-letter queue) is one JSON value in the queue's
//! `msg` hash, written at send (or by a move) and read only when the message is delivered or
//! peeked;
//! everything a script needs to decide (times, counts, delivery numbers) lives in sorted-set
//! scores and the small `rx` record, so scripts never parse JSON.

use redis::Value;
use serde::{Deserialize, Serialize};
use sluice_engine::{
    DeadLetter, EngineError, MessageAttribute, Millis, PayloadRef, QueueConfig, QueueStats,
    StoredMessage, TenantRecord,
};
use std::collections::BTreeMap;

/// The immutable part of a message, with short field names (it is stored once per message).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct StoredBody {
    #[serde(rename = "i")]
    pub message_id: String,
    #[serde(rename = "b")]
    pub body: String,
    #[serde(rename = "a", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, MessageAttribute>,
    #[serde(rename = "g", default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub deduplication_id: Option<String>,
    /// Set by a move into a dead-letter queue, cleared by a redrive (both rewrite the JSON).
    #[serde(rename = "x", default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetter>,
    /// The body kept in a payload store (then `body` is what is stored beside the reference).
    #[serde(rename = "p", default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<PayloadRef>,
}

impl StoredBody {
    /// The message these parts and the script's bookkeeping describe.
    pub(crate) fn into_message(
        self,
        seq: u64,
        sent_at: Millis,
        receive_count: u32,
        first_received_at: Option<Millis>,
    ) -> StoredMessage {
        StoredMessage {
            payload: self.payload,
            message_id: self.message_id,
            body: self.body,
            attributes: self.attributes,
            sent_at,
            receive_count,
            first_received_at,
            group_id: self.group_id,
            deduplication_id: self.deduplication_id,
            seq,
            dead_letter: self.dead_letter,
        }
    }
}

fn corrupt(what: &str) -> EngineError {
    EngineError::Internal(format!("unexpected reply from Redis: {what}"))
}

pub(crate) fn to_json<T: Serialize>(value: &T) -> Result<String, EngineError> {
    serde_json::to_string(value).map_err(|e| EngineError::Internal(format!("encode: {e}")))
}

pub(crate) fn from_json<T: for<'de> Deserialize<'de>>(text: &[u8]) -> Result<T, EngineError> {
    serde_json::from_slice(text)
        .map_err(|e| EngineError::Internal(format!("corrupt record in Redis: {e}")))
}

/// A script reply read front to back.
pub(crate) struct Reply {
    items: std::vec::IntoIter<Value>,
}

impl Reply {
    /// An array reply whose first element is the status: `None` when it is 0 (the queue does
    /// not exist), the rest of the reply otherwise.
    pub(crate) fn of_queue(value: Value) -> Result<Option<Self>, EngineError> {
        let mut reply = Self::new(value)?;
        match reply.int()? {
            0 => Ok(None),
            _ => Ok(Some(reply)),
        }
    }

    pub(crate) fn new(value: Value) -> Result<Self, EngineError> {
        match value {
            Value::Array(items) => Ok(Self {
                items: items.into_iter(),
            }),
            other => Err(corrupt(&format!("expected an array, got {other:?}"))),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.len() == 0
    }

    fn next(&mut self) -> Result<Value, EngineError> {
        self.items.next().ok_or_else(|| corrupt("reply too short"))
    }

    pub(crate) fn int(&mut self) -> Result<i64, EngineError> {
        match self.next()? {
            Value::Int(n) => Ok(n),
            other => Err(corrupt(&format!("expected an integer, got {other:?}"))),
        }
    }

    pub(crate) fn u64(&mut self) -> Result<u64, EngineError> {
        u64::try_from(self.int()?).map_err(|_| corrupt("negative number"))
    }

    /// A time, or `None` for the scripts' `-1`.
    pub(crate) fn time(&mut self) -> Result<Option<Millis>, EngineError> {
        Ok(u64::try_from(self.int()?).ok())
    }

    pub(crate) fn bytes(&mut self) -> Result<Vec<u8>, EngineError> {
        match self.next()? {
            Value::BulkString(b) => Ok(b),
            Value::SimpleString(s) => Ok(s.into_bytes()),
            other => Err(corrupt(&format!("expected a string, got {other:?}"))),
        }
    }

    pub(crate) fn text(&mut self) -> Result<String, EngineError> {
        String::from_utf8(self.bytes()?).map_err(|_| corrupt("text is not UTF-8"))
    }

    /// The stats every describing reply ends with.
    pub(crate) fn stats(&mut self) -> Result<QueueStats, EngineError> {
        Ok(QueueStats {
            visible: self.u64()?,
            in_flight: self.u64()?,
            delayed: self.u64()?,
            oldest_sent_at: self.time()?,
            stored_bytes: self.u64()?,
        })
    }
}

/// A queue as `put_queue` and `queue_info` describe it (after their status element).
pub(crate) struct Described {
    pub uid: String,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub config: QueueConfig,
    pub stats: QueueStats,
}

impl Described {
    pub(crate) fn read(reply: &mut Reply) -> Result<Self, EngineError> {
        Ok(Self {
            uid: reply.text()?,
            created_at: reply.u64()?,
            updated_at: reply.u64()?,
            config: from_json(&reply.bytes()?)?,
            stats: reply.stats()?,
        })
    }
}

pub(crate) fn tenant_from(value: Option<Vec<u8>>) -> Result<Option<TenantRecord>, EngineError> {
    value.map(|v| from_json(&v)).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_round_trip_compactly() {
        let mut attributes = BTreeMap::new();
        attributes.insert(
            "k".to_owned(),
            MessageAttribute {
                data_type: "String".into(),
                value: "v\"é".into(),
            },
        );
        let body = StoredBody {
            message_id: "id".into(),
            body: "hello\n\u{1F600}".into(),
            attributes,
            group_id: None,
            deduplication_id: None,
            dead_letter: None,
            payload: None,
        };
        let json = to_json(&body).unwrap();
        assert!(!json.contains("\"g\"") && !json.contains("\"d\"") && !json.contains("\"p\""));
        let back: StoredBody = from_json(json.as_bytes()).unwrap();
        assert_eq!(back.body, body.body);
        assert_eq!(back.attributes, body.attributes);
        assert_eq!(back.group_id, None);
    }

    #[test]
    fn queue_status_zero_means_missing() {
        assert!(Reply::of_queue(Value::Array(vec![Value::Int(0)]))
            .unwrap()
            .is_none());
        let mut r = Reply::of_queue(Value::Array(vec![Value::Int(1), Value::Int(-1)]))
            .unwrap()
            .unwrap();
        assert_eq!(r.time().unwrap(), None);
        assert!(r.is_empty());
        assert!(Reply::new(Value::Int(3)).is_err());
    }
}
