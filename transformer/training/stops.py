"""When training stops without a result: the loss or the weights became NaN or infinite (:class:`TrainingDiverged`),
or Ctrl-C (SIGINT) or SIGTERM (what Slurm and Kubernetes send before they kill a job) asked to stop
(:class:`TrainingInterrupted`, at the boundary of a step: :class:`InterruptAtStepBoundary`).

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
    """Ctrl-C (SIGINT) or SIGTERM stopped :meth:`Trainer.train` at the boundary of step ``step``; ``saved_to`` is the
    checkpoint written there (None without ``out_dir``), ``signum`` the signal that asked (``signal.SIGINT`` or
    ``signal.SIGTERM``). A ``KeyboardInterrupt``, so code that catches those still does."""

    def __init__(self, step: int, saved_to: str | None, signum: int = signal.SIGINT) -> None:
        where = (
            f"the checkpoint in {saved_to} holds step {step}" if saved_to else "no checkpoint was written (no out_dir)"
        )
        by = "" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}"
        super().__init__(f"interrupted{by} at step {step}: {where}")
        self.step, self.saved_to, self.signum = step, saved_to, int(signum)


#: The signals handled at the step boundary, each with the handler it must find to take it over (nobody else's).
_HANDLED = ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))


class InterruptAtStepBoundary:
    """While active (in the main thread of this process, and for each signal only if nobody else handles it: Python's
    own SIGINT handler, SIGTERM's default), the first Ctrl-C or SIGTERM sets ``requested`` (and ``signum``); the
    Trainer stops at the end of the step. A second Ctrl-C stops at once (KeyboardInterrupt); a second SIGTERM changes
    nothing: under Slurm a rank hears SIGTERM twice (from Slurm and forwarded by torchrun), and a scheduler that will
    not wait sends SIGKILL anyway."""

    def __init__(self, announce: bool) -> None:
        self.requested, self.announce, self.signum = False, announce, None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> InterruptAtStepBoundary:
        if threading.current_thread() is threading.main_thread():
            for signum, python_default in _HANDLED:
                if signal.getsignal(signum) is python_default:
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested:
            if signum != signal.SIGINT:
                return  # the save is under way; SIGKILL stops at once
            self._restore()
            raise KeyboardInterrupt
        self.requested, self.signum = True, signum
        if self.announce:
            name = signal.Signals(signum).name
            by = "" if signum == signal.SIGINT else f" by {name}"
            print(
                f"\ninterrupted{by}: saving at the end of this step (Ctrl-C again to stop at once)",
                file=sys.stderr,
                flush=True,
            )

    def _restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def __exit__(self, *exc) -> None:
        self._restore()
