"""The synthetic tasks' training recipe: a task wired to its model, Adam on the Noam schedule, label smoothing and a
:class:`~transformer.training.Trainer` (what ``typed-transformer train copy|dates`` trains; the file tasks' recipes
are :func:`~transformer.tasks.text_lm.make_lm_trainer` and
:func:`~transformer.tasks.translation_files.make_translation_trainer`)."""

from __future__ import annotations

from typing import Any

import torch

from ..config import TransformerConfig
from ..model import make_model
from ..training import LabelSmoothing, Trainer, TrainerConfig, noam_adam
from .base import Task

__all__ = ["make_trainer"]


def make_trainer(
    task: Task,
    *,
    config: TransformerConfig | None = None,
    steps: int | None = None,
    batch_size: int | None = None,
    warmup: int | None = None,
    factor: float | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    out_dir: str | None = None,
    progress: bool = False,
    eval_every: int | None = None,
    checkpoint_every: int = 0,
    accum_iter: int = 1,
    eval_batches: int = 5,
    **config_changes: Any,
) -> Trainer:
    """A Trainer for ``task`` with the tutorial's optimizer: Adam(lr=1 x Noam(d_model, factor, warmup),
    betas=(0.9, 0.98), eps=1e-9), label smoothing per the task's defaults; seeded by ``seed``. ``warmup`` and
    ``factor`` default to the task's (``task.default_training()``); ``transformer.training.noam_factor`` gives the
    factor of a peak learning rate."""
    defaults = task.default_training()
    torch.manual_seed(seed)
    config = config or task.default_config(**config_changes)
    model = make_model(config)
    optimizer, scheduler = noam_adam(
        model.parameters(),
        config.d_model,
        defaults.factor if factor is None else factor,
        defaults.warmup if warmup is None else warmup,
    )
    bs = batch_size or defaults.batch_size
    eval_set = task.eval_batches(n_batches=eval_batches, batch_size=bs)
    trainer_config = TrainerConfig(
        steps=steps if steps is not None else defaults.steps,
        accum_iter=accum_iter,
        clip_grad=defaults.clip_grad,
        eval_every=defaults.eval_every if eval_every is None else eval_every,
        checkpoint_every=checkpoint_every,
        progress=progress,
        out_dir=out_dir,
    )
    return Trainer(
        model,
        optimizer,
        lambda g: task.batches(g, bs),
        criterion=LabelSmoothing(config.tgt_vocab, task.pad, defaults.smoothing),
        scheduler=scheduler,
        eval_batches=lambda: eval_set,
        config=trainer_config,
        seed=seed,
        device=device,
        metadata=task.to_metadata(),
    )
