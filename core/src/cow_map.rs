//! A map whose copies cost O(shards), not O(entries): [`CowMap`]; a vector whose copies cost
//! O(chunks): [`CowVec`].
//!
//! The scheduler's lookahead copies a client's block manager at about every arrival, and with
//! prefix caching that holds every cached block: tens of thousands of entries on an H100. A
//! [`CowMap`] splits its entries into shards by key (a [`CowVec`] into chunks by index); a copy
//! shares every shard (a reference count each), and whichever side writes a shared shard first
//! copies it (copy-on-write), so a copy costs its shard list, and each side what it writes
//! afterwards.
//!
//! A copy made again and again from the same map (the lookahead's, once per arrival) is cheaper
//! kept: a *mirror* ([`CowMap::mirror`]) is a copy whose writes, and its source's, are logged by
//! key (by index), so that [`CowMap::sync_from`] brings it up to date entry by entry. Each side
//! copies a shared shard once, the first time it writes it; after that the two write their own
//! shards, and dropping the copy frees none.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use crate::key::{BuildFingerprint, Key};

/// The shards of a map sized for n entries hold about this many each.
const ENTRIES_PER_SHARD: usize = 32;

type Shard<V> = HashMap<Key, V, BuildFingerprint>;

/// A map from [`Key`] with copy-on-write shards (see the module).
#[derive(Debug)]
pub struct CowMap<V> {
    shards: Vec<Arc<Shard<V>>>,
    mask: u64,
    /// Keys written since the last sync with a mirror (see the module); None: not logging, or
    /// the log outgrew a whole copy.
    log: Option<Vec<Key>>,
}

/// A copy shares every shard; it logs nothing (a log pairs one map with one mirror).
impl<V> Clone for CowMap<V> {
    fn clone(&self) -> Self {
        CowMap { shards: self.shards.clone(), mask: self.mask, log: None }
    }
}

impl<V: Clone> CowMap<V> {
    /// An empty map sized for about `capacity` entries (any number works).
    pub fn with_capacity(capacity: usize) -> Self {
        let mut num_shards = 1usize;
        while num_shards * ENTRIES_PER_SHARD < capacity {
            num_shards *= 2;
        }
        let empty = Arc::new(Shard::default());
        CowMap { shards: vec![empty; num_shards], mask: num_shards as u64 - 1, log: None }
    }

    /// A copy, both it and `self` logging their writes from now on, so that
    /// [`CowMap::sync_from`] can bring it up to date with `self` entry by entry.
    pub fn mirror(&mut self) -> Self {
        self.log = Some(Vec::new());
        CowMap { shards: self.shards.clone(), mask: self.mask, log: Some(Vec::new()) }
    }

    /// Makes this mirror of `source` (from [`CowMap::mirror`]) equal to it again by copying the
    /// entries either wrote since they were last equal; false, changing nothing, when a log is
    /// missing (either map outgrew it): a new mirror is needed.
    pub fn sync_from(&mut self, source: &mut Self) -> bool {
        let Some(mut keys) = merged_logs(&mut self.log, &mut source.log) else {
            return false;
        };
        for key in &keys {
            let i = self.shard_of(key);
            let shard = Arc::make_mut(&mut self.shards[i]);
            match source.get(key) {
                Some(value) => {
                    shard.insert(*key, value.clone());
                }
                None => {
                    shard.remove(key);
                }
            }
        }
        keys.clear();
        self.log = Some(keys); // its allocation kept for the next round
        true
    }

    #[inline]
    fn note(&mut self, key: Key) {
        note(&mut self.log, key, self.shards.len() * ENTRIES_PER_SHARD);
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
        self.note(key);
        let i = self.shard_of(&key);
        Arc::make_mut(&mut self.shards[i]).insert(key, value);
    }

    /// Sets `key`'s value to what `value` makes of its current one, if it makes one (`None`:
    /// unchanged), in one lookup; returns the value it had.
    #[inline]
    pub fn insert_with(&mut self, key: Key, value: impl FnOnce(Option<&V>) -> Option<V>) -> Option<V> {
        let limit = self.shards.len() * ENTRIES_PER_SHARD;
        let i = self.shard_of(&key);
        match Arc::make_mut(&mut self.shards[i]).entry(key) {
            Entry::Occupied(mut entry) => {
                let had = entry.get().clone();
                if let Some(new) = value(Some(&had)) {
                    entry.insert(new);
                    note(&mut self.log, key, limit);
                }
                Some(had)
            }
            Entry::Vacant(entry) => {
                if let Some(new) = value(None) {
                    entry.insert(new);
                    note(&mut self.log, key, limit);
                }
                None
            }
        }
    }

    /// Removes the entries `keep` says not to (shards holding none of them are not copied).
    pub fn retain(&mut self, mut keep: impl FnMut(&Key, &V) -> bool) {
        let limit = self.shards.len() * ENTRIES_PER_SHARD;
        for shard in &mut self.shards {
            if shard.iter().all(|(key, value)| keep(key, value)) {
                continue;
            }
            Arc::make_mut(shard).retain(|key, value| {
                let kept = keep(key, value);
                if !kept {
                    note(&mut self.log, *key, limit);
                }
                kept
            });
        }
    }

    /// Removes `key`, returning its value if it had one.
    #[inline]
    pub fn remove(&mut self, key: &Key) -> Option<V> {
        let i = self.shard_of(key);
        let removed = if let Some(shard) = Arc::get_mut(&mut self.shards[i]) {
            shard.remove(key)? // one lookup where the shard is this map's alone
        } else if self.shards[i].contains_key(key) {
            Arc::make_mut(&mut self.shards[i]).remove(key)?
        } else {
            return None; // a shared shard is not copied to remove nothing
        };
        self.note(*key);
        Some(removed)
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

/// The logs of a mirror and its source, merged into the first's allocation (the second's is
/// kept, emptied); None when either map is not logging (see the module).
fn merged_logs<T>(mine: &mut Option<Vec<T>>, theirs: &mut Option<Vec<T>>) -> Option<Vec<T>> {
    let (Some(mine), Some(theirs)) = (mine.as_mut(), theirs.as_mut()) else {
        return None;
    };
    let mut merged = std::mem::take(mine);
    merged.append(theirs);
    Some(merged)
}

/// Notes a write for the mirror; a log of `limit` writes (the collection's capacity) costs more
/// to replay than a new mirror, and is dropped.
#[inline]
fn note<T>(log: &mut Option<Vec<T>>, item: T, limit: usize) {
    if let Some(entries) = log {
        if entries.len() >= limit {
            *log = None;
        } else {
            entries.push(item);
        }
    }
}

/// Elements per chunk of a [`CowVec`].
const CHUNK: usize = 64;

/// A vector of chunks with copy-on-write chunks (see the module). It grows a chunk at a time;
/// an element never written is `T::default()`.
#[derive(Debug)]
pub struct CowVec<T> {
    chunks: Vec<Arc<[T; CHUNK]>>,
    /// Indices written since the last sync with a mirror (as [`CowMap`]'s keys).
    log: Option<Vec<u32>>,
}

/// A copy shares every chunk; it logs nothing (a log pairs one vector with one mirror).
impl<T> Clone for CowVec<T> {
    fn clone(&self) -> Self {
        CowVec { chunks: self.chunks.clone(), log: None }
    }
}

impl<T: Clone + Default> CowVec<T> {
    /// An empty vector.
    pub fn new() -> Self {
        CowVec { chunks: Vec::new(), log: None }
    }

    /// Elements (a whole number of chunks).
    #[inline]
    pub fn len(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// Whether the vector holds nothing.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Adds a chunk of default elements.
    pub fn grow(&mut self) {
        self.chunks.push(Arc::new(std::array::from_fn(|_| T::default())));
    }

    /// The element at `index` (below [`CowVec::len`]).
    #[inline]
    pub fn get(&self, index: u32) -> &T {
        &self.chunks[index as usize / CHUNK][index as usize % CHUNK]
    }

    /// The element at `index`, to write (its chunk copied first if a copy shares it).
    #[inline]
    pub fn get_mut(&mut self, index: u32) -> &mut T {
        let limit = self.len().max(CHUNK);
        note(&mut self.log, index, limit);
        &mut Arc::make_mut(&mut self.chunks[index as usize / CHUNK])[index as usize % CHUNK]
    }

    /// A copy, both it and `self` logging their writes from now on (see [`CowMap::mirror`]).
    pub fn mirror(&mut self) -> Self {
        self.log = Some(Vec::new());
        CowVec { chunks: self.chunks.clone(), log: Some(Vec::new()) }
    }

    /// Makes this mirror of `source` equal to it again (see [`CowMap::sync_from`]): its length,
    /// and the elements either wrote since they were last equal.
    pub fn sync_from(&mut self, source: &mut Self) -> bool {
        let Some(mut indices) = merged_logs(&mut self.log, &mut source.log) else {
            return false;
        };
        self.chunks.truncate(source.chunks.len());
        let grown = self.chunks.len();
        self.chunks.extend_from_slice(&source.chunks[grown..]);
        for &index in &indices {
            let (chunk, at) = (index as usize / CHUNK, index as usize % CHUNK);
            if chunk < grown && !Arc::ptr_eq(&self.chunks[chunk], &source.chunks[chunk]) {
                Arc::make_mut(&mut self.chunks[chunk])[at] = source.chunks[chunk][at].clone();
            }
        }
        indices.clear();
        self.log = Some(indices);
        true
    }
}

impl<T: Clone + Default> Default for CowVec<T> {
    fn default() -> Self {
        Self::new()
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

    fn entries(map: &CowMap<i64>) -> Vec<(i64, i64)> {
        let mut entries: Vec<(i64, i64)> = map.iter().map(|(key, value)| match key {
            Key::Id(id) => (*id, *value),
            Key::Hash(_) => unreachable!("ids only"),
        }).collect();
        entries.sort();
        entries
    }

    #[test]
    fn a_mirror_synced_after_writes_on_both_sides_equals_its_source() {
        let mut source: CowMap<i64> = CowMap::with_capacity(256);
        for i in 0..200 {
            source.insert(Key::Id(i), i);
        }
        let mut mirror = source.mirror();
        let mut state = 7u64;
        for round in 0..50 {
            for _ in 0..20 {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let (key, side) = (Key::Id((state >> 40) as i64 % 300), (state >> 20) % 4);
                match side {
                    0 => source.insert(key, round),
                    1 => { source.remove(&key); }
                    2 => mirror.insert(key, -round),
                    _ => { mirror.remove(&key); }
                }
            }
            assert!(mirror.sync_from(&mut source));
            assert_eq!(entries(&mirror), entries(&source));
        }
    }

    #[test]
    fn a_log_longer_than_the_map_is_dropped_and_the_sync_refused() {
        let mut source: CowMap<i64> = CowMap::with_capacity(ENTRIES_PER_SHARD);
        let mut mirror = source.mirror();
        for i in 0..=ENTRIES_PER_SHARD as i64 {
            source.insert(Key::Id(i % 3), i);
        }
        assert!(!mirror.sync_from(&mut source));
        assert_eq!(entries(&mirror), vec![]); // unchanged
        assert!(!source.clone().mirror().sync_from(&mut source.clone())); // a plain copy logs nothing
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
