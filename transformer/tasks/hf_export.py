"""A ``train lm`` checkpoint as a Hugging Face folder (``typed-transformer export``): what transformers'
``AutoModelForCausalLM`` and ``AutoTokenizer`` load, computing our logits and encoding as we encode.

:func:`export_pretrained` writes ``config.json`` and ``model.safetensors``
(:func:`~transformer.lm.pretrained.save_pretrained`), ``generation_config.json``, the tokenizer's ``tokenizer.json``
(the ``tokenizers`` library's file) and ``tokenizer_config.json`` with the special tokens; the bos, eos and padding
ids are in ``config.json`` and ``generation_config.json``.

* A fine-tune of a pretrained folder (``train lm --init DIR``) is written as the architecture it was loaded as, with
  that folder's token ids, ``generation_config.json``, ``tokenizer_config.json`` (its ``chat_template`` included),
  ``chat_template.jinja`` and ``special_tokens_map.json``: every checkpoint of such a run carries them as the asset
  ``pretrained_origin.json`` (:func:`origin_assets`), so the folder may be gone when the fine-tune is exported. A
  checkpoint of before 2026-12-02, which has no such asset, takes them from the folder its metadata names
  (``init``) when it is still there.
* A model trained from scratch is written as the first supported architecture that computes its config (its
  dropouts, which evaluation does not use, set to zero when that is what stands in the way), with our tokenizer's
  special tokens (``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, ``<unk>`` 3). A config no architecture computes (``train lm``'s
  own formulations: sinusoidal or learned positions with a biased head...) is refused naming the closest
  architecture and the fields that differ.

Everything is written into a temporary folder beside ``out_dir`` and renamed into place; an existing ``out_dir``
that is not empty is refused unless ``overwrite=True`` (then replaced whole, never the checkpoint itself).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any

from torch import nn

from ..checkpoint import Checkpoint, load_checkpoint, read_config, resolve_checkpoint, swap_into_place
from ..common.output_dirs import make_temp_dir
from ..data.tokenizers import TOKENIZER_FILE, TextTokenizer
from ..distributed import is_sharded_checkpoint
from ..lm.config import LMConfig
from ..lm.pretrained import ARCHITECTURES, PretrainedFormatError, PretrainedOrigin, save_pretrained
from ..lm.pretrained.config_fields import ConfigFields
from ..lm.pretrained.files import CONFIG_FILE, GENERATION_CONFIG_FILE, read_json
from ..lm.pretrained.supported import architecture_of
from .tokenizer_assets import tokenizer_config, tokenizer_from_checkpoint

__all__ = ["export_pretrained", "origin_assets", "ExportError", "ORIGIN_ASSET"]

#: The asset of a ``train lm --init`` checkpoint that records the pretrained folder it continues.
ORIGIN_ASSET = "pretrained_origin.json"
#: The files of the pretrained folder an export writes again as they were (besides ``config.json``'s token ids
#: and ``generation_config.json``).
_TOKENIZER_FILES = {
    "tokenizer_config": "tokenizer_config.json",
    "special_tokens_map": "special_tokens_map.json",
    "chat_template": "chat_template.jinja",
}
#: LMConfig's fields that only training reads (dropout): zero for an exported model when they keep it from mapping.
_TRAINING_ONLY = {"dropout": 0.0, "attention_dropout": 0.0, "ffn_hidden_dropout": False}


class ExportError(ValueError):
    """A checkpoint that cannot be exported, or a destination that must not be written; the message says why."""


def origin_assets(folder: str | Path, model: nn.Module) -> dict[str, str]:
    """The asset :data:`ORIGIN_ASSET` of a model loaded from the Hugging Face folder ``folder``: its architecture,
    ``config.json`` and ``generation_config.json`` (``model.pretrained_origin``), and the texts of its
    ``tokenizer_config.json``, ``special_tokens_map.json`` and ``chat_template.jinja`` (None where absent)."""
    origin: PretrainedOrigin = model.pretrained_origin
    record = _origin_record(folder, origin.architecture, origin.config, origin.generation_config)
    return {ORIGIN_ASSET: json.dumps(record, sort_keys=True, ensure_ascii=False)}


def _origin_record(folder, architecture: str, config: dict, generation: dict | None) -> dict[str, Any]:
    record: dict[str, Any] = {"architecture": architecture, "config": config, "generation_config": generation}
    for key, name in _TOKENIZER_FILES.items():
        path = Path(folder) / name
        record[key] = path.read_text(encoding="utf-8") if path.is_file() else None
    return record


def _origin(ckpt: Checkpoint) -> dict[str, Any] | None:
    """The pretrained folder a checkpoint continues, as :func:`origin_assets` recorded it; for a checkpoint of
    before the asset, read from the folder of its metadata's ``init`` if it is still there; None for a model trained
    from scratch."""
    if ORIGIN_ASSET in ckpt.assets:
        with open(ckpt.asset(ORIGIN_ASSET), encoding="utf-8") as f:
            return json.load(f)
    folder = ckpt.metadata.get("init")
    if not isinstance(folder, str):
        return None
    if not os.path.isfile(os.path.join(folder, CONFIG_FILE)):
        raise ExportError(
            f"checkpoint {ckpt.path} continues the pretrained folder {folder} (train lm --init), which is gone, and "
            f"was saved before checkpoints recorded it ({ORIGIN_ASSET}): put that folder back to export it"
        )
    raw = read_json(Path(folder) / CONFIG_FILE)
    architecture = architecture_of(ConfigFields(raw, Path(folder) / CONFIG_FILE)).name
    generation = read_json(Path(folder) / GENERATION_CONFIG_FILE, required=False)
    return _origin_record(folder, architecture, raw, generation)


def _architecture(config: LMConfig, path: str) -> tuple[str, LMConfig]:
    """The first architecture that computes ``config`` (with its training-only fields zeroed if needed), and the
    config to write; refused naming the closest architecture and its differing fields."""
    reasons = []
    for candidate in (config, dataclasses.replace(config, **_TRAINING_ONLY)):
        for architecture in ARCHITECTURES.values():
            try:
                architecture.writable(candidate)
                return architecture.name, candidate
            except PretrainedFormatError as error:
                # a config the architecture cannot even write (its config_json refuses at the first field) is
                # farther than one written and read back with its differing fields all named
                compared = "cannot be written as" in str(error)
                reasons.append((not compared, str(error).count("; ") + 1, architecture.name, str(error)))
    _, count, name, reason = min(reasons)
    differ = reason.split(": ", 1)[1]
    raise ExportError(
        f"checkpoint {path}: its model computes what no Hugging Face architecture does; the closest, {name}, differs "
        f"in {count} field(s): {differ} (train lm's formulations have no Hugging Face equivalent; a --init "
        f"fine-tune or a model built with a config of {', '.join(sorted(ARCHITECTURES))} exports)"
    )


def _token_ids(tokenizer: TextTokenizer | None) -> dict[str, Any]:
    """``config.json``'s and ``generation_config.json``'s token ids for a model trained from scratch."""
    if tokenizer is None:
        return {}
    eos = list(tokenizer.eos_ids)
    ids = {"bos_token_id": tokenizer.bos_id, "eos_token_id": eos[0] if len(eos) == 1 else eos}
    ids["pad_token_id"] = tokenizer.pad_id
    return {k: v for k, v in ids.items() if v is not None}


def _write_tokenizer(folder: str, tokenizer: TextTokenizer, origin: dict[str, Any] | None, max_len: int) -> None:
    """``tokenizer.json`` and ``tokenizer_config.json`` (the pretrained folder's, and its other tokenizer files,
    where the checkpoint continues one)."""
    with open(os.path.join(folder, TOKENIZER_FILE), "w", encoding="utf-8") as f:
        f.write(tokenizer.tokenizer.to_str())
    texts = {key: (origin or {}).get(key) for key in _TOKENIZER_FILES}
    if texts["tokenizer_config"] is None:
        texts["tokenizer_config"] = tokenizer_config(tokenizer, max_len)
    for key, name in _TOKENIZER_FILES.items():
        if texts[key] is not None:
            with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
                f.write(texts[key])


def _check_destination(out: str, checkpoint: str, overwrite: bool) -> None:
    """Refuse a destination that is a file, holds anything (unless ``overwrite``), or is or holds the checkpoint."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise ExportError(f"--to {out}: exists and is not a directory")
    real_out = os.path.realpath(out)
    if os.path.commonpath([real_out, os.path.realpath(checkpoint)]) == real_out:
        raise ExportError(f"--to {out}: is the checkpoint {checkpoint} or holds it: export into another folder")
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        raise ExportError(
            f"--to {out}: the folder exists and is not empty ({len(os.listdir(out))} entries): export into a new or "
            "empty folder, or replace it whole with --overwrite (export_pretrained(..., overwrite=True))"
        )


def export_pretrained(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the language model of the ``train lm`` checkpoint ``checkpoint`` (a directory, found as
    :func:`~transformer.checkpoint.find_checkpoint` finds it) as the Hugging Face folder ``out_dir`` (see the module
    docstring); returns the folder. Refused with :class:`ExportError`, before anything is written: a checkpoint of
    another kind of model, a sharded one (consolidate it first), a model no architecture computes, an ``out_dir``
    that exists and is not empty (unless ``overwrite``) or that is or holds the checkpoint."""
    path = resolve_checkpoint(os.path.abspath(os.fspath(checkpoint)))
    out = os.path.abspath(os.fspath(out_dir))
    if is_sharded_checkpoint(path):
        raise ExportError(
            f"checkpoint {path} is sharded (train --strategy fsdp): gather it first with `typed-transformer "
            f"consolidate {path} DIR`, then export DIR"
        )
    kind, config = read_config(path, with_kind=True)
    if kind != "lm":
        raise ExportError(
            f"checkpoint {path} holds a model of kind {kind!r} (an encoder-decoder: train translate or a synthetic "
            "task); export writes a language model (a train lm checkpoint) as a Hugging Face folder"
        )
    _check_destination(out, path, overwrite)
    ckpt = load_checkpoint(path, load_trainer_state=False)
    model = ckpt.model.eval()
    tokenizer = tokenizer_from_checkpoint(ckpt) if TOKENIZER_FILE in ckpt.assets else None
    origin = _origin(ckpt)
    if origin is not None:
        architecture, carried, generation = origin["architecture"], origin["config"], origin["generation_config"]
    else:
        architecture, written = _architecture(config, path)
        model.config = written  # the same parameters: only the dropouts evaluation does not use may differ
        carried, generation = _token_ids(tokenizer), None
    model.pretrained_origin = PretrainedOrigin(Path(path), architecture, carried, generation)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = make_temp_dir(out)
    try:
        save_pretrained(model, tmp, architecture=architecture)
        if tokenizer is not None:
            _write_tokenizer(tmp, tokenizer, origin, model.config.max_len)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    swap_into_place(tmp, out)
    return Path(out)
