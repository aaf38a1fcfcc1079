"""Reading and checking what an :class:`~transformer.masks.AttentionMask` is built from: integer tensors, document
ids packed one after another, real lengths of padded token rows, and the short value lists its messages quote."""

from __future__ import annotations

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from .common.dtypes import shape_text


def is_integer(t: Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


def short_list(values: list) -> str:
    return str(values) if len(values) <= 8 else f"[{', '.join(map(str, values[:8]))}, ...]"


def check_documents(documents: object) -> None:
    """Refuse documents that are not (batch, k_len) integer ids, or (on the CPU, outside a compiled trace: no
    device sync) ids that decrease along a row: the row and position where they do."""
    if not isinstance(documents, Tensor) or documents.dim() != 2 or not is_integer(documents):
        raise ValueError(
            "AttentionMask: documents must be an integer tensor of shape (batch, k_len) (each position's document "
            f"id), got {shape_text(documents) if isinstance(documents, Tensor) else type(documents).__name__}"
        )
    if documents.device.type != "cpu" or torch.compiler.is_compiling() or is_fake(documents) or documents.size(1) < 2:
        return  # (fake, or compiling: torch.export rebuilding a mask input; no branch on a symbolic size first)
    drops = documents[:, 1:] < documents[:, :-1]
    if bool(drops.any()):
        row, pos = (int(x) for x in drops.nonzero()[0])
        raise ValueError(
            f"AttentionMask: documents must be non-decreasing along each row (documents packed one after another); "
            f"batch row {row} goes from {int(documents[row, pos])} to {int(documents[row, pos + 1])} at position "
            f"{pos + 1}"
        )


def lengths_text(lengths: Tensor) -> str:
    """The lengths as a short list for a message (a host tensor: no synchronisation)."""
    return short_list(lengths.tolist())


def real_lengths(tokens: Tensor, pad_id: int) -> tuple[Tensor, bool]:
    """Per-row count of real tokens, and whether every row's padding sits at its end (one pass over the tokens)."""
    real = tokens != pad_id
    lengths = real.sum(-1)
    trailing = bool(torch.equal(real, torch.arange(tokens.size(-1), device=tokens.device) < lengths[:, None]))
    return lengths, trailing
