//! A map whose copies cost O(shards), not O(entries): [`CowMap`].
//!
//! The scheduler's lookahead copies a client's block manager at about every arrival, and with
//! prefix caching that holds every cached block: tens of thousands of entries on an H100. A
//! [`CowMap`] splits its entries into shards by key; a copy shares every shard (a reference
//! count each), and whichever side writes a shared shard first copies it (copy-on-write), so a
//! copy costs its shard list, and each side what it writes afterwards.

use std::collections::HashMap;
use std::sync::Arc;

use crate::key::{BuildFingerprint, Key};

/// The shards of a map sized for n entries hold about this many each.
const ENTRIES_PER_SHARD: usize = 32;

type Shard<V> = HashMap<Key, V, BuildFingerprint>;

/// A map from [`Key`] with copy-on-write shards (see the module).
#[derive(Clone, Debug)]
pub struct CowMap<V> {
    shards: Vec<Arc<Shard<V>>>,
    mask: u64,
}

impl<V: Clone> CowMap<V> {
    /// An empty map sized for about `capacity` entries (any number works).
    pub fn with_capacity(capacity: usize) -> Self {
        let mut num_shards = 1usize;
        while num_shards * ENTRIES_PER_SHARD < capacity {
            num_shards *= 2;
        }
        let empty = Arc::new(Shard::default());
        CowMap { shards: vec![empty; num_shards], mask: num_shards as u64 - 1 }
    }

    #[inline]
    fn shard_of(&self, key: &Key) -> usize {
        // bits the shard maps do not index by (they take the low ones)
        ((key.fingerprint() >> 32) & self.mask) as usize
    }

    /// The value of `key`, if any.
    #[inline]
    pub fn get(&self, key: &Key) -> Option<&V> {
        self.shards[self.shard_of(key)].get(key)
    }

    /// Whether `key` has a value.
    #[inline]
    pub fn contains(&self, key: &Key) -> bool {
        self.shards[self.shard_of(key)].contains_key(key)
    }

    /// Sets `key`'s value (its shard copied first if a copy shares it).
    #[inline]
    pub fn insert(&mut self, key: Key, value: V) {
        let i = self.shard_of(&key);
        Arc::make_mut(&mut self.shards[i]).insert(key, value);
    }

    /// Removes `key`, returning its value if it had one.
    #[inline]
    pub fn remove(&mut self, key: &Key) -> Option<V> {
        let i = self.shard_of(key);
        if !self.shards[i].contains_key(key) {
            return None; // a shared shard is not copied to remove nothing
        }
        Arc::make_mut(&mut self.shards[i]).remove(key)
    }

    /// Entries, in O(shards) (for checks, not the hot path).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.len()).sum()
    }

    /// Whether the map holds nothing.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|shard| shard.is_empty())
    }

    /// Every (key, value), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &V)> {
        self.shards.iter().flat_map(|shard| shard.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_independent_both_ways() {
        let mut original: CowMap<i64> = CowMap::with_capacity(1000);
        for i in 0..1000 {
            original.insert(Key::Id(i), i);
        }
        let mut copy = original.clone();
        copy.insert(Key::Id(1), -1);
        copy.remove(&Key::Id(2));
        original.insert(Key::Id(3), -3);
        original.remove(&Key::Id(4));
        assert_eq!((original.get(&Key::Id(1)), copy.get(&Key::Id(1))), (Some(&1), Some(&-1)));
        assert_eq!((original.get(&Key::Id(2)), copy.get(&Key::Id(2))), (Some(&2), None));
        assert_eq!((original.get(&Key::Id(3)), copy.get(&Key::Id(3))), (Some(&-3), Some(&3)));
        assert_eq!((original.contains(&Key::Id(4)), copy.contains(&Key::Id(4))), (false, true));
        assert_eq!((original.len(), copy.len()), (999, 999));
    }

    #[test]
    fn hash_and_id_keys_are_distinct() {
        let mut map: CowMap<i64> = CowMap::with_capacity(0);
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&7u64.to_le_bytes());
        map.insert(Key::Id(7), 1);
        map.insert(Key::Hash(bytes), 2);
        assert_eq!((map.get(&Key::Id(7)), map.get(&Key::Hash(bytes)), map.len()), (Some(&1), Some(&2), 2));
    }
}
