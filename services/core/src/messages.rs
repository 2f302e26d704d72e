//! Message operations: send (single and batch), receive with long polling, delete, change
//! visibility and peek. Resolves per-queue defaults (delay, visibility, wait) and computes the
//! SQS-compatible digests; the engine stores and delivers.

use crate::md5::{md5_of_attributes, md5_of_body};
use crate::metrics::Event;
use crate::payloads::{stored_nothing, Spilled};
use crate::queues::queue_key;
use crate::validate::{
    fifo_deduplication_id, in_range, validate_attributes, validate_batch_ids, validate_body,
    validate_token_id,
};
use crate::{ServiceError, Services};
use sluice_engine::{
    message_size, message_size_with_payload, DeadLetter, MessageAttribute, MessageState, Millis,
    NewMessage, QueueConfig, QueueKey, SentMessage, StoredMessage, TenantId,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The bytes a message adds to its tenant's stored bytes (what `max_message_bytes` bounds),
/// a payload kept in a payload store included.
fn stored_size(message: &NewMessage) -> u64 {
    message_size_with_payload(&message.body, &message.attributes, message.payload.as_ref()) as u64
}

/// A message to send.
#[derive(Debug, Clone, Default)]
pub struct SendRequest {
    /// Non-empty UTF-8.
    pub body: String,
    /// Up to 10 typed attributes.
    pub attributes: BTreeMap<String, MessageAttribute>,
    /// 0–900; overrides the queue's delay.
    pub delay_seconds: Option<u32>,
    /// RFC 3339; not before this instant (overrides the queue's delay).
    pub deliver_at: Option<String>,
    /// Returned on receive; no ordering on standard queues.
    pub group_id: Option<String>,
    /// FIFO only.
    pub deduplication_id: Option<String>,
}

/// One entry of a send batch.
#[derive(Debug, Clone)]
pub struct SendEntry {
    /// The caller's id, unique in the batch.
    pub id: String,
    /// The message.
    pub message: SendRequest,
}

/// What a send answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendResult {
    /// The stored message's id.
    pub message_id: String,
    /// MD5 of the body.
    pub md5_of_body: String,
    /// MD5 of the attributes, when there are any.
    pub md5_of_attributes: Option<String>,
    /// FIFO only.
    pub sequence_number: Option<String>,
    /// A FIFO deduplication hit.
    pub duplicate: bool,
}

/// A receive request; `None` takes the queue's default.
#[derive(Debug, Clone, Default)]
pub struct ReceiveRequest {
    /// 1–10 (default 1).
    pub max_messages: Option<u32>,
    /// 0–43200.
    pub visibility_timeout_seconds: Option<u32>,
    /// 0–20.
    pub wait_seconds: Option<u32>,
    /// FIFO retries; accepted and ignored on standard queues, as SQS does.
    pub request_attempt_id: Option<String>,
}

/// One entry of a delete batch.
#[derive(Debug, Clone)]
pub struct DeleteEntry {
    /// The caller's id.
    pub id: String,
    /// The handle.
    pub receipt_handle: String,
}

/// One entry of a change-visibility batch.
#[derive(Debug, Clone)]
pub struct ChangeVisibilityEntry {
    /// The caller's id.
    pub id: String,
    /// The handle.
    pub receipt_handle: String,
    /// 0–43200.
    pub visibility_timeout_seconds: u32,
}

/// One failed batch entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchFailure {
    /// The caller's id.
    pub id: String,
    /// Why it failed.
    pub error: ServiceError,
}

/// A batch answer: each entry succeeded or failed on its own.
#[derive(Debug, Clone)]
pub struct BatchOutcome<T> {
    /// Entries that succeeded, with their results.
    pub successful: Vec<(String, T)>,
    /// Entries that failed.
    pub failed: Vec<BatchFailure>,
}

/// A message as receive and peek answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageView {
    /// The id.
    pub message_id: String,
    /// Present on receive, absent on peek.
    pub receipt_handle: Option<String>,
    /// The body.
    pub body: String,
    /// MD5 of the body.
    pub md5_of_body: String,
    /// The attributes.
    pub attributes: BTreeMap<String, MessageAttribute>,
    /// MD5 of the attributes, when there are any.
    pub md5_of_attributes: Option<String>,
    /// When it was sent.
    pub sent_at: Millis,
    /// Deliveries so far.
    pub receive_count: u32,
    /// First delivery.
    pub first_received_at: Option<Millis>,
    /// The caller's group id.
    pub group_id: Option<String>,
    /// FIFO: the deduplication id it was sent with (or the body's SHA-256).
    pub deduplication_id: Option<String>,
    /// FIFO: the message's sequence number (decimal digits).
    pub sequence_number: Option<String>,
    /// In a dead-letter queue: where it came from and why.
    pub dead_letter: Option<DeadLetter>,
}

impl MessageView {
    fn new(message: StoredMessage, receipt_handle: Option<String>, fifo: bool) -> Self {
        Self {
            sequence_number: fifo.then(|| message.seq.to_string()),
            deduplication_id: message.deduplication_id,
            md5_of_body: md5_of_body(&message.body),
            md5_of_attributes: md5_of_attributes(&message.attributes),
            message_id: message.message_id,
            receipt_handle,
            body: message.body,
            attributes: message.attributes,
            sent_at: message.sent_at,
            receive_count: message.receive_count,
            first_received_at: message.first_received_at,
            group_id: message.group_id,
            dead_letter: message.dead_letter,
        }
    }
}

fn parse_rfc3339(field: &str, text: &str) -> Result<Millis, ServiceError> {
    let parsed = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|e| ServiceError::invalid(field, format!("must be an RFC 3339 time: {e}")))?;
    Ok(u64::try_from(parsed.timestamp_millis()).unwrap_or(0))
}

impl Services {
    async fn config_of(&self, key: &QueueKey) -> Result<QueueConfig, ServiceError> {
        self.engine
            .queue_config(key)
            .await?
            .ok_or(ServiceError::QueueNotFound)
    }

    /// Checks one message against the queue's rules and turns it into what the engine stores.
    fn prepare(
        &self,
        field: &str,
        config: &QueueConfig,
        fifo: bool,
        request: SendRequest,
        now: Millis,
    ) -> Result<NewMessage, ServiceError> {
        let at = |name: &str| {
            if field.is_empty() {
                name.to_owned()
            } else {
                format!("{field}.{name}")
            }
        };
        validate_body(&at("body"), &request.body)?;
        validate_attributes(&at("attributes"), &request.attributes)?;
        if let Some(group_id) = &request.group_id {
            validate_token_id(&at("group_id"), group_id)?;
        }
        if let Some(deduplication_id) = &request.deduplication_id {
            validate_token_id(&at("deduplication_id"), deduplication_id)?;
        }
        let deduplication_id = if fifo {
            if request.group_id.is_none() {
                return Err(ServiceError::invalid(
                    at("group_id"),
                    "is required on FIFO queues",
                ));
            }
            if request.delay_seconds.is_some() {
                return Err(ServiceError::invalid(
                    at("delay_seconds"),
                    "is not allowed on FIFO queues (the queue's delay_seconds applies)",
                ));
            }
            if request.deliver_at.is_some() {
                return Err(ServiceError::invalid(
                    at("deliver_at"),
                    "is not allowed on FIFO queues (the queue's delay_seconds applies)",
                ));
            }
            Some(fifo_deduplication_id(
                &at("deduplication_id"),
                request.deduplication_id.as_deref(),
                config.content_based_deduplication,
                &request.body,
                "queue",
            )?)
        } else {
            if request.deduplication_id.is_some() {
                return Err(ServiceError::invalid(
                    at("deduplication_id"),
                    "applies to FIFO queues only",
                ));
            }
            None
        };
        let retention_ms = u64::from(config.message_retention_seconds) * 1000;
        let visible_at = match (request.delay_seconds, &request.deliver_at) {
            (Some(_), Some(_)) => {
                return Err(ServiceError::invalid(
                    at("deliver_at"),
                    "cannot be combined with delay_seconds",
                ))
            }
            (Some(delay), None) => {
                in_range(&at("delay_seconds"), delay.into(), 0, 900)?;
                now + u64::from(delay) * 1000
            }
            (None, Some(text)) => {
                let when = parse_rfc3339(&at("deliver_at"), text)?;
                if when > now + retention_ms {
                    return Err(ServiceError::invalid(
                        at("deliver_at"),
                        "lies beyond the queue's message retention period",
                    ));
                }
                when.max(now)
            }
            (None, None) => now + u64::from(config.delay_seconds) * 1000,
        };
        let size = message_size(&request.body, &request.attributes);
        if size > config.max_message_bytes as usize {
            return Err(ServiceError::PayloadTooLarge(format!(
                "{}: the message is {size} bytes (body plus attributes); this queue accepts at most {}",
                at("body"),
                config.max_message_bytes
            )));
        }
        Ok(NewMessage {
            payload: None,
            message_id: uuid::Uuid::new_v4().to_string(),
            body: request.body,
            attributes: request.attributes,
            visible_at,
            group_id: request.group_id,
            deduplication_id,
        })
    }

    /// Spills one message's body if it is large enough (see `payloads.rs`).
    async fn spill_message(
        &self,
        tenant: &TenantId,
        message: &mut NewMessage,
        now: Millis,
    ) -> Result<Option<Spilled>, ServiceError> {
        let holders = vec![message.message_id.clone()];
        let spilled = self.spill(tenant, &mut message.body, holders, now).await?;
        Ok(spilled.map(|(reference, spilled)| {
            message.payload = Some(reference);
            spilled
        }))
    }

    /// The digests a send answers, taken before the message moves into the engine, so the
    /// body is never copied just to be hashed afterwards.
    fn digests(message: &NewMessage) -> (String, Option<String>) {
        (
            md5_of_body(&message.body),
            md5_of_attributes(&message.attributes),
        )
    }

    /// The answer once the engine stored a message as `sent` (for a FIFO duplicate, the
    /// original's id and sequence number).
    fn send_result(digests: (String, Option<String>), sent: SentMessage, fifo: bool) -> SendResult {
        SendResult {
            message_id: sent.message_id,
            md5_of_body: digests.0,
            md5_of_attributes: digests.1,
            sequence_number: fifo.then(|| sent.seq.to_string()),
            duplicate: sent.duplicate,
        }
    }

    /// Sends one message; answers once it is durable. Past the tenant's `max_stored_bytes`,
    /// [`ServiceError::QuotaExceeded`].
    pub async fn send(
        &self,
        tenant: &TenantId,
        queue: &str,
        request: SendRequest,
    ) -> Result<SendResult, ServiceError> {
        let key = queue_key(tenant, queue)?;
        let config = self.config_of(&key).await?;
        let now = self.clock.now();
        let fifo = key.name.is_fifo();
        let mut message = self.prepare("", &config, fifo, request, now)?;
        let digests = Self::digests(&message);
        let reserved = self
            .reserve_stored_bytes(tenant, stored_size(&message))
            .await?;
        let spilled = match self.spill_message(tenant, &mut message, now).await {
            Ok(spilled) => spilled,
            Err(error) => {
                self.release_stored_bytes(tenant, reserved);
                return Err(error);
            }
        };
        let answer = self
            .engine
            .send(&key, vec![message], now)
            .await
            .map(|mut answers| answers.pop());
        // Only a message actually stored keeps its bytes counted (and its object).
        if !matches!(&answer, Ok(Some(Ok(sent))) if !sent.duplicate) {
            self.release_stored_bytes(tenant, reserved);
            if answer.as_ref().is_ok() || answer.as_ref().is_err_and(stored_nothing) {
                self.discard_all([spilled]).await;
            }
        }
        match answer? {
            Some(Ok(sent)) => {
                if !sent.duplicate {
                    self.metric_labels.count(&key, Event::Sent, 1);
                }
                Ok(Self::send_result(digests, sent, fifo))
            }
            Some(Err(rejection)) => Err(rejection.into()),
            None => Err(ServiceError::Internal(
                "engine answered no result for a send".into(),
            )),
        }
    }

    /// Sends up to ten messages; each entry succeeds or fails on its own. Malformed or
    /// duplicate entry ids fail the whole batch.
    pub async fn send_batch(
        &self,
        tenant: &TenantId,
        queue: &str,
        entries: Vec<SendEntry>,
    ) -> Result<BatchOutcome<SendResult>, ServiceError> {
        validate_batch_ids(entries.iter().map(|e| e.id.as_str()))?;
        let key = queue_key(tenant, queue)?;
        let config = self.config_of(&key).await?;
        let now = self.clock.now();
        let fifo = key.name.is_fifo();
        let mut failed = Vec::new();
        let mut accepted = Vec::new();
        for (index, entry) in entries.into_iter().enumerate() {
            match self.prepare(
                &format!("entries[{index}]"),
                &config,
                fifo,
                entry.message,
                now,
            ) {
                // Entries are admitted against max_stored_bytes one by one, in order: those
                // that fit are sent, the rest fail alone.
                Ok(message) => match self
                    .reserve_stored_bytes(tenant, stored_size(&message))
                    .await
                {
                    Ok(reserved) => accepted.push((entry.id, (message, reserved))),
                    Err(error) => failed.push(BatchFailure {
                        id: entry.id,
                        error,
                    }),
                },
                Err(error) => failed.push(BatchFailure {
                    id: entry.id,
                    error,
                }),
            }
        }
        let mut successful = Vec::new();
        if !accepted.is_empty() {
            let (ids, sends): (Vec<String>, Vec<_>) = accepted.into_iter().unzip();
            let (mut messages, reserved): (Vec<NewMessage>, Vec<_>) = sends.into_iter().unzip();
            let digests: Vec<_> = messages.iter().map(Self::digests).collect();
            let spills = messages
                .iter_mut()
                .map(|message| self.spill_message(tenant, message, now));
            let spilled = match self.spill_all(spills).await {
                Ok(spilled) => spilled,
                Err(error) => {
                    for r in reserved {
                        self.release_stored_bytes(tenant, r);
                    }
                    return Err(error);
                }
            };
            let answers = match self.engine.send(&key, messages, now).await {
                Ok(answers) => answers,
                Err(error) => {
                    for r in reserved {
                        self.release_stored_bytes(tenant, r);
                    }
                    if stored_nothing(&error) {
                        self.discard_all(spilled).await;
                    }
                    return Err(error.into());
                }
            };
            let stored = answers
                .iter()
                .filter(|a| a.as_ref().is_ok_and(|sent| !sent.duplicate))
                .count();
            self.metric_labels.count(&key, Event::Sent, stored as u64);
            for ((((id, digests), answer), reserved), spilled) in ids
                .into_iter()
                .zip(digests)
                .zip(answers)
                .zip(reserved)
                .zip(spilled)
            {
                if !answer.as_ref().is_ok_and(|sent| !sent.duplicate) {
                    self.release_stored_bytes(tenant, reserved);
                    self.discard_all([spilled]).await;
                }
                match answer {
                    Ok(sent) => successful.push((id, Self::send_result(digests, sent, fifo))),
                    Err(rejection) => failed.push(BatchFailure {
                        id,
                        error: rejection.into(),
                    }),
                }
            }
        }
        Ok(BatchOutcome { successful, failed })
    }

    /// Receives up to `max_messages`, waiting up to `wait_seconds` (long poll) for one to
    /// become receivable. The wait is woken by a send to the queue or by the moment a delayed
    /// or in-flight message becomes visible, never by polling.
    pub async fn receive(
        &self,
        tenant: &TenantId,
        queue: &str,
        request: ReceiveRequest,
    ) -> Result<Vec<MessageView>, ServiceError> {
        let key = queue_key(tenant, queue)?;
        let config = self.config_of(&key).await?;
        let max = request.max_messages.unwrap_or(1);
        in_range("max_messages", max.into(), 1, 10)?;
        let visibility = request
            .visibility_timeout_seconds
            .unwrap_or(config.visibility_timeout_seconds);
        in_range("visibility_timeout_seconds", visibility.into(), 0, 43_200)?;
        let wait = request.wait_seconds.unwrap_or(config.receive_wait_seconds);
        in_range("wait_seconds", wait.into(), 0, 20)?;
        if let Some(attempt) = &request.request_attempt_id {
            validate_token_id("request_attempt_id", attempt)?;
        }
        let fifo = key.name.is_fifo();
        let deadline = self.clock.now() + u64::from(wait) * 1000;
        loop {
            // Listen before looking, so a send between the look and the wait still wakes us.
            let mut listener = self.engine.listen(&key).await?;
            let outcome = self
                .engine
                .receive(
                    &key,
                    max as usize,
                    visibility,
                    request.request_attempt_id.as_deref(),
                    self.clock.now(),
                )
                .await?;
            self.metric_labels
                .count(&key, Event::DeadLettered, outcome.dead_lettered);
            if !outcome.messages.is_empty() || self.is_stopping() || self.clock.now() >= deadline {
                let mut messages = outcome.messages;
                let filled = self
                    .fill_bodies(tenant, messages.iter_mut().map(|m| &mut m.message))
                    .await;
                if let Err(error) = filled {
                    // Delivered to nobody: back in the queue at once, and not counted.
                    self.release_received(
                        &key,
                        messages.into_iter().map(|m| m.receipt_handle).collect(),
                    )
                    .await;
                    return Err(error);
                }
                self.metric_labels
                    .count(&key, Event::Received, messages.len() as u64);
                return Ok(messages
                    .into_iter()
                    .map(|m| MessageView::new(m.message, Some(m.receipt_handle), fifo))
                    .collect());
            }
            let wake_at = outcome
                .next_visible_at
                .map_or(deadline, |at| at.min(deadline));
            let _waiting = WaitingPoll::admit(&self.waiting_polls, self.limits.max_waiting_polls)?;
            tokio::select! {
                _ = listener.changed() => {}
                _ = self.clock.sleep_until(wake_at) => {}
                // One more look, then the answer: a stopping gateway holds no long poll.
                () = self.stopped() => {}
            }
        }
    }

    /// Deletes one message by receipt handle.
    pub async fn delete_message(
        &self,
        tenant: &TenantId,
        queue: &str,
        receipt_handle: &str,
    ) -> Result<(), ServiceError> {
        let key = queue_key(tenant, queue)?;
        let mut answers = self
            .engine
            .delete(&key, &[receipt_handle.to_owned()], self.clock.now())
            .await?;
        match answers.pop() {
            Some(answer) => {
                answer?;
                self.metric_labels.count(&key, Event::Deleted, 1);
                Ok(())
            }
            None => Err(ServiceError::Internal(
                "engine answered no result for a delete".into(),
            )),
        }
    }

    /// Deletes up to ten messages; each entry succeeds or fails on its own.
    pub async fn delete_batch(
        &self,
        tenant: &TenantId,
        queue: &str,
        entries: Vec<DeleteEntry>,
    ) -> Result<BatchOutcome<()>, ServiceError> {
        validate_batch_ids(entries.iter().map(|e| e.id.as_str()))?;
        let key = queue_key(tenant, queue)?;
        let handles: Vec<String> = entries.iter().map(|e| e.receipt_handle.clone()).collect();
        let answers = self.engine.delete(&key, &handles, self.clock.now()).await?;
        let deleted = answers.iter().filter(|a| a.is_ok()).count();
        self.metric_labels
            .count(&key, Event::Deleted, deleted as u64);
        Ok(split_outcome(entries.into_iter().map(|e| e.id), answers))
    }

    /// Changes one message's visibility timeout (0 makes it visible now).
    pub async fn change_visibility(
        &self,
        tenant: &TenantId,
        queue: &str,
        receipt_handle: &str,
        visibility_timeout_seconds: u32,
    ) -> Result<(), ServiceError> {
        in_range(
            "visibility_timeout_seconds",
            visibility_timeout_seconds.into(),
            0,
            43_200,
        )?;
        let key = queue_key(tenant, queue)?;
        let mut answers = self
            .engine
            .change_visibility(
                &key,
                &[(receipt_handle.to_owned(), visibility_timeout_seconds)],
                self.clock.now(),
            )
            .await?;
        match answers.pop() {
            Some(answer) => Ok(answer?),
            None => Err(ServiceError::Internal(
                "engine answered no result for a visibility change".into(),
            )),
        }
    }

    /// Changes up to ten messages' visibility; each entry succeeds or fails on its own.
    pub async fn change_visibility_batch(
        &self,
        tenant: &TenantId,
        queue: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> Result<BatchOutcome<()>, ServiceError> {
        validate_batch_ids(entries.iter().map(|e| e.id.as_str()))?;
        let key = queue_key(tenant, queue)?;
        let mut failed = Vec::new();
        let mut valid = Vec::new();
        for (index, entry) in entries.into_iter().enumerate() {
            let field = format!("entries[{index}].visibility_timeout_seconds");
            match in_range(&field, entry.visibility_timeout_seconds.into(), 0, 43_200) {
                Ok(()) => valid.push(entry),
                Err(error) => failed.push(BatchFailure {
                    id: entry.id,
                    error,
                }),
            }
        }
        let changes: Vec<(String, u32)> = valid
            .iter()
            .map(|e| (e.receipt_handle.clone(), e.visibility_timeout_seconds))
            .collect();
        let answers = if changes.is_empty() {
            Vec::new()
        } else {
            self.engine
                .change_visibility(&key, &changes, self.clock.now())
                .await?
        };
        let mut outcome = split_outcome(valid.into_iter().map(|e| e.id), answers);
        outcome.failed.extend(failed);
        Ok(outcome)
    }

    /// Up to `limit` (default 10, at most 100) messages in `state`, changing nothing.
    pub async fn peek(
        &self,
        tenant: &TenantId,
        queue: &str,
        state: MessageState,
        limit: Option<u32>,
    ) -> Result<Vec<MessageView>, ServiceError> {
        let limit = limit.unwrap_or(10);
        in_range("limit", limit.into(), 1, 100)?;
        let key = queue_key(tenant, queue)?;
        let mut messages = self
            .engine
            .peek(&key, state, limit as usize, self.clock.now())
            .await?;
        self.fill_bodies(tenant, messages.iter_mut()).await?;
        Ok(messages
            .into_iter()
            .map(|m| MessageView::new(m, None, key.name.is_fifo()))
            .collect())
    }
}

fn split_outcome(
    ids: impl Iterator<Item = String>,
    answers: Vec<Result<(), sluice_engine::HandleError>>,
) -> BatchOutcome<()> {
    let mut outcome = BatchOutcome {
        successful: Vec::new(),
        failed: Vec::new(),
    };
    for (id, answer) in ids.zip(answers) {
        match answer {
            Ok(()) => outcome.successful.push((id, ())),
            Err(error) => outcome.failed.push(BatchFailure {
                id,
                error: error.into(),
            }),
        }
    }
    outcome
}

/// Long polls waiting in this process, published as `sluice_long_polls_waiting`.
static WAITING_POLLS: AtomicI64 = AtomicI64::new(0);

/// Sets `sluice_long_polls_waiting` from the count. Called on every change and by the queue
/// sampler, since the recorder forgets gauges nobody touched for a while: a set (never an
/// increment) keeps the series right when it comes back.
pub(crate) fn publish_waiting_polls() {
    metrics::gauge!("sluice_long_polls_waiting").set(WAITING_POLLS.load(Ordering::Relaxed) as f64);
}

/// Counts a long poll as waiting while it lives, also when its request is dropped mid-wait
/// (the client went away).
struct WaitingPoll(Arc<AtomicUsize>);

impl WaitingPoll {
    /// Counts one more waiting poll, unless `max` are waiting already: then the poll is
    /// refused rather than held, so a flood of long polls cannot grow memory without bound.
    fn admit(waiting: &Arc<AtomicUsize>, max: usize) -> Result<Self, ServiceError> {
        if waiting.fetch_add(1, Ordering::AcqRel) >= max {
            waiting.fetch_sub(1, Ordering::AcqRel);
            metrics::counter!("sluice_overload_rejections_total", "reason" => "waiting_polls")
                .increment(1);
            return Err(ServiceError::Overloaded(format!(
                "{max} long polls are waiting in this gateway already (max_waiting_polls); \
                 retry shortly"
            )));
        }
        WAITING_POLLS.fetch_add(1, Ordering::Relaxed);
        publish_waiting_polls();
        Ok(Self(waiting.clone()))
    }
}

impl Drop for WaitingPoll {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
        WAITING_POLLS.fetch_sub(1, Ordering::Relaxed);
        publish_waiting_polls();
    }
}
