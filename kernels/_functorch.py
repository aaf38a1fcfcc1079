"""The kernels under functorch transforms (``torch.func.grad``, ``vjp``, ``jacrev``, ``vmap``, and ``gradcheck``'s
batched gradients): autograd.Functions in the form functorch requires (``setup_context``, a ``vmap`` rule).

Neither a torch.library op's autograd (its generated autograd.Function has no ``setup_context``) nor the eager
autograd.Function of :mod:`._op` (forward takes ``ctx``) can run under a functorch transform, and a launcher cannot
read a BatchedTensor's storage. Here the forward and the backward are each an autograd.Function whose ``vmap`` rule
runs the kernel once per vmapped slice and stacks the results (one launch per slice: these transforms are for
checking, not speed). Under ``vmap`` with dropout, ``randomness="error"`` (the default) raises as torch's dropout does,
and ``"same"`` / ``"different"`` draw one mask for all slices / a seed per slice (the kernel's Philox seed advanced
per slice). The backward has no backward of its own (a second derivative raises, as on the eager path).
"""

import torch


def _launchers():
    from . import _op  # tests replace _op.eager_launch: read it at each call

    forward, backward = _op._modules()
    return forward, backward, _op.eager_launch


def _slice(x, dim, i):
    return x if dim is None or x is None else x.select(dim, i)


def _seed_for(seed, i, randomness):
    """The Philox seed of slice ``i``: the same for all with ``"same"``, offset per slice with ``"different"``."""
    if seed is None or randomness == "same":
        return seed
    return seed + i * 0x9E3779B1 if seed.dtype in (torch.int32, torch.int64) else seed


def _per_slice(info, in_dims, run, args, dropout_p):
    if dropout_p > 0.0 and info.randomness == "error":
        raise RuntimeError(
            "vmap: called random operation while in randomness error mode: the kernel's dropout needs "
            "torch.func.vmap(..., randomness='same' or 'different')"
        )
    outs = []
    for i in range(info.batch_size):
        sliced = [_slice(a, d, i) for a, d in zip(args, in_dims, strict=True)]
        outs.append(run(i, sliced))
    stacked = tuple(torch.stack([o[j] for o in outs]) for j in range(len(outs[0])))
    return stacked, (0,) * len(stacked)


class FuncForward(torch.autograd.Function):
    """(out, lse) of the kernel, for functorch transforms."""

    @staticmethod
    def forward(q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure):
        forward, _, launch = _launchers()
        return forward.forward(
            q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure, kernel_wrapper=launch
        )

    @staticmethod
    def setup_context(ctx, inputs, output):
        from ._op import _save

        ctx.set_materialize_grads(False)
        _save(ctx, *inputs[:3], *output, *inputs[3:])

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        from ._op import NO_GRADS, sink_grad

        q, k, v, out, lse, mask, key_mask, key_lengths, seed, doc_bounds, alibi_slopes, sinks = ctx.saved_tensors
        d_sinks = sink_grad(ctx, grad_out, grad_lse, out, lse, sinks)
        if grad_out is None:
            grad_out = torch.zeros_like(out)
        rest = (ctx.causal, ctx.scale, ctx.dropout_p, doc_bounds, alibi_slopes)
        rest = (*rest, ctx.window_left, ctx.window_right, ctx.softcap)
        dq, dk, dv = FuncBackward.apply(grad_out, q, k, v, out, lse, grad_lse, mask, key_mask, key_lengths, seed, *rest)
        return dq, dk, dv, *NO_GRADS, d_sinks

    @staticmethod
    def vmap(info, in_dims, q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure):
        args = (q, k, v, mask, key_mask, key_lengths, seed)

        def run(i, s):
            seed_i = _seed_for(s[6], i, info.randomness)
            return FuncForward.apply(*s[:6], seed_i, causal, scale, dropout_p, *structure)

        return _per_slice(info, in_dims[:7], run, args, dropout_p)


class FuncBackward(torch.autograd.Function):
    """(dq, dk, dv) of the kernel's backward, for functorch transforms (batched gradients included)."""

    @staticmethod
    def forward(grad_out, q, k, v, out, lse, grad_lse, mask, key_mask, key_lengths, seed, *rest):
        _, backward, launch = _launchers()
        return backward.backward(
            grad_out, q, k, v, out, lse, grad_lse, mask, key_mask, key_lengths, seed, *rest, kernel_wrapper=launch
        )

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("transformer.kernels: the kernels' backward is not differentiable (no double backward)")

    @staticmethod
    def vmap(info, in_dims, grad_out, q, k, v, out, lse, grad_lse, mask, key_mask, key_lengths, seed, *rest):
        args = (grad_out, q, k, v, out, lse, grad_lse, mask, key_mask, key_lengths, seed)

        def run(i, s):
            return FuncBackward.apply(*s, *rest)

        return _per_slice(info, in_dims[:11], run, args, 0.0)
