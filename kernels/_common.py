"""Triton helpers shared by the forward and backward kernels: which scores are allowed, dropout.

Imported lazily (at the first kernel launch), so ``TRITON_INTERPRET`` only has to be set before that.
"""

import triton
import triton.language as tl


@triton.jit
def allowed_block(b, h, offs_m, offs_n, q_len, kv_end,
                  MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kb, s_kn,
                  HAS_MASK: tl.constexpr, HAS_KMASK: tl.constexpr, CAUSAL: tl.constexpr):
    """Bool [BLOCK_M, BLOCK_N]: query offs_m may attend key offs_n (True = may attend)."""
    allowed = (offs_m[:, None] < q_len) & (offs_n[None, :] < kv_end)
    if CAUSAL:  # top-left aligned, as F.scaled_dot_product_attention(is_causal=True)
        allowed = allowed & (offs_n[None, :] <= offs_m[:, None])
    if HAS_KMASK:
        key_ok = tl.load(KMASK + b.to(tl.int64) * s_kb + offs_n * s_kn, mask=offs_n < kv_end, other=0)
        allowed = allowed & (key_ok != 0)[None, :]
    if HAS_MASK:
        ptrs = MASK + b.to(tl.int64) * s_mb + h.to(tl.int64) * s_mh + offs_m[:, None] * s_mm + offs_n[None, :] * s_mn
        allowed = allowed & (tl.load(ptrs, mask=allowed, other=0) != 0)
    return allowed


@triton.jit
def keep_block(seed, bh, offs_m, offs_n, q_len, k_len, dropout_p):
    """Bool [BLOCK_M, BLOCK_N]: dropout keeps this probability. Philox on a unique per-element offset."""
    offsets = (bh.to(tl.int64) * q_len + offs_m[:, None]) * k_len + offs_n[None, :]
    return tl.rand(seed, offsets) >= dropout_p
