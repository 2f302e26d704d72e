//! Queue administration: creating, replacing, patching, listing and deleting queues, with the
//! configuration rules of the REST contract (ranges, defaults, FIFO-only fields).

use crate::validate::in_range;
use crate::{ServiceError, Services};
use base64::Engine as _;
use sluice_engine::{
    DeduplicationScope, Millis, QueueConfig, QueueKey, QueueName, QueueStats, RedriveAllowPolicy,
    RedrivePolicy, RetryBackoff, TenantId,
};
use std::collections::BTreeMap;

/// A configuration change: `None` leaves a field alone in a PATCH and resets it to its default
/// in a PUT; `Some(None)` sets a nullable field to null.
#[derive(Debug, Clone, Default)]
pub struct QueueConfigPatch {
    /// 0–43200.
    pub visibility_timeout_seconds: Option<u32>,
    /// 60–1209600.
    pub message_retention_seconds: Option<u32>,
    /// 0–900.
    pub delay_seconds: Option<u32>,
    /// 0–20.
    pub receive_wait_seconds: Option<u32>,
    /// 1024 – the server maximum.
    pub max_message_bytes: Option<u32>,
    /// `Some(None)` sets it unbounded.
    pub max_depth: Option<Option<u64>>,
    /// At most 50.
    pub tags: Option<BTreeMap<String, String>>,
    /// Where messages go after `max_receive_count` receives.
    pub redrive_policy: Option<Option<RedrivePolicyInput>>,
    /// Which queues may use this one as their dead-letter queue (null: all).
    pub redrive_allow_policy: Option<Option<RedriveAllowPolicyInput>>,
    /// Extra hiding between redeliveries.
    pub retry_backoff: Option<Option<RetryBackoffInput>>,
    /// FIFO only.
    pub content_based_deduplication: Option<bool>,
    /// FIFO only.
    pub deduplication_scope: Option<String>,
}

/// A redrive policy as the caller wrote it.
#[derive(Debug, Clone, Default)]
pub struct RedrivePolicyInput {
    /// A queue of the same tenant and kind, not this one.
    pub dead_letter_queue: String,
    /// 1–1000.
    pub max_receive_count: u32,
}

/// A redrive allow policy as the caller wrote it.
#[derive(Debug, Clone, Default)]
pub struct RedriveAllowPolicyInput {
    /// `allow_all`, `deny_all` or `by_queue`.
    pub permission: String,
    /// 1–10 queue names, exactly when `permission` is `by_queue`.
    pub source_queues: Option<Vec<String>>,
}

/// A retry backoff as the caller wrote it.
#[derive(Debug, Clone, Default)]
pub struct RetryBackoffInput {
    /// 1–43200.
    pub base_seconds: u32,
    /// Required: `base_seconds`–43200.
    pub max_seconds: Option<u32>,
    /// Default true.
    pub jitter: Option<bool>,
}

/// A queue as the services answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueView {
    /// Its name.
    pub name: QueueName,
    /// Its configuration with defaults filled in.
    pub config: QueueConfig,
    /// When first created.
    pub created_at: Millis,
    /// When last configured.
    pub updated_at: Millis,
    /// Counts now.
    pub stats: QueueStats,
    /// Age of the oldest stored message in whole seconds.
    pub oldest_age_seconds: Option<u64>,
}

/// One page of a queue listing.
#[derive(Debug, Clone)]
pub struct QueuePage {
    /// The queues, by name.
    pub queues: Vec<QueueView>,
    /// Where the next page starts, if there is one.
    pub next_token: Option<String>,
}

const TOKEN_PREFIX: &str = "q1:";

pub(crate) fn parse_queue_name(name: &str) -> Result<QueueName, ServiceError> {
    // An invalid name cannot name an existing queue; answering "not found" would hide the
    // caller's typo, so it is a validation error naming the path parameter.
    QueueName::parse(name).map_err(|e| ServiceError::invalid("queue", e.0))
}

pub(crate) fn queue_key(tenant: &TenantId, name: &str) -> Result<QueueKey, ServiceError> {
    Ok(QueueKey::new(tenant.clone(), parse_queue_name(name)?))
}

pub(crate) fn encode_page_token(prefix: &str, last: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{prefix}{last}"))
}

pub(crate) fn decode_page_token(prefix: &str, token: &str) -> Result<String, ServiceError> {
    let bad = || ServiceError::invalid("next_token", "is not a token this server issued");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    text.strip_prefix(prefix).map(str::to_owned).ok_or_else(bad)
}

pub(crate) fn page_limit(limit: Option<u32>) -> Result<usize, ServiceError> {
    let limit = limit.unwrap_or(100);
    in_range("limit", limit.into(), 1, 1000)?;
    Ok(limit as usize)
}

/// Tags of a queue or a topic: at most 50, keys of 1–128 characters, values of at most 256.
pub(crate) fn validate_tags(tags: &BTreeMap<String, String>) -> Result<(), ServiceError> {
    if tags.len() > 50 {
        return Err(ServiceError::invalid(
            "tags",
            format!("at most 50 tags, got {}", tags.len()),
        ));
    }
    for (key, value) in tags {
        if key.is_empty() || key.len() > 128 || value.len() > 256 {
            return Err(ServiceError::invalid(
                format!("tags.{key}"),
                "keys must be 1-128 characters and values at most 256",
            ));
        }
    }
    Ok(())
}

fn parse_redrive_policy(input: RedrivePolicyInput) -> Result<RedrivePolicy, ServiceError> {
    let dead_letter_queue = QueueName::parse(&input.dead_letter_queue)
        .map_err(|e| ServiceError::invalid("redrive_policy.dead_letter_queue", e.0))?;
    in_range(
        "redrive_policy.max_receive_count",
        input.max_receive_count.into(),
        1,
        1000,
    )?;
    Ok(RedrivePolicy {
        dead_letter_queue,
        max_receive_count: input.max_receive_count,
    })
}

fn parse_allow_policy(input: RedriveAllowPolicyInput) -> Result<RedriveAllowPolicy, ServiceError> {
    let sources_field = "redrive_allow_policy.source_queues";
    match (input.permission.as_str(), input.source_queues) {
        ("allow_all", None) => Ok(RedriveAllowPolicy::AllowAll),
        ("deny_all", None) => Ok(RedriveAllowPolicy::DenyAll),
        ("allow_all" | "deny_all", Some(_)) => Err(ServiceError::invalid(
            sources_field,
            "is allowed only with the permission by_queue",
        )),
        ("by_queue", None) => Err(ServiceError::invalid(
            sources_field,
            "is required with the permission by_queue (1-10 queue names)",
        )),
        ("by_queue", Some(names)) => {
            if names.is_empty() || names.len() > 10 {
                return Err(ServiceError::invalid(
                    sources_field,
                    format!("must hold 1-10 queue names, got {}", names.len()),
                ));
            }
            let parsed = names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    QueueName::parse(name)
                        .map_err(|e| ServiceError::invalid(format!("{sources_field}[{i}]"), e.0))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(RedriveAllowPolicy::ByQueue(parsed))
        }
        (other, _) => Err(ServiceError::invalid(
            "redrive_allow_policy.permission",
            format!("must be \"allow_all\", \"deny_all\" or \"by_queue\", got {other:?}"),
        )),
    }
}

fn parse_retry_backoff(input: RetryBackoffInput) -> Result<RetryBackoff, ServiceError> {
    in_range(
        "retry_backoff.base_seconds",
        input.base_seconds.into(),
        1,
        43_200,
    )?;
    let max_seconds = input.max_seconds.ok_or_else(|| {
        ServiceError::invalid(
            "retry_backoff.max_seconds",
            "is required (base_seconds-43200)",
        )
    })?;
    in_range(
        "retry_backoff.max_seconds",
        max_seconds.into(),
        input.base_seconds.into(),
        43_200,
    )?;
    Ok(RetryBackoff {
        base_seconds: input.base_seconds,
        max_seconds,
        jitter: input.jitter.unwrap_or(true),
    })
}

impl Services {
    /// Checks the rules of a redrive policy that depend on other queues: its dead-letter queue
    /// exists in the tenant, is not the queue itself, is of the same kind, and admits this
    /// queue as a source.
    async fn check_redrive_policy(
        &self,
        key: &QueueKey,
        policy: &RedrivePolicy,
    ) -> Result<(), ServiceError> {
        let field = "redrive_policy.dead_letter_queue";
        let dlq = &policy.dead_letter_queue;
        if dlq == &key.name {
            return Err(ServiceError::invalid(
                field,
                "names the queue itself; a dead-letter queue must be another queue",
            ));
        }
        if dlq.is_fifo() != key.name.is_fifo() {
            return Err(ServiceError::invalid(
                field,
                format!(
                    "{dlq} is a {} queue; a {} queue's dead-letter queue must be of the same kind",
                    if dlq.is_fifo() { "FIFO" } else { "standard" },
                    if key.name.is_fifo() {
                        "FIFO"
                    } else {
                        "standard"
                    },
                ),
            ));
        }
        let dlq_key = QueueKey::new(key.tenant.clone(), dlq.clone());
        let Some(dlq_config) = self.engine.queue_config(&dlq_key).await? else {
            return Err(ServiceError::invalid(
                field,
                format!("the queue {dlq} does not exist"),
            ));
        };
        if let Some(allow) = &dlq_config.redrive_allow_policy {
            if !allow.admits(&key.name) {
                return Err(ServiceError::invalid(
                    field,
                    format!(
                        "the redrive_allow_policy of {dlq} does not admit {} as a source",
                        key.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The tenant's queues whose redrive policy names `dlq`, up to `limit` of them.
    pub(crate) async fn dead_letter_sources(
        &self,
        dlq: &QueueKey,
        limit: usize,
    ) -> Result<Vec<QueueName>, ServiceError> {
        let mut sources = Vec::new();
        let mut after: Option<QueueName> = None;
        loop {
            let page = self
                .engine
                .list_queues(&dlq.tenant, "", after.as_ref(), 1000, self.clock.now())
                .await?;
            let done = page.len() < 1000;
            after = page.last().map(|info| info.name.clone());
            sources.extend(page.into_iter().filter_map(|info| {
                info.config
                    .redrive_policy
                    .filter(|policy| policy.dead_letter_queue == dlq.name)
                    .map(|_| info.name)
            }));
            if done || sources.len() >= limit {
                sources.truncate(limit);
                return Ok(sources);
            }
        }
    }

    fn view(&self, info: sluice_engine::QueueInfo) -> QueueView {
        let now = self.clock.now();
        QueueView {
            oldest_age_seconds: info
                .stats
                .oldest_sent_at
                .map(|sent| now.saturating_sub(sent) / 1000),
            name: info.name,
            config: info.config,
            created_at: info.created_at,
            updated_at: info.updated_at,
            stats: info.stats,
        }
    }

    /// Applies `patch` on top of `base`, checking every rule.
    fn apply_patch(
        &self,
        name: &QueueName,
        mut config: QueueConfig,
        patch: QueueConfigPatch,
    ) -> Result<QueueConfig, ServiceError> {
        if let Some(content_based) = patch.content_based_deduplication {
            if !name.is_fifo() {
                return Err(ServiceError::invalid(
                    "content_based_deduplication",
                    "applies to FIFO queues only",
                ));
            }
            config.content_based_deduplication = content_based;
        }
        if let Some(scope) = patch.deduplication_scope {
            if !name.is_fifo() {
                return Err(ServiceError::invalid(
                    "deduplication_scope",
                    "applies to FIFO queues only",
                ));
            }
            config.deduplication_scope = match scope.as_str() {
                "queue" => DeduplicationScope::Queue,
                "message_group" => DeduplicationScope::MessageGroup,
                _ => {
                    return Err(ServiceError::invalid(
                        "deduplication_scope",
                        format!("must be \"queue\" or \"message_group\", got {scope:?}"),
                    ))
                }
            };
        }
        if let Some(policy) = patch.redrive_allow_policy {
            config.redrive_allow_policy = policy.map(parse_allow_policy).transpose()?;
        }
        if let Some(backoff) = patch.retry_backoff {
            config.retry_backoff = backoff.map(parse_retry_backoff).transpose()?;
        }
        if let Some(policy) = patch.redrive_policy {
            config.redrive_policy = policy.map(parse_redrive_policy).transpose()?;
        }
        let max_bytes = self.limits.max_message_bytes;
        if let Some(v) = patch.visibility_timeout_seconds {
            in_range("visibility_timeout_seconds", v.into(), 0, 43_200)?;
            config.visibility_timeout_seconds = v;
        }
        if let Some(v) = patch.message_retention_seconds {
            in_range("message_retention_seconds", v.into(), 60, 1_209_600)?;
            config.message_retention_seconds = v;
        }
        if let Some(v) = patch.delay_seconds {
            in_range("delay_seconds", v.into(), 0, 900)?;
            config.delay_seconds = v;
        }
        if let Some(v) = patch.receive_wait_seconds {
            in_range("receive_wait_seconds", v.into(), 0, 20)?;
            config.receive_wait_seconds = v;
        }
        if let Some(v) = patch.max_message_bytes {
            in_range("max_message_bytes", v.into(), 1024, max_bytes.into())?;
            config.max_message_bytes = v;
        }
        if let Some(v) = patch.max_depth {
            if v == Some(0) {
                return Err(ServiceError::invalid(
                    "max_depth",
                    "must be at least 1, or null",
                ));
            }
            config.max_depth = v;
        }
        if let Some(tags) = patch.tags {
            validate_tags(&tags)?;
            config.tags = tags;
        }
        Ok(config)
    }

    /// `PUT`: creates the queue or replaces its whole configuration (omitted fields reset to
    /// their defaults), keeping `created_at` and the messages. Answers whether it was created.
    /// A creation past the tenant's `max_queues` is `QuotaExceeded` (the engine checks it
    /// atomically with the creation).
    pub async fn put_queue(
        &self,
        tenant: &TenantId,
        name: &str,
        patch: QueueConfigPatch,
    ) -> Result<(QueueView, bool), ServiceError> {
        let key = queue_key(tenant, name)?;
        let config = self.apply_patch(
            &key.name,
            QueueConfig::with_defaults(self.limits.max_message_bytes),
            patch,
        )?;
        if let Some(policy) = &config.redrive_policy {
            self.check_redrive_policy(&key, policy).await?;
        }
        let (info, created) = self
            .engine
            .put_queue(&key, config, self.clock.now())
            .await?;
        Ok((self.view(info), created))
    }

    /// `PATCH`: changes only the fields given.
    pub async fn patch_queue(
        &self,
        tenant: &TenantId,
        name: &str,
        patch: QueueConfigPatch,
    ) -> Result<QueueView, ServiceError> {
        let key = queue_key(tenant, name)?;
        let current = self
            .engine
            .queue_config(&key)
            .await?
            .ok_or(ServiceError::QueueNotFound)?;
        let policy_changed = patch.redrive_policy.is_some();
        let config = self.apply_patch(&key.name, current, patch)?;
        if let (true, Some(policy)) = (policy_changed, &config.redrive_policy) {
            self.check_redrive_policy(&key, policy).await?;
        }
        let (info, _) = self
            .engine
            .put_queue(&key, config, self.clock.now())
            .await?;
        Ok(self.view(info))
    }

    /// One queue with its stats.
    pub async fn get_queue(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<QueueView, ServiceError> {
        let key = queue_key(tenant, name)?;
        let info = self
            .engine
            .get_queue(&key, self.clock.now())
            .await?
            .ok_or(ServiceError::QueueNotFound)?;
        Ok(self.view(info))
    }

    /// A page of the tenant's queues whose names start with `prefix`.
    pub async fn list_queues(
        &self,
        tenant: &TenantId,
        prefix: &str,
        limit: Option<u32>,
        next_token: Option<&str>,
    ) -> Result<QueuePage, ServiceError> {
        let limit = page_limit(limit)?;
        let after = match next_token {
            Some(token) => Some(
                QueueName::parse(&decode_page_token(TOKEN_PREFIX, token)?).map_err(|_| {
                    ServiceError::invalid("next_token", "is not a token this server issued")
                })?,
            ),
            None => None,
        };
        let mut infos = self
            .engine
            .list_queues(tenant, prefix, after.as_ref(), limit + 1, self.clock.now())
            .await?;
        let more = infos.len() > limit;
        infos.truncate(limit);
        let next_token = match (more, infos.last()) {
            (true, Some(last)) => Some(encode_page_token(TOKEN_PREFIX, last.name.as_str())),
            _ => None,
        };
        Ok(QueuePage {
            queues: infos.into_iter().map(|info| self.view(info)).collect(),
            next_token,
        })
    }

    /// Deletes the queue and its messages. A queue that another queue's redrive policy names
    /// as its dead-letter queue is a `Conflict` naming those sources: deleting it would leave
    /// them nowhere to move dead letters to.
    pub async fn delete_queue(&self, tenant: &TenantId, name: &str) -> Result<(), ServiceError> {
        let key = queue_key(tenant, name)?;
        let sources = self.dead_letter_sources(&key, 10).await?;
        if !sources.is_empty() {
            let names: Vec<&str> = sources.iter().map(QueueName::as_str).collect();
            return Err(ServiceError::Conflict(format!(
                "{} is the dead-letter queue of {}; remove their redrive_policy first",
                key.name,
                names.join(", ")
            )));
        }
        if self.engine.delete_queue(&key).await? {
            self.forget_queue_extras(&key.tenant, &key.name).await;
            // After the queue is gone: a subscription left behind by a crash in between only
            // counts failed deliveries, and the next deletion of the name removes it.
            self.unsubscribe_queue(&key).await
        } else {
            Err(ServiceError::QueueNotFound)
        }
    }

    /// Removes every message of the queue.
    pub async fn purge_queue(&self, tenant: &TenantId, name: &str) -> Result<(), ServiceError> {
        let key = queue_key(tenant, name)?;
        Ok(self.engine.purge(&key).await?)
    }
}
