"""Learning-rate schedules: the one of section 5.3 (the Noam schedule: ``rate``, its picklable form ``NoamSchedule``,
and ``noam_factor``, the factor whose schedule peaks at a given learning rate, ``--lr``), and the warm-up and decay
of fine-tuning (``WarmupDecaySchedule``: a linear warm-up to a peak, then constant, linear or cosine decay, as
transformers' ``get_constant_schedule_with_warmup``, ``get_linear_schedule_with_warmup`` and
``get_cosine_schedule_with_warmup`` compute them; Loshchilov and Hutter 2017, SGDR, for the cosine).

Every schedule is a multiplier for ``LambdaLR`` over Adam's base learning rate 1, as the tasks and the CLI use it,
picklable and JSON-serialisable (its ``__dict__`` is what ``LambdaLR.state_dict()`` stores);
:func:`schedule_from_state` rebuilds the right class from that dictionary, and :func:`use_schedule` puts a schedule
on a scheduler from its current step on."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

__all__ = [
    "rate",
    "NoamSchedule",
    "noam_factor",
    "noam_adam",
    "fused_supported",
    "SCHEDULES",
    "DEFAULT_WARMUP_RATIO",
    "warmup_steps",
    "WarmupDecaySchedule",
    "schedule_from_state",
    "use_schedule",
]

#: The schedules ``--lr-schedule`` names: the paper's, and the warm-up and decay of fine-tuning.
SCHEDULES = ("noam", "constant", "linear", "cosine")

#: The share of the steps spent warming up when a decaying schedule is given no warm-up (``--warmup-ratio``'s default).
DEFAULT_WARMUP_RATIO = 0.1


def rate(step: int, model_size: int, factor: float, warmup: int) -> float:
    """The Noam learning-rate schedule (section 5.3), as a multiplier for ``LambdaLR``.

    ``lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``; step 0 counts as 1
    (LambdaLR calls it with 0 first, where the formula would divide by zero).
    """
    if warmup <= 0:
        raise ValueError(f"rate: warmup must be positive, got warmup={warmup}")
    if step == 0:
        step = 1
    return factor * (model_size ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5)))


def noam_factor(peak: float, model_size: int, warmup: int) -> float:
    """The ``factor`` whose Noam schedule peaks at ``peak``: ``peak * sqrt(model_size * warmup)``.

    The schedule rises linearly for ``warmup`` steps and decays as ``step^-0.5`` after; its largest value, at
    ``step == warmup``, is ``factor * (model_size * warmup)^-0.5``. With Adam's base learning rate 1 (as the tasks
    and the CLI use it), that value is the peak learning rate: ``--lr`` sets it, ``--lr-factor`` sets ``factor``."""
    if not peak > 0 or peak == float("inf"):
        raise ValueError(f"noam_factor: the peak learning rate must be a positive number, got {peak}")
    if warmup <= 0:
        raise ValueError(f"noam_factor: warmup must be positive, got warmup={warmup}")
    return peak * math.sqrt(model_size * warmup)


class NoamSchedule:
    """``rate`` as a picklable, JSON-serialisable callable: ``LambdaLR(opt, NoamSchedule(512, 1.0, 400))``.

    Its ``__dict__`` is what ``LambdaLR.state_dict()`` stores, so checkpoints stay plain JSON. ``peak`` is its
    largest value (at step ``warmup``).
    """

    def __init__(self, model_size: int, factor: float = 1.0, warmup: int = 400) -> None:
        self.model_size, self.factor, self.warmup = model_size, factor, warmup

    def __call__(self, step: int) -> float:
        return rate(step, self.model_size, self.factor, self.warmup)

    @property
    def peak(self) -> float:
        """The schedule's largest multiplier, reached at step ``warmup``: ``factor * (model_size * warmup)^-0.5``."""
        return rate(self.warmup, self.model_size, self.factor, self.warmup)


FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def fused_supported(parameters: Iterable[torch.Tensor]) -> bool:
    """Whether torch's fused Adam (one kernel over every parameter: ``Adam(..., fused=True)``) runs on all of
    ``parameters``: plain tensors (no subclass such as a DTensor) of a floating dtype on the CPU or CUDA."""
    return all(
        type(p) in (torch.Tensor, torch.nn.Parameter) and p.device.type in ("cpu", "cuda") and p.dtype in FUSED_DTYPES
        for p in parameters
    )


def noam_adam(
    parameters: Iterable[torch.nn.Parameter], model_size: int, factor: float, warmup: int, *, fused: bool | None = None
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """The paper's optimizer (section 5.3): Adam(betas=(0.9, 0.98), eps=1e-9) with base learning rate 1, scaled at
    each step by ``NoamSchedule(model_size, factor, warmup)``; returns ``(optimizer, scheduler)``.

    ``fused``: torch's fused Adam step (one kernel over all parameters instead of a loop of small operations per
    parameter; the same update up to float rounding). None (the default): fused where :func:`fused_supported`
    says it runs, else torch's default; False: torch's default (the package's before issue 45)."""
    parameters = list(parameters)
    if fused is None:
        fused = bool(parameters) and fused_supported(parameters)
    optimizer = torch.optim.Adam(parameters, lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=fused or None)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=NoamSchedule(model_size, factor, warmup))


def warmup_steps(ratio: float, steps: int) -> int:
    """The warm-up of ``ratio`` of ``steps`` steps, rounded up (transformers' ``TrainingArguments.get_warmup_steps``):
    0.1 of 30 steps is 3, 0.1 of 5 steps is 1."""
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"warmup_steps: ratio must lie in [0, 1), got {ratio}")
    if steps < 0:
        raise ValueError(f"warmup_steps: steps must be >= 0, got {steps}")
    return math.ceil(steps * ratio)


class WarmupDecaySchedule:
    """A linear warm-up from 0 to ``peak`` over ``warmup`` steps, then ``decay``: ``"constant"`` (``peak`` on),
    ``"linear"`` (to 0 at step ``total``) or ``"cosine"`` (half a cosine from ``peak`` to 0 at step ``total``), as a
    multiplier for ``LambdaLR`` over a base learning rate of 1, so its value at ``step`` is the learning rate there.

    The formulas are transformers' (``transformers.optimization``, in their order of operations: the same floats),
    times ``peak``: ``step / max(1, warmup)`` while
    ``step < warmup``; then 1, ``max(0, (total - step) / max(1, total - warmup))``, or
    ``max(0, (1 + cos(pi * (step - warmup) / max(1, total - warmup))) / 2)``. Step 0 (the first optimizer step, as
    ``LambdaLR`` counts) is 0 with a warm-up; ``peak`` is reached at step ``warmup``; the last step of a run of
    ``total`` steps uses ``step = total - 1``.
    """

    def __init__(self, decay: str, peak: float, warmup: int, total: int) -> None:
        if decay not in SCHEDULES[1:]:
            raise ValueError(f"WarmupDecaySchedule: decay must be one of {SCHEDULES[1:]}, got {decay!r}")
        if not 0 < peak < float("inf"):
            raise ValueError(f"WarmupDecaySchedule: the peak learning rate must be a positive number, got {peak}")
        if warmup < 0 or total < 0:
            raise ValueError(f"WarmupDecaySchedule: warmup and total must be >= 0, got warmup={warmup}, total={total}")
        self.schedule, self.peak, self.warmup, self.total = decay, float(peak), int(warmup), int(total)

    def __call__(self, step: int) -> float:
        return self.peak * self.multiplier(step)

    def multiplier(self, step: int) -> float:
        """The schedule over its peak (1 at the end of the warm-up), evaluated in transformers' order of operations
        (``transformers.optimization``'s ``_get_*_schedule_with_warmup_lr_lambda``), so that ``peak`` times it is the
        learning rate their ``LambdaLR`` gives over a base learning rate ``peak``, bit for bit."""
        if step < self.warmup:
            return float(step) / float(max(1, self.warmup))
        if self.schedule == "constant":
            return 1.0
        if self.schedule == "linear":
            return max(0.0, float(self.total - step) / float(max(1, self.total - self.warmup)))
        progress = float(step - self.warmup) / float(max(1, self.total - self.warmup))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))  # num_cycles = 0.5

    def describe(self) -> str:
        """One line: ``linear schedule: 3 warm-up steps to a peak of 5e-05 (step 3), then linear decay to 0 at step
        30``."""
        then = (
            "then constant" if self.schedule == "constant" else f"then {self.schedule} decay to 0 at step {self.total}"
        )
        return f"{self.schedule} schedule: {self.warmup} warm-up steps to a peak of {self.peak:.3g}, {then}"


def schedule_from_state(state: dict) -> NoamSchedule | WarmupDecaySchedule:
    """The schedule whose ``__dict__`` (as ``LambdaLR.state_dict()`` saved it) is ``state``: a
    :class:`WarmupDecaySchedule` when it names its ``schedule``, else a :class:`NoamSchedule` (every checkpoint
    written before the decaying schedules)."""
    if "schedule" in state:
        return WarmupDecaySchedule(state["schedule"], state["peak"], state["warmup"], state["total"])
    return NoamSchedule(state["model_size"], state["factor"], state["warmup"])


def use_schedule(scheduler: torch.optim.lr_scheduler.LambdaLR, schedule: NoamSchedule | WarmupDecaySchedule) -> None:
    """Put ``schedule`` on every parameter group of ``scheduler`` from its current step on: the optimizer's learning
    rate becomes ``base * schedule(scheduler.last_epoch)`` at once (the next optimizer step uses it)."""
    scheduler.lr_lambdas = [schedule for _ in scheduler.lr_lambdas]
    for group, base in zip(scheduler.optimizer.param_groups, scheduler.base_lrs, strict=True):
        group["lr"] = base * schedule(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]
