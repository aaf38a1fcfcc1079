"""Which backend runs an attention: the names, the run-time choice (:func:`use_backend`), and auto's pick.

From strongest to weakest: the ``backend=`` argument of the drop-in; the innermost :func:`use_backend` block (a
context variable, so threads and asyncio tasks each keep their own; under torch.compile part of what a graph is
guarded on); the module's default (``TransformerConfig.attention_backend``); ``"auto"``, which
:func:`resolve_backend` turns into the fastest correct backend for the device and inputs. A backend asked for by
name never falls back: it raises (from the compiled graph, under torch.compile). Auto's choices are logged on
``transformer.backends``.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
from contextlib import AbstractContextManager

import torch
from torch import Tensor

from ..common.switches import ContextSetting
from ..common.versions import TORCH_VERSION, major_minor
from ..config import AttentionBackend
from ..masks import AttentionMask
from .dispatch import Refusal, kernel_masks, refuse, score_modifiers

__all__ = [
    "BACKENDS",
    "TRITON_INSTALL_HINT",
    "check_backend_name",
    "current_backend",
    "resolve_backend",
    "triton_missing_reason",
    "triton_unsupported_reason",
    "use_backend",
]

logger = logging.getLogger("transformer.backends")  # the name documented before the package was split
BACKENDS: tuple[str, ...] = ("auto", "eager", "torch", "triton")
TRITON_INSTALL_HINT = 'pip install triton (or pip install "typed-transformer[triton]")'
#: the backend of the innermost `use_backend` block (None outside every block): see transformer.common.switches
CHOICE: ContextSetting[str | None] = ContextSetting("typed_transformer_attention_backend", None)
_TORCH_ZEROES_EMPTY_ROWS = TORCH_VERSION >= (2, 5)


def check_backend_name(name: str) -> str:
    """``name`` if it names a backend (one of :data:`BACKENDS`), else ValueError listing them."""
    if name not in BACKENDS:
        raise ValueError(f"attention backend must be one of {', '.join(map(repr, BACKENDS))}; got {name!r}")
    return name


def use_backend(name: AttentionBackend) -> AbstractContextManager[None]:
    """Run every attention inside the block on backend ``name``, whatever the modules' defaults say.

    The choice lives in a context variable: other threads and asyncio tasks keep their own. Under torch.compile it
    is part of what a compiled graph is guarded on: a call under another choice traces again (see docs/attention.md).
    A block written inside the compiled function governs the calls inside it, for that trace.
    """
    return CHOICE.block(check_backend_name(name))


def current_backend() -> str | None:
    """The backend of the innermost :func:`use_backend` block, or None outside one (under torch.compile too)."""
    return CHOICE.get()


def triton_missing_reason() -> str | None:
    """Why the Triton backend cannot even be loaded here (Triton not installed, or older than the kernels need), or
    None."""
    if not _TRITON_FOUND:  # looked up once (torch 2.9's Dynamo cannot trace find_spec; installs do not change)
        _TRITON_FOUND.append(importlib.util.find_spec("triton") is not None)
    if not _TRITON_FOUND[0]:
        return f"Triton is not installed; install it with: {TRITON_INSTALL_HINT}"
    return _old_triton_reason()


_TRITON_FOUND: list = []  # whether Triton is installed, once asked


_OLD_TRITON: list = []  # the reason below, once asked (installed versions do not change while running)


def _old_triton_reason() -> str | None:
    """Why the installed Triton is too old for the kernels (``transformer.kernels.OLDEST_TRITON``), or None. Read
    from its metadata, without importing it; under torch.compile, Dynamo calls it for real and takes the answer as a
    constant."""
    if not _OLD_TRITON:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("triton")
            old = major_minor(found) < OLDEST_TRITON
        except (PackageNotFoundError, ValueError):
            found, old = None, False
        _OLD_TRITON.append(
            f"Triton {found} is older than {'.'.join(map(str, OLDEST_TRITON))}, the oldest the kernels support; "
            f'install a newer one with: pip install "triton>={".".join(map(str, OLDEST_TRITON))}"'
            if old
            else None
        )
    return _OLD_TRITON[0]


_old_triton_reason._dynamo_marked_constant = True  # type: ignore[attr-defined]  # = assume_constant_result
#: = transformer.kernels.OLDEST_TRITON (importing the kernels imports triton: the reason above must not)
OLDEST_TRITON = (3, 5)


def triton_unsupported_reason(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | AttentionMask | None,
    dropout_p: float,
    scale: float | None = None,
    auto: bool = False,
    *,
    softcap: float | None = None,
    alibi_slopes: Tensor | None = None,
    sinks: Tensor | None = None,
) -> str | None:
    """Why the fused kernel cannot run these inputs (Triton missing or broken, or the kernel's own limits), or None.
    With ``auto``, also why ``auto`` does not choose it for inputs it can run (``kernels.auto_reason``: head_dim above
    128, expected slower than SDPA until a GPU measures it; docs/kernels.md). The mask's documents and window and the
    score modifiers and the sinks go to ``kernels.unsupported_reason`` by name, only when given; a kernel without
    such an argument (one built before issue 29, or before issue 44 for ``sinks``) is the reason: a backend asked for
    by name refuses, it never drops them."""
    missing = triton_missing_reason()
    if missing is not None:
        return missing
    try:
        from .. import kernels
    except ImportError as error:  # triton installed but broken
        return f"transformer.kernels cannot be imported ({error}); reinstall Triton: {TRITON_INSTALL_HINT}"
    parts = {**kernel_masks(mask), **score_modifiers(softcap, alibi_slopes, sinks)}
    parts.pop("causal", None)
    lacking = [name for name in parts if name not in _KERNEL_MASKS and not kernel_takes(name)]
    if lacking:
        return f"this transformer.kernels does not take {', '.join(lacking)} (a kernel older than issue 29 or 44)"
    reason = kernels.unsupported_reason(q, k, v, dropout_p=dropout_p, scale=scale, **parts)
    return reason if reason is not None or not auto else kernels.auto_reason(q)


_KERNEL_MASKS = ("mask", "key_mask", "key_lengths")  # what every kernel's unsupported_reason takes


def kernel_takes(name: str) -> bool:
    """Whether the installed kernel's ``flash_attention`` and ``unsupported_reason`` take keyword argument ``name``
    (``documents``, ``window_left``, ``softcap``, ...: issue 29's arguments, read from their signatures)."""
    from .. import kernels

    return all(name in inspect.signature(f).parameters for f in (kernels.flash_attention, kernels.unsupported_reason))


def _say(level: int, message: str, *args: object) -> None:
    """Log, except while torch.compile traces (a logging call there is a graph break)."""
    if not torch.compiler.is_compiling():
        logger.log(level, message, *args)


def resolve_backend(
    requested: str | None,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | AttentionMask | None,
    dropout_p: float,
    scale: float | None = None,
    *,
    softcap: float | None = None,
    alibi_slopes: Tensor | None = None,
    sinks: Tensor | None = None,
) -> str | Refusal:
    """The backend that runs these inputs: ``requested`` (checked: a named backend never falls back) or auto's pick.
    ``softcap``/``alibi_slopes``: the score modifiers, which the kernel must take too (auto: else torch, which runs
    ALiBi fused as a float mask and a cap through torch's math definition; docs/attention.md); ``sinks`` the
    attention sinks' (heads,) logits, which every backend takes.

    The triton backend's inputs are validated here, once per call; the kernel is then called without a second check.
    A backend that cannot run the inputs raises ValueError (from the compiled graph, under torch.compile: see
    :func:`refuse`).
    """
    name = check_backend_name(requested or "auto")
    modifiers = score_modifiers(softcap, alibi_slopes, sinks)  # only those given: the tests' stand-ins take *args
    if name == "triton":
        reason = triton_unsupported_reason(q, k, v, mask, dropout_p, scale, **modifiers)
        if reason is not None:
            return refuse(f"attention backend 'triton' cannot run these inputs: {reason}")
    if name != "auto":
        return name
    if q.dtype == torch.float64:  # verification (gradcheck, double backward, forward-mode AD): only the reference
        return "eager"  # supports every autograd mode; SDPA's fused CPU kernel has no double backward
    if q.is_cuda:
        if q.dtype == torch.float32:  # issue 18: until a GPU measures otherwise, SDPA for float32
            _say(
                logging.DEBUG,
                "attention backend 'auto' does not use triton for float32 inputs: the kernel's "
                "float32 dots run without tensor cores; torch's SDPA is used (ask for backend 'triton' by name to "
                "use the kernel)",
            )
        else:
            # auto=True positionally: the tests' stand-ins for it take *args
            reason = triton_unsupported_reason(q, k, v, mask, dropout_p, scale, True, **modifiers)
            if reason is None:
                return "triton"
            _say(logging.INFO, "attention backend 'auto' does not use triton here: %s", reason)
    return "torch" if _TORCH_ZEROES_EMPTY_ROWS else "eager"
