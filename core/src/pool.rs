//! The blocks of one client's KV cache, as counts, cached keys and a free queue: [`BlockPool`].
//!
//! This is the part of the block manager that knows nothing of sequences: how many blocks are
//! free, which cached (or fork-shared) blocks how many sequences hold, and with prefix caching
//! vLLM V1's free queue (least recently freed first; a run of uncached blocks is one entry).
//! [`crate::manager`] works out, from a sequence, which keys to hand it.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::free_queue::{FreeQueue, Slot};
use crate::key::Key;
use crate::slot_map::SlotMap;

/// Free-block counts, holders of cached blocks, and the free queue (see the module).
#[derive(Clone, Debug)]
pub struct BlockPool {
    /// Capacity in blocks.
    pub num_blocks: i64,
    /// Blocks no sequence holds (cached ones nobody uses included).
    pub num_free: i64,
    /// Whether blocks are cached by content (vLLM's prefix caching).
    pub caching: bool,
    /// shared or cached block -> its entry in `free` (which counts the sequences holding it);
    /// a block evicted or forgotten stays mapped to a slot that no longer holds it
    refs: SlotMap,
    /// keys of `refs` whose entry went (see [`BlockPool::forget`])
    stale: usize,
    /// the entries of `refs`; with prefix caching, those nobody holds and runs of uncached free
    /// blocks queued in eviction order
    free: FreeQueue,
    /// ids of runs; with caching off, of shared blocks too
    next_id: i64,
    /// Which mirror pairing this pool is in (0: none): a mirror syncs only with the pool that
    /// made it, and only while that pool made no other since (see [`BlockPool::mirror_into`]).
    pairing: u64,
    /// (entry, holders) of the blocks an operation is given, read before any is written (kept
    /// for its allocation; empty between operations)
    scratch: Vec<(Slot, i64)>,
}

/// Pairings handed out so far (each `mirror_into` makes a new one).
static PAIRINGS: AtomicU64 = AtomicU64::new(0);

impl BlockPool {
    /// A pool of `num_blocks` free blocks.
    pub fn new(num_blocks: i64, caching: bool) -> Self {
        let capacity = usize::try_from(num_blocks).unwrap_or(0);
        let mut pool = BlockPool {
            num_blocks,
            num_free: num_blocks,
            caching,
            refs: SlotMap::with_capacity(if caching { 2 * capacity } else { 0 }), // forks grow it
            stale: 0,
            free: FreeQueue::new(),
            next_id: 0,
            pairing: 0,
            scratch: Vec::new(),
        };
        if caching && num_blocks > 0 {
            pool.free_run(num_blocks);
        }
        pool
    }

    /// Makes `mirror` equal to this pool: by copying only what either changed since it last was
    /// (both log their writes while paired), else (`mirror` is not this pool's current one, a
    /// log outgrew a whole copy, or the index was rebuilt) as a new copy ([`CowVec::mirror`]).
    /// The lookahead keeps one mirror per client and brings it up to date at each miss, where a
    /// new copy would share every chunk again, both sides would copy each chunk they write, and
    /// the copy's would be freed with it.
    ///
    /// [`CowVec::mirror`]: crate::cow_vec::CowVec::mirror
    pub fn mirror_into(&mut self, mirror: &mut BlockPool) {
        let synced = self.pairing != 0
            && mirror.pairing == self.pairing
            && mirror.refs.sync_from(&mut self.refs)
            && mirror.free.sync_from(&mut self.free);
        if synced {
            (mirror.num_blocks, mirror.num_free, mirror.caching, mirror.next_id, mirror.stale) =
                (self.num_blocks, self.num_free, self.caching, self.next_id, self.stale);
            return;
        }
        self.pairing = PAIRINGS.fetch_add(1, Ordering::Relaxed) + 1;
        *mirror = BlockPool {
            num_blocks: self.num_blocks,
            num_free: self.num_free,
            caching: self.caching,
            refs: self.refs.mirror(),
            stale: self.stale,
            free: self.free.mirror(),
            next_id: self.next_id,
            pairing: self.pairing,
            scratch: Vec::new(),
        };
    }

    /// The entry of cached (or shared) block `key`, if it is one.
    #[inline]
    fn slot_of(&self, key: &Key) -> Option<Slot> {
        self.refs.find(key, |slot| self.free.holds(slot, key))
    }

    /// Starts loading what looking up `keys` reads: their first buckets, then the entries those
    /// name. A sequence's blocks are looked up together (dozens when it is admitted or
    /// finishes), each a cache miss in tables of megabytes; loaded together, they overlap.
    fn prefetch(&self, keys: &[Key]) {
        for key in keys {
            self.refs.prefetch(key);
        }
        for key in keys {
            if let Some(slot) = self.refs.likely_slot(key) {
                self.free.prefetch(slot);
            }
        }
    }

    /// Counts `count` keys whose entry went: they stay in `refs` (a lookup finds their slot no
    /// longer holds them; removing an evicted block's key, cold by then, was the pool's dearest
    /// operation) until they outnumber the pool's blocks, when `refs` is rebuilt from the
    /// entries: a pass over them per as many evictions.
    fn forget(&mut self, count: usize) {
        self.stale += count;
        if self.stale > usize::try_from(self.num_blocks).unwrap_or(0) {
            self.reindex(0);
        }
    }

    /// Rebuilds `refs` from the entries, with room for `more` keys.
    fn reindex(&mut self, more: usize) {
        let live = self.refs.used() - self.stale;
        let capacity = (2 * usize::try_from(self.num_blocks).unwrap_or(0)).max(2 * (live + more));
        self.refs = SlotMap::rebuilt(capacity, self.free.cached());
        self.stale = 0;
    }

    /// Sequences holding cached block `key`, if it is cached.
    pub fn holders(&self, key: &Key) -> Option<i64> {
        self.slot_of(key).map(|slot| self.free.count(slot))
    }

    /// Whether `key` is cached (or, without caching, shared by forks).
    pub fn is_cached(&self, key: &Key) -> bool {
        self.slot_of(key).is_some()
    }

    /// `count` new ids (keys of blocks shared by forks, without caching).
    pub fn new_ids(&mut self, count: i64) -> std::ops::Range<i64> {
        let first = self.next_id;
        self.next_id += count;
        first..self.next_id
    }

    /// Takes `num_blocks` free blocks from the free queue's head, evicting the cached ones among
    /// them (the caller checked there are enough; a decode run credits them later).
    pub fn take(&mut self, num_blocks: i64) {
        self.num_free -= num_blocks;
        if !self.caching {
            return;
        }
        let mut evicted = 0;
        self.free.take(num_blocks, |_| evicted += 1);
        self.forget(evicted);
    }

    /// Reads the entry and holders of each of `blocks` into `held` (emptied first); Err: the
    /// first that is not cached.
    fn read(&self, blocks: &[Key], held: &mut Vec<(Slot, i64)>) -> Result<(), Key> {
        held.clear();
        self.prefetch(blocks);
        for key in blocks {
            let slot = self.slot_of(key).ok_or(*key)?;
            held.push((slot, self.free.count(slot)));
        }
        Ok(())
    }

    /// One more sequence holds each of the cached `blocks` (taken off the free queue if nobody did).
    /// Counts are read before any is written, as a block listed twice is held once more.
    pub fn hold(&mut self, blocks: &[Key]) -> Result<(), Key> {
        let mut held = std::mem::take(&mut self.scratch);
        let read = self.read(blocks, &mut held);
        if read.is_ok() {
            for &(slot, count) in &held {
                if count == 0 {
                    self.free.unlink(slot);
                    self.num_free -= 1;
                }
            }
            for &(slot, count) in &held {
                self.free.set_count(slot, count + 1);
            }
        }
        held.clear();
        self.scratch = held;
        read
    }

    /// Blocks among `blocks` that nobody holds (free, evictable), or the first that is not cached.
    pub fn unheld(&self, blocks: &[Key]) -> Result<i64, Key> {
        let mut unheld = 0;
        for key in blocks {
            if self.free.count(self.slot_of(key).ok_or(*key)?) == 0 {
                unheld += 1;
            }
        }
        Ok(unheld)
    }

    /// A sequence lets go of its cached `blocks`, given tail first: those nobody holds any more
    /// join the free queue's tail in that order (with caching), or are forgotten (without).
    pub fn let_go(&mut self, blocks: &[Key]) -> Result<(), Key> {
        let mut held = std::mem::take(&mut self.scratch);
        let read = self.read(blocks, &mut held);
        if read.is_ok() {
            for &(slot, count) in &held {
                self.free.set_count(slot, count - 1);
            }
            for (key, &(slot, count)) in blocks.iter().zip(&held) {
                if count != 1 {
                    continue;
                }
                self.num_free += 1;
                if self.caching {
                    self.free.push(slot);
                } else if self.free.holds(slot, key) {
                    self.free.remove(slot); // shared by forks only: nothing keeps it
                    self.forget(1);
                }
            }
        }
        held.clear();
        self.scratch = held;
        read
    }

    /// `count` more sequences hold each of `blocks` (branches forked off the one holding them).
    pub fn share(&mut self, blocks: &[Key], count: i64) -> Result<(), Key> {
        for key in blocks {
            let slot = self.slot_of(key).ok_or(*key)?;
            self.free.set_count(slot, self.free.count(slot) + count);
        }
        Ok(())
    }

    /// A sequence's own blocks, one per key of `keys`, become cached blocks; a block someone
    /// cached already is shared instead, and the sequence's copy freed.
    pub fn cache(&mut self, keys: &[Key]) {
        self.prefetch(keys);
        for key in keys {
            if self.is_cached(key) {
                self.hold(std::slice::from_ref(key)).expect("a cached block");
                self.num_free += 1;
                if self.caching {
                    self.free_run(1);
                }
            } else {
                if self.refs.is_full(1) {
                    self.reindex(1);
                }
                let slot = self.free.add(*key, 1);
                self.refs.insert(key, slot);
            }
        }
    }

    /// Frees `count` uncached blocks: with caching they join the free queue's tail (as a run).
    pub fn free_blocks(&mut self, count: i64) {
        self.num_free += count;
        if self.caching {
            self.free_run(count);
        }
    }

    /// Appends `count` uncached free blocks to the free queue's tail.
    fn free_run(&mut self, count: i64) {
        match self.free.tail_run() {
            Some(tail) => self.free.grow_run(tail, count),
            None => {
                let id = self.new_ids(1).start;
                self.free.append_run(Key::Id(id), count);
            }
        }
    }

    /// Holder counts of the cached blocks, in no particular order.
    pub fn holder_counts(&self) -> Vec<i64> {
        self.free.cached().map(|(_, slot)| self.free.count(slot)).collect()
    }

    /// Blocks of each free queue entry, head first (empty without caching).
    pub fn free_queue_blocks(&self) -> Vec<i64> {
        self.free.items().into_iter().map(|(_, count)| count).collect()
    }

    /// Checks the pool's invariants: counts within bounds, each cached block's entry, the keys of
    /// evicted blocks counted, the free queue's links, and with caching, that the free blocks are
    /// exactly the free queue's, and that the cached blocks nobody holds are exactly the free
    /// queue's cached entries.
    pub fn check(&self) -> Result<(), String> {
        if !(0..=self.num_blocks).contains(&self.num_free) {
            return Err(format!("{} free blocks of {}", self.num_free, self.num_blocks));
        }
        if let Some((key, slot)) = self.free.cached().find(|(key, slot)| self.slot_of(key) != Some(*slot)) {
            return Err(format!("{key:?}'s entry {slot} is not found by its key"));
        }
        let cached = self.free.cached().count();
        if self.refs.used() != cached + self.stale {
            return Err(format!("{} keys mapped, {cached} cached and {} gone", self.refs.used(), self.stale));
        }
        if let Some((key, count)) =
            self.free.cached().map(|(key, slot)| (key, self.free.count(slot))).find(|(_, count)| *count < 0)
        {
            return Err(format!("{key:?} held by {count}"));
        }
        if !self.caching {
            return match self.free.cached().find(|(_, slot)| self.free.count(*slot) == 0) {
                Some((key, _)) => Err(format!("{key:?} is shared by nobody but kept")),
                None => Ok(()),
            };
        }
        self.free.check()?;
        let queued: i64 = self.free_queue_blocks().iter().sum();
        if queued != self.num_free {
            return Err(format!("the free queue holds {queued} blocks, {} are free", self.num_free));
        }
        // the queue's cached entries have no holders (its check): as many as the mapped blocks with none
        let queued = self.free.slots().into_iter().filter(|slot| self.free.holds(*slot, &self.free.key(*slot))).count();
        let unheld = self.free.cached().filter(|(_, slot)| self.free.count(*slot) == 0).count();
        if unheld != queued {
            return Err(format!("{unheld} cached blocks are held by nobody, {queued} queued as free"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(i: u8) -> Key {
        let mut bytes = [i; 32];
        bytes[1] = 0xA5;
        Key::Hash(bytes)
    }

    #[test]
    fn cached_blocks_are_evicted_least_recently_freed_first() {
        let mut pool = BlockPool::new(6, true);
        pool.take(4); // two sequences of two blocks each
        pool.cache(&[hash(1), hash(2)]);
        pool.cache(&[hash(3), hash(4)]);
        pool.let_go(&[hash(2), hash(1)]).unwrap(); // tail first
        pool.let_go(&[hash(4), hash(3)]).unwrap();
        assert_eq!((pool.num_free, pool.free_queue_blocks()), (6, vec![2, 1, 1, 1, 1]));
        pool.take(3); // the run of two, then the first sequence's tail block
        assert_eq!((pool.is_cached(&hash(2)), pool.is_cached(&hash(1))), (false, true));
        pool.check().unwrap();
    }

    #[test]
    fn holding_a_free_cached_block_takes_it_off_the_queue() {
        let mut pool = BlockPool::new(4, true);
        pool.take(2);
        pool.cache(&[hash(1), hash(2)]);
        pool.let_go(&[hash(2), hash(1)]).unwrap();
        assert_eq!(pool.unheld(&[hash(1), hash(2)]), Ok(2));
        pool.hold(&[hash(1)]).unwrap();
        assert_eq!((pool.num_free, pool.holders(&hash(1)), pool.free_queue_blocks()), (3, Some(1), vec![2, 1]));
        assert_eq!(pool.hold(&[hash(9)]), Err(hash(9)));
        pool.check().unwrap();
    }

    #[test]
    fn a_block_cached_twice_is_shared_and_the_copy_freed() {
        let mut pool = BlockPool::new(4, true);
        pool.take(1);
        pool.cache(&[hash(1)]);
        pool.take(1);
        pool.cache(&[hash(1)]); // computed again by another sequence: its block goes back
        assert_eq!((pool.num_free, pool.holders(&hash(1))), (3, Some(2)));
        pool.check().unwrap();
    }

    #[test]
    fn without_caching_shared_blocks_are_forgotten_when_let_go() {
        let mut pool = BlockPool::new(8, false);
        pool.take(2);
        let ids: Vec<Key> = pool.new_ids(2).map(Key::Id).collect();
        pool.cache(&ids);
        pool.share(&ids, 2).unwrap(); // two branches
        for _ in 0..3 {
            pool.let_go(&[ids[1], ids[0]]).unwrap();
        }
        assert_eq!((pool.num_free, pool.holder_counts()), (8, vec![]));
        pool.check().unwrap();
    }

    /// Everything the pool's behaviour depends on, comparable.
    fn state(pool: &BlockPool) -> (i64, i64, i64, Vec<i64>, Vec<(Key, i64)>) {
        let mut counts = pool.holder_counts();
        counts.sort();
        (pool.num_free, pool.next_id, pool.num_blocks, counts, pool.free.items())
    }

    #[test]
    fn a_mirror_brought_up_to_date_equals_a_new_copy() {
        let mut live = BlockPool::new(64, true);
        let mut mirror = BlockPool::new(0, false);
        live.mirror_into(&mut mirror);
        let pairing = mirror.pairing;
        for round in 0..20u8 {
            // the live pool admits and finishes a sequence; the mirror schedules ahead on its own
            live.take(4);
            let keys: Vec<Key> = (0..4).map(|i| hash(round.wrapping_mul(4).wrapping_add(i))).collect();
            live.cache(&keys);
            if round % 3 == 0 {
                live.let_go(&keys.iter().rev().copied().collect::<Vec<_>>()).unwrap();
            }
            mirror.take(5);
            mirror.free_blocks(2);
            live.mirror_into(&mut mirror);
            assert_eq!(mirror.pairing, pairing); // synced, not copied anew
            assert_eq!(state(&mirror), state(&live));
            mirror.check().unwrap();
        }
        let mut other = BlockPool::new(64, true); // another pool's mirror is copied anew
        other.mirror_into(&mut mirror);
        assert_ne!(mirror.pairing, pairing);
        assert_eq!(state(&mirror), state(&other));
        live.mirror_into(&mut mirror); // and so is one another pool took over
        assert_eq!(state(&mirror), state(&live));
    }

    #[test]
    fn evicted_blocks_cached_again_and_their_keys_dropped() {
        let mut pool = BlockPool::new(4, true);
        let mut mirror = BlockPool::new(0, false);
        for round in 0..40u8 {
            // a sequence of two blocks, one of them computed before (evicted by now, but for the first)
            pool.take(2);
            let keys = [hash(round % 8), hash(100 + round)];
            pool.cache(&keys);
            pool.let_go(&[keys[1], keys[0]]).unwrap();
            pool.check().unwrap();
            assert_eq!(pool.holders(&keys[0]), Some(0));
            assert!(pool.stale <= 4); // evicted keys dropped once they outnumber the blocks
            pool.mirror_into(&mut mirror);
            assert_eq!((state(&mirror), mirror.stale), (state(&pool), pool.stale));
            mirror.take(3);
            mirror.check().unwrap();
        }
        assert_eq!((pool.is_cached(&hash(0)), pool.holders(&hash(139)), pool.num_free), (false, Some(0), 4));
    }

    #[test]
    fn copies_are_independent() {
        let mut pool = BlockPool::new(64, true);
        pool.take(8);
        pool.cache(&(1..=8).map(hash).collect::<Vec<_>>());
        let mut copy = pool.clone();
        copy.let_go(&(1..=8).rev().map(hash).collect::<Vec<_>>()).unwrap();
        copy.take(64);
        assert_eq!((copy.num_free, copy.is_cached(&hash(1))), (0, false));
        assert_eq!((pool.num_free, pool.holders(&hash(1))), (56, Some(1)));
        pool.check().unwrap();
        copy.check().unwrap();
    }
}
