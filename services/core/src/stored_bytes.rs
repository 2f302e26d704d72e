//! The tenant quota `max_stored_bytes`: a send (each batch entry, each publish's copies) that
//! would take the tenant's stored bytes past it is refused with
//! [`ServiceError::QuotaExceeded`].
//!
//! A tenant's stored bytes are the sum of its queues'
//! [`QueueStats::stored_bytes`](sluice_engine::QueueStats::stored_bytes), which every engine
//! keeps exact in the same atomic step as each add and removal. Summing them on every send
//! would cost a walk of the tenant's queues per message, so each gateway keeps, for the tenants
//! with the quota that its requests named (noted by
//! [`admit_request`](crate::Services::admit_request), which every tenant request passes with
//! the tenant's quotas), the total found by its last refresh plus the bytes it admitted since. A background
//! job refreshes every total each [`REFRESH_PERIOD`]; the first send of a tenant not yet
//! refreshed sums its queues then. Tenants without the quota cost nothing.
//!
//! What this bounds: one gateway never admits past the quota (its own admissions are counted
//! at once, under one lock). Gateways sharing a store see each other's sends only at their next
//! refresh, so N gateways may together overshoot by what the other N − 1 admit within one
//! refresh period. Deletes, purges, expiry and queue deletions free bytes at the next refresh
//! (within [`REFRESH_PERIOD`] plus one walk). Moves between a tenant's queues (dead letters,
//! redrive) change nothing.

use crate::{ServiceError, Services};
use sluice_engine::{Publication, Quotas, TenantId};
use std::collections::HashMap;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

/// How often each gateway sums the stored bytes of the tenants it enforces the quota for.
pub(crate) const REFRESH_PERIOD: Duration = Duration::from_secs(1);

/// How many queues one list call asks for while summing.
const PAGE: usize = 1000;

/// What a gateway knows about one tenant with the quota.
#[derive(Debug, Clone, Copy)]
struct Usage {
    /// The quota.
    limit: u64,
    /// The tenant's total at the last refresh; `None` until the first.
    stored: Option<u64>,
    /// Bytes this gateway admitted since that refresh began.
    admitted: u64,
}

/// The per-gateway cache of tenants' stored bytes (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct StoredBytes {
    /// Read on every request (most tenants have no quota), written when a quota changes and
    /// on each admission of a tenant with one.
    tenants: RwLock<HashMap<TenantId, Usage>>,
}

impl StoredBytes {
    fn read(&self) -> RwLockReadGuard<'_, HashMap<TenantId, Usage>> {
        self.tenants.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock(&self) -> RwLockWriteGuard<'_, HashMap<TenantId, Usage>> {
        self.tenants.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the tenant's current quotas: a tenant with `max_stored_bytes` is enforced from
    /// now on, one without is forgotten. Called on every request: a look, and a write only
    /// when the quota changed.
    pub(crate) fn note(&self, tenant: &TenantId, quotas: &Quotas) {
        if self.read().get(tenant).map(|usage| usage.limit) == quotas.max_stored_bytes {
            return;
        }
        let mut tenants = self.lock();
        match quotas.max_stored_bytes {
            Some(limit) => match tenants.get_mut(tenant) {
                Some(usage) => usage.limit = limit,
                None => {
                    tenants.insert(
                        tenant.clone(),
                        Usage {
                            limit,
                            stored: None,
                            admitted: 0,
                        },
                    );
                }
            },
            None => {
                tenants.remove(tenant);
            }
        }
    }

    /// Forgets a tenant (deleted).
    pub(crate) fn forget(&self, tenant: &TenantId) {
        self.lock().remove(tenant);
    }

    fn usage(&self, tenant: &TenantId) -> Option<Usage> {
        self.read().get(tenant).copied()
    }
}

/// What [`Services::reserve_stored_bytes`] took: give it back with
/// [`Services::release_stored_bytes`] if the bytes were not stored after all.
#[derive(Debug, Clone, Copy, Default)]
#[must_use]
pub(crate) struct Reserved(u64);

impl Services {
    /// Admits `bytes` more for `tenant` against its `max_stored_bytes`, counting them at once
    /// (so concurrent sends on this gateway cannot overshoot together), or refuses with
    /// [`ServiceError::QuotaExceeded`] naming the quota. Free for tenants without the quota.
    pub(crate) async fn reserve_stored_bytes(
        &self,
        tenant: &TenantId,
        bytes: u64,
    ) -> Result<Reserved, ServiceError> {
        let Some(usage) = self.stored_bytes.usage(tenant) else {
            return Ok(Reserved(0));
        };
        if usage.stored.is_none() {
            let total = self.tenant_stored_bytes(tenant).await?;
            if let Some(usage) = self.stored_bytes.lock().get_mut(tenant) {
                usage.stored.get_or_insert(total);
            }
        }
        let mut tenants = self.stored_bytes.lock();
        let Some(usage) = tenants.get_mut(tenant) else {
            return Ok(Reserved(0));
        };
        let stored = usage.stored.unwrap_or(0).saturating_add(usage.admitted);
        if stored.saturating_add(bytes) > usage.limit {
            return Err(ServiceError::QuotaExceeded(format!(
                "tenant {tenant} stores {stored} bytes of messages and its max_stored_bytes is {}: \
                 {bytes} bytes more do not fit; delete or purge messages (freed within seconds) \
                 or raise the quota",
                usage.limit
            )));
        }
        usage.admitted += bytes;
        Ok(Reserved(bytes))
    }

    /// What a publication's copies add to the tenant's stored bytes, if the tenant has the
    /// quota (0 otherwise, without rendering anything): each delivery's rendered copy. FIFO
    /// copies are measured before their sequence number is known, a few bytes short; the
    /// next refresh counts them exactly.
    pub(crate) fn copies_size(&self, tenant: &TenantId, publication: &Publication) -> u64 {
        if self.stored_bytes.usage(tenant).is_none() {
            return 0;
        }
        publication
            .deliveries
            .iter()
            .map(|d| publication.render(d, None).size() as u64)
            .sum()
    }

    /// Gives back bytes reserved for a send that did not store them (refused, a FIFO
    /// duplicate, failed).
    pub(crate) fn release_stored_bytes(&self, tenant: &TenantId, reserved: Reserved) {
        if reserved.0 == 0 {
            return;
        }
        if let Some(usage) = self.stored_bytes.lock().get_mut(tenant) {
            usage.admitted = usage.admitted.saturating_sub(reserved.0);
        }
    }

    /// The sum of the stored bytes of the tenant's queues, now.
    pub async fn tenant_stored_bytes(&self, tenant: &TenantId) -> Result<u64, ServiceError> {
        let now = self.clock.now();
        let mut total = 0u64;
        let mut after = None;
        loop {
            let page = self
                .engine
                .list_queues(tenant, "", after.as_ref(), PAGE, now)
                .await?;
            total = page
                .iter()
                .fold(total, |sum, q| sum.saturating_add(q.stats.stored_bytes));
            if page.len() < PAGE {
                return Ok(total);
            }
            after = page.last().map(|q| q.name.clone());
        }
    }

    /// One round of the refresh job: sums the stored bytes of every tenant this gateway
    /// enforces the quota for. Bytes admitted while a tenant is summed stay counted as
    /// admitted (the walk may have missed them); those admitted before it are in the sum.
    pub(crate) async fn refresh_stored_bytes(&self) -> Result<(), ServiceError> {
        let tenants: Vec<(TenantId, u64)> = self
            .stored_bytes
            .read()
            .iter()
            .map(|(tenant, usage)| (tenant.clone(), usage.admitted))
            .collect();
        for (tenant, admitted_before) in tenants {
            let total = self.tenant_stored_bytes(&tenant).await?;
            if let Some(usage) = self.stored_bytes.lock().get_mut(&tenant) {
                usage.stored = Some(total);
                usage.admitted = usage.admitted.saturating_sub(admitted_before);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn quotas(max_stored_bytes: Option<u64>) -> Quotas {
        Quotas {
            max_stored_bytes,
            ..Quotas::default()
        }
    }

    #[test]
    fn only_tenants_with_the_quota_are_kept() {
        let cache = StoredBytes::default();
        let t = TenantId::parse("t").unwrap();
        cache.note(&t, &quotas(None));
        assert!(cache.usage(&t).is_none());
        cache.note(&t, &quotas(Some(10)));
        assert_eq!(cache.usage(&t).unwrap().limit, 10);
        cache.note(&t, &quotas(Some(20)));
        assert_eq!(cache.usage(&t).unwrap().limit, 20);
        cache.note(&t, &quotas(None));
        assert!(cache.usage(&t).is_none());
    }
}
