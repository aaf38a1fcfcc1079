"""What a checkpoint directory holds: its file names, the kinds of model, ``meta.json`` and its SHA-256 manifest.

The layout is described in :mod:`transformer.checkpoint`; this module is the one place that knows the file names,
reads ``meta.json`` (:func:`read_meta`, :func:`read_metadata`), hashes and checks files against the manifest
(:func:`verify_files`), and maps a config to its kind of model (``MODEL_KINDS``, :func:`model_kind`). The
single-file checkpoints (:mod:`~transformer.checkpoint.save`, :mod:`~transformer.checkpoint.load`) and the sharded
ones (:mod:`transformer.distributed`) share it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from .errors import CheckpointError

__all__ = [
    "FORMAT_VERSION",
    "CONFIG_FILE",
    "MODEL_FILE",
    "STATE_TENSORS_FILE",
    "STATE_JSON_FILE",
    "META_FILE",
    "RESERVED_FILES",
    "MODEL_KINDS",
    "DEFAULT_KIND",
    "Checkpoint",
    "import_reference",
    "model_kind",
    "sha256_file",
    "fsync_path",
    "verify_files",
    "read_meta",
    "read_metadata",
]

FORMAT_VERSION = 1
#: The model's configuration (JSON).
CONFIG_FILE = "config.json"
#: The model's weights (safetensors).
MODEL_FILE = "model.safetensors"
#: The manifest: format version, step, kind, and the SHA-256 of every other file (JSON).
META_FILE = "meta.json"
#: The trainer state's tensors (optimizer moments, RNG states; safetensors).
STATE_TENSORS_FILE = "state.safetensors"
#: The trainer state's other values (JSON).
STATE_JSON_FILE = "state.json"
#: The checkpoint's own files: no asset may take one of these names.
RESERVED_FILES = frozenset({CONFIG_FILE, MODEL_FILE, STATE_TENSORS_FILE, STATE_JSON_FILE, META_FILE})

#: The kinds of model a checkpoint may hold: kind -> (config class, builder), as "module:name" (imported on use;
#: the modules are the packages' faces, so that the names stay valid wherever their code lives).
MODEL_KINDS: dict[str, tuple[str, str]] = {
    "encoder_decoder": ("transformer.config:TransformerConfig", "transformer.model:build_model"),
    "lm": ("transformer.lm:LMConfig", "transformer.lm:build_lm"),
}
DEFAULT_KIND = "encoder_decoder"  # config.json files written before there were kinds


def import_reference(reference: str) -> Any:
    """The object a ``"module:name"`` reference of ``MODEL_KINDS`` names."""
    module, name = reference.split(":")
    return getattr(importlib.import_module(module), name)


def model_kind(config: object) -> str:
    """The kind (a key of ``MODEL_KINDS``) whose config class ``config`` is; ValueError for any other object."""
    for kind, (config_class, _) in MODEL_KINDS.items():
        if type(config) is import_reference(config_class):
            return kind
    known = ", ".join(f"{kind} ({ref.split(':')[1]})" for kind, (ref, _) in MODEL_KINDS.items())
    raise ValueError(
        f"model.config must be the config of a known model kind ({known}), got {type(config).__name__} "
        "(build models with make_model or build_lm)"
    )


@dataclass
class Checkpoint:
    """What ``load_checkpoint`` returns (and ``read_sharded_checkpoint``, with ``model`` None: its weights are in
    shards)."""

    path: str
    config: Any  # TransformerConfig or LMConfig (see ``kind``)
    model: nn.Module | None
    trainer_state: dict[str, Any] | None
    metadata: dict[str, Any] = field(default_factory=dict)
    kind: str = DEFAULT_KIND
    assets: list[str] = field(default_factory=list)

    def asset(self, name: str) -> str:
        """The path of asset ``name`` (checked against its SHA-256 when the checkpoint was loaded)."""
        if name not in self.assets:
            raise CheckpointError(
                f"checkpoint {self.path} holds no {name} (assets: {', '.join(self.assets) or 'none'})"
            )
        return os.path.join(self.path, name)


def sha256_file(path: str) -> str:
    """The SHA-256 of the file at ``path`` (hex), as the manifest in ``meta.json`` records it."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_path(path: str) -> None:
    """Flush the file or directory ``path`` to the disk (a directory: its entries, e.g. after a rename)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse to fsync directories
        pass
    finally:
        os.close(fd)


def verify_files(path: str, digests: dict[str, str], skip: Callable[[str], bool] = lambda name: False) -> None:
    """Check every file ``digests`` names (``meta.json``'s manifest: name -> SHA-256) in checkpoint ``path``, except
    those ``skip`` names; raise :class:`CheckpointError` naming the first one that is missing or does not match."""
    for name, digest in digests.items():
        if skip(name):
            continue
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise CheckpointError(f"checkpoint {path} is incomplete: {name} is missing")
        if sha256_file(file) != digest:
            raise CheckpointError(f"checkpoint {path} is corrupt: {name} does not match its recorded SHA-256")


def read_meta(path: str) -> dict[str, Any] | None:
    """``meta.json`` of the checkpoint directory ``path`` as it is (not verified), or None when it is missing,
    unreadable or not a JSON object."""
    try:
        with open(os.path.join(path, META_FILE)) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def read_metadata(path: str) -> dict[str, Any]:
    """The user metadata (task, data settings, results...) recorded in the checkpoint directory ``path``'s
    ``meta.json``; ``{}`` when there is none or it cannot be read (a description, never a verdict on the files)."""
    metadata = (read_meta(path) or {}).get("metadata")
    return metadata if isinstance(metadata, dict) else {}
