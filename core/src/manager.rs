//! The paged KV block manager of one client, with vLLM V1's prefix cache: [`BlockManager`].
//!
//! Capacity is a number of blocks of `block_size` tokens. A sequence ([`Sequence`]) holds the
//! blocks of the tokens it has computed: first the *cached* blocks it shares through the cache
//! (`cached`, counted in `prefix_blocks`), then blocks of its own (`num_blocks`). The manager
//! reads and writes those fields (the scheduler calls it on Rust data; Python through the same
//! methods).
//!
//! With prefix caching on, the pool behaves as vLLM V1's block pool:
//!
//! - a full block is known by the hash of its tokens and its parent's ([`crate::hasher`]) and is
//!   cached as soon as it is
//!   allocated for computing (vLLM caches blocks in `allocate_slots`, before the step runs), so a
//!   request admitted later, in the same step or after, reuses it;
//! - a sequence being admitted reuses the longest run of cached blocks that match its leading
//!   tokens, all but its last token at most ([`BlockManager::cache_hit`]);
//! - blocks freed by finished or preempted sequences keep their hashes and join the free queue's
//!   tail, a sequence's tail block first; allocation takes from the queue's head, evicting the
//!   cached blocks it takes (LRU). A preempted sequence readmitted gets back whatever of its
//!   blocks was not evicted.
//!
//! Free blocks, the evictable cached ones included, are `num_free` (vLLM's count). Multi-path
//! reasoning branches share their parent's prompt blocks through the same reference counts, with
//! or without prefix caching.

use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::hasher;
use crate::key::Key;
use crate::pool::BlockPool;
use crate::sequence::{Sequence, State};

/// Blocks needed to hold `num_tokens` tokens (Python's `-(-n // size)`).
pub fn ceil_div(num_tokens: i64, block_size: i64) -> i64 {
    -((-num_tokens).div_euclid(block_size))
}

fn keys_of(list: &Bound<'_, PyAny>) -> PyResult<Vec<Key>> {
    list.try_iter()?.map(|item| Key::from_py(&item?)).collect()
}

fn hit_keys(hit: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Key>> {
    match hit {
        Some(hit) if hit.is_truthy()? => keys_of(hit),
        _ => Ok(Vec::new()),
    }
}

/// The Python list of `keys`.
pub fn keys_list<'py>(py: Python<'py>, keys: &[Key]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, keys.iter().map(|key| key.to_py(py)).collect::<PyResult<Vec<_>>>()?)
}

fn missing(key: Key) -> PyErr {
    PyKeyError::new_err(format!("block {key:?} is not cached"))
}

/// Counts free blocks, and with prefix caching keeps vLLM's cached blocks and free queue (see
/// the module).
#[pyclass(module = "cosim_core")]
#[derive(Clone)]
pub struct BlockManager {
    /// Tokens per block.
    #[pyo3(get)]
    pub block_size: i64,
    pool: BlockPool,
}

#[pymethods]
impl BlockManager {
    #[new]
    #[pyo3(signature = (num_blocks, block_size, *, enable_prefix_caching = false))]
    fn new(num_blocks: i64, block_size: i64, enable_prefix_caching: bool) -> PyResult<Self> {
        if block_size <= 0 {
            return Err(PyValueError::new_err(format!("block_size {block_size} is not positive")));
        }
        Ok(BlockManager { block_size, pool: BlockPool::new(num_blocks, enable_prefix_caching) })
    }

    /// Capacity in blocks.
    #[getter]
    fn num_blocks(&self) -> i64 {
        self.pool.num_blocks
    }

    /// Blocks no sequence holds (cached ones nobody uses included).
    #[getter]
    pub fn num_free(&self) -> i64 {
        self.pool.num_free
    }

    /// Blocks held by sequences.
    #[getter]
    pub fn num_used(&self) -> i64 {
        self.pool.num_blocks - self.pool.num_free
    }

    /// Whether blocks are cached by content.
    #[getter]
    pub fn enable_prefix_caching(&self) -> bool {
        self.pool.caching
    }

    /// An independent copy (lookahead schedules on it): the cached blocks' maps are shared
    /// shard by shard until either side writes them.
    fn copy(&self) -> Self {
        self.clone()
    }

    fn __copy__(&self) -> Self {
        self.clone()
    }

    /// Extra blocks `seq` needs to compute `num_new_tokens` more tokens.
    fn blocks_needed(&self, seq: PyRef<'_, Sequence>, num_new_tokens: i64) -> i64 {
        self.needed(&seq, num_new_tokens)
    }

    /// The cached blocks holding the longest run of `seq`'s leading tokens, for a sequence that
    /// holds no KV (whole blocks; at least one token is always left to compute, as vLLM does).
    /// Nothing is taken until :meth:`allocate`.
    ///
    /// A sequence whose whole prompt is computed elsewhere (a disaggregated decode: its KV comes
    /// over the network) may hit its prompt's blocks too, all but the prompt's last token, as
    /// vLLM's decode instance looks up its own cache before pulling the rest.
    fn cache_hit<'py>(&self, seq: &Bound<'py, Sequence>) -> PyResult<Bound<'py, PyList>> {
        keys_list(seq.py(), &self.hit(seq)?)
    }

    /// The tokens of :meth:`cache_hit`'s blocks (a router's or a transfer's count, with no list of keys).
    fn cached_tokens(&self, seq: &Bound<'_, Sequence>) -> PyResult<i64> {
        Ok(self.hit(seq)?.len() as i64 * self.block_size)
    }

    /// Whether :meth:`allocate` can give `seq` the cached blocks `hit` and the blocks for
    /// `num_new_tokens` more tokens after them (a hit block nobody holds is one of the free).
    #[pyo3(signature = (seq, num_new_tokens, hit = None))]
    fn fits(&self, seq: PyRef<'_, Sequence>, num_new_tokens: i64, hit: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        self.fits_with(&seq, num_new_tokens, &hit_keys(hit)?)
    }

    /// Gives `seq` the cached blocks `hit` (from :meth:`cache_hit`) and the blocks it needs to
    /// compute `num_new_tokens` more tokens after them, as vLLM's `allocate_slots`; False,
    /// changing nothing, if they cannot be had.
    #[pyo3(signature = (seq, num_new_tokens, hit = None))]
    fn allocate(
        &mut self,
        seq: &Bound<'_, Sequence>,
        num_new_tokens: i64,
        hit: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.allocate_with(seq, num_new_tokens, &hit_keys(hit)?)
    }

    /// Allocates the blocks `seq` needs for `num_new_tokens` more tokens; False if they cannot be had.
    pub fn grow(&mut self, seq: &Bound<'_, Sequence>, num_new_tokens: i64) -> PyResult<bool> {
        self.allocate_with(seq, num_new_tokens, &[])
    }

    /// Gives `seq` `num_blocks` more blocks (swap-in); False if they cannot be had.
    fn grow_by(&mut self, mut seq: PyRefMut<'_, Sequence>, num_blocks: i64) -> bool {
        self.grow_seq_by(&mut seq, num_blocks)
    }

    /// Takes `num_blocks` free blocks from the free queue's head, evicting the cached ones among
    /// them (the caller checked there are enough; a decode run credits them later).
    pub fn take(&mut self, num_blocks: i64) {
        self.pool.take(num_blocks);
    }

    /// Frees a sequence's blocks (finished, preempted, or swapped out). With prefix caching its
    /// full blocks stay cached, and join the free queue after its tail, as vLLM frees a request's
    /// blocks in reverse order.
    pub fn release(&mut self, seq: &Bound<'_, Sequence>) -> PyResult<()> {
        if self.pool.caching {
            let computed = seq.borrow().num_computed;
            self.cache_full_blocks(seq, computed)?;
        }
        let mut s = seq.borrow_mut();
        if s.num_blocks != 0 {
            self.pool.free_blocks(s.num_blocks);
        }
        if !s.cached.is_empty() {
            let mut keys = std::mem::take(&mut s.cached);
            keys.reverse();
            self.pool.let_go(&keys).map_err(missing)?;
        }
        s.num_blocks = 0;
        s.prefix_blocks = 0;
        Ok(())
    }

    /// Lets `children` share the parent's full prompt blocks (multi-path reasoning, as vLLM's
    /// parallel sampling shares a prompt through the prefix cache); each releases its reference
    /// when it finishes.
    #[pyo3(signature = (parent, children, *, prompt_tokens))]
    pub fn fork(
        &mut self,
        parent: &Bound<'_, Sequence>,
        children: Vec<Bound<'_, Sequence>>,
        prompt_tokens: i64,
    ) -> PyResult<()> {
        let full = prompt_tokens.div_euclid(self.block_size);
        self.cache_full_blocks(parent, full * self.block_size)?;
        let shared: Vec<Key> = {
            let p = parent.borrow();
            p.cached[..usize::try_from(full).unwrap_or(0).min(p.cached.len())].to_vec()
        };
        self.pool.share(&shared, children.len() as i64).map_err(missing)?;
        for child in &children {
            let mut c = child.borrow_mut();
            c.cached = shared.clone();
            c.prefix_blocks = shared.len() as i64;
        }
        Ok(())
    }

    /// Turns `seq`'s own full blocks within its first `num_tokens` tokens into cached blocks; a
    /// block someone cached already is shared instead, and `seq`'s copy freed.
    pub fn cache_full_blocks(&mut self, seq: &Bound<'_, Sequence>, num_tokens: i64) -> PyResult<()> {
        let (start, own) = {
            let s = seq.borrow();
            (s.prefix_blocks, s.num_blocks)
        };
        let full = num_tokens.div_euclid(self.block_size).min(start + own);
        if full <= start {
            return Ok(());
        }
        let keys: Vec<Key> = if self.pool.caching {
            let s = seq.borrow();
            let mut chain = s.chain.lock();
            hasher::extend(seq.py(), &s, &mut chain, full, self.block_size)?;
            chain[start as usize..full as usize].iter().map(|hash| Key::Hash(*hash)).collect()
        } else {
            // shared by forks, never found by content
            self.pool.new_ids(full - start).map(Key::Id).collect()
        };
        {
            let mut s = seq.borrow_mut();
            s.cached.extend_from_slice(&keys);
            s.num_blocks = own - keys.len() as i64;
            s.prefix_blocks = full;
        }
        self.pool.cache(&keys);
        Ok(())
    }

    /// Holder counts of the cached (or fork-shared) blocks, in no particular order (for checks).
    fn holder_counts(&self) -> Vec<i64> {
        self.pool.holder_counts()
    }

    /// Blocks of each free queue entry, head first; empty without prefix caching (for checks).
    fn free_queue_blocks(&self) -> Vec<i64> {
        self.pool.free_queue_blocks()
    }

    /// Raises RuntimeError if the pool's invariants do not hold (counts, links, free queue).
    fn check(&self) -> PyResult<()> {
        self.pool.check().map_err(PyRuntimeError::new_err)
    }

    fn __repr__(&self) -> String {
        format!(
            "BlockManager({} blocks of {}, {} free, prefix caching {})",
            self.pool.num_blocks,
            self.block_size,
            self.pool.num_free,
            if self.pool.caching { "on" } else { "off" }
        )
    }
}

impl BlockManager {
    /// Makes `mirror` an independent copy of this manager, bringing a mirror made here before up
    /// to date by what changed since ([`BlockPool::mirror_into`]).
    pub fn mirror_into(&mut self, mirror: &mut BlockManager) {
        mirror.block_size = self.block_size;
        self.pool.mirror_into(&mut mirror.pool);
    }

    /// Extra blocks `seq` needs to compute `num_new_tokens` more tokens.
    #[inline]
    pub fn needed(&self, seq: &Sequence, num_new_tokens: i64) -> i64 {
        (ceil_div(seq.num_computed + num_new_tokens, self.block_size) - seq.num_blocks - seq.prefix_blocks).max(0)
    }

    /// Tokens `seq` has computed once it holds `hit` cached blocks (a transferred prompt was
    /// computed already: the hit only spares its blocks).
    fn computed_with(&self, seq: &Sequence, hit: usize) -> i64 {
        seq.num_computed.max(hit as i64 * self.block_size)
    }

    /// :meth:`cache_hit`'s blocks.
    pub fn hit(&self, seq: &Bound<'_, Sequence>) -> PyResult<Vec<Key>> {
        let mut hit = Vec::new();
        let s = seq.borrow();
        if !self.pool.caching || s.num_blocks != 0 || s.prefix_blocks != 0 || s.state == State::Swapped {
            return Ok(hit);
        }
        let most = if s.num_computed == 0 {
            (s.num_tokens - 1).div_euclid(self.block_size)
        } else if s.num_computed >= s.prompt_tokens {
            (s.prompt_tokens - 1).div_euclid(self.block_size)
        } else {
            return Ok(hit); // part of a prompt retrieved from a KV store: the rest is computed after it
        };
        // walk the chain while it hits, hashing it further where the sequence has not yet: ahead in
        // doubling chunks, not a block at a time (a long prompt's ids cost a slice per extension)
        let mut chain = s.chain.lock();
        for i in 0..most {
            if i >= chain.len() as i64 {
                hasher::extend(seq.py(), &s, &mut chain, most.min(i + i.max(16)), self.block_size)?;
            }
            let key = Key::Hash(chain[i as usize]);
            if !self.pool.is_cached(&key) {
                break;
            }
            hit.push(key);
        }
        Ok(hit)
    }

    /// :meth:`fits`, with the hit as keys.
    pub fn fits_with(&self, seq: &Sequence, num_new_tokens: i64, hit: &[Key]) -> PyResult<bool> {
        if hit.is_empty() {
            return Ok(self.needed(seq, num_new_tokens) <= self.pool.num_free);
        }
        let needed = ceil_div(self.computed_with(seq, hit.len()) + num_new_tokens, self.block_size) - hit.len() as i64;
        Ok(needed + self.pool.unheld(hit).map_err(missing)? <= self.pool.num_free)
    }

    /// :meth:`allocate`, with the hit as keys.
    pub fn allocate_with(&mut self, seq: &Bound<'_, Sequence>, num_new_tokens: i64, hit: &[Key]) -> PyResult<bool> {
        let upto = {
            let mut s = seq.borrow_mut();
            let needed = if !hit.is_empty() {
                if !self.fits_with(&s, num_new_tokens, hit)? {
                    return Ok(false);
                }
                let computed = self.computed_with(&s, hit.len());
                self.pool.hold(hit).map_err(missing)?;
                s.num_computed = computed;
                s.cached = hit.to_vec();
                s.prefix_blocks = hit.len() as i64;
                ceil_div(computed + num_new_tokens, self.block_size) - hit.len() as i64
            } else {
                let needed = self.needed(&s, num_new_tokens);
                if needed > self.pool.num_free {
                    return Ok(false);
                }
                needed
            };
            if needed != 0 {
                self.pool.take(needed);
                s.num_blocks += needed;
            }
            (s.num_computed + num_new_tokens).min(s.num_tokens)
        };
        if self.pool.caching {
            self.cache_full_blocks(seq, upto)?;
        }
        Ok(true)
    }

    /// :meth:`grow_by` on Rust data.
    pub fn grow_seq_by(&mut self, seq: &mut Sequence, num_blocks: i64) -> bool {
        if num_blocks > self.pool.num_free {
            return false;
        }
        self.pool.take(num_blocks);
        seq.num_blocks += num_blocks;
        true
    }
}
