"""Batching by token count with length buckets, sharded across ranks, resumable from a generator.

The Annotated Transformer's ``batch_size_fn`` idea: a batch is as many examples as fit a budget of padded tokens
(``examples x longest example``), so short sentences come many to a batch and long ones few, and examples of
similar length go together (little padding).

:class:`TokenBudgetPlan` decides the batches of one epoch from ``(seed, epoch, rank, world_size)`` alone:

1. order the examples by length, ties in a random order drawn from ``numpy.random.default_rng([seed, epoch])``
   (the length buckets);
2. cut that order greedily into batches whose padded size ``len(batch) * max(lengths)`` stays within
   ``max_tokens``;
3. shuffle the batches (same generator), so an epoch does not run from short to long;
4. rank ``r`` of ``world_size`` takes batches ``r, r + world_size, r + 2 * world_size, ...``.

Every rank computes the same epoch plan, so the shares are disjoint and together cover every example exactly once
per epoch; ranks' batch counts differ by at most one. The number of batches is the same in every epoch (the cut
depends only on the sorted lengths). ``shuffle=False`` keeps the length order and no batch shuffle (evaluation).

:class:`ResumableBatches` turns a plan into the endless iterator :class:`~transformer.training.trainer.Trainer` wants,
``batches(generator)``: its position (batches this rank has taken) is kept in the generator the Trainer saves in
checkpoints, as the generator's seed, so a resumed run continues with the next batch of the same epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from ..common.arguments import is_int

__all__ = ["TokenBudgetPlan", "ResumableBatches", "position_of", "token_budget_batches"]

#: Generators whose initial seed is at least this hold a position (seed - base); any other is at position 0.
POSITION_BASE = 1 << 62


def position_of(generator: torch.Generator) -> int:
    """Batches taken so far by the iterator that last advanced ``generator`` (0 for a freshly seeded one)."""
    seed = generator.initial_seed()
    return seed - POSITION_BASE if seed >= POSITION_BASE else 0


class TokenBudgetPlan:
    """Each epoch's batches of example indices for one rank (see the module docstring).

    ``lengths[i]`` is example i's padded cost per row (e.g. ``max(source, target)`` tokens); no example may be longer
    than ``max_tokens``. ``seed``, ``rank`` and ``world_size`` fix the plan; :meth:`epoch` gives an epoch's share.
    """

    def __init__(
        self,
        lengths,
        max_tokens: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        what: str = "example",
    ) -> None:
        given = np.asarray(lengths)
        if given.ndim != 1 or given.size == 0:
            raise ValueError(f"TokenBudgetPlan: lengths must be a non-empty 1-D array, got shape {given.shape}")
        if given.dtype.kind not in "iu":
            raise ValueError(f"TokenBudgetPlan: lengths must be integers, got dtype {given.dtype}")
        lengths = given.astype(np.int64)
        if lengths.min() < 0:
            i = int(np.argmin(lengths))
            raise ValueError(f"TokenBudgetPlan: {what} {i} has a negative length {int(lengths[i])}")
        for name, value in (("max_tokens", max_tokens), ("world_size", world_size)):
            if not is_int(value, at_least=1):
                raise ValueError(f"TokenBudgetPlan: {name} must be a positive int, got {value!r}")
        if not is_int(rank, at_least=0, below=world_size):
            raise ValueError(f"TokenBudgetPlan: rank must be an int in [0, world_size={world_size}), got {rank!r}")
        too_long = np.flatnonzero(lengths > max_tokens)
        if too_long.size:
            i = int(too_long[0])
            raise ValueError(
                f"TokenBudgetPlan: {what} {i} has {int(lengths[i])} tokens, more than the batch budget "
                f"max_tokens={max_tokens} ({too_long.size} such); raise the budget or shorten them"
            )
        self.lengths, self.max_tokens, self.seed, self.shuffle = lengths, max_tokens, seed, shuffle
        self.rank, self.world_size = rank, world_size
        self.n_batches = len(self._cut(np.argsort(lengths, kind="stable")))
        if self.n_batches < world_size:
            raise ValueError(
                f"TokenBudgetPlan: {self.n_batches} batches per epoch cannot be shared by "
                f"world_size={world_size} ranks; lower max_tokens or use more data"
            )

    def _cut(self, order: np.ndarray) -> list[np.ndarray]:
        """Greedy cut of ``order`` (sorted by length) into batches within the budget."""
        batches, start, longest = [], 0, 0
        for position, length in enumerate(self.lengths[order].tolist()):
            longest_with = max(longest, length)
            if (position - start + 1) * longest_with > self.max_tokens:
                batches.append(order[start:position])
                start, longest_with = position, length
            longest = longest_with
        batches.append(order[start:])
        return batches

    def all_batches(self, epoch: int) -> list[np.ndarray]:
        """Every rank's batches of ``epoch``, in the order they are dealt out."""
        if not self.shuffle:
            return self._cut(np.argsort(self.lengths, kind="stable"))
        rng = np.random.default_rng([self.seed, epoch])
        order = np.lexsort((rng.random(self.lengths.size), self.lengths))  # by length, ties in random order
        batches = self._cut(order)
        return [batches[i] for i in rng.permutation(len(batches))]

    def epoch(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of ``epoch``: every ``world_size``-th, from ``rank``."""
        if not is_int(epoch, at_least=0):
            raise ValueError(f"TokenBudgetPlan.epoch: epoch must be a non-negative int, got {epoch!r}")
        return self.all_batches(epoch)[self.rank :: self.world_size]

    @property
    def batches_per_epoch(self) -> int:
        """This rank's batch count in every epoch."""
        return len(range(self.rank, self.n_batches, self.world_size))


class ResumableBatches:
    """``batches(generator, shard=None)``: endless batches ``make_batch(indices)`` of a plan's epochs, one after
    another, for the Trainer (``Trainer(model, optimizer, ResumableBatches(...), ...)``).

    ``shard`` (anything with ``rank`` and ``world_size``, e.g. ``transformer.distributed.Shard``, which the Trainer
    passes under torchrun) picks the rank's share; None is the whole of every epoch. The position is read from
    ``generator`` when the iterator starts and written back into it (as its seed) before each batch is handed out,
    so the Trainer's saved generator resumes the iteration exactly.
    """

    def __init__(
        self,
        lengths,
        max_tokens: int,
        make_batch: Callable[[np.ndarray], object],
        *,
        seed: int = 0,
        what: str = "example",
    ) -> None:
        self.lengths, self.max_tokens, self.make_batch, self.seed, self.what = (
            lengths,
            max_tokens,
            make_batch,
            seed,
            what,
        )
        self.plan(None)  # refuse an impossible budget now, not at the first batch

    def plan(self, shard=None) -> TokenBudgetPlan:
        rank, world_size = (0, 1) if shard is None else (shard.rank, shard.world_size)
        return TokenBudgetPlan(
            self.lengths, self.max_tokens, seed=self.seed, rank=rank, world_size=world_size, what=self.what
        )

    def __call__(self, generator: torch.Generator, shard=None) -> Iterator:
        plan = self.plan(shard)
        position = position_of(generator)
        per_epoch = plan.batches_per_epoch
        epoch, batches = -1, []
        while True:
            wanted, index = divmod(position, per_epoch)
            if wanted != epoch:
                epoch, batches = wanted, plan.epoch(wanted)
            position += 1
            generator.manual_seed(POSITION_BASE + position)
            yield self.make_batch(batches[index])


def token_budget_batches(
    train: Any, valid: Any, max_tokens: int, *, seed: int, what: str
) -> tuple[ResumableBatches, Callable[[], Iterator[Any]]]:
    """A Trainer's ``batches`` and ``eval_batches`` for datasets with ``lengths`` and ``make_batch(indices)``: the
    training examples of ``train`` in resumable, shardable token-budget batches (seeded by ``seed``), and each call of
    the second a fresh pass over ``valid`` in length order (the same batches every time). ``what`` names an example
    in errors ("window", "pair")."""
    batches = ResumableBatches(train.lengths, max_tokens, train.make_batch, seed=seed, what=what)
    valid_plan = TokenBudgetPlan(valid.lengths, max_tokens, shuffle=False, what=what)

    def eval_batches() -> Iterator[Any]:
        return (valid.make_batch(indices) for indices in valid_plan.epoch(0))

    return batches, eval_batches
