//! Tenant administration: the records behind `/v1/admin/tenants`, implicit tenants named by
//! tokens, what deleting a tenant means for its tokens, and the per-request rate limit
//! (`requests_per_second`, `burst`). The queue-count quota is checked by the engine, atomically
//! with the creation of a queue; `max_stored_bytes` by `stored_bytes.rs`, which learns each
//! tenant's quota here.
//!
//! Also each tenant's AWS account id: 12 digits, unique, kept in two compare-and-set records of
//! the engine's [`Records`](sluice_engine::Records) because the engine's tenant record has no
//! field for it. The reservation `aws-account/<id>` → tenant is written first (that is where
//! uniqueness is decided), then `tenant-account/<tenant>` → id (what readers look up). A crash
//! between the two leaves a reservation no tenant points to: it wastes one id out of 10^12 and
//! is never answered. A release removes them in the opposite order.

use crate::queues::{decode_page_token, encode_page_token, page_limit};
use crate::{ServiceError, Services};
use serde::{Deserialize, Serialize};
use sluice_engine::{Quotas, RateLimit, TenantId, TenantRecord};

/// The `Records` kind of account-id reservations, keyed by the 12-digit id.
const ACCOUNT_RECORDS: &str = "aws-account";
/// The `Records` kind naming each tenant's account id, keyed by the tenant id.
const TENANT_ACCOUNT_RECORDS: &str = "tenant-account";
/// The development tenant, whose account id is fixed.
const DEFAULT_TENANT: &str = "default";
/// The development tenant's account id, as LocalStack and moto use.
pub const DEFAULT_ACCOUNT_ID: &str = "000000000000";
/// How many random ids an assignment tries before it gives up (each collides with probability
/// tenants / 10^12).
const ASSIGN_ATTEMPTS: usize = 8;

/// What reserving an account id found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reservation {
    /// This call reserved it.
    Made,
    /// The tenant held it already (a concurrent assignment, or one a crash left behind).
    Held,
    /// Another tenant holds it.
    Taken,
}

/// `aws-account/<id>`: which tenant holds an account id.
#[derive(Debug, Serialize, Deserialize)]
struct AccountReservation {
    tenant: String,
}

/// `tenant-account/<tenant>`: a tenant's account id.
#[derive(Debug, Serialize, Deserialize)]
struct TenantAccount {
    aws_account_id: String,
}

/// Checks an account id given by a caller: exactly 12 ASCII digits.
fn parse_account_id(field: &str, id: &str) -> Result<String, ServiceError> {
    if id.len() == 12 && id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(id.to_owned())
    } else {
        Err(ServiceError::invalid(
            field,
            format!("an AWS account id is exactly 12 digits, got {id:?}"),
        ))
    }
}

/// A random 12-digit id other than the development tenant's.
fn random_account_id() -> String {
    loop {
        let n = (uuid::Uuid::new_v4().as_u128() as u64) % 1_000_000_000_000;
        if n != 0 {
            return format!("{n:012}");
        }
    }
}

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
    /// is looked at (so requests refused for any later reason spend theirs too), and notes the
    /// tenant's `max_stored_bytes` for the sends that follow.
    /// [`ServiceError::RateLimited`] when its `requests_per_second` and `burst` allow no
    /// more for now; a tenant without `requests_per_second` is not limited and costs nothing.
    pub async fn admit_request(
        &self,
        tenant: &TenantId,
        quotas: &Quotas,
    ) -> Result<(), ServiceError> {
        // Every tenant request passes here first (REST and the AWS endpoint alike), with the
        // quotas as the gateway reads them: `max_stored_bytes` is enforced from the tenant's
        // first request on, and follows changes made through other gateways.
        self.stored_bytes.note(tenant, quotas);
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
    /// issued before an earlier deletion of the id stay refused. It gets a random AWS account
    /// id (see [`create_tenant_with_account`](Self::create_tenant_with_account)).
    pub async fn create_tenant(
        &self,
        id: &str,
        quotas: Quotas,
    ) -> Result<TenantRecord, ServiceError> {
        Ok(self.create_tenant_with_account(id, quotas, None).await?.0)
    }

    /// Creates a tenant with the AWS account id `aws_account_id` (12 digits; a validation
    /// error naming `aws_account_id` otherwise, `Conflict` if another tenant holds it or it is
    /// the development tenant's `000000000000`), or a random one (`default` gets
    /// `000000000000`). Answers the tenant and its account id.
    pub async fn create_tenant_with_account(
        &self,
        id: &str,
        quotas: Quotas,
        aws_account_id: Option<&str>,
    ) -> Result<(TenantRecord, String), ServiceError> {
        validate_quotas(&quotas)?;
        let record = TenantRecord {
            id: parse_tenant("id", id)?,
            quotas,
            created_at: self.clock.now(),
        };
        let given = match aws_account_id {
            Some(given) => {
                let given = parse_account_id("aws_account_id", given)?;
                if given == DEFAULT_ACCOUNT_ID && record.id.as_str() != DEFAULT_TENANT {
                    return Err(ServiceError::Conflict(format!(
                        "aws_account_id {DEFAULT_ACCOUNT_ID} is the development tenant's"
                    )));
                }
                let reservation = self.reserve_account_id(&given, &record.id).await?;
                if reservation == Reservation::Taken {
                    return Err(ServiceError::Conflict(format!(
                        "aws_account_id {given} belongs to another tenant"
                    )));
                }
                Some((given, reservation))
            }
            None => None,
        };
        if let Err(error) = self.engine.create_tenant(record.clone()).await {
            // Give back only a reservation this call made: an existing tenant of this id may
            // hold the one it found.
            if let Some((given, Reservation::Made)) = &given {
                self.release_reservation(given, &record.id).await?;
            }
            return Err(error.into());
        }
        self.stored_bytes.note(&record.id, &record.quotas);
        let account = match given {
            Some((given, _)) => {
                self.point_tenant_at(&record.id, &given).await?;
                given
            }
            None => self.tenant_account_id(&record.id).await?,
        };
        Ok((record, account))
    }

    /// The tenant's AWS account id, assigned now if it has none yet (tenants named only by
    /// tokens, and those created before account ids existed): idempotent, and concurrent
    /// callers all get the same id. Does not check that the tenant exists.
    pub async fn tenant_account_id(&self, tenant: &TenantId) -> Result<String, ServiceError> {
        for _ in 0..ASSIGN_ATTEMPTS {
            if let Some((_, account)) = self.tenant_account(tenant).await? {
                return Ok(account);
            }
            let candidate = if tenant.as_str() == DEFAULT_TENANT {
                DEFAULT_ACCOUNT_ID.to_owned()
            } else {
                random_account_id()
            };
            if self.reserve_account_id(&candidate, tenant).await? == Reservation::Taken {
                continue;
            }
            let value = Self::json(&TenantAccount {
                aws_account_id: candidate.clone(),
            })?;
            if self
                .engine
                .put_record(TENANT_ACCOUNT_RECORDS, tenant.as_str(), value, None)
                .await?
                .is_some()
            {
                return Ok(candidate);
            }
            // Another assignment for this tenant came first: take theirs, and give this id
            // back unless it is theirs too (`default`'s fixed id).
            if let Some((_, winner)) = self.tenant_account(tenant).await? {
                if winner != candidate {
                    self.release_reservation(&candidate, tenant).await?;
                }
                return Ok(winner);
            }
        }
        Err(ServiceError::Unavailable(format!(
            "could not assign an AWS account id to tenant {tenant}; retry"
        )))
    }

    /// The tenant's account id and the version of its record, if it has one.
    async fn tenant_account(
        &self,
        tenant: &TenantId,
    ) -> Result<Option<(u64, String)>, ServiceError> {
        let Some(record) = self
            .engine
            .get_record(TENANT_ACCOUNT_RECORDS, tenant.as_str())
            .await?
        else {
            return Ok(None);
        };
        let parsed: TenantAccount = serde_json::from_str(&record.value)
            .map_err(|e| ServiceError::Internal(format!("account record of {tenant}: {e}")))?;
        Ok(Some((record.version, parsed.aws_account_id)))
    }

    /// Reserves `id` for `tenant`: whether this call made the reservation, found it the
    /// tenant's already, or found it another's.
    async fn reserve_account_id(
        &self,
        id: &str,
        tenant: &TenantId,
    ) -> Result<Reservation, ServiceError> {
        let value = Self::json(&AccountReservation {
            tenant: tenant.as_str().to_owned(),
        })?;
        if self
            .engine
            .put_record(ACCOUNT_RECORDS, id, value, None)
            .await?
            .is_some()
        {
            return Ok(Reservation::Made);
        }
        Ok(
            if self.account_holder(id).await?.as_deref() == Some(tenant.as_str()) {
                Reservation::Held
            } else {
                Reservation::Taken
            },
        )
    }

    /// The tenant holding a reservation, if any.
    async fn account_holder(&self, id: &str) -> Result<Option<String>, ServiceError> {
        let Some(record) = self.engine.get_record(ACCOUNT_RECORDS, id).await? else {
            return Ok(None);
        };
        let parsed: AccountReservation = serde_json::from_str(&record.value)
            .map_err(|e| ServiceError::Internal(format!("account reservation {id}: {e}")))?;
        Ok(Some(parsed.tenant))
    }

    /// Removes `tenant`'s reservation of `id` (another tenant's is left alone).
    async fn release_reservation(&self, id: &str, tenant: &TenantId) -> Result<(), ServiceError> {
        if let Some(record) = self.engine.get_record(ACCOUNT_RECORDS, id).await? {
            let parsed: Result<AccountReservation, _> = serde_json::from_str(&record.value);
            if parsed.is_ok_and(|r| r.tenant == tenant.as_str()) {
                self.engine
                    .delete_record(ACCOUNT_RECORDS, id, record.version)
                    .await?;
            }
        }
        Ok(())
    }

    /// Makes `tenant-account/<tenant>` name `id` (reserved already), releasing an id a lazy
    /// assignment gave the tenant meanwhile.
    async fn point_tenant_at(&self, tenant: &TenantId, id: &str) -> Result<(), ServiceError> {
        let value = Self::json(&TenantAccount {
            aws_account_id: id.to_owned(),
        })?;
        for _ in 0..ASSIGN_ATTEMPTS {
            let current = self.tenant_account(tenant).await?;
            let expected = current.as_ref().map(|(version, _)| *version);
            if self
                .engine
                .put_record(
                    TENANT_ACCOUNT_RECORDS,
                    tenant.as_str(),
                    value.clone(),
                    expected,
                )
                .await?
                .is_some()
            {
                if let Some((_, old)) = current.filter(|(_, old)| old != id) {
                    self.release_reservation(&old, tenant).await?;
                }
                return Ok(());
            }
        }
        Err(ServiceError::Unavailable(format!(
            "tenant {tenant}'s account id is being changed concurrently; retry"
        )))
    }

    /// Releases the tenant's account id (on deletion), so another tenant may be given it.
    async fn release_account_id(&self, tenant: &TenantId) -> Result<(), ServiceError> {
        if let Some((version, id)) = self.tenant_account(tenant).await? {
            self.engine
                .delete_record(TENANT_ACCOUNT_RECORDS, tenant.as_str(), version)
                .await?;
            self.release_reservation(&id, tenant).await?;
        }
        Ok(())
    }

    /// Serialises a record value.
    pub(crate) fn json(value: &impl Serialize) -> Result<String, ServiceError> {
        serde_json::to_string(value).map_err(|e| ServiceError::Internal(e.to_string()))
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
        // The AWS identities cached here carry the old quotas.
        self.aws_identities.clear();
        self.stored_bytes.note(&record.id, &record.quotas);
        Ok(record)
    }

    /// Deletes a tenant with all its resources, revokes the tokens issued until now (see
    /// [`ensure_tenant`](Self::ensure_tenant)) and its access keys, and releases its AWS
    /// account id.
    pub async fn delete_tenant(&self, id: &str) -> Result<(), ServiceError> {
        let id = parse_tenant("id", id)?;
        self.delete_tenant_topics(&id).await?;
        // Keys first: once the deletion starts, nothing may sign as the tenant.
        self.delete_tenant_access_keys(&id).await?;
        self.release_account_id(&id).await?;
        let deleted = self.engine.delete_tenant(&id, self.clock.now()).await?;
        self.stored_bytes.forget(&id);
        if deleted {
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

    fn services() -> (Services, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let engine = sluice_embedded::EmbeddedEngine::open(dir.path(), Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let clock = sluice_engine::ManualClock::new(1_000_000_000_000);
        let services = Services::new(
            std::sync::Arc::new(engine),
            std::sync::Arc::new(clock),
            crate::Limits::default(),
        );
        (services, dir)
    }

    fn tenant(id: &str) -> TenantId {
        TenantId::parse(id).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn concurrent_lazy_assignments_agree_and_keep_their_reservation() {
        let (services, _dir) = services();
        for name in ["default", "lazy"] {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..16 {
                let (services, id) = (services.clone(), tenant(name));
                tasks.spawn(async move { services.tenant_account_id(&id).await });
            }
            let mut ids = std::collections::BTreeSet::new();
            while let Some(answer) = tasks.join_next().await {
                ids.insert(
                    answer
                        .unwrap_or_else(|e| panic!("{e}"))
                        .unwrap_or_else(|e| panic!("{e}")),
                );
            }
            assert_eq!(ids.len(), 1, "{name}: {ids:?}");
            let id = ids.pop_first().unwrap_or_default();
            if name == "default" {
                assert_eq!(id, DEFAULT_ACCOUNT_ID);
            }
            // The reservation survives the losers' clean-up: nobody else can take the id.
            assert_eq!(
                services.account_holder(&id).await.ok().flatten().as_deref(),
                Some(name)
            );
        }
    }

    #[tokio::test]
    async fn a_refused_creation_gives_back_only_what_it_reserved() {
        let (services, _dir) = services();
        let quotas = Quotas::default;
        let (_, id) = services
            .create_tenant_with_account("x", quotas(), Some("123456789012"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(id, "123456789012");
        // The tenant exists: refused, and x keeps its id.
        assert!(matches!(
            services
                .create_tenant_with_account("x", quotas(), Some("123456789012"))
                .await,
            Err(ServiceError::Conflict(_))
        ));
        assert!(matches!(
            services
                .create_tenant_with_account("y", quotas(), Some("123456789012"))
                .await,
            Err(ServiceError::Conflict(_))
        ));
        assert_eq!(
            services
                .tenant_account_id(&tenant("x"))
                .await
                .ok()
                .as_deref(),
            Some("123456789012")
        );
        // Deleting releases it.
        services
            .delete_tenant("x")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let (_, id) = services
            .create_tenant_with_account("y", quotas(), Some("123456789012"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(id, "123456789012");
    }

    #[test]
    fn account_ids_are_twelve_digits() {
        assert!(parse_account_id("f", "012345678901").is_ok());
        for bad in ["", "12345678901", "1234567890123", "12345678901a", "１２３"] {
            assert!(parse_account_id("f", bad).is_err(), "{bad}");
        }
        for _ in 0..100 {
            let id = random_account_id();
            assert_eq!(id.len(), 12);
            assert!(id.bytes().all(|b| b.is_ascii_digit()));
            assert_ne!(id, DEFAULT_ACCOUNT_ID);
        }
    }

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
