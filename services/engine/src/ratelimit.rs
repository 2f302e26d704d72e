//! Per-tenant request rate limiting: the [`RateLimiter`] capability, the GCRA arithmetic every
//! implementation shares ([`gcra`]), and [`LocalRateLimiter`], the in-process implementation
//! for a store no other gateway shares. The Redis engine implements the trait with the same
//! arithmetic in a script, so gateways on one Redis share one bucket per tenant.
//!
//! The bucket is GCRA (the generic cell rate algorithm): instead of a token count it keeps one
//! instant per tenant, the theoretical arrival time (TAT) of the next request were the tenant
//! sending at exactly its rate. It is equivalent to a token bucket of `burst` tokens refilled at
//! `rate` per second, and needs no timer and a single value per tenant.

use crate::{EngineError, Millis, TenantId};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// A tenant's rate: `rate` requests per second sustained, at most `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second (at least 1).
    pub rate: u64,
    /// The bucket's capacity: requests admitted at once after a quiet spell (at least 1).
    pub burst: u64,
}

impl RateLimit {
    /// The microseconds one request costs: the bucket refills one token per interval.
    pub fn interval_us(self) -> u64 {
        1_000_000 / self.rate.max(1)
    }
}

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// Whether the request may proceed (it spent a token).
    pub allowed: bool,
    /// When refused: how long until a request would be admitted, in milliseconds (rounded up).
    pub retry_after_ms: Millis,
}

/// Admits or refuses one request of a tenant against its [`RateLimit`].
#[async_trait]
pub trait RateLimiter: Send + Sync + 'static {
    /// Spends one of `tenant`'s tokens if it has one at `now` (ms on the caller's clock);
    /// a refused request spends nothing.
    async fn admit(
        &self,
        tenant: &TenantId,
        limit: RateLimit,
        now: Millis,
    ) -> Result<Admission, EngineError>;
}

/// One GCRA step in microseconds: given the stored TAT (`None` or in the past: a full bucket),
/// answers the admission and, when admitted, the TAT to store.
pub fn gcra(tat_us: Option<u64>, now_us: u64, limit: RateLimit) -> (Admission, Option<u64>) {
    let interval = limit.interval_us();
    let tat = tat_us.unwrap_or(now_us).max(now_us);
    let new_tat = tat + interval;
    // A full bucket lets `burst` requests through at `now`: the TAT may run ahead of the clock
    // by at most `burst` intervals.
    let allow_at = new_tat.saturating_sub(interval.saturating_mul(limit.burst.max(1)));
    if now_us >= allow_at {
        (
            Admission {
                allowed: true,
                retry_after_ms: 0,
            },
            Some(new_tat),
        )
    } else {
        (
            Admission {
                allowed: false,
                retry_after_ms: (allow_at - now_us).div_ceil(1000),
            },
            None,
        )
    }
}

/// Above this many tenants, an admission first forgets the full buckets.
const PRUNE_AT: usize = 4096;

/// The in-process limiter: one TAT per tenant in memory. Right for a store one gateway owns
/// (the embedded engine); gateways sharing a store need a shared limiter.
#[derive(Debug, Default)]
pub struct LocalRateLimiter {
    tats: Mutex<HashMap<TenantId, u64>>,
}

impl LocalRateLimiter {
    /// An empty limiter: every tenant starts with a full bucket.
    pub fn new() -> Self {
        Self::default()
    }

    /// The synchronous step behind [`RateLimiter::admit`].
    pub fn admit_at(&self, tenant: &TenantId, limit: RateLimit, now: Millis) -> Admission {
        let now_us = now.saturating_mul(1000);
        // A TAT is a plain number: a panic elsewhere cannot leave one half-written.
        let mut tats = self.tats.lock().unwrap_or_else(PoisonError::into_inner);
        if tats.len() >= PRUNE_AT {
            // A TAT in the past is a full bucket, the same as no entry.
            tats.retain(|_, tat| *tat > now_us);
        }
        let (admission, new_tat) = gcra(tats.get(tenant).copied(), now_us, limit);
        if let Some(tat) = new_tat {
            tats.insert(tenant.clone(), tat);
        }
        admission
    }
}

#[async_trait]
impl RateLimiter for LocalRateLimiter {
    async fn admit(
        &self,
        tenant: &TenantId,
        limit: RateLimit,
        now: Millis,
    ) -> Result<Admission, EngineError> {
        Ok(self.admit_at(tenant, limit, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(id: &str) -> TenantId {
        TenantId::parse(id).unwrap()
    }

    fn allowed_at(limiter: &LocalRateLimiter, t: &TenantId, limit: RateLimit, now: Millis) -> u64 {
        let mut n = 0;
        while limiter.admit_at(t, limit, now).allowed {
            n += 1;
            assert!(n <= 10_000, "the bucket never ran dry");
        }
        n
    }

    #[test]
    fn a_full_bucket_admits_the_burst_at_once_then_the_rate() {
        let limiter = LocalRateLimiter::new();
        let t = tenant("acme");
        let limit = RateLimit { rate: 5, burst: 5 };
        let start = 1_700_000_000_000;
        assert_eq!(allowed_at(&limiter, &t, limit, start), 5);
        // One token per 200 ms, no more: 199 ms later still nothing, at 200 ms exactly one.
        assert!(!limiter.admit_at(&t, limit, start + 199).allowed);
        assert!(limiter.admit_at(&t, limit, start + 200).allowed);
        assert!(!limiter.admit_at(&t, limit, start + 200).allowed);
        // Over ten more seconds, one request every 10 ms: exactly rate × 10 admitted.
        let mut admitted = 0;
        for step in 1..=1000 {
            if limiter.admit_at(&t, limit, start + 200 + step * 10).allowed {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 50);
    }

    #[test]
    fn an_idle_bucket_refills_to_the_burst_and_no_further() {
        let limiter = LocalRateLimiter::new();
        let t = tenant("acme");
        let limit = RateLimit { rate: 10, burst: 3 };
        assert_eq!(allowed_at(&limiter, &t, limit, 1_000), 3);
        assert_eq!(allowed_at(&limiter, &t, limit, 61_000), 3);
    }

    #[test]
    fn retry_after_is_the_wait_for_the_next_token_rounded_up() {
        let limiter = LocalRateLimiter::new();
        let t = tenant("acme");
        let limit = RateLimit { rate: 5, burst: 5 };
        allowed_at(&limiter, &t, limit, 0);
        assert_eq!(limiter.admit_at(&t, limit, 0).retry_after_ms, 200);
        assert_eq!(limiter.admit_at(&t, limit, 150).retry_after_ms, 50);
        // A slow rate: one token every 3 s, 2.5 s to wait.
        let slow = RateLimit { rate: 1, burst: 1 };
        let u = tenant("slow");
        assert!(limiter.admit_at(&u, slow, 0).allowed);
        assert_eq!(limiter.admit_at(&u, slow, 1).retry_after_ms, 999);
        // A third of a millisecond still to wait is a whole millisecond.
        let odd = RateLimit { rate: 3, burst: 1 };
        let v = tenant("odd");
        assert!(limiter.admit_at(&v, odd, 0).allowed);
        assert_eq!(limiter.admit_at(&v, odd, 333).retry_after_ms, 1);
    }

    #[test]
    fn tenants_have_their_own_buckets_and_refusals_spend_nothing() {
        let limiter = LocalRateLimiter::new();
        let (a, b) = (tenant("a"), tenant("b"));
        let limit = RateLimit { rate: 1, burst: 2 };
        assert_eq!(allowed_at(&limiter, &a, limit, 0), 2);
        assert_eq!(allowed_at(&limiter, &b, limit, 0), 2);
        // Many refusals in the meantime do not push the next token further away.
        for now in 0..999 {
            assert!(!limiter.admit_at(&a, limit, now).allowed);
        }
        assert!(limiter.admit_at(&a, limit, 1_000).allowed);
    }
}
