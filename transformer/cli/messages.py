"""What the ``train`` commands print about checkpoints and the learning rate, written once for every task: where a
run resumed from, where its checkpoint is saved (and the command that reads it), what a checkpoint holds, the
schedule it trains on."""

from __future__ import annotations

from typing import Any

from ..checkpoint import checkpoint_step, read_metadata
from ..distributed import is_sharded_checkpoint
from .parser import PROG

__all__ = ["resumed_message", "saved_message", "describe_checkpoint", "describe_schedule", "setting_flag"]


def setting_flag(name: str, value: object) -> str:
    """A data setting as the command line gives it: ``--seed 4``, a switch as ``--pack`` or ``--no-pack``."""
    flag = name.replace("_", "-")
    return (f"--{flag}" if value else f"--no-{flag}") if isinstance(value, bool) else f"--{flag} {value}"


def resumed_message(out: str, step: int, restart: int | None = None) -> str:
    """``resumed from OUT at step N``, after ``restart R: `` when a torchrun restart (not ``--resume``) resumed it."""
    return f"{f'restart {restart}: ' if restart is not None else ''}resumed from {out} at step {step}"


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
