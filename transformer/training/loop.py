"""One pass over the data, as the Annotated Transformer's ``run_epoch`` (section 5), and the pieces of a training
step the :class:`~transformer.training.trainer.Trainer` shares with it: the forward under bf16 autocast on CUDA, the
optimizer step with gradient clipping, the progress bar's figures.

``run_epoch`` adds gradient clipping, bf16 autocast on CUDA and a tqdm progress bar to the tutorial's loop. It takes
any batch with ``inputs()``, ``labels``, ``ntokens``, ``len()`` and ``to()``
(:class:`~transformer.training.batch.Batch`): the model runs as ``model(*batch.inputs())``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from ..contracts import Tensor
from .batch import Batch
from .stops import DIVERGENCE_HINT, TrainingDiverged

__all__ = [
    "TrainState",
    "run_epoch",
    "autocast_context",
    "make_progress_bar",
    "batch_loss",
    "optimizer_step",
    "progress_postfix",
]


@dataclass
class TrainState:
    """Track the number of steps, examples and tokens processed (the tutorial's TrainState)."""

    step: int = 0  # steps in the current epoch
    accum_step: int = 0  # number of gradient accumulation (optimizer) steps
    samples: int = 0  # examples used
    tokens: int = 0  # tokens processed


def autocast_context(device: torch.device | str, enabled: bool = True) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA (when ``enabled``); a no-op context on every other device."""
    device = torch.device(device)
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def make_progress_bar(total: int | None, desc: str, enabled: bool, initial: int = 0):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, initial=initial, dynamic_ncols=True, leave=True)


def batch_loss(batch: Batch, model: nn.Module, loss_compute: Callable, device: torch.device | str, amp: bool):
    """Run the model on one batch (bf16 autocast on CUDA) and return ``loss_compute``'s (loss sum, loss node)."""
    with autocast_context(device, amp):
        out = model(*batch.inputs())  # __call__: module hooks run
        return loss_compute(out, batch.labels, batch.ntokens)


def optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, clip_grad: float | None) -> None:
    """Clip the global gradient norm, step the optimizer, clear the gradients, step the schedule."""
    if clip_grad is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if scheduler is not None:
        scheduler.step()


def progress_postfix(
    loss_per_token: float, tokens: int, elapsed: float, optimizer: torch.optim.Optimizer | None
) -> dict:
    """The progress bar's loss, tokens/s and (when training) learning rate."""
    postfix = {"loss": f"{loss_per_token:.3f}", "tok/s": f"{tokens / max(elapsed, 1e-9):.0f}"}
    if optimizer is not None:
        postfix["lr"] = f"{optimizer.param_groups[0]['lr']:.2e}"
    return postfix


def run_epoch(
    data_iter: Iterable[Batch],
    model: nn.Module,
    loss_compute: Callable[[Tensor, Tensor, Any], tuple[Tensor, Tensor]],
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    mode: Literal["train", "train+log", "eval"] = "train",
    accum_iter: int = 1,
    train_state: TrainState | None = None,
    *,
    clip_grad: float | None = None,
    device: torch.device | str | None = None,
    amp: bool = True,
    progress: bool = False,
    total: int | None = None,
) -> tuple[float, TrainState]:
    """Train (or evaluate) over one pass of ``data_iter``; returns (loss per token, train_state).

    As the tutorial's: the model runs on each ``Batch``, ``loss_compute(out, tgt_y, ntokens)``
    gives the loss, and in a training mode the gradients of ``accum_iter`` batches are accumulated
    before each optimizer and scheduler step. Additions: ``clip_grad`` (max global grad norm),
    bf16 autocast when ``device`` is CUDA (``amp``), and a tqdm bar with loss, tokens/s and lr.
    Evaluation runs under ``torch.no_grad``. In a training mode a batch whose loss is NaN or infinite raises
    :class:`TrainingDiverged` (the loss is read on the host for the progress bar anyway).
    """
    if accum_iter < 1:
        raise ValueError(f"run_epoch: accum_iter must be >= 1, got {accum_iter}")
    training = mode.startswith("train")
    if training and optimizer is None:
        raise ValueError("run_epoch: a training mode needs an optimizer")
    train_state = train_state if train_state is not None else TrainState()
    if device is None:
        device = next(model.parameters()).device
    start = time.perf_counter()
    total_tokens = 0
    total_loss = 0.0
    grad_context = contextlib.nullcontext() if training else torch.no_grad()
    bar = make_progress_bar(total, "train" if training else "eval", progress)
    with grad_context:
        for i, batch in enumerate(data_iter):
            batch = batch.to(device)
            loss, loss_node = batch_loss(batch, model, loss_compute, device, amp)
            if training:
                loss_node.backward()
                train_state.step += 1
                train_state.samples += len(batch)
                train_state.tokens += batch.ntokens
                if (i + 1) % accum_iter == 0:
                    optimizer_step(model, optimizer, scheduler, clip_grad)
                    train_state.accum_step += 1
            loss_value = float(loss)
            if training and not math.isfinite(loss_value):
                bar.close()
                raise TrainingDiverged(
                    f"run_epoch: the loss of batch {i} is {loss_value}: training diverged; " + DIVERGENCE_HINT,
                    train_state.accum_step,
                    loss_value,
                )
            total_loss += loss_value
            total_tokens += batch.ntokens
            elapsed = time.perf_counter() - start
            bar.set_postfix(
                progress_postfix(loss_value / max(batch.ntokens, 1), total_tokens, elapsed, optimizer), refresh=False
            )
            bar.update(1)
    if training:
        # gradients of a trailing partial accumulation are discarded, as in the tutorial
        optimizer.zero_grad(set_to_none=True)
    bar.close()
    return total_loss / max(total_tokens, 1), train_state
