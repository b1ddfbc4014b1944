//! The block pool's entries, and vLLM's free block queue through them: [`FreeQueue`].
//!
//! A block pool with prefix caching keeps its free blocks in eviction order: cached blocks (one
//! entry each) and runs of blocks holding nothing cached (one entry and a count). Blocks are
//! taken from the head, freed to the tail, and a cached block found again is taken out of the
//! middle. As vLLM's `FreeKVCacheBlockQueue`, the queue is a doubly linked list through the
//! entries themselves, which also hold a cached block's holder count (vLLM's `ref_cnt`). The
//! entries live in a slab, a [`CowVec`] (cheap to copy), and link by slot: every operation is
//! O(1) and touches only the entries it changes, never a map (the pool maps a block's key to its
//! slot, and leaves an evicted block's key mapped to a slot that no longer holds it: see
//! [`FreeQueue::holds`]).

use crate::cow_vec::CowVec;
use crate::key::Key;

/// Where an entry lives in the slab.
pub type Slot = u32;

/// No slot: the end of a list.
const NIL: Slot = Slot::MAX;

/// What a slot holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    /// Nothing: free for a new entry.
    #[default]
    Spare,
    /// A cached block.
    Cached,
    /// A run of free uncached blocks.
    Run,
}

/// A cached block, or a run of free uncached blocks: one cache line (its 57 bytes aligned, so
/// that reading one never touches two).
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Entry {
    key: Key,
    /// A cached block's holders (queued: none), or a run's blocks.
    count: i64,
    kind: Kind,
    /// Neighbours while queued, head side first. The head's `before` is stale (never read: the
    /// head is known by [`FreeQueue::head`]), so that taking from the head writes no other entry.
    /// A spare slot's `after` is the next spare one.
    before: Slot,
    after: Slot,
}

impl Default for Entry {
    fn default() -> Self {
        Entry { key: Key::Id(0), count: 0, kind: Kind::Spare, before: NIL, after: NIL }
    }
}

/// The pool's entries, the free ones queued in eviction order, head first (see the module).
#[derive(Clone, Debug, Default)]
pub struct FreeQueue {
    entries: CowVec<Entry>,
    head: Slot,
    tail: Slot,
    /// Slots freed for reuse, linked by `after`; then those from `unused` on were never used.
    spare: Slot,
    unused: Slot,
    /// Entries in the queue.
    queued: usize,
}

impl FreeQueue {
    /// An empty queue with no entries.
    pub fn new() -> Self {
        FreeQueue { entries: CowVec::new(), head: NIL, tail: NIL, spare: NIL, unused: 0, queued: 0 }
    }

    /// A copy that [`FreeQueue::sync_from`] can bring up to date (see [`CowVec::mirror`]).
    pub fn mirror(&mut self) -> Self {
        FreeQueue { entries: self.entries.mirror(), ..*self }
    }

    /// Makes this mirror of `source` equal to it again; false when a new mirror is needed (see
    /// [`CowVec::sync_from`]).
    pub fn sync_from(&mut self, source: &mut Self) -> bool {
        if !self.entries.sync_from(&mut source.entries) {
            return false;
        }
        (self.head, self.tail, self.spare, self.unused, self.queued) =
            (source.head, source.tail, source.spare, source.unused, source.queued);
        true
    }

    /// Entries in the queue (cached blocks and runs).
    pub fn len(&self) -> usize {
        self.queued
    }

    /// Whether the queue holds nothing.
    pub fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Starts loading the entry at `slot` ([`CowVec::prefetch`]).
    #[inline]
    pub fn prefetch(&self, slot: Slot) {
        if (slot as usize) < self.entries.len() {
            self.entries.prefetch(slot);
        }
    }

    /// The key of the entry at `slot`.
    #[inline]
    pub fn key(&self, slot: Slot) -> Key {
        self.entries.get(slot).key
    }

    /// Whether the entry at `slot` is cached block `key` (a slot an evicted block's key still
    /// maps to is spare, or another entry's).
    #[inline]
    pub fn holds(&self, slot: Slot, key: &Key) -> bool {
        let entry = self.entries.get(slot);
        entry.kind == Kind::Cached && entry.key == *key
    }

    /// The holders of the cached block at `slot`.
    #[inline]
    pub fn count(&self, slot: Slot) -> i64 {
        self.entries.get(slot).count
    }

    /// Sets the holders of the cached block at `slot`.
    #[inline]
    pub fn set_count(&mut self, slot: Slot, count: i64) {
        self.entries.get_mut(slot).count = count;
    }

    /// A new entry, not queued: cached block `key`, held by `count` sequences.
    pub fn add(&mut self, key: Key, count: i64) -> Slot {
        let slot = if self.spare != NIL {
            let slot = self.spare;
            self.spare = self.entries.get(slot).after;
            slot
        } else {
            if self.unused as usize == self.entries.len() {
                self.entries.grow();
            }
            self.unused += 1;
            self.unused - 1
        };
        *self.entries.get_mut(slot) = Entry { key, count, kind: Kind::Cached, ..Entry::default() };
        slot
    }

    /// Frees the slot of an entry not queued.
    pub fn remove(&mut self, slot: Slot) {
        let entry = self.entries.get_mut(slot);
        (entry.kind, entry.after) = (Kind::Spare, self.spare);
        self.spare = slot;
    }

    /// The queued slots, head to tail.
    pub fn slots(&self) -> Vec<Slot> {
        let mut slots = Vec::with_capacity(self.queued);
        let mut slot = self.head;
        while slot != NIL && slots.len() <= self.queued {
            slots.push(slot);
            slot = self.entries.get(slot).after;
        }
        slots
    }

    /// (key, blocks) from head to tail.
    pub fn items(&self) -> Vec<(Key, i64)> {
        self.slots().into_iter().map(|slot| (self.key(slot), self.blocks_of(slot))).collect()
    }

    fn blocks_of(&self, slot: Slot) -> i64 {
        let entry = self.entries.get(slot);
        if entry.kind == Kind::Run {
            entry.count
        } else {
            1
        }
    }

    /// Takes `num_blocks` blocks from the head (there must be as many), handing `evict` the key
    /// of each cached block taken; a run it takes only part of keeps the rest. The entries it
    /// empties are removed.
    pub fn take(&mut self, mut num_blocks: i64, mut evict: impl FnMut(&Key)) {
        while num_blocks > 0 {
            let slot = self.head;
            assert!(slot != NIL, "took more blocks than the free queue holds");
            let Entry { key, count, kind, after, .. } = *self.entries.get(slot);
            let blocks = if kind == Kind::Run { count } else { 1 };
            if blocks > num_blocks {
                self.entries.get_mut(slot).count = blocks - num_blocks;
                return;
            }
            self.head = after;
            if after == NIL {
                self.tail = NIL;
            }
            self.queued -= 1;
            if kind == Kind::Cached {
                evict(&key);
            }
            self.remove(slot);
            num_blocks -= blocks;
        }
    }

    /// Adds a run of `blocks` uncached blocks at the tail, as entry `key`.
    pub fn append_run(&mut self, key: Key, blocks: i64) {
        let slot = self.add(key, blocks);
        self.entries.get_mut(slot).kind = Kind::Run;
        self.push(slot);
    }

    /// Queues the entry at `slot` (not queued) at the tail.
    pub fn push(&mut self, slot: Slot) {
        let entry = self.entries.get_mut(slot);
        (entry.before, entry.after) = (self.tail, NIL);
        if self.tail == NIL {
            self.head = slot;
        } else {
            self.entries.get_mut(self.tail).after = slot;
        }
        self.tail = slot;
        self.queued += 1;
    }

    /// The last entry if it is a run (its blocks can grow).
    pub fn tail_run(&self) -> Option<Slot> {
        (self.tail != NIL && self.entries.get(self.tail).kind == Kind::Run).then_some(self.tail)
    }

    /// Adds `blocks` to the run at `slot`.
    pub fn grow_run(&mut self, slot: Slot, blocks: i64) {
        self.entries.get_mut(slot).count += blocks;
    }

    /// Takes the entry at `slot` out of the queue, wherever it is (it stays an entry).
    pub fn unlink(&mut self, slot: Slot) {
        let Entry { before, after, .. } = *self.entries.get(slot);
        self.queued -= 1;
        if self.head == slot {
            self.head = after;
            if after == NIL {
                self.tail = NIL;
            }
            return;
        }
        self.entries.get_mut(before).after = after;
        if after == NIL {
            self.tail = before;
        } else {
            self.entries.get_mut(after).before = before;
        }
    }

    /// Checks the links: head to tail and back visit every queued entry once, runs hold blocks.
    pub fn check(&self) -> Result<(), String> {
        let forward = self.slots();
        if forward.len() != self.queued {
            return Err(format!("{} entries linked from the head, {} queued", forward.len(), self.queued));
        }
        if forward.last().copied().unwrap_or(NIL) != self.tail {
            return Err("the tail is not the last entry".into());
        }
        for pair in forward.windows(2) {
            if self.entries.get(pair[1]).before != pair[0] {
                return Err(format!("{:?} does not link back to {:?}", self.key(pair[1]), self.key(pair[0])));
            }
        }
        if let Some(slot) = forward.iter().find(|slot| match self.entries.get(**slot).kind {
            Kind::Run => self.count(**slot) <= 0,
            Kind::Cached => self.count(**slot) != 0,
            Kind::Spare => true,
        }) {
            return Err(format!("{:?} is queued holding {}", self.entries.get(*slot), self.count(*slot)));
        }
        Ok(())
    }

    /// (key, slot) of every cached block (queued or not), in slot order, in O(entries).
    pub fn cached(&self) -> impl Iterator<Item = (&Key, Slot)> {
        (0..self.unused)
            .map(|slot| (self.entries.get(slot), slot))
            .filter(|(entry, _)| entry.kind == Kind::Cached)
            .map(|(entry, slot)| (&entry.key, slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, VecDeque};

    #[test]
    fn an_entry_is_one_cache_line() {
        assert_eq!((std::mem::size_of::<Entry>(), std::mem::align_of::<Entry>()), (64, 64));
    }

    fn hash(i: u8) -> Key {
        let mut bytes = [0u8; 32];
        bytes[0] = i;
        bytes[31] = i;
        Key::Hash(bytes)
    }

    /// Queues cached blocks `keys` at the tail, as the pool frees them: their slots by key.
    fn extend(queue: &mut FreeQueue, slots: &mut HashMap<Key, Slot>, keys: &[Key]) {
        for key in keys {
            let slot = queue.add(*key, 0);
            queue.push(slot);
            slots.insert(*key, slot);
        }
    }

    /// Takes `num_blocks`, forgetting the slots of the cached blocks evicted: their keys.
    fn take(queue: &mut FreeQueue, slots: &mut HashMap<Key, Slot>, num_blocks: i64) -> Vec<Key> {
        let mut evicted = Vec::new();
        queue.take(num_blocks, |key| evicted.push(*key));
        for key in &evicted {
            slots.remove(key);
        }
        evicted
    }

    /// The same operations on a plain deque of (entry, blocks), the queue's meaning.
    #[derive(Clone, Default)]
    struct Model(VecDeque<(Key, i64)>);

    impl Model {
        /// The cached blocks evicted.
        fn take(&mut self, mut num_blocks: i64) -> Vec<Key> {
            let mut taken = Vec::new();
            while num_blocks > 0 {
                let (key, count) = self.0[0];
                if count > num_blocks {
                    self.0[0].1 -= num_blocks;
                    break;
                }
                self.0.pop_front();
                if let Key::Hash(_) = key {
                    taken.push(key);
                }
                num_blocks -= count;
            }
            taken
        }
    }

    #[test]
    fn takes_from_the_head_and_splits_runs() {
        let (mut queue, mut slots) = (FreeQueue::new(), HashMap::new());
        queue.append_run(Key::Id(0), 3);
        extend(&mut queue, &mut slots, &[hash(1), hash(2)]);
        assert_eq!(take(&mut queue, &mut slots, 2), vec![]); // two of the run's three blocks
        assert_eq!(queue.items(), vec![(Key::Id(0), 1), (hash(1), 1), (hash(2), 1)]);
        assert_eq!(take(&mut queue, &mut slots, 2), vec![hash(1)]); // the run's last block too
        assert_eq!(queue.tail_run(), None);
        queue.append_run(Key::Id(5), 4);
        queue.grow_run(queue.tail_run().unwrap(), 2);
        assert_eq!(queue.items(), vec![(hash(2), 1), (Key::Id(5), 6)]);
        queue.check().unwrap();
    }

    #[test]
    fn removing_from_anywhere_keeps_the_links_and_slots_are_reused() {
        let (mut queue, mut slots) = (FreeQueue::new(), HashMap::new());
        extend(&mut queue, &mut slots, &(0..6).map(hash).collect::<Vec<_>>());
        for i in [3, 0, 5] {
            // middle, head, tail
            queue.unlink(slots[&hash(i)]);
        }
        assert_eq!(queue.items(), vec![(hash(1), 1), (hash(2), 1), (hash(4), 1)]);
        queue.check().unwrap();
        for i in [1, 2, 4] {
            queue.unlink(slots[&hash(i)]);
        }
        assert!(queue.is_empty());
        assert_eq!(queue.len(), 0);
        queue.remove(slots[&hash(2)]);
        let slot = queue.add(hash(9), 0);
        assert_eq!(slot, slots[&hash(2)]); // the slot freed last
        queue.push(slot);
        assert_eq!(queue.items(), vec![(hash(9), 1)]);
        queue.check().unwrap();
    }

    #[test]
    fn random_operations_match_a_deque_and_copies_and_mirrors_stay_independent() {
        let mut state = 12345u64;
        let mut next = move |bound: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % bound
        };
        let mut pairs = vec![(FreeQueue::new(), HashMap::new(), Model::default())];
        let mut fresh = 0u8;
        let mut run_id = 1000i64;
        for _ in 0..3000 {
            let i = next(pairs.len() as u64) as usize;
            let (queue, slots, model) = &mut pairs[i];
            match next(6) {
                0 => {
                    let total: i64 = model.0.iter().map(|(_, count)| count).sum();
                    let n = next(total as u64 + 1) as i64;
                    assert_eq!(take(queue, slots, n), model.take(n));
                }
                1 => {
                    let keys: Vec<Key> = (0..next(3))
                        .map(|_| {
                            fresh = fresh.wrapping_add(1);
                            hash(fresh)
                        })
                        .filter(|key| !slots.contains_key(key))
                        .collect();
                    extend(queue, slots, &keys);
                    model.0.extend(keys.iter().map(|key| (*key, 1)));
                }
                2 => {
                    let blocks = next(5) as i64 + 1;
                    match queue.tail_run() {
                        Some(tail) => {
                            queue.grow_run(tail, blocks);
                            model.0.back_mut().unwrap().1 += blocks;
                        }
                        None => {
                            run_id += 1;
                            queue.append_run(Key::Id(run_id), blocks);
                            model.0.push_back((Key::Id(run_id), blocks));
                        }
                    }
                }
                3 => {
                    let cached: Vec<Key> =
                        model.0.iter().filter(|(key, _)| matches!(key, Key::Hash(_))).map(|(key, _)| *key).collect();
                    if !cached.is_empty() {
                        let key = cached[next(cached.len() as u64) as usize];
                        let slot = slots.remove(&key).unwrap();
                        queue.unlink(slot);
                        queue.remove(slot);
                        model.0.retain(|(k, _)| *k != key);
                    }
                }
                4 if pairs.len() > 1 => {
                    // a mirror of another queue, written on both sides, brought up to date
                    let j = (i + 1) % pairs.len();
                    let mut source = pairs[j].0.clone();
                    let mut mirror = source.mirror();
                    take(&mut mirror, &mut HashMap::new(), 1.min(pairs[j].2 .0.iter().map(|(_, c)| c).sum()));
                    mirror.append_run(Key::Id(-1), 2);
                    assert!(mirror.sync_from(&mut source));
                    assert_eq!(mirror.items(), pairs[j].2 .0.iter().copied().collect::<Vec<_>>());
                    mirror.check().unwrap();
                    let (slots, model) = (pairs[j].1.clone(), pairs[j].2.clone());
                    pairs[i] = (mirror, slots, model);
                }
                _ => {
                    if pairs.len() < 6 {
                        let copy = (pairs[i].0.clone(), pairs[i].1.clone(), pairs[i].2.clone());
                        pairs.push(copy);
                    }
                }
            }
            for (queue, _, model) in &pairs {
                assert_eq!(queue.items(), model.0.iter().copied().collect::<Vec<_>>());
            }
        }
        for (queue, _, _) in &pairs {
            queue.check().unwrap();
        }
    }
}
