"""Writing a :class:`~transformer.lm.model.TransformerLM` as a Hugging Face checkpoint folder that transformers'
own ``from_pretrained`` loads, computing the same logits.

The folder holds ``config.json`` (``architectures``, ``model_type``, the fields of the architecture and the
weights' ``dtype``), ``model.safetensors`` (their tensor names and layouts; a tied head is written once, as the
embedding, as transformers writes it) and ``generation_config.json`` when the token ids are known (the loaded
folder's, or ``bos_token_id`` / ``eos_token_id`` / ``pad_token_id`` from its ``config.json``); the shards and
index of an earlier save into the folder are removed. The architecture is the one the model was loaded as, the
one named, or the first that computes the model's config exactly; a config no architecture can express is refused
naming the field. Each file is written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..config import LMConfig
from ..model import TransformerLM, build_lm
from .errors import PretrainedFormatError
from .files import (
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    INDEX_FILE,
    SHARD_NAME,
    WEIGHTS_FILE,
    write_json,
    write_safetensors,
)
from .load import parameters_on_meta
from .supported import architecture_for, architecture_named

__all__ = ["save_pretrained"]

#: Fields of the loaded ``config.json`` written back unchanged: the token ids, which no modelling code reads.
_CARRIED = ("bos_token_id", "eos_token_id", "pad_token_id")


def _check_parameters(model: TransformerLM, config: LMConfig) -> dict[str, torch.Tensor]:
    """The model's parameters, refused unless they are exactly those ``build_lm(model.config)`` makes (names and
    shapes): a module swapped in or reshaped would not be what ``config.json`` says."""
    with parameters_on_meta():
        reference = dict(build_lm(config).named_parameters())
    params = dict(model.named_parameters())
    if set(params) != set(reference):
        extra, absent = sorted(set(params) - set(reference)), sorted(set(reference) - set(params))
        raise PretrainedFormatError(
            f"save_pretrained: the model's parameters are not those of its config: extra {extra}, absent {absent}"
        )
    for name, param in params.items():
        if param.shape != reference[name].shape:
            raise PretrainedFormatError(
                f"save_pretrained: parameter {name!r} has shape {list(param.shape)}, its config gives "
                f"{list(reference[name].shape)}"
            )
    return {name: param.detach() for name, param in params.items()}


def _remove_previous_shards(folder: Path) -> None:
    """Remove the shards and the index of an earlier save into ``folder`` (as transformers' save_pretrained removes
    the shards it does not write again): the new ``model.safetensors`` holds every tensor."""
    for path in folder.iterdir():
        if path.is_file() and (path.name == INDEX_FILE or SHARD_NAME.fullmatch(path.name)):
            path.unlink()


def save_pretrained(model: TransformerLM, path: str | Path, *, architecture: str | None = None) -> Path:
    """Write ``model`` into the folder ``path`` (created if needed) as a Hugging Face checkpoint: as
    ``architecture`` (a name of :data:`~transformer.lm.pretrained.supported.ARCHITECTURES`), else as the
    architecture it was loaded as, else the first that computes its config exactly. Returns the folder."""
    config = model.config
    if not isinstance(config, LMConfig):
        raise PretrainedFormatError(f"save_pretrained: the model has no LMConfig (model.config={config!r})")
    origin = getattr(model, "pretrained_origin", None)
    if architecture is None and origin is not None:
        architecture = origin.architecture
    chosen = (
        architecture_for(config)
        if architecture is None
        else architecture_named(architecture, "save_pretrained: argument architecture")
    )
    fields = chosen.writable(config)
    params = _check_parameters(model, config)
    dtypes = {p.dtype for p in params.values()}
    carried = origin.config if origin is not None and origin.architecture == chosen.name else {}
    config_json: dict[str, Any] = {
        "architectures": [chosen.name],
        **fields,
        **{k: carried[k] for k in _CARRIED if k in carried},
    }
    if len(dtypes) == 1:
        config_json["dtype"] = str(dtypes.pop()).removeprefix("torch.")
    shapes = {n: tuple(p.shape) for n, p in params.items()}
    maps = chosen.expand_maps(chosen.tensor_maps(list(params), model.config), shapes)
    tensors = {m.theirs: m.to_theirs(tuple(params[n] for n in m.ours)) for m in maps}
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / WEIGHTS_FILE, tensors)
    _remove_previous_shards(folder)
    write_json(folder / CONFIG_FILE, config_json)
    generation = origin.generation_config if origin is not None and carried else None
    if generation is None and any(k in config_json for k in _CARRIED[:2]):  # a start or an end id to generate with
        generation = {k: config_json[k] for k in _CARRIED if k in config_json}
    if generation is not None:
        write_json(folder / GENERATION_CONFIG_FILE, generation)
    return folder
