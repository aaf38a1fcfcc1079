"""What the ``train`` commands print about checkpoints and the learning rate, written once for every task: where a
run resumed from, where its checkpoint is saved (and the command that reads it), what a checkpoint holds, the
schedule it trains on."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import Any

from ..checkpoint import checkpoint_step, read_metadata
from ..distributed import is_sharded_checkpoint
from .parser import PROG

__all__ = [
    "resume_command",
    "resumed_message",
    "saved_message",
    "describe_checkpoint",
    "describe_schedule",
    "setting_flag",
]


def setting_flag(name: str, value: object) -> str:
    """A data setting as the command line gives it: ``--seed 4``, a switch as ``--pack`` or ``--no-pack``."""
    flag = name.replace("_", "-")
    return (f"--{flag}" if value else f"--no-{flag}") if isinstance(value, bool) else f"--{flag} {value}"


def resumed_message(out: str, step: int, restart: int | None = None) -> str:
    """``resumed from OUT at step N``, after ``restart R: `` when a torchrun restart (not ``--resume``) resumed it."""
    return f"{f'restart {restart}: ' if restart is not None else ''}resumed from {out} at step {step}"


def resume_command(task: str, out: str, environ: Mapping[str, str] = os.environ) -> str:
    """The command that continues the interrupted ``train task`` run in ``out``, exactly as it can be pasted:
    ``typed-transformer train TASK --resume --out OUT`` (the checkpoint holds the run's flags); under torchrun on one
    node ``torchrun --standalone --nproc-per-node N -m transformer train ...`` (the same number of ranks, which a
    sharded checkpoint needs); on several nodes the same on every node, after the job's own rendezvous flags."""
    command = f"{PROG} train {task} --resume --out {shlex.quote(out)}"
    world, local = environ.get("WORLD_SIZE"), environ.get("LOCAL_WORLD_SIZE")
    if not (world and local and world.isdigit() and local.isdigit()):
        return command
    ranks = f"--nproc-per-node {local} -m transformer {command.removeprefix(PROG + ' ')}"
    if world == local:
        return f"torchrun --standalone {ranks}"
    return f"torchrun --nnodes {int(world) // int(local)} {ranks} (on every node, with the job's rendezvous flags)"


def saved_message(out: str, command: str) -> str:
    """Where the checkpoint is, and the ``command`` that reads it (after ``consolidate`` when it is sharded)."""
    if is_sharded_checkpoint(out):
        return f"sharded checkpoint saved to {out}  (for {command}: {PROG} consolidate {out} {out}-consolidated)"
    return f'checkpoint saved to {out}  ({PROG} {command} --checkpoint {out} "...")'


def describe_checkpoint(path: str) -> str:
    """`` (step 600 of train copy)``, read from the checkpoint at ``path`` (less when it says less)."""
    step = checkpoint_step(path)
    task = read_metadata(path).get("task")
    parts = [f"step {step}" if step is not None else None, f"train {task}" if isinstance(task, str) else None]
    return f" ({' of '.join(p for p in parts if p)})" if any(parts) else ""


def describe_schedule(schedule: Any) -> str:
    """One line on the learning rate a run uses: the Noam schedule's warm-up, peak and factor."""
    return (
        f"learning rate: Noam schedule, {schedule.warmup} warm-up steps to a peak of {schedule.peak:.3g} "
        f"(factor {schedule.factor:.4g})"
    )
