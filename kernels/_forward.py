"""Forward kernel (FlashAttention-2 online softmax) and its launcher. Stores the logsumexp for the backward."""

import torch
import triton
import triton.language as tl

from . import _grid, _head_dim, _tuning
from ._args import (
    acc_dtype,
    autotuned,
    block_d,
    device_guard,
    eager_launch,
    kernel_constexprs,
    launch,
    side_inputs,
    structure_flags,
    structure_inputs,
    tma_ok,
)
from ._combine import _combine_kernel
from ._common import BLOCKS_DESCENDING, head_ptr, key_blocks, key_end, load_seed, program_tile
from ._online_softmax import softmax_step
from ._pieces import load_tile, over, rows_source, store_tile, times, zeros
from ._structure import load_slope, row_range


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    O,  # noqa: E741  (the output; the kernels name tensors by capital letters)
    LSE,
    MASK,
    KMASK,
    KLEN,
    SEED,
    DOCB,
    SLOPES,
    SINKS,
    s_qb,
    s_qh,
    s_qm,
    s_qd,
    s_kb,
    s_kh,
    s_kn,
    s_kd,
    s_vb,
    s_vh,
    s_vn,
    s_vd,
    s_ob,
    s_oh,
    s_os,
    s_om,
    s_od,
    s_mb,
    s_mh,
    s_mm,
    s_mn,
    s_kmb,
    s_kmn,
    s_klb,
    s_sb,
    s_sh,
    heads,
    group,
    q_len,
    k_len,
    sm_scale,
    dropout_p,
    window_left,
    window_right,
    softcap,
    n_splits,
    split_keys,
    Q_BUCKET,
    K_BUCKET,
    BH_BUCKET,
    HEAD_DIM: tl.constexpr,
    HAS_MASK: tl.constexpr,
    HAS_KMASK: tl.constexpr,
    HAS_KLEN: tl.constexpr,
    CAUSAL: tl.constexpr,
    DROPOUT: tl.constexpr,
    HAS_DOCS: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_ALIBI: tl.constexpr,
    HAS_SINKS: tl.constexpr,
    PRECISION: tl.constexpr,
    SPLIT: tl.constexpr,
    TMA: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_D2: tl.constexpr,
):
    """One program per (batch, head, query block), or with ``SPLIT`` per (batch, head, query block, key split):
    then it attends only keys [split * split_keys, (split + 1) * split_keys) and writes its normalized partial
    output (float32, to O[b, h, split]) and logsumexp (LSE[(b, h), split]) for _combine_kernel (FlashDecoding).
    Tiles are in head-dim pieces (BLOCK_D, and BLOCK_D2 > 0 for a split head dim: kernels/_pieces.py).

    ``HAS_SINKS``: SINKS holds one logit z_h per query head (gpt-oss's attention sinks, docs/moe.md): the online
    softmax starts from the sink, m = z_h and l = 1 (a column of logit z_h whose value is zero), instead of (-inf, 0),
    so the logsumexp includes it; with ``SPLIT`` only split 0 starts from it (the combine adds the splits' sums)."""
    split = tl.program_id(0) % n_splits  # (n_splits is 1 without SPLIT)
    bh, b, h, pid_m, offs_m, cols = program_tile(
        q_len, heads, n_splits, HEAD_DIM, BLOCK_M, BLOCK_D, BLOCK_D2, BLOCKS_DESCENDING * CAUSAL
    )  # causal: longest first
    kv_end = key_end(KLEN, s_klb, b, k_len, HAS_KLEN)
    # TMA: tensor descriptors over this (batch, head)'s rows; else pointers (strides not 16-byte aligned, split-KV)
    q_src = rows_source(head_ptr(Q, b, h, s_qb, s_qh), q_len, s_qm, HEAD_DIM, BLOCK_M, cols, TMA)
    q = load_tile(q_src, pid_m * BLOCK_M, offs_m, cols, s_qm, s_qd, q_len, TMA)
    # grouped-query attention: group query heads per kv head; keys past kv_end read as 0 on both paths
    k_src = rows_source(head_ptr(K, b, h // group, s_kb, s_kh), kv_end, s_kn, HEAD_DIM, BLOCK_N, cols, TMA)
    v_src = rows_source(head_ptr(V, b, h // group, s_vb, s_vh), kv_end, s_vn, HEAD_DIM, BLOCK_N, cols, TMA)

    head = (b, h, q_len, k_len, kv_end)
    spans = (DOCB, window_left, window_right)
    flags: tl.constexpr = (HAS_MASK, HAS_KMASK, CAUSAL, HAS_DOCS, HAS_WINDOW, HAS_SOFTCAP, HAS_ALIBI, DROPOUT)
    lo, full_end, hi = key_blocks(head, pid_m, spans, flags, BLOCK_M, BLOCK_N)
    if SPLIT:  # this split's keys (split_keys is a multiple of BLOCK_N)
        lo = tl.maximum(lo, split * split_keys)
        hi = tl.minimum(hi, split * split_keys + split_keys)
        full_end = tl.maximum(tl.minimum(full_end, hi), lo)
    row_bounds = row_range(spans, head, offs_m, flags)
    seed, offset = load_seed(SEED, DROPOUT)
    qk_scale = sm_scale * 1.4426950408889634  # work in base 2
    scaling = (qk_scale, sm_scale, softcap, load_slope(SLOPES, b, h, s_sb, s_sh, HAS_ALIBI))
    masks = (MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn)
    block = (offs_m, cols, bh, head, scaling, masks, row_bounds, (seed, offset, dropout_p, 1.0))

    m_i = tl.full([BLOCK_M], float("-inf"), LSE.dtype.element_ty)  # float32 (float64 for float64 inputs)
    l_i = tl.zeros([BLOCK_M], LSE.dtype.element_ty)
    if HAS_SINKS:  # the sink's column first: m = z_h (base 2, as the running max), l = exp2(z_h - m) = 1
        sink = tl.load(SINKS + h).to(LSE.dtype.element_ty) * 1.4426950408889634
        first = split == 0
        m_i = tl.where(first, tl.zeros([BLOCK_M], LSE.dtype.element_ty) + sink, m_i)
        l_i = tl.where(first, l_i + 1.0, l_i)
    acc = zeros(cols, BLOCK_M, LSE.dtype.element_ty)
    # Interior key blocks first, with no per-element mask; only the blocks from full_end to hi pay for masking.
    for phase in tl.static_range(2):  # unrolled at compile time: two loops, each with its MASKED
        if phase == 0:
            start, end = lo, full_end
        else:
            start, end = full_end, hi
        for start_n in range(start, end, BLOCK_N):
            acc, l_i, m_i = softmax_step(
                acc, l_i, m_i, q, k_src, v_src, start_n, block, (s_kn, s_kd, s_vn, s_vd), flags, PRECISION, BLOCK_M,
                BLOCK_N, MASKED=phase == 1, TMA=TMA,
            )  # fmt: skip

    empty = l_i == 0.0  # no allowed key: output 0, logsumexp -inf
    acc = over(acc, tl.where(empty, 1.0, l_i)[:, None])
    if DROPOUT:
        acc = times(acc, 1.0 / (1.0 - dropout_p))
    lse = tl.where(empty, float("-inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453)
    o_base = head_ptr(O, b, h, s_ob, s_oh) + split * s_os
    o_dst = rows_source(o_base, q_len, s_om, HEAD_DIM, BLOCK_M, cols, TMA)  # rows past q_len are not written
    store_tile(o_dst, pid_m * BLOCK_M, offs_m, cols, s_om, s_od, q_len, acc, O.dtype.element_ty, TMA)
    tl.store(LSE + (bh.to(tl.int64) * n_splits + split) * q_len + offs_m, lse, mask=offs_m < q_len)


fwd_kernel = _tuning.build(_fwd_kernel, "forward")
fwd_split_kernel = _tuning.build(_fwd_kernel, "split")
combine_kernel = _combine_kernel
COMBINE_BLOCK_M = 16


INTERPRETED = not autotuned(fwd_kernel)  # the interpreter: one jit function, launched with the interpreter's blocks
_EXTRA = {(split, tma): (("SPLIT", split), ("TMA", tma)) for split in (False, True) for tma in (False, True)}


def forward(
    q,
    k,
    v,
    mask,
    key_mask,
    key_lengths,
    seed,
    causal: bool,
    scale: float,
    dropout_p: float,
    doc_bounds=None,
    alibi_slopes=None,
    window_left=None,
    window_right=None,
    softcap=None,
    sinks=None,
    kernel_wrapper=None,
    descriptors: bool = True,
):
    """Run the forward kernel; returns (out, lse). ``kernel_wrapper`` is torch.library.wrap_triton (the registered
    op), or ``_args.eager_launch`` (or None) for eager launches (``_args.launch``: an autotuner's choice is remembered
    per key).

    Short queries over long keys with few (batch, head) pairs would leave most of the GPU idle with one program
    per query block: the keys are then split (``_grid.kv_splits``) and a second kernel combines the partial
    results. The backward is the same either way (it only needs out and lse).

    ``descriptors``: the kernel may read q, k, v and write out through tensor descriptors (TMA) where their layouts
    allow it (``_args.tma_ok``); the registered op passes False (torch.compile traces it: pointers there).

    ``doc_bounds`` (kernels/_args.py ``document_bounds``), ``alibi_slopes``, ``window_left``, ``window_right`` and
    ``softcap``: the documents, windows and score modifiers (kernels/_structure.py), validated by the caller.
    ``sinks``: None or the (heads,) attention sinks' logits, contiguous, in the logsumexp's dtype (kernels/_api.py).

    The arguments go to the kernel positionally, in the order of its signature (keywords cost host time)."""
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    pairs = batch * heads
    device = q.device
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, q_len), device=device, dtype=acc_dtype(q.dtype))
    splits, split_keys = _tuning.kv_splits(pairs, q_len, k_len, device)
    pointers, side_strides = side_inputs(q, mask, key_mask, key_lengths, batch, heads, q_len, k_len)
    structure = (doc_bounds, alibi_slopes, window_left, window_right, softcap)
    (docb, slopes), (s_sb, s_sh, *modifiers) = structure_inputs(q, *structure, q_len, k_len)
    group = heads // k.shape[1]
    blocks = _tuning.interpret_block_items if INTERPRETED else ()
    eager = kernel_wrapper is eager_launch
    # tensor descriptors (TMA) where the layouts allow them; pointers for the registered op and for split-KV
    tma = descriptors and splits == 1 and _tuning.tma_enabled(device) and tma_ok(q, k, v, out)
    tile = _head_dim.tile("split" if splits > 1 else "forward", head_dim)  # padded, or in power-of-two pieces
    extra = (*_EXTRA[splits > 1, tma], *structure_flags(*structure), ("HAS_SINKS", sinks is not None), *tile)
    constexprs = kernel_constexprs(q, mask, key_mask, key_lengths, causal, dropout_p, blocks, extra)
    tuning = _tuning.buckets(q_len, k_len, pairs)
    klen_dtype = key_lengths.dtype if key_lengths is not None else None
    key = ("forward", splits, *tuning, id(constexprs), group, klen_dtype, device)
    if _tuning._tuned:  # some kernel may time configs at a new key (CUDA, not pinned): not while capturing
        _tuning.check_ready(("forward",) if splits == 1 else ("split",), key, device)
    wrap = kernel_wrapper if kernel_wrapper is not None else eager_launch
    seed = seed if seed is not None else q
    sinks_ptr = sinks if sinks is not None else q  # a dummy pointer without sinks (never read: HAS_SINKS is off)
    strides_qkv = (*q.stride(), *k.stride(), *v.stride())
    with device_guard(device):
        if splits == 1:
            o_b, o_h, o_m, o_d = out.stride()
            args = (q, k, v, out, lse, *pointers, seed, docb, slopes, sinks_ptr, *strides_qkv, o_b, o_h, 0, o_m, o_d)
            args = (*args, *side_strides, s_sb, s_sh, heads, group, q_len, k_len, scale, dropout_p, *modifiers)
            args = (*args, 1, k_len, *tuning)
            grid = lambda meta: _grid.blocks_grid(q_len, meta["BLOCK_M"], pairs)  # noqa: E731
            if eager:
                launch(fwd_kernel, grid, key, args, constexprs)
            else:
                wrap(fwd_kernel)[grid](*args, **constexprs)
            return out, lse
        parts = torch.empty((batch, heads, splits, q_len, head_dim), device=device, dtype=lse.dtype)
        part_lse = torch.empty((batch, heads, splits, q_len), device=device, dtype=lse.dtype)
        args = (q, k, v, parts, part_lse, *pointers, seed, docb, slopes, sinks_ptr, *strides_qkv, *parts.stride())
        args = (*args, *side_strides, s_sb, s_sh, heads, group, q_len, k_len, scale, dropout_p, *modifiers)
        args = (*args, splits, split_keys, *tuning)
        grid = lambda meta: _grid.blocks_grid(q_len, meta["BLOCK_M"], pairs, splits)  # noqa: E731
        if eager:
            launch(fwd_split_kernel, grid, key, args, constexprs)
        else:
            wrap(fwd_split_kernel)[grid](*args, **constexprs)
        wrap(combine_kernel)[_grid.blocks_grid(q_len, COMBINE_BLOCK_M, pairs)](
            parts,
            part_lse,
            out,
            lse,
            *parts.stride(),
            *out.stride(),
            heads,
            q_len,
            splits,
            HEAD_DIM=head_dim,
            BLOCK_M=COMBINE_BLOCK_M,
            BLOCK_D=block_d(head_dim),
        )
    return out, lse
