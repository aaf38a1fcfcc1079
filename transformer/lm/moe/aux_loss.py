"""The load-balancing auxiliary loss of a mixture of experts (Switch Transformer, Fedus et al. 2022, equations
4-6), as transformers' ``load_balancing_loss_func`` defines it for Mixtral, Qwen2/3-MoE and OLMoE.

Over the router logits of every sparse layer (concatenated: L layers of T tokens are L T rows) and the real tokens
(``mask``, True = real; None: every token): ``f_e`` the fraction of rows whose top-k holds expert ``e`` (summing to
k), ``P_e`` the mean softmax probability of ``e``; ``loss = n_experts * sum_e f_e P_e`` (1 x k when the routing is
uniform). A training step adds ``router_aux_loss_coef * loss`` to the cross-entropy (transformers' ``loss +=
coef * aux_loss`` when ``output_router_logits``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ...contracts import Tensor

__all__ = ["load_balancing_loss", "router_logits_of", "model_aux_loss"]


def load_balancing_loss(router_logits: Sequence[Tensor], n_experts: int, k: int, mask: Tensor | None = None) -> Tensor:
    """``n_experts * sum_e f_e P_e`` over the layers' ``router_logits`` (each (tokens, n_experts)), counting the
    tokens where ``mask`` (any shape of ``tokens`` elements) is True. A float32 scalar."""
    if not router_logits:
        raise ValueError("load_balancing_loss: argument 'router_logits' is empty (a model without sparse layers)")
    device = router_logits[0].device
    counts = torch.zeros(n_experts, dtype=torch.float32, device=device)
    probs = torch.zeros(n_experts, dtype=torch.float32, device=device)
    rows = torch.zeros((), dtype=torch.float32, device=device)
    for i, logits in enumerate(router_logits):
        if logits.dim() != 2 or logits.size(1) != n_experts:
            raise ValueError(
                f"load_balancing_loss: router_logits[{i}] must be (tokens, {n_experts}), got {tuple(logits.shape)}"
            )
        real = torch.ones(logits.size(0), dtype=torch.float32, device=device)
        if mask is not None:
            if mask.numel() != logits.size(0):
                raise ValueError(
                    f"load_balancing_loss: argument 'mask' has {mask.numel()} elements, router_logits[{i}] "
                    f"{logits.size(0)} tokens"
                )
            real = mask.reshape(-1).to(device=device, dtype=torch.float32)
        weights = torch.softmax(logits, dim=-1)
        chosen = torch.topk(weights, k, dim=-1).indices
        counts = counts.scatter_add(0, chosen.reshape(-1), real.repeat_interleave(k))
        probs = probs + (weights.float() * real[:, None]).sum(0)
        rows = rows + real.sum()
    return (counts / rows * (probs / rows)).sum() * n_experts


def router_logits_of(model: nn.Module) -> list[Tensor]:
    """The router logits of the last forward of every mixture-of-experts block in ``model``, in module order."""
    from .block import MoEFeedForward

    return [m.router_logits for m in model.modules() if isinstance(m, MoEFeedForward) and m.router_logits is not None]


def model_aux_loss(model: nn.Module, mask: Tensor | None = None) -> Tensor:
    """:func:`load_balancing_loss` of ``model``'s last forward (its config's ``n_experts`` and
    ``experts_per_token``), over the tokens ``mask`` marks real."""
    config = model.config
    return load_balancing_loss(router_logits_of(model), config.n_experts, config.experts_per_token, mask)
