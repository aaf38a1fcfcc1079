"""A harder synthetic translation task that needs attention: dates written in words -> ISO 8601.

Sources come in three orders, so the model must find the year, month and day wherever they are::

    twenty-first of march 1 9 8 7      ->  1 9 8 7 - 0 3 - 2 1
    march twenty-first , 2 0 0 4       ->  2 0 0 4 - 0 3 - 2 1
    fifth june 1 9 1 2                 ->  1 9 1 2 - 0 6 - 0 5

(text input may write the year as ``1987``; it is split into digits). The year is copied to the
front, the month name becomes two digits and the ordinal day word becomes two digits.
Dates from 1900-01-01 to 2099-12-31; every tenth day (``date.toordinal() % 10 == 0``) is held
out: never trained on, used for evaluation and exact-match accuracy.
"""

from __future__ import annotations

import datetime
from typing import Any

import torch

from ..config import TransformerConfig
from .base import Task, TrainingDefaults, Vocab

__all__ = ["DatesTask"]

_UNITS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth"]
_TEENS = [
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
]
DAY_WORDS = _UNITS + _TEENS + ["twentieth"] + [f"twenty-{u}" for u in _UNITS] + ["thirtieth", "thirty-first"]
MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
DIGITS = [str(d) for d in range(10)]
_FIRST = datetime.date(1900, 1, 1).toordinal()
_LAST = datetime.date(2099, 12, 31).toordinal()


class DatesTask(Task):
    """Rewrite a date in words as an ISO date, one character per target token."""

    name = "dates"
    pad, start, end = 0, 1, 2
    max_target_len = 12  # <s> y y y y - m m - d d </s>

    def __init__(self) -> None:
        self.src_vocab = Vocab(["<pad>", "<s>", "</s>", "of", ","] + DAY_WORDS + MONTHS + DIGITS)
        self.tgt_vocab = Vocab(["<pad>", "<s>", "</s>", "-"] + DIGITS)

    @staticmethod
    def is_held_out(ordinal: int) -> bool:
        return ordinal % 10 == 0

    def words(self, date: datetime.date, form: int) -> list[str]:
        day, month, year = DAY_WORDS[date.day - 1], MONTHS[date.month - 1], list(f"{date.year:04d}")
        if form == 0:
            return [day, "of", month] + year
        if form == 1:
            return [month, day, ","] + year
        return [day, month] + year

    def iso(self, date: datetime.date) -> list[str]:
        return list(f"{date.year:04d}-{date.month:02d}-{date.day:02d}")

    def sample(
        self, generator: torch.Generator, batch_size: int, *, held_out: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ordinals = torch.randint(_FIRST, _LAST + 1, (batch_size,), generator=generator).tolist()
        forms = torch.randint(0, 3, (batch_size,), generator=generator).tolist()
        src_rows, tgt_rows = [], []
        for ordinal, form in zip(ordinals, forms, strict=True):
            if held_out:
                ordinal = ordinal - ordinal % 10  # the nearest held-out day at or before
                if ordinal < _FIRST:
                    ordinal += 10
            elif self.is_held_out(ordinal):
                ordinal = ordinal + 1 if ordinal < _LAST else ordinal - 1
            date = datetime.date.fromordinal(ordinal)
            src_rows.append(self.src_vocab.encode(self.words(date, form)))
            tgt_rows.append([self.start] + self.tgt_vocab.encode(self.iso(date)) + [self.end])
        width = max(len(r) for r in src_rows)
        src = torch.tensor([r + [self.pad] * (width - len(r)) for r in src_rows], dtype=torch.long)
        return src, torch.tensor(tgt_rows, dtype=torch.long)

    def tokenize(self, text: str) -> list[str]:
        words = []
        for word in text.lower().replace(",", " , ").split():
            words.extend(list(word) if word.isdigit() else [word])
        return words

    def join(self, words: list[str]) -> str:
        return "".join(words)

    def default_config(self, **changes: Any) -> TransformerConfig:
        base = dict(
            src_vocab=len(self.src_vocab),
            tgt_vocab=len(self.tgt_vocab),
            n_encoder_layers=2,
            n_decoder_layers=2,
            d_model=64,
            d_ff=128,
            n_heads=4,
            dropout=0.1,
            attention_dropout=0.1,
            max_len=64,
            pad_id=0,
        )
        base.update(changes)
        return TransformerConfig(**base)

    def default_training(self) -> TrainingDefaults:
        return TrainingDefaults(steps=1000, batch_size=64, warmup=200, factor=2.0, smoothing=0.0, eval_every=200)

    def source_text(self, ids: list[int]) -> str:
        words = [self.src_vocab.tokens[i] for i in ids if i != self.pad]
        out: list[str] = []
        for w in words:  # write the year's digits together again
            if w.isdigit() and out and out[-1].isdigit():
                out[-1] += w
            else:
                out.append(w)
        return " ".join(out).replace(" ,", ",")

    def to_metadata(self) -> dict[str, Any]:
        return {"task": self.name, "params": {}}
