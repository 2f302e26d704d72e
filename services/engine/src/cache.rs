//! A small in-process cache whose entries expire after a fixed time, for what hot paths would
//! otherwise read from the store on every request: the Redis engine's queue configurations and
//! known tenants (send, receive, delete and every authenticated request's `ensure_tenant` cost
//! no extra round trip), and the services' AWS identities (an access key with its tenant's
//! quotas and account id, read once per TTL instead of three times per AWS request). Each user
//! says why serving a value up to the TTL old is acceptable for it.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Entries expire `ttl` after their insert; a zero TTL caches nothing.
pub struct TtlCache<K, V> {
    ttl: Duration,
    /// The most entries held: an insert that finds this many live ones is dropped, so keys an
    /// outsider chooses cannot grow the map without bound.
    max_entries: usize,
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
    /// A cache bounded only by how many distinct keys are inserted within one TTL.
    pub fn new(ttl: Duration) -> Self {
        Self::bounded(ttl, usize::MAX)
    }

    /// A cache holding at most `max_entries` entries.
    pub fn bounded(ttl: Duration, max_entries: usize) -> Self {
        Self {
            ttl,
            max_entries,
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

    /// The value inserted under `key` less than the TTL ago.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let entries = self.lock();
        let (at, value) = entries.map.get(key)?;
        (at.elapsed() < self.ttl).then(|| value.clone())
    }

    /// Stores `value` under `key` for the TTL (unless the cache is full of live entries).
    pub fn insert(&self, key: K, value: V) {
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
        if entries.map.len() >= self.max_entries && !entries.map.contains_key(&key) {
            let ttl = self.ttl;
            entries
                .map
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
            if entries.map.len() >= self.max_entries {
                return;
            }
        }
        entries.map.insert(key, (now, value));
    }

    /// Forgets `key` at once.
    pub fn remove<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.lock().map.remove(key);
    }

    /// Keeps only the entries whose key passes `keep`.
    pub fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        self.lock().map.retain(|k, _| keep(k));
    }

    /// Forgets every entry at once.
    pub fn clear(&self) {
        self.lock().map.clear();
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

    #[test]
    fn a_bounded_cache_drops_inserts_while_full_of_live_entries() {
        let cache = TtlCache::bounded(Duration::from_millis(30), 2);
        cache.insert("a".to_owned(), 1);
        cache.insert("b".to_owned(), 2);
        cache.insert("c".to_owned(), 3);
        assert_eq!(cache.get("c"), None);
        // A key already held is refreshed, not refused.
        cache.insert("a".to_owned(), 10);
        assert_eq!(cache.get("a"), Some(10));
        // Once entries expire, new keys fit again.
        std::thread::sleep(Duration::from_millis(40));
        cache.insert("c".to_owned(), 3);
        assert_eq!(cache.get("c"), Some(3));
        cache.remove("c");
        assert_eq!(cache.get("c"), None);
    }
}
