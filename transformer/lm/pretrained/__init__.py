"""Hugging Face checkpoint folders in and out: ``config.json`` plus ``model.safetensors`` (or its shards), read
without transformers, checked tensor by tensor, and written so that transformers reads them back.

* :mod:`~transformer.lm.pretrained.errors`: :class:`PretrainedFormatError`, the one error, naming file and field.
* :mod:`~transformer.lm.pretrained.files`: the folder's JSON and safetensors files, read lazily, written atomically.
* :mod:`~transformer.lm.pretrained.config_fields`: a ``config.json``'s fields, type-checked, refused by name.
* :mod:`~transformer.lm.pretrained.rope`: the rotary embedding's parameters as LMConfig's ``rope_*`` fields.
* :mod:`~transformer.lm.pretrained.tensor_map`: one tensor of theirs as parameters of ours (transposes, fusions).
* :mod:`~transformer.lm.pretrained.architectures`: what an architecture is; :mod:`~transformer.lm.pretrained.gpt2`,
  :mod:`~transformer.lm.pretrained.llama`, :mod:`~transformer.lm.pretrained.starcoder2` and
  :mod:`~transformer.lm.pretrained.phi3`, :mod:`~transformer.lm.pretrained.gemma` the supported ones;
  :mod:`~transformer.lm.pretrained.supported` their registry.
* :mod:`~transformer.lm.pretrained.load` and :mod:`~transformer.lm.pretrained.save`: ``from_pretrained`` and
  ``save_pretrained`` (also :meth:`TransformerLM.from_pretrained` and :meth:`TransformerLM.save_pretrained`).
* :mod:`~transformer.lm.pretrained.tokenizer`: ``tokenizer.json``, special tokens and the ids generation stops at.
* :mod:`~transformer.lm.pretrained.adapters`: a PEFT LoRA adapter of our model renamed for transformers' model.

A ``train lm`` checkpoint becomes such a folder with ``typed-transformer export`` (:mod:`transformer.tasks.hf_export`).
"""

from ..model import register_folder_io
from .adapters import save_adapter_for_transformers
from .errors import PretrainedFormatError
from .load import PretrainedOrigin, load_pretrained
from .save import save_pretrained
from .supported import ARCHITECTURES
from .tokenizer import PretrainedTokenizer

register_folder_io(load_pretrained, save_pretrained)  # TransformerLM.from_pretrained and .save_pretrained

__all__ = [
    "load_pretrained",
    "save_pretrained",
    "PretrainedFormatError",
    "PretrainedOrigin",
    "PretrainedTokenizer",
    "ARCHITECTURES",
    "save_adapter_for_transformers",
]
