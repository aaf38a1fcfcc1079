"""Each rank's part of the data: a global batch split by rows, or a shard-aware batch factory given its ``Shard``.

A plain factory ``batches(generator)`` yields *global* batches, identical on every rank (the same seed), of which each
rank keeps its contiguous ``1/world_size`` of the rows (:func:`shard_batch`); a factory that accepts a ``shard``
keyword, by name or through ``**kwargs`` (:func:`takes_shard`, e.g. the file corpora's ``ResumableBatches``), gets
``shard=Shard(rank, world_size)`` and yields this rank's batches itself.
Either way the job sees exactly the batches one process would see.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from ..training.batch import Batch
from .world import DistributedSetupError

__all__ = ["Shard", "check_batch_size", "shard_batch", "takes_shard"]


class Shard(NamedTuple):
    """The part of the data one rank reads: rank ``rank`` of ``world_size``."""

    rank: int
    world_size: int


def check_batch_size(batch_size: int, world_size: int, what: str = "batch size") -> int:
    """``batch_size // world_size``, the examples each rank takes; raises when the division is not exact."""
    if batch_size % world_size:
        raise DistributedSetupError(
            f"{what} {batch_size} is not divisible by the world size {world_size}: every rank takes an equal share "
            f"of each batch, so use a multiple of {world_size} "
            f"(e.g. {max(world_size, batch_size - batch_size % world_size)})"
        )
    return batch_size // world_size


def shard_batch(batch: Any, shard: Shard) -> Any:
    """Rank ``shard.rank``'s contiguous ``1/world_size`` of the rows of a global batch.

    A :class:`~transformer.training.batch.Batch` is rebuilt from its rows (masks and ``ntokens`` recomputed); any other
    batch kind must provide ``shard(rank, world_size)``. The rows of all ranks together are the global batch.
    """
    n = len(batch)
    rows = check_batch_size(n, shard.world_size, "a global batch of")
    part = slice(shard.rank * rows, (shard.rank + 1) * rows)
    if type(batch) is Batch:
        vocabs = dict(src_vocab=batch.src_vocab, tgt_vocab=batch.tgt_vocab)
        if batch.tgt is None:
            return Batch(batch.src[part], None, batch.pad, **vocabs)
        tgt = torch.cat([batch.tgt[part], batch.tgt_y[part, -1:]], dim=1)  # the full target: decoder input + last label
        return Batch(batch.src[part], tgt, batch.pad, **vocabs)
    method = getattr(batch, "shard", None)
    if callable(method):
        return method(shard.rank, shard.world_size)
    raise TypeError(
        f"cannot split a {type(batch).__name__} between ranks: give the Trainer a batch factory that takes a `shard` "
        "keyword (transformer.distributed.Shard) and yields this rank's batches, or give the batch a "
        "shard(rank, world_size) method"
    )


def takes_shard(factory: Callable) -> bool:
    """Whether the batch factory accepts a ``shard`` keyword, by name or through ``**kwargs`` (and so is given its
    ``Shard`` and yields only this rank's batches)."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return "shard" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
