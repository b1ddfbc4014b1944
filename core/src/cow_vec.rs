//! A vector whose copies cost O(chunks), not O(elements): [`CowVec`].
//!
//! The scheduler's lookahead copies a client's block manager at about every arrival, and with
//! prefix caching that holds every cached block: tens of thousands of entries on an H100. A
//! [`CowVec`] splits its elements into chunks; a copy shares every chunk (a reference count
//! each), and whichever side writes a shared chunk first copies it (copy-on-write), so a copy
//! costs its chunk list, and each side what it writes afterwards.
//!
//! A copy made again and again from the same vector (the lookahead's, once per arrival) is
//! cheaper kept: a *mirror* ([`CowVec::mirror`]) is a copy whose writes, and its source's, are
//! logged by index, so that [`CowVec::sync_from`] brings it up to date element by element. Each
//! side copies a shared chunk once, the first time it writes it; after that the two write their
//! own chunks, and dropping the copy frees none.

use std::sync::Arc;

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

/// A vector of copy-on-write chunks of `N` elements (see the module). It grows a chunk at a
/// time; an element never written is `T::default()`.
#[derive(Debug)]
pub struct CowVec<T, const N: usize = 64> {
    chunks: Vec<Arc<[T; N]>>,
    /// Indices written since the last sync with a mirror (see the module); None: not logging,
    /// or the log outgrew a whole copy.
    log: Option<Vec<u32>>,
}

/// A copy shares every chunk; it logs nothing (a log pairs one vector with one mirror).
impl<T, const N: usize> Clone for CowVec<T, N> {
    fn clone(&self) -> Self {
        CowVec { chunks: self.chunks.clone(), log: None }
    }
}

impl<T: Clone + Default, const N: usize> CowVec<T, N> {
    /// An empty vector.
    pub fn new() -> Self {
        CowVec { chunks: Vec::new(), log: None }
    }

    /// Elements (a whole number of chunks).
    #[inline]
    pub fn len(&self) -> usize {
        self.chunks.len() * N
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
        &self.chunks[index as usize / N][index as usize % N]
    }

    /// The element at `index`, to write (its chunk copied first if a copy shares it).
    #[inline]
    pub fn get_mut(&mut self, index: u32) -> &mut T {
        let limit = self.len().max(N);
        note(&mut self.log, index, limit);
        &mut Arc::make_mut(&mut self.chunks[index as usize / N])[index as usize % N]
    }

    /// A copy, both it and `self` logging their writes from now on, so that
    /// [`CowVec::sync_from`] can bring it up to date with `self` element by element.
    pub fn mirror(&mut self) -> Self {
        self.log = Some(Vec::new());
        CowVec { chunks: self.chunks.clone(), log: Some(Vec::new()) }
    }

    /// Makes this mirror of `source` (from [`CowVec::mirror`]) equal to it again: its length, and
    /// the elements either wrote since they were last equal; false, changing nothing, when a log
    /// is missing (either side outgrew it, or `source` is a new vector): a new mirror is needed.
    pub fn sync_from(&mut self, source: &mut Self) -> bool {
        let Some(mut indices) = merged_logs(&mut self.log, &mut source.log) else {
            return false;
        };
        self.chunks.truncate(source.chunks.len());
        let grown = self.chunks.len();
        self.chunks.extend_from_slice(&source.chunks[grown..]);
        for &index in &indices {
            let (chunk, at) = (index as usize / N, index as usize % N);
            if chunk < grown && !Arc::ptr_eq(&self.chunks[chunk], &source.chunks[chunk]) {
                Arc::make_mut(&mut self.chunks[chunk])[at] = source.chunks[chunk][at].clone();
            }
        }
        indices.clear();
        self.log = Some(indices);
        true
    }
}

impl<T: Clone + Default, const N: usize> Default for CowVec<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(len: usize) -> CowVec<i64, 4> {
        let mut vec = CowVec::new();
        while vec.len() < len {
            vec.grow();
        }
        for i in 0..len as u32 {
            *vec.get_mut(i) = i64::from(i);
        }
        vec
    }

    fn elements(vec: &CowVec<i64, 4>) -> Vec<i64> {
        (0..vec.len() as u32).map(|i| *vec.get(i)).collect()
    }

    #[test]
    fn copies_are_independent_both_ways() {
        let mut original = filled(16);
        let mut copy = original.clone();
        *copy.get_mut(1) = -1;
        *original.get_mut(2) = -2;
        copy.grow();
        assert_eq!((*original.get(1), *copy.get(1)), (1, -1));
        assert_eq!((*original.get(2), *copy.get(2)), (-2, 2));
        assert_eq!((original.len(), copy.len(), *copy.get(16)), (16, 20, 0));
    }

    #[test]
    fn a_mirror_synced_after_writes_on_both_sides_equals_its_source() {
        let mut source = filled(32);
        let mut mirror = source.mirror();
        let mut state = 7u64;
        for round in 0..50 {
            for _ in 0..10 {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let (side, at) = ((state >> 20) % 5, (state >> 40) as u32);
                match side {
                    0 | 1 => *source.get_mut(at % source.len() as u32) = round,
                    2 | 3 => *mirror.get_mut(at % mirror.len() as u32) = -round,
                    _ if source.len() < 64 => source.grow(),
                    _ => mirror.grow(),
                }
            }
            assert!(mirror.sync_from(&mut source));
            assert_eq!(elements(&mirror), elements(&source));
        }
    }

    #[test]
    fn a_log_longer_than_the_vector_is_dropped_and_the_sync_refused() {
        let mut source = filled(8);
        let mut mirror = source.mirror();
        for i in 0..=8 {
            *source.get_mut(i % 3) = 9;
        }
        assert!(!mirror.sync_from(&mut source));
        assert_eq!(elements(&mirror), (0..8).collect::<Vec<_>>()); // unchanged
        assert!(!source.clone().mirror().sync_from(&mut source.clone())); // a plain copy logs nothing
    }
}
