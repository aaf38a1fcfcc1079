"""Where the checkpoint of a directory is: one rule for ``--resume``, a torchrun restart, loading and saving.

A save swaps a new directory into place with two renames and keeps the previous checkpoint aside (``path.old-*``)
until the new one is in; a crash between the renames leaves only that copy. :func:`find_checkpoint` finds it,
:func:`kept_message` says what a failed save left.
"""

from __future__ import annotations

import glob
import json
import os
import warnings

from .errors import CheckpointError
from .format import CONFIG_FILE, META_FILE, MODEL_FILE, STATE_JSON_FILE

__all__ = ["find_checkpoint", "checkpoint_dir", "resolve_checkpoint", "checkpoint_step", "kept_message"]


def find_checkpoint(path: str | os.PathLike) -> str | None:
    """Where the checkpoint of directory ``path`` is: ``path`` when it holds ``meta.json``; else, when ``path`` does
    not exist, the newest copy that an interrupted save left aside (``path.old-*``: a crash between the save's two
    renames) holding a ``meta.json``; else None.

    The one rule by which ``--resume``, a torchrun restart (``--max-restarts``), :func:`load_checkpoint` and the
    sharded loaders find a checkpoint, and by which ``train`` tells that ``--out`` already holds one."""
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        return path if os.path.isfile(os.path.join(path, META_FILE)) else None
    if os.path.exists(path):
        return None
    aside = sorted(glob.glob(glob.escape(path) + ".old-*"), key=os.path.getmtime, reverse=True)
    for candidate in aside:
        if os.path.isfile(os.path.join(candidate, META_FILE)):
            return candidate
    return None


def checkpoint_dir(path: str, stacklevel: int) -> str | None:
    """The checkpoint :func:`find_checkpoint` finds (with a warning when it is a copy left aside, attributed
    ``stacklevel`` frames above the caller); ``path`` itself when it is a directory without ``meta.json`` (reading it
    names what is missing); None when nothing is there. The one rule of single-file and sharded checkpoints."""
    found = find_checkpoint(path)
    if found is not None:
        if found != path:
            warnings.warn(
                f"checkpoint {path} is missing; using {found} left by an interrupted save", stacklevel=stacklevel + 1
            )
        return found
    return path if os.path.isdir(path) else None


def resolve_checkpoint(path: str) -> str:
    """:func:`checkpoint_dir` (its warning attributed to the caller's caller), or an error naming what is at ``path``
    instead of a checkpoint."""
    found = checkpoint_dir(path, stacklevel=3)
    if found is not None:
        return found
    if os.path.exists(path):
        raise CheckpointError(f"checkpoint {path} is not a directory")
    raise CheckpointError(
        f"no checkpoint at {path} (expected a directory with {META_FILE}, {CONFIG_FILE} and {MODEL_FILE})"
    )


def checkpoint_step(path: str) -> int | None:
    """The training step the checkpoint directory ``path`` holds (from its ``state.json``), None if it has none."""
    try:
        with open(os.path.join(path, STATE_JSON_FILE)) as f:
            step = json.load(f)["step"]
        return step if isinstance(step, int) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def kept_message(path: str, left_behind: str | None = None) -> str:
    """What a failed save to ``path`` leaves: the previous checkpoint (intact, with its step), or nothing; and
    ``left_behind``, the unfinished copy that could not be removed (a disk turned read-only), if there is one."""
    found = find_checkpoint(path)
    unfinished = f"the unfinished {left_behind} could not be removed" if left_behind else ""
    if found is None:
        return f"there was no checkpoint there before, and {unfinished or 'nothing was left behind'}"
    step = checkpoint_step(found)
    kept = f"the previous checkpoint in {found}{'' if step is None else f' (step {step})'} is intact"
    return f"{kept}; {unfinished}" if unfinished else kept
