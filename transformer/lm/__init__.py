"""The decoder-only language model: one concept per module; import everything from here.

* :mod:`~transformer.lm.config`: :class:`LMConfig`, the validated description of a model.
* :mod:`~transformer.lm.layers`: the blocks a decoder-only layer is made of.
* :mod:`~transformer.lm.attention`: causal self-attention (and the per-head value form).
* :mod:`~transformer.lm.model`: :class:`TransformerLM`, :func:`build_lm`, its cache and step function.
* :mod:`~transformer.lm.generation`: :func:`generate` and :func:`beam_generate`.
"""

from .config import LMConfig
from .generation import beam_generate, generate
from .model import LMCache, LMNextTokens, TransformerLM, build_lm

__all__ = ["LMConfig", "TransformerLM", "LMCache", "LMNextTokens", "build_lm", "generate", "beam_generate"]
