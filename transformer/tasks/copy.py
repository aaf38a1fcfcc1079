"""The Annotated Transformer's copy task: copy a random sequence of symbols (vocabulary 11, length 10).

Symbol 0 is padding and 1 starts every sequence (it is also the decoder's start symbol), as in the
tutorial's ``data_gen``; symbols 2..10 are data. The 2018 notebook's check: after training, greedy
decoding of ``1 2 3 4 5 6 7 8 9 10`` gives ``1 2 3 4 5 6 7 8 9 10``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ..config import TransformerConfig
from ..training.batch import Batch
from .base import Task, TrainingDefaults, UnknownTokenError, Vocab

__all__ = ["CopyTask", "data_gen"]


def data_gen(V: int, batch_size: int, nbatches: int, generator: torch.Generator | None = None) -> Iterator[Batch]:
    """Generate random data for a src-tgt copy task (the tutorial's ``data_gen``)."""
    for _ in range(nbatches):
        data = torch.randint(1, V, size=(batch_size, 10), generator=generator)
        data[:, 0] = 1
        src = data.requires_grad_(False).clone().detach()
        tgt = data.requires_grad_(False).clone().detach()
        yield Batch(src, tgt, 0)


class CopyTask(Task):
    """Copy ``seq_len`` symbols from a vocabulary of ``vocab`` (defaults: the tutorial's 11 and 10)."""

    name = "copy"
    pad = 0
    start = 1
    end = None

    def __init__(self, vocab: int = 11, seq_len: int = 10) -> None:
        if vocab < 3 or seq_len < 2:
            raise ValueError(f"CopyTask needs vocab >= 3 and seq_len >= 2, got vocab={vocab}, seq_len={seq_len}")
        self.vocab, self.seq_len = vocab, seq_len
        tokens = ["<pad>"] + [str(i) for i in range(1, vocab)]
        self.src_vocab = self.tgt_vocab = Vocab(tokens)
        self.max_target_len = seq_len

    def sample(
        self, generator: torch.Generator, batch_size: int, *, held_out: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        data = torch.randint(1, self.vocab, size=(batch_size, self.seq_len), generator=generator)
        data[:, 0] = 1
        return data, data.clone()

    def default_config(self, **changes: Any) -> TransformerConfig:
        # The tutorial uses make_model(V, V, N=2) (d_model 512, d_ff 2048); scaled down for CPU.
        base = dict(
            src_vocab=self.vocab,
            tgt_vocab=self.vocab,
            n_encoder_layers=2,
            n_decoder_layers=2,
            d_model=64,
            d_ff=128,
            n_heads=4,
            dropout=0.1,
            attention_dropout=0.1,
            max_len=max(64, self.seq_len),
            pad_id=0,
        )
        base.update(changes)
        return TransformerConfig(**base)

    def default_training(self) -> TrainingDefaults:
        # The tutorial: batch 80, Adam(lr=0.5, betas=(0.9, 0.98), eps=1e-9), Noam factor 1, warmup 400.
        return TrainingDefaults(steps=600, batch_size=80, warmup=200, factor=1.0, smoothing=0.0, eval_every=100)

    def tokenize(self, text: str) -> list[str]:
        return text.replace(",", " ").split()

    def encode_source(self, text: str) -> list[int]:
        ids = super().encode_source(text)
        if ids[0] != self.start:  # every training sequence starts with the start symbol 1
            ids = [self.start] + ids
        if len(ids) > self.seq_len * 4:
            raise UnknownTokenError(f"input has {len(ids)} symbols; the copy model was trained on {self.seq_len}")
        return ids

    def decode_length(self, src: torch.Tensor) -> int:
        return src.size(1)

    def decode_target(self, ids: list[int]) -> str:
        return " ".join(self.tgt_vocab.tokens[i] for i in ids if i != self.pad)

    def to_metadata(self) -> dict[str, Any]:
        return {"task": self.name, "params": {"vocab": self.vocab, "seq_len": self.seq_len}}
