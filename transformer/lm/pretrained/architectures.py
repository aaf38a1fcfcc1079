"""The architectures a Hugging Face checkpoint folder may hold, and what each is in :class:`LMConfig` terms.

An :class:`Architecture` knows three things of one ``config.json`` class (``architectures[0]`` in the file): how
its fields become an :class:`LMConfig` (every field transformers' modelling code reads is mapped or refused by
name), how an :class:`LMConfig` is written back as such a file, and which tensor of the file is which parameter
of ours (:class:`~transformer.lm.pretrained.tensor_map.TensorMap`, by translating our parameter names). Writing
is checked by reading back: a config that would not come back unchanged (a field the architecture cannot
express, as LayerNorm in a Llama) is refused naming the field. Fields transformers reads in no modelling code
(``use_cache``, ``initializer_range``, token ids...) do not change the function and are not read.

The architectures themselves are in :mod:`~transformer.lm.pretrained.gpt2`, :mod:`~transformer.lm.pretrained.llama`,
:mod:`~transformer.lm.pretrained.starcoder2`, :mod:`~transformer.lm.pretrained.phi3` and
:mod:`~transformer.lm.pretrained.gemma` (and the others :mod:`~transformer.lm.pretrained.supported` imports, OLMo 2's
and OLMoE's among them: :mod:`~transformer.lm.pretrained.olmo2`, :mod:`~transformer.lm.pretrained.olmoe`);
``supported.ARCHITECTURES`` lists them by name.
"""

from __future__ import annotations

import dataclasses
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from ..config import LMConfig
from .config_fields import ConfigFields
from .errors import PretrainedFormatError
from .rope import yarn_attention_factor
from .tensor_map import TensorMap

__all__ = ["Architecture", "ACTIVATIONS", "NEUTRAL_FIELDS", "build_config"]

#: transformers' activation names (``hidden_act``, ``activation_function``) and LMConfig's ``activation``.
ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_new",  # written out: its half-precision rounding is not the fused kernel's
    "gelu_pytorch_tanh": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
}

#: LMConfig fields that do not change the function a checkpoint computes (initialisation, the run-time backend).
NEUTRAL_FIELDS = ("init", "positional_init", "attention_backend")


def build_config(path: Path, **fields: Any) -> LMConfig:
    """``LMConfig(**fields)``; a value LMConfig refuses is reported against ``path``."""
    try:
        return LMConfig(**fields)
    except (TypeError, ValueError) as error:
        raise PretrainedFormatError(f"{path}: describes a model LMConfig refuses: {error}") from None


class Architecture(ABC):
    """One ``architectures`` name of ``config.json``: its fields as an :class:`LMConfig`, and its tensor names."""

    name: ClassVar[str]  #: the class name transformers writes in ``architectures``
    model_type: ClassVar[str]  #: the ``model_type`` transformers writes
    needs: ClassVar[str]  #: what it needs from the blocks (docs/pretrained.md's table)
    #: patterns of tensors old files hold that are buffers recomputed from the config (never weights)
    derived_buffers: ClassVar[tuple[str, ...]] = ()
    #: (our name pattern, their name) in order; the first match translates our parameter name
    names: ClassVar[tuple[tuple[str, str], ...]]
    #: transformers' ``base_model_prefix`` plus a dot: files saved from the base model (``GPT2Model``) lack it
    base_prefix: ClassVar[str]

    @abstractmethod
    def lm_config(self, config: ConfigFields) -> LMConfig:
        """The LMConfig of a ``config.json`` of this architecture."""

    @abstractmethod
    def config_json(self, config: LMConfig) -> dict[str, Any]:
        """The fields of a ``config.json`` that describe ``config`` (its function; token ids are added by save): the
        fields architectures write alike from :mod:`~transformer.lm.pretrained.written_fields`, and its own."""

    def their_name(self, ours: str) -> str:
        """Their tensor name for our parameter ``ours``."""
        for pattern, theirs in self.names:
            if re.fullmatch(pattern, ours):
                return re.sub(pattern, theirs, ours)
        raise PretrainedFormatError(f"{self.name}: our parameter {ours!r} has no tensor in this architecture")

    def tensor_maps(self, our_names: list[str], config: LMConfig | None = None) -> list[TensorMap]:
        """One map per tensor of a file, for our (deduplicated: a tied head is the embedding) parameter names (of a
        model of ``config``: the layouts that split heads need it)."""
        return [TensorMap(self.their_name(name), (name,)) for name in our_names]

    def expand_maps(self, maps: list[TensorMap], shapes: dict[str, tuple[int, ...]]) -> list[TensorMap]:
        """``maps`` once our parameters' ``shapes`` are known: a mixture of experts' stacked parameter becomes one
        map per expert (:mod:`~transformer.lm.pretrained.mixtral`); the others' are ``maps``."""
        return maps

    def maps_for_file(
        self, our_names: list[str], file_names: list[str], config: LMConfig | None = None
    ) -> list[TensorMap]:
        """:meth:`tensor_maps`, without ``base_prefix`` when no tensor of the file has it (as transformers loads a
        base model's file into the causal LM)."""
        maps = self.tensor_maps(our_names, config)
        if any(name.startswith(self.base_prefix) for name in file_names):
            return maps
        return [dataclasses.replace(m, theirs=m.theirs.removeprefix(self.base_prefix)) for m in maps]

    def is_derived_buffer(self, name: str) -> bool:
        """Whether their tensor ``name`` is a buffer an old file holds and the config determines (not a weight)."""
        return any(re.fullmatch(pattern, name) for pattern in self.derived_buffers)

    def writable(self, config: LMConfig) -> dict[str, Any]:
        """:meth:`config_json` of ``config``, checked by reading it back: a field that would come back otherwise is
        refused, naming it."""
        fields = self.config_json(config)
        back = self.lm_config(ConfigFields(fields, Path(f"<{self.name} config.json>")))
        wanted = _normalised(config)
        differ = [
            f"{f.name}={getattr(wanted, f.name)!r} (written as {self.name} it reads back as {getattr(back, f.name)!r})"
            for f in dataclasses.fields(LMConfig)
            if getattr(_normalised(back), f.name) != getattr(wanted, f.name)
        ]
        if differ:
            raise PretrainedFormatError(f"LMConfig cannot be written as {self.name}: " + "; ".join(differ))
        return fields


def _normalised(config: LMConfig) -> LMConfig:
    """``config`` with the fields that do not change the function at their defaults (so they never differ), and
    yarn's cos/sin factor resolved."""
    defaults = {f.name: f.default for f in dataclasses.fields(LMConfig) if f.name in NEUTRAL_FIELDS}
    if config.rope_scaling == "yarn":
        defaults["rope_attention_factor"] = yarn_attention_factor(config)
    return dataclasses.replace(config, **defaults)
