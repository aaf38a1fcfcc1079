"""Run-time tensor contracts: one vocabulary of shape names, one decorator, one switch.

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
``TypeCheckError`` (same first line) from the compiled graph. No graph break.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch
from jaxtyping import Bool, Float, Int, Shaped, TypeCheckError
from torch import Tensor

from .fast import NotFast, Reporter, compile_checker, resolved_signature
from .traced import Contract, call_traced, clean_expected, field_text

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
    "raise_pending_token_errors",
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

# ----------------------------------------------------------------------------------------------------------- the switch
# A process-wide default (`set_checks`, the environment variable) and a per-context override (`checks(...)`, a
# ContextVar, so threads and asyncio tasks each see their own). The override is read through `_SWITCH.override`, a
# property whose getter is the ContextVar's own C `get` called with the instance as its default: one C call per
# checked call in eager mode, and, under torch.compile, something Dynamo evaluates for real and guards on (it cannot
# trace `ContextVar.get` itself), so a compiled graph is only reused under the setting it was traced with.

_FALSE_WORDS = {"0", "false", "no", "off"}
_default_enabled: bool = os.environ.get("TYPED_TRANSFORMER_CHECKS", "1").strip().lower() not in _FALSE_WORDS
_override: contextvars.ContextVar[bool] = contextvars.ContextVar("typed_transformer_checks")
# `checks(...)` blocks inside a function being compiled: Dynamo cannot trace ContextVar.set, so there the block
# pushes its setting here, in traced code (empty whenever no trace is under way).
_TRACE_OVERRIDES: list[bool] = []


class _Switch:
    """``_SWITCH.override`` is this context's ``checks(...)`` setting, or ``_SWITCH`` itself when none is set."""

    __slots__ = ()
    override = property(_override.get)


_SWITCH = _Switch()


def checks_enabled() -> bool:
    """Whether contracts are checked right now, in this thread or task (under torch.compile too)."""
    if _TRACE_OVERRIDES:
        return _TRACE_OVERRIDES[-1]
    value = _SWITCH.override
    return _default_enabled if value is _SWITCH else value


def set_checks(enabled: bool) -> None:
    """Turn every contract check of the package on or off: the process-wide default.

    A ``with checks(...)`` block in progress keeps its own setting; every other thread and task follows the default.
    """
    global _default_enabled
    _default_enabled = bool(enabled)


@contextlib.contextmanager
def checks(enabled: bool) -> Iterator[None]:
    """Context manager: ``with checks(False): model(...)`` runs unchecked, then restores.

    The setting belongs to the current thread or asyncio task (a ``contextvars.ContextVar``): other threads and tasks
    keep theirs, and a task started inside the block inherits it.
    """
    if torch.compiler.is_compiling():  # a block inside the compiled function: this trace only
        _TRACE_OVERRIDES.append(bool(enabled))
        try:
            yield
        finally:
            _TRACE_OVERRIDES.pop()
        return
    token = _override.set(bool(enabled))
    try:
        yield
    finally:
        _override.reset(token)


# ------------------------------------------------------------------------------------------------------ the decorator
#: Called as ``hook(qualname, part)`` when the eager fast path refused a call that jaxtyping then accepted (``part``:
#: "arguments" or "return"): never, if the fast path decides as jaxtyping does. For tests and debugging.
_on_fast_path_miss: Callable[[str, str], None] | None = None


def checked(fn: F) -> F:
    """Check ``fn``'s jaxtyping annotations at every call while checks are on, with jaxtyping's and beartype's rules.

    Dimension names are bound across the arguments and the return value of one call, so
    ``(x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq d_model"]``
    promises the output keeps the input's shape. A violation raises
    ``jaxtyping.TypeCheckError`` naming the argument, the expected type, the actual
    shape and the sizes bound so far (and the values of ``{self.x}`` fields the annotation reads).

    In eager mode the annotations are read once, here, and compiled into a small Python checker
    (``transformer.contracts.fast``: about a microsecond per call); a call it does not find valid is handed to
    jaxtyping and beartype themselves, which raise the error with their full report. Annotations the fast checker
    does not replicate exactly (e.g. ``Sequence[int]``) are left to jaxtyping at every call.

    While torch.compile traces, the same annotations are checked by ``transformer.contracts.traced`` (read from the
    annotations once, here), on the shapes Dynamo traces with; a violation becomes an operator in the graph that
    raises the same ``TypeCheckError`` with the same first line when the graph runs. See docs/contracts.md.

    ``fn.unchecked`` is the bare function, for calls on the hot path whose shapes the calling
    function's own contract has just checked (e.g. ``MultiHeadedAttention.attend`` calling
    ``scaled_dot_product_attention``): the same guarantee without paying for it twice.
    """
    signature = resolved_signature(fn)  # the annotations evaluated once, as jaxtyping evaluates them
    contract = Contract(fn, signature)
    reporter = Reporter(fn, signature)
    qualname = fn.__qualname__

    def fields(args: tuple, kwargs: dict) -> Callable[[str], str]:
        def text(subject: str) -> str:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return ""
            bound.apply_defaults()
            return field_text(contract.fields.get(subject, ()), bound.arguments)

        return text

    def report(args: tuple, kwargs: dict, out: object = _NO_RESULT):
        """jaxtyping's check of the call (of its result ``out``, when given: ``fn`` is not called again)."""
        return reporter.run(args, kwargs) if out is _NO_RESULT else reporter.run(args, kwargs, out)

    def missed(args: tuple, kwargs: dict, out: object = _NO_RESULT):
        result = report(args, kwargs, out)
        if _on_fast_path_miss is not None:
            _on_fast_path_miss(qualname, "arguments" if out is _NO_RESULT else "return")
        return result

    def fast_checker() -> tuple[Callable, str]:
        """The eager checker, generated at the first checked call (not at import): (checker, why not the fast one)."""
        nonlocal eager, not_fast
        if eager is first_call:
            try:
                eager, not_fast = compile_checker(fn, signature, missed, missed), ""
            except NotFast as reason:  # an annotation the fast checker does not replicate: jaxtyping checks every call
                eager, not_fast = report, str(reason)
        return eager, not_fast

    def first_call(args: tuple, kwargs: dict):
        return fast_checker()[0](args, kwargs)

    eager, not_fast = first_call, ""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        enabled = _SWITCH.override
        if enabled is _SWITCH:
            enabled = _default_enabled
        if _TRACE_OVERRIDES:
            enabled = _TRACE_OVERRIDES[-1]
        if enabled:
            if torch.compiler.is_compiling():
                return call_traced(contract, fn, args, kwargs)
            try:
                return eager(args, kwargs)
            except TypeCheckError as error:  # this call's, or a nested call's: located, with the caller's name
                raise TypeCheckError(_located(qualname, str(error), fields(args, kwargs))) from None
        return fn(*args, **kwargs)

    wrapper.unchecked = fn  # for hot inner calls whose caller's contract already covers these shapes
    wrapper._contract = contract  # the annotations as the compiled-mode checker reads them
    wrapper._fast_checker = fast_checker  # (the eager checker, why jaxtyping checks every call: "" if it does not)
    wrapper._jaxtyping = report  # jaxtyping + beartype, as every call was checked before the fast path
    return wrapper  # type: ignore[return-value]


_NO_RESULT = object()


def _located(qualname: str, message: str, fields: Callable[[str], str] = lambda subject: "") -> str:
    """Prefix the failing call; a violation in a nested call keeps its summary and gains the caller's name.
    ``fields(name)`` gives the values of the ``{self.x}`` fields that argument's (or "return") annotation reads."""
    if message.startswith("Type-check error"):
        return f"{qualname}: {_summary(message, fields)}\n{message}"
    return f"{qualname} > {message}"


def _summary(message: str, fields: Callable[[str], str] = lambda subject: "") -> str:
    """One line out of jaxtyping's report: which argument, the actual and expected types, the bound sizes."""
    where = re.search(r"typechecking parameter '([^']+)'", message)
    subject = f"argument '{where.group(1)}'" if where else "the return value"
    values = fields(where.group(1) if where else "return")
    actual = re.search(r"Actual value: (.*)", message)
    expected = re.search(r"Expected type: (.*?)\.?$", message, re.MULTILINE)
    bound = message.split("axis annotation are as follows.\n")[-1].splitlines() if "as follows." in message else []
    sizes = f" with {', '.join(bound)}" if bound else ""
    actual_text = re.sub(r"\(torch\)$", "", actual.group(1)) if actual else "?"
    expected_text = clean_expected(expected.group(1)) if expected else "?"
    return f"{subject} is {actual_text}, expected {expected_text}{values}{sizes}"


def validate_token_ids(tokens: Tensor, vocab: int, name: str) -> Tensor:
    """Raise ValueError naming the first id outside ``[0, vocab)`` (never an index error or CUDA assert); return the
    ids to look up.

    A guard, not a contract: it runs whether checks are on or off (see "What the switch covers" in
    docs/contracts.md), except while torch.compile traces, where a data-dependent test would break the graph.

    On the CPU the ids are checked at once and returned as they are. On CUDA, reading the answer back would stop the
    host until the GPU has caught up, at every forward; so there the test runs on the GPU and its answer is copied to
    the host asynchronously, and the ids come back clamped into the vocabulary (no device-side assert can happen).
    The ValueError is then raised by a later call of this guard once the GPU has answered, or by
    :func:`raise_pending_token_errors`; the call that had the bad id has run on clamped ids and its result is not
    meaningful (docs/contracts.md, "Token ids on CUDA").
    """
    if tokens.numel() == 0 or torch.compiler.is_compiling():
        return tokens
    bad = (tokens < 0) | (tokens >= vocab)
    if _check_on_device(tokens):
        return _check_later(tokens, bad, vocab, name)
    if bool(bad.any()):
        position = tuple(int(i) for i in bad.nonzero()[0])
        token = int(tokens[position])
        raise ValueError(_token_message(name, token, position, vocab))
    return tokens


def _token_message(name: str, token: int, position: tuple, vocab: int) -> str:
    return (f"{name}: token id {token} at position {position} is outside the vocabulary "
            f"[0, {vocab}) (vocabulary size {vocab})")


def _check_on_device(tokens: Tensor) -> bool:
    """Whether the token-id test runs on the device and reports later (CUDA: no host synchronisation)."""
    return tokens.is_cuda


def _copy_to_host(found: Tensor) -> tuple[Tensor, Callable[[], bool], Callable[[], None]]:
    """Start copying ``found`` to pinned host memory without waiting: (the host copy, is it there yet, wait for it)."""
    host = torch.empty(found.shape, dtype=found.dtype, pin_memory=True)
    host.copy_(found, non_blocking=True)
    done = torch.cuda.Event()
    done.record()
    return host, done.query, done.synchronize


class _PendingCheck:
    __slots__ = ("device", "found", "name", "ready", "shape", "vocab", "wait")

    def __init__(self, found, ready, wait, name, vocab, shape, device) -> None:
        self.found, self.ready, self.wait = found, ready, wait
        self.name, self.vocab, self.shape, self.device = name, vocab, shape, device

    def error(self) -> ValueError | None:
        """The ValueError this check found (call once ``ready()``), or None."""
        any_bad, index, token = (int(v) for v in self.found.tolist())
        if not any_bad:
            return None
        position = []
        for size in reversed(self.shape):  # the flat (row-major) index as a position, as nonzero() gives it
            position.append(index % size)
            index //= size
        return ValueError(_token_message(self.name, token, tuple(reversed(position)), self.vocab)
                          + f"; found on {self.device} by the asynchronous check of an earlier call, which ran with "
                          "the id clamped into the vocabulary (its result is not meaningful)")


_PENDING: list[_PendingCheck] = []  # the device checks whose answers have not been read yet, oldest first
_PENDING_LOCK = threading.Lock()
_PENDING_LIMIT = 64  # beyond this many unanswered checks, wait for the oldest (bounded memory, bounded delay)


def _check_later(tokens: Tensor, bad: Tensor, vocab: int, name: str) -> Tensor:
    raise_pending_token_errors(wait=False)  # what earlier calls' checks have found by now
    flat = bad.reshape(-1)
    first = flat.to(torch.uint8).argmax()  # the first bad id in row-major order (0 when none)
    found = torch.stack((flat.any().to(torch.int64), first, tokens.reshape(-1)[first].to(torch.int64)))
    host, ready, wait = _copy_to_host(found)
    with _PENDING_LOCK:
        _PENDING.append(_PendingCheck(host, ready, wait, name, vocab, tuple(tokens.shape), tokens.device))
        oldest = _PENDING[0] if len(_PENDING) > _PENDING_LIMIT else None
    if oldest is not None:
        oldest.wait()
        raise_pending_token_errors(wait=False)
    return tokens.clamp(0, vocab - 1)


def raise_pending_token_errors(wait: bool = True) -> None:
    """Raise the ValueError of an out-of-vocabulary token id that the asynchronous check on CUDA has found.

    Each model call on CUDA checks its token ids on the GPU and reads the answer at a later call (see
    :func:`validate_token_ids`). Call this where you want every answer now: it waits for the checks still running
    (``wait=False``: only reads those that have finished) and raises the first error found, oldest call first. On
    the CPU nothing is ever pending: the ids are checked at once.
    """
    while True:
        with _PENDING_LOCK:
            if not _PENDING:
                return
            check = _PENDING[0]
            if not wait and not check.ready():
                return
            del _PENDING[0]
        if wait:
            check.wait()
        error = check.error()
        if error is not None:
            raise error


def validate_length(length: int, max_len: int, name: str) -> None:
    """Raise ValueError when a sequence is longer than the model's ``max_len`` (a guard: always on)."""
    if length > max_len:
        raise ValueError(
            f"{name}: sequence length {length} exceeds max_len={max_len}; "
            f"build the model with max_len >= {length} or shorten the input"
        )


def validate_nonempty(tokens: Tensor, name: str, dims: str = "batch seq", axis: int = -1) -> None:
    """Raise ValueError when a sequence has length 0 (a guard: always on).

    Attention over no keys and a LayerNorm over no positions have no meaning; without this the model would
    return an empty tensor (or NaN downstream) instead of saying what is wrong. ``dims`` names the axes in
    the message, e.g. ``"batch src_len"``; ``axis`` is the sequence axis.
    """
    if tokens.size(axis) == 0:
        shape = ", ".join(f"{d}={n}" for d, n in zip(dims.split(), tokens.shape))
        raise ValueError(f"{name} is an empty sequence: shape ({shape}); every sequence needs at least one position")


def validate_dtype_device(who: str, reference, reference_name: str, **tensors) -> None:
    """Raise ValueError when a tensor of ``tensors`` (by argument name) is on another device than ``reference``, or is
    floating with another dtype (under autocast on that device, floating dtypes may differ), naming the argument and
    both dtypes or devices. ``reference`` is a tensor, or a function giving one (read only while checks are on);
    ``reference_name`` says what it is ("the module's parameters", "argument 'query'"). A value that is not a tensor
    (an ``AttentionMask``) is checked part by part (``mask.key_lengths``, ...) through its ``named_parts()``.

    Part of the contracts: it follows the switch (off, it costs the call: torch's own error comes later), and under
    torch.compile it reads static dtypes and devices, so a valid graph holds no check.
    """
    if not checks_enabled():
        return
    reference = reference if isinstance(reference, Tensor) else reference()
    device, dtype = reference.device, reference.dtype
    for name, value in tensors.items():
        if value is None:
            continue
        parts = {name: value} if isinstance(value, Tensor) else {f"{name}.{k}": t for k, t in value.named_parts().items()}
        for part, tensor in parts.items():
            if tensor.device != device:
                raise ValueError(f"{who}: argument '{part}' is on {tensor.device}, {reference_name} on {device}; "
                                 f"put them on one device (e.g. {part}.to({str(device)!r}))")
            if tensor.is_floating_point() and tensor.dtype != dtype and not torch.is_autocast_enabled(device.type):
                raise ValueError(f"{who}: argument '{part}' is {tensor.dtype}, {reference_name} {dtype}; "
                                 f"convert one of them (e.g. {part}.to({dtype}))")
