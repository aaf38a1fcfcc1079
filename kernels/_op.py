"""The autograd op, registered twice with the same body:

* ``typed_transformer::flash_attn_fwd`` / ``_bwd``: torch.library.triton_op + wrap_triton, for CUDA tensors.
  torch.compile (inductor) sees the Triton kernels themselves and traces them without a graph break.
* ``typed_transformer::flash_attn_fwd_interpreted`` / ``_bwd_interpreted``: torch.library.custom_op with a
  fake implementation, for CPU tensors under TRITON_INTERPRET=1. There ``wrap_triton`` hands back the raw
  InterpretedFunction, which cannot run on fake tensors, so a triton_op cannot be compiled; an opaque
  custom op can (torch.compile(fullgraph=True) works on the CPU through it).

Both get their backward through torch.library.register_autograd.

In plain eager mode the same two bodies run through a torch.autograd.Function instead (``attention`` below picks):
torch.library's dispatch costs about twice as much host time per call, which matters for short sequences, and
buys nothing there. Whatever a plain call cannot handle goes through the registered op: torch.compile (Dynamo
traces the op), an active dispatch mode (FakeTensorMode, FlopCounterMode, ...), a torch function mode, tensor
subclasses and functorch transforms.
"""

import torch
from torch import Tensor
from torch.library import custom_op, register_autograd, triton_op, wrap_triton

from ._args import acc_dtype, eager_launch  # eager_launch: the eager path's wrapper (tests replace it here)

NAMESPACE = "typed_transformer"


def _traceable(kernel):
    """``wrap_triton(kernel)``, or ``kernel`` itself when ``TRITON_INTERPRET=1`` made it an ``InterpretedFunction``
    (alone or under ``triton.autotune``): torch 2.13's ``wrap_triton`` hands those back as they are, torch 2.9's
    raises "wrap_triton only works on functions annotated with triton.jit" instead."""
    from triton.runtime.jit import JITFunction

    inner = kernel
    while not isinstance(inner, JITFunction) and hasattr(inner, "fn"):  # an Autotuner's or Heuristics' function
        inner = inner.fn
    return wrap_triton(kernel) if isinstance(inner, JITFunction) else kernel


def _fwd(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    key_mask: Tensor | None,
    key_lengths: Tensor | None,
    seed: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    doc_bounds: Tensor | None = None,
    alibi_slopes: Tensor | None = None,
    window_left: int | None = None,
    window_right: int | None = None,
    softcap: float | None = None,
    sinks: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """(out, logsumexp). ``seed`` is the Philox (seed, offset) pair, a 2-element int64 tensor on q's device (or
    None without dropout); ``doc_bounds`` (kernels/_args.py ``document_bounds``) to ``softcap``: the documents,
    windows and score modifiers (kernels/_structure.py); ``sinks``: the (heads,) attention sinks' logits in the
    logsumexp's dtype, or None."""
    from . import _forward  # decorates the kernels at first use: TRITON_INTERPRET is read then

    wrapper = _traceable  # pointers, not tensor descriptors: torch.compile traces this body
    return _forward.forward(
        q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, doc_bounds, alibi_slopes, window_left,
        window_right, softcap, sinks, kernel_wrapper=wrapper, descriptors=False,
    )  # fmt: skip


def _bwd(
    grad_out: Tensor,
    grad_lse: Tensor | None,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    mask: Tensor | None,
    key_mask: Tensor | None,
    key_lengths: Tensor | None,
    seed: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    doc_bounds: Tensor | None = None,
    alibi_slopes: Tensor | None = None,
    window_left: int | None = None,
    window_right: int | None = None,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) from the saved forward inputs and outputs."""
    saved = (q, k, v, out, lse, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, doc_bounds, alibi_slopes)
    return _run_backward(grad_out, grad_lse, (*saved, window_left, window_right, softcap), _traceable)


def _saved(ctx) -> tuple[tuple, Tensor | None]:
    """The backward's inputs after (grad_out, grad_lse), in ``_bwd``'s order, from what :func:`_save` kept; and
    the sinks (or None)."""
    q, k, v, out, lse, mask, key_mask, key_lengths, seed, doc_bounds, alibi_slopes, sinks = ctx.saved_tensors
    return (
        q, k, v, out, lse, mask, key_mask, key_lengths, seed, ctx.causal, ctx.scale, ctx.dropout_p, doc_bounds,
        alibi_slopes, ctx.window_left, ctx.window_right, ctx.softcap,
    ), sinks  # fmt: skip


def _run_backward(grad_out: Tensor, grad_lse: Tensor | None, saved: tuple, wrapper) -> tuple[Tensor, Tensor, Tensor]:
    """The backward launcher on ``saved`` (:func:`_saved`'s order) with ``wrapper`` around each kernel: the one
    backward call of the registered ops and of the eager path."""
    q, k, v, out, lse, *rest = saved
    return _modules()[1].backward(grad_out, q, k, v, out, lse, grad_lse, *rest, kernel_wrapper=wrapper)


def _fwd_fake(q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure):
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=acc_dtype(q.dtype))


def _bwd_fake(
    grad_out, grad_lse, q, k, v, out, lse, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *rest
):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure = inputs
    out, lse = output
    _save(ctx, q, k, v, out, lse, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure)


def _save(ctx, q, k, v, out, lse, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure) -> None:
    """What the backward needs: the tensors saved for it, the rest on ``ctx``."""
    doc_bounds, alibi_slopes, window_left, window_right, softcap, sinks = structure
    ctx.save_for_backward(q, k, v, out, lse, mask, key_mask, key_lengths, seed, doc_bounds, alibi_slopes, sinks)
    ctx.causal, ctx.scale, ctx.dropout_p = causal, scale, dropout_p
    ctx.window_left, ctx.window_right, ctx.softcap = window_left, window_right, softcap


NO_GRADS = (None,) * 12  # the inputs after q, k, v up to the sinks get no gradient (slopes: constants)
SINKS_INPUT = 3 + len(NO_GRADS)  # the sinks' position among the op's inputs (the last)


def sink_grad(ctx, grad_out, grad_lse, out, lse, sinks):
    """The sinks' gradient, or None (no sinks, or none asked for). With p_i = exp(z_h - lse_i) the sink's share of
    query i's softmax and delta_i = rowsum(dO_i * O_i) (the sink's value is zero, so it adds nothing to O):
    d z_h = -sum over batch and queries of p_i (delta_i - d lse_i), in the logsumexp's dtype, computed in torch
    (the kernels' dq, dk and dv do not change: they use the same lse)."""
    if sinks is None or not ctx.needs_input_grad[SINKS_INPUT]:
        return None
    delta = torch.zeros_like(lse) if grad_out is None else (grad_out.to(lse.dtype) * out.to(lse.dtype)).sum(-1)
    if grad_lse is not None:
        delta = delta - grad_lse
    return -(torch.exp(sinks[:, None] - lse) * delta).sum((0, 2))


def _registered(name: str):
    """The op ``typed_transformer::<name>`` if this process has defined it already, else None.

    A second copy of this module (``importlib.reload``, or the repository's ``kernels/`` folder imported under its own
    name: transformers' probe for Hugging Face's ``kernels`` package does that when the repository root is on
    ``sys.path``) must not define the ops again: torch would destroy the first definition, and calls through the first
    copy's op objects would then read freed memory (a segfault or ``std::bad_alloc`` in torch's dispatcher)."""
    namespace = getattr(torch.ops, NAMESPACE)
    return getattr(namespace, name).default if hasattr(namespace, name) else None


def _register(suffix: str, interpreted: bool):
    defined = _registered(f"flash_attn_fwd{suffix}")
    if defined is not None:
        return defined
    if interpreted:
        fwd = custom_op(f"{NAMESPACE}::flash_attn_fwd{suffix}", _fwd, mutates_args=())
        bwd = custom_op(f"{NAMESPACE}::flash_attn_bwd{suffix}", _bwd, mutates_args=())
        fwd.register_fake(_fwd_fake)
        bwd.register_fake(_bwd_fake)
    else:
        fwd = triton_op(f"{NAMESPACE}::flash_attn_fwd{suffix}", _fwd, mutates_args=())
        bwd = triton_op(f"{NAMESPACE}::flash_attn_bwd{suffix}", _bwd, mutates_args=())

    def backward(ctx, grad_out, grad_lse):
        saved, sinks = _saved(ctx)
        dq, dk, dv = bwd(grad_out, grad_lse, *saved)
        return dq, dk, dv, *NO_GRADS, sink_grad(ctx, grad_out, grad_lse, saved[3], saved[4], sinks)

    register_autograd(f"{NAMESPACE}::flash_attn_fwd{suffix}", backward, setup_context=_setup_context)
    return fwd


flash_attn_fwd = _register("", interpreted=False)
flash_attn_fwd_interpreted = _register("_interpreted", interpreted=True)


_launchers: list = []  # [the _forward module, the _backward module], imported at the first eager call


def _modules():
    """The launcher modules (imported lazily: importing them decorates the kernels, reading TRITON_INTERPRET)."""
    if not _launchers:
        from . import _backward, _forward

        _launchers.extend((_forward, _backward))
    return _launchers


def _eager_forward(ctx, q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure):
    out, lse = _modules()[0].forward(
        q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure, kernel_wrapper=eager_launch
    )
    _save(ctx, q, k, v, out, lse, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure)
    return out, lse


def _eager_backward(ctx, grad_out, grad_lse):
    saved, sinks = _saved(ctx)
    out = saved[3]
    d_sinks = sink_grad(ctx, grad_out, grad_lse, out, saved[4], sinks)
    if grad_out is None:  # only the logsumexp was used
        grad_out = torch.zeros_like(out)
    if _legacy_batched(grad_out) or (grad_lse is not None and _legacy_batched(grad_lse)):
        # batched gradients (torch.autograd.grad(is_grads_batched=True), gradcheck's check_batched_grad): the
        # registered backward op, which the batching fallback runs once per gradient with plain tensors
        ops = torch.ops.typed_transformer
        op = ops.flash_attn_bwd if out.is_cuda else ops.flash_attn_bwd_interpreted
        dq, dk, dv = op(grad_out, grad_lse, *saved)
    else:
        dq, dk, dv = _run_backward(grad_out, grad_lse, saved, eager_launch)
    return dq, dk, dv, *NO_GRADS, d_sinks


# The kernels' backward has no backward of its own. Only a backward with create_graph=True runs with grad enabled;
# it goes through once_differentiable, which makes a double backward raise. The usual backward (grad disabled)
# skips the decorator's own work (host time per call).
_eager_backward_once = torch.autograd.function.once_differentiable(_eager_backward)


class _EagerFlashAttention(torch.autograd.Function):
    """The op's forward and backward bodies, called directly (no torch.library dispatch): (out, lse)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure):
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None (no zeros to fold in)
        return _eager_forward(ctx, q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure)

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        if torch.is_grad_enabled():
            return _eager_backward_once(ctx, grad_out, grad_lse)
        return _eager_backward(ctx, grad_out, grad_lse)


class _EagerFlashAttentionOut(torch.autograd.Function):
    """The same with the output alone (``flash_attention``): one output in the autograd graph, less host time."""

    @staticmethod
    def forward(ctx, q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure):
        return _eager_forward(ctx, q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure)[0]

    @staticmethod
    def backward(ctx, grad_out):
        if torch.is_grad_enabled():
            return _eager_backward_once(ctx, grad_out, None)
        return _eager_backward(ctx, grad_out, None)


_PLAIN = (Tensor, torch.nn.Parameter)
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_legacy_batched = torch._C._functorch.is_legacy_batchedtensor


def needs_registered_op(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether this call must go through the registered op (see the module docstring) rather than the eager
    autograd.Function."""
    return (
        torch.compiler.is_compiling()
        or torch._C._len_torch_dispatch_stack() > 0
        or torch._C._is_torch_function_mode_enabled()
        or type(q) not in _PLAIN
        or type(k) not in _PLAIN
        or type(v) not in _PLAIN
        or torch._C._functorch.is_functorch_wrapped_tensor(q)
        or torch._C._functorch.is_functorch_wrapped_tensor(k)
        or torch._C._functorch.is_functorch_wrapped_tensor(v)
    )


def attention(
    q,
    k,
    v,
    mask,
    key_mask,
    key_lengths,
    seed,
    causal: bool,
    scale: float,
    dropout_p: float,
    with_lse=True,
    structure=(),
):
    """(out, lse) (``with_lse=False``: out alone) through the registered op when the call needs it, else eagerly: the
    autograd.Function when a gradient may be asked for, the forward launcher itself when none can be (inference,
    e.g. decoding). ``structure``: (doc_bounds, alibi_slopes, window_left, window_right, softcap, sinks), () for
    none."""
    structure = structure or (None,) * 6
    sinks = structure[5]
    if not torch.compiler.is_compiling() and (
        _wrapped(q) or _wrapped(k) or _wrapped(v) or (sinks is not None and _wrapped(sinks))
    ):  # functorch transforms
        from ._functorch import FuncForward

        result = FuncForward.apply(q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure)
        return result if with_lse else result[0]
    if needs_registered_op(q, k, v):
        op = flash_attn_fwd if q.is_cuda else flash_attn_fwd_interpreted
        result = op(q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure)
        return result if with_lse else result[0]
    if torch.is_grad_enabled() and (
        q.requires_grad or k.requires_grad or v.requires_grad or (sinks is not None and sinks.requires_grad)
    ):
        function = _EagerFlashAttention if with_lse else _EagerFlashAttentionOut
        return function.apply(q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure)
    result = _modules()[0].forward(
        q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p, *structure, kernel_wrapper=eager_launch
    )
    return result if with_lse else result[0]
