"""The decoder-only language model: one concept per module; import everything from here.

* :mod:`~transformer.lm.config`: :class:`LMConfig`, the validated description of a model (its block fields checked
  by :mod:`~transformer.lm.config_checks`).
* :mod:`~transformer.lm.layers`: the blocks a decoder-only layer is made of.
* :mod:`~transformer.lm.rotary`, :mod:`~transformer.lm.rms_norm`, :mod:`~transformer.lm.gated_feed_forward`: RoPE
  (and its scaling rules), RMSNorm, the gated feed-forward network (docs/lm_blocks.md).
* :mod:`~transformer.lm.softcap`: final-logit soft-capping (Gemma 2), inside the output projection.
* :mod:`~transformer.lm.attention`: causal self-attention (and the per-head value form), with QK-norm and RoPE.
* :mod:`~transformer.lm.positions`: positions of padded rows, the cache that remembers them, the sliding window.
* :mod:`~transformer.lm.blocks`: each layer's blocks built from the config (``feed_forward_for_layer``...).
* :mod:`~transformer.lm.model`: :class:`TransformerLM`, :func:`build_lm`, its step function.
* :mod:`~transformer.lm.pretrained`: Hugging Face checkpoint folders in and out; imported here, it registers the
  loader and writer behind :meth:`TransformerLM.from_pretrained` and :meth:`TransformerLM.save_pretrained`.
* :mod:`~transformer.lm.generation`: :func:`generate` and :func:`beam_generate`.
"""

from . import pretrained  # noqa: F401  (registers TransformerLM.from_pretrained and .save_pretrained)
from .config import LMConfig
from .generation import beam_generate, generate
from .model import LMCache, LMNextTokens, TransformerLM, build_lm

__all__ = ["LMConfig", "TransformerLM", "LMCache", "LMNextTokens", "build_lm", "generate", "beam_generate"]
