//! A map that keeps its newest entries, keyed by values hashed once: the step timings the hub
//! caches per session ([`crate::timing::TimingCache`]) and those the roofline backend caches per
//! model ([`crate::roofline::cache::StepCache`]).
//!
//! A key is hashed when it is made ([`Hashed`]) and shared ([`Arc`]) by the map and the order in
//! which keys were stored, so that looking it up, storing it and dropping it when it is the oldest
//! hash nothing again, and the oldest is found in the map by its pointer rather than compared
//! value by value. Keys of predicted batches are made once by the forecast and stored as they are.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use rustc_hash::FxBuildHasher;

/// A key with its hash, computed once.
#[derive(Clone, Debug)]
pub struct Hashed<K> {
    hash: u64,
    key: K,
}

impl<K: Hash> Hashed<K> {
    pub fn new(key: K) -> Self {
        Hashed { hash: FxBuildHasher.hash_one(&key), key }
    }
}

impl<K> Hashed<K> {
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: PartialEq> PartialEq for Hashed<K> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.key == other.key
    }
}

impl<K: Eq> Eq for Hashed<K> {}

impl<K> Hash for Hashed<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// Values by key, at most `max_entries` of them (given at each store): past that, the key stored
/// first goes.
#[derive(Debug)]
pub struct BoundedCache<K, V> {
    map: HashMap<Arc<Hashed<K>>, V, FxBuildHasher>,
    /// Keys in the order they were stored.
    order: VecDeque<Arc<Hashed<K>>>,
}

impl<K, V> Default for BoundedCache<K, V> {
    fn default() -> Self {
        BoundedCache { map: HashMap::default(), order: VecDeque::new() }
    }
}

impl<K: Eq, V> BoundedCache<K, V> {
    pub fn get(&self, key: &Hashed<K>) -> Option<&V> {
        self.map.get(key)
    }

    pub fn contains(&self, key: &Hashed<K>) -> bool {
        self.map.contains_key(key)
    }

    /// Stores `value` under `key` (a key stored already keeps its place), dropping the oldest
    /// past `max_entries`.
    pub fn store(&mut self, key: Arc<Hashed<K>>, value: V, max_entries: usize) {
        if let Some(old) = self.map.get_mut(&key) {
            *old = value;
            return;
        }
        self.map.insert(key.clone(), value);
        self.order.push_back(key);
        if self.map.len() > max_entries {
            if let Some(oldest) = self.order.pop_front() {
                self.map.remove(&oldest); // found by its pointer: the map holds this very key
            }
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The keys, oldest first.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.order.iter().map(|key| key.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(key: Vec<i64>) -> Arc<Hashed<Vec<i64>>> {
        Arc::new(Hashed::new(key))
    }

    #[test]
    fn equal_keys_made_apart_find_each_other() {
        let mut cache = BoundedCache::default();
        cache.store(shared(vec![1, 2]), "a", 4);
        assert_eq!(cache.get(&Hashed::new(vec![1, 2])), Some(&"a"));
        assert!(!cache.contains(&Hashed::new(vec![2, 1])));
    }

    #[test]
    fn the_oldest_stored_goes_first_and_a_key_stored_again_keeps_its_place() {
        let mut cache = BoundedCache::default();
        for (i, key) in [vec![1], vec![2], vec![1], vec![3]].into_iter().enumerate() {
            cache.store(shared(key), i, 2);
        }
        assert_eq!(cache.keys().cloned().collect::<Vec<_>>(), vec![vec![2], vec![3]]);
        assert_eq!(cache.get(&Hashed::new(vec![2])), Some(&1));
        assert_eq!(cache.len(), 2);
    }
}
