//! What a sequence's KV blocks hold, by content: vLLM V1's block hash chain.
//!
//! vLLM identifies a full block of `block_size` tokens by a hash of its parent block's hash and its
//! own token ids, so two requests share a cached block exactly when all their tokens up to the end
//! of that block are the same. cosim hashes the same way (SHA-256, as vLLM's default `sha256`
//! prefix-caching hash) over the tokens a request has, as bytes that are equal exactly when the
//! tokens are (a block's *content*, [`Blocks::content`]):
//!
//! - prompt tokens are the trace's token ids (`RequestRecord.prompt_token_ids`, as int64
//!   little-endian bytes) where it has them; otherwise they are synthesized: the first
//!   `prefix_tokens` are those of the declared shared prefix (`prefix {prefix_id} {start}:{stop};`,
//!   identical across requests naming it), the rest unique to the request
//!   (`request {id} {start}:{stop};`);
//! - generated tokens are unique to the sequence (one reasoning branch of one stage, known by its
//!   admission order on the client: `generated {id}#{order} {start}:{stop};`), so they are found
//!   again only by the sequence itself (after a preemption); except a session turn's
//!   (`RequestRecord.output_token_ids`), whose ids the next turn's prompt repeats, so that it finds
//!   them in the cache, as vLLM finds a multi-turn chat's history.
//!
//! Hashes are computed once per sequence, as far as they are asked for (a [`Chain`] its copies
//! share: the chain is a pure function of the sequence), and a declared prefix's blocks once per
//! process: every request naming it starts with the same chain.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict, PyList, PySlice};
use sha2::{Digest, Sha256};

use crate::key::HASH_BYTES;
use crate::records::RequestRecord;
use crate::sequence::Sequence;
use crate::text::decimal_digits;

/// A full block's hash.
pub type BlockHash = [u8; HASH_BYTES];

/// The parent hash of a sequence's first block.
pub const ROOT: &[u8] = b"cosim-kv-root";

/// Declared prefixes whose chains are kept (a workload may declare up to a million): the most
/// recently used.
const MAX_PREFIX_CHAINS: usize = 256;

/// A sequence's block hashes as far as hashed, shared by its copies (lookahead clones hash what
/// the sequence itself would).
#[derive(Clone, Default)]
pub struct Chain(Arc<Mutex<Vec<BlockHash>>>);

impl Chain {
    /// The hashes so far (the lock is never contended: the GIL is held).
    pub fn lock(&self) -> MutexGuard<'_, Vec<BlockHash>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The chain of each declared prefix's full blocks, by (prefix, block size), with when it was
/// last used: the same for every request naming the prefix, in every run (a pure function of
/// its name), so hashed once per process.
#[derive(Default)]
struct PrefixChains {
    chains: HashMap<(String, i64), (u64, Vec<BlockHash>)>,
    clock: u64,
}

static PREFIX_CHAINS: LazyLock<Mutex<PrefixChains>> = LazyLock::new(Mutex::default);

/// `sha256(parent + content)`.
fn chained(parent: &[u8], content: &[u8]) -> BlockHash {
    let mut sha = Sha256::new();
    sha.update(parent);
    sha.update(content);
    sha.finalize().into()
}

/// Appends to `chain` (empty) the hashes of the first `num_blocks` full blocks of declared prefix
/// `prefix`, from the process-wide cache.
fn push_prefix_chain(chain: &mut Vec<BlockHash>, prefix: &str, num_blocks: i64, block_size: i64) {
    let mut cache = PREFIX_CHAINS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    cache.clock += 1;
    let now = cache.clock;
    let key = (prefix.to_owned(), block_size);
    if !cache.chains.contains_key(&key) && cache.chains.len() >= MAX_PREFIX_CHAINS {
        let oldest = cache.chains.iter().min_by_key(|(_, (used, _))| *used).map(|(key, _)| key.clone());
        if let Some(oldest) = oldest {
            cache.chains.remove(&oldest);
        }
    }
    let (used, hashes) = cache.chains.entry(key).or_default();
    *used = now;
    let mut content = Vec::new();
    for i in hashes.len() as i64..num_blocks {
        content.clear();
        write!(content, "prefix {prefix} {}:{};", i * block_size, (i + 1) * block_size).expect("writes to a Vec");
        let hash = chained(hashes.last().map_or(ROOT, |parent| parent.as_slice()), &content);
        hashes.push(hash);
    }
    chain.extend_from_slice(&hashes[..num_blocks.max(0) as usize]);
}

/// `numpy.asarray(ids[start:stop], dtype=numpy.int64).tobytes()`: token ids as a trace gives them
/// (a list, an array, or `SegmentIds`) as int64 bytes in native (little-endian) order.
fn id_bytes(ids: &Bound<'_, PyAny>, start: i64, stop: i64) -> PyResult<Vec<u8>> {
    static AS_INT64: GILOnceCell<(PyObject, PyObject)> = GILOnceCell::new();
    let py = ids.py();
    let (asarray, int64) = AS_INT64.get_or_try_init(py, || -> PyResult<_> {
        let numpy = py.import("numpy")?;
        Ok((numpy.getattr("asarray")?.unbind(), numpy.getattr("int64")?.unbind()))
    })?;
    let part = ids.get_item(PySlice::new(py, start as isize, stop as isize, 1))?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", int64)?;
    let array = asarray.bind(py).call((part,), Some(&kwargs))?;
    Ok(array.call_method0("tobytes")?.downcast_into::<PyBytes>()?.as_bytes().to_vec())
}

/// Appends `n` in decimal, as `write!(out, "{n}")` would, without the formatting machinery: a
/// block's content is written for each block of each request.
fn push_decimal(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(decimal_digits(n.unsigned_abs()).as_str().as_bytes());
}

/// Appends `start:stop;`.
fn push_span(out: &mut Vec<u8>, start: i64, stop: i64) {
    push_decimal(out, start);
    out.push(b':');
    push_decimal(out, stop);
    out.push(b';');
}

/// The content of a request's own prompt tokens `start..stop`: `request {id} {start}:{stop};`.
fn own_prompt(out: &mut Vec<u8>, id: i64, start: i64, stop: i64) {
    out.extend_from_slice(b"request ");
    push_decimal(out, id);
    out.push(b' ');
    push_span(out, start, stop);
}

/// The content of tokens `start..stop` a sequence generated: `generated {id}#{order} {start}:{stop};`.
fn generated(out: &mut Vec<u8>, id: i64, order: i64, start: i64, stop: i64) {
    out.extend_from_slice(b"generated ");
    push_decimal(out, id);
    out.push(b'#');
    push_decimal(out, order);
    out.push(b' ');
    push_span(out, start, stop);
}

/// What one sequence's blocks are made of, read once per extension of its chain.
struct Blocks<'py> {
    id: i64,
    order: i64,
    /// Tokens it did not generate itself.
    prompt: i64,
    /// The declared prefix (as the content names it), where the sequence has one.
    prefix: Option<String>,
    /// Its prompt's leading tokens that are the prefix's (0 without one).
    shared: i64,
    /// The prompt's token ids and their count, where the trace has them.
    prompt_ids: Option<(Bound<'py, PyAny>, i64)>,
    /// A session turn's output ids and their count (the next turn's prompt repeats them).
    output_ids: Option<(Bound<'py, PyAny>, i64)>,
}

impl<'py> Blocks<'py> {
    fn of(py: Python<'py>, seq: &Sequence, request: &RequestRecord) -> PyResult<Self> {
        let prefix =
            seq.prefix_id.as_ref().map(|prefix| prefix.bind(py).str()?.to_str().map(str::to_owned)).transpose()?;
        let with_len = |ids: &Py<PyAny>| -> PyResult<Option<(Bound<'py, PyAny>, i64)>> {
            let ids = ids.bind(py);
            Ok(if ids.is_none() { None } else { Some((ids.clone(), ids.len()? as i64)) })
        };
        Ok(Blocks {
            id: request.id,
            order: seq.order,
            prompt: seq.prompt_tokens,
            shared: if prefix.is_some() { request.prefix_tokens } else { 0 },
            prefix,
            prompt_ids: with_len(&request.prompt_token_ids)?,
            output_ids: if request.branches == 1 { with_len(&request.output_token_ids)? } else { None },
        })
    }

    /// Appends the content of tokens `start..stop` to `out`: the same bytes exactly when the
    /// tokens are (the module's list).
    fn content(&self, start: i64, stop: i64, out: &mut Vec<u8>) -> PyResult<()> {
        let (id, prompt, shared) = (self.id, self.prompt, self.shared);
        if start < prompt {
            let end = stop.min(prompt);
            match &self.prompt_ids {
                Some((ids, len)) if end <= *len => out.extend(id_bytes(ids, start, end)?),
                _ => {
                    if let Some(prefix) = self.prefix.as_ref().filter(|_| start < shared) {
                        write!(out, "prefix {prefix} {start}:{};", end.min(shared))?;
                    }
                    if end > shared {
                        own_prompt(out, id, start.max(shared), end);
                    }
                }
            }
        }
        if stop > prompt {
            let first = start.max(prompt);
            match &self.output_ids {
                Some((ids, len)) if stop - prompt <= *len => out.extend(id_bytes(ids, first - prompt, stop - prompt)?),
                _ => generated(out, id, self.order, first, stop),
            }
        }
        Ok(())
    }

    /// Appends to `chain` the hashes of blocks `chain.len()..num_blocks`: synthesized blocks that
    /// are one part (the request's own prompt tokens, or generated tokens) written directly, a
    /// prompt's ids sliced once for all its full blocks (a long synthesized prompt's ids cost a
    /// search per slice), the rest as [`Blocks::content`].
    fn extend(&self, chain: &mut Vec<BlockHash>, num_blocks: i64, block_size: i64) -> PyResult<()> {
        let first = chain.len() as i64;
        let (prompt, width) = (self.prompt, block_size as usize * 8);
        let ids = match &self.prompt_ids {
            Some((ids, len)) => {
                let (start, end) = (first * block_size, (num_blocks * block_size).min(prompt));
                if end <= start || end > *len {
                    None
                } else {
                    Some(id_bytes(ids, start, end)?)
                }
            }
            None => None,
        };
        chain.reserve((num_blocks - first).max(0) as usize);
        // a block's ids, or its synthesized text (tens of bytes), without growing on each write
        let mut content = Vec::with_capacity(width.max(128));
        for i in first..num_blocks {
            let (start, stop) = (i * block_size, (i + 1) * block_size);
            content.clear();
            if self.prompt_ids.is_some() {
                match &ids {
                    Some(ids) if stop <= prompt => {
                        let from = ((i - first) as usize * width).min(ids.len());
                        content.extend_from_slice(&ids[from..(from + width).min(ids.len())]);
                    }
                    _ => self.content(start, stop, &mut content)?,
                }
            } else if self.shared <= start && stop <= prompt {
                own_prompt(&mut content, self.id, start, stop);
            } else if prompt <= start && self.output_ids.is_none() {
                generated(&mut content, self.id, self.order, start, stop);
            } else {
                self.content(start, stop, &mut content)?;
            }
            let hash = chained(chain.last().map_or(ROOT, |parent| parent.as_slice()), &content);
            chain.push(hash);
        }
        Ok(())
    }
}

/// Hashes `seq`'s first `num_blocks` full blocks of `block_size` tokens into `chain` (its
/// [`Chain`], locked), where it does not hold them yet. A sequence on a declared prefix (no token
/// ids) takes the prefix's whole chain at once: the cache's lookups ask for one more block at a
/// time.
pub fn extend(
    py: Python<'_>,
    seq: &Sequence,
    chain: &mut Vec<BlockHash>,
    num_blocks: i64,
    block_size: i64,
) -> PyResult<()> {
    if chain.len() as i64 >= num_blocks {
        return Ok(());
    }
    let request = seq.request.bind(py).downcast::<RequestRecord>()?.borrow();
    let blocks = Blocks::of(py, seq, &request)?;
    if let (true, Some(prefix), None) = (chain.is_empty(), &blocks.prefix, &blocks.prompt_ids) {
        push_prefix_chain(
            chain,
            prefix,
            request.prefix_tokens.min(seq.prompt_tokens).div_euclid(block_size),
            block_size,
        );
    }
    blocks.extend(chain, num_blocks, block_size)
}

/// The hashes of `seq`'s first `num_blocks` full blocks of `block_size` tokens (hashed where the
/// sequence has not yet; the offload tiers key blocks by them too).
#[pyfunction]
pub fn block_hashes<'py>(seq: &Bound<'py, Sequence>, num_blocks: i64, block_size: i64) -> PyResult<Bound<'py, PyList>> {
    let py = seq.py();
    let s = seq.borrow();
    let mut chain = s.chain.lock();
    extend(py, &s, &mut chain, num_blocks, block_size)?;
    PyList::new(py, chain.iter().take(num_blocks.max(0) as usize).map(|hash| PyBytes::new(py, hash)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix_chain(prefix: &str, num_blocks: i64) -> Vec<BlockHash> {
        let mut chain = Vec::new();
        push_prefix_chain(&mut chain, prefix, num_blocks, 4);
        chain
    }

    #[test]
    fn a_block_hash_is_sha256_of_its_parent_and_content() {
        // sha256(b"cosim-kv-root" + b"prefix p 0:4;"), as Python's hashlib gives it
        let hash = chained(ROOT, b"prefix p 0:4;");
        let hex: String = hash[..8].iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(hex, "ccc5c83d3803a896");
        assert_eq!(prefix_chain("p", 1), vec![hash]);
    }

    #[test]
    fn contents_are_written_as_the_format_strings_would() {
        let values = [0, 1, 9, 10, 99, 255, 1_000, 1_024, 10_000, 123_456_789, -1, -10, -1_024, i64::MAX, i64::MIN];
        for &a in &values {
            for &b in &values {
                let (mut own, mut gen) = (Vec::new(), Vec::new());
                own_prompt(&mut own, a, b, a);
                generated(&mut gen, a, b, b, a);
                assert_eq!(String::from_utf8(own).unwrap(), format!("request {a} {b}:{a};"));
                assert_eq!(String::from_utf8(gen).unwrap(), format!("generated {a}#{b} {b}:{a};"));
            }
        }
    }

    #[test]
    fn prefix_chains_are_kept_for_the_most_recently_used_prefixes_only() {
        let first = prefix_chain("first", 3);
        for i in 0..2 * MAX_PREFIX_CHAINS {
            prefix_chain(&format!("other {i}"), 2);
        }
        let cache = PREFIX_CHAINS.lock().unwrap();
        assert!(cache.chains.len() <= MAX_PREFIX_CHAINS);
        assert!(!cache.chains.contains_key(&("first".to_owned(), 4)));
        drop(cache);
        assert_eq!(prefix_chain("first", 3), first); // hashed again, the same
        assert_eq!(prefix_chain("first", 2), first[..2]);
    }
}
