//! What a queue carries for a front-end beyond its configuration: opaque attributes the
//! services store and echo but never act on (the AWS endpoint's `Policy`, `KmsMasterKeyId`,
//! …), and the reverse view of redrive policies (which queues name a dead-letter queue).
//!
//! The opaque attributes are a record in the engine's [`Records`](sluice_engine::Records)
//! (kind `queue-extras`, key `<tenant>/<queue>`), stamped with the queue's `created_at`: a
//! record left by an earlier queue of the same name is ignored, so a re-created queue starts
//! without them. Engines store it like any record; the queue configuration stays unchanged.

use crate::queues::{parse_queue_name, queue_key};
use crate::{ServiceError, Services};
use serde::{Deserialize, Serialize};
use sluice_engine::{Millis, QueueName, TenantId};
use std::collections::BTreeMap;

const KIND: &str = "queue-extras";

/// The most opaque attributes one queue may hold.
pub const MAX_OPAQUE_ATTRIBUTES: usize = 32;
/// The largest opaque attribute value, in bytes (SQS's `Policy` limit).
pub const MAX_OPAQUE_VALUE_BYTES: usize = 20_480;

#[derive(Debug, Default, Serialize, Deserialize)]
struct Extras {
    created_at: Millis,
    attributes: BTreeMap<String, String>,
}

fn record_key(tenant: &TenantId, queue: &QueueName) -> String {
    format!("{tenant}/{queue}")
}

impl Services {
    /// The opaque attributes of the queue `name` created at `created_at`.
    pub async fn opaque_queue_attributes(
        &self,
        tenant: &TenantId,
        name: &str,
        created_at: Millis,
    ) -> Result<BTreeMap<String, String>, ServiceError> {
        let queue = parse_queue_name(name)?;
        let Some(record) = self
            .engine
            .get_record(KIND, &record_key(tenant, &queue))
            .await?
        else {
            return Ok(BTreeMap::new());
        };
        let extras: Extras = serde_json::from_str(&record.value)
            .map_err(|e| ServiceError::Internal(format!("unreadable queue-extras record: {e}")))?;
        Ok(if extras.created_at == created_at {
            extras.attributes
        } else {
            BTreeMap::new()
        })
    }

    /// Sets (`Some`) or removes (`None`) opaque attributes of the queue `name` created at
    /// `created_at`, leaving the others alone; answers them all. Values are kept byte for byte.
    pub async fn update_opaque_queue_attributes(
        &self,
        tenant: &TenantId,
        name: &str,
        created_at: Millis,
        changes: BTreeMap<String, Option<String>>,
    ) -> Result<BTreeMap<String, String>, ServiceError> {
        let queue = parse_queue_name(name)?;
        let key = record_key(tenant, &queue);
        loop {
            let current = self.engine.get_record(KIND, &key).await?;
            let (mut extras, version) = match &current {
                Some(record) => {
                    let extras: Extras = serde_json::from_str(&record.value).map_err(|e| {
                        ServiceError::Internal(format!("unreadable queue-extras record: {e}"))
                    })?;
                    (extras, Some(record.version))
                }
                None => (Extras::default(), None),
            };
            if extras.created_at != created_at {
                extras = Extras {
                    created_at,
                    attributes: BTreeMap::new(),
                };
            }
            for (name, value) in &changes {
                match value {
                    Some(value) => {
                        if value.len() > MAX_OPAQUE_VALUE_BYTES {
                            return Err(ServiceError::invalid(
                                name.clone(),
                                format!("must be at most {MAX_OPAQUE_VALUE_BYTES} bytes"),
                            ));
                        }
                        extras.attributes.insert(name.clone(), value.clone());
                    }
                    None => {
                        extras.attributes.remove(name);
                    }
                }
            }
            if extras.attributes.len() > MAX_OPAQUE_ATTRIBUTES {
                return Err(ServiceError::invalid(
                    "attributes",
                    format!("at most {MAX_OPAQUE_ATTRIBUTES} stored attributes"),
                ));
            }
            let value = serde_json::to_string(&extras)
                .map_err(|e| ServiceError::Internal(format!("queue-extras record: {e}")))?;
            if self
                .engine
                .put_record(KIND, &key, value, version)
                .await?
                .is_some()
            {
                return Ok(extras.attributes);
            }
        }
    }

    /// Removes the opaque attributes of a deleted queue. Best effort: a record left behind
    /// (the store failed in between) names an older creation and is ignored, then replaced.
    pub(crate) async fn forget_queue_extras(&self, tenant: &TenantId, queue: &QueueName) {
        let key = record_key(tenant, queue);
        let removed = match self.engine.get_record(KIND, &key).await {
            Ok(Some(record)) => self.engine.delete_record(KIND, &key, record.version).await,
            Ok(None) => Ok(true),
            Err(error) => Err(error),
        };
        if let Err(error) = removed {
            tracing::warn!(%error, %tenant, %queue, "could not remove a deleted queue's stored attributes");
        }
    }

    /// The tenant's queues whose redrive policy names the queue `name` as their dead-letter
    /// queue, by name, up to `limit`. A missing queue is `QueueNotFound`.
    pub async fn dead_letter_source_queues(
        &self,
        tenant: &TenantId,
        name: &str,
        limit: usize,
    ) -> Result<Vec<QueueName>, ServiceError> {
        let key = queue_key(tenant, name)?;
        if self.engine.queue_config(&key).await?.is_none() {
            return Err(ServiceError::QueueNotFound);
        }
        self.dead_letter_sources(&key, limit).await
    }
}
