"""``export``: a checked model exported with symbolic sizes, checks on, whose wrong inputs fail with the contract's
message (see "torch.export" in docs/proved-shapes.md).

``torch.export.export`` traces the model with its checks on (``transformer.contracts.traced``): every contract is
decided at export time, for every size in the ranges, so the program holds no check of its own; what the contracts
relate (``src_mask``'s last axis is ``src``'s length) is kept as the program's input guards, which torch checks at
each call and fails with ``AssertionError: Guard failed: src_mask.size()[2] == src.size()[1]``. :class:`Exported`
runs the program and, when torch refuses the inputs, runs the model eagerly with checks on, so that the error is the
contract's ``TypeCheckError`` (or the package's own error: a length over ``max_len``), with torch's as its cause.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.utils._pytree as pytree
from jaxtyping import TypeCheckError
from torch import nn

from ..contracts import checks
from .prove import plan_export


class Exported:
    """An exported program (:attr:`program`, a ``torch.export.ExportedProgram``) and the checked model it came from;
    calling it calls the program (see the module's docstring for a wrong input)."""

    def __init__(self, program: torch.export.ExportedProgram, target: nn.Module | Callable) -> None:
        self.program = program
        self.target = target
        self._module = program.module()

    def __call__(self, *args, **kwargs):
        try:
            return self._module(*args, **kwargs)
        except (AssertionError, RuntimeError, ValueError) as refused:
            try:  # (on copies of a structured input: the eager run must not extend the caller's cache)
                args, kwargs = pytree.tree_map(lambda leaf: leaf, (args, kwargs))
                with checks(True), torch.no_grad():
                    self.target(*args, **kwargs)
            except TypeCheckError as error:  # the contract's message (a fresh error: no eager traceback to read)
                raise TypeCheckError(str(error)) from refused
            except Exception as error:  # noqa: BLE001 - the package's own message for it (max_len, a token id)
                raise error from refused
            raise


def export(
    target: nn.Module | Callable,
    *example_args,
    sizes: dict[str, tuple[int, int]],
    assume: tuple[str, ...] | list[str] = (),
    axes: dict[str, tuple[str | None, ...]] | None = None,
    strict: bool = False,
    **example_kwargs,
) -> Exported:
    """``torch.export.export(target, ...)`` with checks on and the example inputs' axes named in ``sizes`` (by the
    contract's dimension names, as :func:`~transformer.proofs.prove` reads them) symbolic over their ranges. A
    contract the example inputs break raises its ``TypeCheckError`` (``CompiledContractError``); a size the model
    specialises raises torch's constraint violation (:func:`~transformer.proofs.prove` says which code asked)."""
    plan = plan_export(target, example_args, example_kwargs, sizes, assume, axes)
    with checks(True):
        program = torch.export.export(
            plan.module, plan.args, plan.kwargs, dynamic_shapes=plan.dynamic_shapes, strict=strict
        )
    return Exported(program, target)
