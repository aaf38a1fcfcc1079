"""The decoder-only Transformer language model (the functional-transformer's model, GPT's shape).

A stack of :class:`~transformer.lm.layers.DecoderOnlyLayer` (masked self-attention and a feed-forward network)
between token embeddings plus positions and a final normalisation; :class:`~transformer.model.Generator` turns
the hidden states into log-probabilities of the next token. :class:`~transformer.lm.config.LMConfig` chooses
between the paper's formulation and the functional transformer's (``LMConfig.functional``), option by option.

The model is always causal: the mask it is given (key padding, an ``AttentionMask`` or a dense tensor) is
combined with "attend to yourself and earlier positions", passed as ``AttentionMask(causal=True, ...)`` so every
backend runs without a dense mask; a sliding window is the structured ``window_left = sliding_window - 1``. A
packed row (several documents, ``AttentionMask(documents=...)``, or ``from_cu_seqlens``/``from_position_ids``) keeps
each position within its document, and positions restart at every document for every positional scheme
(:func:`~transformer.lm.positions.positions_from_documents`), so a packed row computes what its documents alone
would (docs/lm.md, "Packed rows"). Incremental decoding is the modules' own:
:meth:`TransformerLM.new_cache` gives an :class:`~transformer.lm.positions.LMCache` (one
:class:`~transformer.cache.KVCache` per layer, and a padded prompt's pads and positions), the embeddings or the
rotary embedding take the positions (:mod:`transformer.lm.positions`), and :meth:`TransformerLM.next_tokens` is
the step function that :mod:`transformer.decoding`'s searches and :func:`transformer.lm.generation.generate` run on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..contracts import Bool, Float, Int, Tensor, checked, validate_dtype_device, validate_length, validate_nonempty
from ..embeddings import EmbeddingStack
from ..layers import clones
from ..masks import AttentionMask, subsequent_mask
from ..model import Generator, decision_log_probs
from .blocks import decoder_layers, initialise, positional_table
from .config import LMConfig
from .config_checks import ROPE_DEFAULTS
from .layers import DecoderOnlyLayer, ScaledEmbeddings, make_norm
from .moe.block import install_experts
from .positions import (
    LMCache,
    hugging_face_mask,
    key_padding_only,
    positions_from_documents,
    positions_from_padding,
    real_tokens,
    validate_positions,
)
from .rotary import RotaryEmbedding
from .softcap import DividedLinear, SoftCappedLinear

__all__ = ["TransformerLM", "LMCache", "LMNextTokens", "build_lm", "register_folder_io"]

#: How checkpoint folders are read and written (``"load"``, ``"save"``): registered by
#: :mod:`transformer.lm.pretrained`, which imports this module (so this module never imports it: no import circle);
#: ``import transformer.lm`` imports both.
_FOLDER_IO: dict[str, Callable[..., Any]] = {}


def register_folder_io(load: Callable[..., Any], save: Callable[..., Any]) -> None:
    """Make ``load`` and ``save`` what :meth:`TransformerLM.from_pretrained` and :meth:`TransformerLM.save_pretrained`
    call (:func:`transformer.lm.pretrained.load_pretrained` and ``save_pretrained`` register themselves)."""
    _FOLDER_IO.update(load=load, save=save)


def _folder_io(name: str) -> Callable[..., Any]:
    if name not in _FOLDER_IO:  # only when transformer.lm.model was loaded without its package (not by import)
        raise RuntimeError(f"TransformerLM: no checkpoint {name}er registered; import transformer.lm.pretrained")
    return _FOLDER_IO[name]


class TransformerLM(nn.Module):
    """A decoder-only Transformer: ``Norm(Layers(lambda_e * E[x] + lambda_pe * P))`` (sections 3.1-3.5), or with
    rotary positions (``rotary``: RoPE) the queries and keys of every layer rotated by their positions instead.

    ``forward(tokens, mask=None)`` returns hidden states (batch, seq, d_model); apply ``generator`` for
    log-probabilities, as for :class:`~transformer.model.EncoderDecoder`, or call :meth:`logits` for the scores
    before the softmax. Position ``t`` sees tokens ``0..t`` only (and, with ``sliding_window``, the last
    ``sliding_window`` of them).
    """

    def __init__(
        self,
        embed: EmbeddingStack,
        layer: DecoderOnlyLayer | nn.ModuleList,
        n_layers: int,
        generator: Generator,
        config: LMConfig | None = None,
        norm: str = "layer",
        rotary: RotaryEmbedding | None = None,
    ) -> None:
        super().__init__()
        self.embed = embed
        # one layer copied n_layers times, or every layer built on its own (build_lm: layers may differ)
        self.layers = layer if isinstance(layer, nn.ModuleList) else clones(layer, n_layers)
        if len(self.layers) != n_layers:
            raise ValueError(f"TransformerLM: {len(self.layers)} layers given, n_layers={n_layers}")
        layer = self.layers[0]
        wide = config is not None and config.float32_gain_and_rotation  # OLMo 2's RMSNorm and rotation in float32
        self.norm = make_norm(
            norm, layer.size, layer.eps, config is not None and config.norm_unit_offset, wide_gain=wide
        )
        self.generator = generator
        self.config = config
        self.rotary = rotary
        self.d_model = layer.size
        self.max_len = embed.max_len if config is None else config.max_len
        self.sliding_window = None if config is None else config.sliding_window
        which = None if config is None else config.window_layers  # None: the window applies to every layer
        #: each layer's window (None: it sees every earlier position); and the rotary embedding of the windowed
        #: layers when their RoPE base differs (Gemma 3's local layers), else None
        self.layer_windows = [self.sliding_window if which is None or which[i] else None for i in range(n_layers)]
        self.rope_layers = None if config is None else config.rope_layers  # None: every layer rotates
        self.local_rotary: RotaryEmbedding | None = None
        if config is not None and config.rope_local_theta is not None:
            self.local_rotary = RotaryEmbedding.from_config(_local_rope(config))

    @checked
    def forward(
        self,
        tokens: Int[Tensor, "batch seq"],
        mask: Bool[Tensor, "#batch #seq seq"]
        | AttentionMask
        | Int[Tensor, "batch seq"]
        | Bool[Tensor, "batch seq"]
        | None = None,
        *,
        cache: LMCache | None = None,
        positions: Int[Tensor, "#batch seq"] | None = None,
    ) -> Float[Tensor, "batch seq {self.d_model}"]:
        """``mask`` may hide padding (True = may attend), or be Hugging Face's ``attention_mask`` (batch, seq) of 1 =
        a real token, 0 = a pad (int or bool, as a tokenizer returns it); causality is always added. With ``cache``
        (from :meth:`new_cache`), ``tokens`` holds the positions after the ``cache.length`` cached ones: a prompt of
        several positions goes into an empty cache (``mask`` None or a key-padding mask: ``AttentionMask(key_mask=
        ...)``, a bool (batch, 1, seq) tensor or an ``attention_mask``), then one position at a time with ``mask``
        None (the cache remembers the prompt's pads).

        ``positions`` (#batch, seq) are the tokens' positions (what the positional table or RoPE reads); by
        default each row counts from its first real token (left padding, as Hugging Face's
        ``attention_mask.cumsum(-1) - 1``), continuing the cache's count; in a packed row (``mask`` an
        ``AttentionMask`` with ``documents``) each document counts from its own first token. Given ``positions``
        are used as they are."""
        validate_nonempty(tokens, "TransformerLM.forward: argument 'tokens'", "batch seq")
        validate_dtype_device(
            "TransformerLM.forward",
            lambda: self.generator.proj.weight,
            "the model's parameters",
            tokens=tokens,
            mask=mask,
            positions=positions,
        )
        batch, seq = tokens.shape
        mask = hugging_face_mask("TransformerLM", tokens, mask)  # a tokenizer's 0/1 attention_mask
        offset = 0 if cache is None else cache.length
        validate_length(offset + seq, self.max_len, "TransformerLM input")
        real = self._check_cache_mask(cache, mask, seq)
        real = None if real is None else real.expand(batch, seq)
        following = None  # each row's next position, for the cache: None while positions are the slots
        positions_given = positions is not None
        if positions is not None:
            validate_positions(positions, self.max_len)
            following = positions.expand(batch, seq)[:, -1] + 1
        elif isinstance(mask, AttentionMask) and mask.documents is not None:
            positions = self._document_positions(mask.documents, real, batch, seq)
        elif cache is not None and cache.length > 0:
            positions = cache.positions(seq, tokens.device)
            following = None if positions is None else positions[:, -1] + 1
        elif real is not None:
            positions, following = positions_from_padding(real), real.long().sum(-1)
        if cache is None or cache.length == 0:  # one mask per window the layers have (most models: one)
            masks = {w: self._causal(mask, seq, w) for w in dict.fromkeys(self.layer_windows)}
        else:
            masks = {w: cache.step_mask(seq, w) for w in dict.fromkeys(self.layer_windows)}
        if cache is not None:
            cache.remember(seq, real, following)
        rotation = local = None
        if self.rotary is not None:  # derived positions lie below the slots; given ones are read (rotary.py: a sync)
            slots = torch.arange(offset, offset + seq, device=tokens.device)[None]
            at, bound = slots if positions is None else positions, None if positions_given else offset + seq
            dtype = self.weights_dtype()
            if self.config is not None and self.config.float32_gain_and_rotation:  # OLMo 2: cos, sin in float32
                dtype = torch.promote_types(dtype, torch.float32)
            rotation = self.rotary(at, dtype, bound)
            if self.local_rotary is not None:
                local = self.local_rotary(at, dtype, bound)
        x = self.embed(tokens, offset=offset, positions=positions)
        for i, layer in enumerate(self.layers):
            window = self.layer_windows[i]
            turn = local if local is not None and window is not None else rotation
            if self.rope_layers is not None and not self.rope_layers[i]:  # SmolLM3's layers without positions
                turn = None
            x = layer(x, masks[window], None if cache is None else cache.layers[i], turn)
        if cache is not None:
            cache.trim()  # a windowed cache keeps the last sliding_window - 1 positions
        return self.norm(x)

    @checked
    def logits(
        self,
        tokens: Int[Tensor, "batch seq"],
        mask: Bool[Tensor, "#batch #seq seq"]
        | AttentionMask
        | Int[Tensor, "batch seq"]
        | Bool[Tensor, "batch seq"]
        | None = None,
        *,
        cache: LMCache | None = None,
        positions: Int[Tensor, "#batch seq"] | None = None,
    ) -> Float[Tensor, "batch seq {self.generator.vocab}"]:
        """The scores of the next token before the softmax (Hugging Face's ``logits``): the output projection of
        :meth:`forward`'s hidden states (same arguments)."""
        return self.generator.proj(self(tokens, mask, cache=cache, positions=positions))

    def weights_dtype(self) -> torch.dtype:
        """The dtype of the model's weights (its output projection's): the dtype RoPE's cos and sin are cast to."""
        return self.generator.proj.weight.dtype

    def _check_cache_mask(self, cache: LMCache | None, mask: object, seq: int) -> Tensor | None:
        """Which tokens are real (None: all) after checking what a cache allows: a cache of this depth; a mask only
        with the prompt into an empty cache, and then only a key-padding mask; several positions only then."""
        if cache is not None:
            if len(cache.layers) != len(self.layers):
                raise ValueError(
                    f"TransformerLM: the cache has {len(cache.layers)} layers, the model {len(self.layers)}"
                )
            if mask is not None and (cache.length > 0 or not key_padding_only(mask)):
                raise ValueError(
                    "TransformerLM: with a cache, pass mask=None (new positions attend to every cached one), or with "
                    "the prompt into an empty cache a key-padding mask (AttentionMask(key_mask=...) or "
                    f"(key_lengths=...), or a bool (batch, 1, seq) tensor; True = a real token), got {mask!r}"
                )
            if seq > 1 and cache.length > 0:
                raise ValueError(
                    f"TransformerLM: {seq} new positions after {cache.length} cached ones; after the first call a "
                    "cache takes one position at a time"
                )
        return real_tokens(mask, seq)

    @staticmethod
    def _document_positions(documents: Tensor, real: Tensor | None, batch: int, seq: int) -> Tensor:
        """The positions of a packed row: each document counted from its first token (refused with padding, whose
        own count would disagree: give ``positions`` then)."""
        if tuple(documents.shape) != (batch, seq):
            raise ValueError(
                f"TransformerLM.forward: argument 'mask.documents' must be (batch, seq) = ({batch}, {seq}), one "
                f"document id per token, got shape {tuple(documents.shape)}"
            )
        if real is not None:
            raise ValueError(
                "TransformerLM.forward: a mask with both documents and padding (key_mask, key_lengths or a dense "
                "part) leaves the positions ambiguous; pass positions= explicitly"
            )
        return positions_from_documents(documents)

    def _causal(self, mask: Tensor | AttentionMask | None, seq: int, window: int | None) -> Tensor | AttentionMask:
        """``mask`` and causality (and a layer's sliding ``window``, ``window_left = window - 1``, the tighter of it
        and the mask's own) for ``seq`` positions attending each other."""
        left = None
        # a symbolic seq (torch.export, transformer.proofs) always gets the window: for seq <= W it hides nothing, so
        # the mask is the same, and the program holds for every seq rather than branching on it
        if window is not None and (isinstance(seq, torch.SymInt) or window < seq):
            left = window - 1
        if mask is None and left is None:
            return AttentionMask(causal=True)
        if isinstance(mask, Tensor):
            if left is None:
                return mask & subsequent_mask(seq, device=mask.device)
            mask = AttentionMask(dense=mask)
        mask = AttentionMask() if mask is None else mask
        if left is None:
            return mask.replace(causal=True)
        if mask.window_left is not None:
            left = min(left, mask.window_left)
        return mask.replace(causal=True, window_left=left)

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        dtype: torch.dtype | str | None = None,
        device: str | torch.device | None = None,
    ) -> TransformerLM:
        """The model of a Hugging Face checkpoint folder (GPT-2, Llama, Qwen2/3, Mistral, StarCoder2, Phi-3), in eval
        mode, in ``dtype`` (a torch dtype, a name as transformers spells it, ``"bfloat16"``, or ``"auto"``/None: the
        checkpoint's): :func:`transformer.lm.pretrained.load_pretrained` (docs/pretrained.md)."""
        return _folder_io("load")(path, dtype=dtype, device=device)

    def save_pretrained(self, path: str | os.PathLike, *, architecture: str | None = None) -> Path:
        """Write a Hugging Face checkpoint folder that transformers loads, and return it:
        :func:`transformer.lm.pretrained.save_pretrained`."""
        return _folder_io("save")(self, path, architecture=architecture)

    def new_cache(self) -> LMCache:
        """An empty key/value cache for :meth:`forward` one position at a time; with ``sliding_window`` W on every
        layer it keeps only the last W - 1 positions between calls (:class:`~transformer.lm.positions.LMCache`'s
        ``window``); with the window on some layers only (``window_layers``) it keeps every position, and the
        windowed layers' masks hide the older ones (their attention takes only the window's keys:
        :func:`~transformer.lm.attention.window_keys`)."""
        windows = set(self.layer_windows)
        return LMCache(len(self.layers), window=windows.pop() if len(windows) == 1 else None)

    @checked
    def next_token_log_probs(
        self,
        ys: Int[Tensor, "batch steps"],
        cache: LMCache | None = None,
        prompt_mask: Bool[Tensor, "batch prompt"] | None = None,
    ) -> Float[Tensor, "batch vocab"]:
        """Log-probabilities of the token after ``ys``. Without a cache the whole prefix runs again; with one,
        an empty cache takes the whole prefix (the prompt) and a cache holding ``steps - 1`` positions only the
        last token. Both give the same result. ``prompt_mask`` (True = a real token) marks the pads of a
        left-padded prompt, the first ``prompt`` columns of ``ys``. A float16 or bfloat16 model's log-probabilities
        are float32 (:meth:`Generator.decision_log_probs`: its logits cast before the log-softmax, as transformers'
        ``generate`` decides), so every search decides in float32."""
        mask = None
        if prompt_mask is not None and (cache is None or cache.length == 0):
            grown = prompt_mask.new_ones(ys.size(0), ys.size(1) - prompt_mask.size(1))
            mask = AttentionMask(key_mask=torch.cat([prompt_mask, grown], dim=1))
        if cache is None:
            out = self(ys, mask)
        elif cache.length == 0:
            out = self(ys, mask, cache=cache)
        else:
            if cache.length != ys.size(1) - 1:
                raise ValueError(
                    f"LMCache holds {cache.length} positions but ys has {ys.size(1)}; expected 0 (a "
                    f"prompt) or {ys.size(1) - 1}"
                )
            out = self(ys[:, -1:], cache=cache)
        return decision_log_probs(self.generator, out[:, -1])

    def next_tokens(self, *, use_cache: bool = True, prompt_mask: Tensor | None = None) -> LMNextTokens:
        """The step function of decoding: see :class:`LMNextTokens`."""
        return LMNextTokens(self, use_cache=use_cache, prompt_mask=prompt_mask)


class LMNextTokens:
    """One decoding step of a :class:`TransformerLM`: ``steps(ys)`` gives the log-probabilities (batch, vocab) of
    the token after ``ys`` (batch, steps), with a key/value cache when ``use_cache``; :meth:`reorder` follows beam
    search's hypotheses. ``prompt_mask`` (batch, prompt) bool, True = a real token, marks a left-padded prompt's
    pads. The step function of :func:`transformer.decoding.search` and ``beam_search_steps``."""

    def __init__(self, model: TransformerLM, *, use_cache: bool = True, prompt_mask: Tensor | None = None) -> None:
        self.model = model
        self.cache = model.new_cache() if use_cache else None
        self.prompt_mask = prompt_mask

    def __call__(self, ys: Tensor) -> Tensor:
        return self.model.next_token_log_probs(ys, self.cache, self.prompt_mask)

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (rows may repeat)."""
        if self.cache is not None:
            self.cache.reorder(index)
        if self.prompt_mask is not None:
            self.prompt_mask = self.prompt_mask.index_select(0, index.to(self.prompt_mask.device))


# ---------------------------------------------------------------------------- construction
def build_lm(config: LMConfig) -> TransformerLM:
    """Construct a language model from a validated config (its blocks from :mod:`~transformer.lm.blocks`,
    initialised as ``config.init`` says, tied as configured)."""
    layers = decoder_layers(config)
    table = positional_table(config)
    tokens = ScaledEmbeddings(config.d_model, config.vocab, config.lambda_e, rounded=config.embedding_scale_rounded)
    # without a table (rotary or no positions) the embeddings still get their dropout (section 5.4)
    embed = EmbeddingStack(tokens, table if table is not None else nn.Dropout(config.dropout))
    rotary = RotaryEmbedding.from_config(config) if config.positional_encoding == "rotary" else None
    generator = Generator(config.d_model, config.vocab, bias=config.lm_head_bias)
    if config.logit_softcap is not None:  # Gemma 2's final-logit soft-capping, inside the output projection
        generator.proj = SoftCappedLinear(config.d_model, config.vocab, config.logit_softcap, bias=config.lm_head_bias)
    if config.logit_divisor != 1.0:  # Granite's logits_scaling
        generator.proj = DividedLinear(config.d_model, config.vocab, config.logit_divisor, bias=config.lm_head_bias)
    model = TransformerLM(embed, layers, config.n_layers, generator, config, config.norm, rotary)
    install_experts(model, config)  # the sparse layers' mixture of experts (transformer.lm.moe)
    initialise(model, config)
    if config.tie_weights:
        model.generator.proj.weight = model.embed[0].lut.weight
    return model


def _local_rope(config: LMConfig) -> LMConfig:
    """The config the windowed layers' rotary embedding is built from: base ``rope_local_theta``, the default rule."""
    keep = {"rope_theta": config.rope_local_theta, "rope_fraction": config.rope_fraction}
    return config.replace(**{**ROPE_DEFAULTS, **keep})
