//! Payload spill: bodies above the spill threshold go to the payload store as one object each,
//! and the engine keeps a reference ([`PayloadRef`]) with an empty body; receive and peek read
//! the object back, so every front-end gets full bodies without knowing of the store.
//!
//! A send or publish that spills writes, in this order: the object (`PayloadStore::put`, the
//! body moved into it without a copy), its ledger record (`payload_ledger.rs`), then the engine
//! commit naming it. Digests, FIFO deduplication ids, validation and size checks are taken from
//! the full body before it moves. When the engine definitely did not store any message naming
//! the object (a FIFO duplicate, a refusal, a publish none of whose copies landed) the object
//! and its record are removed at once; after an ambiguous failure (the engine unavailable) both
//! stay, for the garbage collector's orphan sweep to judge once the grace period has passed.
//!
//! A store that cannot be reached makes a spilling send or publish `Unavailable` with nothing
//! enqueued, and a receive that took a spilled message it cannot read `Unavailable` too: every
//! message that receive took is made visible again at once and none is counted as received
//! (the engine's receive count of each has gone up by one all the same).

use crate::payload_ledger::{self, LedgerRecord};
use crate::{ServiceError, Services};
use bytes::Bytes;
use sluice_engine::{
    EngineError, Millis, PayloadRef, Publication, Published, QueueKey, StoredMessage, TenantId,
};
use sluice_payload::{PayloadError, PayloadKey, PayloadStore};
use std::sync::Arc;
use std::time::Duration;

/// The default `spill_threshold_bytes`: bodies larger than this are spilled.
pub const DEFAULT_SPILL_THRESHOLD_BYTES: usize = 262_144;

/// The default grace period before an object no committed message refers to is removed.
pub const DEFAULT_ORPHAN_GRACE: Duration = Duration::from_secs(3600);

/// Where large bodies go and from what size.
#[derive(Debug, Clone)]
pub struct PayloadSettings {
    /// The store.
    pub store: Arc<dyn PayloadStore>,
    /// Bodies with more bytes than this are spilled.
    pub spill_threshold_bytes: usize,
    /// How long an object written for a message that never committed is kept before the
    /// garbage collector may remove it (longer than any send takes between upload and commit).
    pub orphan_grace: Duration,
}

/// An object this request wrote, with its ledger record's version, until the engine's answer
/// says whether a message refers to it.
#[derive(Debug)]
pub(crate) struct Spilled {
    key: PayloadKey,
    version: u64,
}

/// Ends the process at once, as a kill would, when the environment variable
/// `SLUICE_TEST_FAILPOINT` names `point`: how the crash tests stop a gateway between the
/// steps of a spilling send (read once; unset in any real deployment, so a no-op there).
fn crash_point(point: &str) {
    static FAILPOINT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let armed = FAILPOINT.get_or_init(|| std::env::var("SLUICE_TEST_FAILPOINT").ok());
    if armed.as_deref() == Some(point) {
        tracing::error!(point, "SLUICE_TEST_FAILPOINT reached: aborting");
        std::process::abort();
    }
}

/// Counts a failed store call in `sluice_payload_store_errors_total{operation}`.
fn count_failure(operation: &'static str) {
    metrics::counter!("sluice_payload_store_errors_total", "operation" => operation).increment(1);
}

/// What a failed store call means to the caller: always worth retrying later.
pub(crate) fn unavailable(operation: &'static str, error: PayloadError) -> ServiceError {
    count_failure(operation);
    ServiceError::Unavailable(error.to_string())
}

/// Whether the engine definitely stored nothing (as opposed to a failure after which it may
/// have committed).
pub(crate) fn stored_nothing(error: &EngineError) -> bool {
    !matches!(
        error,
        EngineError::Unavailable(_) | EngineError::Internal(_)
    )
}

/// Whether a publish's answer leaves no message naming its object: a duplicate, or every copy
/// refused with no dead-letter queue to take it.
pub(crate) fn published_nothing(answer: &Published) -> bool {
    answer.duplicate
        || answer
            .outcomes
            .iter()
            .all(|(_, outcome)| matches!(outcome, sluice_engine::DeliveryOutcome::Failed(_)))
}

/// The SNS envelope of a spilled enveloped copy holds `"Message":""`; this puts `message` there,
/// JSON-escaped exactly as `Publication::render` escapes it, so the copy reads back byte for
/// byte as if it had never been spilled. Inside a JSON string every `"` is escaped, so the
/// first unescaped `"Message":""` is the envelope's own key.
fn splice_message(envelope: &str, message: &str) -> Option<String> {
    const EMPTY: &str = r#""Message":"""#;
    let at = envelope.find(EMPTY)?;
    let escaped = serde_json::to_string(message).ok()?;
    let mut spliced = String::with_capacity(envelope.len() + escaped.len());
    spliced.push_str(&envelope[..at]);
    spliced.push_str(r#""Message":"#);
    spliced.push_str(&escaped);
    spliced.push_str(&envelope[at + EMPTY.len()..]);
    Some(spliced)
}

impl Services {
    /// The same services spilling large bodies to `settings.store`.
    pub fn with_payloads(mut self, settings: PayloadSettings) -> Self {
        self.payloads = Some(Arc::new(settings));
        self
    }

    /// The payload store and its settings, when one is configured.
    pub fn payload_settings(&self) -> Option<&PayloadSettings> {
        self.payloads.as_deref()
    }

    /// Moves `body` to the store if it is above the spill threshold and a store is configured,
    /// recording `holders` (the message ids that will name it) in the ledger; answers the
    /// reference for the engine (the body is then empty) and what to settle once the engine
    /// answered. `None`: the body stays where it is.
    pub(crate) async fn spill(
        &self,
        tenant: &TenantId,
        body: &mut String,
        holders: Vec<String>,
        now: Millis,
    ) -> Result<Option<(PayloadRef, Spilled)>, ServiceError> {
        let Some(settings) = &self.payloads else {
            return Ok(None);
        };
        if body.len() <= settings.spill_threshold_bytes || holders.is_empty() {
            return Ok(None);
        }
        let key = PayloadKey::generate(tenant.as_str())
            .map_err(|e| ServiceError::Internal(format!("payload key for {tenant}: {e}")))?;
        let size = body.len() as u64;
        settings
            .store
            .put(&key, Bytes::from(std::mem::take(body)))
            .await
            .map_err(|error| unavailable("put", error))?;
        crash_point("payload-after-upload");
        let record = LedgerRecord::uncommitted(holders, now);
        let version = match payload_ledger::create(self.engine.as_ref(), &key, &record).await {
            Ok(version) => version,
            Err(error) => {
                // Without a record the object is an orphan from the start: remove it now if
                // the store lets us, else the orphan sweep will.
                if let Err(e) = settings.store.delete(&key).await {
                    count_failure("delete");
                    tracing::warn!(%key, error = %e, "could not remove an unrecorded payload object");
                }
                return Err(error);
            }
        };
        crash_point("payload-after-record");
        let reference = PayloadRef {
            key: key.as_str().to_owned(),
            size,
            enveloped: false,
        };
        Ok(Some((reference, Spilled { key, version })))
    }

    /// Spills a publication's body (one object for all its copies), naming every delivery's
    /// message id as a holder. A publication with no delivery keeps its body: nothing would
    /// refer to the object.
    pub(crate) async fn spill_publication(
        &self,
        tenant: &TenantId,
        publication: &mut Publication,
        now: Millis,
    ) -> Result<Option<Spilled>, ServiceError> {
        let holders = publication
            .deliveries
            .iter()
            .map(|d| d.message_id.clone())
            .collect();
        let spilled = self
            .spill(tenant, &mut publication.body, holders, now)
            .await?;
        Ok(spilled.map(|(reference, spilled)| {
            publication.payload = Some(reference);
            spilled
        }))
    }

    /// Runs a batch's spills concurrently; one failure fails the batch, after removing the
    /// objects the others wrote.
    pub(crate) async fn spill_all<F>(
        &self,
        spills: impl IntoIterator<Item = F>,
    ) -> Result<Vec<Option<Spilled>>, ServiceError>
    where
        F: std::future::Future<Output = Result<Option<Spilled>, ServiceError>>,
    {
        let mut spilled = Vec::new();
        let mut failure = None;
        for result in futures_util::future::join_all(spills).await {
            match result {
                Ok(s) => spilled.push(s),
                Err(error) => failure = Some(error),
            }
        }
        match failure {
            None => Ok(spilled),
            Some(error) => {
                self.discard_all(spilled).await;
                Err(error)
            }
        }
    }

    /// Removes an object no message refers to, and its ledger record. Failures are logged:
    /// the answer to the caller is the engine's, and the orphan sweep removes what is left.
    pub(crate) async fn discard(&self, spilled: Spilled) {
        let Some(settings) = &self.payloads else {
            return;
        };
        if let Err(error) = settings.store.delete(&spilled.key).await {
            count_failure("delete");
            tracing::warn!(key = %spilled.key, %error, "could not remove an unused payload object");
            return;
        }
        if let Err(error) =
            payload_ledger::remove(self.engine.as_ref(), &spilled.key, spilled.version).await
        {
            tracing::warn!(key = %spilled.key, %error, "could not remove an unused payload record");
        }
    }

    /// Discards every object of `spilled` (those of a request that failed as a whole).
    pub(crate) async fn discard_all(&self, spilled: impl IntoIterator<Item = Option<Spilled>>) {
        for spilled in spilled.into_iter().flatten() {
            self.discard(spilled).await;
        }
    }

    /// Reads one spilled body back into `message.body`.
    async fn fill_body(
        &self,
        tenant: &TenantId,
        message: &mut StoredMessage,
    ) -> Result<(), ServiceError> {
        let Some(reference) = &message.payload else {
            return Ok(());
        };
        let Some(settings) = &self.payloads else {
            return Err(ServiceError::Unavailable(format!(
                "message {} has its body in a payload store, and none is configured",
                message.message_id
            )));
        };
        let key = PayloadKey::parse(&reference.key)
            .ok()
            .filter(|key| key.tenant() == tenant.as_str())
            .ok_or_else(|| {
                ServiceError::Internal(format!(
                    "message {} names {:?}, not a payload key of its tenant",
                    message.message_id, reference.key
                ))
            })?;
        let bytes = settings.store.get(&key).await.map_err(|error| {
            tracing::warn!(%key, %error, "a spilled body cannot be read");
            unavailable("get", error)
        })?;
        let body = String::from_utf8(bytes)
            .map_err(|_| ServiceError::Internal(format!("payload object {key} is not UTF-8")))?;
        message.body = if reference.enveloped {
            splice_message(&message.body, &body).ok_or_else(|| {
                ServiceError::Internal(format!(
                    "message {}: its envelope has no empty Message to fill",
                    message.message_id
                ))
            })?
        } else {
            body
        };
        Ok(())
    }

    /// Fills in every spilled body of `messages`, reading their objects concurrently.
    pub(crate) async fn fill_bodies<'a>(
        &self,
        tenant: &TenantId,
        messages: impl IntoIterator<Item = &'a mut StoredMessage>,
    ) -> Result<(), ServiceError> {
        futures_util::future::try_join_all(
            messages
                .into_iter()
                .filter(|m| m.payload.is_some())
                .map(|m| self.fill_body(tenant, m)),
        )
        .await?;
        Ok(())
    }

    /// After a receive whose spilled bodies could not be read: makes every message it took
    /// visible again now, so the next receive (once the store is back) gets them.
    pub(crate) async fn release_received(&self, key: &QueueKey, handles: Vec<String>) {
        let changes: Vec<(String, u32)> = handles.into_iter().map(|h| (h, 0)).collect();
        match self
            .engine
            .change_visibility(key, &changes, self.clock.now())
            .await
        {
            Ok(answers) => {
                for answer in answers.into_iter().filter_map(Result::err) {
                    tracing::warn!(queue = %key, error = %answer, "could not release a message whose body is unreadable");
                }
            }
            Err(error) => {
                tracing::warn!(queue = %key, %error, "could not release messages whose bodies are unreadable; they come back after their visibility timeout");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, QueueConfigPatch, ReceiveRequest, SendRequest};
    use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
    use sluice_engine::ManualClock;
    use sluice_payload::{LocalStore, ObjectPage};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A local folder that can be made unreachable.
    #[derive(Debug)]
    struct Flaky {
        inner: LocalStore,
        down: AtomicBool,
    }

    impl Flaky {
        fn check(&self) -> Result<(), PayloadError> {
            if self.down.load(Ordering::SeqCst) {
                return Err(PayloadError::Unavailable("down for the test".into()));
            }
            Ok(())
        }
    }

    #[async_trait::async_trait]
    impl PayloadStore for Flaky {
        async fn put(&self, key: &PayloadKey, body: Bytes) -> Result<(), PayloadError> {
            self.check()?;
            self.inner.put(key, body).await
        }
        async fn get(&self, key: &PayloadKey) -> Result<Vec<u8>, PayloadError> {
            self.check()?;
            self.inner.get(key).await
        }
        async fn delete(&self, key: &PayloadKey) -> Result<(), PayloadError> {
            self.check()?;
            self.inner.delete(key).await
        }
        async fn list(
            &self,
            after: Option<&str>,
            limit: usize,
        ) -> Result<ObjectPage, PayloadError> {
            self.inner.list(after, limit).await
        }
        async fn ping(&self) -> Result<(), PayloadError> {
            self.check()
        }
    }

    const NOW: Millis = 1_000_000_000_000;

    async fn spilling_services(dir: &std::path::Path) -> (Services, Arc<Flaky>, TenantId) {
        let engine = Arc::new(
            EmbeddedEngine::open(&dir.join("engine"), EmbeddedOptions::default()).unwrap(),
        );
        let store = Arc::new(Flaky {
            inner: LocalStore::open(dir.join("payloads")).unwrap(),
            down: AtomicBool::new(false),
        });
        let services = Services::new(engine, Arc::new(ManualClock::new(NOW)), Limits::default())
            .with_payloads(PayloadSettings {
                store: store.clone(),
                spill_threshold_bytes: 100,
                orphan_grace: DEFAULT_ORPHAN_GRACE,
            });
        let tenant = TenantId::parse("acme").unwrap();
        services.ensure_tenant(&tenant, None).await.unwrap();
        (services, store, tenant)
    }

    fn message(body: &str) -> SendRequest {
        SendRequest {
            body: body.to_owned(),
            group_id: Some("g".into()),
            ..SendRequest::default()
        }
    }

    async fn objects(store: &Flaky) -> Vec<PayloadKey> {
        let page = store.inner.list(None, 100).await.unwrap();
        page.objects.into_iter().map(|o| o.key).collect()
    }

    #[tokio::test]
    async fn a_spilled_send_is_in_the_ledger_with_its_message_and_a_duplicate_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (services, store, tenant) = spilling_services(dir.path()).await;
        let patch = QueueConfigPatch {
            content_based_deduplication: Some(true),
            ..QueueConfigPatch::default()
        };
        services.put_queue(&tenant, "q.fifo", patch).await.unwrap();
        let body = "b".repeat(101);
        let sent = services
            .send(&tenant, "q.fifo", message(&body))
            .await
            .unwrap();
        let keys = objects(&store).await;
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].tenant(), "acme");
        let ledger = payload_ledger::list(services.engine.as_ref(), None, 10)
            .await
            .unwrap();
        assert_eq!(ledger.len(), 1);
        let (key, _, record) = &ledger[0];
        assert_eq!(key, &keys[0]);
        assert_eq!(
            record,
            &LedgerRecord::uncommitted(vec![sent.message_id.clone()], NOW)
        );
        // The duplicate's object and record are gone as soon as the engine says so.
        let again = services
            .send(&tenant, "q.fifo", message(&body))
            .await
            .unwrap();
        assert!(again.duplicate);
        assert_eq!(objects(&store).await, keys);
        let ledger = payload_ledger::list(services.engine.as_ref(), None, 10)
            .await
            .unwrap();
        assert_eq!(ledger.len(), 1);
        // At the threshold a body stays in the engine.
        services
            .send(&tenant, "q.fifo", message(&"c".repeat(100)))
            .await
            .unwrap();
        assert_eq!(objects(&store).await.len(), 1);
    }

    #[tokio::test]
    async fn a_publish_stores_one_object_for_its_copies_and_none_when_no_copy_lands() {
        use crate::{PublishRequest, SubscribeRequest, TopicConfigInput};
        let dir = tempfile::tempdir().unwrap();
        let (services, store, tenant) = spilling_services(dir.path()).await;
        let full = QueueConfigPatch {
            max_depth: Some(Some(1)),
            ..QueueConfigPatch::default()
        };
        for (queue, patch) in [("a", QueueConfigPatch::default()), ("b", full)] {
            services.put_queue(&tenant, queue, patch).await.unwrap();
        }
        services
            .put_topic(&tenant, "t", TopicConfigInput::default())
            .await
            .unwrap();
        for (queue, raw) in [("a", true), ("b", false)] {
            let request = SubscribeRequest {
                queue: queue.into(),
                raw_delivery: Some(raw),
                ..SubscribeRequest::default()
            };
            services.subscribe(&tenant, "t", request).await.unwrap();
        }
        let publish = |body: String| PublishRequest {
            body,
            ..PublishRequest::default()
        };
        services
            .publish(&tenant, "t", publish("p".repeat(500)))
            .await
            .unwrap();
        assert_eq!(objects(&store).await.len(), 1, "one object for both copies");
        let ledger = payload_ledger::list(services.engine.as_ref(), None, 10)
            .await
            .unwrap();
        assert_eq!(ledger[0].2.holders.len(), 2, "both copies hold it");
        // `b` holds its copy (max_depth 1) and `a`, deleted, takes its subscription along:
        // no queue takes a copy of the next publish, so its object goes at once.
        services.delete_queue(&tenant, "a").await.unwrap();
        services
            .publish(&tenant, "t", publish("q".repeat(500)))
            .await
            .unwrap();
        assert_eq!(
            objects(&store).await.len(),
            1,
            "the refused publish left no object"
        );
        let ledger = payload_ledger::list(services.engine.as_ref(), None, 10)
            .await
            .unwrap();
        assert_eq!(ledger.len(), 1);
    }

    #[tokio::test]
    async fn an_unreachable_store_refuses_spilling_sends_and_gives_back_what_a_receive_took() {
        let dir = tempfile::tempdir().unwrap();
        let (services, store, tenant) = spilling_services(dir.path()).await;
        services
            .put_queue(&tenant, "q", QueueConfigPatch::default())
            .await
            .unwrap();
        let body = "spilled ".repeat(50);
        services
            .send(
                &tenant,
                "q",
                SendRequest {
                    group_id: None,
                    ..message(&body)
                },
            )
            .await
            .unwrap();
        store.down.store(true, Ordering::SeqCst);
        let refused = services
            .send(
                &tenant,
                "q",
                SendRequest {
                    group_id: None,
                    ..message(&body)
                },
            )
            .await;
        assert!(
            matches!(refused, Err(ServiceError::Unavailable(_))),
            "{refused:?}"
        );
        let long_wait = ReceiveRequest {
            max_messages: Some(10),
            visibility_timeout_seconds: Some(600),
            ..ReceiveRequest::default()
        };
        let unreadable = services.receive(&tenant, "q", long_wait.clone()).await;
        assert!(
            matches!(unreadable, Err(ServiceError::Unavailable(_))),
            "{unreadable:?}"
        );
        let stats = services.get_queue(&tenant, "q").await.unwrap().stats;
        assert_eq!(
            (stats.visible, stats.in_flight),
            (1, 0),
            "given back at once"
        );
        store.down.store(false, Ordering::SeqCst);
        let received = services.receive(&tenant, "q", long_wait).await.unwrap();
        assert_eq!(received.len(), 1);
        assert_eq!(received[0].body, body);
        assert_eq!(received[0].md5_of_body, crate::md5_of_body(&body));
        assert_eq!(
            objects(&store).await.len(),
            1,
            "the refused send left no object"
        );
    }

    #[test]
    fn a_spliced_envelope_is_the_envelope_rendered_with_the_body() {
        let body = "line \"one\"\n\\ two ✓ \u{1F600}";
        let full = serde_json::json!({"Message": body, "MessageId": "m", "Type": "Notification"})
            .to_string();
        let empty = serde_json::json!({"Message": "", "MessageId": "m", "Type": "Notification"})
            .to_string();
        assert_eq!(splice_message(&empty, body).unwrap(), full);
        assert_eq!(splice_message(r#"{"Type":"x"}"#, body), None);
    }

    /// What a consumer reads of a spilled enveloped copy is byte for byte what the same publish
    /// delivers unspilled: `render` with the body, against `render` without it plus the splice.
    #[test]
    fn a_spilled_enveloped_copy_reads_back_identical_to_the_unspilled_one() {
        use sluice_engine::{Delivery, MessageAttribute, QueueName};
        let body = format!(
            "{{\"order\": \"Message\":\"\"}} \u{1F980}\n{}",
            "x".repeat(5000)
        );
        let mut publication = Publication {
            message_id: "topic-message".into(),
            body: body.clone(),
            attributes: [(
                "Message".to_owned(),
                MessageAttribute {
                    data_type: "String".into(),
                    value: "\"Message\":\"\"".into(),
                },
            )]
            .into(),
            payload: None,
            subject: Some("\"Message\":\"\"".into()),
            group_id: Some("g".into()),
            deduplication_id: Some("d".into()),
            topic_arn: "arn:aws:sns:us-east-1:000000000000:news.fifo".into(),
            timestamp: "2026-12-04T10:00:00.000Z".into(),
            deliveries: Vec::new(),
            filtered_out: Vec::new(),
        };
        let delivery = Delivery {
            subscription_id: "news.fifo.abc".into(),
            queue: QueueName::parse("inbox.fifo").unwrap(),
            raw: false,
            dead_letter_queue: None,
            message_id: "copy".into(),
        };
        let unspilled = publication.render(&delivery, Some(42));
        publication.body = String::new();
        publication.payload = Some(PayloadRef {
            key: "acme/0123456789abcdef0123456789abcdef".into(),
            size: body.len() as u64,
            enveloped: false,
        });
        let spilled = publication.render(&delivery, Some(42));
        assert!(spilled.payload.as_ref().is_some_and(|p| p.enveloped));
        assert_eq!(
            splice_message(&spilled.body, &body).unwrap(),
            unspilled.body
        );
    }
}
