"""Training objectives (section 5.4): label smoothing and the loss compute.

The names and signatures follow the Annotated Transformer (``LabelSmoothing``, ``SimpleLossCompute``; its schedule
``rate`` is in :mod:`transformer.training.schedule`); the differences are fixes: ``LabelSmoothing`` never produces inf
or NaN (the tutorial's gives NaN at ``smoothing=0`` when a log-probability is ``-inf``), the loss compute survives
all-padding batches (the tutorial divides by zero), and a label outside the vocabulary is named in a ValueError
instead of an index error (or, on a GPU, a device-side assert). Batches are in :mod:`transformer.training.batch`, the
training loops in :mod:`transformer.training.loop` (``run_epoch``) and :mod:`transformer.training.trainer`.

Label ids are checked where reading them costs nothing: on the CPU, every call checks them and raises. On a GPU the
check does not read the labels back to the host (that would add a synchronisation to every step): an out-of-range
id never indexes anything (the loss reads a clamped id), and the loss becomes NaN; the training loops, which read
the loss on the host at every step anyway, then name the label (:class:`~transformer.training.trainer.Trainer` checks
the labels of a step whose loss is not finite, and the CPU-built batches of the tasks check them when they are made).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from ..contracts import Float, Int, Tensor, checked

__all__ = ["LabelSmoothing", "label_smoothing_entropy", "check_label_ids", "SimpleLossCompute"]


def _checked_on_host(tensor: Tensor) -> bool:
    """Whether a check may read ``tensor`` (free on the CPU; never while torch.compile traces)."""
    return tensor.device.type == "cpu" and not torch.compiler.is_compiling()


def _invalid_labels(labels: Tensor, vocab: int, ignore: int | None = None) -> Tensor:
    invalid = (labels < 0) | (labels >= vocab)
    return invalid if ignore is None else invalid & (labels != ignore)


def check_label_ids(labels: Tensor, vocab: int, who: str, name: str, *, ignore: int | None = None) -> None:
    """Raise ValueError naming ``who``'s argument ``name``, the first id of ``labels`` outside ``[0, vocab)``
    (``ignore``, e.g. a criterion's ``ignore_index``, is allowed too), its position and the allowed range.

    Reads ``labels`` on the host: callers run it on CPU tensors (see the module docstring for GPUs)."""
    invalid = _invalid_labels(labels, vocab, ignore)
    if bool(invalid.any()):
        position = tuple(int(i) for i in invalid.nonzero()[0])
        allowed = f"[0, {vocab})" + (f" or the ignored id {ignore}" if ignore is not None else "")
        raise ValueError(
            f"{who}: {name} holds label id {int(labels[position])} at position {position}, outside "
            f"{allowed} (vocabulary size {vocab})"
        )


def label_smoothing_entropy(size: int, smoothing: float, style: str = "torch") -> float:
    """Entropy H(q) of one non-padding row of the smoothed target distribution q (0 log 0 = 0).

    ``LabelSmoothing`` returns ``sum over non-padding rows of KL(q || p)`` and
    ``KL(q || p) = CE(q, p) - H(q)``, so with ``style="torch"``::

        LabelSmoothing(size, pad, s)(log_probs, target)
            == F.cross_entropy(logits, target, label_smoothing=s, ignore_index=pad, reduction="sum")
               - ntokens * label_smoothing_entropy(size, s)

    where ``ntokens`` is the number of targets that are not ``pad``. Without smoothing the target is one-hot: 0.
    """
    if smoothing == 0.0:
        return 0.0
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

    def __init__(
        self, size: int, padding_idx: int, smoothing: float = 0.0, *, style: Literal["torch", "annotated"] = "torch"
    ) -> None:
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
        """The summed KL divergence. A ``target`` id outside ``[0, size)`` raises ValueError naming it (on the CPU;
        on a GPU the loss is NaN instead, without a synchronisation: see the module docstring)."""
        on_host = _checked_on_host(target)
        if on_host:
            check_label_ids(target, self.size, "LabelSmoothing", "target")
        x = x.float().reshape(-1, self.size)
        target = target.reshape(-1)
        invalid = None if on_host else _invalid_labels(target, self.size)
        keep = target != self.padding_idx if invalid is None else (target != self.padding_idx) & ~invalid
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
        loss = per_row.sum()
        if invalid is not None:  # an id no row may hold: NaN, which the training loops read and name
            loss = torch.where(invalid.any(), torch.full_like(loss, float("nan")), loss)
        return loss


class SimpleLossCompute:
    """A simple loss compute and train function (the tutorial's): generator, then criterion.

    ``__call__(x, y, norm)`` returns ``(loss_sum, loss_node)`` where ``loss_node = criterion / norm``
    is what to back-propagate and ``loss_sum`` is its detached value times ``norm``. A ``norm`` of 0
    (an all-padding batch) is treated as 1, so the loss is 0, not NaN.

    A label ``y`` outside the generator's vocabulary ``[0, vocab)`` (other than the criterion's ``ignore_index``,
    e.g. ``nn.CrossEntropyLoss``'s -100) raises ValueError naming ``y``, the id, its position and the range, on the
    CPU; on a GPU it is never passed to the criterion (no device-side assert) and the loss is NaN instead (see the
    module docstring).
    """

    def __init__(self, generator: nn.Module, criterion: nn.Module) -> None:
        self.generator = generator
        self.criterion = criterion

    def __call__(self, x: Tensor, y: Tensor, norm: float | int | Tensor) -> tuple[Tensor, Tensor]:
        norm = float(norm)
        norm = norm if norm > 0 else 1.0
        x = self.generator(x)
        vocab = x.size(-1)
        ignore = getattr(self.criterion, "ignore_index", None)
        invalid = None
        if _checked_on_host(y):
            check_label_ids(y, vocab, "SimpleLossCompute", "y (the labels)", ignore=ignore)
        else:
            invalid = _invalid_labels(y, vocab, ignore)
            y = torch.where(invalid, torch.zeros_like(y) if ignore is None else torch.full_like(y, ignore), y)
        sloss = self.criterion(x.contiguous().view(-1, x.size(-1)), y.contiguous().view(-1)) / norm
        if invalid is not None:  # NaN, which the training loops read and name
            sloss = torch.where(invalid.any(), torch.full_like(sloss, float("nan")), sloss)
        return sloss.detach() * norm, sloss
