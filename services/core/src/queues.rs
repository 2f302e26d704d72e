//! Queue administration: creating, replacing, patching, listing and deleting queues, with the
//! configuration rules of the REST contract (ranges, defaults, FIFO-only fields).

use crate::validate::in_range;
use crate::{ServiceError, Services};
use base64::Engine as _;
use sluice_engine::{
    DeduplicationScope, Millis, QueueConfig, QueueKey, QueueName, QueueStats, TenantId,
};
use std::collections::BTreeMap;

/// A configuration change: `None` leaves a field alone in a PATCH and resets it to its default
/// in a PUT. Fields of features not built yet are carried so they can be refused by name
/// rather than silently ignored.
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
    /// Dead-letter queues are not built yet: a non-null policy is refused.
    pub redrive_policy_given: bool,
    /// Not built yet: a non-null policy is refused.
    pub redrive_allow_policy_given: bool,
    /// FIFO only.
    pub content_based_deduplication: Option<bool>,
    /// FIFO only.
    pub deduplication_scope: Option<String>,
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

impl Services {
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
        if patch.redrive_policy_given {
            return Err(ServiceError::invalid(
                "redrive_policy",
                "dead-letter queues are not supported by this server yet; send null or omit it",
            ));
        }
        if patch.redrive_allow_policy_given {
            return Err(ServiceError::invalid(
                "redrive_allow_policy",
                "dead-letter queues are not supported by this server yet; send null or omit it",
            ));
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
            if tags.len() > 50 {
                return Err(ServiceError::invalid(
                    "tags",
                    format!("at most 50 tags, got {}", tags.len()),
                ));
            }
            for (key, value) in &tags {
                if key.is_empty() || key.len() > 128 || value.len() > 256 {
                    return Err(ServiceError::invalid(
                        format!("tags.{key}"),
                        "keys must be 1-128 characters and values at most 256",
                    ));
                }
            }
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
        let config = self.apply_patch(&key.name, current, patch)?;
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

    /// Deletes the queue and its messages.
    pub async fn delete_queue(&self, tenant: &TenantId, name: &str) -> Result<(), ServiceError> {
        let key = queue_key(tenant, name)?;
        if self.engine.delete_queue(&key).await? {
            Ok(())
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
