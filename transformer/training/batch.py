"""Batches for training (section 5.1): source and target token ids, labels, token counts and masks.

``Batch`` keeps the Annotated Transformer's name and fields; its masks are the structured
:class:`~transformer.masks.AttentionMask` that the attention backends run fastest with. The trainer needs only
the small protocol every batch kind provides: ``inputs()`` (the model's positional arguments), ``labels``,
``ntokens``, ``len(batch)`` and ``to(device)``.
"""

from __future__ import annotations

import torch

from ..contracts import Tensor
from ..masks import AttentionMask, target_mask

__all__ = ["Batch"]


def _check_ids(ids: Tensor, vocab: int, name: str, side: str) -> None:
    bad = (ids < 0) | (ids >= vocab)
    if bool(bad.any()):
        row, column = (int(i) for i in bad.nonzero()[0])
        where = (
            " (the last target position: a label only, which the model never reads)"
            if name == "tgt" and column == ids.size(1) - 1
            else ""
        )
        raise ValueError(
            f"Batch: {name} holds id {int(ids[row, column])} at position ({row}, {column}){where}, "
            f"outside the {side} vocabulary [0, {vocab})"
        )


class Batch:
    """Object for holding a batch of data with masks during training (as in the Annotated Transformer).

    ``src`` (batch, src_len) and optionally ``tgt`` (batch, tgt_len + 1) token ids. With a target,
    the decoder input is ``tgt[:, :-1]`` and the labels are ``tgt_y = tgt[:, 1:]`` (teacher forcing);
    ``ntokens`` counts the non-padding labels.

    Masks are :class:`~transformer.masks.AttentionMask` objects (True = may attend), the structured form the
    attention backends run fastest with: ``src_mask`` hides padded source keys (``AttentionMask.padding``: key
    lengths when the padding is at the end of each row); ``tgt_mask`` is causal and hides padded keys *and*
    padded query rows (``AttentionMask.target``, the structured :func:`transformer.masks.target_mask`), fixing
    the tutorial's padded positions that still attend. ``mask.to_dense(q_len, k_len)`` shows them as tensors.

    ``pad`` defaults to 2 as in the tutorial's ``Batch``; the copy task passes 0.

    ``src_vocab`` and ``tgt_vocab`` (optional; the tasks and the file corpora pass them): every id of ``src`` and of
    ``tgt`` must lie in ``[0, vocab)``, or ValueError names the tensor, the id and its position. That includes the
    last target position, which is a label only: the model's own guard checks the ids it reads (``src`` and
    ``tgt[:, :-1]``), never that one.
    """

    def __init__(
        self,
        src: Tensor,
        tgt: Tensor | None = None,
        pad: int = 2,
        *,
        src_vocab: int | None = None,
        tgt_vocab: int | None = None,
    ) -> None:
        if src.dim() != 2:
            raise ValueError(f"Batch: src must be (batch, src_len), got shape {tuple(src.shape)}")
        if src_vocab is not None:
            _check_ids(src, src_vocab, "src", "source")
        if tgt is not None and tgt_vocab is not None:
            _check_ids(tgt, tgt_vocab, "tgt", "target")
        self.pad = pad
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.src = src
        self.src_mask = AttentionMask.padding(src, pad)
        self.tgt: Tensor | None = None
        self.tgt_y: Tensor | None = None
        self.tgt_mask: AttentionMask | None = None
        self.ntokens = 0
        if tgt is not None:
            if tgt.dim() != 2 or tgt.size(0) != src.size(0):
                raise ValueError(f"Batch: tgt must be (batch={src.size(0)}, tgt_len + 1), got shape {tuple(tgt.shape)}")
            if tgt.size(1) < 2:
                raise ValueError(
                    f"Batch: tgt needs at least 2 tokens (a start symbol and one label), got {tgt.size(1)}"
                )
            self.tgt = tgt[:, :-1]
            self.tgt_y = tgt[:, 1:]
            self.tgt_mask = AttentionMask.target(self.tgt, pad)
            self.ntokens = int((self.tgt_y != pad).sum())

    @staticmethod
    def make_std_mask(tgt: Tensor, pad: int) -> Tensor:
        """Create a mask to hide padding and future words (padded query rows included), as a dense tensor."""
        return target_mask(tgt, pad)

    def inputs(self) -> tuple:
        """The model's arguments: ``model(*batch.inputs())`` is ``model(src, tgt, src_mask, tgt_mask)``."""
        return (self.src, self.tgt, self.src_mask, self.tgt_mask)

    @property
    def labels(self) -> Tensor | None:
        """What the model must predict: ``tgt_y``, the target shifted by one."""
        return self.tgt_y

    def __len__(self) -> int:
        return self.src.size(0)

    def to(self, device: torch.device | str) -> Batch:
        """Move every tensor of the batch to ``device`` (in place) and return the batch."""
        for name in ("src", "src_mask", "tgt", "tgt_y", "tgt_mask"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.to(device))
        return self
