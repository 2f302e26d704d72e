//! Names that cannot be invalid once parsed: tenant ids and queue names ("parse, don't
//! validate"), and the `(tenant, name)` pair that identifies a queue everywhere below the
//! gateway.

use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// Why a name was refused; the message is fit to show to the caller.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{0}")]
pub struct NameError(pub String);

/// A tenant id: 1–64 of `[a-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

impl TenantId {
    /// Parses a tenant id.
    pub fn parse(text: &str) -> Result<Self, NameError> {
        let ok_char =
            |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
        if text.is_empty() || text.len() > 64 || !text.chars().all(ok_char) {
            return Err(NameError(
                "must be 1-64 characters of lowercase letters, digits, '_' and '-'".into(),
            ));
        }
        Ok(Self(text.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TenantId {
    type Error = NameError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<TenantId> for String {
    fn from(value: TenantId) -> Self {
        value.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A queue name: 1–80 characters of `[A-Za-z0-9_-]`, optionally ending in `.fifo` (the suffix
/// counts towards the 80), as SQS names queues.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct QueueName(String);

impl QueueName {
    /// Parses a queue name.
    pub fn parse(text: &str) -> Result<Self, NameError> {
        let stem = text.strip_suffix(".fifo").unwrap_or(text);
        let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if stem.is_empty() || text.len() > 80 || !stem.chars().all(ok_char) {
            return Err(NameError(
                "must be 1-80 characters of letters, digits, '_' and '-', optionally ending in '.fifo'"
                    .into(),
            ));
        }
        Ok(Self(text.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// FIFO queues are the ones whose name ends in `.fifo`.
    pub fn is_fifo(&self) -> bool {
        self.0.ends_with(".fifo")
    }
}

impl TryFrom<String> for QueueName {
    type Error = NameError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<QueueName> for String {
    fn from(value: QueueName) -> Self {
        value.0
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A queue's identity: its tenant and its name. Two tenants may own queues of the same name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QueueKey {
    /// The owner.
    pub tenant: TenantId,
    /// The name within the tenant.
    pub name: QueueName,
}

impl QueueKey {
    /// The pair.
    pub fn new(tenant: TenantId, name: QueueName) -> Self {
        Self { tenant, name }
    }
}

impl fmt::Display for QueueKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_follow_the_sqs_rule() {
        assert!(QueueName::parse("orders").is_ok());
        assert!(QueueName::parse("orders.fifo").unwrap().is_fifo());
        assert!(QueueName::parse(&"a".repeat(80)).is_ok());
        assert!(QueueName::parse(&"a".repeat(81)).is_err());
        assert!(QueueName::parse(&format!("{}.fifo", "a".repeat(75))).is_ok());
        assert!(QueueName::parse(&format!("{}.fifo", "a".repeat(76))).is_err());
        for bad in ["", ".fifo", "a b", "a.b", "ü", "a/b"] {
            assert!(QueueName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tenant_ids_are_lowercase() {
        assert!(TenantId::parse("acme-1_x").is_ok());
        for bad in ["", "Acme", "a.b", &"a".repeat(65)] {
            assert!(TenantId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
