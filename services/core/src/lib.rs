//! Sluice's protocol-agnostic services: everything between a parsed request and the engine.
//!
//! This crate owns request validation (names, ranges, attributes, sizes), the SQS-compatible
//! MD5s, resolution of delays and defaults from the queue's configuration, long polling, list
//! pagination, tenant administration, the domain metrics, and spilling large bodies to a payload
//! store (and reading them back) so that engines keep only a reference. It speaks in domain
//! terms so that the REST gateway and the later SQS/SNS-compatible front-ends share it; it knows
//! no HTTP type and no concrete engine.

mod access_keys;
mod activity;
mod background;
mod dead_letters;
mod error;
mod md5;
mod messages;
mod metrics;
mod payload_gc;
mod payload_ledger;
mod payloads;
mod queue_extras;
mod queues;
mod redrive;
mod stored_bytes;
mod tenants;
mod topic_attributes;
mod topic_policies;
mod topics;
mod usage;
mod validate;

pub use access_keys::{
    validate_access_key_id, validate_secret, AccessKey, AwsIdentity, AWS_IDENTITY_TTL,
    MAX_ACCESS_KEYS,
};
pub use activity::{ActivityTotals, QueueObserver, MAX_COUNTED_QUEUES};
pub use background::{Background, MAX_PACED_PAUSE};
pub use error::ServiceError;
pub use md5::{md5_of_attributes, md5_of_body};
pub use messages::{
    BatchFailure, BatchOutcome, ChangeVisibilityEntry, DeleteEntry, MessageView, ReceiveRequest,
    SendEntry, SendRequest, SendResult,
};
pub use payloads::{PayloadSettings, DEFAULT_ORPHAN_GRACE, DEFAULT_SPILL_THRESHOLD_BYTES};
pub use queue_extras::{MAX_OPAQUE_ATTRIBUTES, MAX_OPAQUE_VALUE_BYTES};
pub use queues::{
    QueueConfigPatch, QueuePage, QueueView, RedriveAllowPolicyInput, RedrivePolicyInput,
    RetryBackoffInput,
};
pub use redrive::{RedriveStatus, RedriveTask, RedriveTaskPage, ROUND_PERIOD};
pub use sluice_filter::FilterScope;
pub use tenants::{TenantPage, DEFAULT_ACCOUNT_ID};
pub use topic_attributes::{
    MAX_DISPLAY_NAME_CHARS, MAX_OTHER_ATTRIBUTE_BYTES, MAX_POLICY_ATTRIBUTE_BYTES,
    MAX_SUBSCRIPTION_ATTRIBUTES_BYTES, MAX_TOPIC_ATTRIBUTES_BYTES,
};
pub use topics::{
    PublishEntry, PublishRequest, PublishResult, SubscribeRequest, SubscriptionPage,
    SubscriptionPatch, SubscriptionView, TopicChange, TopicConfig, TopicConfigInput, TopicPage,
    TopicView, MAX_SUBSCRIPTIONS,
};
pub use usage::TenantUsage;
pub use validate::{is_valid_batch_entry_id, validate_batch_ids, MAX_BATCH_ENTRIES};

use sluice_engine::{Clock, Engine, LocalRateLimiter, RateLimiter};
use std::sync::Arc;

/// Server-wide limits the services enforce.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest message (body plus attributes) any queue may accept (up to 1 MiB, or 64 MiB
    /// with a payload store).
    pub max_message_bytes: u32,
    /// Long polls that may wait at once in this process; a receive that would wait past it
    /// answers `Unavailable` at once (after its first look) instead of holding one more.
    pub max_waiting_polls: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_message_bytes: 1_048_576,
            max_waiting_polls: 16_384,
        }
    }
}

/// The services over one engine and one clock. Cheap to clone.
#[derive(Clone)]
pub struct Services {
    engine: Arc<dyn Engine>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    metric_labels: metrics::MetricLabels,
    limiter: Arc<dyn RateLimiter>,
    /// Set once the process begins to stop: readiness fails, long polls answer at once.
    stopping: Arc<tokio::sync::watch::Sender<bool>>,
    /// Names this process in the leases of the background work it takes on.
    instance_id: Arc<String>,
    /// Long polls waiting now, for `max_waiting_polls`.
    waiting_polls: Arc<std::sync::atomic::AtomicUsize>,
    /// Topics' filter policies, compiled once per topic record version.
    policy_cache: topic_policies::PolicyCache,
    /// The region in topic ARNs (`TopicArn` of enveloped copies).
    aws_region: Arc<String>,
    /// Tenants' stored bytes, for `max_stored_bytes` (see `stored_bytes.rs`).
    stored_bytes: Arc<stored_bytes::StoredBytes>,
    /// Told of each queue the sampler finds (see [`Services::observe_queues`]).
    queue_observers: Arc<std::sync::Mutex<Vec<std::sync::Weak<dyn QueueObserver>>>>,
    /// Where bodies above the spill threshold go; `None`: they stay in the engine.
    payloads: Option<Arc<payloads::PayloadSettings>>,
    /// AWS requests' signers, recently read (see `access_keys.rs`).
    aws_identities: Arc<access_keys::IdentityCache>,
}

impl Services {
    /// Services over `engine`, taking time from `clock`, limiting tenants' request rates in
    /// this process (see [`with_rate_limiter`](Self::with_rate_limiter) for a shared store).
    pub fn new(engine: Arc<dyn Engine>, clock: Arc<dyn Clock>, limits: Limits) -> Self {
        let activity = Arc::new(activity::QueueActivity::new(clock.clone()));
        Self {
            engine,
            clock,
            limits,
            metric_labels: metrics::MetricLabels {
                per_queue: true,
                activity,
            },
            limiter: Arc::new(LocalRateLimiter::new()),
            stopping: Arc::new(tokio::sync::watch::Sender::new(false)),
            instance_id: Arc::new(uuid::Uuid::new_v4().to_string()),
            waiting_polls: Arc::default(),
            policy_cache: topic_policies::PolicyCache::default(),
            aws_region: Arc::new("us-east-1".to_owned()),
            stored_bytes: Arc::default(),
            queue_observers: Arc::default(),
            payloads: None,
            aws_identities: Arc::new(access_keys::identity_cache()),
        }
    }

    /// Tells `observer` of every queue the queue sampler finds, each walk, for as long as it
    /// lives (held weakly: dropping it ends this).
    pub fn observe_queues(&self, observer: &Arc<dyn QueueObserver>) {
        let mut observers = self
            .queue_observers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        observers.retain(|o| o.strong_count() > 0);
        observers.push(Arc::downgrade(observer));
    }

    /// The observers alive now.
    pub(crate) fn queue_observers(&self) -> Vec<Arc<dyn QueueObserver>> {
        self.queue_observers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect()
    }

    /// How many messages this process sent to, received from and deleted from a queue since
    /// it started (zero for one it has not counted; see `activity.rs`).
    pub fn queue_activity(&self, tenant: &str, queue: &str) -> ActivityTotals {
        self.metric_labels.activity.totals(tenant, queue)
    }

    /// The same services naming `region` in the ARNs they write (default `us-east-1`).
    pub fn with_aws_region(mut self, region: impl Into<String>) -> Self {
        self.aws_region = Arc::new(region.into());
        self
    }

    /// The region in the ARNs these services write, and the one SigV4 scopes must name.
    pub fn aws_region(&self) -> &str {
        &self.aws_region
    }

    /// The same services with tenants' request rates limited by `limiter`: gateways sharing
    /// a store must share a limiter for the tenant's rate to hold across them.
    pub fn with_rate_limiter(mut self, limiter: Arc<dyn RateLimiter>) -> Self {
        self.limiter = limiter;
        self
    }

    /// Whether metric series carry the `queue` label (the default); off, a tenant's queues
    /// add up in one series, for deployments with many queues.
    pub fn with_metrics_per_queue(mut self, per_queue: bool) -> Self {
        self.metric_labels.per_queue = per_queue;
        self
    }

    /// The server-wide limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The clock every operation reads "now" from.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Whether the store answers (readiness); never once [`begin_stopping`](Self::begin_stopping)
    /// was called, so load balancers stop sending here while requests in flight finish.
    pub async fn ready(&self) -> Result<(), ServiceError> {
        if self.is_stopping() {
            return Err(ServiceError::Unavailable("shutting down".into()));
        }
        Ok(self.engine.ping().await?)
    }

    /// Marks the process as stopping, for every clone of these services: readiness fails from
    /// now on, and long polls waiting for messages answer at once with what they have (usually
    /// nothing), so that a stop is not held up by a 20-second wait and the client polls again
    /// elsewhere. Requests in progress otherwise finish as usual.
    pub fn begin_stopping(&self) {
        self.stopping.send_replace(true);
    }

    /// Whether [`begin_stopping`](Self::begin_stopping) was called.
    pub(crate) fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Completes once [`begin_stopping`](Self::begin_stopping) was called (at once if it was):
    /// what a long-lived answer (a long poll, a dashboard's live stream) waits on to end.
    pub async fn stopped(&self) {
        let mut stopping = self.stopping.subscribe();
        // The sender lives in `self`, so it outlives this wait; an error cannot happen.
        let _ = stopping.wait_for(|stopping| *stopping).await;
    }

    /// One round of retention expiry over the whole store (run by the background job, see
    /// [`Background`]). Idempotent, so several gateways may run it against one store.
    /// One round of transfer recovery: completes moves between queues that a crash
    /// interrupted (only engines whose moves take several steps have any).
    pub(crate) async fn recover_transfers_once(&self) -> Result<(), ServiceError> {
        let completed = self.engine.recover_transfers(self.clock.now()).await?;
        if completed > 0 {
            tracing::info!(completed, "completed interrupted moves between queues");
        }
        Ok(())
    }

    pub(crate) async fn expire_once(&self) -> Result<(), ServiceError> {
        let expired = self.engine.expire(self.clock.now()).await?;
        if expired > 0 {
            metrics::count_expired(expired);
            tracing::debug!(expired, "retention expiry");
        }
        Ok(())
    }
}
