"""The autograd op, registered twice with the same body:

* ``typed_transformer::flash_attn_fwd`` / ``_bwd``: torch.library.triton_op + wrap_triton, for CUDA tensors.
  torch.compile (inductor) sees the Triton kernels themselves and traces them without a graph break.
* ``typed_transformer::flash_attn_fwd_interpreted`` / ``_bwd_interpreted``: torch.library.custom_op with a
  fake implementation, for CPU tensors under TRITON_INTERPRET=1. There ``wrap_triton`` hands back the raw
  InterpretedFunction, which cannot run on fake tensors, so a triton_op cannot be compiled; an opaque
  custom op can (torch.compile(fullgraph=True) works on the CPU through it).

Both get their backward through torch.library.register_autograd.
"""

from typing import Optional

import torch
from torch import Tensor
from torch.library import custom_op, register_autograd, triton_op, wrap_triton

from ._args import acc_dtype

NAMESPACE = "typed_transformer"


def _fwd(
    q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], key_mask: Optional[Tensor],
    key_lengths: Optional[Tensor], seed: Optional[Tensor], causal: bool, scale: float, dropout_p: float,
) -> tuple[Tensor, Tensor]:
    """(out, logsumexp). ``seed`` is the Philox (seed, offset) pair, a 2-element int64 tensor on q's device (or
    None without dropout)."""
    from . import _forward  # decorates the kernels at first use: TRITON_INTERPRET is read then

    return _forward.forward(q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p,
                            kernel_wrapper=wrap_triton)


def _bwd(
    grad_out: Tensor, grad_lse: Optional[Tensor], q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
    mask: Optional[Tensor], key_mask: Optional[Tensor], key_lengths: Optional[Tensor], seed: Optional[Tensor],
    causal: bool, scale: float, dropout_p: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) from the saved forward inputs and outputs."""
    from . import _backward

    return _backward.backward(grad_out, q, k, v, out, lse, grad_lse, mask, key_mask, key_lengths, seed,
                              causal, scale, dropout_p, kernel_wrapper=wrap_triton)


def _fwd_fake(q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p):
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=acc_dtype(q.dtype))


def _bwd_fake(grad_out, grad_lse, q, k, v, out, lse, mask, key_mask, key_lengths, seed, causal, scale, dropout_p):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, mask, key_mask, key_lengths, seed)
    ctx.causal, ctx.scale, ctx.dropout_p = causal, scale, dropout_p


def _register(suffix: str, interpreted: bool):
    if interpreted:
        fwd = custom_op(f"{NAMESPACE}::flash_attn_fwd{suffix}", _fwd, mutates_args=())
        bwd = custom_op(f"{NAMESPACE}::flash_attn_bwd{suffix}", _bwd, mutates_args=())
        fwd.register_fake(_fwd_fake)
        bwd.register_fake(_bwd_fake)
    else:
        fwd = triton_op(f"{NAMESPACE}::flash_attn_fwd{suffix}", _fwd, mutates_args=())
        bwd = triton_op(f"{NAMESPACE}::flash_attn_bwd{suffix}", _bwd, mutates_args=())

    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse, mask, key_mask, key_lengths, seed = ctx.saved_tensors
        dq, dk, dv = bwd(grad_out, grad_lse, q, k, v, out, lse, mask, key_mask, key_lengths, seed,
                         ctx.causal, ctx.scale, ctx.dropout_p)
        return dq, dk, dv, None, None, None, None, None, None, None

    register_autograd(f"{NAMESPACE}::flash_attn_fwd{suffix}", backward, setup_context=_setup_context)
    return fwd


flash_attn_fwd = _register("", interpreted=False)
flash_attn_fwd_interpreted = _register("_interpreted", interpreted=True)
