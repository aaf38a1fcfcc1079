"""The dK/dV backward kernel (FlashAttention-2): one program per (batch, kv head, key block, share of the GQA
group) accumulates dK and dV over the query blocks that see its keys. Launched by kernels/_backward.py."""

import triton
import triton.language as tl

from ._common import (
    BLOCKS_ASCENDING,
    dot_rows,
    head_ptr,
    keep_block,
    key_end,
    load_row_stats,
    load_seed,
    probs,
    program_tile,
    query_blocks,
)
from ._pieces import add_dots, load_tile, store_tile, times, zeros
from ._structure import load_slope, row_range


@triton.jit
def _dkdv_step(
    dk, dv, k, v, q_base, do_base, start_m, start_n, block, LSE, DELTA, FLAGS, PRECISION, BLOCK_M, BLOCK_N, MASKED
):
    """Add one query block's contribution to dK and dV. Key-major tiles [BLOCK_N, BLOCK_M] (P transposed):
    every dot has BLOCK_N rows, enough for Hopper's warp-group MMA (query-major tiles would give two of the
    four dots only BLOCK_M rows). ``block``: the key block's (offs_n, cols, bh, head, scaling, masks, spans, rng,
    (s_qm, s_qd, s_dm, s_dd)), ``cols`` the head-dim pieces of dk, dv, k, v (kernels/_pieces.py), kernels/_common.py's
    tuples and the row and head-dim strides of q and dO; PRECISION, BLOCK_M, BLOCK_N and MASKED: constexprs."""
    offs_n, cols, bh, head, scaling, masks, spans, rng, strides = block  # no nested unpacking: triton 3.6 rejects it
    s_qm, s_qd, s_dm, s_dd = strides
    _, _, q_len, _, _ = head
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = load_tile(q_base, start_m, offs_m, cols, s_qm, s_qd, q_len, False)
    do = load_tile(do_base, start_m, offs_m, cols, s_dm, s_dd, q_len, False)
    lse2, delta = load_row_stats(LSE, DELTA, bh, offs_m, q_len)
    row_lo, row_hi = row_range(spans, head, offs_m, FLAGS)
    p_t, dcap_t = probs(
        k, q, lse2[None, :], offs_m[None, :], offs_n[:, None], head, scaling, masks, row_lo[None, :], row_hi[None, :],
        FLAGS, PRECISION, MASKED,
    )  # fmt: skip
    dp_t = dot_rows(v, do, PRECISION)
    if FLAGS[7]:  # DROPOUT
        seed, offset, dropout_p, inv_keep = rng
        keep_t = tl.trans(keep_block(seed, offset, bh, offs_m, start_n, q_len, dropout_p, BLOCK_M, BLOCK_N))
        p_drop_t = tl.where(keep_t, p_t * inv_keep, 0.0)
        dp_t = tl.where(keep_t, dp_t * inv_keep, 0.0)
    else:
        p_drop_t = p_t
    dv = add_dots(dv, p_drop_t.to(do[0].dtype), do, PRECISION)
    ds_t = p_t * (dp_t - delta[None, :]) * dcap_t  # dcap_t: the softcap's derivative (1.0 without one)
    dk = add_dots(dk, ds_t.to(q[0].dtype), q, PRECISION)
    return dk, dv


@triton.jit
def _dkdv_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
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
    s_dkb,
    s_dkh,
    s_dkn,
    s_dkd,
    s_dvb,
    s_dvh,
    s_dvn,
    s_dvd,
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
    group_splits,
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
    # One program per (batch, kv head, key block, share of the GQA group). With grouped-query attention (group > 1
    # query heads per kv head) a program sums the contributions of its share (group // group_splits query heads),
    # one after another, and writes them to DK/DV's head kvh * group_splits + share: no atomics. With
    # group_splits > 1 DK and DV are a float32 workspace that the launcher sums over the shares in a fixed order.
    # causal: block-major from the first key block, which the most query blocks see (longest first). Tiles in
    # head-dim pieces (BLOCK_D, and BLOCK_D2 > 0 for a split head dim: kernels/_pieces.py).
    _, b, hs, pid_n, offs_n, cols = program_tile(
        k_len, heads // group * group_splits, 1, HEAD_DIM, BLOCK_N, BLOCK_D, BLOCK_D2, BLOCKS_ASCENDING * CAUSAL
    )
    kvh = hs // group_splits
    share = group // group_splits
    g_lo = (hs % group_splits) * share
    k = load_tile(head_ptr(K, b, kvh, s_kb, s_kh), pid_n * BLOCK_N, offs_n, cols, s_kn, s_kd, k_len, False)
    v = load_tile(head_ptr(V, b, kvh, s_vb, s_vh), pid_n * BLOCK_N, offs_n, cols, s_vn, s_vd, k_len, False)

    kv_end = key_end(KLEN, s_klb, b, k_len, HAS_KLEN)
    spans = (DOCB, window_left, window_right)
    flags: tl.constexpr = (HAS_MASK, HAS_KMASK, CAUSAL, HAS_DOCS, HAS_WINDOW, HAS_SOFTCAP, HAS_ALIBI, DROPOUT)
    lo, mask_end, hi = query_blocks((b, kvh, q_len, k_len, kv_end), pid_n, spans, flags, BLOCK_M, BLOCK_N)
    seed, offset = load_seed(SEED, DROPOUT)
    rng = (seed, offset, dropout_p, 1.0 / (1.0 - dropout_p))
    qk_scale = sm_scale * 1.4426950408889634
    masks = (MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn)
    dk = zeros(cols, BLOCK_N, DELTA.dtype.element_ty)
    dv = zeros(cols, BLOCK_N, DELTA.dtype.element_ty)
    for g in range(g_lo, g_lo + share):
        h = kvh * group + g  # the query heads of kv head kvh (repeat_interleave order, torch's enable_gqa)
        bh = b * heads + h
        q_base = head_ptr(Q, b, h, s_qb, s_qh)
        do_base = head_ptr(DO, b, h, s_db, s_dh)
        head = (b, h, q_len, k_len, kv_end)
        scaling = (qk_scale, sm_scale, softcap, load_slope(SLOPES, b, h, s_sb, s_sh, HAS_ALIBI))
        block = (offs_n, cols, bh, head, scaling, masks, spans, rng, (s_qm, s_qd, s_dm, s_dd))
        for phase in tl.static_range(2):  # unrolled at compile time: two loops, each with its MASKED
            if phase == 0:
                start, end = lo, mask_end
            else:
                start, end = mask_end, hi
            for start_m in range(start, end, BLOCK_M):
                dk, dv = _dkdv_step(
                    dk, dv, k, v, q_base, do_base, start_m, pid_n * BLOCK_N, block, LSE, DELTA, flags, PRECISION,
                    BLOCK_M, BLOCK_N, MASKED=phase == 0,
                )  # fmt: skip

    dk = times(dk, sm_scale)
    start_n = pid_n * BLOCK_N
    dk_base = head_ptr(DK, b, hs, s_dkb, s_dkh)
    store_tile(dk_base, start_n, offs_n, cols, s_dkn, s_dkd, k_len, dk, DK.dtype.element_ty, False)
    dv_base = head_ptr(DV, b, hs, s_dvb, s_dvh)
    store_tile(dv_base, start_n, offs_n, cols, s_dvn, s_dvd, k_len, dv, DV.dtype.element_ty, False)
