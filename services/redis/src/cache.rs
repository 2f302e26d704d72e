//! A small in-process cache whose entries expire after a fixed time: queue configurations and
//! known tenants, so the hot paths (send, receive, delete, every authenticated request's
//! `ensure_tenant`) cost no extra Redis round trip. Staleness is bounded by the TTL and is
//! harmless because every queue script re-checks that its queue exists.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub(crate) struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<Entries<K, V>>,
}

struct Entries<K, V> {
    map: HashMap<K, (Instant, V)>,
    /// An insert that finds this many entries first drops the expired ones, then sets the
    /// next threshold to twice what is left: pruning stays amortised O(1) per insert however
    /// many live entries there are (a sampler walking 100,000 queues keeps them all live).
    prune_at: usize,
}

/// The first threshold, and the lowest.
const PRUNE_AT: usize = 4096;

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(Entries {
                map: HashMap::new(),
                prune_at: PRUNE_AT,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Entries<K, V>> {
        // Entries are plain values: a panic elsewhere cannot leave one half-written.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let entries = self.lock();
        let (at, value) = entries.map.get(key)?;
        (at.elapsed() < self.ttl).then(|| value.clone())
    }

    pub(crate) fn insert(&self, key: K, value: V) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.lock();
        let now = Instant::now();
        if entries.map.len() >= entries.prune_at {
            let ttl = self.ttl;
            entries
                .map
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
            entries.prune_at = (entries.map.len() * 2).max(PRUNE_AT);
        }
        entries.map.insert(key, (now, value));
    }

    pub(crate) fn remove(&self, key: &K) {
        self.lock().map.remove(key);
    }

    pub(crate) fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        self.lock().map.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_zero_ttl_disables() {
        let cache = TtlCache::new(Duration::from_millis(30));
        cache.insert("a", 1);
        assert_eq!(cache.get(&"a"), Some(1));
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(cache.get(&"a"), None);
        cache.insert("b", 2);
        cache.retain(|k| *k != "b");
        assert_eq!(cache.get(&"b"), None);
        // Many live entries: inserts stay cheap and none is lost to pruning.
        let many = TtlCache::new(Duration::from_secs(60));
        for i in 0..20_000 {
            many.insert(i, i);
        }
        assert!((0..20_000).all(|i| many.get(&i) == Some(i)));
        assert!(many.lock().prune_at > 20_000);
        let off = TtlCache::new(Duration::ZERO);
        off.insert("a", 1);
        assert_eq!(off.get(&"a"), None);
    }
}
