"""A LoRA adapter trained with PEFT on our :class:`~transformer.lm.model.TransformerLM` (Hu et al. 2021, "LoRA:
Low-Rank Adaptation of Large Language Models"), written for transformers' model of the same folder.

PEFT's ``save_pretrained`` of an adapter names each low-rank factor after the module it adapts, in our module
tree (``base_model.model.layers.0.self_attn.q_proj.lora_A.weight``); transformers' model has its own
(``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight``). :func:`save_adapter_for_transformers` renames
every tensor of ``adapter_model.safetensors`` by the architecture's own map of our parameter names
(:mod:`~transformer.lm.pretrained.tensor_map`) and copies ``adapter_config.json`` with ``target_modules`` kept (their
modules have the same last names in the Llama family); ``peft.PeftModel.from_pretrained(AutoModelForCausalLM...,
out_dir)`` then loads it onto transformers' model, computing the logits ours computes with the adapter. Only a
module stored as one tensor of the same layout (``"same"``) can carry its factors over: a fused or transposed one
(GPT-2's ``c_attn``, Phi-3's ``qkv_proj``) is refused naming it. No peft import: JSON and safetensors only.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import PretrainedFormatError
from .files import read_json, write_json, write_safetensors
from .supported import architecture_named

__all__ = ["save_adapter_for_transformers", "ADAPTER_WEIGHTS", "ADAPTER_CONFIG"]

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
#: PEFT's prefix of every adapter tensor: the PeftModel's ``base_model`` (a LoraModel) and its ``model``.
_PREFIX = "base_model.model."
_FACTORS = (".lora_A.", ".lora_B.", ".lora_embedding_A", ".lora_embedding_B", ".lora_magnitude_vector")


def _their_module(architecture, ours: str, source: Path) -> str:
    """Their module path for our adapted module ``ours`` (its weight must map to one tensor of the same layout)."""
    try:
        maps = architecture.tensor_maps([ours + ".weight"])
    except ValueError:  # a tensor fused of several of ours (GPT-2's c_attn) is no map of one
        maps = []
    if len(maps) != 1 or maps[0].layout != "same":
        layout = maps[0].layout if len(maps) == 1 else "fused"
        raise PretrainedFormatError(
            f"{source}: the adapted module {ours!r} is stored by {architecture.name} as "
            f"{architecture.their_name(ours + '.weight')!r} in layout {layout!r}: a LoRA factor of it has no place "
            "in transformers' model (adapt other modules)"
        )
    return maps[0].theirs.removesuffix(".weight")


def save_adapter_for_transformers(adapter_dir: str | Path, out_dir: str | Path, architecture: str) -> Path:
    """Write the PEFT adapter folder ``adapter_dir`` (trained on our model) into ``out_dir`` with transformers'
    tensor names for ``architecture`` (a name of :data:`~transformer.lm.pretrained.supported.ARCHITECTURES`, e.g.
    ``model.pretrained_origin.architecture``); returns ``out_dir``. A tensor PEFT did not name as a LoRA factor, or
    of a module transformers stores otherwise, raises :class:`PretrainedFormatError` naming it."""
    from safetensors.torch import load_file

    source = Path(adapter_dir)
    chosen = architecture_named(architecture, "save_adapter_for_transformers: argument architecture")
    config = read_json(source / ADAPTER_CONFIG)
    weights = source / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise PretrainedFormatError(f"{weights}: no such file (PEFT's save_pretrained writes the adapter's weights)")
    tensors = {}
    for name, tensor in load_file(str(weights)).items():
        factor = next((f for f in _FACTORS if f in name), None)
        if not name.startswith(_PREFIX) or factor is None:
            raise PretrainedFormatError(f"{weights}: tensor {name!r} is not a LoRA factor of PEFT's naming")
        module, rest = name[len(_PREFIX) :].split(factor, 1)
        tensors[_PREFIX + _their_module(chosen, module, weights) + factor + rest] = tensor
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / ADAPTER_WEIGHTS, tensors)
    config = {k: v for k, v in config.items() if k != "auto_mapping"}  # ours: a PEFT model of TransformerLM
    write_json(folder / ADAPTER_CONFIG, json.loads(json.dumps(config)))
    return folder
