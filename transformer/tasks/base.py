"""What every task provides: vocabularies, endless training batches, a fixed held-out set, text in and out.

A :class:`Task` is the data side of a training run: the CLI (``typed-transformer train NAME``)
builds the model from ``default_config()``, trains with ``default_training()``'s settings on
``batches(generator, batch_size)``, evaluates on ``eval_batches()``, and measures exact-match
accuracy of greedy decodes on held-out inputs. Its ``to_metadata()`` goes into the checkpoint
so that ``typed-transformer decode`` can rebuild the same tokenizer with ``task_from_metadata``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..config import TransformerConfig
from ..decoding import beam_search, greedy_decode
from ..masks import padding_mask
from ..training.batch import Batch

__all__ = ["Vocab", "Task", "TrainingDefaults", "UnknownTokenError"]


class UnknownTokenError(ValueError):
    """Text holds a token outside the task's vocabulary."""


class Vocab:
    """A fixed list of tokens: ids are positions. ``encode`` raises :class:`UnknownTokenError` naming the token."""

    def __init__(self, tokens: Sequence[str]) -> None:
        if len(set(tokens)) != len(tokens):
            raise ValueError("Vocab: tokens must be distinct")
        self.tokens = list(tokens)
        self.index = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, words: Sequence[str], what: str = "input") -> list[int]:
        ids = []
        for position, word in enumerate(words):
            if word not in self.index:
                shown = ", ".join(t for t in self.tokens if not t.startswith("<"))
                raise UnknownTokenError(
                    f"unknown token {word!r} at position {position} of the {what}; known tokens: {shown}"
                )
            ids.append(self.index[word])
        return ids

    def decode(self, ids: Sequence[int]) -> list[str]:
        return [self.tokens[i] for i in ids]


@dataclass(frozen=True)
class TrainingDefaults:
    """Training settings a task is known to reach its targets with (CPU, 2 cores)."""

    steps: int
    batch_size: int
    warmup: int
    factor: float = 1.0
    smoothing: float = 0.0
    eval_every: int = 100
    clip_grad: float | None = 1.0


class Task:
    """Base class. Subclasses set ``name``, ``src_vocab``, ``tgt_vocab``, ``pad``, ``start``, ``end``,
    ``max_target_len``."""

    name: str = "task"
    pad: int = 0
    start: int = 1
    end: int | None = None
    src_vocab: Vocab
    tgt_vocab: Vocab
    max_target_len: int

    # -- data ----------------------------------------------------------------------
    def sample(
        self, generator: torch.Generator, batch_size: int, *, held_out: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(src, tgt) LongTensors of ``batch_size`` examples; ``tgt`` starts with ``start``."""
        raise NotImplementedError

    def batches(self, generator: torch.Generator, batch_size: int) -> Iterator[Batch]:
        """Endless training batches drawn from ``generator`` one batch at a time (resumable)."""
        while True:
            yield self.batch(*self.sample(generator, batch_size))

    def eval_batches(self, n_batches: int = 5, batch_size: int = 80, seed: int = 1234) -> list[Batch]:
        """A fixed held-out evaluation set (the same for a given seed)."""
        g = torch.Generator().manual_seed(seed)
        return [self.batch(*self.sample(g, batch_size, held_out=True)) for _ in range(n_batches)]

    def batch(self, src: torch.Tensor, tgt: torch.Tensor) -> Batch:
        """A :class:`Batch` of the task's ids, checked against its vocabularies (every position of ``tgt``)."""
        return Batch(src, tgt, self.pad, src_vocab=len(self.src_vocab), tgt_vocab=len(self.tgt_vocab))

    # -- model and training --------------------------------------------------------
    def default_config(self, **changes: Any) -> TransformerConfig:
        raise NotImplementedError

    def default_training(self) -> TrainingDefaults:
        raise NotImplementedError

    # -- text ----------------------------------------------------------------------
    def tokenize(self, text: str) -> list[str]:
        return text.lower().replace(",", " , ").split()

    def encode_source(self, text: str) -> list[int]:
        words = self.tokenize(text)
        if not words:
            raise UnknownTokenError("empty input: nothing to decode")
        return self.src_vocab.encode(words, "input")

    def decode_target(self, ids: Sequence[int]) -> str:
        words = []
        for i in list(ids)[1:]:  # drop the start symbol
            if self.end is not None and i == self.end:
                break
            if i == self.pad:
                continue
            words.append(self.tgt_vocab.tokens[i])
        return self.join(words)

    def join(self, words: list[str]) -> str:
        return " ".join(words)

    def source_tensor(self, texts: Sequence[str]) -> torch.Tensor:
        rows = [self.encode_source(t) for t in texts]
        width = max(len(r) for r in rows)
        return torch.tensor([r + [self.pad] * (width - len(r)) for r in rows], dtype=torch.long)

    def decode_length(self, src: torch.Tensor) -> int:
        return self.max_target_len

    def translate_ids(
        self, model: nn.Module, src: torch.Tensor, *, beam_size: int = 1, use_cache: bool = True
    ) -> torch.Tensor:
        """Greedy (or beam) decodes of source ids: (batch, max_len) target ids."""
        device = next(model.parameters()).device
        src = src.to(device)
        mask = padding_mask(src, self.pad)
        was_training = model.training
        model.eval()
        try:
            length = self.decode_length(src)
            if beam_size == 1:
                return greedy_decode(model, src, mask, length, self.start, self.end, self.pad, use_cache=use_cache)
            return beam_search(
                model,
                src,
                mask,
                length,
                self.start,
                self.end,
                beam_size=beam_size,
                pad_symbol=self.pad,
                use_cache=use_cache,
            ).tokens
        finally:
            model.train(was_training)

    def translate(self, model: nn.Module, texts: Sequence[str], *, beam_size: int = 1) -> list[str]:
        """Decode source texts to target texts (raises UnknownTokenError for unknown tokens)."""
        out = self.translate_ids(model, self.source_tensor(texts), beam_size=beam_size)
        return [self.decode_target(row.tolist()) for row in out]

    def exact_match(self, model: nn.Module, n: int = 500, *, seed: int = 4321, batch_size: int = 250) -> float:
        """Fraction of ``n`` held-out sources whose greedy decode equals the reference target exactly."""
        g = torch.Generator().manual_seed(seed)
        correct = 0
        done = 0
        while done < n:
            size = min(batch_size, n - done)
            src, tgt = self.sample(g, size, held_out=True)
            out = self.translate_ids(model, src).cpu()
            width = max(out.size(1), tgt.size(1))
            out = torch.nn.functional.pad(out, (0, width - out.size(1)), value=self.pad)
            tgt = torch.nn.functional.pad(tgt, (0, width - tgt.size(1)), value=self.pad)
            correct += int((out == tgt).all(dim=1).sum())
            done += size
        return correct / n

    def examples(self, n: int = 3, seed: int = 99) -> list[str]:
        """Held-out source texts for demonstration."""
        g = torch.Generator().manual_seed(seed)
        src, _ = self.sample(g, n, held_out=True)
        return [self.source_text(row.tolist()) for row in src]

    def source_text(self, ids: Sequence[int]) -> str:
        return self.join([self.src_vocab.tokens[i] for i in ids if i != self.pad])

    def target_text(self, ids: Sequence[int]) -> str:
        return self.decode_target(ids)

    def to_metadata(self) -> dict[str, Any]:
        return {"task": self.name, "params": {}}
