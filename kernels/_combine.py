"""FlashDecoding's reduction of the split-KV forward's partial results (kernels/_forward.py launches it)."""

import triton
import triton.language as tl

from ._common import HEAD_MAJOR, head_ptr, load_rows, program_tile, tile_offsets


@triton.jit
def _combine_kernel(
    OW,
    LW,
    O,  # noqa: E741
    LSE,
    s_wb,
    s_wh,
    s_ws,
    s_wm,
    s_wd,
    s_ob,
    s_oh,
    s_om,
    s_od,
    heads,
    q_len,
    n_splits,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """FlashDecoding's reduction: out = sum over splits of exp(lse_s - lse) * out_s, lse = log sum exp(lse_s),
    per (batch, head, query block); a row no split saw a key of gets 0 and -inf."""
    bh, b, h, pid_m, offs_m, cols = program_tile(q_len, heads, 1, HEAD_DIM, BLOCK_M, BLOCK_D, 0, HEAD_MAJOR)
    offs_d, d_ok = cols[0]  # one padded head-dim tile: an elementwise reduction
    row_ok = offs_m < q_len
    lse_base = LW + bh.to(tl.int64) * n_splits * q_len + offs_m
    m = tl.full([BLOCK_M], float("-inf"), LSE.dtype.element_ty)
    for split in range(0, n_splits):
        m = tl.maximum(m, tl.load(lse_base + split * q_len, mask=row_ok, other=float("-inf")))
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    total = tl.zeros([BLOCK_M], LSE.dtype.element_ty)
    acc = tl.zeros([BLOCK_M, BLOCK_D], LSE.dtype.element_ty)
    w_base = head_ptr(OW, b, h, s_wb, s_wh)
    for split in range(0, n_splits):
        weight = tl.exp(tl.load(lse_base + split * q_len, mask=row_ok, other=float("-inf")) - m_safe)
        part = load_rows(w_base + split * s_ws, offs_m, offs_d, s_wm, s_wd, q_len, d_ok)
        acc += weight[:, None] * part
        total += weight
    empty = total == 0.0
    acc = acc / tl.where(empty, 1.0, total)[:, None]
    lse = tl.where(empty, float("-inf"), m_safe + tl.log(tl.where(empty, 1.0, total)))
    o_ptrs = head_ptr(O, b, h, s_ob, s_oh) + tile_offsets(offs_m, offs_d, s_om, s_od)
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    tl.store(LSE + bh.to(tl.int64) * q_len + offs_m, lse, mask=row_ok)
