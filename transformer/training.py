"""Training (section 5): batches and masks, label smoothing, the Noam schedule, run_epoch and a Trainer.

The names and signatures follow the Annotated Transformer (``Batch``, ``LabelSmoothing``,
``rate``, ``SimpleLossCompute``, ``run_epoch``, ``TrainState``); the differences are fixes:

* ``Batch`` masks padded target *query rows* too (the tutorial lets padded positions attend);
* ``LabelSmoothing`` never produces inf or NaN (the tutorial's gives NaN at ``smoothing=0``
  when a log-probability is ``-inf``, and its loss compute divides by zero on all-padding batches);
* ``run_epoch`` adds gradient clipping, bf16 autocast on CUDA and a tqdm progress bar.

``Trainer`` puts a step-counted loop, periodic evaluation and exact-resume checkpoints
(:mod:`transformer.checkpoint`) on top.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from .contracts import Float, Int, Tensor, checked, checks
from .masks import padding_mask, target_mask

__all__ = [
    "Batch",
    "LabelSmoothing",
    "label_smoothing_entropy",
    "rate",
    "NoamSchedule",
    "SimpleLossCompute",
    "TrainState",
    "run_epoch",
    "Trainer",
    "TrainerConfig",
    "autocast_context",
]


class Batch:
    """Object for holding a batch of data with masks during training (as in the Annotated Transformer).

    ``src`` (batch, src_len) and optionally ``tgt`` (batch, tgt_len + 1) token ids. With a target,
    the decoder input is ``tgt[:, :-1]`` and the labels are ``tgt_y = tgt[:, 1:]`` (teacher forcing);
    ``ntokens`` counts the non-padding labels.

    Masks are boolean (True = may attend): ``src_mask`` (batch, 1, src_len) hides padded source keys;
    ``tgt_mask`` (batch, tgt_len, tgt_len) is causal, hides padded keys *and* padded query rows
    (:func:`transformer.masks.target_mask`), fixing the tutorial's padded positions that still attend.

    ``pad`` defaults to 2 as in the tutorial's ``Batch``; the copy task passes 0.
    """

    def __init__(self, src: Tensor, tgt: Tensor | None = None, pad: int = 2) -> None:
        if src.dim() != 2:
            raise ValueError(f"Batch: src must be (batch, src_len), got shape {tuple(src.shape)}")
        self.pad = pad
        self.src = src
        self.src_mask = padding_mask(src, pad)
        self.tgt: Tensor | None = None
        self.tgt_y: Tensor | None = None
        self.tgt_mask: Tensor | None = None
        self.ntokens = 0
        if tgt is not None:
            if tgt.dim() != 2 or tgt.size(0) != src.size(0):
                raise ValueError(f"Batch: tgt must be (batch={src.size(0)}, tgt_len + 1), got shape {tuple(tgt.shape)}")
            if tgt.size(1) < 2:
                raise ValueError(f"Batch: tgt needs at least 2 tokens (a start symbol and one label), got {tgt.size(1)}")
            self.tgt = tgt[:, :-1]
            self.tgt_y = tgt[:, 1:]
            self.tgt_mask = self.make_std_mask(self.tgt, pad)
            self.ntokens = int((self.tgt_y != pad).sum())

    @staticmethod
    def make_std_mask(tgt: Tensor, pad: int) -> Tensor:
        """Create a mask to hide padding and future words (padded query rows included)."""
        return target_mask(tgt, pad)

    def to(self, device: torch.device | str) -> Batch:
        """Move every tensor of the batch to ``device`` (in place) and return the batch."""
        for name in ("src", "src_mask", "tgt", "tgt_y", "tgt_mask"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.to(device))
        return self


def label_smoothing_entropy(size: int, smoothing: float, style: str = "torch") -> float:
    """Entropy H(q) of one non-padding row of the smoothed target distribution q (0 log 0 = 0).

    ``LabelSmoothing`` returns ``sum over non-padding rows of KL(q || p)`` and
    ``KL(q || p) = CE(q, p) - H(q)``, so with ``style="torch"``::

        LabelSmoothing(size, pad, s)(log_probs, target)
            == F.cross_entropy(logits, target, label_smoothing=s, ignore_index=pad, reduction="sum")
               - ntokens * label_smoothing_entropy(size, s)

    where ``ntokens`` is the number of targets that are not ``pad``.
    """
    if style == "torch":
        others, each, confidence = size - 1, smoothing / size, 1.0 - smoothing + smoothing / size
    else:
        others, each, confidence = size - 2, smoothing / (size - 2), 1.0 - smoothing

    def plogp(p: float) -> float:
        return p * math.log(p) if p > 0 else 0.0

    return -(plogp(confidence) + others * plogp(each))


class LabelSmoothing(nn.Module):
    """Label smoothing (section 5.4) as a KL-divergence loss, summed over non-padding rows.

    ``forward(x, target)`` takes log-probabilities ``x`` (..., size) and labels ``target`` (...)
    (flattened rows, as the tutorial passes them, or unflattened (batch, seq, size) and (batch, seq));
    rows whose label is ``padding_idx`` contribute 0. The smoothed distribution ``q`` is:

    * ``style="torch"`` (default): ``(1 - s) * onehot + s / size`` over all classes, exactly
      the distribution of ``F.cross_entropy(..., label_smoothing=s)``; the loss equals that
      cross-entropy (``reduction="sum"``, ``ignore_index=padding_idx``) minus
      ``ntokens * label_smoothing_entropy(size, s)`` (a constant; see that function);
    * ``style="annotated"``: the Annotated Transformer's ``1 - s`` on the label, ``s / (size - 2)``
      on every other class except ``padding_idx``, 0 on ``padding_idx``.

    Unlike the tutorial's ``nn.KLDivLoss`` version, no term ``0 * log 0`` or ``0 * (-inf)`` is ever
    formed: the result is finite whenever the log-probabilities that carry weight are finite, at
    ``smoothing=0`` and on all-padding batches too (which give exactly 0).
    """

    def __init__(self, size: int, padding_idx: int, smoothing: float = 0.0, *, style: Literal["torch", "annotated"] = "torch") -> None:
        super().__init__()
        if style not in ("torch", "annotated"):
            raise ValueError(f"LabelSmoothing: style must be 'torch' or 'annotated', got {style!r}")
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"LabelSmoothing: smoothing must be in [0, 1), got smoothing={smoothing}")
        if not 0 <= padding_idx < size:
            raise ValueError(f"LabelSmoothing: padding_idx={padding_idx} must be in [0, size={size})")
        if style == "annotated" and size < 3 and smoothing > 0:
            raise ValueError(f"LabelSmoothing: style='annotated' needs size >= 3 to smooth, got size={size}")
        self.size, self.padding_idx, self.smoothing, self.style = size, padding_idx, smoothing, style
        self.confidence = 1.0 - smoothing
        self.entropy = label_smoothing_entropy(size, smoothing, style)

    @checked
    def forward(self, x: Float[Tensor, "*batch {self.size}"], target: Int[Tensor, "*batch"]) -> Float[Tensor, ""]:
        x = x.float().reshape(-1, self.size)
        target = target.reshape(-1)
        keep = target != self.padding_idx
        safe_target = torch.where(keep, target, torch.zeros_like(target))
        x_label = x.gather(1, safe_target.unsqueeze(1)).squeeze(1)
        s = self.smoothing
        if s == 0.0:
            cross = -x_label
        elif self.style == "torch":
            each = s / self.size
            total = x.sum(dim=1)
            cross = -((1.0 - s) * x_label + each * total)
        else:
            each = s / (self.size - 2)
            columns = torch.ones(self.size, dtype=torch.bool, device=x.device)
            columns[self.padding_idx] = False
            others = torch.where(columns, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(dim=1) - x_label
            cross = -((1.0 - s) * x_label + each * others)
        per_row = torch.where(keep, cross - self.entropy, torch.zeros((), dtype=x.dtype, device=x.device))
        return per_row.sum()


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


class NoamSchedule:
    """``rate`` as a picklable, JSON-serialisable callable: ``LambdaLR(opt, NoamSchedule(512, 1.0, 400))``.

    Its ``__dict__`` is what ``LambdaLR.state_dict()`` stores, so checkpoints stay plain JSON.
    """

    def __init__(self, model_size: int, factor: float = 1.0, warmup: int = 400) -> None:
        self.model_size, self.factor, self.warmup = model_size, factor, warmup

    def __call__(self, step: int) -> float:
        return rate(step, self.model_size, self.factor, self.warmup)


class SimpleLossCompute:
    """A simple loss compute and train function (the tutorial's): generator, then criterion.

    ``__call__(x, y, norm)`` returns ``(loss_sum, loss_node)`` where ``loss_node = criterion / norm``
    is what to back-propagate and ``loss_sum`` is its detached value times ``norm``. A ``norm`` of 0
    (an all-padding batch) is treated as 1, so the loss is 0, not NaN.
    """

    def __init__(self, generator: nn.Module, criterion: nn.Module) -> None:
        self.generator = generator
        self.criterion = criterion

    def __call__(self, x: Tensor, y: Tensor, norm: float | int | Tensor) -> tuple[Tensor, Tensor]:
        norm = float(norm)
        norm = norm if norm > 0 else 1.0
        x = self.generator(x)
        sloss = self.criterion(x.contiguous().view(-1, x.size(-1)), y.contiguous().view(-1)) / norm
        return sloss.detach() * norm, sloss


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


def _make_bar(total: int | None, desc: str, enabled: bool, initial: int = 0):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, initial=initial, dynamic_ncols=True, leave=True)


def _batch_loss(batch: Batch, model: nn.Module, loss_compute: Callable, device: torch.device | str, amp: bool):
    """Run the model on one batch (bf16 autocast on CUDA) and return ``loss_compute``'s (loss sum, loss node)."""
    with autocast_context(device, amp):
        out = model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask)  # __call__: module hooks run
        return loss_compute(out, batch.tgt_y, batch.ntokens)


def _optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, clip_grad: float | None) -> None:
    """Clip the global gradient norm, step the optimizer, clear the gradients, step the schedule."""
    if clip_grad is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if scheduler is not None:
        scheduler.step()


def _postfix(loss_per_token: float, tokens: int, elapsed: float, optimizer: torch.optim.Optimizer | None) -> dict:
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
    Evaluation runs under ``torch.no_grad``.
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
    bar = _make_bar(total, "train" if training else "eval", progress)
    with grad_context:
        for i, batch in enumerate(data_iter):
            batch = batch.to(device)
            loss, loss_node = _batch_loss(batch, model, loss_compute, device, amp)
            if training:
                loss_node.backward()
                train_state.step += 1
                train_state.samples += batch.src.shape[0]
                train_state.tokens += batch.ntokens
                if (i + 1) % accum_iter == 0:
                    _optimizer_step(model, optimizer, scheduler, clip_grad)
                    train_state.accum_step += 1
            total_loss += float(loss)
            total_tokens += batch.ntokens
            elapsed = time.perf_counter() - start
            bar.set_postfix(_postfix(float(loss) / max(batch.ntokens, 1), total_tokens, elapsed, optimizer), refresh=False)
            bar.update(1)
    if training:
        # gradients of a trailing partial accumulation are discarded, as in the tutorial
        optimizer.zero_grad(set_to_none=True)
    bar.close()
    return total_loss / max(total_tokens, 1), train_state


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
        self.tokens = 0
        self.history = _History()
        self.last_train_loss = float("nan")

    # ------------------------------------------------------------------ state for checkpoints
    def state(self) -> dict[str, Any]:
        """Everything besides the weights that an exact resume needs (tensors and JSON values)."""
        return {
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

    def load_state(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.tokens = int(state["tokens"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        if torch.cuda.is_available() and state.get("cuda_rng"):
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        random.setstate(_python_rng_from_json(state["python_rng"]))
        self.data_generator.set_state(state["data_rng"])
        history = state.get("history") or {}
        self.history = _History(
            [tuple(x) for x in history.get("train_loss", [])], [tuple(x) for x in history.get("eval_loss", [])]
        )
        self.last_train_loss = float(state.get("last_train_loss", float("nan")))
        self._batches = None

    def save(self, path: str) -> str:
        """Write an atomic checkpoint (see :func:`transformer.checkpoint.save_checkpoint`)."""
        from .checkpoint import save_checkpoint

        return save_checkpoint(path, self.model, trainer_state=self.state(), metadata=self.metadata)

    def resume(self, path: str) -> None:
        """Load weights and training state from ``path`` (the model's config must match)."""
        from .checkpoint import load_checkpoint

        ckpt = load_checkpoint(path, model=self.model, map_location=self.device)
        if ckpt.trainer_state is None:
            raise ValueError(f"checkpoint {path} holds no training state to resume from")
        self.load_state(ckpt.trainer_state)

    # ------------------------------------------------------------------ the loop
    def evaluate(self) -> float:
        """Loss per token on ``eval_batches()`` (model in eval mode, no gradients)."""
        if self.eval_batches is None:
            raise ValueError("Trainer.evaluate: no eval_batches were given")
        was_training = self.model.training
        self.model.eval()
        try:
            loss, _ = run_epoch(self.eval_batches(), self.model, self.loss_compute, mode="eval", device=self.device, amp=self.config.amp)
        finally:
            self.model.train(was_training)
        return loss

    def train_step(self) -> float:
        """One optimizer step over ``accum_iter`` batches; returns the loss per token."""
        if self._batches is None:
            self._batches = self.make_batches(self.data_generator)
        self.model.train()
        loss_sum, ntokens = 0.0, 0
        for _ in range(self.config.accum_iter):
            batch = next(self._batches).to(self.device)
            loss, loss_node = _batch_loss(batch, self.model, self.loss_compute, self.device, self.config.amp)
            loss_node.backward()
            loss_sum += float(loss)
            ntokens += batch.ntokens
        _optimizer_step(self.model, self.optimizer, self.scheduler, self.config.clip_grad)
        self.step += 1
        self.tokens += ntokens
        self.last_train_loss = loss_sum / max(ntokens, 1)
        return self.last_train_loss

    def train(self, steps: int | None = None, *, on_eval: Callable[[int, float], None] | None = None) -> float:
        """Train until ``steps`` optimizer steps in total (default ``config.steps``); returns the last train loss.

        The data iterator is rebuilt from the saved generator state after a resume, so an
        interrupted-and-resumed run sees the same batches as an uninterrupted one, provided
        ``batches`` consumes the generator batch by batch (draws nothing ahead).
        """
        target = self.config.steps if steps is None else steps
        cfg = self.config
        bar = _make_bar(target, "train", cfg.progress, initial=self.step)
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
                bar.set_postfix(_postfix(loss, self.tokens - start_tokens, elapsed, self.optimizer), refresh=False)
                bar.update(1)
                if cfg.eval_every and self.eval_batches is not None and self.step % cfg.eval_every == 0:
                    eval_loss = self.evaluate()
                    self.history.eval_loss.append((self.step, eval_loss))
                    if cfg.progress:
                        bar.write(f"step {self.step}: train loss {loss:.4f}, eval loss {eval_loss:.4f}")
                    if on_eval is not None:
                        on_eval(self.step, eval_loss)
                if cfg.out_dir and cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                    self.save(cfg.out_dir)
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
