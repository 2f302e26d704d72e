//! AWS access keys: the credentials the AWS-compatible endpoint verifies SigV4 signatures
//! with. Each belongs to a tenant and carries scopes like a token.
//!
//! The secret has to be stored (a signature is an HMAC under it; there is nothing to hash
//! instead), so it lives in the store beside the key: record `access-key/<key id>` (what a
//! verification reads, one lookup), and the per-tenant index `tenant-access-key/<tenant>/<key
//! id>` for listings and tenant deletion. The index is written before the key and removed
//! after it, so it only ever names more keys than exist, and readers skip the missing ones.
//!
//! The services only check and store keys; the gateway generates new ones and owns the scope
//! names, as it does for tokens.
//!
//! Authenticating an AWS request needs the key, its tenant's quotas and the tenant's account id:
//! three store reads, where a REST request's token needs one. [`Services::aws_identity`] keeps
//! them in memory for [`AWS_IDENTITY_TTL`], per process. A key deleted (or a tenant deleted or
//! its quotas changed) through this process is forgotten at once; through another gateway it
//! still verifies here for up to that TTL — the same bound the Redis engine's tenant cache puts
//! on a deleted tenant's tokens.

use crate::tenants::parse_tenant;
use crate::{ServiceError, Services};
use serde::{Deserialize, Serialize};
use sluice_engine::{Millis, Quotas, TenantId, TtlCache};
use std::time::Duration;

/// The `Records` kind of access keys, keyed by key id.
const KEY_RECORDS: &str = "access-key";
/// The `Records` kind of the per-tenant index, keyed `<tenant>/<key id>`.
const INDEX_RECORDS: &str = "tenant-access-key";
/// The most access keys one tenant may hold (so a listing is one bounded read).
pub const MAX_ACCESS_KEYS: usize = 100;
/// How long a process serves an access key, its tenant's quotas and account id from memory:
/// how late a revocation made through another gateway takes effect here.
pub const AWS_IDENTITY_TTL: Duration = Duration::from_secs(1);
/// The most identities held at once (only existing keys are cached, so only keys in use
/// within one TTL compete for room; past it, requests read the store as without a cache).
const MAX_CACHED_IDENTITIES: usize = 10_000;

/// Who an access key signs for: what an AWS request's authentication needs.
#[derive(Debug, Clone)]
pub struct AwsIdentity {
    /// The key, with its secret and scopes.
    pub key: AccessKey,
    /// Its tenant's quotas (for the request's rate-limit admission).
    pub quotas: Quotas,
    /// Its tenant's AWS account id.
    pub account_id: String,
}

/// This process's recently used [`AwsIdentity`]s, by access key id.
pub(crate) type IdentityCache = TtlCache<String, AwsIdentity>;

pub(crate) fn identity_cache() -> IdentityCache {
    TtlCache::bounded(AWS_IDENTITY_TTL, MAX_CACHED_IDENTITIES)
}

/// A stored access key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessKey {
    /// `AKIA…`-shaped id (16–128 of `[A-Z0-9]`).
    pub access_key_id: String,
    /// Its tenant.
    pub tenant: TenantId,
    /// The signing secret (40 of `[A-Za-z0-9+/]`).
    pub secret_access_key: String,
    /// Scope names, as the gateway checked them.
    pub scopes: Vec<String>,
    /// When created.
    pub created_at: Millis,
}

/// Checks an access key id: 16–128 of `[A-Z0-9]` (AWS's length range; generated ids are
/// `AKIA` and 16 more).
pub fn validate_access_key_id(field: &str, id: &str) -> Result<(), ServiceError> {
    if (16..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    {
        Ok(())
    } else {
        Err(ServiceError::invalid(
            field,
            "an access key id is 16-128 of [A-Z0-9], such as AKIAIOSFODNN7EXAMPLE",
        ))
    }
}

/// Checks a secret: 40 of `[A-Za-z0-9+/]`, the shape of AWS's secrets.
pub fn validate_secret(field: &str, secret: &str) -> Result<(), ServiceError> {
    if secret.len() == 40
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
    {
        Ok(())
    } else {
        Err(ServiceError::invalid(
            field,
            "a secret access key is 40 of [A-Za-z0-9+/]",
        ))
    }
}

fn index_key(tenant: &TenantId, id: &str) -> String {
    format!("{tenant}/{id}")
}

impl Services {
    /// Stores a new access key for the tenant `tenant` (which must exist: `TenantNotFound`).
    /// `Conflict` if the key id exists (for any tenant) or the tenant holds
    /// [`MAX_ACCESS_KEYS`].
    pub async fn create_access_key(
        &self,
        tenant: &str,
        access_key_id: &str,
        secret_access_key: &str,
        scopes: Vec<String>,
    ) -> Result<AccessKey, ServiceError> {
        let tenant = self.get_tenant(tenant).await?.id;
        validate_access_key_id("access_key_id", access_key_id)?;
        validate_secret("secret_access_key", secret_access_key)?;
        if self.list_access_keys_of(&tenant).await?.len() >= MAX_ACCESS_KEYS {
            return Err(ServiceError::Conflict(format!(
                "tenant {tenant} holds {MAX_ACCESS_KEYS} access keys, the most it may; revoke one first"
            )));
        }
        let key = AccessKey {
            access_key_id: access_key_id.to_owned(),
            tenant: tenant.clone(),
            secret_access_key: secret_access_key.to_owned(),
            scopes,
            created_at: self.clock.now(),
        };
        let index = index_key(&tenant, access_key_id);
        let indexed = self
            .engine
            .put_record(INDEX_RECORDS, &index, "{}".to_owned(), None)
            .await?;
        if self
            .engine
            .put_record(KEY_RECORDS, access_key_id, Self::json(&key)?, None)
            .await?
            .is_none()
        {
            // The id is taken: drop the index entry this call wrote (not one naming a key the
            // tenant already holds).
            if let Some(version) = indexed {
                self.engine
                    .delete_record(INDEX_RECORDS, &index, version)
                    .await?;
            }
            return Err(ServiceError::Conflict(format!(
                "access key {access_key_id} exists"
            )));
        }
        Ok(key)
    }

    /// The access key with this id, whichever tenant holds it (for signature verification).
    pub async fn access_key(&self, access_key_id: &str) -> Result<Option<AccessKey>, ServiceError> {
        let Some(record) = self.engine.get_record(KEY_RECORDS, access_key_id).await? else {
            return Ok(None);
        };
        serde_json::from_str(&record.value)
            .map(Some)
            .map_err(|e| ServiceError::Internal(format!("access key {access_key_id}: {e}")))
    }

    /// The access key `access_key_id` with its tenant's quotas and account id, `None` if no
    /// such key exists (`TenantNotFound` if its tenant is gone). Served from memory for up to
    /// [`AWS_IDENTITY_TTL`] after a read (see the module's documentation).
    pub async fn aws_identity(
        &self,
        access_key_id: &str,
    ) -> Result<Option<AwsIdentity>, ServiceError> {
        if let Some(identity) = self.aws_identities.get(access_key_id) {
            return Ok(Some(identity));
        }
        let Some(key) = self.access_key(access_key_id).await? else {
            return Ok(None);
        };
        let tenant = self.get_tenant(key.tenant.as_str()).await?;
        let account_id = self.tenant_account_id(&tenant.id).await?;
        let identity = AwsIdentity {
            key,
            quotas: tenant.quotas,
            account_id,
        };
        self.aws_identities
            .insert(access_key_id.to_owned(), identity.clone());
        Ok(Some(identity))
    }

    /// The tenant's access keys, by id (with their secrets: the gateway leaves them out).
    /// `TenantNotFound` if the tenant does not exist.
    pub async fn list_access_keys(&self, tenant: &str) -> Result<Vec<AccessKey>, ServiceError> {
        let tenant = self.get_tenant(tenant).await?.id;
        self.list_access_keys_of(&tenant).await
    }

    async fn list_access_keys_of(&self, tenant: &TenantId) -> Result<Vec<AccessKey>, ServiceError> {
        let prefix = format!("{tenant}/");
        // The index may name a few keys whose creation failed half-way: read past them.
        let entries = self
            .engine
            .list_records(INDEX_RECORDS, &prefix, None, 2 * MAX_ACCESS_KEYS + 16)
            .await?;
        let mut keys = Vec::new();
        for (index, _) in entries {
            let id = &index[prefix.len()..];
            if let Some(key) = self.access_key(id).await? {
                if key.tenant == *tenant {
                    keys.push(key);
                }
            }
        }
        Ok(keys)
    }

    /// Revokes one of the tenant's access keys; `NotFound` if it holds no key with that id.
    pub async fn delete_access_key(
        &self,
        tenant: &str,
        access_key_id: &str,
    ) -> Result<(), ServiceError> {
        let tenant = parse_tenant("id", tenant)?;
        let Some(record) = self.engine.get_record(KEY_RECORDS, access_key_id).await? else {
            return Err(ServiceError::AccessKeyNotFound);
        };
        let key: AccessKey = serde_json::from_str(&record.value)
            .map_err(|e| ServiceError::Internal(format!("access key {access_key_id}: {e}")))?;
        if key.tenant != tenant {
            return Err(ServiceError::AccessKeyNotFound);
        }
        if !self
            .engine
            .delete_record(KEY_RECORDS, access_key_id, record.version)
            .await?
        {
            return Err(ServiceError::AccessKeyNotFound);
        }
        self.aws_identities.remove(access_key_id);
        self.drop_index_entry(&tenant, access_key_id).await
    }

    async fn drop_index_entry(&self, tenant: &TenantId, id: &str) -> Result<(), ServiceError> {
        let index = index_key(tenant, id);
        if let Some(record) = self.engine.get_record(INDEX_RECORDS, &index).await? {
            self.engine
                .delete_record(INDEX_RECORDS, &index, record.version)
                .await?;
        }
        Ok(())
    }

    /// Revokes every access key of a tenant being deleted.
    pub(crate) async fn delete_tenant_access_keys(
        &self,
        tenant: &TenantId,
    ) -> Result<(), ServiceError> {
        let prefix = format!("{tenant}/");
        loop {
            let entries = self
                .engine
                .list_records(INDEX_RECORDS, &prefix, None, 256)
                .await?;
            if entries.is_empty() {
                return Ok(());
            }
            for (index, _) in entries {
                let id = &index[prefix.len()..];
                if let Some(record) = self.engine.get_record(KEY_RECORDS, id).await? {
                    let owned = serde_json::from_str::<AccessKey>(&record.value)
                        .is_ok_and(|key| key.tenant == *tenant);
                    if owned {
                        self.engine
                            .delete_record(KEY_RECORDS, id, record.version)
                            .await?;
                        self.aws_identities.remove(id);
                    }
                }
                self.drop_index_entry(tenant, id).await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ids_and_secrets_have_aws_shapes() {
        assert!(validate_access_key_id("f", "AKIAIOSFODNN7EXAMPLE").is_ok());
        for bad in ["AKIA", "akiaiosfodnn7example", "AKIAIOSFODNN7EXAMPL-"] {
            assert!(validate_access_key_id("f", bad).is_err(), "{bad}");
        }
        assert!(validate_secret("f", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY").is_ok());
        for bad in ["short", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKE=", ""] {
            assert!(validate_secret("f", bad).is_err(), "{bad}");
        }
    }
}
