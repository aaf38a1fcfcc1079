"""The step function every search runs on, and the policy saying which steps run with the contracts checked.

A step function ``steps(ys) -> log_probs`` gives the log-probabilities (batch, vocab) of the token after the tokens
``ys`` (batch, t), and ``steps.reorder(index)`` keeps the batch rows ``index`` (:class:`StepFunction`). The model
supplies it (:meth:`EncoderDecoder.next_tokens`, :meth:`TransformerLM.next_tokens`); :class:`CheckedSteps` wraps it
so that only the steps the searches' ``checks`` argument names run with the contracts checked.
"""

from __future__ import annotations

from typing import Protocol

from ..contracts import Tensor
from ..contracts import checks as checks_switch

__all__ = ["StepFunction", "STEP_CHECKS", "CheckedSteps", "validate_step_checks"]


class StepFunction(Protocol):
    """What the searches need from a model: next-token log-probabilities, and following reordered rows."""

    def __call__(self, ys: Tensor) -> Tensor: ...

    def reorder(self, index: Tensor) -> None: ...


#: The values of the searches' ``checks`` argument: which decoding steps run with the contracts checked.
STEP_CHECKS = ("first", "always", "never")


class CheckedSteps:
    """A step function whose calls run with contracts checked as ``policy`` says (the searches' ``checks``).

    ``"first"``: the first two calls, and every call whose batch (``ys.size(0)``) differs from the call before
    (beam search's hypotheses finishing), run under the current setting; the others under ``checks(False)``.
    ``"always"``: every call under the current setting. ``"never"``: every call under ``checks(False)``. The policy
    never switches checks on. ``policy`` is validated here, whatever the switch says (ValueError naming ``who``).
    """

    def __init__(self, steps: StepFunction, policy: str, who: str) -> None:
        self.steps, self.policy = steps, validate_step_checks(who, policy)
        self.calls, self.batch = 0, -1

    def __call__(self, ys: Tensor) -> Tensor:
        check = self.policy == "always" or (self.policy == "first" and (self.calls < 2 or ys.size(0) != self.batch))
        self.calls, self.batch = self.calls + 1, ys.size(0)
        if check:
            return self.steps(ys)
        with checks_switch(False):
            return self.steps(ys)

    def reorder(self, index: Tensor) -> None:
        self.steps.reorder(index)


def validate_step_checks(who: str, policy: object) -> str:
    """The searches' ``checks`` argument, refused with a ValueError naming it unless one of :data:`STEP_CHECKS`."""
    if not isinstance(policy, str) or policy not in STEP_CHECKS:
        raise ValueError(f"{who}: checks must be one of {', '.join(map(repr, STEP_CHECKS))}, got {policy!r}")
    return policy
