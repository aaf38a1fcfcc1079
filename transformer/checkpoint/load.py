"""Reading a checkpoint: JSON with :mod:`json`, tensors with ``safetensors`` (no pickle, no ``torch.load``: loading
never executes code), every file checked against its SHA-256, the config against the model's, the weights for NaN
and infinities."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model
from torch import nn

from .errors import CheckpointError, ConfigMismatchError, NonFiniteWeightsError
from .format import (
    CONFIG_FILE,
    DEFAULT_KIND,
    FORMAT_VERSION,
    META_FILE,
    MODEL_FILE,
    MODEL_KINDS,
    RESERVED_FILES,
    STATE_JSON_FILE,
    STATE_TENSORS_FILE,
    Checkpoint,
    import_reference,
    model_kind,
    verify_files,
)
from .locate import resolve_checkpoint
from .nonfinite import describe_nonfinite, nonfinite_tensors
from .state_codec import decode_state

__all__ = ["read_config", "check_model_matches", "load_checkpoint"]


def read_config(path: str | os.PathLike, *, with_kind: bool = False):
    """The config stored in checkpoint ``path`` (validated): a TransformerConfig or an LMConfig, by the kind
    ``config.json`` names; ``(kind, config)`` with ``with_kind``."""
    path = resolve_checkpoint(os.path.abspath(os.fspath(path)))
    try:
        with open(os.path.join(path, CONFIG_FILE)) as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        kind = data.pop("kind", DEFAULT_KIND)
        if kind not in MODEL_KINDS:
            raise ValueError(f"unknown model kind {kind!r}; known kinds: {', '.join(MODEL_KINDS)}")
        config = import_reference(MODEL_KINDS[kind][0]).from_dict(data)
    except FileNotFoundError as error:
        raise CheckpointError(f"checkpoint {path} is incomplete: {CONFIG_FILE} is missing") from error
    except (json.JSONDecodeError, ValueError, TypeError) as error:
        raise CheckpointError(f"checkpoint {path} has a corrupt {CONFIG_FILE}: {error}") from error
    return (kind, config) if with_kind else config


def check_model_matches(model: nn.Module, kind: str, config: Any, path: str, who: str) -> None:
    """Refuse to load checkpoint ``path`` (of ``kind``, saved with ``config``) into ``model`` when the model is of
    another kind (:class:`CheckpointError`) or another architecture (:class:`ConfigMismatchError`, naming every
    field; run-time fields such as ``attention_backend`` may differ). A model of no known kind is a ValueError
    prefixed by ``who``."""
    try:
        own_kind = model_kind(getattr(model, "config", None))
    except ValueError as error:
        raise ValueError(f"{who}: {error}") from None
    if own_kind != kind:
        raise CheckpointError(
            f"checkpoint {path} holds a model of kind {kind!r}; the model given is of kind {own_kind!r}"
        )
    diff = model.config.differences(config, architecture_only=True)
    if diff:
        raise ConfigMismatchError(diff, path)


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module | None = None,
    *,
    map_location: torch.device | str = "cpu",
    load_trainer_state: bool = True,
    allow_nonfinite: bool = False,
) -> Checkpoint:
    """Load checkpoint ``path`` into ``model`` (or into a new model built from the stored config, returned in eval
    mode as transformers' ``from_pretrained`` returns one; a ``model`` given keeps its mode).

    Raises :class:`ConfigMismatchError` naming every mismatched field when ``model.config``'s architecture
    differs from the stored one (run-time fields such as ``attention_backend`` may differ), and
    :class:`CheckpointError` when files are missing, do not match their recorded SHA-256, or cannot be parsed, or
    when ``model`` is of another kind than the stored one.
    Raises :class:`NonFiniteWeightsError` naming the tensors when a weight is NaN or infinite (a diverged run's);
    with ``allow_nonfinite=True`` such a checkpoint loads with a warning that names them (to inspect it).
    ``path`` is found by :func:`find_checkpoint`'s rule.
    """
    path = resolve_checkpoint(os.path.abspath(os.fspath(path)))
    try:
        with open(os.path.join(path, META_FILE)) as f:
            meta = json.load(f)
    except FileNotFoundError as error:
        raise CheckpointError(f"checkpoint {path} is incomplete: {META_FILE} is missing") from error
    except json.JSONDecodeError as error:
        raise CheckpointError(f"checkpoint {path} has a corrupt {META_FILE}: {error}") from error
    if (
        not isinstance(meta, dict)
        or meta.get("format_version") != FORMAT_VERSION
        or not isinstance(meta.get("sha256"), dict)
    ):
        raise CheckpointError(
            f"checkpoint {path}: {META_FILE} is not a typed-transformer checkpoint of format {FORMAT_VERSION}"
        )
    verify_files(path, meta["sha256"])
    kind, config = read_config(path, with_kind=True)
    built = model is None
    if built:
        model = import_reference(MODEL_KINDS[kind][1])(config)
    else:
        check_model_matches(model, kind, config, path, "load_checkpoint")
    try:
        missing, unexpected = load_model(model, os.path.join(path, MODEL_FILE), strict=True, device=str(map_location))
    except (SafetensorError, RuntimeError, OSError) as error:
        raise CheckpointError(f"checkpoint {path}: cannot load {MODEL_FILE}: {error}") from error
    model.to(map_location)
    if built:
        model.eval()
    bad = nonfinite_tensors(model.state_dict().items())
    if bad:
        message = (
            f"checkpoint {path} holds non-finite weights (NaN or inf) in {describe_nonfinite(bad)}: it was saved "
            "from a run that diverged"
        )
        if not allow_nonfinite:
            raise NonFiniteWeightsError(
                message + " (load_checkpoint(..., allow_nonfinite=True) loads it to inspect)", bad
            )
        warnings.warn(message, stacklevel=2)
    trainer_state = None
    if load_trainer_state and STATE_JSON_FILE in meta["sha256"]:
        try:
            tensors = load_file(os.path.join(path, STATE_TENSORS_FILE))
            with open(os.path.join(path, STATE_JSON_FILE)) as f:
                trainer_state = decode_state(json.load(f), tensors)
        except (SafetensorError, json.JSONDecodeError, KeyError, OSError) as error:
            raise CheckpointError(f"checkpoint {path}: cannot read the training state: {error}") from error
    assets = sorted(name for name in meta["sha256"] if name not in RESERVED_FILES)
    return Checkpoint(
        path=path,
        config=config,
        model=model,
        trainer_state=trainer_state,
        metadata=meta.get("metadata", {}),
        kind=kind,
        assets=assets,
    )
