//! Why a message did not match: built only by the `explain_*` methods, for the dashboard's
//! policy tester, so the plain `matches_*` path never allocates for it.

use std::fmt;

use thiserror::Error;

/// Why a message failed a policy.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Mismatch {
    /// Body scope: the body is not JSON.
    #[error("the message body is not JSON")]
    BodyNotJson,
    /// Body scope: the body is JSON but not an object.
    #[error("the message body is not a JSON object")]
    BodyNotObject,
    /// Every alternative failed; one entry per alternative (a policy without `$or` has
    /// one), in the policy's order, each naming the first key that failed in it.
    #[error("{}", KeyList(.0))]
    Keys(Vec<KeyMismatch>),
}

/// The first failing key of one alternative.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMismatch {
    /// The policy key; nested body keys are joined with `.`.
    pub key: String,
    /// What was wrong with it.
    pub reason: KeyMismatchReason,
}

/// What was wrong with one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyMismatchReason {
    /// The message has no value for the key (binary attributes and empty arrays count as
    /// absent).
    Missing,
    /// The key is present but the policy only allows its absence (`{"exists": false}`).
    MustNotExist,
    /// The key is present but none of its values satisfies any of the key's conditions.
    NoConditionMatched,
}

impl fmt::Display for KeyMismatch {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        match self.reason {
            KeyMismatchReason::Missing => write!(formatter, "key \"{key}\" is missing"),
            KeyMismatchReason::MustNotExist => {
                write!(formatter, "key \"{key}\" is present but must not exist")
            }
            KeyMismatchReason::NoConditionMatched => {
                write!(formatter, "key \"{key}\" matches none of its conditions")
            }
        }
    }
}

struct KeyList<'a>(&'a [KeyMismatch]);

impl fmt::Display for KeyList<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, mismatch) in self.0.iter().enumerate() {
            if index > 0 {
                formatter.write_str("; or ")?;
            }
            write!(formatter, "{mismatch}")?;
        }
        Ok(())
    }
}
