"""A batch for the language model, with the protocol the training loop needs (as
:class:`~transformer.training.batch.Batch`).

``LMBatch(tokens, pad)``: ``tokens`` (batch, seq + 1) ids; the model reads ``tokens[:, :-1]`` and predicts
``tokens[:, 1:]`` (each position the next token). ``inputs()`` is the model's arguments, ``labels`` what it must
predict, ``ntokens`` the labels that are not padding, ``len(batch)`` the rows, ``to(device)`` moves it.
"""

from __future__ import annotations

import torch

from ..contracts import Tensor
from ..masks import AttentionMask

__all__ = ["LMBatch"]


class LMBatch:
    """Next-token prediction over ``tokens`` (batch, seq + 1), padding ``pad`` at the ends of rows (or None).

    The mask is an :class:`~transformer.masks.AttentionMask`: causal, plus key and query lengths when rows are padded
    at the end (the model adds causality itself; the kernel receives ``causal=True`` and no dense mask).
    """

    def __init__(self, tokens: Tensor, pad: int | None = 0) -> None:
        if tokens.dim() != 2 or tokens.size(1) < 2:
            raise ValueError(f"LMBatch: tokens must be (batch, seq + 1) with seq >= 1, got shape {tuple(tokens.shape)}")
        self.pad = pad
        self.tokens = tokens[:, :-1]
        self.targets = tokens[:, 1:]
        real = self.targets if pad is None else self.targets[self.targets != pad]
        self.ntokens = int(real.numel())
        has_pad = pad is not None and bool((self.tokens == pad).any())
        self.mask = AttentionMask.target(self.tokens, pad) if has_pad else AttentionMask(causal=True)

    def inputs(self) -> tuple:
        """``model(*batch.inputs())`` is ``model(tokens, mask)``."""
        return (self.tokens, self.mask)

    @property
    def labels(self) -> Tensor:
        return self.targets

    def __len__(self) -> int:
        return self.tokens.size(0)

    def to(self, device: torch.device | str) -> LMBatch:
        """Move every tensor of the batch to ``device`` (in place) and return the batch."""
        self.tokens, self.targets, self.mask = self.tokens.to(device), self.targets.to(device), self.mask.to(device)
        return self
