"""The always-on guards: token ids inside the vocabulary, lengths within ``max_len``, non-empty sequences, one device
and dtype. Not contracts (see "What the switch covers" in docs/contracts.md): they check values, not annotations.

The token-id and length guards run whether checks are on or off; the dtype/device guard follows the switch (off, it
costs the call: torch's own error comes later). On CUDA the token-id test runs on the GPU and is read back later
(:func:`raise_pending_token_errors`), so that no forward waits for the GPU to answer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch
from torch import Tensor

from .switch import checks_enabled

__all__ = [
    "raise_pending_token_errors",
    "validate_dtype_device",
    "validate_length",
    "validate_nonempty",
    "validate_token_ids",
]


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
    return (
        f"{name}: token id {token} at position {position} is outside the vocabulary "
        f"[0, {vocab}) (vocabulary size {vocab})"
    )


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
        return ValueError(
            _token_message(self.name, token, tuple(reversed(position)), self.vocab)
            + f"; found on {self.device} by the asynchronous check of an earlier call, which ran with "
            "the id clamped into the vocabulary (its result is not meaningful)"
        )


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
        shape = ", ".join(f"{d}={n}" for d, n in zip(dims.split(), tokens.shape, strict=False))
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
    reference = reference() if callable(reference) else reference  # (Dynamo before 2.7: no isinstance of a closure)
    device, dtype = reference.device, reference.dtype
    for name, value in tensors.items():
        if value is None:
            continue
        parts = (
            {name: value} if isinstance(value, Tensor) else {f"{name}.{k}": t for k, t in value.named_parts().items()}
        )
        for part, tensor in parts.items():
            if tensor.device != device:
                raise ValueError(
                    f"{who}: argument '{part}' is on {tensor.device}, {reference_name} on {device}; "
                    f"put them on one device (e.g. {part}.to({str(device)!r}))"
                )
            if tensor.is_floating_point() and tensor.dtype != dtype and not torch.is_autocast_enabled(device.type):
                raise ValueError(
                    f"{who}: argument '{part}' is {tensor.dtype}, {reference_name} {dtype}; "
                    f"convert one of them (e.g. {part}.to({dtype}))"
                )
