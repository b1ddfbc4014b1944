//! The block pool's index, from a cached block's key to its entry's slot: [`SlotMap`].
//!
//! An open-addressing table of (tag, slot) pairs, 8 bytes each, in a [`CowVec`] (cheap to copy
//! and to mirror): the keys themselves are the entries' ([`crate::free_queue`]), so a lookup reads
//! one bucket's cache line, then the entry it names, which the caller reads anyway. A hash map
//! of 40-byte keys in copy-on-write shards read three lines before the entry (the shard, its
//! control bytes, the bucket).
//!
//! Nothing is ever removed: a key whose entry went (an evicted block, a fork's block let go)
//! stays in its bucket, naming a slot that no longer holds it (the caller's `holds` tells); the
//! pool counts such keys and rebuilds the table from its entries once they outnumber its blocks.

use crate::cow_vec::CowVec;
use crate::free_queue::Slot;
use crate::key::Key;

/// Buckets per chunk (4 KiB).
const CHUNK: usize = 512;

/// A key's tag (its fingerprint's low half, never 0) and the slot it names; tag 0: empty.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    tag: u32,
    slot: Slot,
}

/// Keys to slots (see the module).
#[derive(Clone, Debug)]
pub struct SlotMap {
    buckets: CowVec<Bucket, CHUNK>,
    /// log2 of the buckets: a key's first bucket is its fingerprint's top bits.
    bits: u32,
    /// Buckets not empty.
    used: usize,
}

impl SlotMap {
    /// An empty table for up to `keys` keys at a time (kept at most half full).
    pub fn with_capacity(keys: usize) -> Self {
        let mut buckets = CowVec::new();
        let num_buckets = (2 * keys).max(CHUNK).next_power_of_two();
        while buckets.len() < num_buckets {
            buckets.grow();
        }
        SlotMap { buckets, bits: num_buckets.trailing_zeros(), used: 0 }
    }

    /// A copy that [`SlotMap::sync_from`] can bring up to date (see [`CowVec::mirror`]).
    pub fn mirror(&mut self) -> Self {
        SlotMap { buckets: self.buckets.mirror(), ..*self }
    }

    /// Makes this mirror of `source` equal to it again; false when a new mirror is needed (see
    /// [`CowVec::sync_from`]; a rebuilt table logs nothing).
    pub fn sync_from(&mut self, source: &mut Self) -> bool {
        if self.bits != source.bits || !self.buckets.sync_from(&mut source.buckets) {
            return false;
        }
        self.used = source.used;
        true
    }

    /// Buckets not empty: keys held, and keys whose entry went.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Whether `keys` more keys would fill the table past half.
    pub fn is_full(&self, keys: usize) -> bool {
        2 * (self.used + keys) > self.buckets.len()
    }

    #[inline]
    fn first(&self, key: &Key) -> (u32, u32) {
        let fingerprint = key.fingerprint();
        ((fingerprint >> (64 - self.bits)) as u32, fingerprint as u32 | 1)
    }

    /// The slot of `key`: the first its buckets name that `holds` it.
    #[inline]
    pub fn find(&self, key: &Key, holds: impl Fn(Slot) -> bool) -> Option<Slot> {
        let (mut at, tag) = self.first(key);
        let mask = (self.buckets.len() - 1) as u32;
        loop {
            let bucket = self.buckets.get(at);
            if bucket.tag == 0 {
                return None;
            }
            if bucket.tag == tag && holds(bucket.slot) {
                return Some(bucket.slot);
            }
            at = (at + 1) & mask;
        }
    }

    /// Starts loading the bucket where a lookup of `key` begins ([`CowVec::prefetch`]).
    #[inline]
    pub fn prefetch(&self, key: &Key) {
        self.buckets.prefetch(self.first(key).0);
    }

    /// The slot that `key`'s first bucket names if its tag is `key`'s: where a lookup most
    /// likely ends, to prefetch (not checked to hold it).
    #[inline]
    pub fn likely_slot(&self, key: &Key) -> Option<Slot> {
        let (at, tag) = self.first(key);
        let bucket = self.buckets.get(at);
        (bucket.tag == tag).then_some(bucket.slot)
    }

    /// Adds `key` (not held) at `slot`; the caller keeps the table at most half full.
    pub fn insert(&mut self, key: &Key, slot: Slot) {
        let (mut at, tag) = self.first(key);
        let mask = (self.buckets.len() - 1) as u32;
        while self.buckets.get(at).tag != 0 {
            at = (at + 1) & mask;
        }
        *self.buckets.get_mut(at) = Bucket { tag, slot };
        self.used += 1;
    }

    /// A table of `keys` (key, slot) alone, sized for `capacity` keys at a time.
    pub fn rebuilt<'a>(capacity: usize, keys: impl Iterator<Item = (&'a Key, Slot)>) -> Self {
        let mut map = SlotMap::with_capacity(capacity);
        for (key, slot) in keys {
            map.insert(key, slot);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_s_likely_slot_is_the_one_its_first_bucket_names() {
        let mut map = SlotMap::with_capacity(100);
        assert_eq!(map.likely_slot(&Key::Id(5)), None); // an empty table names none
        map.insert(&Key::Id(5), 50);
        assert_eq!(map.likely_slot(&Key::Id(5)), Some(50));
        map.prefetch(&Key::Id(5)); // a hint: nothing changes
        assert_eq!(map.find(&Key::Id(5), |slot| slot == 50), Some(50));
    }

    #[test]
    fn keys_are_found_by_what_their_slots_hold_and_colliding_tags_probe_on() {
        // slot i holds Id(i); ids colliding in both first bucket and tag are told apart by slot
        let holds = |key: Key| move |slot: Slot| key == Key::Id(i64::from(slot));
        let mut map = SlotMap::with_capacity(100);
        for i in 0..100 {
            map.insert(&Key::Id(i), i as Slot);
        }
        assert_eq!(map.find(&Key::Id(42), holds(Key::Id(42))), Some(42));
        assert_eq!(map.find(&Key::Id(100), holds(Key::Id(100))), None);
        assert_eq!(map.find(&Key::Id(42), |_| false), None); // its entry went: not found
        let same = Key::Id(7);
        map.insert(&same, 1000); // a second bucket of one key: the first that holds it is found
        assert_eq!(map.find(&same, |slot| slot == 1000), Some(1000));
        assert_eq!((map.used(), map.is_full(0), map.is_full(1000)), (101, false, true));
    }

    #[test]
    fn a_mirror_synced_equals_its_source_and_a_rebuilt_one_is_mirrored_anew() {
        let holds = |key: Key| move |slot: Slot| key == Key::Id(i64::from(slot));
        let mut source = SlotMap::with_capacity(64);
        let mut mirror = source.mirror();
        for i in 0..50 {
            source.insert(&Key::Id(i), i as Slot);
        }
        mirror.insert(&Key::Id(99), 99);
        assert!(mirror.sync_from(&mut source));
        assert_eq!(
            (mirror.find(&Key::Id(49), holds(Key::Id(49))), mirror.find(&Key::Id(99), holds(Key::Id(99)))),
            (Some(49), None)
        );
        let keys: Vec<Key> = (0..10).map(Key::Id).collect();
        let mut rebuilt = SlotMap::rebuilt(64, keys.iter().zip(0..));
        assert_eq!((rebuilt.used(), rebuilt.find(&Key::Id(3), holds(Key::Id(3)))), (10, Some(3)));
        assert!(!mirror.sync_from(&mut rebuilt)); // not its source's mirror
    }
}
