//! Every Redis key and channel name the engine uses, built in one place.
//!
//! Layout (`P` is [`RedisOptions::key_prefix`](crate::RedisOptions::key_prefix)):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{P:<tenant>:<queue>}:meta` | hash | `uid`, `config` (JSON), `retention` (ms), `max_depth` (`""`: none), `created_at`, `updated_at`, counters `seq` and `delivery`, `stored_bytes` (the sum of `size`) |
//! | `{P:<tenant>:<queue>}:vis` | zset | every message, scored by `visible_at`; member = zero-padded seq, so equal scores order by seq |
//! | `{P:<tenant>:<queue>}:rcv` | zset | the messages received at least once, same scores (in flight = score > now) |
//! | `{P:<tenant>:<queue>}:sent` | zset | every message scored by `sent_at`: depth (`ZCARD`), retention, oldest age |
//! | `{P:<tenant>:<queue>}:msg` | hash | member → the immutable message (id, body, attributes, group) as JSON |
//! | `{P:<tenant>:<queue>}:rx` | hash | member → `receive_count:first_received_at:delivery` (absent until received) |
//! | `{P:<tenant>:<queue>}:ready` | zset | FIFO: the groups that may deliver now, scored by their head's seq (oldest head first) |
//! | `{P:<tenant>:<queue>}:wait` | zset | FIFO: the other non-empty groups (in flight or delayed head), scored by `ready_at` |
//! | `{P:<tenant>:<queue>}:group` | hash | FIFO: group → `ready_at`, when it may deliver again: the latest `visible_at` of its head and of its received messages |
//! | `{P:<tenant>:<queue>}:gmsg` | zset | FIFO: every message as `<len(group)>:<group> <member>`, score 0: a group's messages in order by `ZRANGEBYLEX` |
//! | `{P:<tenant>:<queue>}:mgrp` | hash | FIFO: member → its group |
//! | `{P:<tenant>:<queue>}:dedup` | hash | FIFO: deduplication key (`q:<id>` or `g:<len>:<group> <id>`) → `seq accepted_at message_id` |
//! | `{P:<tenant>:<queue>}:dedup-at` | zset | FIFO: the same keys scored by `accepted_at` (clean-up) |
//! | `{P:<tenant>:<queue>}:attempt` | hash | FIFO: receive request attempt id → the answer it got (see `receive.lua`) |
//! | `{P:<tenant>:<queue>}:attempt-at` | zset | FIFO: the same ids scored by when they were answered (clean-up) |
//! | `{P:<tenant>:<queue>}:out` | hash | moves leaving the queue: transfer id → intent (JSON: the message's full record, destination, dead-letter change, when), from the intent until the ack (see `ops/transfers.rs`) |
//! | `{P:<tenant>:<queue>}:applied` | zset | transfer ids applied into this queue, scored by when (idempotency of the apply step; trimmed after 24 h); also fan-out copies' apply ids `<publication message id>/<subscription id>` and refusals `!F<id>` (full) / `!L<id>` (too large), scored 23 h before their apply so the same trim forgets them after 1 h (see `ops/fanout_apply.lua`); outlives a queue deletion (expiring after 24 h; kept by a re-creation), so an apply repeated after the deletion answers what was applied |
//! | `{P:<tenant>:<queue>}:size` | hash | member → the message's size as `max_message_bytes` counts it; their sum is `stored_bytes` in `meta`, moved by the same script as every add and removal |
//! | `{P:<tenant>:<queue>}:pay` | hash | member → `<len(message id)>:<message id><payload key>` of each message whose body is in a payload store (only those), moved with `size` by every add and removal; a queue or tenant deletion, a purge and expiry turn its entries into `Released` events |
//! | `{P:<tenant>:<queue>}:plog` | stream | the queue's payload events (`k` = `A` added / `R` released / `M` maybe released by a deletion with moves pending, `t` = the `pay` value), appended by the script making the change; read and trimmed by `ops/payload_events.rs`; kept when the queue is deleted |
//! | `{P:<tenant>:<queue>}:fence` | string | the highest tenant generation a tenant deletion voided for this name: `put_queue` refuses registrations of that generation or older (kept for good) |
//! | `{P}:tenants` | hash | tenant id → tenant record (JSON) |
//! | `{P}:tenant-deleted` | hash | tenant id → when it was last deleted (ms; its tombstone, kept for good): tokens issued until then are refused |
//! | `{P}:tenant-gen` | hash | tenant id → its generation, one more per deletion |
//! | `{P}:tenant-deleting` | hash | tenant id → the generation of the deletion under way (queue registrations are refused meanwhile) |
//! | `{P}:tenant-ids` | zset | tenant ids, score 0 (ordered listing by `ZRANGEBYLEX`) |
//! | `{P}:tenant:<tenant>:queues` | zset | the tenant's queue names, score 0 (ordered listing, count) |
//! | `{P}:queues` | zset | `<tenant>/<queue>` of every queue, scored by when it was last registered |
//! | `{P}:expiry-due` | zset | `<tenant>/<queue>` of every queue, scored by when the expiry sweep should next look at it (its oldest message's expiry, at most an hour ahead; now, on every registration): a sweep costs in proportion to what is due |
//! | `{P}:expiry-due-filled` | string | set once `expiry-due` was filled from `queues` (stores written before it existed) |
//! | `{P}:queue-uids` | hash | `<tenant>/<queue>` → uid of the incarnation it was last registered for |
//! | `{P}:handle-key` | string | the receipt-handle key (hex), set once with `SET NX` by the first engine to connect and read by every engine at connect |
//! | `{P}:transfers` | zset | `<tenant>/<queue>` of queues that may hold unfinished moves, scored by when recovery should look (registered before each intent) |
//! | `{P}:transfer-regs` | hash | `<tenant>/<queue>` → random token of its latest `transfers` registration, so recovery drops only the entry it looked at |
//! | `{P:<tenant>:topic:<topic>}:meta` | hash | topic: `seq` (FIFO: the last sequence number issued; reset by `delete_topic`), `order` (the last outbox entry number; kept while the outbox holds entries) |
//! | `{P:<tenant>:topic:<topic>}:counters` | hash | topic: `<subscription>:delivered`, `<subscription>:filtered_out`, `<subscription>:failed` → count |
//! | `{P:<tenant>:topic:<topic>}:dedup` | hash | FIFO topic: deduplication id → `seq accepted_at message_id` |
//! | `{P:<tenant>:topic:<topic>}:dedup-at` | zset | FIFO topic: the same ids scored by `accepted_at` (clean-up) |
//! | `{P:<tenant>:topic:<topic>}:outbox` | hash | topic: outbox entry id (zero-padded `order`) → `<published_at> <seq (0: none)> <Publication JSON>`, from the publish until every delivery is made and acknowledged (see `ops/fanout.rs`) |
//! | `{P:<tenant>:topic:<topic>}:outbox-order` | zset | topic: the same entry ids scored by `order` (publish order, FIFO: seq order) |
//! | `{P:<tenant>:topic:<topic>}:plog` | stream | topic: `Added` events of a publication's copies (`publish.lua`) and `Released` of copies no queue took (`fanout_ack.lua`) |
//! | `{P}:payload-logs` | set | the key of every payload log that may hold events, added before the first script that may write to it (never removed: see `ops/payload_events.rs`) |
//! | `{P}:payload-pending` | set | the payload logs that may hold unacknowledged entries, which every read walks: added by a process at its read after it wrote to them (and by the periodic full walk of `payload-logs`), removed once a read finds them empty (see `ops/payload_events.rs`) |
//! | `{P}:fanouts` | zset | `<tenant>/<topic>` of topics that may hold pending fan-outs, scored by when recovery should look (registered before each publish) |
//! | `{P}:fanout-regs` | hash | `<tenant>/<topic>` → random token of its latest `fanouts` registration, so recovery drops only the entry it looked at |
//! | `{P}:tenant:<tenant>:topics` | zset | the names of the tenant's topics that were ever published to, score 0 (what a tenant deletion forgets) |
//! | `{P}:queue-gens` | hash | `<tenant>/<queue>` → tenant generation of its last registration |
//! | `{P}:records:<kind>` | hash | the services' small records (redrive tasks): key → `<version> <value>` |
//! | `{P}:record-keys:<kind>` | zset | the same keys, score 0 (ordered listing by `ZRANGEBYLEX`) |
//! | `{P:<tenant>}:rate` | string | the tenant's rate-limit bucket: its GCRA theoretical arrival time (µs), expiring once the bucket is full again (absent for idle tenants and tenants without `requests_per_second`) |
//!
//! Pub/sub channel `P:wake` carries `<engine instance> <tenant>/<queue>` after a send (or a
//! visibility reset to 0, or a queue deletion).
//!
//! Every queue script gets the queue's keys as `KEYS`: a standard queue's six, then `out`,
//! `applied`, `size`, `pay` and `plog` (eleven); a FIFO queue (name ending in `.fifo`) its six,
//! the nine FIFO keys, then the same five (twenty; that is how a script tells them apart);
//! `put_queue` and `delete_queue` get the `fence` key after them.
//! A topic's keys share the tag `{P:<tenant>:topic:<topic>}`: one more `:` than any queue's
//! tag `{P:<tenant>:<queue>}` (tenant ids and queue names contain none), so a topic never
//! shares a queue's tag, whatever the names. Topic scripts take its six keys in the order of
//! the table (see `ops/publish.lua`), `plog` last.
//! The keys of one queue share one hash tag, so each queue lives in one cluster slot and
//! each queue operation is one script over one slot. The registries share another tag so that
//! registering or dropping a queue or tenant is one atomic script; they are touched by
//! administration and by the expiry sweep only, never by send, receive or delete.

use sluice_engine::{EngineError, QueueKey, QueueName, TenantId, TopicKey};

/// Builds key names under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

/// The keys of one queue, in the order every queue script takes them as `KEYS`: the six of
/// every queue, then (FIFO queues only) the nine of FIFO bookkeeping, then the two of moves
/// and the sizes.
#[derive(Debug, Clone)]
pub(crate) struct QueueKeys(pub Vec<String>);

/// The parts of every queue's key names.
const QUEUE_PARTS: [&str; 6] = ["meta", "vis", "rcv", "sent", "msg", "rx"];
/// The parts FIFO queues add.
const FIFO_PARTS: [&str; 9] = [
    "ready",
    "wait",
    "group",
    "gmsg",
    "mgrp",
    "dedup",
    "dedup-at",
    "attempt",
    "attempt-at",
];
/// The parts of a topic's keys, in the order every topic script takes them as `KEYS`.
const TOPIC_PARTS: [&str; 7] = [
    "meta",
    "counters",
    "dedup",
    "dedup-at",
    "outbox",
    "outbox-order",
    "plog",
];
/// The parts of moves between queues, then the per-message sizes and payload references, then
/// the payload event log (which outlives the queue: not one of the keys deleting it removes),
/// last in every queue's keys.
const TRANSFER_PARTS: [&str; 5] = ["out", "applied", "size", "pay", "plog"];

impl Keys {
    /// Checks the prefix cannot break a hash tag or a key.
    pub(crate) fn new(prefix: &str) -> Result<Self, EngineError> {
        let bad = |c: char| c == '{' || c == '}' || c.is_whitespace() || c.is_control();
        if prefix.is_empty() || prefix.chars().any(bad) {
            return Err(EngineError::Internal(format!(
                "invalid Redis key prefix {prefix:?}: it must be non-empty, without braces or whitespace"
            )));
        }
        Ok(Self {
            prefix: prefix.to_owned(),
        })
    }

    /// The keys of one queue: meta, vis, rcv, sent, msg, rx, and for a FIFO queue ready,
    /// wait, group, gmsg, mgrp, dedup, dedup-at, attempt, attempt-at; then out, applied, size,
    /// pay, and the payload log plog.
    pub(crate) fn queue(&self, key: &QueueKey) -> QueueKeys {
        let tag = format!("{{{}:{}:{}}}", self.prefix, key.tenant, key.name);
        let fifo: &[&str] = if key.name.is_fifo() { &FIFO_PARTS } else { &[] };
        QueueKeys(
            QUEUE_PARTS
                .iter()
                .chain(fifo)
                .chain(&TRANSFER_PARTS)
                .map(|part| format!("{tag}:{part}"))
                .collect(),
        )
    }

    /// The queue's fence: under its hash tag, but not one of the keys deleting it removes.
    pub(crate) fn queue_fence(&self, key: &QueueKey) -> String {
        format!("{{{}:{}:{}}}:fence", self.prefix, key.tenant, key.name)
    }

    /// The queue's `applied` zset: ids of moves and fan-out copies applied into it (also one
    /// of its queue keys).
    pub(crate) fn applied_ids(&self, key: &QueueKey) -> String {
        format!("{{{}:{}:{}}}:applied", self.prefix, key.tenant, key.name)
    }

    /// The queue's payload event log (the last of its queue keys).
    pub(crate) fn queue_payload_log(&self, key: &QueueKey) -> String {
        format!("{{{}:{}:{}}}:plog", self.prefix, key.tenant, key.name)
    }

    /// The topic's payload event log (the last of its keys).
    pub(crate) fn topic_payload_log(&self, topic: &TopicKey) -> String {
        format!(
            "{{{}:{}:topic:{}}}:plog",
            self.prefix, topic.tenant, topic.name
        )
    }

    /// Every payload event log that may hold events (see `ops/payload_events.rs`).
    pub(crate) fn payload_logs(&self) -> String {
        self.registry("payload-logs")
    }

    /// The logs that may hold unacknowledged events, which each read walks (see
    /// `ops/payload_events.rs`); a subset of [`payload_logs`](Self::payload_logs) but for
    /// members whose log is drained.
    pub(crate) fn payload_pending(&self) -> String {
        self.registry("payload-pending")
    }

    /// The queue's `out` hash: intents of moves leaving it (also one of its queue keys).
    pub(crate) fn transfer_intents(&self, key: &QueueKey) -> String {
        format!("{{{}:{}:{}}}:out", self.prefix, key.tenant, key.name)
    }

    /// The keys of one topic: meta, counters, dedup, dedup-at, outbox, outbox-order, plog.
    pub(crate) fn topic(&self, topic: &TopicKey) -> Vec<String> {
        let tag = format!("{{{}:{}:topic:{}}}", self.prefix, topic.tenant, topic.name);
        TOPIC_PARTS
            .iter()
            .map(|part| format!("{tag}:{part}"))
            .collect()
    }

    /// The topic's `counters` hash (also one of its keys).
    pub(crate) fn topic_counters(&self, topic: &TopicKey) -> String {
        format!(
            "{{{}:{}:topic:{}}}:counters",
            self.prefix, topic.tenant, topic.name
        )
    }

    /// How a topic is named in the due index of fan-outs: `<tenant>/<topic>` (topics and
    /// queues are never in one index, so the form may be the queues').
    pub(crate) fn topic_id(topic: &TopicKey) -> String {
        format!("{}/{}", topic.tenant, topic.name)
    }

    /// The inverse of [`topic_id`](Self::topic_id).
    pub(crate) fn parse_topic_id(text: &str) -> Option<TopicKey> {
        let key = Self::parse_queue_id(text)?;
        Some(TopicKey::new(key.tenant, key.name))
    }

    /// How a queue is named in the registry and in wake-ups: `<tenant>/<queue>`.
    pub(crate) fn queue_id(key: &QueueKey) -> String {
        format!("{}/{}", key.tenant, key.name)
    }

    /// The inverse of [`queue_id`](Self::queue_id); `None` for anything it cannot have made.
    pub(crate) fn parse_queue_id(text: &str) -> Option<QueueKey> {
        let (tenant, name) = text.split_once('/')?;
        Some(QueueKey::new(
            TenantId::parse(tenant).ok()?,
            QueueName::parse(name).ok()?,
        ))
    }

    fn registry(&self, part: &str) -> String {
        format!("{{{}}}:{part}", self.prefix)
    }

    /// Every queue, for the expiry sweep.
    pub(crate) fn all_queues(&self) -> String {
        self.registry("queues")
    }

    /// When each registered queue is next due for the expiry sweep.
    pub(crate) fn expiry_due(&self) -> String {
        self.registry("expiry-due")
    }

    /// Set once `expiry-due` holds every queue registered before it existed.
    pub(crate) fn expiry_due_filled(&self) -> String {
        self.registry("expiry-due-filled")
    }

    /// Per registered queue, the uid of the incarnation it was registered for.
    pub(crate) fn queue_uids(&self) -> String {
        self.registry("queue-uids")
    }

    /// Per registered queue, the tenant generation of its registration.
    pub(crate) fn queue_gens(&self) -> String {
        self.registry("queue-gens")
    }

    /// Tenant tombstones: when each deleted tenant was last deleted.
    pub(crate) fn tenant_tombstones(&self) -> String {
        self.registry("tenant-deleted")
    }

    /// Tenant generations.
    pub(crate) fn tenant_gens(&self) -> String {
        self.registry("tenant-gen")
    }

    /// Queues that may hold unfinished moves, by when recovery should look.
    pub(crate) fn transfers_due(&self) -> String {
        self.registry("transfers")
    }

    /// The token of each queue's latest `transfers_due` registration.
    pub(crate) fn transfer_regs(&self) -> String {
        self.registry("transfer-regs")
    }

    /// Topics that may hold pending fan-outs, by when recovery should look.
    pub(crate) fn fanouts_due(&self) -> String {
        self.registry("fanouts")
    }

    /// The token of each topic's latest `fanouts_due` registration.
    pub(crate) fn fanout_regs(&self) -> String {
        self.registry("fanout-regs")
    }

    /// The names of one tenant's topics that were published to.
    pub(crate) fn tenant_topics(&self, tenant: &TenantId) -> String {
        self.registry(&format!("tenant:{tenant}:topics"))
    }

    /// Tenant deletions under way.
    pub(crate) fn tenant_deleting(&self) -> String {
        self.registry("tenant-deleting")
    }

    /// One tenant's queue names.
    pub(crate) fn tenant_queues(&self, tenant: &TenantId) -> String {
        self.registry(&format!("tenant:{tenant}:queues"))
    }

    /// A tenant's rate-limit bucket: under its own tag, so tenants' buckets spread over a
    /// cluster's slots.
    pub(crate) fn tenant_rate(&self, tenant: &TenantId) -> String {
        format!("{{{}:{tenant}}}:rate", self.prefix)
    }

    /// Tenant records by id.
    pub(crate) fn tenants(&self) -> String {
        self.registry("tenants")
    }

    /// Tenant ids in order.
    pub(crate) fn tenant_ids(&self) -> String {
        self.registry("tenant-ids")
    }

    /// The services' records of one kind: key -> `<version> <value>`.
    pub(crate) fn records(&self, kind: &str) -> String {
        self.registry(&format!("records:{kind}"))
    }

    /// The keys of those records, in order.
    pub(crate) fn record_keys(&self, kind: &str) -> String {
        self.registry(&format!("record-keys:{kind}"))
    }

    /// The key receipt handles are authenticated with, shared by every engine on the prefix.
    pub(crate) fn handle_key(&self) -> String {
        self.registry("handle-key")
    }

    /// The pub/sub channel of wake-ups.
    pub(crate) fn wake_channel(&self) -> String {
        format!("{}:wake", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tenant: &str, name: &str) -> QueueKey {
        QueueKey::new(
            TenantId::parse(tenant).unwrap(),
            QueueName::parse(name).unwrap(),
        )
    }

    #[test]
    fn queue_keys_share_one_hash_tag() {
        let keys = Keys::new("sluice").unwrap();
        let q = keys.queue(&key("acme", "orders.fifo"));
        assert_eq!(q.0.len(), 20);
        assert_eq!(keys.queue(&key("acme", "orders")).0.len(), 11);
        assert_eq!(
            q.0.last(),
            Some(&keys.queue_payload_log(&key("acme", "orders.fifo")))
        );
        for k in &q.0 {
            assert!(k.starts_with("{sluice:acme:orders.fifo}:"), "{k}");
        }
        let fence = keys.queue_fence(&key("acme", "orders.fifo"));
        assert!(fence.starts_with("{sluice:acme:orders.fifo}:") && !q.0.contains(&fence));
        assert!(q
            .0
            .contains(&keys.transfer_intents(&key("acme", "orders.fifo"))));
        assert_eq!(
            q.0[q.0.len() - 4],
            keys.applied_ids(&key("acme", "orders.fifo"))
        );
        assert_eq!(q.0[q.0.len() - 3], "{sluice:acme:orders.fifo}:size");
        assert_eq!(q.0[q.0.len() - 2], "{sluice:acme:orders.fifo}:pay");
        assert_eq!(
            keys.tenant_queues(&TenantId::parse("acme").unwrap()),
            "{sluice}:tenant:acme:queues"
        );
        assert!(Keys::new("a{b").is_err());
        assert!(Keys::new("").is_err());
    }

    #[test]
    fn topic_keys_never_share_a_queue_tag() {
        let keys = Keys::new("sluice").unwrap();
        let topic = TopicKey::new(
            TenantId::parse("acme").unwrap(),
            QueueName::parse("topic").unwrap(),
        );
        let t = keys.topic(&topic);
        assert_eq!(t.len(), 7);
        assert_eq!(t[1], keys.topic_counters(&topic));
        assert_eq!(t[6], keys.topic_payload_log(&topic));
        for k in &t {
            assert!(k.starts_with("{sluice:acme:topic:topic}:"), "{k}");
        }
        // A queue named like the topic, or named "topic", has another tag.
        for q in [key("acme", "topic"), key("topic", "topic")] {
            for k in keys.queue(&q).0 {
                assert!(!t
                    .iter()
                    .any(|tk| tk.split('}').next() == k.split('}').next()));
            }
        }
        assert_eq!(
            Keys::parse_topic_id(&Keys::topic_id(&topic)),
            Some(topic.clone())
        );
    }

    #[test]
    fn queue_ids_round_trip() {
        let k = key("acme", "orders");
        assert_eq!(Keys::parse_queue_id(&Keys::queue_id(&k)), Some(k));
        assert_eq!(Keys::parse_queue_id("no-slash"), None);
        assert_eq!(Keys::parse_queue_id("Bad/x"), None);
    }
}
