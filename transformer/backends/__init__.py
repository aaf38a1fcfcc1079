"""The attention machinery: scaled dot-product attention (section 3.2.1), its reference and the backends that compute
it. Import everything from here.

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
``backend=`` argument of :func:`transformer.backends.sdpa.scaled_dot_product_attention`; the innermost
:func:`use_backend` block (a context variable, so threads and asyncio tasks each keep their own); the module's default
(``TransformerConfig.attention_backend``); ``"auto"``. A backend asked for by name never falls back: it raises.
Under torch.compile the choice is guarded (another choice traces again) and a refusal raises from the graph.

One concept per module:

* ``choice``: the backends' names, :func:`use_backend` / :func:`current_backend`, and :func:`resolve_backend` (auto's
  pick; a named backend never falls back);
* ``reference``: :func:`attention`, the semantic reference (the ``"eager"`` backend);
* ``score_mods``: the score modifiers (softcap, ALiBi and :func:`alibi_slopes`) the reference applies;
* ``dispatch``: :func:`run_backend` (each backend's masks) and :func:`refuse` (a refusal, raised from a compiled graph);
* ``torch_backend``: the ``"torch"`` backend, torch's function given the most structured mask it takes;
* ``grouped``: grouped-query attention in the modules (:func:`run_heads`);
* ``sdpa_reference``: the drop-in's reference, torch's definition in plain PyTorch (its ``"eager"`` backend);
* ``sdpa``: the drop-in for ``F.scaled_dot_product_attention`` (also ``transformer.sdpa``).
"""

from __future__ import annotations

from .choice import (
    BACKENDS,
    TRITON_INSTALL_HINT,
    check_backend_name,
    current_backend,
    resolve_backend,
    triton_missing_reason,
    triton_unsupported_reason,
    use_backend,
)
from .dispatch import Refusal, dense_heads_mask, kernel_masks, refuse, run_backend, score_modifiers
from .grouped import repeat_kv_heads, run_heads
from .reference import attention
from .score_mods import alibi_slopes
from .sdpa import scaled_dot_product_attention
from .torch_backend import torch_mask_form, torch_sdpa

__all__ = [
    "attention",
    "alibi_slopes",
    "use_backend",
    "current_backend",
    "BACKENDS",
    "TRITON_INSTALL_HINT",
    "triton_missing_reason",
    "check_backend_name",
    "resolve_backend",
    "triton_unsupported_reason",
    "Refusal",
    "refuse",
    "run_backend",
    "dense_heads_mask",
    "kernel_masks",
    "score_modifiers",
    "run_heads",
    "repeat_kv_heads",
    "torch_sdpa",
    "torch_mask_form",
    "scaled_dot_product_attention",
]
