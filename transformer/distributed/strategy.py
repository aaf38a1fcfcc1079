"""How a Trainer spreads its work over processes: the strategy interface, one process alone, and DDP.

The :class:`~transformer.training.trainer.Trainer` runs one code path everywhere; what differs is a strategy object:

* :class:`SingleProcess` (the default): every operation is the identity or a no-op.
* :class:`DDPStrategy`: the model is replicated (``DistributedDataParallel``); gradients are all-reduced once per
  optimizer step (``no_sync`` on the accumulation steps); rank 0 saves the usual safetensors checkpoint.
* :class:`~transformer.distributed.FSDPStrategy` (``fsdp.py``): FSDP2, sharded checkpoints.

Gradients equal one process's: each rank's loss is weighted by its share of all the ranks' tokens
(:meth:`Strategy.token_weights`), so the averaged gradient is that of the global loss per token.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .sharded_checkpoint import is_sharded_checkpoint, sharded_world
from .sharding import Shard, shard_batch, takes_shard
from .world import World

__all__ = ["RANK_STATE_KEYS", "CollectiveStrategy", "DDPStrategy", "SingleProcess", "Strategy"]

#: The trainer-state entries that differ between ranks (saved per rank under "ranks").
RANK_STATE_KEYS = ("torch_rng", "cuda_rng", "python_rng", "data_rng")


class Strategy:
    """How a Trainer spreads its work over processes. This base class is one process alone (:class:`SingleProcess`)."""

    name = "single"

    def __init__(self, world: World | None = None, device: torch.device | str | None = None) -> None:
        self.world = world or World()
        self.device = torch.device(device) if device is not None else torch.device("cpu")

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    @property
    def is_main(self) -> bool:
        return self.world.is_main

    def describe(self) -> str:
        return "one process"

    # -- model
    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> nn.Module:
        """Wrap or shard ``model`` for training; returns the module to call in training steps."""
        return model

    def no_sync(self, train_model: nn.Module, last: bool) -> contextlib.AbstractContextManager:
        """The context of one accumulation step's forward and backward (gradient sync only on the ``last``)."""
        return contextlib.nullcontext()

    def full_model(self, model: nn.Module) -> nn.Module | None:
        """A plain full model on the main process (for decoding), None elsewhere; a collective under FSDP."""
        return model

    # -- data
    def batches(self, factory: Callable[..., Iterator], generator: torch.Generator) -> Iterator:
        """This rank's training batches from ``factory`` (see :mod:`transformer.distributed.sharding`)."""
        shard = Shard(self.rank, self.world_size)
        if takes_shard(factory):
            return factory(generator, shard=shard)
        stream = factory(generator)
        if self.world_size == 1:
            return stream
        return (shard_batch(batch, shard) for batch in stream)

    def token_weights(self, ntokens: Sequence[int]) -> list[float]:
        """Per batch, this rank's tokens times world_size over all ranks' tokens (1.0 when the ranks hold equal
        counts): weighting each rank's loss per token by it makes the averaged gradient the global loss's."""
        return [1.0] * len(ntokens)

    def eval_share(self, batches: Iterable) -> Iterator[tuple[Any, bool]]:
        """This rank's evaluation batches as (batch, counted) pairs."""
        for batch in batches:
            yield batch, True

    # -- collectives
    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        return [float(v) for v in values]

    def all_gather(self, value: Any) -> list[Any]:
        return [value]

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` (any picklable object) on every rank; what the other ranks pass is ignored."""
        return value

    def barrier(self) -> None:
        pass

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first, the other ranks after it has finished (e.g. rank 0 tokenizes a corpus into
        a cache that the others then read); a no-op on one process. If rank 0 fails in the block, the others stay
        waiting until torchrun stops the job: they never run the block on what rank 0 left half done."""
        if not self.is_main:
            self.barrier()
        yield
        if self.is_main:
            self.barrier()

    # -- per-rank state
    def rank_states(self, own: dict[str, Any]) -> dict[str, Any]:
        """Extra trainer state holding every rank's ``own`` RNG states (nothing on one process)."""
        return {}

    def own_rank_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """The RNG states this rank resumes with: its own when the world size is unchanged."""
        return {key: state[key] for key in RANK_STATE_KEYS if key in state}

    # -- checkpoints
    def save(
        self,
        path: str,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        trainer_state: dict[str, Any],
        metadata: dict[str, Any],
    ) -> str:
        from ..checkpoint import save_checkpoint

        return save_checkpoint(path, model, trainer_state=trainer_state, metadata=metadata)

    def load(
        self, path: str, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
    ) -> dict[str, Any] | None:
        """Load weights into ``model``; return the trainer state (the optimizer is loaded by the Trainer)."""
        from ..checkpoint import CheckpointError, load_checkpoint

        if is_sharded_checkpoint(path):
            raise CheckpointError(
                f"checkpoint {path} is sharded (saved by FSDP on {sharded_world(path)} processes): resume it under "
                f"torchrun with --strategy fsdp, or consolidate its weights: typed-transformer consolidate {path} OUT"
            )
        return load_checkpoint(path, model=model, map_location=device).trainer_state

    def close(self) -> None:
        pass


class SingleProcess(Strategy):
    """One process alone, no process group: the Trainer's default."""


class CollectiveStrategy(Strategy):
    """What DDP and FSDP share: a process group, reductions, per-rank RNG states, rank-0 I/O."""

    def __init__(self, world: World, device: torch.device | str, *, owns_group: bool = False) -> None:
        super().__init__(world, device)
        self._owns_group = owns_group
        self._comm_device = self.device if self.device.type == "cuda" else torch.device("cpu")

    def describe(self) -> str:
        return f"{self.name} on {self.world_size} processes ({dist.get_backend()})"

    def _reseed(self) -> None:
        """Different dropout streams on each rank, reproducible from the seed and the rank."""
        if self.world_size > 1:
            torch.manual_seed(torch.initial_seed() + self.rank)

    def token_weights(self, ntokens: Sequence[int]) -> list[float]:
        totals = self.all_reduce_sum(ntokens)
        return [n * self.world_size / total if total > 0 else 1.0 for n, total in zip(ntokens, totals, strict=True)]

    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self._comm_device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.tolist()

    def all_gather(self, value: Any) -> list[Any]:
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered

    def broadcast(self, value: Any) -> Any:
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        dist.barrier()

    # the evaluation set is split round-robin: batch i on rank i % world_size
    _matched_forwards = False  # FSDP: every rank must run the same number of forwards (each is a collective)

    def eval_share(self, batches: Iterable) -> Iterator[tuple[Any, bool]]:
        batches = list(batches)
        rounds = -(-len(batches) // self.world_size)
        for k in range(rounds):
            i = k * self.world_size + self.rank
            if i < len(batches):
                yield batches[i], True
            elif self._matched_forwards:
                yield batches[0], False  # a forward whose result is not counted, so the collectives match

    def rank_states(self, own: dict[str, Any]) -> dict[str, Any]:
        return {"ranks": self.all_gather({key: own[key] for key in RANK_STATE_KEYS})}

    def own_rank_state(self, state: dict[str, Any]) -> dict[str, Any]:
        ranks = state.get("ranks")
        if ranks is not None and len(ranks) == self.world_size:
            return dict(ranks[self.rank])
        # another world size (or a one-process checkpoint): the data stream is rank 0's (the same on every rank);
        # dropout streams are re-derived from the step and the rank
        own = super().own_rank_state(state)
        own["torch_rng"] = torch.Generator().manual_seed(1_000_003 * int(state["step"]) + self.rank).get_state()
        own["cuda_rng"] = []
        return own

    def close(self) -> None:
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()


class DDPStrategy(CollectiveStrategy):
    """DistributedDataParallel: a full replica per rank, gradients all-reduced once per optimizer step."""

    name = "ddp"

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        if isinstance(model, DistributedDataParallel):
            raise TypeError("DDPStrategy.prepare: give the plain model, not a DistributedDataParallel wrapper")
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        wrapped = DistributedDataParallel(model, device_ids=device_ids)  # broadcasts rank 0's weights
        self._reseed()
        return wrapped

    def no_sync(self, train_model: nn.Module, last: bool) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext() if last else train_model.no_sync()

    def save(self, path, model, optimizer, trainer_state, metadata) -> str:
        from ..checkpoint import save_checkpoint

        path = os.path.abspath(os.fspath(path))
        if self.is_main:  # the replicas are identical: one copy, written by rank 0
            save_checkpoint(path, model, trainer_state=trainer_state, metadata=metadata)
        self.barrier()
        return path
