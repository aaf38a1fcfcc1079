"""Which (query block, key block) pairs the kernels visit: the block ranges of the forward and dQ loops (``key_blocks``)
and of the dK/dV loop (``query_blocks``), run on their own for every block, so that tests and the block-skipping
report (benchmarks/kernel_block_skipping.py) count what the kernels' own loops would load."""

import torch
import triton
import triton.language as tl

from ._args import document_bounds, window_bounds
from ._common import key_blocks, key_end, query_blocks


@triton.jit
def _ranges_kernel(
    DOCB,
    KLEN,
    OUT,
    q_len,
    k_len,
    window_left,
    window_right,
    n_blocks,
    HAS_KLEN: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_DOCS: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    KEY_MAJOR: tl.constexpr,
):
    b = tl.program_id(0)
    block = tl.program_id(1)
    kv_end = key_end(KLEN, 1, b, k_len, HAS_KLEN)
    head = (b, 0, q_len, k_len, kv_end)
    spans = (DOCB, window_left, window_right)
    flags: tl.constexpr = (False, False, CAUSAL, HAS_DOCS, HAS_WINDOW, False, False, False)
    if KEY_MAJOR:
        lo, _, hi = query_blocks(head, block, spans, flags, BLOCK_M, BLOCK_N)
    else:
        lo, _, hi = key_blocks(head, block, spans, flags, BLOCK_M, BLOCK_N)
    out = OUT + (b.to(tl.int64) * n_blocks + block) * 2
    tl.store(out, lo)
    tl.store(out + 1, hi)


def visited(
    batch: int,
    q_len: int,
    k_len: int,
    block_m: int,
    block_n: int,
    *,
    documents=None,
    window_left=None,
    window_right=None,
    causal: bool = False,
    key_lengths=None,
    key_major: bool = False,
    device="cpu",
) -> torch.Tensor:
    """Bool (batch, query blocks, key blocks): the tiles the forward and dQ loops visit (``key_major=False``: each
    query block's key range, stepped by block_n from its start) or the dK/dV loop visits (each key block's query range,
    stepped by block_m). Needs CUDA or TRITON_INTERPRET=1."""
    docb = document_bounds(documents.to(device)) if documents is not None else torch.zeros(1, device=device)
    klen = key_lengths.to(device) if key_lengths is not None else torch.zeros(1, device=device)
    left, right = window_bounds(window_left, window_right, q_len, k_len)
    q_blocks, k_blocks = triton.cdiv(q_len, block_m), triton.cdiv(k_len, block_n)
    n_blocks = k_blocks if key_major else q_blocks
    ranges = torch.empty(batch, n_blocks, 2, dtype=torch.int32, device=device)
    has_window = window_left is not None or window_right is not None
    _ranges_kernel[(batch, n_blocks)](
        docb, klen, ranges, q_len, k_len, left, right, n_blocks, key_lengths is not None, causal,
        documents is not None, has_window, block_m, block_n, key_major,
    )  # fmt: skip
    step, other = (block_m, q_blocks) if key_major else (block_n, k_blocks)
    lo, hi = ranges[..., 0:1].long(), ranges[..., 1:2].long()
    if bool((lo % step != 0).any()):  # the loops start on a block boundary (dropout's keep tiles rely on it)
        raise AssertionError(f"a loop range starts off a block boundary of {step}: {ranges.tolist()}")
    starts = torch.arange(other, device=device) * step  # the loop visits start = lo, lo + step, ... while < hi
    tiles = (starts >= lo) & (starts < hi)
    return tiles.transpose(1, 2) if key_major else tiles
