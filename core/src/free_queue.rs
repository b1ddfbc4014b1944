//! vLLM's free block queue, cheap to copy: [`FreeQueue`].
//!
//! A block pool with prefix caching keeps its free blocks in eviction order: cached blocks (one
//! entry each, by hash) and runs of blocks holding nothing cached (an id and a count). Blocks
//! are taken from the head, freed to the tail, and a cached block found again is taken out of
//! the middle. The queue is a doubly linked list, as vLLM's `FreeKVCacheBlockQueue`, whose links
//! live in [`CowMap`]s: every operation is O(1), the queue holds exactly its live entries, and a
//! copy costs the maps' shard lists.

use crate::cow_map::CowMap;
use crate::key::Key;

/// An entry's neighbours, head side first. The head's `before` is stale (never read: the head
/// is known by [`FreeQueue::head`]), so that taking from the head writes one link, not two.
#[derive(Clone, Copy, Debug, Default)]
struct Links {
    before: Option<Key>,
    after: Option<Key>,
}

/// Free blocks in eviction order, head first (see the module).
#[derive(Clone, Debug)]
pub struct FreeQueue {
    links: CowMap<Links>,
    /// run id -> its blocks (a cached block is absent: one block)
    runs: CowMap<i64>,
    head: Option<Key>,
    tail: Option<Key>,
}

impl FreeQueue {
    /// An empty queue sized for about `capacity` entries.
    pub fn with_capacity(capacity: usize) -> Self {
        FreeQueue {
            links: CowMap::with_capacity(capacity),
            runs: CowMap::with_capacity(capacity / 16),
            head: None,
            tail: None,
        }
    }

    /// A copy that [`FreeQueue::sync_from`] can bring up to date (see [`CowMap::mirror`]).
    pub fn mirror(&mut self) -> Self {
        FreeQueue { links: self.links.mirror(), runs: self.runs.mirror(), head: self.head, tail: self.tail }
    }

    /// Makes this mirror of `source` equal to it again; false when a new mirror is needed (see
    /// [`CowMap::sync_from`]).
    pub fn sync_from(&mut self, source: &mut Self) -> bool {
        if !(self.links.sync_from(&mut source.links) && self.runs.sync_from(&mut source.runs)) {
            return false;
        }
        (self.head, self.tail) = (source.head, source.tail);
        true
    }

    /// Entries (cached blocks and runs).
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Whether the queue holds nothing.
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// Whether `key` is an entry.
    pub fn contains(&self, key: &Key) -> bool {
        self.links.contains(key)
    }

    /// (entry, blocks) from head to tail.
    pub fn items(&self) -> Vec<(Key, i64)> {
        let mut items = Vec::new();
        let mut key = self.head;
        while let Some(k) = key {
            items.push((k, self.blocks_of(&k)));
            key = self.links.get(&k).expect("a linked entry").after;
        }
        items
    }

    fn blocks_of(&self, key: &Key) -> i64 {
        self.runs.get(key).copied().unwrap_or(1)
    }

    /// Takes `num_blocks` blocks from the head (there must be as many): the entries it empties,
    /// in order; a run it takes only part of keeps the rest.
    pub fn take(&mut self, mut num_blocks: i64) -> Vec<Key> {
        let mut taken = Vec::new();
        while num_blocks > 0 {
            let key = self.head.expect("took more blocks than the free queue holds");
            let count = self.blocks_of(&key);
            if count > num_blocks {
                self.runs.insert(key, count - num_blocks);
                break;
            }
            self.runs.remove(&key);
            self.unlink(&key);
            taken.push(key);
            num_blocks -= count;
        }
        taken
    }

    /// Adds a run of `blocks` uncached blocks at the tail, under a new id.
    pub fn append_run(&mut self, id: i64, blocks: i64) {
        self.extend(&[Key::Id(id)]);
        self.runs.insert(Key::Id(id), blocks);
    }

    /// Adds entries (cached blocks) at the tail, in order.
    pub fn extend(&mut self, keys: &[Key]) {
        let Some(first) = keys.first() else { return };
        match self.tail {
            None => self.head = Some(*first),
            Some(tail) => {
                let before = self.links.get(&tail).expect("the tail is linked").before;
                self.links.insert(tail, Links { before, after: Some(*first) });
            }
        }
        let mut before = self.tail;
        for (i, key) in keys.iter().enumerate() {
            self.links.insert(*key, Links { before, after: keys.get(i + 1).copied() });
            before = Some(*key);
        }
        self.tail = before;
    }

    /// The last entry if it is a run (its blocks can grow).
    pub fn tail_run(&self) -> Option<Key> {
        self.tail.filter(|tail| self.runs.contains(tail))
    }

    /// Adds `blocks` to run `key`.
    pub fn grow_run(&mut self, key: Key, blocks: i64) {
        let count = self.runs.get(&key).copied().expect("a run");
        self.runs.insert(key, count + blocks);
    }

    /// Takes cached blocks out of the queue, wherever they are.
    pub fn remove_all(&mut self, keys: &[Key]) {
        for key in keys {
            self.unlink(key);
        }
    }

    fn unlink(&mut self, key: &Key) {
        let Links { before, after } = self.links.remove(key).expect("an entry of the free queue");
        if self.head == Some(*key) {
            self.head = after;
            if after.is_none() {
                self.tail = None;
            }
            return;
        }
        let before = before.expect("an entry after the head has one before it");
        let links = *self.links.get(&before).expect("a linked entry");
        self.links.insert(before, Links { after, ..links });
        match after {
            None => self.tail = Some(before),
            Some(next) => {
                let links = *self.links.get(&next).expect("a linked entry");
                self.links.insert(next, Links { before: Some(before), ..links });
            }
        }
    }

    /// Checks the links: head to tail and back visit every entry once, runs are entries.
    pub fn check(&self) -> Result<(), String> {
        let forward = self.items();
        if forward.len() != self.links.len() {
            return Err(format!("{} entries linked from the head, {} held", forward.len(), self.links.len()));
        }
        if forward.last().map(|(key, _)| *key) != self.tail {
            return Err("the tail is not the last entry".into());
        }
        for pair in forward.windows(2) {
            if self.links.get(&pair[1].0).and_then(|links| links.before) != Some(pair[0].0) {
                return Err(format!("{:?} does not link back to {:?}", pair[1].0, pair[0].0));
            }
        }
        if let Some((key, _)) = self.runs.iter().find(|(key, _)| !self.links.contains(key)) {
            return Err(format!("run {key:?} is not in the queue"));
        }
        if let Some((key, count)) = self.runs.iter().find(|(_, count)| **count <= 0) {
            return Err(format!("run {key:?} holds {count} blocks"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn hash(i: u8) -> Key {
        let mut bytes = [0u8; 32];
        bytes[0] = i;
        bytes[31] = i;
        Key::Hash(bytes)
    }

    /// The same operations on a plain deque of (entry, blocks), the queue's meaning.
    #[derive(Clone, Default)]
    struct Model(VecDeque<(Key, i64)>);

    impl Model {
        fn take(&mut self, mut num_blocks: i64) -> Vec<Key> {
            let mut taken = Vec::new();
            while num_blocks > 0 {
                let (key, count) = self.0[0];
                if count > num_blocks {
                    self.0[0].1 -= num_blocks;
                    break;
                }
                self.0.pop_front();
                taken.push(key);
                num_blocks -= count;
            }
            taken
        }
    }

    #[test]
    fn takes_from_the_head_and_splits_runs() {
        let mut queue = FreeQueue::with_capacity(16);
        queue.append_run(0, 3);
        queue.extend(&[hash(1), hash(2)]);
        assert_eq!(queue.take(2), vec![]); // two of the run's three blocks
        assert_eq!(queue.items(), vec![(Key::Id(0), 1), (hash(1), 1), (hash(2), 1)]);
        assert_eq!(queue.take(2), vec![Key::Id(0), hash(1)]);
        assert_eq!(queue.tail_run(), None);
        queue.append_run(5, 4);
        queue.grow_run(queue.tail_run().unwrap(), 2);
        assert_eq!(queue.items(), vec![(hash(2), 1), (Key::Id(5), 6)]);
        queue.check().unwrap();
    }

    #[test]
    fn removing_from_anywhere_keeps_the_links() {
        let mut queue = FreeQueue::with_capacity(16);
        queue.extend(&(0..6).map(hash).collect::<Vec<_>>());
        queue.remove_all(&[hash(3), hash(0), hash(5)]); // middle, head, tail
        assert_eq!(queue.items(), vec![(hash(1), 1), (hash(2), 1), (hash(4), 1)]);
        queue.check().unwrap();
        queue.remove_all(&[hash(1), hash(2), hash(4)]);
        assert!(queue.is_empty());
        assert_eq!(queue.len(), 0); // nothing left behind
        queue.extend(&[hash(9)]);
        assert_eq!(queue.items(), vec![(hash(9), 1)]);
        queue.check().unwrap();
    }

    #[test]
    fn random_operations_match_a_deque_and_copies_stay_independent() {
        let mut state = 12345u64;
        let mut next = move |bound: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % bound
        };
        let mut pairs = vec![(FreeQueue::with_capacity(64), Model::default())];
        let mut fresh = 0u8;
        let mut run_id = 1000i64;
        for _ in 0..3000 {
            let i = next(pairs.len() as u64) as usize;
            let (queue, model) = &mut pairs[i];
            match next(5) {
                0 => {
                    let total: i64 = model.0.iter().map(|(_, count)| count).sum();
                    let n = next(total as u64 + 1) as i64;
                    assert_eq!(queue.take(n), model.take(n));
                }
                1 => {
                    let keys: Vec<Key> = (0..next(3)).map(|_| { fresh = fresh.wrapping_add(1); hash(fresh) })
                        .filter(|key| !queue.contains(key)).collect();
                    queue.extend(&keys);
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
                            queue.append_run(run_id, blocks);
                            model.0.push_back((Key::Id(run_id), blocks));
                        }
                    }
                }
                3 => {
                    let cached: Vec<Key> = model.0.iter().filter(|(key, _)| matches!(key, Key::Hash(_)))
                        .map(|(key, _)| *key).collect();
                    if !cached.is_empty() {
                        let key = cached[next(cached.len() as u64) as usize];
                        queue.remove_all(&[key]);
                        model.0.retain(|(k, _)| *k != key);
                    }
                }
                _ => {
                    if pairs.len() < 6 {
                        let copy = (pairs[i].0.clone(), pairs[i].1.clone());
                        pairs.push(copy);
                    }
                }
            }
            for (queue, model) in &pairs {
                assert_eq!(queue.items(), model.0.iter().copied().collect::<Vec<_>>());
            }
        }
        for (queue, _) in &pairs {
            queue.check().unwrap();
        }
    }
}
