"""Scaled dot-product attention (section 3.2.1): the semantic reference and the backends that compute it.

:func:`attention` is the reference: softmax(Q K^T / sqrt(d_k)) V with a boolean mask (True = may attend),
dropout on the probabilities, and rows whose every key is masked giving zeros (forward) and zero gradients
(backward), never NaN. The backends compute the same function:

* ``"eager"``: that reference in plain PyTorch (the only one that returns the probabilities);
* ``"torch"``: ``torch.nn.functional.scaled_dot_product_attention`` (``is_causal`` when the mask is only causal);
* ``"triton"``: our fused kernel (``transformer.kernels``) on CUDA tensors, or CPU tensors under
  ``TRITON_INTERPRET=1``; it takes the causal flag, key lengths and key masks without a dense mask;
* ``"auto"``: the fastest correct backend for the device and inputs: triton on CUDA when the kernel takes the
  inputs (float32 excepted: its dots run without tensor cores, so SDPA, said at DEBUG level), else torch (measured
  in docs/benchmarks.md, "Attention backends"); eager for float64 inputs (what
  gradcheck, double backward and forward-mode AD use: SDPA's fused CPU kernel has no double backward) and
  where torch < 2.5 (whose fused attention returns NaN on fully masked rows).

Choosing one is a run-time decision, never part of a model's identity. From strongest to weakest: the
``backend=`` argument of :func:`transformer.sdpa.scaled_dot_product_attention`; the innermost :func:`use_backend`
block (a context variable, so threads and asyncio tasks each keep their own); the module's default
(``TransformerConfig.attention_backend``); ``"auto"``. A backend asked for by name never falls back: it raises.
Under torch.compile the choice is guarded (another choice traces again) and a refusal raises from the graph.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import logging
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .config import AttentionBackend
from .contracts import Bool, Float, Tensor, checked, validate_dtype_device
from .masks import AttentionMask

__all__ = ["attention", "use_backend", "current_backend",
           "BACKENDS", "TRITON_INSTALL_HINT", "triton_missing_reason"]

logger = logging.getLogger(__name__)
BACKENDS: tuple[str, ...] = ("auto", "eager", "torch", "triton")
TRITON_INSTALL_HINT = 'pip install triton (or pip install "typed-transformer[triton]")'
# The choice of the innermost `use_backend` block, read through `_CHOICE.name`: a property whose getter is the
# ContextVar's own C `get` called with the instance as its default (as the checks switch in contracts.py). In eager
# mode that is one C call; under torch.compile it is something Dynamo evaluates for real and guards on (it cannot trace
# `ContextVar.get` itself), so a compiled graph is only reused under the choice it was traced with.
_backend: contextvars.ContextVar[str] = contextvars.ContextVar("typed_transformer_attention_backend")
# `use_backend` blocks inside a function being compiled: Dynamo cannot trace ContextVar.set, so there the block pushes
# its choice here, in traced code (empty whenever no trace is under way).
_TRACE_BACKENDS: list[str] = []


class _Choice:
    """``_CHOICE.name`` is this context's ``use_backend`` choice, or ``_CHOICE`` itself when there is none."""

    __slots__ = ()
    name = property(_backend.get)


_CHOICE = _Choice()
_TORCH_ZEROES_EMPTY_ROWS = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def _check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"attention backend must be one of {', '.join(map(repr, BACKENDS))}; got {name!r}")
    return name


@contextlib.contextmanager
def use_backend(name: AttentionBackend) -> Iterator[None]:
    """Run every attention inside the block on backend ``name``, whatever the modules' defaults say.

    The choice lives in a context variable: other threads and asyncio tasks keep their own. Under torch.compile it
    is part of what a compiled graph is guarded on: a call under another choice traces again (see docs/attention.md).
    A block written inside the compiled function governs the calls inside it, for that trace.
    """
    name = _check_backend(name)
    if torch.compiler.is_compiling():  # a block inside the compiled function: this trace only
        _TRACE_BACKENDS.append(name)
        try:
            yield
        finally:
            _TRACE_BACKENDS.pop()
        return
    token = _backend.set(name)
    try:
        yield
    finally:
        _backend.reset(token)


def current_backend() -> str | None:
    """The backend of the innermost :func:`use_backend` block, or None outside one (under torch.compile too)."""
    if _TRACE_BACKENDS:
        return _TRACE_BACKENDS[-1]
    name = _CHOICE.name
    return None if name is _CHOICE else name


def triton_missing_reason() -> str | None:
    """Why the Triton backend cannot even be loaded here (Triton not installed), or None."""
    if importlib.util.find_spec("triton") is None:
        return f"Triton is not installed; install it with: {TRITON_INSTALL_HINT}"
    return None


@checked
def attention(
    query: Float[Tensor, "*batch q_len d_k"],
    key: Float[Tensor, "*batch k_len d_k"],
    value: Float[Tensor, "*batch k_len d_v"],
    mask: Bool[Tensor, "*#batch #q_len k_len"] | None = None,
    dropout: nn.Module | None = None,
    scale: float | None = None,
) -> tuple[Float[Tensor, "*batch q_len d_v"], Float[Tensor, "*batch q_len k_len"]]:
    """Compute 'Scaled Dot Product Attention' (section 3.2.1); returns (output, probabilities).

    The scores are ``Q K^T / sqrt(d_k)``, or ``Q K^T * scale`` when ``scale`` is given (a temperature).
    Masked scores are filled with the dtype's most negative finite value (not -1e9, which fp16
    cannot hold), and the probabilities are multiplied by the mask afterwards, so a fully
    masked row becomes all zeros with zero gradient instead of the uniform average (or NaN).
    ``key``, ``value`` and ``mask`` must be on the query's device, and ``key`` and ``value`` of its dtype (ValueError).
    """
    validate_dtype_device("attention", query, "argument 'query'", key=key, value=value, mask=mask)
    if scale is None:
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
    else:
        scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    p_attn = scores.softmax(dim=-1)
    if mask is not None:
        p_attn = p_attn * mask
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


# ---------------------------------------------------------------------------- masks per backend
def dense_heads_mask(mask: Tensor | AttentionMask | None, q_len: int, k_len: int) -> Tensor | None:
    """A 4-D dense mask broadcastable to (batch, heads, q_len, k_len) (eager and the general torch path)."""
    if isinstance(mask, AttentionMask):
        mask = mask.to_dense(q_len, k_len)
        return None if mask is None else mask.unsqueeze(1)
    return mask


def _kernel_masks(mask: Tensor | AttentionMask | None) -> dict:
    """The fused kernel's own mask arguments: the structured parts as they are, a dense mask as a 4-D tensor."""
    if not isinstance(mask, AttentionMask):
        return {"mask": mask}
    dense = None if mask.dense is None else mask.dense.unsqueeze(1)
    return {"mask": dense, "key_mask": mask.key_mask, "key_lengths": mask.key_lengths, "causal": mask.causal}


def _zero_padded_queries(out: Tensor, mask: Tensor | AttentionMask | None) -> Tensor:
    """Rows past ``query_lengths`` attend nothing: output 0 (and gradient 0), as the dense mask would give."""
    if isinstance(mask, AttentionMask) and mask.query_lengths is not None:
        valid = torch.arange(out.size(-2), device=out.device) < mask.query_lengths[:, None]
        return out * valid[:, None, :, None].to(out.dtype)
    return out


def _triton_reason(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | AttentionMask | None, dropout_p: float,
                   scale: float | None = None, auto: bool = False) -> str | None:
    missing = triton_missing_reason()
    if missing is not None:
        return missing
    try:
        from . import kernels
    except ImportError as error:  # triton installed but broken
        return f"transformer.kernels cannot be imported ({error}); reinstall Triton: {TRITON_INSTALL_HINT}"
    parts = _kernel_masks(mask)
    parts.pop("causal", None)
    reason = kernels.unsupported_reason(q, k, v, dropout_p=dropout_p, scale=scale, **parts)
    return reason if reason is not None or not auto else kernels.auto_reason(q)


class Refusal:
    """What :func:`refuse` returns while torch.compile traces: the error a backend choice must raise, kept until
    :func:`run_backend` puts it in the graph (an operator that raises it when the graph runs)."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def refuse(message: str) -> Refusal:
    """Raise ``ValueError(message)``; while torch.compile traces, return a :class:`Refusal` instead, which
    :func:`run_backend` turns into an operator that raises the same ValueError from the compiled graph (raising while
    tracing would reach a ``fullgraph=True`` caller as Dynamo's ``Unsupported``)."""
    if torch.compiler.is_compiling():
        return Refusal(message)
    raise ValueError(message)


def _define_refusal_operator() -> None:
    @torch.library.custom_op("typed_transformer::backend_refused", mutates_args=())
    def backend_refused(message: str, shape: list[int], dtype: torch.dtype, device: torch.device) -> Tensor:
        """Raise the backend choice's ValueError, at run time of a compiled graph."""
        raise ValueError(message)

    @backend_refused.register_fake
    def _(message: str, shape: list[int], dtype: torch.dtype, device: torch.device) -> Tensor:
        return torch.empty(shape, dtype=dtype, device=device)  # the attention's output: tracing goes on

    op = torch.ops.typed_transformer.backend_refused.default
    try:  # an effect: never removed as dead code
        torch.library._register_effectful_op(op, torch._library.effects.EffectType.ORDERED)
    except AttributeError:
        torch.fx.node.has_side_effect(op)


if not hasattr(torch.ops.typed_transformer, "backend_refused"):  # once per process (a reload finds it defined)
    _define_refusal_operator()


def _say(level: int, message: str, *args: object) -> None:
    """Log, except while torch.compile traces (a logging call there is a graph break)."""
    if not torch.compiler.is_compiling():
        logger.log(level, message, *args)


def resolve_backend(requested: str | None, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | AttentionMask | None,
                    dropout_p: float, scale: float | None = None) -> str | Refusal:
    """The backend that runs these inputs: ``requested`` (checked: a named backend never falls back) or auto's pick.

    The triton backend's inputs are validated here, once per call; the kernel is then called without a second check.
    A backend that cannot run the inputs raises ValueError (from the compiled graph, under torch.compile: see
    :func:`refuse`).
    """
    name = _check_backend(requested or "auto")
    if name == "triton":
        reason = _triton_reason(q, k, v, mask, dropout_p, scale)
        if reason is not None:
            return refuse(f"attention backend 'triton' cannot run these inputs: {reason}")
    if name != "auto":
        return name
    if q.dtype == torch.float64:  # verification (gradcheck, double backward, forward-mode AD): only the reference
        return "eager"            # supports every autograd mode; SDPA's fused CPU kernel has no double backward
    if q.is_cuda:
        if q.dtype == torch.float32:  # issue 18: until a GPU measures otherwise, SDPA for float32
            _say(logging.DEBUG, "attention backend 'auto' does not use triton for float32 inputs: the kernel's "
                 "float32 dots run without tensor cores; torch's SDPA is used (ask for backend 'triton' by name to "
                 "use the kernel)")
        else:
            reason = _triton_reason(q, k, v, mask, dropout_p, scale, True)  # True: auto's own rule too (issue 27)
            if reason is None:
                return "triton"
            _say(logging.INFO, "attention backend 'auto' does not use triton here: %s", reason)
    return "torch" if _TORCH_ZEROES_EMPTY_ROWS else "eager"


def _torch_sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | AttentionMask | None, dropout_p: float,
                scale: float | None) -> Tensor:
    """F.scaled_dot_product_attention with the most structured mask it takes: none, is_causal, or a boolean."""
    if isinstance(mask, AttentionMask):
        if mask.is_empty():
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale)
        if mask.causal and not mask.tensors():
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale)
        if mask.key_only():  # one (batch, 1, 1, k_len) row for every query and head
            mask = mask.to_dense(1, k.size(-2)).unsqueeze(1)
        else:
            mask = dense_heads_mask(mask, q.size(-2), k.size(-2))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)


def run_backend(name: str | Refusal, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | AttentionMask | None,
                dropout_p: float, scale: float | None = None) -> Tensor:
    """Attention on backend ``name`` (already resolved), inputs already checked; ``scale`` None is 1/sqrt(d_k).

    A :class:`Refusal` (what :func:`resolve_backend` gives while torch.compile traces a choice that cannot run) becomes
    the operator that raises its ValueError when the compiled graph runs."""
    if isinstance(name, Refusal):
        shape = [*q.shape[:-1], v.size(-1)]
        return torch.ops.typed_transformer.backend_refused.default(name.message, shape, q.dtype, q.device)
    if name == "triton":
        from . import kernels

        out = kernels.flash_attention(q, k, v, dropout_p=dropout_p, scale=scale, validate=False, **_kernel_masks(mask))
        return _zero_padded_queries(out, mask)
    if name == "torch":
        return _torch_sdpa(q, k, v, mask, dropout_p, scale)
    dropout = nn.Dropout(dropout_p) if dropout_p > 0 else None
    return attention.unchecked(q, k, v, dense_heads_mask(mask, q.size(-2), k.size(-2)), dropout, scale)[0]
