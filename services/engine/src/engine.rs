//! The [`Engine`] trait: the atomic queue operations every storage engine implements, and the
//! semantics each must honour (checked by the `sluice-conformance` suite).

use crate::{
    DeadLetterRefusal, EngineError, HandleError, MessageState, Millis, NewMessage, QueueConfig,
    QueueInfo, QueueKey, QueueName, Quotas, ReceiveOutcome, Record, RedriveOutcome, SendRejection,
    SentMessage, SeqScan, StoredMessage, TenantId, TenantRecord,
};
use crate::{PayloadEventBatch, Publication, Published, SubscriptionStats, TopicKey};
use async_trait::async_trait;
use std::collections::BTreeMap;

/// Wakes a long poll when something may have become receivable in one queue.
///
/// Created before a receive attempt, it fires for any send (or visibility reset) that happens
/// after its creation, so a send racing with the attempt is never missed.
#[derive(Debug)]
pub struct QueueListener(tokio::sync::watch::Receiver<u64>);

impl QueueListener {
    /// Wraps the receiving side of a queue's change counter.
    pub fn new(rx: tokio::sync::watch::Receiver<u64>) -> Self {
        Self(rx)
    }

    /// Completes on the next change after creation (or the previous call). Also completes if
    /// the queue went away, so the waiter looks again and finds out.
    pub async fn changed(&mut self) {
        let _ = self.0.changed().await;
    }
}

/// Atomic queue operations over one store: every capability an engine implements.
///
/// Every engine honours these rules; the conformance suite checks each of them:
///
/// * **Time** comes from the caller (`now`), never from the engine's own clock.
/// * **Durability**: `send`, `delete`, `purge`, queue and tenant changes return only once
///   durable in the engine's documented sense. Receive bookkeeping (visibility, receive counts)
///   may be lost when the store restarts (crash or not); such messages become visible again and
///   handles issued before the restart are stale. A send whose caller gave up may still have
///   been stored: callers that retry can create duplicates (at-least-once).
/// * **Visibility**: a message is receivable when `now >= visible_at` and it has not expired
///   (`now < sent_at + retention`). A receive hides it until `now + visibility_timeout`, counts
///   the delivery and issues a new receipt handle; the previous handle becomes stale.
/// * **Handles** are unforgeable: each is authenticated with the store's
///   [`HandleKey`](crate::HandleKey) (kept in the store, so every engine on one store accepts
///   the others' handles, also after a restart). A handle that fails that check (altered in any
///   character, made up, or from another store) is [`HandleError::Invalid`], checked before
///   anything else about it, so it never acts on any message, whatever seq it names. Nothing in
///   a handle depends on other queues (delivery numbers are per queue or random), so handles
///   reveal nothing of other tenants' traffic. A handle from another queue (or another
///   incarnation of the same name) is also
///   [`HandleError::Invalid`]; one from an earlier delivery is [`HandleError::Stale`]. Deleting
///   a message that is gone (deleted, purged or expired) succeeds with any handle this queue
///   issued for it, since retries must be safe and a gone message keeps no delivery record;
///   changing its visibility is `Stale`. A handle stays usable after its visibility timeout
///   until the next delivery.
/// * **FIFO queues** (names ending in `.fifo`): messages of one group are delivered in `seq`
///   order; while a group has a message in flight (received, neither deleted nor visible
///   again), nothing more of that group is delivered; a message whose visibility ends comes
///   again before anything sent after it. One receive may return several messages of one group,
///   in order. Groups are served oldest head first: the group whose next deliverable message
///   has the lowest `seq` goes first, so a busy group cannot starve the others. A send whose
///   deduplication id (scoped by the queue's `deduplication_scope`) was accepted within
///   [`DEDUPLICATION_WINDOW_MS`](crate::DEDUPLICATION_WINDOW_MS) answers the original's
///   message id and seq with `duplicate: true` and enqueues nothing, also when the original was
///   received or deleted meanwhile; two entries of one batch with one id make one message. A
///   receive with a `request_attempt_id` seen within
///   [`RECEIVE_ATTEMPT_WINDOW_MS`](crate::RECEIVE_ATTEMPT_WINDOW_MS) answers the same messages
///   (those still stored) with the same handles, changing nothing; an empty answer is not
///   remembered, so a long poll retrying under one id still sees new messages. Deleting a FIFO
///   message (or making it visible) wakes listeners, since it may unblock its group. Purge
///   keeps deduplication records: an id stays taken for its window.
/// * **Dead letters**: on a queue whose config has a
///   [`redrive_policy`](crate::QueueConfig::redrive_policy), a receive that would deliver a
///   message already received `max_receive_count` times (or more) moves it to the policy's
///   dead-letter queue (same tenant) instead of delivering it, and counts it in
///   [`ReceiveOutcome::dead_lettered`]. A move — this one, [`Transfers::dead_letter`] and
///   [`Transfers::redrive`] — is atomic and durable before the call answers: afterwards the
///   message is in exactly one of the two queues, also across a crash at any step (an engine
///   whose move takes several steps completes interrupted ones in
///   [`Transfers::recover_transfers`], and until then the message is in neither queue's
///   counts but not lost). A moved message keeps its `message_id`, body, attributes,
///   `group_id` and `deduplication_id`; its `receive_count` starts from 0
///   (`first_received_at` none); it is visible at once in the destination. Into a standard
///   queue it keeps `sent_at` (retention keeps counting); into a FIFO queue it gets a new
///   `seq` at the end of the queue (so a group's messages keep their order) and `sent_at` =
///   the move. Moves never meet deduplication and are never refused for `max_depth`. A move
///   into a dead-letter queue sets [`StoredMessage::dead_letter`] (`receive_count` is the
///   count at the source); a redrive clears it. If the policy's dead-letter queue does not
///   exist, the message stays and is delivered as usual (an engine that learns of the
///   missing queue only by trying may leave it out of one receive's answer first). On a FIFO queue, moving a group's
///   head lets the rest of the group be delivered.
/// * **Retry backoff**: on a queue with a
///   [`retry_backoff`](crate::QueueConfig::retry_backoff), a receive hides each message for
///   the visibility timeout plus [`RetryBackoff::delay_ms`](crate::RetryBackoff::delay_ms) of
///   its new receive count (the engine draws the jitter). A change of visibility sets exactly
///   the time asked.
/// * **Stored bytes**: a queue's [`QueueStats::stored_bytes`](crate::QueueStats::stored_bytes)
///   is the sum of [`message_size_with_payload`](crate::message_size_with_payload) (a
///   payload's size included) over the messages it stores (expired
///   ones left out, as in the counts), changed in the same atomic step as every add (send,
///   fan-out copy, arriving move) and removal (delete, purge, expiry, leaving move, queue
///   deletion); a move in flight between two queues counts in neither. Tenant quotas are
///   enforced on it, so it never drifts.
/// * **Payloads**: a message may keep its body in a payload store
///   ([`NewMessage::payload`](crate::NewMessage::payload)); the engine stores the reference with
///   the message, returns it from receive and peek, and keeps it unchanged through every move
///   (dead-letter moves, redrive) and in every copy of a publication
///   ([`Publication::render`](crate::Publication::render)); its size counts in the message's
///   size. In the same atomic step as the change, the engine records one
///   [`PayloadEventKind::Added`](crate::PayloadEventKind::Added) per committed message with a
///   payload (a send that is not a FIFO duplicate; each copy of a publication, at the
///   publication's commit) and one [`PayloadEventKind::Released`](crate::PayloadEventKind::Released)
///   per such message that leaves the store for good (delete, purge, expiry, queue or tenant
///   deletion, a copy no queue took); moves record nothing. Each event is recorded exactly
///   once per change, also across crashes and recovery; [`Payloads`] reads and forgets them.
/// * **Isolation**: queues are identified by `(tenant, name)`; nothing one tenant names can
///   reach another tenant's queue. Every message operation on a queue that does not exist
///   answers [`EngineError::QueueNotFound`] (before looking at its handles or messages).
///
/// The operations are grouped by capability — [`Tenants`], [`Queues`], [`Messages`],
/// [`Transfers`], [`Records`], [`Publishing`], [`Payloads`] and [`Upkeep`] — so that code which
/// needs one capability can ask for it alone. `Engine` is implemented for every type that has
/// all of them.
pub trait Engine:
    Tenants + Queues + Messages + Transfers + Records + Publishing + Payloads + Upkeep
{
}

impl<T: Tenants + Queues + Messages + Transfers + Records + Publishing + Payloads + Upkeep> Engine
    for T
{
}

/// The tenant catalog: records, quotas and tombstones.
///
/// Honours the rules stated on [`Engine`].
#[async_trait]
pub trait Tenants: Send + Sync + 'static {
    /// Records that a tenant exists (named by a valid token issued at `issued_at`) unless it
    /// already does, with default quotas, and answers its quotas. Called on every
    /// authenticated request: an engine answers from memory where it can (the quotas may then
    /// be as old as its tenant cache).
    ///
    /// A deleted tenant leaves a tombstone: the instant its deletion began. A token issued at
    /// or before that instant, or with no issue time, no longer names the tenant: the call
    /// answers [`EngineError::TenantDeleted`] and creates nothing, also once the tenant exists
    /// again. A token issued after it re-creates the tenant, fresh.
    async fn ensure_tenant(
        &self,
        id: &TenantId,
        issued_at: Option<Millis>,
        now: Millis,
    ) -> Result<Quotas, EngineError>;

    /// Creates a tenant; [`EngineError::AlreadyExists`] if it exists. A tombstone stays (tokens
    /// issued before the deletion keep being refused).
    async fn create_tenant(&self, record: TenantRecord) -> Result<(), EngineError>;

    /// Replaces a tenant's record; [`EngineError::TenantNotFound`] if absent.
    async fn update_tenant(&self, record: TenantRecord) -> Result<(), EngineError>;

    /// One tenant.
    async fn get_tenant(&self, id: &TenantId) -> Result<Option<TenantRecord>, EngineError>;

    /// Tenants ordered by id, strictly after `after`, at most `limit`.
    async fn list_tenants(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> Result<Vec<TenantRecord>, EngineError>;

    /// Deletes a tenant with all its queues and messages and records its tombstone at `now`;
    /// `false` if it did not exist (neither a record nor queues).
    ///
    /// Atomic against concurrent [`put_queue`](Queues::put_queue) calls: once it answers, no
    /// queue of the tenant that a `put_queue` started before the answer created survives, and
    /// every queue of the tenant that answers is listed and counted.
    async fn delete_tenant(&self, id: &TenantId, now: Millis) -> Result<bool, EngineError>;

    /// When the tenant was last deleted (its tombstone), if ever.
    async fn tenant_deleted_at(&self, id: &TenantId) -> Result<Option<Millis>, EngineError>;
}

/// The queue catalog of each tenant: configurations, stats, creation and deletion.
///
/// Honours the rules stated on [`Engine`].
#[async_trait]
pub trait Queues: Send + Sync + 'static {
    /// Creates the queue or replaces its configuration, keeping `created_at` and its messages.
    /// Answers the queue and whether it was created.
    ///
    /// Creating a queue checks the tenant record's `max_queues` atomically with the creation
    /// (concurrent creations never exceed it): past it, [`EngineError::QuotaExceeded`] and
    /// nothing changes. While the tenant is being deleted, or after its deletion until it
    /// exists again, [`EngineError::TenantDeleted`].
    async fn put_queue(
        &self,
        key: &QueueKey,
        config: QueueConfig,
        now: Millis,
    ) -> Result<(QueueInfo, bool), EngineError>;

    /// One queue with its stats at `now`.
    async fn get_queue(
        &self,
        key: &QueueKey,
        now: Millis,
    ) -> Result<Option<QueueInfo>, EngineError>;

    /// A queue's configuration alone: the cheap lookup the send and receive paths make.
    async fn queue_config(&self, key: &QueueKey) -> Result<Option<QueueConfig>, EngineError>;

    /// A tenant's queues ordered by name, whose names start with `prefix` and sort strictly
    /// after `after`, at most `limit`, with stats at `now`.
    async fn list_queues(
        &self,
        tenant: &TenantId,
        prefix: &str,
        after: Option<&QueueName>,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<QueueInfo>, EngineError>;

    /// How many queues a tenant owns.
    async fn count_queues(&self, tenant: &TenantId) -> Result<u64, EngineError>;

    /// Deletes a queue and its messages; `false` if it did not exist.
    async fn delete_queue(&self, key: &QueueKey) -> Result<bool, EngineError>;
}

/// Operations on the messages of one queue.
///
/// Honours the rules stated on [`Engine`].
#[async_trait]
pub trait Messages: Send + Sync + 'static {
    /// Stores messages durably. One answer per message, in order: each is accepted or refused
    /// on its own (a full queue refuses the excess).
    async fn send(
        &self,
        key: &QueueKey,
        messages: Vec<NewMessage>,
        now: Millis,
    ) -> Result<Vec<Result<SentMessage, SendRejection>>, EngineError>;

    /// Delivers up to `max_messages` receivable messages, hiding each for
    /// `visibility_timeout_seconds`. Never waits. `request_attempt_id` (FIFO queues; ignored on
    /// standard ones) makes a retried receive answer what the first one answered.
    async fn receive(
        &self,
        key: &QueueKey,
        max_messages: usize,
        visibility_timeout_seconds: u32,
        request_attempt_id: Option<&str>,
        now: Millis,
    ) -> Result<ReceiveOutcome, EngineError>;

    /// Deletes messages by receipt handle, durably. One answer per handle, in order.
    async fn delete(
        &self,
        key: &QueueKey,
        handles: &[String],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError>;

    /// Makes each message receivable `timeout_seconds` after `now` (0: at once). One answer per
    /// entry, in order.
    async fn change_visibility(
        &self,
        key: &QueueKey,
        entries: &[(String, u32)],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError>;

    /// Up to `limit` messages in `state`, oldest first, changing nothing.
    async fn peek(
        &self,
        key: &QueueKey,
        state: MessageState,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<StoredMessage>, EngineError>;

    /// Removes every message (visible, in flight, delayed).
    async fn purge(&self, key: &QueueKey) -> Result<(), EngineError>;

    /// A listener that fires when a message may have become receivable in the queue.
    async fn listen(&self, key: &QueueKey) -> Result<QueueListener, EngineError>;
}

/// Moves of messages between two queues of one tenant: into a dead-letter queue and back.
///
/// Honours the rules stated on [`Engine`] (see "Dead letters" there).
#[async_trait]
pub trait Transfers: Send + Sync + 'static {
    /// Moves the message delivered under `handle` to the queue's dead-letter queue at once,
    /// with `reason` (already validated), whatever its receive count. The handle is checked as
    /// for a delete: [`HandleError::Invalid`] first; an earlier delivery's handle, or a message
    /// that is gone, [`HandleError::Stale`]. A queue without a redrive policy is
    /// [`DeadLetterRefusal::NoRedrivePolicy`]; one whose dead-letter queue does not exist,
    /// [`DeadLetterRefusal::DeadLetterQueueMissing`]; either way nothing changes.
    async fn dead_letter(
        &self,
        key: &QueueKey,
        handle: &str,
        reason: &str,
        now: Millis,
    ) -> Result<Result<(), DeadLetterRefusal>, EngineError>;

    /// Moves messages of `from`, named by their `seq` (as [`Messages::peek`] answers them),
    /// whatever their state (a delivery in flight loses its handle): each to `destination`,
    /// or with `None` to the queue its [`StoredMessage::dead_letter`] names. One answer per
    /// seq, in order. A message that cannot move stays where it is.
    async fn redrive(
        &self,
        from: &QueueKey,
        seqs: &[u64],
        destination: Option<&QueueName>,
        now: Millis,
    ) -> Result<Vec<RedriveOutcome>, EngineError>;

    /// The seqs of the queue's stored messages (any state) above `after`, ascending, at most
    /// `limit`; with how far the engine looked (pass it as the next `after`: an engine may stop
    /// early so one call stays cheap, answering fewer seqs without having reached the end)
    /// and the highest seq the queue has handed out (everything stored later gets a greater
    /// one). What redrive tasks walk a dead-letter queue with.
    async fn message_seqs(
        &self,
        key: &QueueKey,
        after: u64,
        limit: usize,
    ) -> Result<SeqScan, EngineError>;

    /// Completes moves that a crash interrupted part way (on engines whose moves take
    /// several steps), each exactly once; answers how many it completed. Cheap when there
    /// are none. Safe to run on several gateways at once.
    async fn recover_transfers(&self, now: Millis) -> Result<u64, EngineError>;
}

/// Small durable records the services keep beside the queues (redrive tasks): a versioned map
/// from `(kind, key)` to a text value with compare-and-set, so that several gateways sharing a
/// store can share work without a lock service. Not for anything on a message's path.
///
/// Versions start at 1 and grow by one per write; a write names the version it expects (`None`:
/// the record must not exist) and happens only if that is the stored version, atomically.
#[async_trait]
pub trait Records: Send + Sync + 'static {
    /// One record.
    async fn get_record(&self, kind: &str, key: &str) -> Result<Option<Record>, EngineError>;

    /// Writes `value` if the record's version is `expected` (`None`: absent). Answers the new
    /// version, or `None` (nothing written) if the stored version was another.
    async fn put_record(
        &self,
        kind: &str,
        key: &str,
        value: String,
        expected: Option<u64>,
    ) -> Result<Option<u64>, EngineError>;

    /// Removes the record if its version is `expected`; answers whether it did.
    async fn delete_record(
        &self,
        kind: &str,
        key: &str,
        expected: u64,
    ) -> Result<bool, EngineError>;

    /// Records of `kind` whose keys start with `prefix` and sort strictly after `after`,
    /// ordered by key, at most `limit`.
    async fn list_records(
        &self,
        kind: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Record)>, EngineError>;
}

/// What keeps a store serving: its readiness and the background sweeps run on a timer.
///
/// Honours the rules stated on [`Engine`].
#[async_trait]
pub trait Upkeep: Send + Sync + 'static {
    /// Reachability check for readiness probes.
    async fn ping(&self) -> Result<(), EngineError>;

    /// Removes, durably, every message whose retention has ended by `now`. Answers how many.
    async fn expire(&self, now: Millis) -> Result<u64, EngineError>;
}

/// Topic publishing: the fan-out of a publication to one queue per matching subscription, the
/// topic-level state it needs (FIFO sequence numbers and deduplication) and the subscriptions'
/// counters. The topic and subscription catalog itself is the services' (kept in [`Records`]);
/// the services match filter policies and hand each publication over with its deliveries.
///
/// Every engine honours these rules; the conformance suite checks each of them:
///
/// * **Durable before the answer**: once `publish` answers, each [`Delivery`](crate::Delivery) of each
///   non-duplicate publication gets **exactly one copy** in its queue (or, if the queue cannot
///   take it, in the delivery's dead-letter queue), also across a crash of the caller or the
///   store at any point after the answer — an engine whose fan-out takes several steps records
///   the publication atomically with its deduplication and sequence number first, delivers
///   each copy idempotently per (publication message id, subscription id), and completes
///   interrupted fan-outs in [`Publishing::recover_publications`]. An error answer means the
///   publication may or may not have been recorded (the caller may retry: FIFO deduplication
///   makes that safe; standard topics are at-least-once).
/// * **Copies**: each copy is [`Publication::render`] of its delivery, stored as a new message
///   of the queue under [`Delivery::message_id`](crate::Delivery::message_id): visible after the queue's `delay_seconds`,
///   `sent_at` = the publish, never received; into a FIFO queue it joins the end of the queue
///   in the publication's `group_id` and keeps its `deduplication_id`. Copies meet no
///   queue-level deduplication. A queue that is missing, holds `max_depth` messages, or whose
///   `max_message_bytes` the copy's [`RenderedCopy::size`](crate::RenderedCopy::size) exceeds
///   does not take it: the copy goes to the delivery's `dead_letter_queue` (which, like a
///   dead-letter move, takes it whatever its depth, if it exists) and the outcome is
///   [`DeliveryOutcome::DeadLettered`](crate::DeliveryOutcome::DeadLettered), else [`DeliveryOutcome::Failed`](crate::DeliveryOutcome::Failed). One delivery's
///   failure never keeps the others from being made. Delivering wakes the queue's listeners.
/// * **FIFO topics** (names ending in `.fifo`): each publication gets the topic's next
///   sequence number (strictly increasing per topic incarnation). A `deduplication_id`
///   accepted within [`DEDUPLICATION_WINDOW_MS`](crate::DEDUPLICATION_WINDOW_MS) answers the
///   original's message id and sequence number with `duplicate: true` and delivers nothing
///   (two entries of one call with one id make one publication). Every queue receives a FIFO
///   topic's copies in sequence-number order, also when several callers publish at once and
///   across crashes. Standard topics have no sequence numbers and no deduplication.
/// * **Counters**: [`Publishing::subscription_stats`] counts each publication once per
///   subscription: `filtered_out` for each id in [`Publication::filtered_out`], `delivered` or
///   `failed` (dead-lettered copies included) per delivery once it is made.
#[async_trait]
pub trait Publishing: Send + Sync + 'static {
    /// Publishes up to ten publications to `topic` in order (one store round trip where the
    /// engine can), delivering their copies before answering where it can. One answer per
    /// publication, in order. The caller guarantees that each delivery's queue has the
    /// topic's kind.
    async fn publish(
        &self,
        topic: &TopicKey,
        publications: Vec<Publication>,
        now: Millis,
    ) -> Result<Vec<Published>, EngineError>;

    /// The counters of every subscription the topic has counted for, by subscription id
    /// (absent ids have counted nothing).
    async fn subscription_stats(
        &self,
        topic: &TopicKey,
    ) -> Result<BTreeMap<String, SubscriptionStats>, EngineError>;

    /// Forgets a topic's state (sequence numbers, deduplication records, counters), so that a
    /// topic created again under the name starts afresh. Copies of publications already
    /// answered are still delivered. Answers whether there was anything to forget.
    async fn delete_topic(&self, topic: &TopicKey) -> Result<bool, EngineError>;

    /// Completes fan-outs that a crash interrupted part way (on engines whose publish takes
    /// several steps), each delivery exactly once; answers how many deliveries it made. Cheap
    /// when there are none. Safe to run on several gateways at once.
    async fn recover_publications(&self, now: Millis) -> Result<u64, EngineError>;
}

/// The payload events an engine records (see "Payloads" on [`Engine`]), read and forgotten by
/// whoever frees payload-store objects. Several readers may work at once (one per gateway):
/// each may see an event another has read but not yet acknowledged, so what they do with
/// events must be idempotent.
#[async_trait]
pub trait Payloads: Send + Sync + 'static {
    /// Up to about `limit` recorded, unacknowledged events (across all queues/topics of the
    /// store; in recording order within one queue, no order across queues).
    async fn payload_events(&self, limit: usize) -> Result<PayloadEventBatch, EngineError>;

    /// Forgets the events of `batch`. Idempotent: acknowledging a batch twice, or one that a
    /// concurrent caller (another gateway) already acknowledged, drops nothing else.
    async fn ack_payload_events(&self, batch: &PayloadEventBatch) -> Result<(), EngineError>;
}
