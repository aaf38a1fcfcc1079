"""Token embeddings and positional encodings (sections 3.4 and 3.5)."""

from __future__ import annotations

import math

import torch
from torch import nn

from .contracts import Float, Int, Tensor, checked, validate_length, validate_token_ids

__all__ = ["Embeddings", "PositionalEncoding", "LearnedPositionalEncoding"]


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
        validate_token_ids(x, self.vocab, "tokens")
        return self.lut(x) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    """Sinusoidal positional encoding added to the embeddings, then dropout (section 3.5).

    ``PE(pos, 2i) = sin(pos / 10000^(2i/d_model))``, ``PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))``.
    Sequences longer than ``max_len`` raise ValueError.
    """

    def __init__(self, d_model: int, dropout: float, max_len: int = 5000) -> None:
        super().__init__()
        if d_model % 2 != 0:
            raise ValueError(f"sinusoidal PositionalEncoding needs an even d_model, got d_model={d_model}")
        self.d_model, self.max_len = d_model, max_len
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    @checked
    def forward(
        self, x: Float[Tensor, "batch seq {self.d_model}"], offset: int = 0
    ) -> Float[Tensor, "batch seq {self.d_model}"]:
        """``x`` holds positions ``offset .. offset + seq - 1`` (incremental decoding passes one position)."""
        end = offset + x.size(1)
        validate_length(end, self.max_len, "positional encoding input")
        return self.dropout(x + self.pe[:, offset:end].to(x.dtype))


class LearnedPositionalEncoding(nn.Module):
    """Learned position embeddings, the paper's alternative to sinusoids (section 3.5, Table 3 row E)."""

    def __init__(self, d_model: int, dropout: float, max_len: int = 5000) -> None:
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.dropout = nn.Dropout(p=dropout)
        self.pe = nn.Parameter(torch.randn(1, max_len, d_model) * 0.02)

    @checked
    def forward(
        self, x: Float[Tensor, "batch seq {self.d_model}"], offset: int = 0
    ) -> Float[Tensor, "batch seq {self.d_model}"]:
        """``x`` holds positions ``offset .. offset + seq - 1`` (incremental decoding passes one position)."""
        end = offset + x.size(1)
        validate_length(end, self.max_len, "positional encoding input")
        return self.dropout(x + self.pe[:, offset:end])
