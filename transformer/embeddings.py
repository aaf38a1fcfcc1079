"""Token embeddings and positional encodings (sections 3.4 and 3.5)."""

from __future__ import annotations

import math

import torch
from torch import nn

from .contracts import Float, Int, Tensor, checked, validate_length, validate_token_ids

__all__ = ["Embeddings", "PositionalEncoding", "LearnedPositionalEncoding", "EmbeddingStack"]


class Embeddings(nn.Module):
    """Learned token embeddings multiplied by sqrt(d_model) (section 3.4).

    Token ids outside ``[0, vocab)`` raise ValueError naming the id and the vocabulary size.
    """

    def __init__(self, d_model: int, vocab: int) -> None:
        super().__init__()
        self.d_model, self.vocab = d_model, vocab
        self.lut = nn.Embedding(vocab, d_model)

    @checked
    def forward(self, x: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq {self.d_model}"]:
        x = validate_token_ids(x, self.vocab, "tokens")  # on CUDA: clamped, checked asynchronously
        return self.lut(x) * math.sqrt(self.d_model)


class _PositionTable(nn.Module):
    """Adds row ``offset + i`` of a (1, max_len, d_model) table to position ``i`` of the input, then dropout.

    Subclasses define the table (``self.pe``). Sequences reaching past ``max_len`` raise ValueError.
    """

    def __init__(self, d_model: int, dropout: float, max_len: int) -> None:
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.dropout = nn.Dropout(p=dropout)

    @checked
    def forward(
        self,
        x: Float[Tensor, "batch seq {self.d_model}"],
        offset: int = 0,
        positions: Int[Tensor, "#batch seq"] | None = None,
    ) -> Float[Tensor, "batch seq {self.d_model}"]:
        """``x`` holds positions ``offset .. offset + seq - 1`` (incremental decoding passes the new positions), or
        those of ``positions`` (each row its own: a left-padded row counts from its first real token)."""
        if offset < 0:
            raise ValueError(f"positional encoding: offset must be >= 0, got offset={offset}")
        end = offset + x.size(1)
        validate_length(end, self.max_len, "positional encoding input")
        added = self.rows(offset, end) if positions is None else self.rows_at(positions)
        return self.dropout(x + added.to(x.dtype))

    def rows(self, offset: int, end: int) -> Tensor:
        """What is added to positions ``offset .. end - 1``: the table's rows (a subclass may scale them)."""
        return self.pe[:, offset:end]

    def rows_at(self, positions: Tensor) -> Tensor:
        """What is added at ``positions`` (#batch, seq): the table's rows, gathered (a subclass may scale them)."""
        return self.pe[0][positions]


class PositionalEncoding(_PositionTable):
    """Sinusoidal positional encoding added to the embeddings, then dropout (section 3.5).

    ``PE(pos, 2i) = sin(pos / 10000^(2i/d_model))``, ``PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))``.
    """

    def __init__(self, d_model: int, dropout: float, max_len: int = 5000) -> None:
        if d_model % 2 != 0:
            raise ValueError(f"sinusoidal PositionalEncoding needs an even d_model, got d_model={d_model}")
        super().__init__(d_model, dropout, max_len)
        position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)


class LearnedPositionalEncoding(_PositionTable):
    """Learned position embeddings, the paper's alternative to sinusoids (section 3.5, Table 3 row E)."""

    def __init__(self, d_model: int, dropout: float, max_len: int = 5000) -> None:
        super().__init__(d_model, dropout, max_len)
        self.pe = nn.Parameter(torch.randn(1, max_len, d_model) * 0.02)


class EmbeddingStack(nn.Sequential):
    """``nn.Sequential(Embeddings(d_model, vocab), PositionalEncoding(...))`` as the Annotated Transformer builds
    it, plus a position ``offset`` handed to the positional encoding (incremental decoding embeds only the new
    positions). Indexing, parameter names and checkpoints are those of the plain ``nn.Sequential``.
    """

    @property
    def max_len(self) -> int:
        """The longest sequence the positional encoding covers (ValueError when the stack has none)."""
        for module in self:
            if isinstance(module, _PositionTable):
                return module.max_len
        raise ValueError("EmbeddingStack: no positional encoding, so no max_len")

    def forward(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:  # parts check shapes
        for module in self:
            x = module(x, offset=offset, positions=positions) if isinstance(module, _PositionTable) else module(x)
        return x
