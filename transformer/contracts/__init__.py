"""Run-time tensor contracts: one vocabulary of shape names, one decorator, one switch. Import everything from here.

Every ``forward`` of the package is annotated with jaxtyping types such as
``Float[Tensor, "batch seq d_model"]`` and wrapped in :func:`checked`, which has
beartype check the annotations with dimension names bound across all arguments and
the return value of one call (``jaxtyping.jaxtyped``).

Checks are on by default. Switch them off for the whole process with :func:`set_checks`
or the environment variable ``TYPED_TRANSFORMER_CHECKS=0`` (read at import), and for one
thread or asyncio task with the :func:`checks` context manager (a ``contextvars.ContextVar``
that overrides the process-wide default). Off costs one ContextVar lookup per call.

Under ``torch.compile`` the same contracts hold: while Dynamo traces, ``checked`` hands the
call to the checker of ``transformer.contracts.traced``, which raises the same
``TypeCheckError`` (same first line, as a :class:`CompiledContractError`) while the call is traced. No graph break.

One concept per module:

* ``dimensions``: the vocabulary of dimension names (:data:`DIMENSIONS`);
* ``switch``: checks on or off (:func:`checks`, :func:`set_checks`, :func:`checks_enabled`);
* ``decorator``: :func:`checked`;
* ``within``: :func:`check`, a contract on a tensor inside a checked function, with the call's dimension names;
* ``frames``: the checked calls in progress, which :func:`check` binds with;
* ``grammar``: the annotation grammar both checkers read;
* ``fast`` (with ``fast_source``): the eager checker, each contract compiled into Python once;
* ``traced`` (with ``traced_rules``): the checker that runs while torch.compile traces;
* ``report``: what a violation says (the summary line, jaxtyping's report);
* ``guards``: the always-on guards (token ids, lengths, non-empty sequences, dtype and device), not contracts.
"""

from __future__ import annotations

from jaxtyping import Bool, Float, Int, Shaped, TypeCheckError
from torch import Tensor

from .decorator import checked
from .dimensions import DIMENSIONS
from .guards import (
    raise_pending_token_errors,
    validate_dtype_device,
    validate_length,
    validate_nonempty,
    validate_token_ids,
)
from .switch import checks, checks_enabled, set_checks
from .traced import CompiledContractError
from .within import check

__all__ = [
    "DIMENSIONS",
    "Bool",
    "Float",
    "Int",
    "Shaped",
    "Tensor",
    "TypeCheckError",
    "CompiledContractError",
    "check",
    "checked",
    "checks",
    "checks_enabled",
    "set_checks",
    "raise_pending_token_errors",
    "validate_dtype_device",
    "validate_length",
    "validate_nonempty",
    "validate_token_ids",
]
