"""What every ``train`` command shares, synthetic tasks and file tasks alike: the rules for ``--out`` (checked before
anything is trained), the learning-rate flags (``--lr-schedule``, ``--lr``, ``--lr-factor``, ``--warmup``,
``--warmup-ratio``, also on a resume), the flags a checkpoint records and a resume reads back (so that ``--resume
--out DIR`` alone continues a run), resuming from ``--out``, and the final held-out loss that must be finite before
any result is reported."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from ..checkpoint import find_checkpoint, read_metadata
from ..common.output_dirs import OutputWriteError, check_writable, remove_stale_temps
from ..distributed import World, restarted_with_checkpoint
from ..training import (
    DEFAULT_WARMUP_RATIO,
    NoamSchedule,
    Trainer,
    TrainingDiverged,
    WarmupDecaySchedule,
    noam_factor,
    use_schedule,
    warmup_steps,
)
from .arguments import GIVEN
from .errors import UsageError
from .messages import describe_checkpoint, describe_schedule, resumed_message
from .parser import PROG

__all__ = [
    "check_out",
    "recorded_flags",
    "recall_flags",
    "require_files",
    "schedule_settings",
    "training_schedule",
    "schedule_line",
    "apply_schedule",
    "schedule_given",
    "resume_schedule",
    "resume",
    "require_finite",
    "trained_line",
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


#: The flags of one invocation, never recorded: where the run saves, how it runs, what it prints; the learning-rate
#: numbers (the checkpoint's schedule holds them: :func:`resume_schedule`); ``--tokenizer-file`` (the checkpoint
#: holds its tokenizer, and one given on a resume is compared with it by content).
_NOT_RECORDED = {
    "command", "task", "out", "resume", "overwrite", "device", "threads", "attention_backend", "no_progress",
    "strategy", "lr", "lr_factor", "warmup", "warmup_ratio", "tokenizer_file", GIVEN,
}  # fmt: skip
#: Recorded flags a resume may change: how far it trains, how often and how much it evaluates, the schedule's kind.
_MAY_CHANGE = {"steps", "eval_every", "eval_examples", "beam_size", "lr_schedule"}
#: Flags that name files: recorded as absolute paths, so that a resume from another directory reads the same files.
_PATHS = {"text", "valid", "train", "init", "data_dir"}


def _normal(name: str, value: Any) -> Any:
    if name in _PATHS and value is not None:
        return [os.path.abspath(v) for v in value] if isinstance(value, list) else os.path.abspath(value)
    return value


def recorded_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The flags of ``args`` a checkpoint records (``metadata["flags"]``), paths made absolute: what defines the run
    (data, tokenizer, model, ``--init``, ``--dtype``, seed, batches, steps, the schedule's kind)."""
    return {name: _normal(name, value) for name, value in sorted(vars(args).items()) if name not in _NOT_RECORDED}


def _shown(name: str, value: Any) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else f"--no-{name.replace('_', '-')}"
    if value is None:
        return f"no {flag}"
    return f"{flag} {' '.join(map(str, value)) if isinstance(value, list) else value}"


def _value(name: str, value: Any) -> str:
    """A recorded value as the refusal names it: ``16``, ``a.txt b.txt``; a switch or an absent flag as a flag."""
    if isinstance(value, bool) or value is None:
        return _shown(name, value)
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def recall_flags(args: argparse.Namespace, out: str, resuming: bool) -> None:
    """On a resume: every recorded flag (:func:`recorded_flags`) the command line leaves out takes the checkpoint's
    value, so that ``train TASK --resume --out DIR`` continues the run as it was started (``--text``, ``--init``,
    ``--block-len``, ``--dtype``, ``--steps``, the schedule...); a flag given with another value than the
    checkpoint's is refused naming both (UsageError), but for those a resume may change (``--steps``,
    ``--eval-every``, ``--eval-examples``, ``--beam-size``, ``--lr-schedule``; and the learning-rate numbers, never
    recorded). A checkpoint written before the flags were recorded changes nothing here."""
    found = find_checkpoint(out) if resuming else None
    recorded = read_metadata(found).get("flags") if found is not None else None
    if not isinstance(recorded, dict):
        return
    given = getattr(args, GIVEN, set())
    for name, value in recorded.items():
        if name in _NOT_RECORDED or not hasattr(args, name):
            continue
        if name not in given:
            setattr(args, name, value)
            continue
        mine = _normal(name, getattr(args, name))
        if name in _MAY_CHANGE or mine == value:
            continue
        raise UsageError(
            f"{_shown(name, mine)} differs from the checkpoint's {_value(name, value)} (recorded in {found}): a "
            f"resumed run continues what its checkpoint started; give {_shown(name, value)} or leave "
            f"--{name.replace('_', '-')} out (the checkpoint's is then taken), or start a new run in another --out"
        )


def require_files(args: argparse.Namespace, resumes: bool) -> None:
    """``--text`` (``train lm``), ``--train`` and ``--valid`` (``train translate``) are required; a resume reads them
    from its checkpoint (:func:`~transformer.cli.train_setup.recall_flags`), one written before the flags were
    recorded has none."""
    needed = {"lm": ["text"], "translate": ["train", "valid"]}.get(args.task, [])
    missing = ["--" + name for name in needed if not getattr(args, name, None)]
    if missing:
        why = (
            f": the checkpoint in --out {args.out} records none (it was written before the flags were recorded); "
            "give the files it was trained on"
            if resumes
            else ""
        )
        from .parser import build_parser  # the task's own usage line and exit status 2, as argparse refuses

        build_parser().task_parsers[args.task].error(f"the following arguments are required: {', '.join(missing)}{why}")


def schedule_settings(args: argparse.Namespace, d_model: int, defaults: dict[str, Any]) -> tuple[float, int]:
    """The Noam ``(factor, warmup)`` the flags ask for: ``--warmup`` (else ``--warmup-ratio`` of ``--steps``, else the
    task's), and ``--lr`` (the schedule's peak) converted with ``d_model`` and the warm-up
    (:func:`transformer.training.noam_factor`), else ``--lr-factor``, else the task's factor (``defaults``:
    ``"factor"`` and ``"warmup"``; or ``"peak"``, the default peak, as ``train lm --init`` gives it)."""
    warmup = defaults["warmup"] if args.warmup is None else args.warmup
    if getattr(args, "warmup_ratio", None) is not None:
        warmup = warmup_steps(args.warmup_ratio, args.steps)
    if warmup < 1:
        given = f"--warmup {args.warmup}" if args.warmup is not None else f"--warmup-ratio {args.warmup_ratio}"
        raise UsageError(
            f"{given} gives no warm-up step, and the Noam schedule divides by its warm-up: give --warmup 1 or more, "
            "or a decaying schedule (--lr-schedule constant, linear or cosine), which may start at its peak"
        )
    if args.lr is not None:
        return noam_factor(args.lr, d_model, warmup), warmup
    if args.lr_factor is not None:
        return args.lr_factor, warmup
    if "peak" in defaults:
        return noam_factor(defaults["peak"], d_model, warmup), warmup
    return defaults["factor"], warmup


def training_schedule(
    args: argparse.Namespace, d_model: int, defaults: dict[str, Any], steps: int, fine_tune: bool = False
) -> NoamSchedule | WarmupDecaySchedule:
    """The learning-rate schedule of a new run: ``--lr-schedule`` (default ``noam``; ``linear`` for a fine-tune, as
    transformers' Trainer), Noam's from :func:`schedule_settings`; a decaying one warms up for ``--warmup`` steps (else
    ``--warmup-ratio`` of ``steps``, else :data:`~transformer.training.DEFAULT_WARMUP_RATIO` of them) to ``--lr`` (else
    ``defaults["peak"]``, else the peak of the task's Noam schedule) and decays to 0 at step ``steps``."""
    kind = getattr(args, "lr_schedule", None) or ("linear" if fine_tune else "noam")
    if kind == "noam":
        return NoamSchedule(d_model, *schedule_settings(args, d_model, defaults))
    if args.lr_factor is not None:
        raise UsageError(
            f"--lr-factor is the Noam schedule's factor; --lr-schedule {kind} has none: set its peak with --lr"
        )
    if args.warmup is not None:
        warmup = args.warmup
    else:
        ratio = DEFAULT_WARMUP_RATIO if getattr(args, "warmup_ratio", None) is None else args.warmup_ratio
        warmup = warmup_steps(ratio, steps)
    peak = args.lr
    if peak is None:
        peak = (
            defaults["peak"]
            if "peak" in defaults
            else NoamSchedule(d_model, defaults["factor"], defaults["warmup"]).peak
        )
    return WarmupDecaySchedule(kind, peak, warmup, steps)


def schedule_line(schedule: NoamSchedule | WarmupDecaySchedule) -> str:
    """The line a run prints about its learning rate (``learning rate: ...``)."""
    if isinstance(schedule, NoamSchedule):
        return describe_schedule(schedule)
    return f"learning rate: {schedule.describe()}"


def apply_schedule(trainer: Trainer, schedule: NoamSchedule | WarmupDecaySchedule) -> None:
    """Train ``trainer`` (not stepped yet) on ``schedule`` instead of the Noam schedule its recipe built."""
    use_schedule(trainer.scheduler, schedule)


def schedule_given(args: argparse.Namespace) -> bool:
    """Whether the command line sets the learning rate (``--lr``, ``--lr-factor``, ``--warmup``, ``--warmup-ratio``
    or ``--lr-schedule``)."""
    names = ("lr", "lr_factor", "warmup", "warmup_ratio", "lr_schedule")
    return any(getattr(args, name, None) is not None for name in names)


def _describe(schedule: NoamSchedule | WarmupDecaySchedule) -> str:
    if isinstance(schedule, NoamSchedule):
        return f"noam (factor {schedule.factor:.4g}, warm-up {schedule.warmup}, peak {schedule.peak:.3g})"
    return f"{schedule.schedule} (warm-up {schedule.warmup}, peak {schedule.peak:.3g}, to 0 at step {schedule.total})"


def resume_schedule(trainer: Trainer, args: argparse.Namespace) -> str | None:
    """After ``trainer`` resumed: keep the checkpoint's learning-rate schedule, unless the command line sets some of
    it (``--lr``, ``--lr-factor``, ``--warmup``, ``--warmup-ratio``, ``--lr-schedule``; what it does not set stays the
    checkpoint's), which then applies from the resumed step on (e.g. a lower ``--lr`` after a divergence); a linear or
    cosine schedule decays to 0 at the resumed run's ``--steps`` (a longer run stretches it). Returns a line saying
    what changed, or None."""
    saved = trainer.scheduler.lr_lambdas[0]
    steps = trainer.config.steps
    decays = isinstance(saved, WarmupDecaySchedule) and saved.schedule != "constant"
    if not schedule_given(args) and not (decays and saved.total != steps):
        return None
    kind = getattr(args, "lr_schedule", None) or ("noam" if isinstance(saved, NoamSchedule) else saved.schedule)
    if kind == "noam" and isinstance(saved, NoamSchedule):
        new = NoamSchedule(saved.model_size, *schedule_settings(args, saved.model_size, vars(saved)))
    elif kind == "noam":
        raise UsageError(
            f"--lr-schedule noam: the checkpoint trains on a {saved.schedule} schedule, which has no model width to "
            "scale a Noam schedule by; resume it with --lr-schedule constant, linear or cosine"
        )
    else:
        peak = saved.peak
        warmup = saved.warmup
        if args.warmup is not None:
            warmup = args.warmup
        elif getattr(args, "warmup_ratio", None) is not None:
            warmup = warmup_steps(args.warmup_ratio, steps)
        if args.lr_factor is not None:
            raise UsageError(
                f"--lr-factor is the Noam schedule's factor; a {kind} schedule has none: set its peak with --lr"
            )
        new = WarmupDecaySchedule(kind, peak if args.lr is None else args.lr, warmup, steps)
    if vars(new) == vars(saved):
        return None
    use_schedule(trainer.scheduler, new)
    if isinstance(saved, NoamSchedule) and isinstance(new, NoamSchedule):
        return (
            f"learning rate changed on resume: factor {saved.factor:.4g} -> {new.factor:.4g}, warm-up {saved.warmup} "
            f"-> {new.warmup} (peak {saved.peak:.3g} -> {new.peak:.3g})"
        )
    return f"learning rate changed on resume: {_describe(saved)} -> {_describe(new)}"


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


def trained_line(trainer: Trainer, first_step: int) -> str:
    """``trained 15 steps``: the steps of this run; after a resume (at ``first_step``) where it started and the
    total, ``trained 15 steps (resumed at step 15; 30 in all)``."""
    this_run = trainer.step - first_step
    return f"trained {this_run} steps" + (
        f" (resumed at step {first_step}; {trainer.step} in all)" if first_step else ""
    )


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
