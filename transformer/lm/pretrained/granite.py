"""Granite (``GraniteForCausalLM``; IBM, "Granite 3.0 Language Models", 2024) as :class:`LMConfig`: the Llama
family's model (RMSNorm, SwiGLU, grouped-query attention, ``attention_bias``, ``mlp_bias``) with four multipliers,
as ``modeling_granite.py`` applies them: ``embedding_multiplier`` on the token embeddings (``embedding_scale``),
``attention_multiplier`` as the score scale in place of 1/sqrt(d_k) (``attention_scale``), ``residual_multiplier``
on each sub-layer's output before the residual sum (``residual_scale``), and the logits divided by
``logits_scaling`` (``logit_divisor``).
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig
from .config_fields import ConfigFields
from .errors import PretrainedFormatError
from .llama import Llama

__all__ = ["Granite"]


class Granite(Llama):
    name = "GraniteForCausalLM"
    model_type = "granite"
    needs = "as Llama, with the embedding, attention, residual and logits multipliers"

    def lm_config(self, config: ConfigFields) -> LMConfig:
        llama = super().lm_config(config)
        try:
            return llama.replace(
                embedding_scale=config.number("embedding_multiplier", 1.0),
                attention_scale=config.number("attention_multiplier", 1.0),
                residual_scale=config.number("residual_multiplier", 1.0),
                logit_divisor=config.number("logits_scaling", 1.0),
            )
        except ValueError as error:
            raise PretrainedFormatError(f"{config.path}: describes a model LMConfig refuses: {error}") from None

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        return {
            **super().config_json(config),
            "embedding_multiplier": config.lambda_e,
            "attention_multiplier": config.tau,
            "residual_multiplier": config.residual_scale,
            "logits_scaling": config.logit_divisor,
        }
