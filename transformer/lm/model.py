"""The decoder-only Transformer language model (the functional-transformer's model, GPT's shape).

A stack of :class:`~transformer.lm.layers.DecoderOnlyLayer` (masked self-attention and a feed-forward network)
between token embeddings plus positions and a final normalisation; :class:`~transformer.model.Generator` turns
the hidden states into log-probabilities of the next token. :class:`~transformer.lm.config.LMConfig` chooses
between the paper's formulation and the functional transformer's (``LMConfig.functional``), option by option.

The model is always causal: the mask it is given (key padding, an ``AttentionMask`` or a dense tensor) is
combined with "attend to yourself and earlier positions", passed as ``AttentionMask(causal=True, ...)`` so every
backend runs without a dense mask. Incremental decoding is the modules' own: :meth:`TransformerLM.new_cache`
gives an :class:`LMCache` (one :class:`~transformer.cache.KVCache` per layer), the embeddings take the position
offset, and :meth:`TransformerLM.next_tokens` is the step function that :mod:`transformer.decoding`'s searches
and :func:`transformer.lm.generation.generate` run on.
"""

from __future__ import annotations

import math

from torch import nn

from ..cache import KVCache, StackCache
from ..contracts import Bool, Float, Int, Tensor, checked, validate_dtype_device, validate_length, validate_nonempty
from ..embeddings import EmbeddingStack
from ..layers import PositionwiseFeedForward, clones
from ..masks import AttentionMask, subsequent_mask
from ..model import Generator
from .attention import CausalSelfAttention, PerHeadValueAttention
from .config import LMConfig
from .layers import (
    DecoderOnlyLayer,
    ScaledEmbeddings,
    ScaledLearnedPositionalEncoding,
    ScaledPositionalEncoding,
    make_norm,
)

__all__ = ["TransformerLM", "LMCache", "LMNextTokens", "build_lm"]


class LMCache(StackCache):
    """The key/value caches of the whole stack: one :class:`~transformer.cache.KVCache` per layer."""

    layer_type = KVCache


class TransformerLM(nn.Module):
    """A decoder-only Transformer: ``Norm(Layers(lambda_e * E[x] + lambda_pe * P))`` (sections 3.1-3.5).

    ``forward(tokens, mask=None)`` returns hidden states (batch, seq, d_model); apply ``generator`` for
    log-probabilities, as for :class:`~transformer.model.EncoderDecoder`. Position ``t`` sees tokens ``0..t`` only.
    """

    def __init__(
        self,
        embed: EmbeddingStack,
        layer: DecoderOnlyLayer,
        n_layers: int,
        generator: Generator,
        config: LMConfig | None = None,
        norm: str = "layer",
    ) -> None:
        super().__init__()
        self.embed = embed
        self.layers = clones(layer, n_layers)
        self.norm = make_norm(norm, layer.size, layer.eps)
        self.generator = generator
        self.config = config
        self.d_model = layer.size
        self.max_len = embed.max_len

    @checked
    def forward(
        self,
        tokens: Int[Tensor, "batch seq"],
        mask: Bool[Tensor, "#batch #seq seq"] | AttentionMask | None = None,
        *,
        cache: LMCache | None = None,
    ) -> Float[Tensor, "batch seq {self.d_model}"]:
        """``mask`` may hide padding (True = may attend); causality is always added. With ``cache`` (from
        :meth:`new_cache`), ``tokens`` holds the positions after the ``cache.length`` cached ones and ``mask`` is
        None: a prompt of several positions goes into an empty cache, then one position at a time."""
        validate_nonempty(tokens, "TransformerLM.forward: argument 'tokens'", "batch seq")
        validate_dtype_device(
            "TransformerLM.forward",
            lambda: self.generator.proj.weight,
            "the model's parameters",
            tokens=tokens,
            mask=mask,
        )
        offset = 0 if cache is None else cache.length
        validate_length(offset + tokens.size(1), self.max_len, "TransformerLM input")
        if cache is None:
            mask = self._causal(mask, tokens.size(1))
        else:
            mask = cache.self_attention_mask(
                tokens.size(1), mask, layers=len(self.layers), who="TransformerLM", stack="the model", mask_name="mask"
            )
        x = self.embed(tokens, offset=offset)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, None if cache is None else cache.layers[i])
        return self.norm(x)

    @staticmethod
    def _causal(mask: Tensor | AttentionMask | None, seq: int) -> Tensor | AttentionMask:
        if mask is None:
            return AttentionMask(causal=True)
        if isinstance(mask, AttentionMask):
            return mask.replace(causal=True)
        return mask & subsequent_mask(seq, device=mask.device)

    @classmethod
    def from_pretrained(cls, path, dtype=None, device=None) -> TransformerLM:
        """The model of a Hugging Face checkpoint folder: :func:`transformer.lm.pretrained.load_pretrained`."""
        from .pretrained import load_pretrained

        return load_pretrained(path, dtype=dtype, device=device)

    def save_pretrained(self, path, *, architecture: str | None = None):
        """Write a Hugging Face checkpoint folder: :func:`transformer.lm.pretrained.save_pretrained`."""
        from .pretrained import save_pretrained

        return save_pretrained(self, path, architecture=architecture)

    def new_cache(self) -> LMCache:
        """An empty key/value cache for :meth:`forward` one position at a time."""
        return LMCache(len(self.layers))

    @checked
    def next_token_log_probs(
        self, ys: Int[Tensor, "batch steps"], cache: LMCache | None = None
    ) -> Float[Tensor, "batch vocab"]:
        """Log-probabilities of the token after ``ys``. Without a cache the whole prefix runs again; with one,
        an empty cache takes the whole prefix (the prompt) and a cache holding ``steps - 1`` positions only the
        last token. Both give the same result."""
        if cache is None:
            out = self(ys)
        elif cache.length == 0:
            out = self(ys, cache=cache)
        else:
            if cache.length != ys.size(1) - 1:
                raise ValueError(
                    f"LMCache holds {cache.length} positions but ys has {ys.size(1)}; expected 0 (a "
                    f"prompt) or {ys.size(1) - 1}"
                )
            out = self(ys[:, -1:], cache=cache)
        return self.generator(out[:, -1])

    def next_tokens(self, *, use_cache: bool = True) -> LMNextTokens:
        """The step function of decoding: see :class:`LMNextTokens`."""
        return LMNextTokens(self, use_cache=use_cache)


class LMNextTokens:
    """One decoding step of a :class:`TransformerLM`: ``steps(ys)`` gives the log-probabilities (batch, vocab) of
    the token after ``ys`` (batch, steps), with a key/value cache when ``use_cache``; :meth:`reorder` follows beam
    search's hypotheses. The step function of :func:`transformer.decoding.search` and ``beam_search_steps``."""

    def __init__(self, model: TransformerLM, *, use_cache: bool = True) -> None:
        self.model = model
        self.cache = model.new_cache() if use_cache else None

    def __call__(self, ys: Tensor) -> Tensor:
        return self.model.next_token_log_probs(ys, self.cache)

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (rows may repeat)."""
        if self.cache is not None:
            self.cache.reorder(index)


# ---------------------------------------------------------------------------- construction
def _positions(config: LMConfig) -> nn.Module:
    if config.positional_encoding == "learned":
        return ScaledLearnedPositionalEncoding(
            config.d_model, config.dropout, config.max_len, config.positional_scale, config.positional_init
        )
    return ScaledPositionalEncoding(config.d_model, config.dropout, config.max_len, config.positional_scale)


def _attention(config: LMConfig) -> nn.Module:
    kind = PerHeadValueAttention if config.value_projection == "per_head" else CausalSelfAttention
    grouped = {} if kind is PerHeadValueAttention else {"kv_heads": config.kv_heads}  # GQA: the W^O form only
    return kind(
        config.n_heads,
        config.d_model,
        config.attention_dropout,
        scale=config.tau,
        backend=config.attention_backend,
        **grouped,
    )


def _initialise(model: TransformerLM, config: LMConfig) -> None:
    """``"xavier"``: Glorot-uniform matrices (each head's value map on its own), as build_model;
    ``"functional"``: the functional transformer's N(0, 1) embeddings, U(+-1/sqrt(fan_in)) weights, zero biases."""
    for module in model.modules():
        if isinstance(module, PerHeadValueAttention):
            for w in module.value_weight:
                bound = 1.0 / math.sqrt(config.d_model)
                nn.init.uniform_(w, -bound, bound) if config.init == "functional" else nn.init.xavier_uniform_(w)
            nn.init.zeros_(module.value_bias)
        elif isinstance(module, nn.Linear):
            if config.init == "functional":
                bound = 1.0 / math.sqrt(module.in_features)
                nn.init.uniform_(module.weight, -bound, bound)
                nn.init.zeros_(module.bias)
            else:
                nn.init.xavier_uniform_(module.weight)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight) if config.init == "functional" else nn.init.xavier_uniform_(module.weight)


def build_lm(config: LMConfig) -> TransformerLM:
    """Construct a language model from a validated config (initialised as ``config.init`` says, tied as
    configured)."""
    attention = _attention(config)
    ff = PositionwiseFeedForward(
        config.d_model, config.d_ff, config.dropout if config.ffn_hidden_dropout else 0.0, config.activation
    )
    layer = DecoderOnlyLayer(
        config.d_model, attention, ff, config.dropout, config.norm_placement, config.layer_norm_eps, config.norm
    )
    embed = EmbeddingStack(ScaledEmbeddings(config.d_model, config.vocab, config.lambda_e), _positions(config))
    model = TransformerLM(embed, layer, config.n_layers, Generator(config.d_model, config.vocab), config, config.norm)
    _initialise(model, config)
    if config.tie_weights:
        model.generator.proj.weight = model.embed[0].lut.weight
    return model
