"""Checkpoints: safetensors + JSON only, written atomically, loaded without unpickling anything.

A checkpoint is a directory::

    config.json               the model's kind and architecture (config.architecture(): no run-time fields)
    model.safetensors         the weights (safetensors.torch.save_model: tied weights stored once)
    state.safetensors         training-state tensors: optimizer moments, RNG states (optional)
    state.json                the rest of the training state as JSON; tensors appear as {"__tensor__": key}
    tokenizer.json ...        assets saved with the model, e.g. its tokenizer (optional)
    meta.json                 format version, user metadata (task, vocabulary...) and a SHA-256 per file

``config.json`` names the model's kind (``MODEL_KINDS``): ``"encoder_decoder"`` (a
:class:`~transformer.config.TransformerConfig`, built by :func:`~transformer.model.build_model`) or ``"lm"`` (an
:class:`~transformer.lm.config.LMConfig`, built by :func:`~transformer.lm.build_lm`). A ``config.json`` without a
kind, as written before there were two, is an encoder-decoder.

``save_checkpoint`` writes everything into a fresh temporary directory beside the target, fsyncs
it, then swaps it in with two ``rename`` calls; the previous checkpoint is renamed aside first and
deleted only after the new one is in place, so an interrupted save never destroys it (and
``load_checkpoint`` falls back to that aside copy if a crash hit between the two renames).

``load_checkpoint`` reads JSON with :mod:`json` and tensors with ``safetensors.torch.load_file``;
no pickle and no ``torch.load`` is involved, so loading a checkpoint never executes code. It refuses weights that
are NaN or infinite (a diverged run's), naming the tensors, unless asked to load them anyway.

Where the checkpoint of a directory is (``--resume``, a torchrun restart, loading) follows one rule,
:func:`find_checkpoint`. A disk that is full or read-only during a save raises
:class:`~transformer.common.output_dirs.OutputWriteError` (one sentence: the path, the space needed, that the previous
checkpoint is intact); temporary directories of interrupted saves are removed by the next save when provably
leftovers (:mod:`transformer.common.output_dirs`).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from ..common.output_dirs import is_write_failure, make_temp_dir, remove_stale_temps, write_failure

__all__ = ["Checkpoint", "CheckpointError", "ConfigMismatchError", "NonFiniteWeightsError", "save_checkpoint",
           "load_checkpoint", "find_checkpoint", "FORMAT_VERSION"]

FORMAT_VERSION = 1
_CONFIG, _MODEL, _STATE_T, _STATE_J, _META = "config.json", "model.safetensors", "state.safetensors", "state.json", "meta.json"


#: The kinds of model a checkpoint may hold: kind -> (config class, builder), as "module:name" (imported on use).
MODEL_KINDS: dict[str, tuple[str, str]] = {
    "encoder_decoder": ("transformer.config:TransformerConfig", "transformer.model:build_model"),
    "lm": ("transformer.lm.config:LMConfig", "transformer.lm.model:build_lm"),
}
_DEFAULT_KIND = "encoder_decoder"  # config.json files written before there were kinds
_RESERVED = {_CONFIG, _MODEL, _STATE_T, _STATE_J, _META}


def _load(reference: str):
    import importlib

    module, name = reference.split(":")
    return getattr(importlib.import_module(module), name)


def model_kind(config: object) -> str:
    """The kind (a key of ``MODEL_KINDS``) whose config class ``config`` is; ValueError for any other object."""
    for kind, (config_class, _) in MODEL_KINDS.items():
        if type(config) is _load(config_class):
            return kind
    known = ", ".join(f"{kind} ({ref.split(':')[1]})" for kind, (ref, _) in MODEL_KINDS.items())
    raise ValueError(f"model.config must be the config of a known model kind ({known}), got {type(config).__name__} "
                     "(build models with make_model or build_lm)")


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or corrupt."""


class ConfigMismatchError(CheckpointError):
    """A checkpoint was saved from a model with another config; ``fields`` maps name -> (model, checkpoint)."""

    def __init__(self, fields: dict[str, tuple[Any, Any]], path: str) -> None:
        self.fields = fields
        listing = ", ".join(f"{name} (model {a!r}, checkpoint {b!r})" for name, (a, b) in sorted(fields.items()))
        super().__init__(f"checkpoint {path} was saved from a model with another config; mismatched fields: {listing}")


class NonFiniteWeightsError(CheckpointError):
    """A checkpoint (or a model about to be saved) holds NaN or infinite weights; ``tensors`` lists
    ``(name, count of non-finite values, size)``."""

    def __init__(self, message: str, tensors: list[tuple[str, int, int]]) -> None:
        super().__init__(message)
        self.tensors = tensors


def nonfinite_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, int, int]]:
    """``(name, non-finite values, size)`` of each floating tensor of ``named`` holding a NaN or an infinity.

    One read-back for all the tensors (on a GPU: one synchronisation). A sharded tensor (FSDP's DTensor) is
    checked on this rank's shard."""
    names, counts, sizes = [], [], []
    for name, tensor in named:
        if not isinstance(tensor, torch.Tensor) or not (tensor.is_floating_point() or tensor.is_complex()):
            continue
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        names.append(name)
        counts.append((~torch.isfinite(local.detach())).sum())
        sizes.append(local.numel())
    if not names:
        return []
    totals = torch.stack([c.to("cpu") if c.device.type != "cpu" else c for c in counts]).tolist()
    return [(name, int(n), size) for name, n, size in zip(names, totals, sizes) if n]


def describe_nonfinite(bad: list[tuple[str, int, int]], shown: int = 3) -> str:
    """``"2 tensors: a.weight (3 of 64 values), b.bias (all 8 values)"`` for ``nonfinite_tensors``' list."""
    parts = [f"{name} ({f'all {size}' if n == size else f'{n} of {size}'} values)" for name, n, size in bad[:shown]]
    more = f" and {len(bad) - shown} more" if len(bad) > shown else ""
    return f"{len(bad)} tensor{'s' if len(bad) != 1 else ''}: {', '.join(parts)}{more}"


@dataclass
class Checkpoint:
    """What ``load_checkpoint`` returns (and ``read_sharded_checkpoint``, with ``model`` None: its weights are in
    shards)."""

    path: str
    config: Any  # TransformerConfig or LMConfig (see ``kind``)
    model: nn.Module | None
    trainer_state: dict[str, Any] | None
    metadata: dict[str, Any] = field(default_factory=dict)
    kind: str = _DEFAULT_KIND
    assets: list[str] = field(default_factory=list)

    def asset(self, name: str) -> str:
        """The path of asset ``name`` (checked against its SHA-256 when the checkpoint was loaded)."""
        if name not in self.assets:
            raise CheckpointError(f"checkpoint {self.path} holds no {name} (assets: {', '.join(self.assets) or 'none'})")
        return os.path.join(self.path, name)


# ---------------------------------------------------------------------------- JSON + tensors codec
def encode_state(obj: Any, tensors: dict[str, torch.Tensor], path: str = "") -> Any:
    """``obj`` (tensors and JSON values in dicts, lists and tuples: a training state) as a JSON value in which each
    tensor is ``{"__tensor__": key}``, the tensor itself put in ``tensors[key]`` (for ``safetensors``); tuples and
    dicts with non-string keys are tagged (``__tuple__``, ``__items__``) so that :func:`decode_state` gives them
    back. ``path`` prefixes the keys. Anything else raises ``TypeError`` naming where it is."""
    if isinstance(obj, torch.Tensor):
        key = path or "root"
        tensors[key] = obj.detach().cpu().contiguous()
        return {"__tensor__": key}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and "__tensor__" not in obj and "__tuple__" not in obj and "__items__" not in obj:
            return {k: encode_state(v, tensors, f"{path}.{k}") for k, v in obj.items()}
        return {"__items__": [[encode_state(k, tensors, f"{path}.k{i}"), encode_state(v, tensors, f"{path}.{k}")] for i, (k, v) in enumerate(obj.items())]}
    if isinstance(obj, tuple):
        return {"__tuple__": [encode_state(v, tensors, f"{path}.{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode_state(v, tensors, f"{path}.{i}") for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot store a {type(obj).__name__} at {path or 'root'} in a checkpoint (only tensors and JSON values)")


def decode_state(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The inverse of :func:`encode_state`: the JSON value ``obj`` with its tensor references looked up in
    ``tensors`` and its tuples and non-string-keyed dicts restored."""
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            return tensors[obj["__tensor__"]]
        if set(obj) == {"__tuple__"}:
            return tuple(decode_state(v, tensors) for v in obj["__tuple__"])
        if set(obj) == {"__items__"}:
            return {decode_state(k, tensors): decode_state(v, tensors) for k, v in obj["__items__"]}
        return {k: decode_state(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_state(v, tensors) for v in obj]
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
    assets: dict[str, bytes | str] | None = None,
    allow_nonfinite: bool = False,
) -> str:
    """Atomically write ``model`` (its ``config`` and weights) and optional training state to directory ``path``.

    ``assets`` maps file names to contents (bytes, or str written as UTF-8), e.g. ``{"tokenizer.json": ...}``: they
    are written beside the weights and covered by the SHA-256 manifest. A model's own ``checkpoint_assets``
    attribute (the same mapping) is saved too, so whatever saves the model (a Trainer, a distributed strategy) keeps
    its tokenizer with it. Returns the path. The previous checkpoint at
    ``path``, if any, survives any interruption, and a full or read-only disk
    (:class:`~transformer.common.output_dirs.OutputWriteError`, one sentence). Weights that are NaN or infinite are refused (:class:`NonFiniteWeightsError`, naming the tensors;
    nothing is written) unless ``allow_nonfinite``.
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
            raise NonFiniteWeightsError(f"save_checkpoint: refusing to save non-finite weights (NaN or inf) in "
                                        f"{describe_nonfinite(bad)} to {path}; {kept_message(path)}", bad)
    assets = {**getattr(model, "checkpoint_assets", {}), **(assets or {})}
    for name in assets:
        if name in _RESERVED or os.path.basename(name) != name or name.startswith("."):
            raise ValueError(f"save_checkpoint: asset name {name!r} must be a plain file name other than "
                             f"{', '.join(sorted(_RESERVED))}")
    parent = os.path.dirname(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise CheckpointError(f"checkpoint path {path} exists and is not a directory")
    tmp = None
    try:
        os.makedirs(parent, exist_ok=True)
        remove_stale_temps(path)  # what an interrupted save of a process that no longer exists left behind
        tmp = make_temp_dir(path)
        with open(os.path.join(tmp, _CONFIG), "w") as f:
            json.dump({"kind": kind, **config.architecture()}, f, indent=2, sort_keys=True)
        save_model(model, os.path.join(tmp, _MODEL))
        files = [_CONFIG, _MODEL]
        for name, content in sorted(assets.items()):
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(content.encode("utf-8") if isinstance(content, str) else content)
            files.append(name)
        if trainer_state is not None:
            tensors: dict[str, torch.Tensor] = {}
            encoded = encode_state(trainer_state, tensors, "")
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
    except BaseException as error:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if is_write_failure(error):
            needed = _tensor_bytes(model.state_dict()) + _tensor_bytes(trainer_state)
            raise write_failure(error, "the checkpoint", path, needed=needed, kept=kept_message(path)) from None
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


def _tensor_bytes(obj: Any) -> int:
    """The bytes of every tensor in ``obj`` (dicts, lists and tuples of tensors and other values)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def checkpoint_step(path: str) -> int | None:
    """The training step the checkpoint directory ``path`` holds (from its ``state.json``), None if it has none."""
    try:
        with open(os.path.join(path, _STATE_J)) as f:
            step = json.load(f)["step"]
        return step if isinstance(step, int) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def kept_message(path: str) -> str:
    """What a failed save to ``path`` leaves: the previous checkpoint (intact, with its step), or nothing."""
    found = find_checkpoint(path)
    if found is None:
        return "there was no checkpoint there before, and nothing was left behind"
    step = checkpoint_step(found)
    return f"the previous checkpoint in {found}{'' if step is None else f' (step {step})'} is intact"


# ---------------------------------------------------------------------------- load
def find_checkpoint(path: str | os.PathLike) -> str | None:
    """Where the checkpoint of directory ``path`` is: ``path`` when it holds ``meta.json``; else, when ``path`` does
    not exist, the newest copy that an interrupted save left aside (``path.old-*``: a crash between the save's two
    renames) holding a ``meta.json``; else None.

    The one rule by which ``--resume``, a torchrun restart (``--max-restarts``), :func:`load_checkpoint` and the
    sharded loaders find a checkpoint, and by which ``train`` tells that ``--out`` already holds one."""
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        return path if os.path.isfile(os.path.join(path, _META)) else None
    if os.path.exists(path):
        return None
    aside = sorted(glob.glob(glob.escape(path) + ".old-*"), key=os.path.getmtime, reverse=True)
    for candidate in aside:
        if os.path.isfile(os.path.join(candidate, _META)):
            return candidate
    return None


def _checkpoint_dir(path: str, stacklevel: int) -> str | None:
    """The checkpoint :func:`find_checkpoint` finds (with a warning when it is a copy left aside, attributed
    ``stacklevel`` frames above the caller); ``path`` itself when it is a directory without ``meta.json`` (reading it
    names what is missing); None when nothing is there. The one rule of single-file and sharded checkpoints."""
    found = find_checkpoint(path)
    if found is not None:
        if found != path:
            warnings.warn(f"checkpoint {path} is missing; using {found} left by an interrupted save",
                          stacklevel=stacklevel + 1)
        return found
    return path if os.path.isdir(path) else None


def _resolve(path: str) -> str:
    """:func:`_checkpoint_dir`, or an error naming what is at ``path`` instead of a checkpoint."""
    found = _checkpoint_dir(path, stacklevel=3)
    if found is not None:
        return found
    if os.path.exists(path):
        raise CheckpointError(f"checkpoint {path} is not a directory")
    raise CheckpointError(f"no checkpoint at {path} (expected a directory with {_META}, {_CONFIG} and {_MODEL})")


def read_config(path: str | os.PathLike, *, with_kind: bool = False):
    """The config stored in checkpoint ``path`` (validated): a TransformerConfig or an LMConfig, by the kind
    ``config.json`` names; ``(kind, config)`` with ``with_kind``."""
    path = _resolve(os.path.abspath(os.fspath(path)))
    try:
        with open(os.path.join(path, _CONFIG)) as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        kind = data.pop("kind", _DEFAULT_KIND)
        if kind not in MODEL_KINDS:
            raise ValueError(f"unknown model kind {kind!r}; known kinds: {', '.join(MODEL_KINDS)}")
        config = _load(MODEL_KINDS[kind][0]).from_dict(data)
    except FileNotFoundError as error:
        raise CheckpointError(f"checkpoint {path} is incomplete: {_CONFIG} is missing") from error
    except (json.JSONDecodeError, ValueError, TypeError) as error:
        raise CheckpointError(f"checkpoint {path} has a corrupt {_CONFIG}: {error}") from error
    return (kind, config) if with_kind else config


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module | None = None,
    *,
    map_location: torch.device | str = "cpu",
    load_trainer_state: bool = True,
    allow_nonfinite: bool = False,
) -> Checkpoint:
    """Load checkpoint ``path`` into ``model`` (or into a new model built from the stored config).

    Raises :class:`ConfigMismatchError` naming every mismatched field when ``model.config``'s architecture
    differs from the stored one (run-time fields such as ``attention_backend`` may differ), and :class:`CheckpointError` when files are missing, do not
    match their recorded SHA-256, or cannot be parsed, or when ``model`` is of another kind than the stored one.
    Raises :class:`NonFiniteWeightsError` naming the tensors when a weight is NaN or infinite (a diverged run's);
    with ``allow_nonfinite=True`` such a checkpoint loads with a warning that names them (to inspect it).
    ``path`` is found by :func:`find_checkpoint`'s rule.
    """
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
    kind, config = read_config(path, with_kind=True)
    if model is None:
        model = _load(MODEL_KINDS[kind][1])(config)
    else:
        try:
            own_kind = model_kind(getattr(model, "config", None))
        except ValueError as error:
            raise ValueError(f"load_checkpoint: {error}") from None
        if own_kind != kind:
            raise CheckpointError(f"checkpoint {path} holds a model of kind {kind!r}; the model given is of kind {own_kind!r}")
        diff = model.config.differences(config, architecture_only=True)
        if diff:
            raise ConfigMismatchError(diff, path)
    try:
        missing, unexpected = load_model(model, os.path.join(path, _MODEL), strict=True, device=str(map_location))
    except (SafetensorError, RuntimeError, OSError) as error:
        raise CheckpointError(f"checkpoint {path}: cannot load {_MODEL}: {error}") from error
    model.to(map_location)
    bad = nonfinite_tensors(model.state_dict().items())
    if bad:
        message = (f"checkpoint {path} holds non-finite weights (NaN or inf) in {describe_nonfinite(bad)}: it was saved "
                   "from a run that diverged")
        if not allow_nonfinite:
            raise NonFiniteWeightsError(message + " (load_checkpoint(..., allow_nonfinite=True) loads it to inspect)",
                                        bad)
        warnings.warn(message, stacklevel=2)
    trainer_state = None
    if load_trainer_state and _STATE_J in meta["sha256"]:
        try:
            tensors = load_file(os.path.join(path, _STATE_T))
            with open(os.path.join(path, _STATE_J)) as f:
                trainer_state = decode_state(json.load(f), tensors)
        except (SafetensorError, json.JSONDecodeError, KeyError, OSError) as error:
            raise CheckpointError(f"checkpoint {path}: cannot read the training state: {error}") from error
    assets = sorted(name for name in meta["sha256"] if name not in _RESERVED)
    return Checkpoint(path=path, config=config, model=model, trainer_state=trainer_state, metadata=meta.get("metadata", {}),
                      kind=kind, assets=assets)
