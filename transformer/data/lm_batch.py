"""A batch for the language model, with the protocol the training loop needs (as
:class:`~transformer.training.batch.Batch`).

``LMBatch(tokens, pad)``: ``tokens`` (batch, seq + 1) ids; the model reads ``tokens[:, :-1]`` and predicts
``tokens[:, 1:]`` (each position the next token). ``inputs()`` is the model's arguments, ``labels`` what it must
predict, ``ntokens`` the labels that are not padding, ``len(batch)`` the rows, ``to(device)`` moves it.

A packed batch (``documents``: each of the seq + 1 tokens' document id, non-decreasing along a row) holds several
documents per row: its mask is ``AttentionMask(causal=True, documents=...)`` (no token attends to another document,
and the model restarts positions at each one), and a label that begins a document, which the previous document's
last token would predict, is replaced by ``ignore_index`` (a label the loss leaves out) and not counted in
``ntokens``. Each document is then trained exactly as if it were alone in its row (``tests/test_lm_packing.py``).
"""

from __future__ import annotations

import torch

from ..common.arguments import is_int
from ..contracts import Tensor
from ..masks import AttentionMask

__all__ = ["LMBatch"]


class LMBatch:
    """Next-token prediction over ``tokens`` (batch, seq + 1), padding ``pad`` at the ends of rows (or None), or
    documents packed in each row (``documents``, (batch, seq + 1) ids, with ``ignore_index``: see the module
    docstring).

    The mask is an :class:`~transformer.masks.AttentionMask`: causal, plus key and query lengths when rows are padded
    at the end, or the documents when packed (the model adds causality itself; the kernel receives ``causal=True``
    and no dense mask).
    """

    def __init__(
        self,
        tokens: Tensor,
        pad: int | None = 0,
        *,
        documents: Tensor | None = None,
        ignore_index: int | None = None,
    ) -> None:
        if tokens.dim() != 2 or tokens.size(1) < 2:
            raise ValueError(f"LMBatch: tokens must be (batch, seq + 1) with seq >= 1, got shape {tuple(tokens.shape)}")
        self.pad = pad
        self.tokens = tokens[:, :-1]
        self.targets = tokens[:, 1:]
        if documents is not None:
            self._pack(documents, ignore_index)
            return
        real = self.targets if pad is None else self.targets[self.targets != pad]
        self.ntokens = int(real.numel())
        has_pad = pad is not None and bool((self.tokens == pad).any())
        self.mask = AttentionMask.target(self.tokens, pad) if has_pad else AttentionMask(causal=True)

    def _pack(self, documents: Tensor, ignore_index: int | None) -> None:
        """The documents' mask, and the labels that begin a document left out of the loss."""
        if self.pad is not None or not is_int(ignore_index):
            raise ValueError(
                f"LMBatch: packed documents need pad=None (packed rows are full) and an int ignore_index (the label "
                f"the loss leaves out), got pad={self.pad!r}, ignore_index={ignore_index!r}"
            )
        shape = (self.tokens.size(0), self.tokens.size(1) + 1)
        if tuple(documents.shape) != shape:
            raise ValueError(
                f"LMBatch: documents must be (batch, seq + 1) = {shape}, one id per token, got shape "
                f"{tuple(documents.shape)}"
            )
        if documents.dtype.is_floating_point or documents.dtype == torch.bool or documents.is_complex():
            raise ValueError(f"LMBatch: documents must be integer ids, got dtype {documents.dtype}")
        backwards = (documents[:, 1:] < documents[:, :-1]).nonzero()
        if backwards.numel():
            row, column = (int(i) for i in backwards[0])
            raise ValueError(
                f"LMBatch: documents must not decrease along a row; row {row} goes from document "
                f"{int(documents[row, column])} to {int(documents[row, column + 1])} at token {column + 1}"
            )
        starts = documents[:, 1:] != documents[:, :-1]  # the label begins a document
        self.targets = self.targets.masked_fill(starts, ignore_index)
        self.ntokens = int(starts.numel() - starts.sum())
        self.mask = AttentionMask(causal=True, documents=documents[:, :-1])

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
