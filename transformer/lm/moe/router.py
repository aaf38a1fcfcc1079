"""The router of a mixture of experts (Shazeer et al. 2017, "Outrageously Large Neural Networks", section 2.1;
Mixtral, Jiang et al. 2024, section 2.1): each token's scores over the experts, and the top-k experts it goes to.

``logits = W_r x (+ b_r)``; ``scores = softmax(logits)`` (Mixtral, Qwen-MoE, OLMoE) or ``sigmoid(logits)``;
the ``k`` best experts by score, their weights the scores, divided by their sum when ``norm_topk`` (Mixtral's
``top_k_value /= sum``; Qwen's ``norm_topk_prob``); or, with ``softmax_topk`` (gpt-oss's ``GptOssTopKRouter``), the
``k`` largest logits and the softmax of those ``k`` alone, in the logits' dtype. The scores are computed in float32
whatever the model's dtype, as transformers' routers do (``softmax(router_logits.float())``), so a float64 or
bfloat16 model routes as theirs. ``rounded``: the top-k weights are then rounded to the logits' dtype (the model's)
before they weight the experts' outputs, as Qwen-MoE's router does (``router_top_value.to(router_logits.dtype)``):
in float32 and float64 the same numbers, in bfloat16 and float16 Qwen-MoE's (docs/moe.md, "Half precision").

Ties: the k experts are ``torch.topk`` of the float32 scores, transformers' own two calls (softmax, topk) on the
same logits, so equal scores pick the same experts as theirs. On the CPU that is not the lowest indices: five
exactly equal scores pick experts (2, 4), eight pick (6, 5), with torch 2.13; and router rows that are equal give
logits equal only up to the matmul's rounding, so the pick follows the last bits (tests/test_pretrained_mixtral.py
checks both against transformers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from ...contracts import Float, Int, Tensor, checked

__all__ = ["TopKRouter", "Routing", "RouterScore"]

RouterScore = Literal["softmax", "sigmoid"]


@dataclass(frozen=True)
class Routing:
    """One router call over ``tokens`` tokens: ``logits`` (tokens, n_experts) in the model's dtype (what the
    load-balancing loss reads), ``weights`` (tokens, k) float32 (the logits' dtype with ``softmax_topk`` or
    ``rounded``) and ``experts`` (tokens, k) int64, each token's chosen experts in decreasing score."""

    logits: Tensor
    weights: Tensor
    experts: Tensor


class TopKRouter(nn.Module):
    """``top-k(score(W_r x + b_r))`` over ``n_experts``: a :class:`Routing` for each token of ``x`` (tokens, d_model).

    ``weight`` (n_experts, d_model) is transformers' ``mlp.gate.weight`` (``mlp.router.weight`` in gpt-oss);
    ``bias`` only when ``bias`` (gpt-oss). ``softmax_topk``: gpt-oss's rule, ``softmax(top-k(W_r x + b_r))`` (the
    weights then in the logits' dtype, as theirs: float64 models keep float64 weights). ``rounded``: the weights
    rounded to the logits' dtype (Qwen-MoE's cast; the module's docstring)."""

    def __init__(
        self, d_model: int, n_experts: int, k: int, *, score: RouterScore = "softmax", norm_topk: bool = True,
        bias: bool = False, softmax_topk: bool = False, rounded: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        if not 1 <= k <= n_experts:
            raise ValueError(f"TopKRouter: k must be in [1, n_experts={n_experts}], got k={k}")
        if score not in ("softmax", "sigmoid"):
            raise ValueError(f"TopKRouter: score must be 'softmax' or 'sigmoid', got score={score!r}")
        self.d_model, self.n_experts, self.k, self.score, self.norm_topk = d_model, n_experts, k, score, norm_topk
        self.weight = nn.Parameter(torch.empty(n_experts, d_model))
        self.bias = nn.Parameter(torch.zeros(n_experts)) if bias else None
        self.softmax_topk, self.rounded = softmax_topk, rounded
        nn.init.normal_(self.weight, std=0.02)

    @checked
    def logits(self, x: Float[Tensor, "tokens {self.d_model}"]) -> Float[Tensor, "tokens {self.n_experts}"]:
        """``W_r x + b_r``, in ``x``'s dtype."""
        return nn.functional.linear(x, self.weight, self.bias)

    def forward(self, x: Tensor) -> Routing:
        logits = self.logits(x)
        weights, experts = self.choose(logits)
        return Routing(logits, weights, experts)

    @checked
    def choose(
        self, logits: Float[Tensor, "tokens {self.n_experts}"]
    ) -> tuple[Float[Tensor, "tokens {self.k}"], Int[Tensor, "tokens {self.k}"]]:
        """The float32 weights (in the logits' dtype when ``rounded``) and the indices of each token's ``k`` experts,
        in decreasing score (with ``softmax_topk``: the softmax of the ``k`` largest logits, in their dtype; ties as
        ``torch.topk`` of the logits, transformers' gpt-oss call)."""
        if self.softmax_topk:
            values, experts = torch.topk(logits, self.k, dim=-1)
            return values.softmax(dim=-1), experts
        scores = logits.float().softmax(-1) if self.score == "softmax" else logits.float().sigmoid()
        weights, experts = torch.topk(scores, self.k, dim=-1)
        if self.norm_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return (weights.to(logits.dtype) if self.rounded else weights), experts
