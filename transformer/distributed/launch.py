"""Joining the job torchrun started: the process group, each rank's device, rank-0 output, errors and restarts.

Processes are started by ``torchrun`` (never by this package): :func:`setup` (or the :func:`distributed` context
manager) reads torchrun's environment, initialises the process group (gloo on CPU, nccl on CUDA) and returns the
strategy that tells the Trainer how to split the work.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist

from .fsdp import FSDPStrategy
from .strategy import DDPStrategy, Strategy
from .world import DistributedSetupError, World, torchrun_world

__all__ = ["STRATEGIES", "distributed", "main_process_output", "recorded_errors", "restarted_with_checkpoint", "setup"]

#: The strategies ``setup`` (and ``typed-transformer train --strategy``) accept.
STRATEGIES = ("ddp", "fsdp")


def setup(
    strategy: str = "ddp",
    device: torch.device | str | None = None,
    *,
    mixed_precision: bool | None = None,
    environ: Mapping[str, str] | None = None,
) -> Strategy:
    """Join the process group torchrun describes and return the strategy (close it with ``strategy.close()``).

    ``device``: None or ``"auto"`` (this rank's GPU ``cuda:LOCAL_RANK`` when CUDA is available, else the CPU),
    ``"cpu"`` or ``"cuda"`` (always ``cuda:LOCAL_RANK``). The backend is nccl on CUDA, gloo on the CPU.
    """
    if strategy not in STRATEGIES:
        raise DistributedSetupError(f"unknown strategy {strategy!r}; choose one of: {', '.join(STRATEGIES)}")
    world = torchrun_world(environ)
    if world is None:
        raise DistributedSetupError(
            f"strategy {strategy!r} needs processes started by torchrun (RANK, WORLD_SIZE and LOCAL_RANK are not set): "
            f"torchrun --nproc_per_node=N -m transformer train ... --strategy {strategy}"
        )
    device = _rank_device(device, world)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    owns = not dist.is_initialized()
    if owns:
        # torchrun's workers share the agent's key-value store across restarts (--max-restarts); a restarted rank
        # could read a dead peer's address left by the previous attempt and fail or hang connecting to it, so the
        # keys of each attempt get their own prefix
        store, rank, world_size = next(dist.rendezvous("env://"))
        store = dist.PrefixStore(f"typed-transformer/attempt-{world.restart_count}", store)
        if device.type == "cuda":
            dist.init_process_group("nccl", store=store, rank=rank, world_size=world_size, device_id=device)
        else:
            dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    if dist.get_world_size() != world.world_size or dist.get_rank() != world.rank:
        raise DistributedSetupError(
            f"the process group (rank {dist.get_rank()} of {dist.get_world_size()}) does not "
            f"match torchrun's environment (RANK={world.rank}, WORLD_SIZE={world.world_size})"
        )
    if strategy == "fsdp":
        return FSDPStrategy(world, device, owns_group=owns, mixed_precision=mixed_precision)
    return DDPStrategy(world, device, owns_group=owns)


@contextlib.contextmanager
def distributed(strategy: str = "ddp", device: torch.device | str | None = None, **kwargs: Any) -> Iterator[Strategy]:
    """:func:`setup` as a context manager: the process group is destroyed on the way out, errors included."""
    chosen = setup(strategy, device, **kwargs)
    try:
        yield chosen
    finally:
        chosen.close()


def _rank_device(device: torch.device | str | None, world: World) -> torch.device:
    name = "auto" if device is None else str(device)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    chosen = torch.device(name)
    if chosen.type == "cuda":
        if not torch.cuda.is_available():
            raise DistributedSetupError(f"device {name}: CUDA is not available on this machine")
        if chosen.index is not None and chosen.index != world.local_rank and world.local_world_size > 1:
            raise DistributedSetupError(
                f"device {name}: under torchrun each rank uses its own GPU, cuda:LOCAL_RANK "
                f"(here cuda:{world.local_rank}); "
                "pass cuda without an index (restrict the GPUs with CUDA_VISIBLE_DEVICES)"
            )
        return torch.device(
            "cuda", world.local_rank if chosen.index is None or world.local_world_size > 1 else chosen.index
        )
    if chosen.type != "cpu":
        raise DistributedSetupError(f"device {name}: only cpu and cuda are supported")
    return chosen


@contextlib.contextmanager
def main_process_output(world: World | None) -> Iterator[None]:
    """Standard output of every rank but 0 is discarded inside the block (errors on stderr still show)."""
    if world is None or world.is_main:
        yield
        return
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield


@contextlib.contextmanager
def recorded_errors() -> Iterator[None]:
    """Record an exception escaping the block in torchrun's error file (torch's ``@record``), so that torchrun's
    failure summary shows this rank's error and traceback; re-raises it."""
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    handler = get_error_handler()
    handler.initialize()
    try:
        yield
    except Exception as error:
        handler.record_exception(error)
        raise


def restarted_with_checkpoint(world: World | None, out: str) -> bool:
    """Whether torchrun restarted the job (``--max-restarts``; ``TORCHELASTIC_RESTART_COUNT > 0``) and ``out``
    holds a checkpoint to resume from (a job that failed before its first save starts again). The checkpoint is
    found as ``--resume`` finds it (:func:`transformer.checkpoint.find_checkpoint`): ``out``, or the copy a save
    interrupted between its two renames left aside (``out.old-*``)."""
    from ..checkpoint import find_checkpoint

    return world is not None and world.restart_count > 0 and find_checkpoint(out) is not None
