"""The full model (section 3): EncoderDecoder, the output Generator, and make_model."""

from __future__ import annotations

import copy
from typing import Any

import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadedAttention
from .cache import DecoderCache
from .common.dtypes import decision_dtype
from .config import TransformerConfig
from .contracts import Bool, Float, Int, Tensor, checked, validate_dtype_device, validate_nonempty
from .decoder import Decoder, DecoderLayer
from .embeddings import Embeddings, EmbeddingStack, LearnedPositionalEncoding, PositionalEncoding
from .encoder import Encoder, EncoderLayer
from .layers import PositionwiseFeedForward
from .masks import AttentionMask, subsequent_mask

__all__ = ["EncoderDecoder", "Generator", "NextTokens", "make_model", "build_model"]


class Generator(nn.Module):
    """The final linear projection and log-softmax over the target vocabulary (section 3.4).

    ``bias=False`` leaves out the projection's bias (GPT-2's and Llama's output heads have none)."""

    def __init__(self, d_model: int, vocab: int, *, bias: bool = True) -> None:
        super().__init__()
        self.d_model, self.vocab = d_model, vocab
        self.proj = nn.Linear(d_model, vocab, bias=bias)

    @checked
    def forward(self, x: Float[Tensor, "*batch {self.d_model}"]) -> Float[Tensor, "*batch {self.vocab}"]:
        validate_dtype_device("Generator.forward", lambda: self.proj.weight, "the module's parameters", x=x)
        return F.log_softmax(self.proj(x), dim=-1)

    @checked
    def decision_log_probs(self, x: Float[Tensor, "*batch {self.d_model}"]) -> Float[Tensor, "*batch {self.vocab}"]:
        """The log-probabilities decoding chooses the next token by: the logits in the weights' dtype, their
        log-softmax in float32 when that is float16 or bfloat16 (as transformers' ``generate`` casts the logits to
        float32 before choosing; in bfloat16 near-equal candidates would round to a tie that the lower id wins),
        else :meth:`forward`'s very values (float32, float64)."""
        dtype = decision_dtype(self.proj.weight.dtype)
        if dtype == self.proj.weight.dtype:  # float32, float64: forward itself (its hooks see every step)
            return self(x)
        validate_dtype_device("Generator.decision_log_probs", lambda: self.proj.weight, "the module's parameters", x=x)
        return F.log_softmax(self.proj(x).to(dtype), dim=-1)


def decision_log_probs(generator: nn.Module, x: Tensor) -> Tensor:
    """``generator``'s :meth:`Generator.decision_log_probs` of ``x``; a generator of another class (a tutorial's own
    module) is called as it is."""
    return generator.decision_log_probs(x) if isinstance(generator, Generator) else generator(x)


class EncoderDecoder(nn.Module):
    """A standard encoder-decoder architecture (section 3, Figure 1).

    ``forward`` returns the decoder's hidden states; apply ``generator`` for log-probabilities,
    as the Annotated Transformer does. Masks are boolean, True = may attend:
    ``src_mask`` (batch, 1, src_len) from :func:`transformer.masks.padding_mask`,
    ``tgt_mask`` (batch, tgt_len, tgt_len) from :func:`transformer.masks.target_mask`,
    or the same as :class:`~transformer.masks.AttentionMask` (``AttentionMask.padding``, ``AttentionMask.target``,
    what :class:`~transformer.training.batch.Batch` builds), which lets the attention backends skip work.

    A plain ``nn.Sequential`` embedding (the tutorial's ``nn.Sequential(Embeddings(...), c(position))``) becomes
    an :class:`~transformer.embeddings.EmbeddingStack` over the same modules, so it can take a position offset.
    """

    def __init__(
        self,
        encoder: Encoder,
        decoder: Decoder,
        src_embed: nn.Module,
        tgt_embed: nn.Module,
        generator: Generator,
        config: TransformerConfig | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = EmbeddingStack(*src_embed) if type(src_embed) is nn.Sequential else src_embed
        self.tgt_embed = EmbeddingStack(*tgt_embed) if type(tgt_embed) is nn.Sequential else tgt_embed
        self.generator = generator
        self.config = config
        self.d_model = encoder.size

    @checked
    def forward(
        self,
        src: Int[Tensor, "batch src_len"],
        tgt: Int[Tensor, "batch tgt_len"],
        src_mask: Bool[Tensor, "#batch 1 src_len"] | AttentionMask | None,
        tgt_mask: Bool[Tensor, "#batch #tgt_len tgt_len"] | AttentionMask | None,
    ) -> Float[Tensor, "batch tgt_len {self.d_model}"]:
        """Take in and process masked source and target sequences."""
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    @checked
    def encode(
        self,
        src: Int[Tensor, "batch src_len"],
        src_mask: Bool[Tensor, "#batch #src_len src_len"] | AttentionMask | None,
    ) -> Float[Tensor, "batch src_len {self.d_model}"]:
        validate_nonempty(src, "EncoderDecoder.encode: argument 'src'", "batch src_len")
        validate_dtype_device(
            "EncoderDecoder.encode",
            lambda: self.encoder.layers[0].sublayer[0].norm.weight,
            "the model's parameters",
            src=src,
            src_mask=src_mask,
        )
        return self.encoder(self.src_embed(src), src_mask)

    @checked
    def decode(
        self,
        memory: Float[Tensor, "batch src_len {self.d_model}"],
        src_mask: Bool[Tensor, "#batch #tgt_len src_len"] | AttentionMask | None,
        tgt: Int[Tensor, "batch tgt_len"],
        tgt_mask: Bool[Tensor, "#batch #tgt_len tgt_len"] | AttentionMask | None,
        *,
        cache: DecoderCache | None = None,
    ) -> Float[Tensor, "batch tgt_len {self.d_model}"]:
        """Decode ``tgt`` against ``memory``. With ``cache`` (from :meth:`new_cache`), ``tgt`` holds only the
        positions after the ``cache.length`` already decoded, and ``tgt_mask`` is None (see :class:`Decoder`)."""
        validate_nonempty(tgt, "EncoderDecoder.decode: argument 'tgt'", "batch tgt_len")
        validate_nonempty(memory, "EncoderDecoder.decode: argument 'memory'", "batch src_len d_model", axis=1)
        validate_dtype_device(
            "EncoderDecoder.decode",
            lambda: self.decoder.layers[0].sublayer[0].norm.weight,
            "the model's parameters",
            memory=memory,
            tgt=tgt,
            src_mask=src_mask,
            tgt_mask=tgt_mask,
        )
        offset = 0 if cache is None else cache.length
        return self.decoder(self.tgt_embed(tgt, offset=offset), memory, src_mask, tgt_mask, cache)

    def new_cache(self) -> DecoderCache:
        """An empty key/value cache for :meth:`decode` one position at a time."""
        return self.decoder.new_cache()

    @checked
    def next_token_log_probs(
        self,
        memory: Float[Tensor, "batch src_len {self.d_model}"],
        src_mask: Bool[Tensor, "#batch 1 src_len"] | AttentionMask | None,
        ys: Int[Tensor, "batch steps"],
        cache: DecoderCache | None = None,
    ) -> Float[Tensor, "batch vocab"]:
        """Log-probabilities of the token after ``ys`` (the generator on the last position).

        Without a cache the whole prefix is decoded again under a causal mask (as the tutorial does). With a
        cache holding ``steps - 1`` positions only the last token runs through the decoder, and the cache grows
        by one position; both give the same result. A float16 or bfloat16 model's log-probabilities are float32
        (:meth:`Generator.decision_log_probs`).
        """
        if cache is None:
            out = self.decode(memory, src_mask, ys, subsequent_mask(ys.size(1), device=ys.device))
        else:
            if cache.length != ys.size(1) - 1:
                raise ValueError(
                    f"DecoderCache holds {cache.length} positions but ys has {ys.size(1)}; expected {ys.size(1) - 1}"
                )
            out = self.decode(memory, src_mask, ys[:, -1:], None, cache=cache)
        return decision_log_probs(self.generator, out[:, -1])

    def next_tokens(
        self, memory: Tensor, src_mask: Tensor | AttentionMask | None, *, use_cache: bool = True
    ) -> NextTokens:
        """The step function of decoding over ``memory``: see :class:`NextTokens`."""
        return NextTokens(self, memory, src_mask, use_cache=use_cache)


class NextTokens:
    """One decoding step of an :class:`EncoderDecoder` over a fixed memory: ``steps(ys)`` gives the log-probabilities
    of the token after ``ys`` (batch, steps), shape (batch, tgt_vocab), via
    :meth:`EncoderDecoder.next_token_log_probs`, with a key/value cache when ``use_cache`` (the default).
    :meth:`reorder` follows beam search's surviving hypotheses.
    """

    def __init__(
        self, model: EncoderDecoder, memory: Tensor, src_mask: Tensor | AttentionMask | None, *, use_cache: bool = True
    ) -> None:
        self.model, self.memory, self.src_mask = model, memory, src_mask
        self.cache = model.new_cache() if use_cache else None

    def __call__(self, ys: Tensor) -> Tensor:
        return self.model.next_token_log_probs(self.memory, self.src_mask, ys, self.cache)

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (rows may repeat): memory, source mask and cache follow."""
        self.memory = self.memory.index_select(0, index)
        if isinstance(self.src_mask, AttentionMask):
            self.src_mask = self.src_mask.index_select(index)
        elif self.src_mask is not None and self.src_mask.size(0) != 1:
            self.src_mask = self.src_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)


def _positional(config: TransformerConfig) -> nn.Module:
    kind = LearnedPositionalEncoding if config.positional_encoding == "learned" else PositionalEncoding
    return kind(config.d_model, config.dropout, config.max_len)


def build_model(config: TransformerConfig) -> EncoderDecoder:
    """Construct a model from a validated config (Glorot-initialised, weights tied as configured)."""
    c = copy.deepcopy
    eps, placement = config.layer_norm_eps, config.norm_placement
    attn = MultiHeadedAttention(
        config.n_heads, config.d_model, config.attention_dropout, backend=config.attention_backend
    )
    ff = PositionwiseFeedForward(config.d_model, config.d_ff, config.dropout, config.activation)
    model = EncoderDecoder(
        Encoder(EncoderLayer(config.d_model, c(attn), c(ff), config.dropout, placement, eps), config.n_encoder_layers),
        Decoder(
            DecoderLayer(config.d_model, c(attn), c(attn), c(ff), config.dropout, placement, eps),
            config.n_decoder_layers,
        ),
        EmbeddingStack(Embeddings(config.d_model, config.src_vocab), _positional(config)),
        EmbeddingStack(Embeddings(config.d_model, config.tgt_vocab), _positional(config)),
        Generator(config.d_model, config.tgt_vocab),
        config,
    )
    for name, p in model.named_parameters():
        if p.dim() > 1 and not name.endswith(".pe"):
            nn.init.xavier_uniform_(p)
    if config.tie_weights in ("target", "all"):
        model.generator.proj.weight = model.tgt_embed[0].lut.weight
    if config.tie_weights == "all":
        model.src_embed[0].lut.weight = model.tgt_embed[0].lut.weight
    return model


def make_model(
    src_vocab: int | TransformerConfig,
    tgt_vocab: int | None = None,
    N: int = 6,
    d_model: int = 512,
    d_ff: int = 2048,
    h: int = 8,
    dropout: float = 0.1,
    **more: Any,
) -> EncoderDecoder:
    """Helper: construct a model from hyper-parameters, as in the Annotated Transformer.

    ``make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, **more)``
    where ``more`` holds any other :class:`TransformerConfig` field (``attention_dropout``
    defaults to ``dropout``); or ``make_model(config)``.
    """
    if isinstance(src_vocab, TransformerConfig):
        if tgt_vocab is not None or more:
            raise ValueError("make_model(config) takes no other arguments; use config.replace(...) to change fields")
        return build_model(src_vocab)
    if tgt_vocab is None:
        raise ValueError("make_model: tgt_vocab is required when src_vocab is an int")
    more.setdefault("attention_dropout", dropout)
    config = TransformerConfig(
        src_vocab=src_vocab,
        tgt_vocab=tgt_vocab,
        n_encoder_layers=N,
        n_decoder_layers=N,
        d_model=d_model,
        d_ff=d_ff,
        n_heads=h,
        dropout=dropout,
        **more,
    )
    return build_model(config)
