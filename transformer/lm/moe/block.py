"""The mixture-of-experts feed-forward block (Shazeer et al. 2017; Switch Transformer, Fedus et al. 2022; Mixtral,
Jiang et al. 2024, equation 1): ``y = sum_{e in top-k(x)} g_e(x) E_e(x)`` (+ Qwen2-MoE's shared expert).

One call runs four contracted stages: the :class:`~transformer.lm.moe.router.TopKRouter` (tokens -> k experts and
weights), :func:`~transformer.lm.moe.dispatch.dispatch` (the pairs sorted by expert: permutation, inverse, tokens
per expert), the :class:`~transformer.lm.moe.experts.GatedExperts` on each expert's block of rows, and
:meth:`~transformer.lm.moe.dispatch.Dispatch.combine` (back to token order, weighted, summed). The router's logits
of the last call stay in ``router_logits`` (tokens, n_experts) for the load-balancing loss
(:mod:`~transformer.lm.moe.aux_loss`), as transformers' ``output_router_logits`` returns them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ...contracts import Float, Tensor, checked
from .clamped_experts import ClampedSwiGLUExperts
from .dispatch import dispatch
from .experts import GatedExperts
from .router import TopKRouter
from .shared import SharedExpert

if TYPE_CHECKING:
    from ..config import LMConfig

__all__ = ["MoEFeedForward"]


class MoEFeedForward(nn.Module):
    """A sparse feed-forward block: ``router`` picks ``k`` of the ``experts`` per token; ``shared`` (or None) is
    added for every token. Takes and returns (*batch, d_model)."""

    def __init__(
        self, router: TopKRouter, experts: GatedExperts | ClampedSwiGLUExperts, shared: SharedExpert | None = None
    ) -> None:
        super().__init__()
        if (router.d_model, router.n_experts) != (experts.d_model, experts.n_experts):
            raise ValueError(
                f"MoEFeedForward: the router routes d_model={router.d_model} to {router.n_experts} experts, the "
                f"experts are {experts.n_experts} of d_model={experts.d_model}"
            )
        self.d_model = router.d_model
        self.router, self.experts, self.shared = router, experts, shared
        self.router_logits: Tensor | None = None

    @classmethod
    def from_config(cls, config: LMConfig) -> MoEFeedForward:
        """The block :class:`~transformer.lm.config.LMConfig`'s expert fields describe."""
        router = TopKRouter(
            config.d_model, config.n_experts, config.experts_per_token, score=config.router_score,
            norm_topk=config.router_norm_topk, bias=config.router_bias, softmax_topk=config.router_softmax_topk,
            rounded=config.router_weights_rounded,
        )  # fmt: skip
        d_ff = config.expert_d_ff or config.d_ff
        if config.expert_swiglu_limit is not None:  # gpt-oss's
            limit, alpha = config.expert_swiglu_limit, config.expert_swiglu_alpha
            experts = ClampedSwiGLUExperts(config.n_experts, config.d_model, d_ff, limit=limit, alpha=alpha)
        else:
            experts = GatedExperts(config.n_experts, config.d_model, d_ff, config.activation)
        shared = None
        if config.shared_expert_d_ff is not None:
            shared = SharedExpert(config.d_model, config.shared_expert_d_ff, config.activation)
        return cls(router, experts, shared)

    @checked
    def forward(self, x: Float[Tensor, "*batch {self.d_model}"]) -> Float[Tensor, "*batch {self.d_model}"]:
        flat = x.reshape(-1, self.d_model)
        routing = self.router(flat)
        self.router_logits = routing.logits
        pairs = dispatch(routing.experts, self.router.n_experts)
        y = pairs.combine(self.experts(pairs.gather(flat), pairs.counts), routing.weights)
        if self.shared is not None:
            y = y + self.shared(flat)
        return y.view(x.shape)


def install_experts(model: nn.Module, config: LMConfig) -> None:
    """Give each sparse layer of ``model`` (a freshly built TransformerLM) the block of ``config`` in place of its
    dense feed-forward network (:func:`~transformer.lm.moe.checks.sparse_layers`)."""
    from .checks import sparse_layers

    for i in sparse_layers(config):
        model.layers[i].feed_forward = MoEFeedForward.from_config(config)
