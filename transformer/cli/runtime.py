"""Where a command runs: the device (``--device``), the attention backend (``--attention-backend``, a run-time
choice, checked against the device before anything is loaded), and, under torchrun, this process as one rank."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

import torch

from ..attention import triton_missing_reason, use_backend
from ..distributed import (
    DistributedSetupError,
    Strategy,
    World,
    distributed,
    is_sharded_checkpoint,
    main_process_output,
    recorded_errors,
)
from .errors import UsageError
from .parser import PROG

__all__ = [
    "resolve_device",
    "check_backend_runs_on",
    "attention_backend",
    "refuse_sharded",
    "checkpoint_device",
    "torchrun_rank",
]


def resolve_device(name: str) -> torch.device:
    """The device ``--device`` names (``auto``: cuda when available), or a :class:`UsageError` saying why not."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device: unknown device {name!r} (use cpu, cuda, cuda:N or auto)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine (use --device cpu)")
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {name}: only cpu and cuda are supported")
    return device


def check_backend_runs_on(backend: str | None, device: torch.device) -> None:
    """Refuse an ``--attention-backend`` that cannot run here: triton without Triton installed, or off CUDA (unless
    Triton's interpreter is on). The other backends run everywhere."""
    missing = triton_missing_reason() if backend == "triton" else None
    if missing is not None:
        raise UsageError(f"--attention-backend triton: {missing}")
    if backend == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise UsageError("--attention-backend triton needs --device cuda (or TRITON_INTERPRET=1 on CPU)")


def attention_backend(name: str | None) -> contextlib.AbstractContextManager:
    """The run's attention backend: a run-time choice, so a checkpoint resumes or decodes on any backend."""
    return contextlib.nullcontext() if name is None else use_backend(name)


def refuse_sharded(path: str) -> None:
    """``decode`` and ``generate`` read single-file checkpoints: a sharded one must be consolidated first."""
    if is_sharded_checkpoint(path):
        raise UsageError(
            f"checkpoint {path} is sharded (saved by --strategy fsdp); gather it first: {PROG} consolidate {path} OUT"
        )


def checkpoint_device(args: argparse.Namespace) -> torch.device:
    """The device of a command that reads ``--checkpoint`` (``decode``, ``generate``), after checking that its
    backend runs there and that the checkpoint is not sharded."""
    device = resolve_device(args.device)
    check_backend_runs_on(args.attention_backend, device)
    if args.checkpoint is not None:  # generate --model reads a Hugging Face folder instead
        refuse_sharded(args.checkpoint)
    return device


@contextlib.contextmanager
def torchrun_rank(args: argparse.Namespace, device: torch.device, world: World) -> Iterator[Strategy]:
    """This process as one rank of the torchrun job: the process group joined for ``--strategy`` (left on the way
    out), standard output from rank 0 only, the attention backend, and an escaping error recorded for torchrun's
    failure summary; a launch that cannot work is a usage error."""
    with recorded_errors():
        try:
            with (
                distributed(args.strategy or "ddp", str(device)) as strategy,
                main_process_output(world),
                attention_backend(args.attention_backend),
            ):
                yield strategy
        except DistributedSetupError as error:
            raise UsageError(str(error)) from None
