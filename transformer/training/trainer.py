"""The step-counted ``Trainer`` (section 5): the loop of :mod:`~transformer.training.loop` with periodic
evaluation, exact-resume checkpoints (:mod:`transformer.checkpoint`) and the stops of
:mod:`~transformer.training.stops`; the same loop runs under torchrun with DDP or FSDP2 when given a strategy
(:mod:`transformer.distributed`).

Never silently wrong: a loss that becomes NaN or infinite stops training (:class:`TrainingDiverged`, read where the
loop reads the loss anyway: no extra synchronisation), weights that are not finite are never saved, so the last
checkpoint on disk stays the last good one, and Ctrl-C (SIGINT) or SIGTERM (what Slurm and Kubernetes send before
they kill a job) stops ``Trainer.train`` at the next step boundary after saving a checkpoint
(:class:`TrainingInterrupted`; a second one stops at once).
"""

from __future__ import annotations

import contextlib
import math
import random
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from ..checkpoint import describe_nonfinite, kept_message, nonfinite_tensors
from ..contracts import checks
from ..distributed import SingleProcess, Strategy
from .batch import Batch
from .loop import batch_loss, make_progress_bar, optimizer_step, progress_postfix
from .losses import SimpleLossCompute, check_label_ids
from .schedule import NoamSchedule, WarmupDecaySchedule, schedule_from_state
from .stops import (
    DIVERGENCE_HINT,
    InterruptAtStepBoundary,
    TrainingDiverged,
    TrainingInterrupted,
    what_was_kept,
)

__all__ = ["Trainer", "TrainerConfig", "TrainingDiverged", "TrainingInterrupted"]


@dataclass
class TrainerConfig:
    """Settings of :class:`Trainer`.

    steps: optimizer steps to train for in total (a resumed run continues up to it).
    accum_iter: batches per optimizer step (gradient accumulation).
    clip_grad: max global gradient norm, or None.
    eval_every: evaluate every this many optimizer steps (0: only at the end).
    checkpoint_every: save every this many steps into ``out_dir`` (0: only at the end, if out_dir).
    amp: bf16 autocast on CUDA.
    progress: show a tqdm bar (loss, tokens/s, learning rate).
    checks: "always" (the default, like the rest of the package) checks every contract at every
        step; "first" checks the first step of a ``train`` call and runs the rest unchecked (for
        fixed-shape data: on a tiny CPU model the checks cost about a quarter of a step); "never".
    out_dir: where ``train`` saves checkpoints (None: nowhere).
    interrupt_at_step_boundary: Ctrl-C (SIGINT) or SIGTERM during ``train`` stops at the end of the current step,
        saves into ``out_dir`` (if set) and raises :class:`TrainingInterrupted`; a second one stops at once (default
        True; only in the main thread, and for each signal only when no other handler than Python's own, SIGTERM's
        default, is installed).
    """

    steps: int = 1000
    accum_iter: int = 1
    clip_grad: float | None = 1.0
    eval_every: int = 0
    checkpoint_every: int = 0
    amp: bool = True
    progress: bool = False
    checks: Literal["always", "first", "never"] = "always"
    out_dir: str | None = None
    interrupt_at_step_boundary: bool = True

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"TrainerConfig: steps must be >= 0, got {self.steps}")
        if self.accum_iter < 1:
            raise ValueError(f"TrainerConfig: accum_iter must be >= 1, got {self.accum_iter}")
        if self.checks not in ("always", "first", "never"):
            raise ValueError(f"TrainerConfig: checks must be 'always', 'first' or 'never', got {self.checks!r}")
        if self.clip_grad is not None and self.clip_grad <= 0:
            raise ValueError(f"TrainerConfig: clip_grad must be positive or None, got {self.clip_grad}")


@dataclass
class _History:
    train_loss: list[tuple[int, float]] = field(default_factory=list)
    eval_loss: list[tuple[int, float]] = field(default_factory=list)


class Trainer:
    """A small step-counted training loop on top of ``run_epoch``'s arithmetic.

    ``batches(generator)`` returns an endless iterator of :class:`Batch` drawing its randomness
    from the given ``torch.Generator`` only; the trainer owns that generator and saves its state
    in checkpoints, together with the torch and Python RNG states, the optimizer and scheduler,
    so that ``train`` after ``Trainer.resume`` continues exactly where the saved run stopped.

    ``eval_batches()`` returns a fresh finite iterable of evaluation batches (or None).

    ``strategy`` (see :mod:`transformer.distributed`; or :meth:`distribute` later) runs the same loop on several
    processes: each rank reads its share of every batch (``batches`` may take a ``shard`` keyword, named or through
    ``**kwargs``: it is then given ``Shard(rank, world_size)`` and yields this rank's part only), gradients and
    losses are those of the global batch, evaluation is split between the ranks and reduced, checkpoints are written
    once (DDP) or sharded (FSDP), the progress bar shows on rank 0 only.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        batches: Callable[[torch.Generator], Iterator[Batch]],
        *,
        criterion: nn.Module,
        scheduler: Any = None,
        eval_batches: Callable[[], Iterable[Batch]] | None = None,
        config: TrainerConfig | None = None,
        seed: int = 0,
        device: torch.device | str | None = None,
        metadata: dict[str, Any] | None = None,
        strategy: Strategy | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.criterion = criterion
        self.config = config or TrainerConfig()
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.model.to(self.device)
        self.loss_compute = SimpleLossCompute(model.generator, criterion)
        self.make_batches = batches
        self.eval_batches = eval_batches
        self.metadata = dict(metadata or {})
        self.data_generator = torch.Generator().manual_seed(seed)
        self._batches: Iterator[Batch] | None = None
        self.step = 0
        self.tokens = 0  # every token trained on, across resumes (part of the checkpoint)
        self.tokens_this_run = 0  # those this object trained on (never restored): what tokens/s counts
        self.history = _History()
        self.last_train_loss = float("nan")
        self.saved_step: int | None = None  # the step of the last checkpoint this trainer wrote or resumed from
        self._interrupt: InterruptAtStepBoundary | None = None
        self._stop_requested = False
        self.strategy: Strategy = SingleProcess(device=self.device)
        self.train_model: nn.Module = model  # what training steps call: the model, or its DDP wrapper
        if strategy is not None:
            self.distribute(strategy)

    def distribute(self, strategy: Strategy) -> None:
        """Train under ``strategy`` from now on: wraps (DDP) or shards (FSDP) the model and points the optimizer at
        the sharded parameters. Call it before training (the optimizer must not have stepped)."""
        if self.step or self._batches is not None:
            raise ValueError("Trainer.distribute: call it before training starts")
        if strategy.device != self.device:
            raise ValueError(
                f"Trainer.distribute: the trainer is on {self.device} but the strategy on {strategy.device}"
            )
        self.strategy = strategy
        self.train_model = strategy.prepare(self.model, self.optimizer)

    # ------------------------------------------------------------------ state for checkpoints
    def state(self) -> dict[str, Any]:
        """Everything besides the weights that an exact resume needs (tensors and JSON values).

        Under torchrun every rank must call it (the ranks' RNG states are gathered under ``"ranks"``)."""
        state = {
            "step": self.step,
            "tokens": self.tokens,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": [s for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
            "python_rng": _python_rng_to_json(random.getstate()),
            "data_rng": self.data_generator.get_state(),
            "history": {"train_loss": self.history.train_loss, "eval_loss": self.history.eval_loss},
            "last_train_loss": self.last_train_loss,
        }
        state.update(self.strategy.rank_states(state))
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.tokens = int(state["tokens"])
        if "optimizer" in state:  # a sharded (FSDP) checkpoint's optimizer state was loaded with the weights
            self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            saved = list(state["scheduler"].get("lr_lambdas") or [])
            self.scheduler.load_state_dict(state["scheduler"])
            ours = (NoamSchedule, WarmupDecaySchedule)
            if (
                saved
                and all(isinstance(s, dict) for s in saved)
                and all(isinstance(f, ours) for f in self.scheduler.lr_lambdas)
            ):
                # LambdaLR only updates the __dict__ of the schedule it was built with: rebuild the saved one's class
                self.scheduler.lr_lambdas = [schedule_from_state(s) for s in saved]
        rng = self.strategy.own_rank_state(state)  # this rank's RNG states
        torch.set_rng_state(rng["torch_rng"])
        if torch.cuda.is_available() and rng.get("cuda_rng"):
            torch.cuda.set_rng_state_all(rng["cuda_rng"])
        random.setstate(_python_rng_from_json(rng["python_rng"]))
        self.data_generator.set_state(rng["data_rng"])
        history = state.get("history") or {}
        self.history = _History(
            [tuple(x) for x in history.get("train_loss", [])], [tuple(x) for x in history.get("eval_loss", [])]
        )
        self.last_train_loss = float(state.get("last_train_loss", float("nan")))
        self._batches = None

    def save(self, path: str) -> str:
        """Write an atomic checkpoint (see :func:`transformer.checkpoint.save_checkpoint`; under FSDP a sharded one,
        see :mod:`transformer.distributed`). Under torchrun every rank calls it.

        Weights that are NaN or infinite are never saved: :class:`TrainingDiverged` names them and the checkpoint
        already at ``path`` stays (under torchrun every rank checks its part and all of them hear the verdict)."""
        bad = nonfinite_tensors(self.model.named_parameters())
        if self.strategy.all_reduce_sum([len(bad)])[0]:
            where = describe_nonfinite(bad) if bad else "another rank's shard"
            raise TrainingDiverged(
                f"training diverged: after step {self.step} the weights hold NaN or inf in {where}; "
                f"they were not saved and {kept_message(path)}; " + DIVERGENCE_HINT,
                self.step,
            )
        saved = self.strategy.save(path, self.model, self.optimizer, self.state(), self.metadata)
        self.saved_step = self.step
        return saved

    def resume(self, path: str) -> None:
        """Load weights and training state from ``path`` (the model's config must match), found by the rule of
        :func:`transformer.checkpoint.find_checkpoint` (``path``, or the copy an interrupted save left aside)."""
        trainer_state = self.strategy.load(path, self.model, self.optimizer, self.device)
        if trainer_state is None:
            raise ValueError(f"checkpoint {path} holds no training state to resume from")
        self.load_state(trainer_state)
        self.saved_step = self.step

    # ------------------------------------------------------------------ the loop
    def evaluate(self) -> float:
        """Loss per token on ``eval_batches()`` (model in eval mode, no gradients); under torchrun the batches are
        split between the ranks and the sums reduced, so every rank gets the loss of the whole set."""
        if self.eval_batches is None:
            raise ValueError("Trainer.evaluate: no eval_batches were given")
        was_training = self.model.training
        self.model.eval()
        total_loss, total_tokens = 0.0, 0
        try:
            with torch.no_grad():
                for batch, counted in self.strategy.eval_share(self.eval_batches()):
                    batch = batch.to(self.device)
                    loss, _ = batch_loss(batch, self.model, self.loss_compute, self.device, self.config.amp)
                    if counted:
                        total_loss += float(loss)
                        total_tokens += batch.ntokens
        finally:
            self.model.train(was_training)
        total_loss, total_tokens = self.strategy.all_reduce_sum([total_loss, total_tokens])
        return total_loss / max(total_tokens, 1)

    def train_step(self) -> float:
        """One optimizer step over ``accum_iter`` batches; returns the loss per token.

        A loss that is NaN or infinite raises :class:`TrainingDiverged` before the optimizer steps (the weights stay
        those of the previous step), or ValueError naming a label outside the criterion's vocabulary when one is the
        cause (on a GPU the loss does not read the labels back: see :mod:`transformer.training`)."""
        if self._batches is None:
            self._batches = self.strategy.batches(self.make_batches, self.data_generator)
        self.model.train()
        group = []
        for _ in range(self.config.accum_iter):
            group.append(next(self._batches))
        # under torchrun each rank's loss per token is weighted by its share of all the ranks' tokens (1.0 alone)
        weights = self.strategy.token_weights([batch.ntokens for batch in group])
        loss_sum, ntokens = 0.0, 0
        for i, (batch, weight) in enumerate(zip(group, weights, strict=True)):
            batch = batch.to(self.device)
            with self.strategy.no_sync(self.train_model, last=i == len(group) - 1):  # gradients synced once a step
                loss, loss_node = batch_loss(batch, self.train_model, self.loss_compute, self.device, self.config.amp)
                (loss_node if weight == 1.0 else loss_node * weight).backward()
            loss_sum += float(loss)
            ntokens += batch.ntokens
        # the global batch's loss and tokens, and whether a rank was interrupted (Ctrl-C): every rank hears both
        requested = self._interrupt is not None and self._interrupt.requested
        loss_sum, ntokens, stops = self.strategy.all_reduce_sum([loss_sum, ntokens, float(requested)])
        if not math.isfinite(loss_sum):
            self._diverged(group, loss_sum / max(ntokens, 1))
        optimizer_step(self.model, self.optimizer, self.scheduler, self.config.clip_grad)
        self._stop_requested = stops > 0
        ntokens = int(ntokens)
        self.step += 1
        self.tokens += ntokens
        self.tokens_this_run += ntokens
        self.last_train_loss = loss_sum / max(ntokens, 1)
        return self.last_train_loss

    def _diverged(self, group: list, loss: float) -> None:
        """Raise for a step whose loss is not finite: ValueError naming a label outside the criterion's vocabulary
        when a batch holds one (read back here, on the failure path only), else :class:`TrainingDiverged`."""
        vocab = getattr(self.criterion, "size", None)
        if isinstance(vocab, int):
            for batch in group:
                if batch.labels is not None:
                    check_label_ids(
                        batch.labels.detach().cpu(), vocab, f"Trainer (step {self.step + 1})", "a batch's labels"
                    )
        last = (
            ""
            if not math.isfinite(self.last_train_loss)
            else f" (it was {self.last_train_loss:.4f} at step {self.step})"
        )
        raise TrainingDiverged(
            f"training diverged at step {self.step + 1}: the loss is {loss}{last}; stopped before "
            f"the optimizer step, and {what_was_kept(self.config.out_dir)}; " + DIVERGENCE_HINT,
            self.step + 1,
            loss,
        )

    def train(self, steps: int | None = None, *, on_eval: Callable[[int, float], None] | None = None) -> float:
        """Train until ``steps`` optimizer steps in total (default ``config.steps``); returns the last train loss.

        The data iterator is rebuilt from the saved generator state after a resume, so an
        interrupted-and-resumed run sees the same batches as an uninterrupted one, provided
        ``batches`` consumes the generator batch by batch (draws nothing ahead).

        A NaN or infinite training or held-out loss raises :class:`TrainingDiverged` (nothing non-finite is saved).
        Ctrl-C (SIGINT) or SIGTERM stops at the end of the current step, saves into ``out_dir`` and raises
        :class:`TrainingInterrupted` (``config.interrupt_at_step_boundary``); under torchrun every rank stops at the
        same step (each rank's ``signum`` is the signal it received, SIGINT where it received none).
        """
        target = self.config.steps if steps is None else steps
        cfg = self.config
        interrupt = InterruptAtStepBoundary(self.strategy.is_main) if cfg.interrupt_at_step_boundary else None
        with interrupt or contextlib.nullcontext():
            self._interrupt, self._stop_requested = interrupt, False
            try:
                return self._train(target, on_eval)
            finally:
                self._interrupt = None

    def _train(self, target: int, on_eval: Callable[[int, float], None] | None) -> float:
        cfg = self.config
        bar = make_progress_bar(target, "train", cfg.progress and self.strategy.is_main, initial=self.step)
        start, start_tokens = time.perf_counter(), self.tokens
        try:
            first = True
            while self.step < target:
                check = cfg.checks == "always" or (cfg.checks == "first" and first)
                with contextlib.nullcontext() if check else checks(False):
                    loss = self.train_step()
                first = False
                self.history.train_loss.append((self.step, loss))
                elapsed = time.perf_counter() - start
                bar.set_postfix(
                    progress_postfix(loss, self.tokens - start_tokens, elapsed, self.optimizer), refresh=False
                )
                bar.update(1)
                if cfg.eval_every and self.eval_batches is not None and self.step % cfg.eval_every == 0:
                    eval_loss = self.evaluate()
                    if not math.isfinite(eval_loss):
                        raise TrainingDiverged(
                            f"training diverged at step {self.step}: the held-out loss is "
                            f"{eval_loss}; {what_was_kept(cfg.out_dir)}; " + DIVERGENCE_HINT,
                            self.step,
                            eval_loss,
                        )
                    self.history.eval_loss.append((self.step, eval_loss))
                    if cfg.progress and self.strategy.is_main:
                        bar.write(f"step {self.step}: train loss {loss:.4f}, eval loss {eval_loss:.4f}")
                    if on_eval is not None:
                        on_eval(self.step, eval_loss)
                if cfg.out_dir and cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                    self.save(cfg.out_dir)
                if self._stop_requested:  # Ctrl-C or SIGTERM on some rank: every rank heard it with this step's loss
                    if cfg.out_dir and self.saved_step != self.step:
                        self.save(cfg.out_dir)
                    heard = self._interrupt.signum if self._interrupt is not None else None
                    raise TrainingInterrupted(self.step, cfg.out_dir, heard or signal.SIGINT)
        finally:
            bar.close()
        if cfg.out_dir:
            self.save(cfg.out_dir)
        return self.last_train_loss


def _python_rng_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _python_rng_from_json(state: list) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
