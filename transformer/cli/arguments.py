"""The command line's vocabulary: one set of argparse types (every number a flag takes is parsed here), the flags
every command and ``train`` task takes, with their defaults and help, and the record of the flags a command line gave
(the file tasks' own: :mod:`transformer.cli.file_flags`; ``generate``'s: :mod:`transformer.cli.generate_flags`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from ..attention import BACKENDS
from ..distributed import STRATEGIES
from ..tasks import get_task
from ..tasks.pretrained_lm import FINE_TUNE_PEAK_LR
from ..tasks.text_lm import LM_DEFAULTS
from ..tasks.translation_files import TRANSLATE_DEFAULTS
from ..training import DEFAULT_WARMUP_RATIO, SCHEDULES, NoamSchedule

__all__ = [
    "CommandParser",
    "number",
    "positive_int",
    "non_negative_int",
    "positive_float",
    "fraction",
    "add_runtime_flags",
    "task_defaults",
    "add_training_flags",
    "track_given",
    "GIVEN",
]


class CommandParser(argparse.ArgumentParser):
    """An argument parser that accepts no abbreviation (``--lr`` is never read as ``--lr-factor``). The
    sub-parsers that ``add_subparsers`` makes are of the parser's own class, so every command and task is one."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)


def number(kind: type, what: str, accepts: Callable[[Any], bool]) -> Callable[[str], Any]:
    """An argparse ``type``: ``kind(text)`` when ``accepts`` it; else the error ``expected {what}, got ...``."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not accepts(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


positive_int = number(int, "a positive integer", lambda value: value >= 1)
non_negative_int = number(int, "a non-negative integer", lambda value: value >= 0)
positive_float = number(float, "a positive number", lambda value: 0 < value < float("inf"))
fraction = number(float, "a number in [0, 1)", lambda value: 0.0 <= value < 1.0)


def add_runtime_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("runtime")
    g.add_argument(
        "--device", default="cpu", help="cpu, cuda, cuda:N or auto (cuda when available) (default: %(default)s)"
    )
    g.add_argument(
        "--attention-backend",
        choices=BACKENDS,
        default=None,
        help="attention backend, a run-time choice (default: the model config's, auto)",
    )
    g.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="CPU threads for torch; 1 is fastest for these small models and robust on a busy machine "
        "(default: %(default)s)",
    )


def task_defaults(task: str) -> dict:
    """The defaults ``train TASK`` shows and uses: the synthetic task's ``default_training()``, or the file
    task's ``LM_DEFAULTS``/``TRANSLATE_DEFAULTS``; and the d_model of its default model (for --lr's default)."""
    if task in ("lm", "translate"):
        d = LM_DEFAULTS if task == "lm" else TRANSLATE_DEFAULTS
        return dict(
            steps=d["steps"], eval_every=d["eval_every"], warmup=d["warmup"], factor=d["factor"], d_model=d["d_model"]
        )
    t = get_task(task)
    d = t.default_training()
    return dict(
        steps=d.steps,
        eval_every=d.eval_every,
        warmup=d.warmup,
        factor=d.factor,
        d_model=t.default_config().d_model,
        batch_size=d.batch_size,
    )


def add_training_flags(p: argparse.ArgumentParser, task: str) -> None:
    """The flags every task of ``train`` takes, with the task's defaults."""
    d = task_defaults(task)
    g = p.add_argument_group("training")
    g.add_argument(
        "--steps",
        type=positive_int,
        default=d["steps"],
        help="total optimizer steps; a resumed run continues up to it (default: %(default)s)",
    )
    if "batch_size" in d:
        g.add_argument(
            "--batch-size",
            type=positive_int,
            default=d["batch_size"],
            help="examples per batch; under torchrun the global batch (default: %(default)s)",
        )
    g.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        help="seeds the weights, dropout and the data (default: %(default)s)",
    )
    g.add_argument(
        "--eval-every",
        type=non_negative_int,
        default=d["eval_every"],
        help="evaluate and save a checkpoint every N steps; 0: only at the end (default: %(default)s)",
    )
    g.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (for a log file): the held-out loss is still printed at every evaluation, one line each",
    )
    g.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default=None,
        help="under torchrun: ddp (replicas; the default there) or fsdp (sharded); see docs/distributed.md",
    )
    peak = NoamSchedule(d["d_model"], d["factor"], d["warmup"]).peak
    lr = p.add_argument_group(
        "learning rate",
        "Adam on a schedule. noam (section 5.3; the default, but linear with --init): the rate rises linearly for "
        "--warmup steps to its peak, then decays as 1/sqrt(step); set the peak with --lr, or the schedule's factor "
        "with --lr-factor (peak = factor / sqrt(d_model * warmup)); not both. constant, linear, cosine (transformers' "
        "get_*_schedule_with_warmup): a linear warm-up to --lr, then constant, or down to 0 at the last step; their "
        f"warm-up defaults to --warmup-ratio {DEFAULT_WARMUP_RATIO} of --steps. A resumed run keeps its checkpoint's "
        "schedule unless one of these is given.",
    )
    lr.add_argument(
        "--lr-schedule",
        choices=SCHEDULES,
        default=None,
        help="the learning-rate schedule (default: noam; linear for train lm --init)",
    )
    warm = lr.add_mutually_exclusive_group()
    warm.add_argument(
        "--warmup",
        type=non_negative_int,
        default=None,
        help=f"warm-up steps (default: {d['warmup']}) for noam; for constant, linear and cosine --warmup-ratio "
        f"{DEFAULT_WARMUP_RATIO} of --steps",
    )
    warm.add_argument(
        "--warmup-ratio",
        type=fraction,
        default=None,
        metavar="FRACTION",
        help="warm up for this share of --steps, rounded up, as transformers' warmup_ratio (0.1 of 30 steps: 3) "
        f"(default: {DEFAULT_WARMUP_RATIO} for constant, linear and cosine)",
    )
    either = lr.add_mutually_exclusive_group()
    either.add_argument(
        "--lr",
        type=positive_float,
        default=None,
        metavar="PEAK",
        help=f"the peak learning rate, reached at step --warmup (default: the factor's peak, {peak:.3g} "
        f"with the default model and warm-up; {FINE_TUNE_PEAK_LR:g} with --init)",
    )
    either.add_argument(
        "--lr-factor",
        type=positive_float,
        default=None,
        help=f"the Noam schedule's factor (default: {d['factor']})",
    )
    out = p.add_argument_group("checkpoints")
    out.add_argument("--out", default=os.path.join("runs", task), help="checkpoint directory (default: %(default)s)")
    out.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    out.add_argument(
        "--overwrite",
        action="store_true",
        help="start a new run even though --out holds a checkpoint (replaced at the first save)",
    )
    track_given(p)


#: The attribute of a parsed ``train`` command line that holds the ``dest`` of every flag the command line gave.
GIVEN = "given_flags"

_TRACKED: dict[type, type] = {}


def _tracked(cls: type) -> type:
    if cls not in _TRACKED:

        def __call__(self, parser, namespace, values, option_string=None):
            cls.__call__(self, parser, namespace, values, option_string)
            setattr(namespace, GIVEN, {*getattr(namespace, GIVEN, ()), self.dest})

        _TRACKED[cls] = type(cls.__name__, (cls,), {"__call__": __call__})
    return _TRACKED[cls]


def track_given(p: argparse.ArgumentParser) -> None:
    """Make every option of ``p`` record its ``dest`` in the parsed namespace's :data:`GIVEN` set when the command
    line gives it (a resume tells a flag left out, which its checkpoint then fills in, from one given with the
    default's value; help, defaults and errors unchanged)."""
    for action in p._actions:
        if action.option_strings and action.dest != "help" and not isinstance(action, argparse._HelpAction):
            action.__class__ = _tracked(type(action))
