//! [`RedisOptions`]: how a [`RedisEngine`](crate::RedisEngine) talks to Redis and what it waits
//! for before it answers.

use std::time::Duration;

/// How to connect and what to wait for. `RedisOptions::default()` suits one gateway on one
/// Redis; see the crate documentation for which Redis settings give which guarantee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOptions {
    /// Every key starts with this (inside its hash tag). Several Sluice deployments, or test
    /// cases, can share one Redis under different prefixes. No `{`, `}` or whitespace.
    pub key_prefix: String,
    /// After every durable write (send, delete, purge, queue and tenant changes, expiry), run
    /// `WAIT n timeout` on the same connection and fail with
    /// [`EngineError::Unavailable`](sluice_engine::EngineError::Unavailable) unless at least
    /// `n` replicas acknowledged it. `None`: answer once the master applied it.
    pub wait_replicas: Option<(usize, Duration)>,
    /// Bound on every call to Redis (including a reconnect it has to wait for); past it the
    /// call fails with `Unavailable`. `WAIT`'s own timeout is added for durable writes.
    pub command_timeout: Duration,
    /// Connect even if `maxmemory-policy` is not `noeviction` (only logs a warning). Eviction
    /// silently deletes messages, so this is for experiments only.
    pub allow_eviction: bool,
    /// How long a queue's configuration (and a tenant's existence) may be served from this
    /// process's memory. The send and receive paths ask for the configuration before every
    /// call; caching it keeps them at one Redis round trip. Every script re-checks that the
    /// queue exists, so a stale entry can only apply an old default (visibility timeout,
    /// delay, wait) for at most this long after another gateway changed it. Changes made
    /// through this engine update its cache at once. Zero disables the cache.
    pub cache_ttl: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            key_prefix: "sluice".to_owned(),
            wait_replicas: None,
            command_timeout: Duration::from_secs(5),
            allow_eviction: false,
            cache_ttl: Duration::from_secs(1),
        }
    }
}
