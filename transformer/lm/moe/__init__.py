"""Mixtures of experts for the language model (docs/moe.md): the router, dispatch by expert and back, stacked gated
experts, Qwen2-MoE's shared expert, the block and the load-balancing loss."""

from .aux_loss import WithLoadBalancing, load_balancing_loss, model_aux_loss, router_logits_of
from .block import MoEFeedForward, install_experts
from .checks import check_experts, sparse_layers
from .dispatch import Dispatch, dispatch
from .experts import GatedExperts
from .router import Routing, TopKRouter
from .shared import SharedExpert

__all__ = [
    "Dispatch", "GatedExperts", "MoEFeedForward", "Routing", "SharedExpert", "TopKRouter", "WithLoadBalancing",
    "check_experts", "dispatch", "install_experts", "load_balancing_loss", "model_aux_loss", "router_logits_of",
    "sparse_layers",
]  # fmt: skip
