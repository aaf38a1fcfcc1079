"""Checkpoints: safetensors + JSON only, written atomically, loaded without unpickling anything.

A checkpoint is a directory::

    config.json               the model's TransformerConfig (TransformerConfig.to_json)
    model.safetensors         the weights (safetensors.torch.save_model: tied weights stored once)
    state.safetensors         training-state tensors: optimizer moments, RNG states (optional)
    state.json                the rest of the training state as JSON; tensors appear as {"__tensor__": key}
    meta.json                 format version, user metadata (task, vocabulary...) and a SHA-256 per file

``save_checkpoint`` writes everything into a fresh temporary directory beside the target, fsyncs
it, then swaps it in with two ``rename`` calls; the previous checkpoint is renamed aside first and
deleted only after the new one is in place, so an interrupted save never destroys it (and
``load_checkpoint`` falls back to that aside copy if a crash hit between the two renames).

``load_checkpoint`` reads JSON with :mod:`json` and tensors with ``safetensors.torch.load_file``;
no pickle and no ``torch.load`` is involved, so loading a checkpoint never executes code.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from .config import TransformerConfig

__all__ = ["Checkpoint", "CheckpointError", "ConfigMismatchError", "save_checkpoint", "load_checkpoint", "FORMAT_VERSION"]

FORMAT_VERSION = 1
_CONFIG, _MODEL, _STATE_T, _STATE_J, _META = "config.json", "model.safetensors", "state.safetensors", "state.json", "meta.json"


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or corrupt."""


class ConfigMismatchError(CheckpointError):
    """A checkpoint was saved from a model with another config; ``fields`` maps name -> (model, checkpoint)."""

    def __init__(self, fields: dict[str, tuple[Any, Any]], path: str) -> None:
        self.fields = fields
        listing = ", ".join(f"{name} (model {a!r}, checkpoint {b!r})" for name, (a, b) in sorted(fields.items()))
        super().__init__(f"checkpoint {path} was saved from a model with another config; mismatched fields: {listing}")


@dataclass
class Checkpoint:
    """What ``load_checkpoint`` returns."""

    path: str
    config: TransformerConfig
    model: nn.Module
    trainer_state: dict[str, Any] | None
    metadata: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------- JSON + tensors codec
def _encode(obj: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    if isinstance(obj, torch.Tensor):
        key = path or "root"
        tensors[key] = obj.detach().cpu().contiguous()
        return {"__tensor__": key}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and "__tensor__" not in obj and "__tuple__" not in obj and "__items__" not in obj:
            return {k: _encode(v, tensors, f"{path}.{k}") for k, v in obj.items()}
        return {"__items__": [[_encode(k, tensors, f"{path}.k{i}"), _encode(v, tensors, f"{path}.{k}")] for i, (k, v) in enumerate(obj.items())]}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, tensors, f"{path}.{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, tensors, f"{path}.{i}") for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot store a {type(obj).__name__} at {path or 'root'} in a checkpoint (only tensors and JSON values)")


def _decode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            return tensors[obj["__tensor__"]]
        if set(obj) == {"__tuple__"}:
            return tuple(_decode(v, tensors) for v in obj["__tuple__"])
        if set(obj) == {"__items__"}:
            return {_decode(k, tensors): _decode(v, tensors) for k, v in obj["__items__"]}
        return {k: _decode(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    return obj


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse to fsync directories
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- save
def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    *,
    trainer_state: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> str:
    """Atomically write ``model`` (its ``config`` and weights) and optional training state to directory ``path``.

    Returns the path. The previous checkpoint at ``path``, if any, survives any interruption.
    """
    path = os.path.abspath(os.fspath(path))
    config = getattr(model, "config", None)
    if not isinstance(config, TransformerConfig):
        raise ValueError("save_checkpoint: model.config must be a TransformerConfig (build models with make_model)")
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    if os.path.exists(path) and not os.path.isdir(path):
        raise CheckpointError(f"checkpoint path {path} exists and is not a directory")
    tmp = tempfile.mkdtemp(prefix=os.path.basename(path) + ".tmp-", dir=parent)
    try:
        with open(os.path.join(tmp, _CONFIG), "w") as f:
            f.write(config.to_json(indent=2, sort_keys=True))
        save_model(model, os.path.join(tmp, _MODEL))
        files = [_CONFIG, _MODEL]
        if trainer_state is not None:
            tensors: dict[str, torch.Tensor] = {}
            encoded = _encode(trainer_state, tensors, "")
            save_file(tensors, os.path.join(tmp, _STATE_T))
            with open(os.path.join(tmp, _STATE_J), "w") as f:
                json.dump(encoded, f)
            files += [_STATE_T, _STATE_J]
        meta = {
            "format": "typed-transformer checkpoint",
            "format_version": FORMAT_VERSION,
            "metadata": metadata or {},
            "sha256": {name: _sha256(os.path.join(tmp, name)) for name in files},
        }
        with open(os.path.join(tmp, _META), "w") as f:
            json.dump(meta, f, indent=2)
        for name in files + [_META]:
            _fsync(os.path.join(tmp, name))
        _fsync(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
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
    _fsync(parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    for stale in glob.glob(glob.escape(path) + ".old-*"):  # left by an earlier interrupted save
        shutil.rmtree(stale, ignore_errors=True)
    return path


# ---------------------------------------------------------------------------- load
def _resolve(path: str) -> str:
    """``path`` itself, or the copy a crashed save left aside (``path.old-*``) if ``path`` is gone."""
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise CheckpointError(f"checkpoint {path} is not a directory")
    aside = sorted(glob.glob(glob.escape(path) + ".old-*"), key=os.path.getmtime, reverse=True)
    for candidate in aside:
        if os.path.isfile(os.path.join(candidate, _META)):
            warnings.warn(f"checkpoint {path} is missing; using {candidate} left by an interrupted save", stacklevel=3)
            return candidate
    raise CheckpointError(f"no checkpoint at {path} (expected a directory with {_META}, {_CONFIG} and {_MODEL})")


def read_config(path: str | os.PathLike) -> TransformerConfig:
    """The TransformerConfig stored in checkpoint ``path`` (validated)."""
    path = _resolve(os.path.abspath(os.fspath(path)))
    try:
        with open(os.path.join(path, _CONFIG)) as f:
            return TransformerConfig.from_json(f.read())
    except FileNotFoundError as error:
        raise CheckpointError(f"checkpoint {path} is incomplete: {_CONFIG} is missing") from error
    except (json.JSONDecodeError, ValueError, TypeError) as error:
        raise CheckpointError(f"checkpoint {path} has a corrupt {_CONFIG}: {error}") from error


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module | None = None,
    *,
    map_location: torch.device | str = "cpu",
    load_trainer_state: bool = True,
) -> Checkpoint:
    """Load checkpoint ``path`` into ``model`` (or into a new model built from the stored config).

    Raises :class:`ConfigMismatchError` naming every mismatched field when ``model.config``
    differs from the stored config, and :class:`CheckpointError` when files are missing, do not
    match their recorded SHA-256, or cannot be parsed.
    """
    from .model import build_model

    path = _resolve(os.path.abspath(os.fspath(path)))
    try:
        with open(os.path.join(path, _META)) as f:
            meta = json.load(f)
    except FileNotFoundError as error:
        raise CheckpointError(f"checkpoint {path} is incomplete: {_META} is missing") from error
    except json.JSONDecodeError as error:
        raise CheckpointError(f"checkpoint {path} has a corrupt {_META}: {error}") from error
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION or not isinstance(meta.get("sha256"), dict):
        raise CheckpointError(f"checkpoint {path}: {_META} is not a typed-transformer checkpoint of format {FORMAT_VERSION}")
    for name, digest in meta["sha256"].items():
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise CheckpointError(f"checkpoint {path} is incomplete: {name} is missing")
        if _sha256(file) != digest:
            raise CheckpointError(f"checkpoint {path} is corrupt: {name} does not match its recorded SHA-256")
    config = read_config(path)
    if model is None:
        model = build_model(config)
    else:
        own = getattr(model, "config", None)
        if not isinstance(own, TransformerConfig):
            raise ValueError("load_checkpoint: model.config must be a TransformerConfig")
        diff = own.differences(config)
        if diff:
            raise ConfigMismatchError(diff, path)
    try:
        missing, unexpected = load_model(model, os.path.join(path, _MODEL), strict=True, device=str(map_location))
    except (SafetensorError, RuntimeError, OSError) as error:
        raise CheckpointError(f"checkpoint {path}: cannot load {_MODEL}: {error}") from error
    model.to(map_location)
    trainer_state = None
    if load_trainer_state and _STATE_J in meta["sha256"]:
        try:
            tensors = load_file(os.path.join(path, _STATE_T))
            with open(os.path.join(path, _STATE_J)) as f:
                trainer_state = _decode(json.load(f), tensors)
        except (SafetensorError, json.JSONDecodeError, KeyError, OSError) as error:
            raise CheckpointError(f"checkpoint {path}: cannot read the training state: {error}") from error
    return Checkpoint(path=path, config=config, model=model, trainer_state=trainer_state, metadata=meta.get("metadata", {}))
