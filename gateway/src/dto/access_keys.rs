//! The wire types of `/v1/admin/tenants/{id}/access-keys`: AWS access keys for the
//! AWS-compatible endpoint.

use super::rfc3339;
use serde::{Deserialize, Serialize};
use sluice_services::AccessKey;
use utoipa::ToSchema;

/// An access key to create, or a known pair to import.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAccessKey {
    /// Any of `queues:manage messages:send messages:consume topics:manage topics:publish`
    /// (not `admin`), as for tokens.
    pub scopes: Vec<String>,
    /// To import a known pair (with `secret_access_key`): 16–128 of `[A-Z0-9]`. Default: a
    /// new `AKIA…` id of 20 characters.
    #[schema(pattern = "^[A-Z0-9]{16,128}$")]
    pub access_key_id: Option<String>,
    /// To import a known pair (with `access_key_id`): 40 of `[A-Za-z0-9+/]`. Default: a new
    /// random secret.
    #[schema(pattern = "^[A-Za-z0-9+/]{40}$")]
    pub secret_access_key: Option<String>,
}

/// A created access key, with its secret: shown this once.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AccessKeyCreated {
    /// The key id (`Credential=` in SigV4).
    pub access_key_id: String,
    /// The signing secret. It is stored (SigV4 verification needs it) but never shown again.
    pub secret_access_key: String,
    /// What the key may do.
    pub scopes: Vec<String>,
    /// When created.
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<AccessKey> for AccessKeyCreated {
    fn from(key: AccessKey) -> Self {
        AccessKeyCreated {
            access_key_id: key.access_key_id,
            secret_access_key: key.secret_access_key,
            scopes: key.scopes,
            created_at: rfc3339(key.created_at),
        }
    }
}

/// An access key as listed: without its secret.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AccessKeySummary {
    /// The key id.
    pub access_key_id: String,
    /// What the key may do.
    pub scopes: Vec<String>,
    /// When created.
    #[schema(format = DateTime)]
    pub created_at: String,
}

impl From<AccessKey> for AccessKeySummary {
    fn from(key: AccessKey) -> Self {
        AccessKeySummary {
            access_key_id: key.access_key_id,
            scopes: key.scopes,
            created_at: rfc3339(key.created_at),
        }
    }
}

/// A tenant's access keys.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AccessKeyList {
    /// By key id (at most 100).
    pub access_keys: Vec<AccessKeySummary>,
}
