"""When training stops without a result: the loss or the weights became NaN or infinite (:class:`TrainingDiverged`),
or Ctrl-C asked to stop (:class:`TrainingInterrupted`, at the boundary of a step: :class:`InterruptAtStepBoundary`).

Never silently wrong: a loss that is not finite stops training (read where the loop reads the loss anyway: no extra
synchronisation), weights that are not finite are never saved, so the last checkpoint on disk stays the last good
one; the messages say what was kept and what to change (``DIVERGENCE_HINT``).
"""

from __future__ import annotations

import signal
import sys
import threading

from ..checkpoint import kept_message

__all__ = ["DIVERGENCE_HINT", "TrainingDiverged", "TrainingInterrupted", "InterruptAtStepBoundary", "what_was_kept"]

DIVERGENCE_HINT = (
    "lower the learning rate (--lr or --lr-factor), lengthen the warm-up (--warmup), or clip the gradients "
    "harder (TrainerConfig.clip_grad)"
)


def what_was_kept(out_dir: str | None) -> str:
    """What a run that stops now leaves in ``out_dir``: its last good checkpoint (intact, with its step), or nothing."""
    return kept_message(out_dir) if out_dir else "no checkpoint is written (no out_dir)"


class TrainingDiverged(RuntimeError):
    """The training loss (or the held-out loss, or the weights about to be saved) became NaN or infinite.

    Training stopped at ``step``; nothing non-finite was saved, so the last checkpoint on disk is the last good one.
    ``loss`` is the loss that was not finite (None when the weights were). The message says what to change."""

    def __init__(self, message: str, step: int, loss: float | None = None) -> None:
        super().__init__(message)
        self.step, self.loss = step, loss


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped :meth:`Trainer.train` at the boundary of step ``step``; ``saved_to`` is the checkpoint
    written there (None without ``out_dir``). A ``KeyboardInterrupt``, so code that catches those still does."""

    def __init__(self, step: int, saved_to: str | None) -> None:
        where = (
            f"the checkpoint in {saved_to} holds step {step}" if saved_to else "no checkpoint was written (no out_dir)"
        )
        super().__init__(f"interrupted at step {step}: {where}")
        self.step, self.saved_to = step, saved_to


class InterruptAtStepBoundary:
    """While active (in the main thread, and only if nobody else handles SIGINT), the first Ctrl-C sets
    ``requested``; the Trainer stops at the end of the step. A second Ctrl-C raises KeyboardInterrupt at once."""

    def __init__(self, announce: bool) -> None:
        self.requested, self.announce, self._previous = False, announce, None

    def __enter__(self) -> InterruptAtStepBoundary:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
            raise KeyboardInterrupt
        self.requested = True
        if self.announce:
            print(
                "\ninterrupted: saving at the end of this step (Ctrl-C again to stop at once)",
                file=sys.stderr,
                flush=True,
            )

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
