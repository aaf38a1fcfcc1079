"""The supported architectures, by the name ``config.json``'s ``architectures`` gives them: finding a folder's, and
choosing one to write a model as."""

from __future__ import annotations

from ..config import LMConfig
from .architectures import Architecture
from .config_fields import ConfigFields
from .errors import PretrainedFormatError
from .gemma import Gemma2, Gemma3
from .gpt2 import GPT2
from .gpt_neox import GPTNeoX
from .gpt_oss import GptOss
from .granite import Granite
from .llama import Llama, Mistral, Qwen2, Qwen3
from .mixtral import Mixtral
from .olmo2 import Olmo2
from .olmoe import Olmoe
from .phi3 import Phi3
from .qwen_moe import Qwen2Moe, Qwen3Moe
from .smollm3 import SmolLM3
from .starcoder2 import Starcoder2

__all__ = ["ARCHITECTURES", "architecture_named", "architecture_of", "architecture_for"]

#: Every supported architecture by its ``architectures`` name, in the order :func:`architecture_for` tries them.
ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Llama(),
        Qwen2(),
        Qwen3(),
        Mistral(),
        GPT2(),
        Starcoder2(),
        Phi3(),
        Gemma2(),
        Gemma3(),
        GPTNeoX(),
        SmolLM3(),
        Mixtral(),
        Qwen2Moe(),
        Qwen3Moe(),
        Granite(),
        Olmo2(),
        Olmoe(),
        GptOss(),
    )
}

#: Architectures refused by name, with the reason (and what to load instead).
REFUSED: dict[str, str] = {
    "Gemma3ForConditionalGeneration": (
        "the multimodal Gemma 3 (a vision tower and its projector around the text model) is not implemented; its "
        "text model alone is Gemma3ForCausalLM (a folder of that architecture, as the 1B model's)"
    ),
}


def architecture_named(name: str, where: str) -> Architecture:
    """The architecture called ``name``; another name is refused, listing the supported ones."""
    if isinstance(name, str) and name in REFUSED:
        raise PretrainedFormatError(f"{where}: architecture {name!r} is not supported: {REFUSED[name]}")
    try:
        return ARCHITECTURES[name]
    except (KeyError, TypeError):
        raise PretrainedFormatError(
            f"{where}: architecture {name!r} is not supported; the supported architectures are {sorted(ARCHITECTURES)}"
        ) from None


def architecture_of(config: ConfigFields) -> Architecture:
    """The architecture a ``config.json`` names in ``architectures`` (transformers builds the first); a file
    without the field is refused, as transformers' ``AutoModelForCausalLM`` would have to guess."""
    names = config.values.get("architectures")
    if not isinstance(names, list) or not names:
        raise PretrainedFormatError(
            f"{config.path}: field 'architectures' must be a non-empty list of class names (got {names!r}); "
            f"the supported architectures are {sorted(ARCHITECTURES)}"
        )
    return architecture_named(names[0], f"{config.path}: field architectures[0]")


def architecture_for(config: LMConfig) -> Architecture:
    """The first architecture that writes ``config`` exactly; refused, with each one's reason, when none does."""
    reasons = []
    for architecture in ARCHITECTURES.values():
        try:
            architecture.writable(config)
            return architecture
        except PretrainedFormatError as error:
            reasons.append(str(error))
    raise PretrainedFormatError("no supported architecture computes this LMConfig: " + " | ".join(reasons))
