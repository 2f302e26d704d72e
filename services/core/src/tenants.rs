//! Tenant administration: the records behind `/v1/admin/tenants`, implicit tenants named by
//! tokens, what deleting a tenant means for its tokens, and the per-request rate limit
//! (`requests_per_second`, `burst`). The queue-count quota is checked by the engine, atomically
//! with the creation of a queue.

use crate::queues::{decode_page_token, encode_page_token, page_limit};
use crate::{ServiceError, Services};
use sluice_engine::{Quotas, RateLimit, TenantId, TenantRecord};

/// One page of a tenant listing.
#[derive(Debug, Clone)]
pub struct TenantPage {
    /// The tenants, by id.
    pub tenants: Vec<TenantRecord>,
    /// Where the next page starts, if there is one.
    pub next_token: Option<String>,
}

const TOKEN_PREFIX: &str = "t1:";

/// The bucket a tenant's quotas ask for: `burst` defaults to one second's worth of requests.
fn rate_limit(quotas: &Quotas) -> Option<RateLimit> {
    let rate = quotas.requests_per_second?;
    Some(RateLimit {
        rate,
        burst: quotas.burst.unwrap_or(rate),
    })
}

/// `Retry-After` is in whole seconds: a wait of any part of a second is a second, and a
/// refusal never says "retry now".
fn retry_after_seconds(wait_ms: u64) -> u64 {
    wait_ms.div_ceil(1000).max(1)
}

/// Checks the quotas as a whole, naming the field at fault: rates and bursts are positive, and
/// a `burst` means nothing without the rate it bursts above.
pub(crate) fn validate_quotas(quotas: &Quotas) -> Result<(), ServiceError> {
    if quotas.requests_per_second == Some(0) {
        return Err(ServiceError::invalid(
            "quotas.requests_per_second",
            "must be at least 1 (null: unlimited)",
        ));
    }
    match (quotas.burst, quotas.requests_per_second) {
        (Some(0), _) => Err(ServiceError::invalid(
            "quotas.burst",
            "must be at least 1 (null: one second's worth of requests_per_second)",
        )),
        (Some(_), None) => Err(ServiceError::invalid(
            "quotas.burst",
            "needs quotas.requests_per_second: a burst is measured against a rate",
        )),
        _ => Ok(()),
    }
}

/// Parses a tenant id given in a path or body, naming `field` when it is invalid.
pub(crate) fn parse_tenant(field: &str, id: &str) -> Result<TenantId, ServiceError> {
    TenantId::parse(id).map_err(|e| ServiceError::invalid(field, e.0))
}

impl Services {
    /// Records a tenant named by a valid token issued at `issued_at_seconds` (its `iat`
    /// claim), so it is listed like a created one.
    ///
    /// Deleting a tenant revokes the tokens issued before: a token whose `iat` is not after
    /// the deletion (token times have one-second precision, so a token issued in the second of
    /// the deletion is refused too), or that has no `iat`, answers
    /// [`ServiceError::TenantDeleted`] and re-creates nothing. A token issued later re-creates
    /// the tenant with default quotas; old tokens stay refused.
    ///
    /// Answers the tenant's quotas, for [`admit_request`](Self::admit_request).
    pub async fn ensure_tenant(
        &self,
        tenant: &TenantId,
        issued_at_seconds: Option<u64>,
    ) -> Result<Quotas, ServiceError> {
        let issued_at = issued_at_seconds.map(|s| s.saturating_mul(1000));
        Ok(self
            .engine
            .ensure_tenant(tenant, issued_at, self.clock.now())
            .await?)
    }

    /// Spends one of `tenant`'s request tokens, called once per request before anything else
    /// is looked at (so requests refused for any later reason spend theirs too).
    /// [`ServiceError::RateLimited`] when its `requests_per_second` and `burst` allow no
    /// more for now; a tenant without `requests_per_second` is not limited and costs nothing.
    pub async fn admit_request(
        &self,
        tenant: &TenantId,
        quotas: &Quotas,
    ) -> Result<(), ServiceError> {
        let Some(limit) = rate_limit(quotas) else {
            return Ok(());
        };
        let admission = self.limiter.admit(tenant, limit, self.clock.now()).await?;
        if admission.allowed {
            return Ok(());
        }
        metrics::counter!("sluice_rate_limited_total", "tenant" => tenant.to_string()).increment(1);
        Err(ServiceError::RateLimited {
            retry_after_seconds: retry_after_seconds(admission.retry_after_ms),
        })
    }

    /// The earliest `iat` (seconds since the epoch) a token for `tenant` may carry to be
    /// accepted: the second after its last deletion, if it was ever deleted. Minting with it
    /// keeps a token minted in the second of a deletion usable.
    pub async fn first_valid_issue_second(
        &self,
        tenant: &TenantId,
    ) -> Result<Option<u64>, ServiceError> {
        Ok(self
            .engine
            .tenant_deleted_at(tenant)
            .await?
            .map(|deleted_at| deleted_at / 1000 + 1))
    }

    /// Creates a tenant; `Conflict` if it exists (also when only tokens named it). Tokens
    /// issued before an earlier deletion of the id stay refused.
    pub async fn create_tenant(
        &self,
        id: &str,
        quotas: Quotas,
    ) -> Result<TenantRecord, ServiceError> {
        validate_quotas(&quotas)?;
        let record = TenantRecord {
            id: parse_tenant("id", id)?,
            quotas,
            created_at: self.clock.now(),
        };
        self.engine.create_tenant(record.clone()).await?;
        Ok(record)
    }

    /// One tenant.
    pub async fn get_tenant(&self, id: &str) -> Result<TenantRecord, ServiceError> {
        let id = parse_tenant("id", id)?;
        self.engine
            .get_tenant(&id)
            .await?
            .ok_or(ServiceError::TenantNotFound)
    }

    /// Replaces a tenant's quotas.
    pub async fn update_tenant(
        &self,
        id: &str,
        quotas: Quotas,
    ) -> Result<TenantRecord, ServiceError> {
        validate_quotas(&quotas)?;
        let mut record = self.get_tenant(id).await?;
        record.quotas = quotas;
        self.engine.update_tenant(record.clone()).await?;
        Ok(record)
    }

    /// Deletes a tenant with all its resources and revokes the tokens issued until now (see
    /// [`ensure_tenant`](Self::ensure_tenant)).
    pub async fn delete_tenant(&self, id: &str) -> Result<(), ServiceError> {
        let id = parse_tenant("id", id)?;
        self.delete_tenant_topics(&id).await?;
        if self.engine.delete_tenant(&id, self.clock.now()).await? {
            Ok(())
        } else {
            Err(ServiceError::TenantNotFound)
        }
    }

    /// A page of tenants by id.
    pub async fn list_tenants(
        &self,
        limit: Option<u32>,
        next_token: Option<&str>,
    ) -> Result<TenantPage, ServiceError> {
        let limit = page_limit(limit)?;
        let after = match next_token {
            Some(token) => Some(parse_tenant(
                "next_token",
                &decode_page_token(TOKEN_PREFIX, token)?,
            )?),
            None => None,
        };
        let mut tenants = self.engine.list_tenants(after.as_ref(), limit + 1).await?;
        let more = tenants.len() > limit;
        tenants.truncate(limit);
        let next_token = match (more, tenants.last()) {
            (true, Some(last)) => Some(encode_page_token(TOKEN_PREFIX, last.id.as_str())),
            _ => None,
        };
        Ok(TenantPage {
            tenants,
            next_token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_of_at_least_one() {
        assert_eq!(retry_after_seconds(0), 1);
        assert_eq!(retry_after_seconds(1), 1);
        assert_eq!(retry_after_seconds(1_000), 1);
        assert_eq!(retry_after_seconds(1_001), 2);
    }

    #[test]
    fn burst_defaults_to_one_second_of_the_rate() {
        let quotas = |rps, burst| Quotas {
            requests_per_second: rps,
            burst,
            ..Quotas::default()
        };
        assert_eq!(rate_limit(&quotas(None, None)), None);
        assert_eq!(
            rate_limit(&quotas(Some(7), None)),
            Some(RateLimit { rate: 7, burst: 7 })
        );
        assert_eq!(
            rate_limit(&quotas(Some(7), Some(2))),
            Some(RateLimit { rate: 7, burst: 2 })
        );
        let field = |q: Quotas| match validate_quotas(&q) {
            Err(ServiceError::Validation { field, .. }) => Some(field),
            _ => None,
        };
        assert_eq!(
            field(quotas(Some(0), None)).as_deref(),
            Some("quotas.requests_per_second")
        );
        assert_eq!(
            field(quotas(Some(1), Some(0))).as_deref(),
            Some("quotas.burst")
        );
        assert_eq!(
            field(quotas(None, Some(3))).as_deref(),
            Some("quotas.burst")
        );
        assert_eq!(field(quotas(Some(1), Some(3))), None);
    }
}
