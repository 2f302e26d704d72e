//! The suite with payload spill on: [`SpillingEngine`] wraps an engine and a payload store the
//! way the services use them when bodies spill — every body longer than [`SPILL_THRESHOLD`]
//! is written to the store and the engine keeps only its [`PayloadRef`]; every message the
//! engine answers gets its body back from the store (spliced into the envelope for an
//! enveloped fan-out copy). So every case of the suite runs unchanged over engines that hold
//! references, and each of its assertions on bodies, MD5s and sizes checks that the engine
//! carries references as faithfully as bodies. [`engine_suite!`](crate::engine_suite)'s
//! `spill_to` form expands the suite over it, and adds
//! [`spilled_messages_keep_only_references`], which looks under the decorator.
//!
//! The stores the engines' spill suites use are made here too: [`local_store`] (a temporary
//! folder) and [`s3_store`] (a bucket on one moto server shared by the test binary).

use crate::{Ctx, TestEngine};
use async_trait::async_trait;
use bytes::Bytes;
use sluice_engine::{
    Clock, DeadLetterRefusal, EngineError, HandleError, MessageState, Millis, NewMessage,
    PayloadEventBatch, PayloadRef, Publication, Published, QueueConfig, QueueInfo, QueueKey,
    QueueListener, QueueName, Quotas, ReceiveOutcome, Record, RedriveOutcome, SendRejection,
    SentMessage, SeqScan, StoredMessage, SubscriptionStats, TenantId, TenantRecord, TopicKey,
};
use sluice_engine::{
    Engine, Messages, Payloads, Publishing, Queues, Records, Tenants, Transfers, Upkeep,
};
use sluice_payload::{PayloadError, PayloadKey, PayloadStore, S3Settings, S3Store};
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once, OnceLock};

/// Bodies longer than this many bytes spill: low, so that nearly every body the cases send
/// goes to the store while the shortest ones stay inline (both paths run).
pub const SPILL_THRESHOLD: usize = 8;

/// What a store factory hands the suite: the store and whatever must live as long as it.
pub struct TestStore {
    /// Where spilled bodies go.
    pub store: Arc<dyn PayloadStore>,
    /// Dropped after the case.
    pub guard: Box<dyn Any + Send>,
}

/// An engine whose callers spill: bodies over [`SPILL_THRESHOLD`] go to `store` on send and
/// publish and come back from it on receive and peek. Everything else is the engine's.
#[derive(Clone)]
pub struct SpillingEngine {
    inner: Arc<dyn Engine>,
    store: Arc<dyn PayloadStore>,
    spilled: Arc<AtomicU64>,
}

impl SpillingEngine {
    /// Wraps `inner`, spilling to `store`.
    pub fn new(inner: Arc<dyn Engine>, store: Arc<dyn PayloadStore>) -> Self {
        Self {
            inner,
            store,
            spilled: Arc::new(AtomicU64::new(0)),
        }
    }

    /// How many bodies it has written to the store so far.
    pub fn spilled(&self) -> u64 {
        self.spilled.load(Ordering::Relaxed)
    }

    /// The engine underneath, which sees references and empty bodies.
    pub fn inner(&self) -> &Arc<dyn Engine> {
        &self.inner
    }

    /// The store the bodies go to.
    pub fn store(&self) -> &Arc<dyn PayloadStore> {
        &self.store
    }

    /// Writes `body` to the store if it is long enough to spill, leaving `body` empty, and
    /// answers the (unenveloped) reference.
    async fn spill(
        &self,
        tenant: &TenantId,
        body: &mut String,
    ) -> Result<Option<PayloadRef>, EngineError> {
        if body.len() <= SPILL_THRESHOLD {
            return Ok(None);
        }
        let key = PayloadKey::generate(&tenant.to_string())
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        let bytes = Bytes::from(std::mem::take(body));
        let size = bytes.len() as u64;
        self.store.put(&key, bytes).await.map_err(store_error)?;
        self.spilled.fetch_add(1, Ordering::Relaxed);
        Ok(Some(PayloadRef {
            key: key.to_string(),
            size,
            enveloped: false,
        }))
    }

    /// Gives a message answered by the engine its body back, as it would be unspilled.
    async fn restore(&self, message: &mut StoredMessage) -> Result<(), EngineError> {
        let Some(payload) = message.payload.take() else {
            return Ok(());
        };
        let key = PayloadKey::parse(&payload.key)
            .map_err(|e| EngineError::Internal(format!("payload key {:?}: {e}", payload.key)))?;
        let bytes = self.store.get(&key).await.map_err(store_error)?;
        assert_eq!(
            bytes.len() as u64,
            payload.size,
            "{}: the reference's size is the object's",
            payload.key
        );
        let object = String::from_utf8(bytes)
            .map_err(|e| EngineError::Internal(format!("payload {}: {e}", payload.key)))?;
        message.body = if payload.enveloped {
            splice(&message.body, object)?
        } else {
            assert!(
                message.body.is_empty(),
                "{}: a raw spilled message stores an empty body, not {:?}",
                payload.key,
                message.body
            );
            object
        };
        Ok(())
    }

    async fn restore_all(&self, messages: &mut [StoredMessage]) -> Result<(), EngineError> {
        for message in messages {
            self.restore(message).await?;
        }
        Ok(())
    }
}

/// Puts `object` in as the `Message` of an envelope stored with `"Message": ""`. Re-serialising
/// the parsed envelope writes its keys in the order it was read in (or sorted, without
/// serde_json's `preserve_order`: the order `Publication::render` writes then too), so the
/// result is byte for byte the copy rendered without spill.
pub fn splice(envelope: &str, object: String) -> Result<String, EngineError> {
    let mut json: serde_json::Value = serde_json::from_str(envelope)
        .map_err(|e| EngineError::Internal(format!("stored envelope {envelope:?}: {e}")))?;
    match json.get_mut("Message") {
        Some(serde_json::Value::String(message)) if message.is_empty() => {
            *message = object;
        }
        _ => {
            return Err(EngineError::Internal(format!(
                "stored envelope without an empty Message: {envelope}"
            )))
        }
    }
    Ok(json.to_string())
}

fn store_error(e: PayloadError) -> EngineError {
    EngineError::Unavailable(e.to_string())
}

#[async_trait]
impl Tenants for SpillingEngine {
    async fn ensure_tenant(
        &self,
        id: &TenantId,
        issued_at: Option<Millis>,
        now: Millis,
    ) -> Result<Quotas, EngineError> {
        self.inner.ensure_tenant(id, issued_at, now).await
    }

    async fn create_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        self.inner.create_tenant(record).await
    }

    async fn update_tenant(&self, record: TenantRecord) -> Result<(), EngineError> {
        self.inner.update_tenant(record).await
    }

    async fn get_tenant(&self, id: &TenantId) -> Result<Option<TenantRecord>, EngineError> {
        self.inner.get_tenant(id).await
    }

    async fn list_tenants(
        &self,
        after: Option<&TenantId>,
        limit: usize,
    ) -> Result<Vec<TenantRecord>, EngineError> {
        self.inner.list_tenants(after, limit).await
    }

    async fn delete_tenant(&self, id: &TenantId, now: Millis) -> Result<bool, EngineError> {
        self.inner.delete_tenant(id, now).await
    }

    async fn tenant_deleted_at(&self, id: &TenantId) -> Result<Option<Millis>, EngineError> {
        self.inner.tenant_deleted_at(id).await
    }
}

#[async_trait]
impl Queues for SpillingEngine {
    async fn put_queue(
        &self,
        key: &QueueKey,
        config: QueueConfig,
        now: Millis,
    ) -> Result<(QueueInfo, bool), EngineError> {
        self.inner.put_queue(key, config, now).await
    }

    async fn get_queue(
        &self,
        key: &QueueKey,
        now: Millis,
    ) -> Result<Option<QueueInfo>, EngineError> {
        self.inner.get_queue(key, now).await
    }

    async fn queue_config(&self, key: &QueueKey) -> Result<Option<QueueConfig>, EngineError> {
        self.inner.queue_config(key).await
    }

    async fn list_queues(
        &self,
        tenant: &TenantId,
        prefix: &str,
        after: Option<&QueueName>,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<QueueInfo>, EngineError> {
        self.inner
            .list_queues(tenant, prefix, after, limit, now)
            .await
    }

    async fn count_queues(&self, tenant: &TenantId) -> Result<u64, EngineError> {
        self.inner.count_queues(tenant).await
    }

    async fn delete_queue(&self, key: &QueueKey) -> Result<bool, EngineError> {
        self.inner.delete_queue(key).await
    }
}

#[async_trait]
impl Messages for SpillingEngine {
    async fn send(
        &self,
        key: &QueueKey,
        mut messages: Vec<NewMessage>,
        now: Millis,
    ) -> Result<Vec<Result<SentMessage, SendRejection>>, EngineError> {
        for message in &mut messages {
            if message.payload.is_none() {
                message.payload = self.spill(&key.tenant, &mut message.body).await?;
            }
        }
        self.inner.send(key, messages, now).await
    }

    async fn receive(
        &self,
        key: &QueueKey,
        max_messages: usize,
        visibility_timeout_seconds: u32,
        request_attempt_id: Option<&str>,
        now: Millis,
    ) -> Result<ReceiveOutcome, EngineError> {
        let mut outcome = self
            .inner
            .receive(
                key,
                max_messages,
                visibility_timeout_seconds,
                request_attempt_id,
                now,
            )
            .await?;
        for received in &mut outcome.messages {
            self.restore(&mut received.message).await?;
        }
        Ok(outcome)
    }

    async fn delete(
        &self,
        key: &QueueKey,
        handles: &[String],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        self.inner.delete(key, handles, now).await
    }

    async fn change_visibility(
        &self,
        key: &QueueKey,
        entries: &[(String, u32)],
        now: Millis,
    ) -> Result<Vec<Result<(), HandleError>>, EngineError> {
        self.inner.change_visibility(key, entries, now).await
    }

    async fn peek(
        &self,
        key: &QueueKey,
        state: MessageState,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<StoredMessage>, EngineError> {
        let mut messages = self.inner.peek(key, state, limit, now).await?;
        self.restore_all(&mut messages).await?;
        Ok(messages)
    }

    async fn purge(&self, key: &QueueKey) -> Result<(), EngineError> {
        self.inner.purge(key).await
    }

    async fn listen(&self, key: &QueueKey) -> Result<QueueListener, EngineError> {
        self.inner.listen(key).await
    }
}

#[async_trait]
impl Transfers for SpillingEngine {
    async fn dead_letter(
        &self,
        key: &QueueKey,
        handle: &str,
        reason: &str,
        now: Millis,
    ) -> Result<Result<(), DeadLetterRefusal>, EngineError> {
        self.inner.dead_letter(key, handle, reason, now).await
    }

    async fn redrive(
        &self,
        from: &QueueKey,
        seqs: &[u64],
        destination: Option<&QueueName>,
        now: Millis,
    ) -> Result<Vec<RedriveOutcome>, EngineError> {
        self.inner.redrive(from, seqs, destination, now).await
    }

    async fn message_seqs(
        &self,
        key: &QueueKey,
        after: u64,
        limit: usize,
    ) -> Result<SeqScan, EngineError> {
        self.inner.message_seqs(key, after, limit).await
    }

    async fn recover_transfers(&self, now: Millis) -> Result<u64, EngineError> {
        self.inner.recover_transfers(now).await
    }
}

#[async_trait]
impl Records for SpillingEngine {
    async fn get_record(&self, kind: &str, key: &str) -> Result<Option<Record>, EngineError> {
        self.inner.get_record(kind, key).await
    }

    async fn put_record(
        &self,
        kind: &str,
        key: &str,
        value: String,
        expected: Option<u64>,
    ) -> Result<Option<u64>, EngineError> {
        self.inner.put_record(kind, key, value, expected).await
    }

    async fn delete_record(
        &self,
        kind: &str,
        key: &str,
        expected: u64,
    ) -> Result<bool, EngineError> {
        self.inner.delete_record(kind, key, expected).await
    }

    async fn list_records(
        &self,
        kind: &str,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Record)>, EngineError> {
        self.inner.list_records(kind, prefix, after, limit).await
    }
}

#[async_trait]
impl Publishing for SpillingEngine {
    async fn publish(
        &self,
        topic: &TopicKey,
        mut publications: Vec<Publication>,
        now: Millis,
    ) -> Result<Vec<Published>, EngineError> {
        // One object per publication, shared by all its copies.
        for publication in &mut publications {
            if publication.payload.is_none() {
                publication.payload = self.spill(&topic.tenant, &mut publication.body).await?;
            }
        }
        self.inner.publish(topic, publications, now).await
    }

    async fn subscription_stats(
        &self,
        topic: &TopicKey,
    ) -> Result<BTreeMap<String, SubscriptionStats>, EngineError> {
        self.inner.subscription_stats(topic).await
    }

    async fn delete_topic(&self, topic: &TopicKey) -> Result<bool, EngineError> {
        self.inner.delete_topic(topic).await
    }

    async fn recover_publications(&self, now: Millis) -> Result<u64, EngineError> {
        self.inner.recover_publications(now).await
    }
}

#[async_trait]
impl Payloads for SpillingEngine {
    async fn payload_events(&self, limit: usize) -> Result<PayloadEventBatch, EngineError> {
        self.inner.payload_events(limit).await
    }

    async fn ack_payload_events(&self, batch: &PayloadEventBatch) -> Result<(), EngineError> {
        self.inner.ack_payload_events(batch).await
    }
}

#[async_trait]
impl Upkeep for SpillingEngine {
    async fn ping(&self) -> Result<(), EngineError> {
        self.inner.ping().await
    }

    async fn expire(&self, now: Millis) -> Result<u64, EngineError> {
        self.inner.expire(now).await
    }
}

/// The engine of `engine` wrapped to spill to `store`: what the `spill_to` cases run on, and
/// the decorator itself for the cases that look under it. The guards of both live as long as
/// the answer's.
pub fn spilling(engine: TestEngine, store: TestStore) -> (TestEngine, SpillingEngine) {
    let spilling = SpillingEngine::new(engine.engine, store.store);
    let test_engine = TestEngine {
        engine: Arc::new(spilling.clone()),
        // The engine's guard goes first (a tuple drops in order), then the store's.
        guard: Box::new((engine.guard, store.guard)),
    };
    (test_engine, spilling)
}

/// A store in a fresh temporary folder.
pub async fn local_store() -> TestStore {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temporary directory: {e}"));
    let store = sluice_payload::LocalStore::open(dir.path())
        .unwrap_or_else(|e| panic!("open a local payload store: {e}"));
    TestStore {
        store: Arc::new(store),
        guard: Box::new(dir),
    }
}

/// A store on the test binary's one moto server (started on first use), in a bucket of its
/// own. A fresh client per case: each case runs on its own runtime, and a client's
/// connections belong to the runtime that opened them.
pub async fn s3_store() -> TestStore {
    static SERVER: OnceLock<sluice_testkit::S3Server> = OnceLock::new();
    static CREDENTIALS: Once = Once::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let server = SERVER.get_or_init(|| {
        sluice_testkit::S3Server::start().unwrap_or_else(|e| panic!("start moto_server: {e}"))
    });
    // moto accepts any credentials; the store reads them from the standard chain.
    CREDENTIALS.call_once(|| {
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
        std::env::remove_var("AWS_PROFILE");
    });
    let bucket = format!(
        "spill-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut settings = S3Settings::from_url(&format!("s3://{bucket}/payloads"), "us-east-1")
        .unwrap_or_else(|e| panic!("S3 settings: {e}"));
    settings.endpoint = Some(server.endpoint());
    settings.force_path_style = true;
    let store = S3Store::connect(settings).await;
    store
        .create_bucket_if_missing()
        .await
        .unwrap_or_else(|e| panic!("create bucket {bucket}: {e}"));
    TestStore {
        store: Arc::new(store),
        guard: Box::new(()),
    }
}

/// Under the decorator, the engine holds references, not bodies: a long body sent is stored
/// empty with a reference to an object holding it, a short one stays inline, and an enveloped
/// fan-out copy keeps its envelope with an empty `Message` — which, spliced, is byte for byte
/// the copy rendered without spill.
pub async fn spilled_messages_keep_only_references(ctx: Ctx, spilling: SpillingEngine) {
    let inner = spilling.inner().clone();
    let (s, t) = (&ctx.services, &ctx.tenant);
    let key = |name: &str| {
        QueueKey::new(
            t.clone(),
            QueueName::parse(name).unwrap_or_else(|e| panic!("{e}")),
        )
    };
    for name in ["q", "wrapped"] {
        s.put_queue(t, name, Default::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let long = "a body \"quoted\", with a newline\n and ünicode";
    let before = spilling.spilled();
    for body in [long, "short"] {
        s.send(
            t,
            "q",
            sluice_services::SendRequest {
                body: body.to_owned(),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(spilling.spilled(), before + 1, "only the long body spills");

    let now = ctx.clock.now();
    let mut stored = inner
        .peek(&key("q"), MessageState::Visible, 10, now)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    stored.sort_by_key(|m| m.seq);
    assert_eq!(stored.len(), 2);
    let payload = stored[0]
        .payload
        .clone()
        .unwrap_or_else(|| panic!("the long body is kept as a reference: {:?}", stored[0]));
    assert_eq!(stored[0].body, "");
    assert!(!payload.enveloped);
    assert_eq!(payload.size, long.len() as u64);
    assert!(payload.key.starts_with(&format!("{t}/")));
    let object = spilling
        .store()
        .get(&PayloadKey::parse(&payload.key).unwrap_or_else(|e| panic!("{e}")))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(object, long.as_bytes());
    assert_eq!(
        (stored[1].body.as_str(), &stored[1].payload),
        ("short", &None)
    );

    // Through the decorator (and the services), the bodies are whole again.
    let received = s
        .receive(
            t,
            "q",
            sluice_services::ReceiveRequest {
                max_messages: Some(10),
                wait_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut bodies: Vec<&str> = received.iter().map(|m| m.body.as_str()).collect();
    bodies.sort_unstable();
    assert_eq!(bodies, vec![long, "short"]);

    // An enveloped fan-out copy: the envelope is stored with an empty Message.
    let publication = Publication {
        message_id: "p-1".into(),
        body: long.to_owned(),
        attributes: BTreeMap::new(),
        payload: None,
        subject: Some("s".into()),
        group_id: None,
        deduplication_id: None,
        topic_arn: "arn:aws:sns:us-east-1:000000000000:news".into(),
        timestamp: "2026-01-01T00:00:00.000Z".into(),
        deliveries: vec![sluice_engine::Delivery {
            subscription_id: "sub".into(),
            queue: key("wrapped").name,
            raw: false,
            dead_letter_queue: None,
            message_id: "copy-1".into(),
        }],
        filtered_out: Vec::new(),
    };
    let unspilled = publication.render(&publication.deliveries[0], None).body;
    let topic = TopicKey::new(t.clone(), key("wrapped").name);
    ctx.engine
        .publish(&topic, vec![publication], now)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let copy = inner
        .peek(&key("wrapped"), MessageState::Visible, 10, now)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(copy.len(), 1);
    let payload = copy[0].payload.clone().unwrap_or_else(|| {
        panic!("the copy keeps a reference: {:?}", copy[0]);
    });
    assert!(payload.enveloped);
    let envelope: serde_json::Value =
        serde_json::from_str(&copy[0].body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(envelope["Message"], "");
    assert_eq!(envelope["Subject"], "s");
    let through = ctx
        .engine
        .peek(&key("wrapped"), MessageState::Visible, 10, now)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(through[0].body, unspilled, "spliced copy = unspilled copy");
    assert_eq!(through[0].payload, None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::{Delivery, MessageAttribute};

    /// The splice gives back exactly what rendering without spill writes, for bodies that
    /// JSON must escape and with every optional envelope field present.
    #[test]
    fn splicing_a_spilled_envelope_gives_the_unspilled_copy() {
        let body = "he said \"hi\"\n\ttab \\ ünïcode \u{1F600} </script>";
        let publication = Publication {
            message_id: "m-1".into(),
            body: body.into(),
            attributes: BTreeMap::from([(
                "colour".to_owned(),
                MessageAttribute {
                    data_type: "String".into(),
                    value: "red \"dark\"".into(),
                },
            )]),
            payload: None,
            subject: Some("greeting".into()),
            group_id: Some("g".into()),
            deduplication_id: Some("d".into()),
            topic_arn: "arn:aws:sns:us-east-1:000000000000:t.fifo".into(),
            timestamp: "2026-12-04T10:00:00.000Z".into(),
            deliveries: Vec::new(),
            filtered_out: Vec::new(),
        };
        let delivery = Delivery {
            subscription_id: "s".into(),
            queue: QueueName::parse("q.fifo").unwrap_or_else(|e| panic!("{e}")),
            raw: false,
            dead_letter_queue: None,
            message_id: "c-1".into(),
        };
        let unspilled = publication.render(&delivery, Some(7));
        let spilled = Publication {
            body: String::new(),
            payload: Some(PayloadRef {
                key: "t/00000000000000000000000000000000".into(),
                size: body.len() as u64,
                enveloped: false,
            }),
            ..publication
        }
        .render(&delivery, Some(7));
        let spliced = splice(&spilled.body, body.to_owned()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spliced, unspilled.body);
        assert!(splice(&unspilled.body, String::new()).is_err());
    }
}
