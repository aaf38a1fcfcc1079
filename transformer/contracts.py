"""Run-time tensor contracts: one vocabulary of shape names, one decorator, one switch.

Every ``forward`` of the package is annotated with jaxtyping types such as
``Float[Tensor, "batch seq d_model"]`` and wrapped in :func:`checked`, which has
beartype check the annotations with dimension names bound across all arguments and
the return value of one call (``jaxtyping.jaxtyped``).

Checks are on by default. Switch them off globally with :func:`set_checks`, locally
with the :func:`checks` context manager, or for a whole process with the environment
variable ``TYPED_TRANSFORMER_CHECKS=0`` (read at import). Off costs one boolean test
per call.

Under ``torch.compile`` checks are skipped while tracing: jaxtyping misfires on the
fake tensors Dynamo traces with (pytorch#122093, jaxtyping#196), and skipping them
adds no graph break because ``torch.compiler.is_compiling()`` is constant-folded.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch
from beartype import beartype
from jaxtyping import Bool, Float, Int, Shaped, TypeCheckError, jaxtyped
from torch import Tensor

__all__ = [
    "DIMENSIONS",
    "Bool",
    "Float",
    "Int",
    "Shaped",
    "Tensor",
    "TypeCheckError",
    "checked",
    "checks",
    "checks_enabled",
    "set_checks",
    "validate_token_ids",
    "validate_length",
]

F = TypeVar("F", bound=Callable)

#: The one vocabulary of dimension names used in every annotation of the package (the paper's names).
#: ``#name`` in an annotation allows size 1 to broadcast, ``*name`` any number of leading axes, and
#: ``{self.d_model}`` the module's own configured size. ``tests/test_contracts.py`` keeps annotations to this list.
DIMENSIONS: dict[str, str] = {
    "batch": "sentences in the batch (leading axes, possibly several, in '*batch')",
    "seq": "positions of a sequence when source and target do not matter",
    "size": "the side of a square mask (subsequent_mask)",
    "src_len": "source positions (encoder input, memory)",
    "tgt_len": "target positions (decoder input and output)",
    "q_len": "query positions of an attention",
    "k_len": "key (and value) positions of an attention",
    "heads": "attention heads, h",
    "d_model": "model width, 512 in the base model",
    "d_k": "width of one head's queries and keys, d_model / h",
    "d_v": "width of one head's values, d_model / h",
    "d_ff": "inner width of the feed-forward network",
    "vocab": "vocabulary size",
    "beam": "hypotheses kept per sentence in beam search",
    "steps": "decoding steps taken so far",
}

_FALSE_WORDS = {"0", "false", "no", "off"}
_enabled: bool = os.environ.get("TYPED_TRANSFORMER_CHECKS", "1").strip().lower() not in _FALSE_WORDS


def checks_enabled() -> bool:
    """Whether contracts are checked right now (always False while torch.compile traces)."""
    return _enabled and not torch.compiler.is_compiling()


def set_checks(enabled: bool) -> None:
    """Turn every contract check of the package on or off, process-wide."""
    global _enabled
    _enabled = bool(enabled)


@contextlib.contextmanager
def checks(enabled: bool) -> Iterator[None]:
    """Context manager: ``with checks(False): model(...)`` runs unchecked, then restores."""
    global _enabled
    previous = _enabled
    _enabled = bool(enabled)
    try:
        yield
    finally:
        _enabled = previous


def checked(fn: F) -> F:
    """Check ``fn``'s jaxtyping annotations with beartype at every call while checks are on.

    Dimension names are bound across the arguments and the return value of one call, so
    ``(x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq d_model"]``
    promises the output keeps the input's shape. A violation raises
    ``jaxtyping.TypeCheckError`` naming the argument, the expected type, the actual
    shape and the sizes bound so far.

    ``fn.unchecked`` is the bare function, for calls on the hot path whose shapes the calling
    function's own contract has just checked (e.g. ``MultiHeadedAttention.attend`` calling
    ``scaled_dot_product_attention``): the same guarantee without paying for it twice.
    """
    typed = jaxtyped(fn, typechecker=beartype)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _enabled and not torch.compiler.is_compiling():
            try:
                return typed(*args, **kwargs)
            except TypeCheckError as error:
                raise TypeCheckError(_located(fn.__qualname__, str(error))) from None
        return fn(*args, **kwargs)

    wrapper.unchecked = fn  # for hot inner calls whose caller's contract already covers these shapes
    return wrapper  # type: ignore[return-value]


def _located(qualname: str, message: str) -> str:
    """Prefix the failing call; a violation in a nested call keeps its summary and gains the caller's name."""
    if message.startswith("Type-check error"):
        return f"{qualname}: {_summary(message)}\n{message}"
    return f"{qualname} > {message}"


def _summary(message: str) -> str:
    """One line out of jaxtyping's report: which argument, the actual and expected types, the bound sizes."""
    where = re.search(r"typechecking parameter '([^']+)'", message)
    subject = f"argument '{where.group(1)}'" if where else "the return value"
    actual = re.search(r"Actual value: (.*)", message)
    expected = re.search(r"Expected type: (.*?)\.?$", message, re.MULTILINE)
    bound = message.split("axis annotation are as follows.")[-1].split() if "as follows." in message else []
    sizes = f" with {', '.join(bound)}" if bound else ""
    actual_text = re.sub(r"\(torch\)$", "", actual.group(1)) if actual else "?"
    expected_text = expected.group(1).replace("jaxtyping.", "") if expected else "?"
    return f"{subject} is {actual_text}, expected {expected_text}{sizes}"


def validate_token_ids(tokens: Tensor, vocab: int, name: str) -> None:
    """Raise ValueError naming the first id outside ``[0, vocab)`` (never an index error or CUDA assert)."""
    if not checks_enabled() or tokens.numel() == 0:
        return
    bad = (tokens < 0) | (tokens >= vocab)
    if bool(bad.any()):
        position = tuple(int(i) for i in bad.nonzero()[0])
        token = int(tokens[position])
        raise ValueError(
            f"{name}: token id {token} at position {position} is outside the vocabulary "
            f"[0, {vocab}) (vocabulary size {vocab})"
        )


def validate_length(length: int, max_len: int, name: str) -> None:
    """Raise ValueError when a sequence is longer than the model's ``max_len``."""
    if length > max_len:
        raise ValueError(
            f"{name}: sequence length {length} exceeds max_len={max_len}; "
            f"build the model with max_len >= {length} or shorten the input"
        )
