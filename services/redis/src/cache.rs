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
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

/// Above this many entries, an insert first drops the expired ones.
const PRUNE_AT: usize = 4096;

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, (Instant, V)>> {
        // Entries are plain values: a panic elsewhere cannot leave one half-written.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let entries = self.lock();
        let (at, value) = entries.get(key)?;
        (at.elapsed() < self.ttl).then(|| value.clone())
    }

    pub(crate) fn insert(&self, key: K, value: V) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.lock();
        if entries.len() >= PRUNE_AT {
            let ttl = self.ttl;
            entries.retain(|_, (at, _)| at.elapsed() < ttl);
        }
        entries.insert(key, (Instant::now(), value));
    }

    pub(crate) fn remove(&self, key: &K) {
        self.lock().remove(key);
    }

    pub(crate) fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        self.lock().retain(|k, _| keep(k));
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
        let off = TtlCache::new(Duration::ZERO);
        off.insert("a", 1);
        assert_eq!(off.get(&"a"), None);
    }
}
