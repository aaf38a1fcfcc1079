"""Sharded (FSDP) checkpoints on disk: the files rank 0 adds to the shards, verification, consolidation.

Every rank writes its shards of the weights and of the optimizer state with ``torch.distributed.checkpoint`` (DCP)
into ``dcp/`` of a temporary directory (:class:`~transformer.distributed.FSDPStrategy` does that part); rank 0 adds
``config.json`` (with the model's kind), the model's assets (e.g. ``tokenizer.json``), the rest of the training
state (``state.json`` + ``state.safetensors``) and ``meta.json`` with the SHA-256 of every file
(:func:`write_sharded_files`), then swaps the directory into place (:func:`~transformer.checkpoint.swap_into_place`), as
``save_checkpoint`` does. :func:`consolidate_checkpoint` gathers the shards into the single-file format.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import torch
from torch import nn

from ..checkpoint import (
    CONFIG_FILE,
    META_FILE,
    MODEL_KINDS,
    STATE_JSON_FILE,
    STATE_TENSORS_FILE,
    Checkpoint,
    CheckpointError,
    checkpoint_dir,
    decode_state,
    fsync_path,
    import_reference,
    model_kind,
    read_config,
    read_meta,
    sha256_file,
    verify_files,
)

__all__ = [
    "SHARDED_FORMAT",
    "SHARDED_FORMAT_VERSION",
    "build_model",
    "consolidate_checkpoint",
    "dcp_directory",
    "is_sharded_checkpoint",
    "read_sharded_checkpoint",
    "read_sharded_state",
    "resolve_sharded",
    "sharded_world",
    "verify_sharded",
    "write_sharded_files",
]

#: ``meta.json``'s ``format`` in a sharded (FSDP) checkpoint.
SHARDED_FORMAT = "typed-transformer sharded checkpoint"
SHARDED_FORMAT_VERSION = 1
_DCP_DIR = "dcp"


def dcp_directory(path: str) -> str:
    """Where the shards of the checkpoint (or temporary directory) ``path`` are."""
    return os.path.join(path, _DCP_DIR)


def build_model(config: Any) -> nn.Module:
    """A new model of ``config``'s kind (``transformer.checkpoint.MODEL_KINDS``), leaving the caller's RNG alone."""
    with torch.random.fork_rng(devices=[]):  # building draws initial weights that are overwritten at once
        return import_reference(MODEL_KINDS[model_kind(config)][1])(config)


# ---------------------------------------------------------------------------- writing
def write_sharded_files(
    tmp: str,
    model: nn.Module,
    encoded: Any,
    tensors: dict[str, torch.Tensor],
    metadata: dict[str, Any],
    world_size: int,
    step: int,
) -> None:
    """Rank 0's part of a sharded checkpoint: the config (with the model's kind, as ``save_checkpoint`` writes it),
    the model's assets (``checkpoint_assets``, e.g. a tokenizer), the trainer state (``encoded`` and ``tensors``, as
    :func:`~transformer.checkpoint.encode_state` gives them) and ``meta.json``."""
    from safetensors.torch import save_file

    with open(os.path.join(tmp, CONFIG_FILE), "w") as f:
        json.dump({"kind": model_kind(model.config), **model.config.architecture()}, f, indent=2, sort_keys=True)
    assets = dict(getattr(model, "checkpoint_assets", None) or {})
    for name, content in sorted(assets.items()):
        if (
            name in (CONFIG_FILE, META_FILE, STATE_TENSORS_FILE, STATE_JSON_FILE, _DCP_DIR)
            or os.path.basename(name) != name
        ):
            raise ValueError(
                f"checkpoint asset name {name!r} must be a plain file name other than the checkpoint's own"
            )
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(content.encode("utf-8") if isinstance(content, str) else content)
    save_file(tensors, os.path.join(tmp, STATE_TENSORS_FILE))
    with open(os.path.join(tmp, STATE_JSON_FILE), "w") as f:
        json.dump(encoded, f)
    files = [CONFIG_FILE, STATE_TENSORS_FILE, STATE_JSON_FILE, *sorted(assets)] + sorted(
        os.path.join(_DCP_DIR, name) for name in os.listdir(os.path.join(tmp, _DCP_DIR))
    )
    meta = {
        "format": SHARDED_FORMAT,
        "format_version": SHARDED_FORMAT_VERSION,
        "strategy": "fsdp",
        "world_size": world_size,
        "step": step,
        "metadata": metadata or {},
        "assets": sorted(assets),
        "sha256": {name: sha256_file(os.path.join(tmp, name)) for name in files},
    }
    with open(os.path.join(tmp, META_FILE), "w") as f:
        json.dump(meta, f, indent=2)
    for name in files + [META_FILE]:
        fsync_path(os.path.join(tmp, name))
    fsync_path(os.path.join(tmp, _DCP_DIR))
    fsync_path(tmp)


# ---------------------------------------------------------------------------- reading
def resolve_sharded(path: str) -> str:
    """The checkpoint :func:`~transformer.checkpoint.find_checkpoint` finds for ``path`` (the one rule: ``path``, or
    the copy an interrupted save left aside, ``path.old-*``, with a warning); ``path`` itself when it is a directory
    without ``meta.json`` (verifying names what is missing)."""
    found = checkpoint_dir(path, stacklevel=3)
    if found is None:
        raise CheckpointError(f"no checkpoint at {path}")
    return found


def is_sharded_checkpoint(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a sharded (FSDP) checkpoint."""
    path = os.path.abspath(os.fspath(path))
    try:
        path = resolve_sharded(path)
    except ValueError:  # CheckpointError: nothing there
        return False
    meta = read_meta(path)
    return meta is not None and meta.get("format") == SHARDED_FORMAT


def sharded_world(path: str) -> Any:
    """The world size a sharded checkpoint was saved on (``"?"`` when unreadable)."""
    meta = read_meta(path) or {}
    return meta.get("world_size", "?")


def verify_sharded(path: str, *, weights: bool = True) -> dict[str, Any]:
    """``meta.json`` of the sharded checkpoint ``path``, after checking every file against its recorded SHA-256
    (with ``weights=False`` only the config and the assets); raises :class:`~transformer.checkpoint.CheckpointError`
    naming the file."""
    meta = read_meta(path)
    if meta is None:
        raise CheckpointError(f"checkpoint {path} is incomplete or corrupt: {META_FILE} is missing or unreadable")
    if meta.get("format") != SHARDED_FORMAT:
        raise CheckpointError(
            f"checkpoint {path} is not sharded (it is a single-file checkpoint: load it with "
            "load_checkpoint, or resume it with --strategy ddp or on one process)"
        )
    if meta.get("format_version") != SHARDED_FORMAT_VERSION or not isinstance(meta.get("sha256"), dict):
        raise CheckpointError(f"checkpoint {path}: unknown sharded format version {meta.get('format_version')!r}")
    if weights:
        verify_files(path, meta["sha256"])
    else:
        verify_files(
            path,
            meta["sha256"],
            lambda name: name in (STATE_TENSORS_FILE, STATE_JSON_FILE) or name.startswith(_DCP_DIR + "/"),
        )
    return meta


def read_sharded_state(path: str) -> dict[str, Any]:
    """The trainer state rank 0 wrote beside the shards (``state.json`` + ``state.safetensors``), decoded."""
    from safetensors.torch import load_file

    with open(os.path.join(path, STATE_JSON_FILE)) as f:
        return decode_state(json.load(f), load_file(os.path.join(path, STATE_TENSORS_FILE)))


def read_sharded_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """What a sharded checkpoint says besides its weights: config, kind, metadata and assets (e.g. the tokenizer a
    resumed language model must keep), each file checked against its SHA-256. ``model`` and ``trainer_state`` are
    None: the weights are in shards (resume under torchrun, or :func:`consolidate_checkpoint` them)."""
    path = resolve_sharded(os.path.abspath(os.fspath(path)))
    meta = verify_sharded(path, weights=False)
    kind, config = read_config(path, with_kind=True)
    return Checkpoint(
        path=path,
        config=config,
        model=None,
        trainer_state=None,
        metadata=meta.get("metadata", {}),
        kind=kind,
        assets=list(meta.get("assets", [])),
    )


def consolidate_checkpoint(src: str | os.PathLike, dst: str | os.PathLike) -> str:
    """Gather the shards of the sharded checkpoint ``src`` into a single-file checkpoint ``dst`` (weights, config,
    assets such as a tokenizer, and metadata: what ``load_checkpoint``, ``decode`` and ``generate`` read). Runs in
    one process, no process group needed; the write is atomic (``save_checkpoint``). Returns ``dst``."""
    import torch.distributed.checkpoint as dcp

    from ..checkpoint import save_checkpoint

    src = resolve_sharded(os.path.abspath(os.fspath(src)))
    meta = verify_sharded(src)
    model = build_model(read_config(src))
    assets = {}
    for name in meta.get("assets", []):
        with open(os.path.join(src, name), "rb") as f:
            assets[name] = f.read()
    state = model.state_dict()  # full tensors, filled in place from every rank's shards
    try:
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.simplefilter("ignore", UserWarning)
            dcp.load({"model": state}, storage_reader=dcp.FileSystemReader(os.path.join(src, _DCP_DIR)), no_dist=True)
    except Exception as error:
        raise CheckpointError(f"checkpoint {src}: cannot gather the model's shards: {error}") from error
    return save_checkpoint(dst, model, metadata=meta.get("metadata", {}), assets=assets)
