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
//! marked (a bit per element, by chunk: [`Written`]), so that [`CowVec::sync_from`] brings it up
//! to date element by element, each chunk either side wrote made writable once and each element
//! copied once however often it was written. Each side copies a shared chunk once, the first time
//! it writes it; after that the two write their own chunks, and dropping the copy frees none.

use std::sync::Arc;

/// The elements of a vector of `N`-element chunks written since its mirror and it were last
/// equal: a bit per element (`WORDS` words a chunk), and the chunks with any bit set, each once.
#[derive(Debug, Default)]
struct Written {
    bits: Vec<u64>,
    chunks: Vec<u32>,
}

impl Written {
    /// Words of bits per chunk of `n` elements.
    const fn words(n: usize) -> usize {
        n.div_ceil(64)
    }

    /// Marks element `at` of chunk `chunk` (of `n` elements) written.
    #[inline]
    fn mark(&mut self, chunk: usize, at: usize, n: usize) {
        let words = Self::words(n);
        let first = chunk * words;
        if self.bits.len() < first + words {
            self.bits.resize(first + words, 0); // a chunk grown since the last sync
        }
        let word = first + at / 64;
        if self.bits[word] == 0 && self.bits[first..first + words].iter().all(|&bits| bits == 0) {
            self.chunks.push(chunk as u32);
        }
        self.bits[word] |= 1 << (at % 64);
    }

    /// Word `word` of the bits, cleared (0 past those marked so far).
    #[inline]
    fn take_word(&mut self, word: usize) -> u64 {
        self.bits.get_mut(word).map_or(0, std::mem::take)
    }

    /// Forgets every mark, keeping the allocations.
    fn clear(&mut self, n: usize) {
        let words = Self::words(n);
        for &chunk in &self.chunks {
            let first = chunk as usize * words;
            if let Some(bits) = self.bits.get_mut(first..first + words) {
                bits.fill(0);
            }
        }
        self.chunks.clear();
    }
}

/// A vector of copy-on-write chunks of `N` elements (see the module). It grows a chunk at a
/// time; an element never written is `T::default()`.
#[derive(Debug)]
pub struct CowVec<T, const N: usize = 64> {
    chunks: Vec<Arc<[T; N]>>,
    /// Elements written since the last sync with a mirror (see the module); None: not paired
    /// with a mirror.
    written: Option<Written>,
}

/// A copy shares every chunk; it marks nothing (marks pair one vector with one mirror).
impl<T, const N: usize> Clone for CowVec<T, N> {
    fn clone(&self) -> Self {
        CowVec { chunks: self.chunks.clone(), written: None }
    }
}

impl<T: Clone + Default, const N: usize> CowVec<T, N> {
    /// An empty vector.
    pub fn new() -> Self {
        CowVec { chunks: Vec::new(), written: None }
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

    /// Starts loading the element at `index` into the cache (a hint: it reads nothing), so that
    /// a caller with many independent lookups waits for their memory once, not once each.
    #[inline]
    pub fn prefetch(&self, index: u32) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE is part of every x86-64 target; a prefetch only hints, never faults.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                std::ptr::from_ref(self.get(index)).cast(),
            );
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = index;
    }

    /// The element at `index`, to write (its chunk copied first if a copy shares it).
    #[inline]
    pub fn get_mut(&mut self, index: u32) -> &mut T {
        let (chunk, at) = (index as usize / N, index as usize % N);
        if let Some(written) = &mut self.written {
            written.mark(chunk, at, N);
        }
        &mut Arc::make_mut(&mut self.chunks[chunk])[at]
    }

    /// A copy, both it and `self` marking their writes from now on, so that
    /// [`CowVec::sync_from`] can bring it up to date with `self` element by element.
    pub fn mirror(&mut self) -> Self {
        self.written = Some(Written::default());
        CowVec { chunks: self.chunks.clone(), written: Some(Written::default()) }
    }

    /// Makes this mirror of `source` (from [`CowVec::mirror`]) equal to it again: its length, and
    /// the elements either wrote since they were last equal; false, changing nothing, when either
    /// marks nothing (`source` is a new vector, or this a plain copy): a new mirror is needed.
    pub fn sync_from(&mut self, source: &mut Self) -> bool {
        let (Some(mine), Some(theirs)) = (self.written.as_mut(), source.written.as_mut()) else {
            return false;
        };
        self.chunks.truncate(source.chunks.len());
        let grown = self.chunks.len();
        self.chunks.extend_from_slice(&source.chunks[grown..]);
        let words = Written::words(N);
        let (my_chunks, their_chunks) = (std::mem::take(&mut mine.chunks), std::mem::take(&mut theirs.chunks));
        // a chunk both wrote is listed twice: its bits are taken (cleared) the first time
        for &chunk in my_chunks.iter().chain(&their_chunks) {
            let chunk = chunk as usize;
            if chunk >= grown || Arc::ptr_eq(&self.chunks[chunk], &source.chunks[chunk]) {
                continue;
            }
            let (from, to) = (&source.chunks[chunk], Arc::make_mut(&mut self.chunks[chunk]));
            for word in chunk * words..(chunk + 1) * words {
                let mut bits = mine.take_word(word) | theirs.take_word(word);
                while bits != 0 {
                    let at = (word - chunk * words) * 64 + bits.trailing_zeros() as usize;
                    to[at] = from[at].clone();
                    bits &= bits - 1;
                }
            }
        }
        (mine.chunks, theirs.chunks) = (my_chunks, their_chunks);
        mine.clear(N);
        theirs.clear(N);
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
    fn writes_many_times_the_vector_long_are_synced_each_once() {
        let mut source = filled(8);
        let mut mirror = source.mirror();
        for i in 0..100 {
            *source.get_mut(i % 3) = i64::from(i);
            *mirror.get_mut(4 + i % 2) = -1;
        }
        assert!(mirror.sync_from(&mut source));
        assert_eq!(elements(&mirror), vec![99, 97, 98, 3, 4, 5, 6, 7]);
        assert!(mirror
            .written
            .as_ref()
            .is_some_and(|written| written.chunks.is_empty() && written.bits.iter().all(|&bits| bits == 0)));
        assert!(!source.clone().mirror().sync_from(&mut source.clone())); // a plain copy marks nothing
    }

    #[test]
    fn a_chunk_of_more_than_64_elements_is_synced_by_every_word_of_its_bits() {
        let mut source: CowVec<i64, 130> = CowVec::new();
        source.grow();
        source.grow();
        let mut mirror = source.mirror();
        for i in [0, 63, 64, 127, 128, 129, 200, 259] {
            *source.get_mut(i) = i64::from(i) + 1;
        }
        *mirror.get_mut(65) = -1;
        assert!(mirror.sync_from(&mut source));
        assert_eq!(
            (0..260).map(|i| *mirror.get(i)).collect::<Vec<_>>(),
            (0..260).map(|i| *source.get(i)).collect::<Vec<_>>()
        );
    }
}
