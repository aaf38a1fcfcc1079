"""One key block of the forward's online softmax (FlashAttention-2, Algorithm 1), called by kernels/_forward.py's
kernel for each key block it visits. Imported lazily with it (its jit function reads TRITON_INTERPRET when
decorated)."""

import triton
import triton.language as tl

from ._common import allowed_block, keep_block, scores
from ._pieces import add_dots, load_tile, times


@triton.jit
def softmax_step(
    acc, l_i, m_i, q, k_src, v_src, start_n, block, kv_strides, FLAGS, PRECISION, BLOCK_M, BLOCK_N, MASKED, TMA
):
    """One key block of the online softmax (FlashAttention-2, Algorithm 1): scores, running max and sum, and the
    rescaled accumulator. ``MASKED=False`` is for interior blocks, where every score is allowed: no per-element
    compare or select, and the running max is always finite. ``block``: the query block's (offs_m, cols, bh, head,
    scaling, masks, (row_lo, row_hi), rng), ``cols`` the head-dim pieces (kernels/_pieces.py), the last five
    kernels/_common.py's tuples, (row_lo, row_hi) the queries' row ranges by documents and windows; ``acc`` and ``q``
    are tiles in those pieces; ``kv_strides``: (s_kn, s_kd, s_vn, s_vd); PRECISION, BLOCK_M, BLOCK_N, MASKED and
    TMA: constexprs."""
    offs_m, cols, bh, head, scaling, masks, row_bounds, rng = block  # no nested unpacking: triton 3.6 rejects it
    row_lo, row_hi = row_bounds
    s_kn, s_kd, s_vn, s_vd = kv_strides
    _, _, q_len, _, kv_end = head
    HAS_SOFTCAP: tl.constexpr = FLAGS[5]
    HAS_ALIBI: tl.constexpr = FLAGS[6]
    DROPOUT: tl.constexpr = FLAGS[7]
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k = load_tile(k_src, start_n, offs_n, cols, s_kn, s_kd, kv_end, TMA)
    qk, _ = scores(q, k, offs_m[:, None], offs_n[None, :], head, scaling, FLAGS, PRECISION)
    if MASKED:
        allowed = allowed_block(head, offs_m[:, None], offs_n[None, :], masks, row_lo[:, None], row_hi[:, None], FLAGS)
    if HAS_SOFTCAP or HAS_ALIBI:  # softcap and ALiBi: the base-2 scores themselves (kernels/_structure.py)
        s2 = qk
        if MASKED:
            s2 = tl.where(allowed, s2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s2, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s2 - m_safe[:, None])
    elif MASKED:
        # the scale folds into one multiply-add per score here too; the max is taken of the unscaled scores
        qk_scale = scaling[0]
        m_new = tl.maximum(m_i, tl.max(tl.where(allowed, qk, float("-inf")), 1) * qk_scale)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing allowed yet stays at 0
        p = tl.where(allowed, tl.exp2(qk * qk_scale - m_safe[:, None]), 0.0)
    else:  # the scale folds into one multiply-add per score (qk_scale >= 0: the API makes it so)
        qk_scale = scaling[0]
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        m_safe = m_new
        p = tl.exp2(qk * qk_scale - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    if DROPOUT:
        seed, offset, dropout_p, _ = rng
        p = tl.where(keep_block(seed, offset, bh, offs_m, start_n, q_len, dropout_p, BLOCK_M, BLOCK_N), p, 0.0)
    v = load_tile(v_src, start_n, offs_n, cols, s_vn, s_vd, kv_end, TMA)
    acc = add_dots(times(acc, alpha[:, None]), p.to(v[0].dtype), v, PRECISION)
    return acc, l_i, m_new
