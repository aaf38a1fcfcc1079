"""What every ``train`` command shares, synthetic tasks and file tasks alike: the rules for ``--out`` (checked before
anything is trained), the learning-rate flags (``--lr``, ``--lr-factor``, ``--warmup``, also on a resume), resuming
from ``--out``, and the final held-out loss that must be finite before any result is reported."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from ..checkpoint import find_checkpoint
from ..common.output_dirs import OutputWriteError, check_writable, remove_stale_temps
from ..distributed import World, restarted_with_checkpoint
from ..training import NoamSchedule, Trainer, TrainingDiverged, noam_factor
from .errors import UsageError
from .messages import describe_checkpoint, resumed_message
from .parser import PROG

__all__ = [
    "check_out",
    "schedule_settings",
    "schedule_given",
    "resume_schedule",
    "resume",
    "require_finite",
    "loss_lines",
]


def check_out(args: argparse.Namespace, world: World | None) -> None:
    """Before anything is trained: ``--out`` must be writable, and a new run never replaces a checkpoint (or a
    directory it did not write) unless ``--overwrite`` says so. Temporary directories of interrupted saves into
    ``--out`` whose process is gone are removed."""
    out = args.out
    if args.resume and args.overwrite:
        raise UsageError(
            "--resume continues the checkpoint in --out and --overwrite starts a new run over it: give one of them"
        )
    found = find_checkpoint(out)
    resuming = args.resume or restarted_with_checkpoint(world, out)
    if not resuming:
        if found is not None and not args.overwrite:
            raise UsageError(
                f"--out {out} already holds a checkpoint{describe_checkpoint(found)}: continue it with "
                f"--resume, or start a new run over it with --overwrite (it is replaced at the first save)"
            )
        if found is None and os.path.isdir(out) and os.listdir(out):
            raise UsageError(
                f"--out {out} is a directory that is not empty and holds no checkpoint; "
                f"{PROG} only replaces checkpoints it wrote: choose another --out"
            )
    try:
        check_writable(out, "--out")
    except OutputWriteError as error:
        raise UsageError(str(error)) from None
    remove_stale_temps(out)


def schedule_settings(args: argparse.Namespace, d_model: int, defaults: dict[str, Any]) -> tuple[float, int]:
    """The Noam ``(factor, warmup)`` the flags ask for: ``--warmup`` (else the task's), and ``--lr`` (the schedule's
    peak) converted with ``d_model`` and the warm-up (:func:`transformer.training.noam_factor`), else
    ``--lr-factor``, else the task's factor (``defaults``: ``"factor"`` and ``"warmup"``)."""
    warmup = defaults["warmup"] if args.warmup is None else args.warmup
    if args.lr is not None:
        return noam_factor(args.lr, d_model, warmup), warmup
    return (defaults["factor"] if args.lr_factor is None else args.lr_factor), warmup


def schedule_given(args: argparse.Namespace) -> bool:
    """Whether the command line sets the learning rate (``--lr``, ``--lr-factor`` or ``--warmup``)."""
    return any(getattr(args, name, None) is not None for name in ("lr", "lr_factor", "warmup"))


def resume_schedule(trainer: Trainer, args: argparse.Namespace) -> str | None:
    """After ``trainer`` resumed: keep the checkpoint's learning-rate schedule, unless the command line sets some of
    it (``--lr``, ``--lr-factor``, ``--warmup``; what it does not set stays the checkpoint's), which then applies
    from the resumed step on (e.g. a lower ``--lr`` after a divergence). Returns a line saying what changed, or
    None."""
    scheduler = trainer.scheduler
    saved = scheduler.lr_lambdas[0]
    if not schedule_given(args):
        return None
    factor, warmup = schedule_settings(args, saved.model_size, {"factor": saved.factor, "warmup": saved.warmup})
    if (saved.factor, saved.warmup) == (factor, warmup):
        return None
    new = NoamSchedule(saved.model_size, factor, warmup)
    scheduler.lr_lambdas = [new for _ in scheduler.lr_lambdas]
    for group, base in zip(trainer.optimizer.param_groups, scheduler.base_lrs, strict=True):
        group["lr"] = base * new(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in trainer.optimizer.param_groups]
    return (
        f"learning rate changed on resume: factor {saved.factor:.4g} -> {factor:.4g}, warm-up {saved.warmup} -> "
        f"{warmup} (peak {saved.peak:.3g} -> {new.peak:.3g})"
    )


def resume(trainer: Trainer, args: argparse.Namespace, out: str, restarted: bool) -> None:
    """Resume ``trainer`` from ``out`` when ``--resume`` asks or a torchrun restart (``restarted``) found a
    checkpoint there; say so, with the learning rate the command line sets, if it sets one
    (:func:`resume_schedule`)."""
    if not (args.resume or restarted):
        return
    trainer.resume(out)
    restart = trainer.strategy.world.restart_count if restarted and not args.resume else None
    print(resumed_message(out, trainer.step, restart))
    changed = resume_schedule(trainer, args)
    if changed:
        print(changed)


def require_finite(eval_loss: float, step: int) -> float:
    """``eval_loss``, or :class:`~transformer.training.TrainingDiverged` when it is NaN or infinite: a run never
    reports a non-finite loss (or perplexity, or BLEU of a broken model) as its result."""
    if not math.isfinite(eval_loss):
        raise TrainingDiverged(
            f"the held-out loss after step {step} is {eval_loss}: the model is broken (a loss or "
            "a weight became NaN or inf); no results are reported; lower the learning rate (--lr "
            "or --lr-factor) or lengthen the warm-up (--warmup)",
            step,
            eval_loss,
        )
    return eval_loss


def loss_lines(trainer: Trainer, args: argparse.Namespace):
    """With ``--no-progress`` (a log file): the ``on_eval`` of ``Trainer.train`` that prints, at every evaluation, the
    line the progress bar would have written (``step 200: train loss 1.2345, eval loss 1.3456``), flushed at once;
    None with the bar (the Trainer writes the line above it) and on every rank but the first."""
    if not args.no_progress or not trainer.strategy.is_main:
        return None

    def line(step: int, eval_loss: float) -> None:
        print(f"step {step}: train loss {trainer.last_train_loss:.4f}, eval loss {eval_loss:.4f}", flush=True)

    return line
