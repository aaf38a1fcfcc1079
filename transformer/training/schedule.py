"""The learning-rate schedule of section 5.3 (the Noam schedule): ``rate``, its picklable form ``NoamSchedule``, and
``noam_factor``, the factor whose schedule peaks at a given learning rate (``--lr``)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

__all__ = ["rate", "NoamSchedule", "noam_factor", "noam_adam"]


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


def noam_adam(
    parameters: Iterable[torch.nn.Parameter], model_size: int, factor: float, warmup: int
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """The paper's optimizer (section 5.3): Adam(betas=(0.9, 0.98), eps=1e-9) with base learning rate 1, scaled at
    each step by ``NoamSchedule(model_size, factor, warmup)``; returns ``(optimizer, scheduler)``."""
    optimizer = torch.optim.Adam(parameters, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=NoamSchedule(model_size, factor, warmup))
