"""Writing a checkpoint atomically: everything into a fresh temporary directory beside the target, fsynced, then
swapped in with two renames (the previous checkpoint is renamed aside first and deleted only after the new one is
in place, so an interrupted save never destroys it). Non-finite weights are refused; a full or read-only disk is
one sentence (:class:`~transformer.common.output_dirs.OutputWriteError`)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
from typing import Any

import torch
from safetensors.torch import save_file, save_model
from torch import nn

from ..common.output_dirs import is_write_failure, make_temp_dir, remove_stale_temps, write_failure
from .errors import CheckpointError, NonFiniteWeightsError
from .format import (
    CONFIG_FILE,
    FORMAT_VERSION,
    META_FILE,
    MODEL_FILE,
    RESERVED_FILES,
    STATE_JSON_FILE,
    STATE_TENSORS_FILE,
    fsync_path,
    model_kind,
    sha256_file,
)
from .locate import kept_message
from .nonfinite import describe_nonfinite, nonfinite_tensors
from .state_codec import encode_state, tensor_bytes

__all__ = ["save_checkpoint", "swap_into_place"]


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    *,
    trainer_state: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    assets: dict[str, bytes | str] | None = None,
    allow_nonfinite: bool = False,
) -> str:
    """Atomically write ``model`` (its ``config`` and weights) and optional training state to directory ``path``.

    ``assets`` maps file names to contents (bytes, or str written as UTF-8), e.g. ``{"tokenizer.json": ...}``: they
    are written beside the weights and covered by the SHA-256 manifest. A model's own ``checkpoint_assets``
    attribute (the same mapping) is saved too, so whatever saves the model (a Trainer, a distributed strategy) keeps
    its tokenizer with it. Returns the path. The previous checkpoint at
    ``path``, if any, survives any interruption, and a full or read-only disk
    (:class:`~transformer.common.output_dirs.OutputWriteError`, one sentence). Weights that are NaN or infinite
    are refused (:class:`NonFiniteWeightsError`, naming the tensors; nothing is written) unless ``allow_nonfinite``.
    """
    path = os.path.abspath(os.fspath(path))
    config = getattr(model, "config", None)
    try:
        kind = model_kind(config)
    except ValueError as error:
        raise ValueError(f"save_checkpoint: {error}") from None
    if not allow_nonfinite:
        bad = nonfinite_tensors(model.state_dict().items())
        if bad:
            raise NonFiniteWeightsError(
                f"save_checkpoint: refusing to save non-finite weights (NaN or inf) in "
                f"{describe_nonfinite(bad)} to {path}; {kept_message(path)}",
                bad,
            )
    assets = {**getattr(model, "checkpoint_assets", {}), **(assets or {})}
    for name in assets:
        if name in RESERVED_FILES or os.path.basename(name) != name or name.startswith("."):
            raise ValueError(
                f"save_checkpoint: asset name {name!r} must be a plain file name other than "
                f"{', '.join(sorted(RESERVED_FILES))}"
            )
    parent = os.path.dirname(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise CheckpointError(f"checkpoint path {path} exists and is not a directory")
    tmp = None
    try:
        os.makedirs(parent, exist_ok=True)
        remove_stale_temps(path)  # what an interrupted save of a process that no longer exists left behind
        tmp = make_temp_dir(path)
        with open(os.path.join(tmp, CONFIG_FILE), "w") as f:
            json.dump({"kind": kind, **config.architecture()}, f, indent=2, sort_keys=True)
        save_model(model, os.path.join(tmp, MODEL_FILE))
        files = [CONFIG_FILE, MODEL_FILE]
        for name, content in sorted(assets.items()):
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
            files.append(name)
        if trainer_state is not None:
            tensors: dict[str, torch.Tensor] = {}
            encoded = encode_state(trainer_state, tensors, "")
            save_file(tensors, os.path.join(tmp, STATE_TENSORS_FILE))
            with open(os.path.join(tmp, STATE_JSON_FILE), "w") as f:
                json.dump(encoded, f)
            files += [STATE_TENSORS_FILE, STATE_JSON_FILE]
        meta = {
            "format": "typed-transformer checkpoint",
            "format_version": FORMAT_VERSION,
            "metadata": metadata or {},
            "sha256": {name: sha256_file(os.path.join(tmp, name)) for name in files},
        }
        with open(os.path.join(tmp, META_FILE), "w") as f:
            json.dump(meta, f, indent=2)
        for name in files + [META_FILE]:
            fsync_path(os.path.join(tmp, name))
        fsync_path(tmp)
    except BaseException as error:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        left = tmp if tmp is not None and os.path.exists(tmp) else None  # a disk turned read-only keeps it
        needed = tensor_bytes(model.state_dict()) + tensor_bytes(trainer_state)
        if is_write_failure(error, path, needed):
            kept = kept_message(path, left)
            raise write_failure(error, "the checkpoint", path, needed=needed, kept=kept) from None
        raise
    swap_into_place(tmp, path)
    return path


def swap_into_place(tmp: str, path: str) -> None:
    """Rename the finished temporary directory ``tmp`` to ``path``: a previous checkpoint there is renamed aside
    first and deleted only once the new one is in place (a crash in between leaves it aside, where
    :func:`~transformer.checkpoint.find_checkpoint` finds it); copies left aside by earlier interrupted saves are
    removed. If the swap fails, ``tmp`` is removed and the previous checkpoint put back."""
    parent = os.path.dirname(path)
    old = None
    if os.path.exists(path):
        old = tempfile.mkdtemp(prefix=os.path.basename(path) + ".old-", dir=parent)
        os.rmdir(old)
        os.rename(path, old)  # the previous checkpoint is kept aside, never deleted before the swap
    try:
        os.rename(tmp, path)
    except BaseException:
        if old is not None and not os.path.exists(path):
            os.rename(old, path)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_path(parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    for stale in glob.glob(glob.escape(path) + ".old-*"):  # left by an earlier interrupted save
        shutil.rmtree(stale, ignore_errors=True)
