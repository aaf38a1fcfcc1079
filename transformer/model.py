"""The full model (section 3): EncoderDecoder, the output Generator, and make_model."""

from __future__ import annotations

import copy
from typing import Any

import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadedAttention
from .config import TransformerConfig
from .contracts import Bool, Float, Int, Tensor, checked
from .decoder import Decoder, DecoderLayer
from .embeddings import Embeddings, LearnedPositionalEncoding, PositionalEncoding
from .encoder import Encoder, EncoderLayer
from .layers import PositionwiseFeedForward

__all__ = ["EncoderDecoder", "Generator", "make_model"]


class Generator(nn.Module):
    """The final linear projection and log-softmax over the target vocabulary (section 3.4)."""

    def __init__(self, d_model: int, vocab: int) -> None:
        super().__init__()
        self.d_model, self.vocab = d_model, vocab
        self.proj = nn.Linear(d_model, vocab)

    @checked
    def forward(self, x: Float[Tensor, "*batch {self.d_model}"]) -> Float[Tensor, "*batch {self.vocab}"]:
        return F.log_softmax(self.proj(x), dim=-1)


class EncoderDecoder(nn.Module):
    """A standard encoder-decoder architecture (section 3, Figure 1).

    ``forward`` returns the decoder's hidden states; apply ``generator`` for log-probabilities,
    as the Annotated Transformer does. Masks are boolean, True = may attend:
    ``src_mask`` (batch, 1, src_len) from :func:`transformer.masks.padding_mask`,
    ``tgt_mask`` (batch, tgt_len, tgt_len) from :func:`transformer.masks.target_mask`.
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
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator
        self.config = config
        self.d_model = encoder.size

    @checked
    def forward(
        self,
        src: Int[Tensor, "batch src_len"],
        tgt: Int[Tensor, "batch tgt_len"],
        src_mask: Bool[Tensor, "#batch 1 src_len"] | None,
        tgt_mask: Bool[Tensor, "#batch #tgt_len tgt_len"] | None,
    ) -> Float[Tensor, "batch tgt_len {self.d_model}"]:
        """Take in and process masked source and target sequences."""
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    @checked
    def encode(
        self, src: Int[Tensor, "batch src_len"], src_mask: Bool[Tensor, "#batch #src_len src_len"] | None
    ) -> Float[Tensor, "batch src_len {self.d_model}"]:
        return self.encoder(self.src_embed(src), src_mask)

    @checked
    def decode(
        self,
        memory: Float[Tensor, "batch src_len {self.d_model}"],
        src_mask: Bool[Tensor, "#batch #tgt_len src_len"] | None,
        tgt: Int[Tensor, "batch tgt_len"],
        tgt_mask: Bool[Tensor, "#batch #tgt_len tgt_len"] | None,
    ) -> Float[Tensor, "batch tgt_len {self.d_model}"]:
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)


def _positional(config: TransformerConfig) -> nn.Module:
    kind = LearnedPositionalEncoding if config.positional_encoding == "learned" else PositionalEncoding
    return kind(config.d_model, config.dropout, config.max_len)


def build_model(config: TransformerConfig) -> EncoderDecoder:
    """Construct a model from a validated config (Glorot-initialised, weights tied as configured)."""
    c = copy.deepcopy
    eps, placement = config.layer_norm_eps, config.norm_placement
    attn = MultiHeadedAttention(config.n_heads, config.d_model, config.attention_dropout, backend=config.attention_backend)
    ff = PositionwiseFeedForward(config.d_model, config.d_ff, config.dropout, config.activation)
    model = EncoderDecoder(
        Encoder(EncoderLayer(config.d_model, c(attn), c(ff), config.dropout, placement, eps), config.n_encoder_layers),
        Decoder(DecoderLayer(config.d_model, c(attn), c(attn), c(ff), config.dropout, placement, eps), config.n_decoder_layers),
        nn.Sequential(Embeddings(config.d_model, config.src_vocab), _positional(config)),
        nn.Sequential(Embeddings(config.d_model, config.tgt_vocab), _positional(config)),
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
