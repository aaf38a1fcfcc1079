"""One key block of the forward's online softmax (FlashAttention-2, Algorithm 1), called by kernels/_forward.py's
kernel for each key block it visits. Imported lazily with it (its jit function reads TRITON_INTERPRET when
decorated)."""

import triton
import triton.language as tl

from ._common import allowed_block, keep_block, load_tile
from ._structure import modified_scores


@triton.jit
def softmax_step(
    acc,
    l_i,
    m_i,
    q,
    k_src,
    v_src,
    start_n,
    offs_m,
    offs_d,
    d_ok,
    b,
    h,
    bh,
    q_len,
    k_len,
    kv_end,
    qk_scale,
    sm_scale,
    softcap,
    slope,
    row_lo,
    row_hi,
    seed,
    offset,
    dropout_p,
    s_kn,
    s_kd,
    s_vn,
    s_vd,
    MASK,
    s_mb,
    s_mh,
    s_mm,
    s_mn,
    KMASK,
    s_kmb,
    s_kmn,
    HAS_MASK: tl.constexpr,
    HAS_KMASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    RANGED: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_ALIBI: tl.constexpr,
    DROPOUT: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    TMA: tl.constexpr,
):
    """One key block of the online softmax (FlashAttention-2, Algorithm 1): scores, running max and sum, and the
    rescaled accumulator. ``MASKED=False`` is for interior blocks, where every score is allowed: no per-element
    compare or select, and the running max is always finite."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = load_tile(k_src, start_n, offs_n, offs_d, s_kn, s_kd, kv_end, d_ok, TMA)
    qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    if MASKED:
        allowed = allowed_block(
            b,
            h,
            offs_m[:, None],
            offs_n[None, :],
            q_len,
            kv_end,
            MASK,
            s_mb,
            s_mh,
            s_mm,
            s_mn,
            KMASK,
            s_kmb,
            s_kmn,
            row_lo[:, None],
            row_hi[:, None],
            HAS_MASK,
            HAS_KMASK,
            CAUSAL,
            RANGED,
        )
    if HAS_SOFTCAP or HAS_ALIBI:  # softcap and ALiBi: the base-2 scores themselves (kernels/_structure.py)
        s2, _ = modified_scores(
            qk, sm_scale, softcap, slope, offs_m[:, None], offs_n[None, :], q_len, k_len, HAS_SOFTCAP, HAS_ALIBI
        )
        if MASKED:
            s2 = tl.where(allowed, s2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s2, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s2 - m_safe[:, None])
    elif MASKED:
        # the scale folds into one multiply-add per score here too; the max is taken of the unscaled scores
        m_new = tl.maximum(m_i, tl.max(tl.where(allowed, qk, float("-inf")), 1) * qk_scale)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing allowed yet stays at 0
        p = tl.where(allowed, tl.exp2(qk * qk_scale - m_safe[:, None]), 0.0)
    else:  # the scale folds into one multiply-add per score (qk_scale >= 0: the API makes it so)
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        m_safe = m_new
        p = tl.exp2(qk * qk_scale - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    if DROPOUT:
        p = tl.where(keep_block(seed, offset, bh, offs_m, start_n, q_len, dropout_p, BLOCK_M, BLOCK_N), p, 0.0)
    v = load_tile(v_src, start_n, offs_n, offs_d, s_vn, s_vd, kv_end, d_ok, TMA)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return acc, l_i, m_new
