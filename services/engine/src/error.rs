//! What can go wrong below the services, classified so the gateway can map each kind to one
//! status without looking inside.

use crate::Millis;
use thiserror::Error;

/// An operation on the store failed as a whole.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// The queue does not exist for this tenant (or belongs to another tenant).
    #[error("queue not found")]
    QueueNotFound,
    /// The tenant does not exist.
    #[error("tenant not found")]
    TenantNotFound,
    /// A create met an existing resource.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// Creating the queue would take the tenant past its `max_queues` quota; nothing changed.
    #[error("tenant {tenant} may own at most {max_queues} queues")]
    QuotaExceeded {
        /// The tenant.
        tenant: String,
        /// Its quota at the time of the refusal.
        max_queues: u64,
    },
    /// The tenant was deleted at `deleted_at`: a token issued before then no longer names it,
    /// and its queues cannot be created or changed while the deletion runs or until the tenant
    /// exists again.
    #[error("the tenant was deleted at {deleted_at} (ms since the epoch)")]
    TenantDeleted {
        /// When the deletion began.
        deleted_at: Millis,
    },
    /// The store cannot be reached or refuses work for now; retrying later may succeed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store failed in a way a retry will not fix.
    #[error("store failure: {0}")]
    Internal(String),
}

/// Why one message of a send batch was refused while the others may have been accepted.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum SendRejection {
    /// The queue holds `max_depth` messages already.
    #[error("queue is full")]
    QueueFull,
}

/// Why a receipt handle could not be used.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum HandleError {
    /// Not a handle this queue issued (garbled, or from another queue).
    #[error("receipt handle is not valid for this queue")]
    Invalid,
    /// The message has been delivered again since this handle was issued, or is gone.
    #[error("receipt handle is stale: the message was delivered again or deleted")]
    Stale,
}

/// Why [`Transfers::dead_letter`](crate::Transfers::dead_letter) moved nothing.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterRefusal {
    /// The handle cannot be used (see [`HandleError`]).
    #[error(transparent)]
    Handle(#[from] HandleError),
    /// The queue has no redrive policy, so there is nowhere to move to.
    #[error("the queue has no redrive policy")]
    NoRedrivePolicy,
    /// The queue's redrive policy names a dead-letter queue that does not exist.
    #[error("the queue's dead-letter queue does not exist")]
    DeadLetterQueueMissing,
}

/// What [`Transfers::redrive`](crate::Transfers::redrive) did with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedriveOutcome {
    /// Now in its destination.
    Moved,
    /// Not in the source queue (deleted, expired or moved meanwhile): nothing to do.
    Gone,
    /// Its destination does not exist (or, with no destination given, it has no
    /// `dead_letter` source): it stays where it is.
    DestinationMissing,
}
