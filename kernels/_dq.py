"""The dQ backward kernel (FlashAttention-2): one program per (batch, head, query block) accumulates dQ over the
key blocks its queries see. Launched by kernels/_backward.py."""

import triton
import triton.language as tl

from ._common import (
    BLOCKS_DESCENDING,
    dot_rows,
    head_ptr,
    keep_block,
    key_blocks,
    key_end,
    load_row_stats,
    load_seed,
    probs,
    program_tile,
)
from ._pieces import add_dots, load_tile, store_tile, times, zeros
from ._structure import load_slope, row_range


@triton.jit
def _dq_step(
    dq, q, do, lse2, delta, k_base, v_base, start_n, block, kv_strides, FLAGS, PRECISION, BLOCK_M, BLOCK_N, MASKED
):
    """Add one key block's contribution to dQ (query-major tiles [BLOCK_M, BLOCK_N]; dq, q and do in head-dim
    pieces); ``block``, ``kv_strides`` and the constexprs as kernels/_online_softmax.py ``softmax_step``'s."""
    offs_m, cols, bh, head, scaling, masks, row_bounds, rng = block  # no nested unpacking: triton 3.6 rejects it
    row_lo, row_hi = row_bounds
    s_kn, s_kd, s_vn, s_vd = kv_strides
    _, _, q_len, _, kv_end = head
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = load_tile(k_base, start_n, offs_n, cols, s_kn, s_kd, kv_end, False)
    v = load_tile(v_base, start_n, offs_n, cols, s_vn, s_vd, kv_end, False)
    p, dcap = probs(
        q, k, lse2[:, None], offs_m[:, None], offs_n[None, :], head, scaling, masks, row_lo[:, None], row_hi[:, None],
        FLAGS, PRECISION, MASKED,
    )  # fmt: skip
    dp = dot_rows(do, v, PRECISION)
    if FLAGS[7]:  # DROPOUT
        seed, offset, dropout_p, inv_keep = rng
        keep = keep_block(seed, offset, bh, offs_m, start_n, q_len, dropout_p, BLOCK_M, BLOCK_N)
        dp = tl.where(keep, dp * inv_keep, 0.0)
    ds = p * (dp - delta[:, None]) * dcap  # dcap: the softcap's derivative (1.0 without one)
    return add_dots(dq, ds.to(k[0].dtype), k, PRECISION)


@triton.jit
def _dq_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DQ,
    MASK,
    KMASK,
    KLEN,
    SEED,
    DOCB,
    SLOPES,
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
    s_db,
    s_dh,
    s_dm,
    s_dd,
    s_dqb,
    s_dqh,
    s_dqm,
    s_dqd,
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
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_D2: tl.constexpr,
):
    # tiles in head-dim pieces (BLOCK_D, and BLOCK_D2 > 0 for a split head dim: kernels/_pieces.py)
    bh, b, h, pid_m, offs_m, cols = program_tile(
        q_len, heads, 1, HEAD_DIM, BLOCK_M, BLOCK_D, BLOCK_D2, BLOCKS_DESCENDING * CAUSAL
    )  # causal: longest first
    q = load_tile(head_ptr(Q, b, h, s_qb, s_qh), pid_m * BLOCK_M, offs_m, cols, s_qm, s_qd, q_len, False)
    do = load_tile(head_ptr(DO, b, h, s_db, s_dh), pid_m * BLOCK_M, offs_m, cols, s_dm, s_dd, q_len, False)
    lse2, delta = load_row_stats(LSE, DELTA, bh, offs_m, q_len)
    k_base = head_ptr(K, b, h // group, s_kb, s_kh)  # grouped-query attention: group query heads per kv head
    v_base = head_ptr(V, b, h // group, s_vb, s_vh)

    kv_end = key_end(KLEN, s_klb, b, k_len, HAS_KLEN)
    head = (b, h, q_len, k_len, kv_end)
    spans = (DOCB, window_left, window_right)
    flags: tl.constexpr = (HAS_MASK, HAS_KMASK, CAUSAL, HAS_DOCS, HAS_WINDOW, HAS_SOFTCAP, HAS_ALIBI, DROPOUT)
    lo, full_end, hi = key_blocks(head, pid_m, spans, flags, BLOCK_M, BLOCK_N)
    row_bounds = row_range(spans, head, offs_m, flags)
    seed, offset = load_seed(SEED, DROPOUT)
    qk_scale = sm_scale * 1.4426950408889634
    scaling = (qk_scale, sm_scale, softcap, load_slope(SLOPES, b, h, s_sb, s_sh, HAS_ALIBI))
    masks = (MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn)
    block = (
        offs_m,
        cols,
        bh,
        head,
        scaling,
        masks,
        row_bounds,
        (seed, offset, dropout_p, 1.0 / (1.0 - dropout_p)),
    )

    # Interior key blocks [lo, full_end) with no per-element mask, as in the forward kernel.
    dq = zeros(cols, BLOCK_M, DELTA.dtype.element_ty)
    for phase in tl.static_range(2):  # unrolled at compile time: two loops, each with its MASKED
        if phase == 0:
            start, end = lo, full_end
        else:
            start, end = full_end, hi
        for start_n in range(start, end, BLOCK_N):
            dq = _dq_step(
                dq, q, do, lse2, delta, k_base, v_base, start_n, block, (s_kn, s_kd, s_vn, s_vd), flags, PRECISION,
                BLOCK_M, BLOCK_N, MASKED=phase == 1,
            )  # fmt: skip

    dq = times(dq, sm_scale)
    dq_base = head_ptr(DQ, b, h, s_dqb, s_dqh)
    store_tile(dq_base, pid_m * BLOCK_M, offs_m, cols, s_dqm, s_dqd, q_len, dq, DQ.dtype.element_ty, False)
