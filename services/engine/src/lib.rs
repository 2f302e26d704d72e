//! The contract between Sluice's services and its storage engines.
//!
//! This crate owns the [`Engine`] trait (atomic queue operations, grouped into the capabilities [`Tenants`], [`Queues`], [`Messages`], [`Transfers`], [`Records`], [`Publishing`], [`Payloads`] and [`Upkeep`]), payload references and events, the domain types it speaks in
//! ([`TenantId`], [`QueueName`], [`QueueConfig`], messages, receipt handles), the injectable
//! [`Clock`] and the per-tenant [`RateLimiter`]. It knows no concrete store and no HTTP type: engines depend on it, services call
//! through it, and the gateway picks an implementation at start-up.

mod cache;
mod clock;
mod engine;
mod error;
mod handle;
mod names;
mod payloads;
mod ratelimit;
mod topics;
mod types;

pub use cache::TtlCache;
pub use clock::{Clock, ManualClock, Millis, SystemClock};
pub use engine::{
    Engine, Messages, Payloads, Publishing, QueueListener, Queues, Records, Tenants, Transfers,
    Upkeep,
};
pub use error::{DeadLetterRefusal, EngineError, HandleError, RedriveOutcome, SendRejection};
pub use handle::{HandleKey, ReceiptHandle, HANDLE_CHARS, TAG_BYTES};
pub use names::{NameError, QueueKey, QueueName, TenantId};
pub use payloads::{
    message_size_with_payload, PayloadEvent, PayloadEventBatch, PayloadEventKind, PayloadRef,
};
pub use ratelimit::{gcra, Admission, LocalRateLimiter, RateLimit, RateLimiter};
pub use topics::{
    message_size, Delivery, DeliveryFailure, DeliveryOutcome, Publication, Published, RenderedCopy,
    SubscriptionStats, TopicKey,
};
pub use types::{
    DeadLetter, DeduplicationScope, MessageAttribute, MessageState, NewMessage, QueueConfig,
    QueueInfo, QueueStats, Quotas, ReceiveOutcome, ReceivedMessage, Record, RedriveAllowPolicy,
    RedrivePolicy, RetryBackoff, SentMessage, SeqScan, StoredMessage, TenantRecord,
    DEDUPLICATION_WINDOW_MS, RECEIVE_ATTEMPT_WINDOW_MS,
};
