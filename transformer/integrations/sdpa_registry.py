"""PyTorch's flash-attention provider registry: F.scaled_dot_product_attention's flash path on our kernel.

```python
import torch
from transformer.integrations import sdpa_registry

sdpa_registry.register()                                              # once per process
torch.nn.attention.activate_flash_attention_impl("typed_transformer")  # opt in (torch's rule for providers)
...                                    # every F.scaled_dot_product_attention call that takes the flash path on CUDA
torch.nn.attention.restore_flash_attention_impl()                      # torch's own flash kernel again
```

Where torch has the registry (``torch.nn.attention.register_flash_attention_impl``; feature-detected, see
:func:`missing_reason`), :func:`register` adds an implementation named ``"typed_transformer"``. Activating it
overrides, on the CUDA dispatch key, the aten ops behind the flash path (those torch's own FA4 provider overrides,
``torch/nn/attention/_fa4.py``): ``_scaled_dot_product_flash_attention`` and its backward (what
F.scaled_dot_product_attention calls), ``_flash_attention_forward``/``_backward`` (the lower-level ops, dense inputs
only) and, where the op exists, ``_flash_attention_forward_no_dropout_inplace``. torch still decides which calls take
the flash path (no mask, float16/bfloat16, ...); it is only the kernel under that path that changes.

The adapters are plain functions (:func:`sdpa_flash_forward`, :func:`sdpa_flash_backward`,
:func:`flash_forward`, :func:`flash_backward`): they check support, convert layouts, call the kernel and return
what aten's signature promises. The logsumexp is (batch, heads, q_len) float32 in natural log, as aten's. Dropout
uses the kernel's own Philox generator: the forward draws a seed (from torch's default CPU generator, as the
kernel's API does) and returns it in ``rng_state`` ((2,) uint64, the layout torch's meta function gives), where the
backward reads it back. Inputs the kernel cannot take (varlen/ragged batches, sliding windows, ALiBi, paged KV, a
debug mask, head dims outside 16-256, ...) raise RuntimeError naming the reason, as torch's FA4 provider does: torch
cannot hand the call back to its own flash kernel once it is overridden.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "NAME",
    "register",
    "missing_reason",
    "sdpa_flash_forward",
    "sdpa_flash_backward",
    "flash_forward",
    "flash_backward",
    "OVERRIDDEN_OPS",
]

NAME = "typed_transformer"
#: The aten ops an activated provider overrides on the CUDA key (each only where this torch has it).
OVERRIDDEN_OPS = (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_backward",
    "_flash_attention_forward",
    "_flash_attention_backward",
    "_flash_attention_forward_no_dropout_inplace",
)


def missing_reason() -> str | None:
    """Why this torch cannot take a flash-attention provider (no registry), or None."""
    attention = torch.nn.attention
    if not hasattr(attention, "register_flash_attention_impl"):
        return (
            f"torch {torch.__version__} has no flash-attention provider registry "
            "(torch.nn.attention.register_flash_attention_impl); F.scaled_dot_product_attention keeps torch's own "
            "flash kernel. Call transformer.scaled_dot_product_attention instead, or upgrade torch"
        )
    return None


def register(name: str = NAME) -> str:
    """Add our kernel to torch's flash-attention provider registry under ``name``; returns ``name``.

    Nothing changes until ``torch.nn.attention.activate_flash_attention_impl(name)``; then
    ``torch.nn.attention.restore_flash_attention_impl()`` gives torch's own kernel back. Raises RuntimeError (with
    :func:`missing_reason`) on a torch without the registry.
    """
    reason = missing_reason()
    if reason is not None:
        raise RuntimeError(reason)
    torch.nn.attention.register_flash_attention_impl(name, register_fn=_activate)
    return name


@dataclass
class _Handle:
    """What the registry keeps while our provider is active; ``remove()`` (restore) drops the overrides."""

    library: torch.library.Library | None

    def remove(self) -> None:
        if self.library is not None:
            self.library._destroy()
            self.library = None


def _activate() -> _Handle:
    from .. import kernels  # noqa: F401  (Triton missing: fail here, at activation, with Python's ImportError)

    library = torch.library.Library("aten", "IMPL", "CUDA")
    impls = {
        "_scaled_dot_product_flash_attention": sdpa_flash_forward,
        "_scaled_dot_product_flash_attention_backward": sdpa_flash_backward,
        "_flash_attention_forward": flash_forward,
        "_flash_attention_backward": flash_backward,
        "_flash_attention_forward_no_dropout_inplace": _flash_forward_no_dropout_inplace,
    }
    for op, fn in impls.items():
        if hasattr(torch.ops.aten, op):
            library.impl(op, fn, "CUDA")
    return _Handle(library)


# ---------------------------------------------------------------------------- support and the kernel's ops
def _unsupported(q: Tensor, k: Tensor, v: Tensor, dropout_p: float, **refused) -> str | None:
    """Why the kernel cannot run these (batch, heads, len, dim) inputs, or None. ``refused`` maps an argument of
    aten's signature that the kernel has no equivalent for to its value: anything but None/-1/False/<=1 refuses."""
    for name, value in refused.items():
        if (
            value is not None
            and value is not False
            and not (name.startswith("window") and value == -1)
            and not (name == "num_splits" and value <= 1)
        ):
            return f"{name} is not supported"
    from .. import kernels

    return kernels.unsupported_reason(q, k, v, dropout_p=dropout_p)


def _ops(device: torch.device):
    suffix = "" if device.type == "cuda" else "_interpreted"
    return (
        getattr(torch.ops.typed_transformer, f"flash_attn_fwd{suffix}"),
        getattr(torch.ops.typed_transformer, f"flash_attn_bwd{suffix}"),
    )


def _rng_state(dropout_p: float, device: torch.device) -> tuple[Tensor, Tensor]:
    """(rng_state (2,) uint64 holding our seed, philox_offset () uint64): a fresh seed when dropping."""
    state = torch.zeros(2, dtype=torch.int64)
    if dropout_p > 0.0:
        state[0] = torch.randint(0, 2**62, (1,), dtype=torch.int64)
    return state.to(device).view(torch.uint64), torch.zeros((), dtype=torch.uint64, device=device)


def _seed(rng_state: Tensor, dropout_p: float) -> Tensor | None:
    return rng_state.view(torch.int64)[:1] if dropout_p > 0.0 else None


def _scale(scale: float | None, head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


def _forward(
    where: str, q: Tensor, k: Tensor, v: Tensor, dropout_p: float, is_causal: bool, scale: float | None, **refused
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out, lse, rng_state, philox_offset) of (batch, heads, len, dim) inputs, or RuntimeError."""
    reason = _unsupported(q, k, v, dropout_p, **refused)
    if reason is not None:
        raise RuntimeError(f"typed_transformer {where} unsupported: {reason}")
    rng_state, offset = _rng_state(dropout_p, q.device)
    fwd, _ = _ops(q.device)
    out, lse = fwd(
        q,
        k,
        v,
        None,
        None,
        None,
        _seed(rng_state, dropout_p),
        bool(is_causal),
        _scale(scale, q.size(-1)),
        float(dropout_p),
    )
    return out, lse, rng_state, offset


def _backward(
    where: str,
    grad_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dropout_p: float,
    is_causal: bool,
    rng_state: Tensor,
    scale: float | None,
    **refused,
) -> tuple[Tensor, Tensor, Tensor]:
    reason = _unsupported(q, k, v, dropout_p, **refused)
    if reason is None and lse.dtype != torch.float32:
        reason = f"logsumexp must be float32, got {lse.dtype}"
    if reason is not None:
        raise RuntimeError(f"typed_transformer {where} unsupported: {reason}")
    _, bwd = _ops(q.device)
    return bwd(
        grad_out,
        None,
        q,
        k,
        v,
        out,
        lse,
        None,
        None,
        None,
        _seed(rng_state, dropout_p),
        bool(is_causal),
        _scale(scale, q.size(-1)),
        float(dropout_p),
    )


# ---------------------------------------------------------------------------- aten's signatures
def sdpa_flash_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    return_debug_mask: bool = False,
    *,
    scale: float | None = None,
):
    """``aten::_scaled_dot_product_flash_attention``: (batch, heads, len, dim) inputs; returns (output, logsumexp
    (batch, heads, q_len) float32, cum_seq_q None, cum_seq_k None, max_q, max_k, rng_state, philox_offset,
    debug_attn_mask (empty))."""
    out, lse, rng_state, offset = _forward(
        "SDPA flash forward", query, key, value, dropout_p, is_causal, scale, return_debug_mask=return_debug_mask
    )
    debug = torch.empty(0, dtype=query.dtype, device=query.device)
    return out, lse, None, None, query.size(2), key.size(2), rng_state, offset, debug


def sdpa_flash_backward(
    grad_out: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    out: Tensor,
    logsumexp: Tensor,
    cum_seq_q: Tensor | None,
    cum_seq_k: Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    philox_seed: Tensor,
    philox_offset: Tensor,
    *,
    scale: float | None = None,
):
    """``aten::_scaled_dot_product_flash_attention_backward``: (grad_query, grad_key, grad_value), (batch, heads,
    len, dim) each; ``philox_seed`` is the forward's ``rng_state``."""
    return _backward(
        "SDPA flash backward",
        grad_out,
        query,
        key,
        value,
        out,
        logsumexp,
        dropout_p,
        is_causal,
        philox_seed,
        scale,
        cum_seq_q=cum_seq_q,
        cum_seq_k=cum_seq_k,
    )


def _bhsd(*tensors: Tensor) -> tuple[Tensor, ...]:
    """(batch, seq, heads, dim) -> (batch, heads, seq, dim) views (and back: the same transpose)."""
    return tuple(t.transpose(1, 2) for t in tensors)


def flash_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    cum_seq_q: Tensor | None,
    cum_seq_k: Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    return_debug_mask: bool,
    *,
    scale: float | None = None,
    window_size_left: int | None = None,
    window_size_right: int | None = None,
    seqused_k: Tensor | None = None,
    alibi_slopes: Tensor | None = None,
    block_table: Tensor | None = None,
    num_splits: int | None = None,
    **newer,
):
    """``aten::_flash_attention_forward``: dense (batch, seq, heads, dim) inputs (a ragged batch, ``cum_seq_q``, is
    refused); returns (output (batch, seq, heads, dim), logsumexp (batch, heads, q_len), rng_state, philox_offset,
    debug_attn_mask (empty)). Keyword arguments of newer torch versions are refused unless None."""
    q, k, v = _bhsd(query, key, value)
    out, lse, rng_state, offset = _forward(
        "flash_attention forward",
        q,
        k,
        v,
        dropout_p,
        is_causal,
        scale,
        cum_seq_q=cum_seq_q,
        cum_seq_k=cum_seq_k,
        return_debug_mask=return_debug_mask,
        window_size_left=window_size_left,
        window_size_right=window_size_right,
        seqused_k=seqused_k,
        alibi_slopes=alibi_slopes,
        block_table=block_table,
        num_splits=num_splits,
        **newer,
    )
    debug = torch.empty(0, dtype=query.dtype, device=query.device)
    return out.transpose(1, 2), lse, rng_state, offset, debug


def _flash_forward_no_dropout_inplace(out: Tensor, query: Tensor, key: Tensor, value: Tensor, *args, **kwargs):
    """``aten::_flash_attention_forward_no_dropout_inplace``: writes ``out``, returns the logsumexp."""
    result, lse, *_ = flash_forward(query, key, value, *args, **kwargs)
    out.copy_(result)
    return lse


def flash_backward(
    grad_out: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    out: Tensor,
    logsumexp: Tensor,
    cum_seq_q: Tensor | None,
    cum_seq_k: Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    rng_state: Tensor,
    unused: Tensor,
    *,
    scale: float | None = None,
    window_size_left: int | None = None,
    window_size_right: int | None = None,
    **newer,
):
    """``aten::_flash_attention_backward``: (grad_query, grad_key, grad_value), (batch, seq, heads, dim) each."""
    q, k, v, o, go = _bhsd(query, key, value, out, grad_out)
    dq, dk, dv = _backward(
        "flash_attention backward",
        go,
        q,
        k,
        v,
        o,
        logsumexp,
        dropout_p,
        is_causal,
        rng_state,
        scale,
        cum_seq_q=cum_seq_q,
        cum_seq_k=cum_seq_k,
        window_size_left=window_size_left,
        window_size_right=window_size_right,
        **newer,
    )
    return _bhsd(dq, dk, dv)
