"""Backward kernels (FlashAttention-2): delta = rowsum(dO * O), then dK/dV per key block and dQ per query
block in two separate kernels, so there are no atomics and the result is deterministic."""

import torch
import triton
import triton.language as tl

from . import _tuning
from ._args import acc_dtype, block_d, device_guard, dot_precision, side_inputs
from ._common import (BLOCKS_ASCENDING, BLOCKS_DESCENDING, HEAD_MAJOR, allowed_block, head_ptr, keep_block,
                      key_blocks, key_end, load_row_stats, load_rows, load_seed, program_tile, tile_offsets)
from ._grid import blocks_grid

@triton.jit
def _delta_kernel(O, DO, DELTA, s_ob, s_oh, s_om, s_od, s_db, s_dh, s_dm, s_dd, heads, q_len,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    bh, b, h, _, offs_m, offs_d, d_ok = program_tile(q_len, heads, 1, HEAD_DIM, BLOCK_M, BLOCK_D, HEAD_MAJOR)
    o = load_rows(head_ptr(O, b, h, s_ob, s_oh), offs_m, offs_d, s_om, s_od, q_len, d_ok)
    do = load_rows(head_ptr(DO, b, h, s_db, s_dh), offs_m, offs_d, s_dm, s_dd, q_len, d_ok)
    delta = tl.sum(o.to(DELTA.dtype.element_ty) * do.to(DELTA.dtype.element_ty), 1)
    tl.store(DELTA + bh.to(tl.int64) * q_len + offs_m, delta, mask=offs_m < q_len)


@triton.jit
def _probs(rows, cols, lse2, qi, kj, b, h, q_len, kv_end, qk_scale,
           MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn,
           HAS_MASK: tl.constexpr, HAS_KMASK: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
           MASKED: tl.constexpr):
    """Recompute P = exp2(rows @ cols^T * scale - lse2) for one block, 0 where not allowed (``MASKED=False``:
    an interior block, where every score is allowed). Query-major (dQ): rows = q, cols = k, qi / kj / lse2
    shaped [BLOCK_M, 1] / [1, BLOCK_N] / [BLOCK_M, 1]. Key-major (dK/dV): rows = k, cols = q, transposed shapes.
    A padded query row has lse2 = +inf, so its P is 0 in both cases."""
    p = tl.exp2(tl.dot(rows, tl.trans(cols), input_precision=PRECISION) * qk_scale - lse2)  # one multiply-add
    if MASKED:
        allowed = allowed_block(b, h, qi, kj, q_len, kv_end, MASK, s_mb, s_mh, s_mm, s_mn,
                                KMASK, s_kmb, s_kmn, HAS_MASK, HAS_KMASK, CAUSAL)
        p = tl.where(allowed, p, 0.0)
    return p


@triton.jit
def _dkdv_step(dk, dv, k, v, q_base, do_base, start_m, start_n, offs_n, offs_d, d_ok, b, h, bh, q_len, k_len, kv_end,
               qk_scale, seed, offset, dropout_p, inv_keep, s_qm, s_qd, s_dm, s_dd, LSE, DELTA,
               MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn,
               HAS_MASK: tl.constexpr, HAS_KMASK: tl.constexpr, CAUSAL: tl.constexpr, DROPOUT: tl.constexpr,
               PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    """Add one query block's contribution to dK and dV. Key-major tiles [BLOCK_N, BLOCK_M] (P transposed):
    every dot has BLOCK_N rows, enough for Hopper's warp-group MMA (query-major tiles would give two of the
    four dots only BLOCK_M rows)."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = load_rows(q_base, offs_m, offs_d, s_qm, s_qd, q_len, d_ok)
    do = load_rows(do_base, offs_m, offs_d, s_dm, s_dd, q_len, d_ok)
    lse2, delta = load_row_stats(LSE, DELTA, bh, offs_m, q_len)
    p_t = _probs(k, q, lse2[None, :], offs_m[None, :], offs_n[:, None], b, h, q_len, kv_end, qk_scale,
                 MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn, HAS_MASK, HAS_KMASK, CAUSAL, PRECISION, MASKED)
    dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
    if DROPOUT:
        keep_t = tl.trans(keep_block(seed, offset, bh, offs_m, start_n, q_len, dropout_p, BLOCK_M, BLOCK_N))
        p_drop_t = tl.where(keep_t, p_t * inv_keep, 0.0)
        dp_t = tl.where(keep_t, dp_t * inv_keep, 0.0)
    else:
        p_drop_t = p_t
    dv += tl.dot(p_drop_t.to(do.dtype), do, input_precision=PRECISION)
    ds_t = p_t * (dp_t - delta[None, :])
    dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)
    return dk, dv


@triton.jit
def _dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, MASK, KMASK, KLEN, SEED,
    s_qb, s_qh, s_qm, s_qd, s_kb, s_kh, s_kn, s_kd, s_vb, s_vh, s_vn, s_vd, s_db, s_dh, s_dm, s_dd,
    s_dkb, s_dkh, s_dkn, s_dkd, s_dvb, s_dvh, s_dvn, s_dvd,
    s_mb, s_mh, s_mm, s_mn, s_kmb, s_kmn, s_klb,
    heads, group, q_len, k_len, sm_scale, dropout_p, Q_BUCKET, K_BUCKET, BH_BUCKET, group_splits,
    HEAD_DIM: tl.constexpr, HAS_MASK: tl.constexpr, HAS_KMASK: tl.constexpr, HAS_KLEN: tl.constexpr,
    CAUSAL: tl.constexpr, DROPOUT: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # One program per (batch, kv head, key block, share of the GQA group). With grouped-query attention (group > 1
    # query heads per kv head) a program sums the contributions of its share (group // group_splits query heads),
    # one after another, and writes them to DK/DV's head kvh * group_splits + share: no atomics. With
    # group_splits > 1 DK and DV are a float32 workspace that the launcher sums over the shares in a fixed order.
    # causal: block-major from the first key block, which the most query blocks see (longest first)
    _, b, hs, pid_n, offs_n, offs_d, d_ok = program_tile(k_len, heads // group * group_splits, 1, HEAD_DIM, BLOCK_N,
                                                         BLOCK_D, BLOCKS_ASCENDING * CAUSAL)
    kvh = hs // group_splits
    share = group // group_splits
    g_lo = (hs % group_splits) * share
    k = load_rows(head_ptr(K, b, kvh, s_kb, s_kh), offs_n, offs_d, s_kn, s_kd, k_len, d_ok)
    v = load_rows(head_ptr(V, b, kvh, s_vb, s_vh), offs_n, offs_d, s_vn, s_vd, k_len, d_ok)

    kv_end = key_end(KLEN, s_klb, b, k_len, HAS_KLEN)
    lo = 0
    if CAUSAL:  # queries before this key block never see it
        lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M
    hi = tl.where(pid_n * BLOCK_N < kv_end, q_len, 0)  # a key block past the valid length gets zero grads
    seed, offset = load_seed(SEED, DROPOUT)
    inv_keep = 1.0 / (1.0 - dropout_p)
    qk_scale = sm_scale * 1.4426950408889634

    # Query blocks [lo, mask_end) need a per-element mask: they cross the causal diagonal, or this key block
    # holds padding keys, or there is a mask tensor. The query blocks after them are interior.
    mask_end = lo
    if CAUSAL:  # the first query block that starts at or after this key block's last key
        mask_end = tl.cdiv((pid_n + 1) * BLOCK_N, BLOCK_M) * BLOCK_M
    if HAS_MASK or HAS_KMASK:
        mask_end = hi
    mask_end = tl.minimum(tl.where((pid_n + 1) * BLOCK_N <= kv_end, mask_end, hi), hi)
    dk = tl.zeros([BLOCK_N, BLOCK_D], DELTA.dtype.element_ty)
    dv = tl.zeros([BLOCK_N, BLOCK_D], DELTA.dtype.element_ty)
    for g in range(g_lo, g_lo + share):
        h = kvh * group + g  # the query heads of kv head kvh (repeat_interleave order, torch's enable_gqa)
        bh = b * heads + h
        q_base = head_ptr(Q, b, h, s_qb, s_qh)
        do_base = head_ptr(DO, b, h, s_db, s_dh)
        for start_m in range(lo, mask_end, BLOCK_M):
            dk, dv = _dkdv_step(dk, dv, k, v, q_base, do_base, start_m, pid_n * BLOCK_N, offs_n, offs_d, d_ok, b, h,
                                bh, q_len, k_len, kv_end, qk_scale, seed, offset, dropout_p, inv_keep,
                                s_qm, s_qd, s_dm, s_dd, LSE, DELTA, MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn,
                                HAS_MASK, HAS_KMASK, CAUSAL, DROPOUT, PRECISION, BLOCK_M, BLOCK_N, MASKED=True)
        for start_m in range(mask_end, hi, BLOCK_M):
            dk, dv = _dkdv_step(dk, dv, k, v, q_base, do_base, start_m, pid_n * BLOCK_N, offs_n, offs_d, d_ok, b, h,
                                bh, q_len, k_len, kv_end, qk_scale, seed, offset, dropout_p, inv_keep,
                                s_qm, s_qd, s_dm, s_dd, LSE, DELTA, MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn,
                                HAS_MASK, HAS_KMASK, CAUSAL, DROPOUT, PRECISION, BLOCK_M, BLOCK_N, MASKED=False)

    dk = dk * sm_scale
    out_ok = (offs_n[:, None] < k_len) & d_ok[None, :]
    tl.store(head_ptr(DK, b, hs, s_dkb, s_dkh) + tile_offsets(offs_n, offs_d, s_dkn, s_dkd),
             dk.to(DK.dtype.element_ty), mask=out_ok)
    tl.store(head_ptr(DV, b, hs, s_dvb, s_dvh) + tile_offsets(offs_n, offs_d, s_dvn, s_dvd),
             dv.to(DV.dtype.element_ty), mask=out_ok)


@triton.jit
def _dq_step(dq, q, do, lse2, delta, k_base, v_base, start_n, offs_m, offs_d, d_ok, b, h, bh, q_len, k_len,
             kv_end, qk_scale, seed, offset, dropout_p, inv_keep, s_kn, s_kd, s_vn, s_vd,
             MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn,
             HAS_MASK: tl.constexpr, HAS_KMASK: tl.constexpr, CAUSAL: tl.constexpr, DROPOUT: tl.constexpr,
             PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    """Add one key block's contribution to dQ (query-major tiles [BLOCK_M, BLOCK_N])."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = load_rows(k_base, offs_n, offs_d, s_kn, s_kd, kv_end, d_ok)
    v = load_rows(v_base, offs_n, offs_d, s_vn, s_vd, kv_end, d_ok)
    p = _probs(q, k, lse2[:, None], offs_m[:, None], offs_n[None, :], b, h, q_len, kv_end, qk_scale,
               MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn, HAS_MASK, HAS_KMASK, CAUSAL, PRECISION, MASKED)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    if DROPOUT:
        keep = keep_block(seed, offset, bh, offs_m, start_n, q_len, dropout_p, BLOCK_M, BLOCK_N)
        dp = tl.where(keep, dp * inv_keep, 0.0)
    ds = p * (dp - delta[:, None])
    return dq + tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)


@triton.jit
def _dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ, MASK, KMASK, KLEN, SEED,
    s_qb, s_qh, s_qm, s_qd, s_kb, s_kh, s_kn, s_kd, s_vb, s_vh, s_vn, s_vd, s_db, s_dh, s_dm, s_dd,
    s_dqb, s_dqh, s_dqm, s_dqd,
    s_mb, s_mh, s_mm, s_mn, s_kmb, s_kmn, s_klb,
    heads, group, q_len, k_len, sm_scale, dropout_p, Q_BUCKET, K_BUCKET, BH_BUCKET,
    HEAD_DIM: tl.constexpr, HAS_MASK: tl.constexpr, HAS_KMASK: tl.constexpr, HAS_KLEN: tl.constexpr,
    CAUSAL: tl.constexpr, DROPOUT: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    bh, b, h, pid_m, offs_m, offs_d, d_ok = program_tile(q_len, heads, 1, HEAD_DIM, BLOCK_M, BLOCK_D,
                                                         BLOCKS_DESCENDING * CAUSAL)  # causal: longest first
    m_ok = (offs_m[:, None] < q_len) & d_ok[None, :]
    q = load_rows(head_ptr(Q, b, h, s_qb, s_qh), offs_m, offs_d, s_qm, s_qd, q_len, d_ok)
    do = load_rows(head_ptr(DO, b, h, s_db, s_dh), offs_m, offs_d, s_dm, s_dd, q_len, d_ok)
    lse2, delta = load_row_stats(LSE, DELTA, bh, offs_m, q_len)
    k_base = head_ptr(K, b, h // group, s_kb, s_kh)  # grouped-query attention: group query heads per kv head
    v_base = head_ptr(V, b, h // group, s_vb, s_vh)

    kv_end = key_end(KLEN, s_klb, b, k_len, HAS_KLEN)
    full_end, hi = key_blocks(kv_end, pid_m, HAS_MASK, HAS_KMASK, CAUSAL, BLOCK_M, BLOCK_N)
    seed, offset = load_seed(SEED, DROPOUT)
    inv_keep = 1.0 / (1.0 - dropout_p)
    qk_scale = sm_scale * 1.4426950408889634

    # Interior key blocks [0, full_end) with no per-element mask, as in the forward kernel.
    dq = tl.zeros([BLOCK_M, BLOCK_D], DELTA.dtype.element_ty)
    for start_n in range(0, full_end, BLOCK_N):
        dq = _dq_step(dq, q, do, lse2, delta, k_base, v_base, start_n, offs_m, offs_d, d_ok, b, h, bh, q_len, k_len,
                      kv_end, qk_scale, seed, offset, dropout_p, inv_keep, s_kn, s_kd, s_vn, s_vd,
                      MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn,
                      HAS_MASK, HAS_KMASK, CAUSAL, DROPOUT, PRECISION, BLOCK_M, BLOCK_N, MASKED=False)
    for start_n in range(full_end, hi, BLOCK_N):
        dq = _dq_step(dq, q, do, lse2, delta, k_base, v_base, start_n, offs_m, offs_d, d_ok, b, h, bh, q_len, k_len,
                      kv_end, qk_scale, seed, offset, dropout_p, inv_keep, s_kn, s_kd, s_vn, s_vd,
                      MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn,
                      HAS_MASK, HAS_KMASK, CAUSAL, DROPOUT, PRECISION, BLOCK_M, BLOCK_N, MASKED=True)

    dq = dq * sm_scale
    tl.store(head_ptr(DQ, b, h, s_dqb, s_dqh) + tile_offsets(offs_m, offs_d, s_dqm, s_dqd),
             dq.to(DQ.dtype.element_ty), mask=m_ok)


dkdv_kernel = _tuning.build(_dkdv_kernel, "dkdv")
dq_kernel = _tuning.build(_dq_kernel, "dq")
delta_kernel = _delta_kernel


def backward(do, q, k, v, out, lse, grad_lse, mask, key_mask, key_lengths, seed, causal: bool, scale: float,
             dropout_p: float, kernel_wrapper=None):
    """Gradients (dq, dk, dv). ``grad_lse`` (or None) is the incoming gradient of the logsumexp output. The
    arguments go to the kernels positionally, in the order of their signatures."""
    wrap = kernel_wrapper if kernel_wrapper is not None else _direct
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    pairs = batch * heads
    block_d_ = block_d(head_dim)
    if do.stride(-1) != 1 or (do.stride(-2) == 0 and q_len > 1):
        # out.sum().backward() gives an expanded grad_out (every stride 0), a transposed one a strided head_dim:
        # the loads of dO would not be vectorised. FlashAttention copies it to a contiguous layout first too.
        do = do.contiguous()
    kv_heads = k.shape[1]
    (mask_ptr, kmask_ptr, klen_ptr), side_strides = side_inputs(q, mask, key_mask, key_lengths, batch, heads,
                                                                q_len, k_len)
    sides = (mask_ptr, kmask_ptr, klen_ptr, seed if seed is not None else q)
    strides_in = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    tuning = _tuning.buckets(q_len, k_len, pairs)
    scalars = (*side_strides, heads, heads // kv_heads, q_len, k_len, scale, dropout_p, *tuning)
    constexprs = dict(HEAD_DIM=head_dim, HAS_MASK=mask is not None, HAS_KMASK=key_mask is not None,
                      HAS_KLEN=key_lengths is not None, CAUSAL=causal, DROPOUT=dropout_p > 0.0,
                      PRECISION=dot_precision(q.dtype), BLOCK_D=block_d_, **_tuning.block_kwargs())
    klen_dtype = key_lengths.dtype if key_lengths is not None else None
    _tuning.check_ready(("dkdv", "dq"), ("backward", *tuning, *constexprs.values(), heads // kv_heads, q.dtype,
                                         klen_dtype), q.device)
    with device_guard(q.device):
        delta = torch.empty((batch, heads, q_len), device=q.device, dtype=acc_dtype(q.dtype))
        wrap(delta_kernel)[blocks_grid(q_len, 32, pairs)](
            out, do, delta, *out.stride(), *do.stride(), heads, q_len, HEAD_DIM=head_dim, BLOCK_M=32,
            BLOCK_D=block_d_)
        if grad_lse is not None:  # d lse_i / d s_ij = p_ij, which folds into delta
            delta -= grad_lse  # in place: delta keeps its contiguous layout whatever grad_lse's strides are
        dq = torch.empty_like(q)
        shares = _tuning.group_splits(batch, kv_heads, heads // kv_heads, k_len, q.device)
        if shares == 1:
            dk, dv = torch.empty_like(k), torch.empty_like(v)
        else:  # float32 partial sums, one per share of the group, summed below in a fixed order
            dk, dv = (torch.empty((batch, kv_heads * shares, k_len, head_dim), device=q.device,
                                  dtype=acc_dtype(q.dtype)) for _ in range(2))
        wrap(dkdv_kernel)[lambda meta: blocks_grid(k_len, meta["BLOCK_N"], batch * kv_heads * shares)](
            q, k, v, do, lse, delta, dk, dv, *sides, *strides_in, *dk.stride(), *dv.stride(), *scalars, shares,
            **constexprs)
        if shares > 1:
            dk, dv = (t.view(batch, kv_heads, shares, k_len, head_dim).sum(2).to(k.dtype) for t in (dk, dv))
        wrap(dq_kernel)[lambda meta: blocks_grid(q_len, meta["BLOCK_M"], pairs)](
            q, k, v, do, lse, delta, dq, *sides, *strides_in, *dq.stride(), *scalars, **constexprs)
    return dq, dk, dv


def _direct(kernel):
    return kernel
