//! The paged KV block manager of one client, with vLLM V1's prefix cache: [`BlockManager`].
//!
//! Capacity is a number of blocks of `block_size` tokens. A sequence (a Python
//! `cosim.hub.sim.scheduling.Sequence`) holds the blocks of the tokens it has computed: first the
//! *cached* blocks it shares through the cache (`seq.cached`, counted in `seq.prefix_blocks`),
//! then blocks of its own (`seq.num_blocks`). The manager reads and writes those attributes.
//!
//! With prefix caching on, the pool behaves as vLLM V1's block pool:
//!
//! - a full block is known by the hash of its tokens and its parent's (Python's `block_hash`
//!   module, registered with [`crate::set_block_hasher`]) and is cached as soon as it is
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

use pyo3::exceptions::{PyKeyError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::intern;

use crate::hasher::block_hashes;
use crate::key::Key;
use crate::pool::BlockPool;

/// Blocks needed to hold `num_tokens` tokens (Python's `-(-n // size)`).
pub fn ceil_div(num_tokens: i64, block_size: i64) -> i64 {
    -((-num_tokens).div_euclid(block_size))
}

fn get(seq: &Bound<'_, PyAny>, name: &Bound<'_, pyo3::types::PyString>) -> PyResult<i64> {
    seq.getattr(name)?.extract()
}

fn keys_of(list: &Bound<'_, PyAny>) -> PyResult<Vec<Key>> {
    list.try_iter()?.map(|item| Key::from_py(&item?)).collect()
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
    block_size: i64,
    pool: BlockPool,
}

#[pymethods]
impl BlockManager {
    #[new]
    #[pyo3(signature = (num_blocks, block_size, *, enable_prefix_caching = false))]
    fn new(num_blocks: i64, block_size: i64, enable_prefix_caching: bool) -> PyResult<Self> {
        if block_size <= 0 {
            return Err(pyo3::exceptions::PyValueError::new_err(format!("block_size {block_size} is not positive")));
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
    fn num_free(&self) -> i64 {
        self.pool.num_free
    }

    /// Blocks held by sequences.
    #[getter]
    fn num_used(&self) -> i64 {
        self.pool.num_blocks - self.pool.num_free
    }

    /// Whether blocks are cached by content.
    #[getter]
    fn enable_prefix_caching(&self) -> bool {
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
    fn blocks_needed(&self, seq: &Bound<'_, PyAny>, num_new_tokens: i64) -> PyResult<i64> {
        let py = seq.py();
        let total = ceil_div(get(seq, intern!(py, "num_computed"))? + num_new_tokens, self.block_size);
        Ok((total - get(seq, intern!(py, "num_blocks"))? - get(seq, intern!(py, "prefix_blocks"))?).max(0))
    }

    /// The cached blocks holding the longest run of `seq`'s leading tokens, for a sequence that
    /// holds no KV (whole blocks; at least one token is always left to compute, as vLLM does).
    /// Nothing is taken until :meth:`allocate`.
    ///
    /// A sequence whose whole prompt is computed elsewhere (a disaggregated decode: its KV comes
    /// over the network) may hit its prompt's blocks too, all but the prompt's last token, as
    /// vLLM's decode instance looks up its own cache before pulling the rest.
    fn cache_hit<'py>(&self, seq: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let py = seq.py();
        let hit = PyList::empty(py);
        if !self.pool.caching || get(seq, intern!(py, "num_blocks"))? != 0 || get(seq, intern!(py, "prefix_blocks"))? != 0
            || seq.getattr(intern!(py, "state"))?.eq(intern!(py, "swapped"))?
        {
            return Ok(hit);
        }
        let computed = get(seq, intern!(py, "num_computed"))?;
        let prompt = get(seq, intern!(py, "prompt_tokens"))?;
        let most = if computed == 0 {
            (get(seq, intern!(py, "num_tokens"))? - 1).div_euclid(self.block_size)
        } else if computed >= prompt {
            (prompt - 1).div_euclid(self.block_size)
        } else {
            return Ok(hit); // part of a prompt retrieved from a KV store: the rest is computed after it
        };
        // walk the chain while it hits, hashing it further where the sequence has not yet: ahead in
        // doubling chunks, not a block per call (a long prompt's ids cost a slice per call)
        let mut chain = seq.getattr(intern!(py, "block_hashes"))?.downcast_into::<PyList>()?;
        for i in 0..most {
            if i >= chain.len() as i64 {
                chain = block_hashes(seq, most.min(i + i.max(16)), self.block_size)?;
            }
            let block = chain.get_item(i as usize)?;
            if !self.pool.is_cached(&Key::from_py(&block)?) {
                break;
            }
            hit.append(block)?;
        }
        Ok(hit)
    }

    /// Whether :meth:`allocate` can give `seq` the cached blocks `hit` and the blocks for
    /// `num_new_tokens` more tokens after them (a hit block nobody holds is one of the free).
    #[pyo3(signature = (seq, num_new_tokens, hit = None))]
    fn fits(&self, seq: &Bound<'_, PyAny>, num_new_tokens: i64, hit: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let hit = match hit {
            Some(hit) if hit.is_truthy()? => keys_of(hit)?,
            _ => return Ok(self.blocks_needed(seq, num_new_tokens)? <= self.pool.num_free),
        };
        let needed = ceil_div(self.computed_with(seq, hit.len())? + num_new_tokens, self.block_size) - hit.len() as i64;
        Ok(needed + self.pool.unheld(&hit).map_err(missing)? <= self.pool.num_free)
    }

    /// Gives `seq` the cached blocks `hit` (from :meth:`cache_hit`) and the blocks it needs to
    /// compute `num_new_tokens` more tokens after them, as vLLM's `allocate_slots`; False,
    /// changing nothing, if they cannot be had.
    #[pyo3(signature = (seq, num_new_tokens, hit = None))]
    fn allocate(&mut self, seq: &Bound<'_, PyAny>, num_new_tokens: i64, hit: Option<&Bound<'_, PyAny>>)
        -> PyResult<bool> {
        let py = seq.py();
        let needed = match hit {
            Some(hit) if hit.is_truthy()? => {
                if !self.fits(seq, num_new_tokens, Some(hit))? {
                    return Ok(false);
                }
                let keys = keys_of(hit)?;
                let computed = self.computed_with(seq, keys.len())?;
                seq.setattr(intern!(py, "num_computed"), computed)?;
                self.pool.hold(&keys).map_err(missing)?;
                seq.setattr(intern!(py, "cached"), PyList::new(py, hit.try_iter()?.collect::<PyResult<Vec<_>>>()?)?)?;
                seq.setattr(intern!(py, "prefix_blocks"), keys.len())?;
                ceil_div(computed + num_new_tokens, self.block_size) - keys.len() as i64
            }
            _ => {
                let needed = self.blocks_needed(seq, num_new_tokens)?;
                if needed > self.pool.num_free {
                    return Ok(false);
                }
                needed
            }
        };
        if needed != 0 {
            self.pool.take(needed);
            seq.setattr(intern!(py, "num_blocks"), get(seq, intern!(py, "num_blocks"))? + needed)?;
        }
        if self.pool.caching {
            let upto = (get(seq, intern!(py, "num_computed"))? + num_new_tokens).min(get(seq, intern!(py, "num_tokens"))?);
            self.cache_full_blocks(seq, upto)?;
        }
        Ok(true)
    }

    /// Allocates the blocks `seq` needs for `num_new_tokens` more tokens; False if they cannot be had.
    fn grow(&mut self, seq: &Bound<'_, PyAny>, num_new_tokens: i64) -> PyResult<bool> {
        self.allocate(seq, num_new_tokens, None)
    }

    /// Gives `seq` `num_blocks` more blocks (swap-in); False if they cannot be had.
    fn grow_by(&mut self, seq: &Bound<'_, PyAny>, num_blocks: i64) -> PyResult<bool> {
        if num_blocks > self.pool.num_free {
            return Ok(false);
        }
        self.pool.take(num_blocks);
        let py = seq.py();
        seq.setattr(intern!(py, "num_blocks"), get(seq, intern!(py, "num_blocks"))? + num_blocks)?;
        Ok(true)
    }

    /// Takes `num_blocks` free blocks from the free queue's head, evicting the cached ones among
    /// them (the caller checked there are enough; a decode run credits them later).
    fn take(&mut self, num_blocks: i64) {
        self.pool.take(num_blocks);
    }

    /// Frees a sequence's blocks (finished, preempted, or swapped out). With prefix caching its
    /// full blocks stay cached, and join the free queue after its tail, as vLLM frees a request's
    /// blocks in reverse order.
    fn release(&mut self, seq: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = seq.py();
        if self.pool.caching {
            self.cache_full_blocks(seq, get(seq, intern!(py, "num_computed"))?)?;
        }
        let own = get(seq, intern!(py, "num_blocks"))?;
        if own != 0 {
            self.pool.free_blocks(own);
        }
        let cached = seq.getattr(intern!(py, "cached"))?;
        if cached.is_truthy()? {
            let mut keys = keys_of(&cached)?;
            keys.reverse();
            self.pool.let_go(&keys).map_err(missing)?;
        }
        seq.setattr(intern!(py, "num_blocks"), 0)?;
        seq.setattr(intern!(py, "prefix_blocks"), 0)?;
        seq.setattr(intern!(py, "cached"), PyList::empty(py))?;
        Ok(())
    }

    /// Lets `children` share the parent's full prompt blocks (multi-path reasoning, as vLLM's
    /// parallel sampling shares a prompt through the prefix cache); each releases its reference
    /// when it finishes.
    #[pyo3(signature = (parent, children, *, prompt_tokens))]
    fn fork(&mut self, parent: &Bound<'_, PyAny>, children: &Bound<'_, PyList>, prompt_tokens: i64) -> PyResult<()> {
        let py = parent.py();
        let full = prompt_tokens.div_euclid(self.block_size);
        self.cache_full_blocks(parent, full * self.block_size)?;
        let cached = parent.getattr(intern!(py, "cached"))?.downcast_into::<PyList>()?;
        let shared = cached.get_slice(0, usize::try_from(full).unwrap_or(0));
        self.pool.share(&keys_of(&shared)?, children.len() as i64).map_err(missing)?;
        for child in children.iter() {
            child.setattr(intern!(py, "cached"), PyList::new(py, shared.iter())?)?;
            child.setattr(intern!(py, "prefix_blocks"), shared.len())?;
        }
        Ok(())
    }

    /// Turns `seq`'s own full blocks within its first `num_tokens` tokens into cached blocks; a
    /// block someone cached already is shared instead, and `seq`'s copy freed.
    fn cache_full_blocks(&mut self, seq: &Bound<'_, PyAny>, num_tokens: i64) -> PyResult<()> {
        let py = seq.py();
        let start = get(seq, intern!(py, "prefix_blocks"))?;
        let own = get(seq, intern!(py, "num_blocks"))?;
        let full = num_tokens.div_euclid(self.block_size).min(start + own);
        if full <= start {
            return Ok(());
        }
        let cached = seq.getattr(intern!(py, "cached"))?.downcast_into::<PyList>()?;
        let keys: Vec<Key> = if self.pool.caching {
            let chain = block_hashes(seq, full, self.block_size)?;
            let new = chain.get_slice(start as usize, full as usize);
            for block in new.iter() {
                cached.append(block)?;
            }
            keys_of(&new)?
        } else {
            // shared by forks, never found by content
            let keys: Vec<Key> = self.pool.new_ids(full - start).map(Key::Id).collect();
            for key in &keys {
                cached.append(key.to_py(py)?)?;
            }
            keys
        };
        seq.setattr(intern!(py, "num_blocks"), own - keys.len() as i64)?;
        seq.setattr(intern!(py, "prefix_blocks"), full)?;
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
        format!("BlockManager({} blocks of {}, {} free, prefix caching {})", self.pool.num_blocks, self.block_size,
                self.pool.num_free, if self.pool.caching { "on" } else { "off" })
    }
}

impl BlockManager {
    /// Tokens `seq` has computed once it holds `hit` cached blocks (a transferred prompt was
    /// computed already: the hit only spares its blocks).
    fn computed_with(&self, seq: &Bound<'_, PyAny>, hit: usize) -> PyResult<i64> {
        Ok(get(seq, intern!(seq.py(), "num_computed"))?.max(hit as i64 * self.block_size))
    }
}
