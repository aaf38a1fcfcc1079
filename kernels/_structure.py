"""Documents, sliding windows and score modifiers (softcap, ALiBi) inside the kernels, and the block ranges they give.

Alignment (FlashAttention's): with q_len queries and k_len keys, query i sits at position p(i) = k_len - q_len + i.
Query i may attend key j only if j lies in its row range [lo(i), hi(i)):

* documents (non-decreasing ids per batch row): [start, end) of the document of position p(i), so that
  ``documents[b, j] == documents[b, p(i)]``;
* window_left / window_right: ``p(i) - window_left <= j <= p(i) + window_right``.

Both ends are non-decreasing in i, so the keys a query block may see are one contiguous range, from the first
row's lo to the last row's hi (and the queries that see a key block likewise): blocks outside it are never loaded
(FlashAttention's ``block_info``/``mask.h`` and flex_attention's BlockMask skip the same way). The per-row ranges
of the documents come from kernels/_args.py ``document_bounds`` (torch ops on the device, no host sync), read at
p(i). Imported lazily, as kernels/_common.py (its jit functions read TRITON_INTERPRET when decorated).

Score modifiers, on the scaled score s = scale * q.k, in this order (Gemma 2's softcap, Press et al.'s ALiBi):
s <- softcap * tanh(s / softcap), then s <- s - slope[b, h] * |p(i) - j|; the derivative of the first is
1 - tanh^2, the bias is a constant.
"""

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def row_range(spans, head, qi, FLAGS):
    """(lo, hi), shaped like ``qi`` (a scalar or a tile of query indices): the keys [lo, hi) query qi may attend by
    its document and window. Rows past the queries (p(i) >= k_len) get an empty range when documents are given.
    ``spans``, ``head`` and ``FLAGS``: the tuples of kernels/_common.py."""
    DOCB, window_left, window_right = spans
    b, _, q_len, k_len, _ = head
    HAS_DOCS: tl.constexpr = FLAGS[3]
    HAS_WINDOW: tl.constexpr = FLAGS[4]
    pos = qi + (k_len - q_len)
    lo = pos * 0
    hi = lo + k_len
    if HAS_DOCS:
        inside = (pos >= 0) & (pos < k_len)
        base = DOCB + b.to(tl.int64) * k_len * 2 + pos
        lo = tl.load(base, mask=inside, other=0)
        hi = tl.load(base + k_len, mask=inside, other=0)
    if HAS_WINDOW:
        lo = tl.maximum(lo, pos - window_left)
        hi = tl.minimum(hi, pos + window_right + 1)
    return lo, hi


@triton.jit
def query_block_keys(spans, head, start_m, FLAGS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """[lo, hi): the keys the query block starting at ``start_m`` may attend by documents and windows (lo rounded
    down to a multiple of BLOCK_N, so the blocks visited are the ones an unrestricted loop would visit)."""
    lo, _ = row_range(spans, head, start_m, FLAGS)
    _, _, q_len, _, _ = head
    last = tl.minimum(start_m + BLOCK_M, q_len) - 1
    _, hi = row_range(spans, head, last, FLAGS)
    return (tl.maximum(lo, 0) // BLOCK_N) * BLOCK_N, hi


@triton.jit
def key_block_queries(spans, head, start_n, FLAGS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """[lo, hi): the queries that may attend some key of the key block starting at ``start_n`` by documents and
    windows (lo rounded down to a multiple of BLOCK_M). Their positions lie in the documents of its first and last
    key, and within [first key - window_right, last key + window_left]."""
    DOCB, window_left, window_right = spans
    b, _, q_len, k_len, _ = head
    HAS_DOCS: tl.constexpr = FLAGS[3]
    HAS_WINDOW: tl.constexpr = FLAGS[4]
    last = tl.minimum(start_n + BLOCK_N, k_len) - 1
    shift = k_len - q_len  # the first query's position (negative with more queries than keys)
    p_lo = start_n * 0 + shift
    p_hi = p_lo - shift + k_len
    if HAS_DOCS:
        base = DOCB + b.to(tl.int64) * k_len * 2
        p_lo = tl.load(base + start_n)
        p_hi = tl.load(base + k_len + last)
    if HAS_WINDOW:
        p_lo = tl.maximum(p_lo, start_n - window_right)
        p_hi = tl.minimum(p_hi, last + window_left + 1)
    lo = tl.maximum(p_lo - shift, 0)
    hi = tl.minimum(p_hi - shift, q_len)
    return (lo // BLOCK_M) * BLOCK_M, hi


@triton.jit
def load_slope(SLOPES, b, h, s_sb, s_sh, HAS_ALIBI: tl.constexpr):
    """ALiBi's slope of (batch b, query head h), or 0.0 without ALiBi."""
    slope = 0.0
    if HAS_ALIBI:
        slope = tl.load(SLOPES + b.to(tl.int64) * s_sb + h.to(tl.int64) * s_sh)
    return slope


@triton.jit
def _tanh(x):
    """tanh through exp(-2|x|), which never overflows (portable across Triton versions and the interpreter)."""
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def modified_scores(
    qk, sm_scale, softcap, slope, qi, kj, q_len, k_len, HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr
):
    """(s2, dcap): the base-2 scores log2(e) * (softcap(scale * qk) - slope * |p(i) - j|), and d softcap(x) / dx =
    1 - tanh^2(x / softcap) (1.0 without softcap). ``qi``/``kj`` broadcast against ``qk`` (query- or key-major)."""
    s = qk * sm_scale
    dcap = 1.0
    if HAS_SOFTCAP:
        t = _tanh(s / softcap)
        s = softcap * t
        dcap = 1.0 - t * t
    if HAS_ALIBI:
        s = s - slope * tl.abs(qi + (k_len - q_len) - kj).to(s.dtype)
    return s * LOG2E, dcap
