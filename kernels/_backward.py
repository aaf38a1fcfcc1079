"""Backward kernels (FlashAttention-2): delta = rowsum(dO * O), then dK/dV per key block (kernels/_dkdv.py) and dQ
per query block (kernels/_dq.py) in two separate kernels, so there are no atomics and the result is deterministic."""

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
)
from ._common import HEAD_MAJOR, head_ptr, load_rows, program_tile
from ._dkdv import _dkdv_kernel
from ._dq import _dq_kernel


@triton.jit
def _delta_kernel(
    O,  # noqa: E741  (the output; the kernels name tensors by capital letters)
    DO,
    DELTA,
    s_ob,
    s_oh,
    s_om,
    s_od,
    s_db,
    s_dh,
    s_dm,
    s_dd,
    heads,
    q_len,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    bh, b, h, _, offs_m, cols = program_tile(q_len, heads, 1, HEAD_DIM, BLOCK_M, BLOCK_D, 0, HEAD_MAJOR)
    offs_d, d_ok = cols[0]  # one padded head-dim tile: an elementwise kernel
    o = load_rows(head_ptr(O, b, h, s_ob, s_oh), offs_m, offs_d, s_om, s_od, q_len, d_ok)
    do = load_rows(head_ptr(DO, b, h, s_db, s_dh), offs_m, offs_d, s_dm, s_dd, q_len, d_ok)
    delta = tl.sum(o.to(DELTA.dtype.element_ty) * do.to(DELTA.dtype.element_ty), 1)
    tl.store(DELTA + bh.to(tl.int64) * q_len + offs_m, delta, mask=offs_m < q_len)


dkdv_kernel = _tuning.build(_dkdv_kernel, "dkdv")
dq_kernel = _tuning.build(_dq_kernel, "dq")
delta_kernel = _delta_kernel


INTERPRETED = not autotuned(dkdv_kernel)  # the interpreter: jit functions, launched with the interpreter's blocks


def backward(
    do,
    q,
    k,
    v,
    out,
    lse,
    grad_lse,
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
):
    """Gradients (dq, dk, dv). ``grad_lse`` (or None) is the incoming gradient of the logsumexp output. The
    arguments go to the kernels positionally, in the order of their signatures. ``doc_bounds`` to ``softcap`` and
    ``kernel_wrapper``: as in _forward.forward. ``sinks`` is not read: given the forward's logsumexp (which includes
    the sinks), p_ij = exp(s_ij - lse_i) and dq, dk, dv are the same computation (the sink's value is zero, so
    delta = rowsum(dO * O) has no sink term); the sinks' own gradient is computed by the op (kernels/_op.py)."""
    batch, heads, q_len, head_dim = q.shape
    kv_heads, k_len = k.shape[1], k.shape[2]
    pairs = batch * heads
    device = q.device
    if do.stride(-1) != 1 or (do.stride(-2) == 0 and q_len > 1):
        # out.sum().backward() gives an expanded grad_out (every stride 0), a transposed one a strided head_dim:
        # the loads of dO would not be vectorised. FlashAttention copies it to a contiguous layout first too.
        do = do.contiguous()
    (mask_ptr, kmask_ptr, klen_ptr), side_strides = side_inputs(
        q, mask, key_mask, key_lengths, batch, heads, q_len, k_len
    )
    structure = (doc_bounds, alibi_slopes, window_left, window_right, softcap)
    (docb, slopes), (s_sb, s_sh, *modifiers) = structure_inputs(q, *structure, q_len, k_len)
    strides_in = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    tuning = _tuning.buckets(q_len, k_len, pairs)
    group = heads // kv_heads
    scalars = (*side_strides, s_sb, s_sh, heads, group, q_len, k_len, scale, dropout_p, *modifiers, *tuning)
    blocks = _tuning.interpret_block_items if INTERPRETED else ()
    flags = structure_flags(*structure)
    dkdv_constexprs, dq_constexprs = (  # each with its head-dim tile: padded, or in power-of-two pieces
        kernel_constexprs(
            q, mask, key_mask, key_lengths, causal, dropout_p, blocks, (*flags, *_head_dim.tile(k, head_dim))
        )
        for k in ("dkdv", "dq")
    )
    shares = _tuning.group_splits(batch, kv_heads, group, k_len, device)
    klen_dtype = key_lengths.dtype if key_lengths is not None else None
    key = ("backward", shares, *tuning, id(dkdv_constexprs), id(dq_constexprs), group, klen_dtype, device)
    if _tuning._tuned:  # some kernel may time configs at a new key (CUDA, not pinned): not while capturing
        _tuning.check_ready(("dkdv", "dq"), key, device)
    eager = kernel_wrapper is eager_launch
    wrap = kernel_wrapper if kernel_wrapper is not None else eager_launch
    sides = (mask_ptr, kmask_ptr, klen_ptr, seed if seed is not None else q, docb, slopes)
    acc = acc_dtype(q.dtype)
    with device_guard(device):
        delta = torch.empty((batch, heads, q_len), device=device, dtype=acc)
        wrap(delta_kernel)[_grid.blocks_grid(q_len, 32, pairs)](
            out, do, delta, *out.stride(), *do.stride(), heads, q_len, HEAD_DIM=head_dim, BLOCK_M=32,
            BLOCK_D=block_d(head_dim),
        )  # fmt: skip
        if grad_lse is not None:  # d lse_i / d s_ij = p_ij, which folds into delta
            delta -= grad_lse  # in place: delta keeps its contiguous layout whatever grad_lse's strides are
        dq = torch.empty_like(q)
        if shares == 1:
            dk, dv = torch.empty_like(k), torch.empty_like(v)
        else:  # float32 partial sums, one per share of the group, summed below in a fixed order
            dk, dv = (torch.empty((batch, kv_heads * shares, k_len, head_dim), device=device, dtype=acc) for _ in "kv")
        args = (q, k, v, do, lse, delta, dk, dv, *sides, *strides_in, *dk.stride(), *dv.stride(), *scalars, shares)
        grid = lambda meta: _grid.blocks_grid(k_len, meta["BLOCK_N"], batch * kv_heads * shares)  # noqa: E731
        if eager:
            launch(dkdv_kernel, grid, ("dkdv", *key), args, dkdv_constexprs)
        else:
            wrap(dkdv_kernel)[grid](*args, **dkdv_constexprs)
        if shares > 1:
            dk, dv = (t.view(batch, kv_heads, shares, k_len, head_dim).sum(2).to(k.dtype) for t in (dk, dv))
        args = (q, k, v, do, lse, delta, dq, *sides, *strides_in, *dq.stride(), *scalars)
        grid = lambda meta: _grid.blocks_grid(q_len, meta["BLOCK_M"], pairs)  # noqa: E731
        if eager:
            launch(dq_kernel, grid, ("dq", *key), args, dq_constexprs)
        else:
            wrap(dq_kernel)[grid](*args, **dq_constexprs)
    return dq, dk, dv
