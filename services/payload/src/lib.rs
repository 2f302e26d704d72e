//! Payload stores: where message bodies too large to keep in a queue engine are written, as one
//! object per body, addressed by a [`PayloadKey`] that the engine keeps in the message instead.
//!
//! A store only keeps bytes under keys. What refers to an object, and when an object may go, is
//! decided by its callers; the store gives them what that needs: writes that are durable when
//! they return, reads that tell a missing object from an unreachable store, idempotent deletes,
//! and a paged listing with each object's write time (for collecting objects whose message
//! never committed).
//!
//! Two stores: [`LocalStore`], a folder on the server's disk (for one gateway on the embedded
//! engine), and [`S3Store`], any S3-compatible object store (for gateways sharing a Redis).

mod key;
mod local;
mod s3;

pub use key::{InvalidPayloadKey, PayloadKey};
pub use local::LocalStore;
pub use s3::{S3Settings, S3Store};

use async_trait::async_trait;
use bytes::Bytes;

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// Why a payload store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// No object is stored under the key.
    #[error("no payload object {0}")]
    NotFound(String),
    /// The store cannot be reached or answered with a failure of its own; retrying later may
    /// succeed. Callers answer 503.
    #[error("payload store unavailable: {0}")]
    Unavailable(String),
    /// The store answered something that cannot be used (a malformed listing, for example).
    #[error("payload store answered unexpectedly: {0}")]
    Invalid(String),
}

/// One object as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    /// Its key.
    pub key: PayloadKey,
    /// Its size in bytes.
    pub size: u64,
    /// When it was written, as the store recorded it (whole seconds on most S3 servers).
    pub written_at: Millis,
}

/// One page of a listing, in key order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectPage {
    /// The objects of this page.
    pub objects: Vec<StoredObject>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<String>,
}

/// Where payload objects are kept.
///
/// Rules every store honours (checked by the tests in `tests/stores.rs` on each store):
/// `put` returns once the object is durable and readable by `get` from any gateway sharing the
/// store; writing a key twice leaves the second body; `get` of a key never written or deleted is
/// [`PayloadError::NotFound`], never `Unavailable`; `delete` of a missing key succeeds; objects
/// whose keys hold unexpected names (not written by Sluice) are skipped by `list`.
#[async_trait]
pub trait PayloadStore: Send + Sync + std::fmt::Debug {
    /// Writes `body` under `key`, durably.
    async fn put(&self, key: &PayloadKey, body: Bytes) -> Result<(), PayloadError>;

    /// Reads the whole object into a buffer of its own, which the caller may turn into a
    /// `String` without copying (bodies go up to 64 MiB: a second copy would double what a
    /// receive holds).
    async fn get(&self, key: &PayloadKey) -> Result<Vec<u8>, PayloadError>;

    /// Removes the object; a missing one is not an error.
    async fn delete(&self, key: &PayloadKey) -> Result<(), PayloadError>;

    /// Lists at most `limit` objects in key order, starting after the page token `after` (the
    /// `next` of the previous page).
    async fn list(&self, after: Option<&str>, limit: usize) -> Result<ObjectPage, PayloadError>;

    /// Checks that the store answers (for readiness).
    async fn ping(&self) -> Result<(), PayloadError>;
}
