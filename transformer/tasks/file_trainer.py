"""The Trainer both file tasks build (``train lm``, ``train translate``): the model carrying its tokenizer, Adam on
the Noam schedule, token-budget batches that resume exactly, the task and its data settings in every checkpoint's
metadata, and contracts checked on the first step of each ``train`` call."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..data.token_batches import token_budget_batches
from ..training import Trainer, TrainerConfig, noam_adam
from .tokenizer_assets import attach_tokenizer, tokenizer_metadata

__all__ = ["file_task_trainer"]


def file_task_trainer(
    model: nn.Module,
    data: Any,
    criterion: nn.Module,
    *,
    task: str,
    what: str,
    data_settings: dict[str, Any],
    max_tokens: int,
    steps: int,
    warmup: int,
    factor: float,
    seed: int,
    device: str | torch.device,
    progress: bool,
    eval_every: int,
    out_dir: str | None,
    clip_grad: float | None = 1.0,
    metadata: dict[str, Any] | None = None,
) -> Trainer:
    """A Trainer for ``model`` on ``data`` (its ``tokenizer``, and ``train``/``valid`` datasets of ``what``: "window",
    "pair"): Adam on ``NoamSchedule(model.config.d_model, factor, warmup)``, ``max_tokens``-token batches seeded by
    ``seed``, evaluation and a checkpoint every ``eval_every`` steps; the metadata records ``task``, the tokenizer and
    ``data_settings`` with the batch budget and seed (what a resume must keep), then ``metadata``."""
    attach_tokenizer(model, data.tokenizer)
    optimizer, scheduler = noam_adam(model.parameters(), model.config.d_model, factor, warmup)
    batches, eval_batches = token_budget_batches(data.train, data.valid, max_tokens, seed=seed, what=what)
    meta = {
        "task": task,
        "tokenizer": tokenizer_metadata(data.tokenizer),
        "data": {**data_settings, "max_tokens": max_tokens, "seed": seed},
    }
    meta.update(metadata or {})
    return Trainer(
        model,
        optimizer,
        batches,
        criterion=criterion,
        scheduler=scheduler,
        eval_batches=eval_batches,
        seed=seed,
        device=device,
        metadata=meta,
        config=TrainerConfig(
            steps=steps,
            clip_grad=clip_grad,
            eval_every=eval_every,
            checkpoint_every=eval_every,
            progress=progress,
            out_dir=out_dir,
            checks="first",
        ),
    )
