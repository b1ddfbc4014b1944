"""What a sequence's KV blocks hold, by content: vLLM V1's block hash chain.

vLLM identifies a full block of ``block_size`` tokens by a hash of its parent
block's hash and its own token ids, so two requests share a cached block
exactly when all their tokens up to the end of that block are the same.
cosim hashes the same way (SHA-256, as vLLM's default ``sha256`` prefix-caching
hash) over the tokens a request has:

- prompt tokens are the trace's token ids where it has them
  (:attr:`~cosim.hub.sim.records.RequestRecord.prompt_token_ids`); otherwise they
  are synthesized: the first ``prefix_tokens`` are those of the declared shared
  prefix (identical across requests naming it), the rest unique to the request;
- generated tokens are unique to the sequence (one reasoning branch of one
  stage, known by its admission order on the client), so they are found again
  only by the sequence itself (after a preemption); except a session turn's
  (:attr:`~cosim.hub.sim.records.RequestRecord.output_token_ids`), whose ids the
  next turn's prompt repeats, so that it finds them in the cache, as vLLM
  finds a multi-turn chat's history.

Hashes are computed once per sequence, as far as they are asked for, and a
declared prefix's blocks once per process: every request naming it starts
with the same chain.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator

import numpy as np
from cosim_core import Sequence

ROOT = b"cosim-kv-root"  # the parent hash of a sequence's first block

# The chain of a declared prefix's full blocks, by (prefix, block size): the same for every request
# naming it, in every run (a pure function of its name), so hashed once per process; the most
# recently used MAX_PREFIX_CHAINS are kept (a workload may declare up to a million prefixes).
_PREFIX_CHAINS: OrderedDict[tuple[str, int], list[bytes]] = OrderedDict()
MAX_PREFIX_CHAINS = 256


def block_hashes(seq: Sequence, num_blocks: int, block_size: int) -> list[bytes]:
    """The hashes of ``seq``'s first ``num_blocks`` full blocks (a list it keeps and extends)."""
    chain = seq.block_hashes
    if len(chain) < num_blocks:
        if not chain and seq.prefix_id is not None and seq.request.prompt_token_ids is None:
            # the whole prefix at once: the cache's lookups ask for one more block at a time
            chain += _prefix_chain(seq.prefix_id, min(seq.request.prefix_tokens, seq.prompt_tokens) // block_size,
                                   block_size)
        parent = chain[-1] if chain else ROOT
        first = len(chain)
        contents = (_synthesized if seq.request.prompt_token_ids is None else _with_ids)(seq, first, num_blocks,
                                                                                          block_size)
        sha256 = hashlib.sha256
        for content in contents:
            parent = sha256(parent + content).digest()
            chain.append(parent)
    return chain


def _with_ids(seq: Sequence, first: int, num_blocks: int, block_size: int) -> Iterator[bytes]:
    """:func:`_content` of blocks ``first`` to ``num_blocks`` of a sequence whose prompt has token ids:
    the prompt's full blocks sliced from one array."""
    ids = _prompt_ids(seq, first * block_size, num_blocks * block_size)
    for i in range(first, num_blocks):
        if ids is not None and (i + 1) * block_size <= seq.prompt_tokens:  # the same bytes as _content's
            yield ids[(i - first) * block_size:(i + 1 - first) * block_size].tobytes()
        else:
            yield _content(seq, i * block_size, (i + 1) * block_size)


def _synthesized(seq: Sequence, first: int, num_blocks: int, block_size: int) -> Iterator[bytes]:
    """:func:`_content` of blocks ``first`` to ``num_blocks`` of a sequence whose prompt has no token
    ids: the same bytes, with what every block reads looked up once (a request's blocks are
    hashed by the hundred thousand). A block whose content is not one synthesized part (it straddles
    the prompt's end or the prefix's, or holds a session turn's output ids) is :func:`_content`'s."""
    request = seq.request
    prompt, rid = seq.prompt_tokens, request.id
    shared = request.prefix_tokens if seq.prefix_id is not None else 0
    outputs = request.output_token_ids is not None and request.branches == 1
    generated = f"generated {rid}#{seq.order} "
    for start in range(first * block_size, num_blocks * block_size, block_size):
        stop = start + block_size
        if shared <= start and stop <= prompt:
            yield f"request {rid} {start}:{stop};".encode()
        elif prompt <= start and not outputs:
            yield f"{generated}{start}:{stop};".encode()
        else:
            yield _content(seq, start, stop)


def _prompt_ids(seq: Sequence, start: int, stop: int) -> np.ndarray | None:
    """The prompt's token ids ``start:stop`` (cut to the prompt) in one slice, where it has ids
    covering them: one call instead of one per block (a long synthesized prompt's ids cost a
    search per call)."""
    ids = seq.request.prompt_token_ids
    end = min(stop, seq.prompt_tokens)
    if ids is None or end <= start or end > len(ids):
        return None
    return np.asarray(ids[start:end], dtype=np.int64)


def _prefix_chain(prefix_id: str, num_blocks: int, block_size: int) -> list[bytes]:
    """The hashes of the first ``num_blocks`` full blocks of declared prefix ``prefix_id``."""
    key = (prefix_id, block_size)
    chain = _PREFIX_CHAINS.get(key)
    if chain is None:
        chain = _PREFIX_CHAINS[key] = []
        if len(_PREFIX_CHAINS) > MAX_PREFIX_CHAINS:
            _PREFIX_CHAINS.popitem(last=False)
    _PREFIX_CHAINS.move_to_end(key)
    for i in range(len(chain), num_blocks):
        content = _prefix_content(prefix_id, i * block_size, (i + 1) * block_size)
        chain.append(hashlib.sha256((chain[-1] if chain else ROOT) + content).digest())
    return chain[:num_blocks]


def _prefix_content(prefix_id: str, start: int, stop: int) -> bytes:
    return f"prefix {prefix_id} {start}:{stop};".encode()


def _content(seq: Sequence, start: int, stop: int) -> bytes:
    """The tokens ``start:stop`` of ``seq``, as bytes that are equal exactly when the tokens are."""
    request = seq.request
    prompt = seq.prompt_tokens
    parts = []
    if start < prompt:
        end = min(stop, prompt)
        ids = request.prompt_token_ids
        if ids is not None and end <= len(ids):
            parts.append(np.asarray(ids[start:end], dtype=np.int64).tobytes())
        else:
            prefix = seq.prefix_id
            shared = request.prefix_tokens if prefix is not None else 0
            if prefix is not None and start < shared:
                parts.append(_prefix_content(prefix, start, min(end, shared)))
            if end > shared:
                parts.append(f"request {request.id} {max(start, shared)}:{end};".encode())
    if stop > prompt:
        out = request.output_token_ids
        first = max(start, prompt)
        if out is not None and request.branches == 1 and stop - prompt <= len(out):
            # a session turn's output, which its next turn's prompt repeats: the same ids, the same blocks
            parts.append(np.asarray(out[first - prompt:stop - prompt], dtype=np.int64).tobytes())
        else:
            parts.append(f"generated {request.id}#{seq.order} {first}:{stop};".encode())
    return b"".join(parts)
