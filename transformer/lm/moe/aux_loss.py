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

__all__ = ["load_balancing_loss", "router_logits_of", "model_aux_loss", "WithLoadBalancing"]


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


class WithLoadBalancing(nn.Module):
    """A training criterion plus the load-balancing loss of ``model``'s last forward, as transformers' causal LMs
    add it (``loss = CE_mean + router_aux_loss_coef * aux_loss``): ``criterion(x, y) + coef * n * aux``, ``n`` the
    labels ``criterion`` counts (all but its ``ignore_index``), so that the trainer's division by the batch's label
    count gives ``CE_mean + coef * aux``. Only while ``model`` trains: evaluation's loss is the cross-entropy alone.
    Every token of the batch counts in ``aux`` (the training windows of ``train lm`` are never padded)."""

    def __init__(self, criterion: nn.Module, model: nn.Module) -> None:
        super().__init__()
        self.criterion = criterion
        self._model = (model,)  # not a submodule: the criterion holds no parameters of its own
        self.coef = float(model.config.router_aux_loss_coef)

    @property
    def ignore_index(self) -> int | None:
        return getattr(self.criterion, "ignore_index", None)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        loss = self.criterion(x, y)
        model = self._model[0]
        if not model.training or self.coef == 0.0:
            return loss
        counted = y.numel() if self.ignore_index is None else (y != self.ignore_index).sum()
        return loss + self.coef * counted * model_aux_loss(model).to(loss.dtype)
